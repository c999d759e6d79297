"""Eager modes: how tpu ops execute. See docs/modes.md.

- ``debug``: every op runs synchronously (``TORCHTPU_CHECK_NANS=1`` also checks outputs for NaN/Inf);
- ``strict`` (default): each op runs as its own cached program, asynchronously;
- ``fused``: ops are deferred and cut into windows that run as one XLA program each;
- ``lazy``: PyTorch/XLA semantics, nothing runs until :func:`sync` (or the host reads data).

Select with ``TORCHTPU_EAGER_MODE``, :func:`set_eager_mode` or ``with eager_mode(name):``;
``TORCHTPU_LAUNCH_BLOCKING=1`` means debug.
"""

import contextlib
import functools

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import _C, patches

MODES = ("debug", "strict", "fused", "lazy")


def get_eager_mode() -> str:
    return _C._eager_mode()


def set_eager_mode(name: str) -> None:
    """Switches the mode; ops still pending from the previous mode run first."""
    _C._set_eager_mode(name)
    if name == "fused":
        patches.install("fused")


@contextlib.contextmanager
def eager_mode(name: str):
    previous = get_eager_mode()
    set_eager_mode(name)
    try:
        yield
    finally:
        set_eager_mode(previous)


@contextlib.contextmanager
def padding(enabled: bool):
    """Eager mode's bounded dynamism (docs/modes.md, "Shapes that change") on or off for the ops
    this thread runs inside the block; ``TORCHTPU_BUCKETS`` sets it for the process. Off, every
    op runs at its exact sizes: code that pads to buckets of its own (vLLM's batches,
    torchtpu/vllm) then runs the programs it warmed up, whatever sizes eager mode saw vary."""
    previous = _C._set_thread_padding(bool(enabled))
    try:
        yield
    finally:
        _C._set_thread_padding(previous)


def sync() -> None:
    """Runs every pending op (fused, lazy) without waiting for it to finish."""
    _C._flush("sync")


mark_step = sync  # the PyTorch/XLA name


@contextlib.contextmanager
def one_program():
    """The ops inside run as one program: strict mode records them (lazy mode: a program compiled
    when missing, never op by op) and runs them when the block ends; fused and lazy mode record them
    anyway; debug mode runs and checks each op. For an optimizer step (exec/executor.h,
    set_one_program_block): zero fills of whole tensors (its new states) are uploaded at once, so
    that the first step's program is every later step's, and the program donates the old
    contents of what it updates."""
    strict = _C._eager_mode() == "strict"
    if strict:
        _C._set_eager_mode("lazy")
    _C._set_one_program_block(True)
    try:
        yield
    finally:
        try:
            if strict:
                _C._set_eager_mode("strict")  # runs the recorded ops
        finally:
            _C._set_one_program_block(False)


def optimizer_step(optimizer, **kwargs):
    """``optimizer.step(**kwargs)`` then :func:`sync`, as ``torch_xla``'s ``xm.optimizer_step``."""
    loss = optimizer.step(**kwargs)
    sync()
    return loss


# Fused mode cuts a training step into three windows at points every iteration reaches in the same
# order: the backward pass begins, the optimizer step begins, the optimizer step ends. Every
# iteration then produces the same windows, which hit the compile cache, and each window runs
# while the host records the next one (one window per step leaves the device idle while the host
# records, and the host idle while the step runs: docs/benchmarks.md, "Fused mode's windows").
# A compiled step has no pending ops to cut, and Dynamo must not see the call (it would break the
# graph there).
def _cut(reason):
    if not torch.compiler.is_compiling() and _C._eager_mode() == "fused":
        _C._flush(reason)


def cut_before_backward(fn):
    """``fn`` (torch.autograd.backward or grad; PyTorch has no global hook for a backward pass)
    cutting the fused window first. Installed by patches.py when fused mode is first used."""
    @functools.wraps(fn)
    def cut_then_call(*args, **kwargs):
        _cut("backward")
        return fn(*args, **kwargs)
    return cut_then_call


_optimizer_cuts = []


def register_optimizer_cuts() -> None:
    """The cuts around every optimizer step (global optimizer hooks), once."""
    if not _optimizer_cuts:
        _optimizer_cuts.append(register_optimizer_step_pre_hook(lambda opt, args, kwargs: _cut("optimizer step start")))
        _optimizer_cuts.append(register_optimizer_step_post_hook(lambda opt, args, kwargs: _cut("optimizer step")))
