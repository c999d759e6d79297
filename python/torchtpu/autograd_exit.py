"""Exit after a backward pass without an abort: wait, before Python shuts down, until autograd's
tpu threads have let go of their last backward pass.

PyTorch 2.14 keeps a Python object (the caller's ``contextvars`` context) with every backward
pass, and a device's autograd thread may drop its reference to a finished pass a moment after
``backward()`` has returned. When that moment falls after the interpreter began shutting down,
releasing the object cannot take the GIL, the thread is unwound out of a destructor, and the
process aborts ("terminate called without an active exception"). CUDA has the same window; a
short script that ends with ``loss.backward()`` hits it now and then.

At exit each tpu device's autograd thread runs one more, empty, backward pass. A thread runs its
passes one after another, so when that one is done the previous one was let go. The empty pass
is started below PyTorch's ``backward()`` and returns nothing, so that it carries no Python object
itself, and its tensors take no program to make.
"""

import atexit

import torch

from . import _C


class _Empty(torch.autograd.Function):
    """A node on the tpu device whose backward does nothing (and returns no gradient: a returned
    tensor would be one more Python object for the autograd thread to let go of)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return None


_kept = []  # the empty passes' outputs: their graph must not be freed on an autograd thread


@atexit.register
def _let_autograd_threads_finish():
    if not _C._is_initialized():  # no tpu tensor, no backward pass on tpu
        return
    engine = torch.autograd.Variable._execution_engine
    for index in range(_C._device_count()):
        x = torch.empty(0, device=f"tpu:{index}", requires_grad=True)
        y = _Empty.apply(x)
        _kept.append(y)
        engine.run_backward((y,), (torch.empty(0, device=x.device),), False, False, (), True, True)
