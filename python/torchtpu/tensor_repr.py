"""Printing a tpu tensor copies it to the host once and formats it there.

PyTorch formats a tensor with tensor ops (abs, max, masked_select, slicing) on its device; on tpu
each of those is an XLA program, compiled for every new shape, so a first ``print(tensor)`` took
seconds. PyTorch does the same host copy for its own XLA and lazy devices.

While Dynamo compiles a frame, the reprs it asks for (each parameter or optimizer state it guards on
by identity is formatted into the guard's description) show ``...`` for the values, as meta tensors
do: a host copy there waits for every pending program that writes the tensor (a whole backward
pass, for an optimizer step's gradients) and cost ~0.3 s of a GPT training step's compile."""

import sys


def _dynamo_is_compiling_a_frame() -> bool:
    guards = sys.modules.get("torch._guards")
    return guards is not None and guards.CompileContext.try_get() is not None


def formatting_on_host(format_contents):
    """``torch._tensor_str._tensor_str`` formatting tpu tensors on the host (installed by
    patches.py)."""
    def _tensor_str(self, indent):
        if self.device.type == "tpu":
            if _dynamo_is_compiling_a_frame():
                return "..."
            self = self.cpu()
        return format_contents(self, indent)
    return _tensor_str
