"""``torch.tpu``: the device module, shaped like ``torch.cuda``."""

import torch

from . import _C


def is_available() -> bool:
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device) -> None:
    _C._set_device(_index(device))


def _index(device) -> int:
    if isinstance(device, torch.device):
        return device.index if device.index is not None else current_device()
    if isinstance(device, str):
        return _index(torch.device(device))
    return int(device)


def synchronize(device=None) -> None:
    """Waits for all work queued on the device; raises the first asynchronous failure."""
    _C._synchronize(_index(device) if device is not None else current_device())


def get_device_name(device=None) -> str:
    info = _C._platform_info()
    return info["device_kinds"][_index(device) if device is not None else current_device()]


def memory_stats(device=None) -> dict:
    return dict(_C._memory_stats(_index(device) if device is not None else current_device()))


class device:
    """Context manager that changes the current tpu device, like ``torch.cuda.device``."""

    def __init__(self, device):
        self.index = _index(device)
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.prev)
        return False
