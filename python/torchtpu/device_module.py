"""``torch.tpu``: the device module, shaped like ``torch.cuda``."""

import contextlib
import threading

import torch

from . import _C, devices, memory
from .devices import current_device, device_count, synchronize  # noqa: F401
from .memory import (  # noqa: F401
    empty_cache, get_per_process_memory_fraction, max_memory_allocated, max_memory_reserved, mem_get_info,
    memory_allocated, memory_reserved, memory_stats, memory_summary, reset_accumulated_memory_stats,
    reset_max_memory_allocated, reset_peak_memory_stats, set_per_process_memory_fraction)
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401


def is_available() -> bool:
    """Whether a usable PJRT plugin is installed. Answered without loading it (as
    ``torch.cuda.is_available()`` does not create a CUDA context); once the runtime has started,
    whether it has devices."""
    return _C._is_available()


def is_initialized() -> bool:
    """Whether the PJRT client is up: the first tensor, ``device_count()`` or ``set_device()``
    starts it."""
    return _C._is_initialized()


def __getattr__(name):
    # torch.cuda._initialized is a module flag that PyTorch reads with getattr: activation
    # checkpointing saves and restores a device's RNG state only when it is true, so without it a
    # recomputed dropout draws a new mask.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")


def init() -> None:
    """Starts the runtime (loads the plugin, creates the PJRT client) now rather than at the first
    tensor, as ``torch.cuda.init()`` creates the CUDA context; does nothing once it is up."""
    _C._device_count()


def set_device(device) -> None:
    _C._set_device(devices.index(device))


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode) -> None:
    """As ``torch.cuda.set_sync_debug_mode``: "warn" (1) or "error" (2) whenever the host waits for
    the device to read a tensor (``item()``, ``.cpu()``, ``print``, a data-dependent size such as
    ``nonzero``'s), "default" (0) to allow it silently. Explicit waits (``synchronize``,
    ``torchtpu.sync()``) never warn."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of {', '.join(_SYNC_DEBUG_MODES)}")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _C._set_sync_debug_mode(int(debug_mode))


def get_sync_debug_mode() -> int:
    return _C._sync_debug_mode()


def get_device_name(device=None) -> str:
    return _C._platform_info()["device_kinds"][devices.index_or_current(device)]


class _DeviceProperties:
    def __init__(self, index):
        info = _C._platform_info()
        self.name = info["device_kinds"][index]
        self.platform = info["platform"]
        self.index = index
        self.total_memory = _C._memory_size(index)

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_properties(device=None) -> _DeviceProperties:
    return _DeviceProperties(devices.index_or_current(device))


def get_amp_supported_dtype() -> list:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


def manual_seed(seed: int) -> None:
    """Seeds the current tpu device's generator (torch.manual_seed seeds every device)."""
    _C._manual_seed(current_device(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for d in range(device_count()):
        _C._manual_seed(d, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    manual_seed(torch.randint(0, 2**62, (1,)).item())


def seed_all() -> None:
    manual_seed_all(torch.randint(0, 2**62, (1,)).item())


def initial_seed() -> int:
    return _C._initial_seed(current_device())


def get_rng_state(device=None) -> torch.Tensor:
    """The generator state as a CPU uint8 tensor (16 bytes: seed and offset)."""
    seed, offset = _C._get_rng_state(devices.index_or_current(device))
    return torch.tensor([seed, offset], dtype=torch.uint64).view(torch.uint8)


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    seed, offset = new_state.view(torch.uint64).tolist()
    _C._set_rng_state(devices.index_or_current(device), seed, offset)


def get_rng_state_all() -> list:
    return [get_rng_state(d) for d in range(device_count())]


def set_rng_state_all(states) -> None:
    for d, state in enumerate(states):
        set_rng_state(state, d)


def _is_in_bad_fork() -> bool:
    return False


class device:
    """Context manager that changes the current tpu device, like ``torch.cuda.device``."""

    def __init__(self, device):
        self.index = devices.index(device)
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.prev)
        return False


class device_of(device):
    """The device of a tensor as the current device inside the block (a CPU tensor changes
    nothing), like ``torch.cuda.device_of``."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else current_device())


OutOfMemoryError = torch.OutOfMemoryError


def is_current_stream_capturing() -> bool:
    """No graph capture on tpu (fused mode and torch.compile build the programs)."""
    return False


_precision = threading.local()


@contextlib.contextmanager
def precision(name: str):
    """The float32 precision of matmuls and convolutions inside the block, on this thread:
    ``"highest"`` (full float32, PyTorch's default), ``"high"`` (TF32 on GPUs, three bf16 passes on
    TPUs) or ``"default"`` (the platform's fastest). Outside any block,
    ``torch.set_float32_matmul_precision`` decides ("medium" meaning "default"). Eager ops and
    compiled graphs both follow it; it is part of their compile-cache keys."""
    previous = getattr(_precision, "name", None)
    _C._set_precision_override(name)
    _precision.name = name
    try:
        yield
    finally:
        _C._set_precision_override(previous)
        _precision.name = previous
