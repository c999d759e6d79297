"""No leaks: once tensors die, torch.tpu.memory_allocated() is back where it was, in every mode,
after errors (raised at an op, on the device, by user code with fused ops pending), after compiled
training steps; and a long training loop keeps device memory, host memory (RSS and malloc's count)
and Python objects flat.

Baselines are taken after one warm-up run of the same code: compiles, the RNG state and cached
scalars legitimately allocate once. Comparisons are to baselines, never to absolute numbers, so
they hold whether a storage counts from its allocation or from its first write."""

import ctypes
import gc
import itertools
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu

MODES = ["debug", "strict", "fused", "lazy"]


def _settled_bytes():
    """Bytes held by tpu storages once dead tensors are collected and nothing is pending."""
    gc.collect()  # autograd graphs and tracebacks can hold tensors in reference cycles
    torchtpu.sync()  # fused and lazy modes: run (or drop) what is recorded
    torch.tpu.synchronize()
    return torch.tpu.memory_allocated()


def _leaked(run, repeats=3):
    """Bytes left behind after each of `repeats` runs of `run`, against a baseline taken after a
    warm-up run; all zeros when nothing leaks."""
    run()
    baseline = _settled_bytes()
    leaked = []
    for _ in range(repeats):
        run()
        leaked.append(_settled_bytes() - baseline)
    return leaked


def _mlp(width=16):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(), torch.nn.Linear(width, 2))
    return model.to("tpu")


def _forward_backward():
    """A forward and backward pass with views, in-place and out= ops and a host read; returns the
    bytes held while its tensors are alive."""
    model = _mlp()
    x = torch.randn(4, 8, device="tpu")
    loss = model(x).square().mean()
    loss.backward()
    x.t()[1:3].mul_(2)
    out = torch.empty(0, device="tpu")
    torch.add(x, 1, out=out)
    assert torch.isfinite(loss).item()
    return _settled_bytes()


@pytest.mark.parametrize("mode", MODES)
def test_memory_returns_to_baseline_when_tensors_die(mode):
    with torchtpu.eager_mode(mode):
        baseline = _settled_bytes()
        # the accounting sees these tensors at all, or a zero below would prove nothing
        assert _forward_backward() > baseline
        assert _leaked(_forward_backward) == [0, 0, 0]


class _UserError(Exception):
    pass


def _raise_user_error(h):
    raise _UserError("raised by user code while tpu ops are pending")


# What fails, and how: at the op (meta kernels check shapes), on the device (an index check found
# at the next host read), in user code, and an op that cannot run (no lowering, no CPU fallback).
ERRORS = {
    "shape mismatch": (lambda h: h @ torch.ones(3, 5, device="tpu"), RuntimeError),
    "index out of range": (lambda h: h[torch.tensor([0, 4], device="tpu")].sum().cpu(), IndexError),
    "user exception": (_raise_user_error, _UserError),
    "op that fails": (lambda h: torch.ops.torchtpu_test.cpu_only(h), NotImplementedError),  # CPU-only (conftest.py)
}


def _activations(device):
    """Four tanh layers whose activations autograd saves for backward."""
    w = torch.full((16, 16), 0.05, device=device, requires_grad=True)
    h = torch.linspace(-1, 1, 64, device=device).reshape(4, 16)
    for _ in range(4):
        h = (h @ w).tanh()
    return h


def _step_that_fails(acc, error):
    fail, exception = ERRORS[error]
    h = _activations("tpu")
    acc.add_(h.detach())  # a pending write into a tensor that outlives the error
    with pytest.raises(exception):  # the traceback, which holds h, dies with this frame
        fail(h)


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("mode", MODES)
def test_an_error_in_the_middle_of_a_computation_leaks_nothing(mode, error, monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")  # the CPU-only op raises instead of running on the CPU
    acc = torch.zeros(4, 16, device="tpu")
    with torchtpu.eager_mode(mode):
        assert _leaked(lambda: _step_that_fails(acc, error)) == [0, 0, 0]
        # what was issued before each error still ran: the warm-up and 3 runs each added once
        torch.testing.assert_close(acc.cpu(), 4 * _activations("cpu").detach())


@pytest.mark.parametrize("error", ["user exception", "op that fails"])
def test_a_fused_window_cut_by_an_error_runs_its_ops_and_frees_them(error, monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    acc = torch.zeros(4, 16, device="tpu")
    with torchtpu.eager_mode("fused"):
        _step_that_fails(acc, error)  # warm-up: the window compiles
        torchtpu.cache.wait_for_background_compiles()
        baseline = _settled_bytes()
        executions = torchtpu.metrics.counters()["executions"]
        _step_that_fails(acc, error)
        # the error hit while the window was still recorded, not run
        assert torchtpu.metrics.counters()["executions"] == executions
        assert _settled_bytes() == baseline
        assert torchtpu.metrics.counters()["executions"] > executions  # it ran at the sync
    torch.testing.assert_close(acc.cpu(), 2 * _activations("cpu").detach())


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _compiled_training():
    """A model, AdamW and a compiled step, trained a few steps, then all dropped (without resetting
    Dynamo: its caches must not pin the model's or the optimizer's tensors)."""
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = torch.compile(_train_step, backend="tpu")
    x, y = torch.randn(4, 8, device="tpu"), torch.randn(4, 2, device="tpu")
    held = []
    for _ in range(4):
        step(model, opt, x, y).item()
        held.append(_settled_bytes())
    # Optimizer state exists from the first step. What may grow is the recent-scalar cache
    # (aten/scalar_cache.cpp): AdamW's two bias corrections are new values every step (8 bytes
    # each, unless an earlier run cached them); the comparison to the baseline below is exact.
    assert all(0 <= b - a <= 16 for a, b in zip(held, held[1:])), held


def test_compiled_training_steps_give_their_memory_back():
    torch._dynamo.reset()  # Dynamo's recompile limit is shared with other tests' functions
    assert _leaked(_compiled_training, repeats=1) == [0]


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


_libc = ctypes.CDLL(None)  # glibc >= 2.33, as on every Linux this project builds on
_libc.mallinfo2.restype = _Mallinfo2


def _heap():
    """Bytes malloc has handed out and not got back (glibc, every arena). RSS alone misses a leak
    that reuses memory already freed, which a process that imported torch has plenty of."""
    info = _libc.mallinfo2()
    return info.uordblks + info.hblkhd


def _sample():
    """Device bytes, host RSS, malloc'd bytes and Python memory blocks, at one point of a step."""
    return _settled_bytes(), _rss(), _heap(), sys.getallocatedblocks()


_runs = itertools.count(1)

# Scalars travel to programs as device buffers, the 128 most recently used values' kept
# (aten/scalar_cache.cpp), and the output-metadata cache keys Scalar lists by their elements'
# kinds, not values (aten/boxed_kernel.cpp meta_key). A new value every step, as Adam's
# lr / bias_correction, must not accumulate in either (it did: ~43 KB a step for 40 parameters).
@pytest.mark.parametrize("scalars", ["same value", "new Scalar", "new Scalar list"])
def test_a_new_scalar_value_every_step_keeps_memory_flat(scalars):
    xs = [torch.zeros(4, device="tpu") for _ in range(2)]
    first = 1 + 1e-3 * next(_runs)  # values no earlier test passed
    samples = []
    for step in range(1, 501):
        value = 1.5 if scalars == "same value" else first + 1e-9 * step
        if scalars == "new Scalar":
            xs[0].add_(value)
        else:
            torch._foreach_add_(xs, [value, value])
        if step % 100 == 0 and step >= 200:  # the recent-scalar cache is full by step 128
            samples.append(_sample())
    held, _, _, blocks = zip(*samples)
    grown = {"device bytes": held[-1] - held[0], "Python blocks": blocks[-1] - blocks[0]}
    assert grown["device bytes"] == 0 and grown["Python blocks"] < 300, grown  # < 1 per step


def _fresh_adam(params):
    """Adam whose per-step Scalars (lr / bias_correction1, bias_correction2 ** 0.5) are new values,
    as in a fresh process: an lr and a beta2 no earlier test used."""
    run = next(_runs)
    return torch.optim.Adam(params, lr=1e-3 * (1 + 1e-6 * run), betas=(0.9, 0.999 - 1e-7 * run))


OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": _fresh_adam,
}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_thousand_training_steps_keep_memory_flat(mode, optimizer):
    model = _mlp(32)
    opt = OPTIMIZERS[optimizer](model.parameters())
    x, y = torch.randn(8, 8, device="tpu"), torch.randn(8, 2, device="tpu")
    samples = []
    with torchtpu.eager_mode(mode):
        for step in range(1, 1001):
            _train_step(model, opt, x, y)
            if step == 3:  # fused: the step's window compiles in the background; loading it moves RSS
                torchtpu.cache.wait_for_background_compiles()
            if step % 100 == 0:  # from step 100 compiles, caches and optimizer state are done
                samples.append(_sample())
    held, rss, heap, blocks = zip(*samples)
    assert list(held) == [held[0]] * len(held), held
    # a leak of a few KB per step adds MBs over these 900 steps
    assert rss[-1] - rss[0] < 3 * 2**20, [r // 1024 for r in rss]
    assert heap[-1] - heap[0] < 2 * 2**20, [h // 1024 for h in heap]  # strict's swings up to ~1 MB
    # Python objects: fewer than one new block per step (the interpreter's own warm-up adds ~300)
    assert blocks[-1] - blocks[0] < 900, blocks
