"""Printing a tpu tensor copies it to the host once and formats it there.

PyTorch formats a tensor with tensor ops (abs, max, masked_select, slicing) on its device; on tpu
each of those is an XLA program, compiled for every new shape, so a first ``print(tensor)`` took
seconds. PyTorch does the same host copy for its own XLA and lazy devices."""

import torch._tensor_str as tensor_str

_format_contents = tensor_str._tensor_str


def _format_on_host(self, indent):
    if self.device.type == "tpu":
        self = self.cpu()
    return _format_contents(self, indent)


def register() -> None:
    tensor_str._tensor_str = _format_on_host
