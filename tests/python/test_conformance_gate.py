"""A regression gate over PyTorch's OpInfo samples: ops that fully pass today must keep passing.

The op list (conformance_gate.txt beside this file) is a fast subset of the ops that pass every
float32 sample and gradient check with no CPU fallback in docs/conformance.md. Regenerate both with
the command in that file.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

GATE = os.path.join(os.path.dirname(__file__), "conformance_gate.txt")


def gate_ops():
    with open(GATE) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_gated_ops_pass_every_opinfo_sample(tmp_path):
    ops = gate_ops()
    assert len(ops) >= 50
    out = tmp_path / "gate.json"
    subprocess.run([sys.executable, "-m", "torchtpu.testing.opinfo", "--json", str(out),
                    "--dtypes", "float32", "--jobs", "2", "--ops", *ops],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = json.load(open(out))["ops"]
    regressions = {name: r for name, r in results.items()
                   if r["samples"] == 0 or r["passed"] != r["samples"] or r["grad_failed"]
                   or r["fallback_ops"]}
    assert set(results) == set(ops)
    assert regressions == {}


# Ops of a transformer's training step, one per kind of padding rule: element-wise, reductions
# (zero-filled, extremes, counted means, indices along a dim), row-wise (softmax, layer norm),
# contractions, losses (padded targets ignored), positional ops, indexing and concatenation.
PADDED_GATE = ["add", "where", "nn.functional.gelu", "sum", "mean", "amax", "argmax", "log_softmax",
               "nn.functional.layer_norm", "matmul", "nn.functional.cross_entropy", "triu", "cumsum",
               "gather", "cat", "nn.functional.embedding", "nn.functional.scaled_dot_product_attention"]


@pytest.mark.skipif(os.environ.get("TORCHTPU_BUCKETS") in ("off", "0"), reason="padding turned off for this run")
def test_ops_with_padding_rules_pass_every_sample_stored_padded(tmp_path):
    """The OpInfo samples with their tensors stored padded (`--padded`), as eager mode stores
    tensors whose sizes vary: each op must match CPU, forward and gradient, and must have run padded
    (a sample that read its inputs at exact sizes would test nothing about the rules)."""
    out = tmp_path / "padded.json"
    subprocess.run([sys.executable, "-m", "torchtpu.testing.opinfo", "--json", str(out), "--padded",
                    "--dtypes", "float32", "--jobs", "2", "--ops", *PADDED_GATE],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.load(open(out))
    results = report["ops"]
    assert set(results) == set(PADDED_GATE)
    wrong = {name: r["first_failure"] for name, r in results.items()
             if r["samples"] == 0 or r["passed"] + r["rounding"] != r["samples"] or r["grad_failed"]}
    assert wrong == {}
    assert {name for name, r in results.items() if r["ran_padded"] == 0} == set()
    assert 0 < report["padded"]["with_rule"] < report["padded"]["lowered_ops"]


def test_strides_flag_fails_results_laid_out_unlike_cpu(tmp_path):
    """`--strides` also compares layouts: lstsq's solution is row-major on tpu, column-major on CPU
    (values equal: the harness compares values first, and test_lowerings checks lstsq's), svd's
    factors are laid out as CPU's."""
    out = tmp_path / "strides.json"
    subprocess.run([sys.executable, "-m", "torchtpu.testing.opinfo", "--json", str(out), "--dtypes", "float32",
                    "--no-grad", "--strides", "--ops", "linalg.lstsq", "linalg.svd"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with_strides = json.load(open(out))["ops"]
    assert with_strides["linalg.svd"]["samples"] > 0
    assert with_strides["linalg.svd"]["passed"] == with_strides["linalg.svd"]["samples"]
    lstsq = with_strides["linalg.lstsq"]
    assert lstsq["failed"] > 0 and "strides" in lstsq["first_failure"]


def test_a_mismatch_is_rounding_only_when_tpu_is_about_as_close_to_float64_as_cpu():
    """The harness's verdict on a sample that failed against CPU (torchtpu.testing.opinfo): it is
    rounding only if tpu's largest error against the float64 result is at most twice CPU's, or tpu
    is within float32's tolerance of that result; wrong values, a lost NaN and a different index
    stay failures."""
    import torch
    from torchtpu.testing.opinfo import _against_exact

    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) + 1e-9
    cpu = exact.float() + torch.tensor([3e-5, 0, 0])
    assert _against_exact(exact.float() + torch.tensor([0, 5e-5, 0]), cpu, exact)[0]  # 1.7x CPU's
    assert _against_exact(exact.float(), cpu + 1, exact)[0]  # CPU is the side that is off
    rounding, how = _against_exact(exact.float() + torch.tensor([0, 0, 1e-3]), cpu, exact)
    assert not rounding and "tpu 0.001 vs CPU's 3e-05" in how
    nan = torch.tensor([float("nan"), 2.0, 3.0])
    assert not _against_exact(nan, cpu, exact)[0]
    index = torch.tensor([0, 1])
    assert not _against_exact((cpu, index + 1), (cpu + 1e-6, index), (exact, index))[0]
    assert _against_exact((exact.float(), index), (cpu, index), (exact, index))[0]
    assert _against_exact(torch.tensor([1, 2]), torch.tensor([1, 3]), torch.tensor([1, 2])) == (False, None)
    assert _against_exact(cpu.clone(), cpu, exact) == (False, None)  # equal values: not a rounding question
    # CPU's NaN where the exact result is finite is CPU's error; tpu's is not
    assert _against_exact(exact.float(), torch.tensor([float("nan"), 2.0, 3.0]), exact)[0]
    assert not _against_exact(torch.tensor([float("inf"), 2.0, 3.0]), torch.tensor([float("nan"), 2.0, 3.0]), exact)[0]
    # a float16 result beyond 65504 is an infinity: tpu's inf there is right, CPU's NaN is not
    big = torch.tensor([9e4, 1.0], dtype=torch.float64)
    assert _against_exact(big.half(), torch.tensor([float("nan"), 1.0], dtype=torch.half), big)[0]


def test_precision_report_names_ops_where_cpu_is_nearer(capsys):
    """python -m torchtpu.testing.precision: the element-by-element comparison of bfloat16/float16
    results with float64. Scalar products and quotients, leaky_relu and softmax are never the
    farther side; matmul only where float32 summation order decides (below)."""
    from torchtpu.testing.precision import main

    assert main(["--elements", "300", "--all"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| op | dtype | elements differing | tpu nearer float64 | CPU nearer |")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]
    assert len(rows) >= 5  # ops ran and some differ (where tpu is nearer, or summation order)
    for name, dtype, differing, tpu_nearer, cpu_nearer in rows:
        if name in {"mul_scalar", "div_scalar", "leaky_relu", "softmax"}:
            assert cpu_nearer == "0", (name, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_matmul_is_float32_summation_rounded_once(dtype):
    """The precision report's matmul ([64, 256] @ [256, 128]): every tpu element is the rounding of a
    float32 sum of the exact products, that is within float32 summation's error bound of the float64
    product. Which side is nearer float64 where tpu and CPU differ is not a property of tpu: CPU's
    float16 matmul on a host without native float16 (no AVX512-FP16, where oneDNN declines it) sums
    in float32 in another order than XLA's dot, and where that order decides a rounding either side
    is nearer (CPU on 10 of 8,192 elements, tpu on 8, in PyTorch 2.11 as in 2.14); elsewhere the
    two were bit-identical. A float16 rounding before the end (of an operand or a partial sum)
    would be far outside the bound."""
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(64, 256, generator=g, dtype=torch.float64) * 2).to(dtype)
    w = (torch.randn(256, 128, generator=g, dtype=torch.float64) / 16).to(dtype)
    got = (a.to("tpu") @ w.to("tpu")).cpu()
    exact = a.double() @ w.double()
    # any order of 256 float32 additions of exact products: |error| <= 255 u / (1 - 255 u) sum |a_k w_k|
    u = 2.0 ** -24
    bound = 255 * u / (1 - 255 * u) * (a.double().abs() @ w.double().abs())
    # rounding is monotonic: the roundings of values within the bound lie between these two
    low, high = (exact - bound).to(dtype), (exact + bound).to(dtype)
    assert ((low <= got) & (got <= high)).all()
    assert (got == exact.to(dtype)).float().mean() > 0.99  # correctly rounded but for near-ties
