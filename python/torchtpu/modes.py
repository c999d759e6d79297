"""Eager modes: how tpu ops execute. See docs/modes.md.

- ``debug``: every op runs synchronously (``TORCHTPU_CHECK_NANS=1`` also checks outputs for NaN/Inf);
- ``strict`` (default): each op runs as its own cached program, asynchronously;
- ``fused``: ops are deferred and cut into windows that run as one XLA program each;
- ``lazy``: PyTorch/XLA semantics, nothing runs until :func:`sync` (or the host reads data).

Select with ``TORCHTPU_EAGER_MODE``, :func:`set_eager_mode` or ``with eager_mode(name):``;
``TORCHTPU_LAUNCH_BLOCKING=1`` means debug.
"""

import contextlib

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C

MODES = ("debug", "strict", "fused", "lazy")


def get_eager_mode() -> str:
    return _C._eager_mode()


def set_eager_mode(name: str) -> None:
    """Switches the mode; ops still pending from the previous mode run first."""
    _C._set_eager_mode(name)


@contextlib.contextmanager
def eager_mode(name: str):
    previous = get_eager_mode()
    set_eager_mode(name)
    try:
        yield
    finally:
        set_eager_mode(previous)


def sync() -> None:
    """Runs every pending op (fused, lazy) without waiting for it to finish."""
    _C._flush("sync")


mark_step = sync  # the PyTorch/XLA name


def optimizer_step(optimizer, **kwargs):
    """``optimizer.step(**kwargs)`` then :func:`sync`, as ``torch_xla``'s ``xm.optimizer_step``."""
    loss = optimizer.step(**kwargs)
    sync()
    return loss


def _cut_after_optimizer_step(optimizer, args, kwargs):
    # In fused mode a training step ends at the optimizer step: cutting there makes every
    # iteration produce the same windows, so they hit the compile cache. A compiled step has no
    # pending ops to cut (and Dynamo must not see the call: it would break the graph there).
    if torch.compiler.is_compiling():
        return
    if _C._eager_mode() == "fused":
        _C._flush("optimizer step")


register_optimizer_step_post_hook(_cut_after_optimizer_step)
