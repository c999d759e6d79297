"""Differential fuzzing (issue 16, item 5): random short programs over lowered ops — views, in-place
and out= writes, broadcasting, 0-size dimensions, mixed dtypes, reductions, matmul, indexing — give
on tpu, in every eager mode, what they give on CPU PyTorch: the same tensors (exact for integers and
bools), or an exception of the same class. Nothing may fall back to the CPU. The programs are drawn
by fuzz_programs.py.

CI runs a bounded, derandomized sample (600 programs, about 45 s). A long run
(TORCHTPU_FUZZ_SEED=<n> draws other programs than CI's):

    TORCHTPU_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/python/test_fuzz.py
"""

import contextlib
import os

import torch
from hypothesis import HealthCheck, given, seed, settings

import torchtpu
from fuzz_programs import programs, run_program

EXAMPLES = int(os.environ.get("TORCHTPU_FUZZ_EXAMPLES", "600"))
SEED = os.environ.get("TORCHTPU_FUZZ_SEED")

# Relative to the largest finite magnitude in the tensor: differences in rounding show up against
# the values the program computed with, not against each element (cancellation).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@contextlib.contextmanager
def fallbacks_forbidden():
    """TORCHTPU_FALLBACK=error: an op without a lowering raises instead of passing with CPU's answer."""
    previous = os.environ.get("TORCHTPU_FALLBACK")
    os.environ["TORCHTPU_FALLBACK"] = "error"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TORCHTPU_FALLBACK"]
        else:
            os.environ["TORCHTPU_FALLBACK"] = previous


def settle():
    """Runs what an aborted program left pending, so that its errors do not reach the next run."""
    try:
        torchtpu.sync()
        torch.tpu.synchronize()
    except Exception:  # noqa: BLE001 - the outcome already holds the program's first error
        pass


def tpu_outcomes(program):
    """{run: outcome} for each mode. Fused mode runs twice: the first run goes op by op while the
    window compiles in the background, the second runs the compiled window."""
    outcomes = {}
    with fallbacks_forbidden():
        for mode in ("strict", "debug", "lazy", "fused"):
            with torchtpu.eager_mode(mode):
                outcomes[mode] = run_program(program, "tpu")
                settle()
                if mode == "fused":
                    torchtpu.cache.wait_for_background_compiles()
                    outcomes["fused (compiled window)"] = run_program(program, "tpu")
                    settle()
    return outcomes


def tensor_difference(got, want):
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype} {list(got.shape)} instead of {want.dtype} {list(want.shape)}"
    if not want.is_floating_point():
        return None if torch.equal(got, want) else f"{got} instead of {want}"
    finite = want[want.isfinite()].double().abs()
    scale = max(finite.max().item() if finite.numel() else 0.0, 1.0)
    tol = TOLERANCE[want.dtype]
    try:
        torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol * scale, equal_nan=True)
    except AssertionError:
        return f"{got} instead of {want}"
    return None


def describe(error):
    return "no error" if error is None else f"{type(error).__name__}: {str(error).splitlines()[0]}"


def difference(got, want):
    """How the tpu outcome differs from CPU's, or None."""
    if want.error is not None or got.error is not None:
        if type(got.error) is type(want.error):
            return None
        return f"{describe(got.error)} where CPU raised {describe(want.error)}"
    lines = [f"{name}: {d}" for name, want_t in want.tensors.items()
             if (d := tensor_difference(got.tensors[name], want_t))]
    return "\n".join(lines) or None


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=SEED is None, print_blob=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(program=programs())
def test_programs_give_cpu_results_in_every_mode(program):
    want = run_program(program, "cpu")
    fallbacks = torchtpu.metrics.cpu_fallbacks()
    differences = {run: d for run, got in tpu_outcomes(program).items() if (d := difference(got, want))}
    assert not differences, "\n".join(f"[{run}] {d}" for run, d in differences.items())
    assert torchtpu.metrics.cpu_fallbacks() == fallbacks


if SEED is not None:
    test_programs_give_cpu_results_in_every_mode = seed(int(SEED))(test_programs_give_cpu_results_in_every_mode)
