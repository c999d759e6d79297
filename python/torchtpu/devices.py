"""Which tpu device a call means: the helpers ``torch.tpu`` (device_module.py) and its memory and
stream modules share."""

import torch

from . import _C


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def index(device) -> int:
    """The index of ``device`` (a torch.device, "tpu:1", or an int); a device without an index is
    the current one."""
    if isinstance(device, torch.device):
        return device.index if device.index is not None else current_device()
    if isinstance(device, str):
        return index(torch.device(device))
    return int(device)


def index_or_current(device) -> int:
    return index(device) if device is not None else current_device()


def synchronize(device=None) -> None:
    """Waits for all work queued on the device; raises the first asynchronous failure."""
    _C._synchronize(index_or_current(device), "synchronize")
