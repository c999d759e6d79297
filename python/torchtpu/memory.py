"""Device memory, shaped like ``torch.cuda``'s memory API.

``memory_allocated`` counts the bytes of live tpu storages from their allocation, as CUDA's
allocator does. There is no caching allocator (a storage returns its PJRT buffer when it dies), so
reserved, active and requested bytes equal allocated bytes. ``TORCHTPU_MEMORY_LIMIT`` (bytes such as
``8GB``, or a fraction of the device's memory such as ``0.5``) or
:func:`set_per_process_memory_fraction` bounds what storages may hold on a device, as a TPU's HBM
would: an allocation past it raises ``torch.OutOfMemoryError`` before anything runs."""

import collections
import warnings

from . import _C, devices


def memory_stats(device=None) -> dict:
    """``torch.cuda.memory_stats``'s keys (``allocated_bytes.all.current``, ``num_ooms``, ...), plus
    ``torchtpu.limit_bytes`` when a limit is set and what the PJRT plugin reports (``pjrt.*``)."""
    return collections.OrderedDict(sorted(_C._memory_stats(devices.index_or_current(device)).items()))


def memory_allocated(device=None) -> int:
    return _C._memory_stats(devices.index_or_current(device))["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return _C._memory_stats(devices.index_or_current(device))["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    _C._reset_peak_memory(devices.index_or_current(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    _C._reset_accumulated_memory(devices.index_or_current(device))


def empty_cache() -> None:
    """Runs pending work on every device, so that buffers only a pending program still held are
    released (there is no cache of free blocks to return)."""
    for index in range(devices.device_count()):
        devices.synchronize(index)


def mem_get_info(device=None) -> tuple:
    """``(free, total)`` bytes: under the memory limit where one is set, else of the device."""
    index = devices.index_or_current(device)
    stats = _C._memory_stats(index)
    if "torchtpu.limit_bytes" in stats:
        limit = stats["torchtpu.limit_bytes"]
        return max(limit - stats["allocated_bytes.all.current"], 0), limit
    total = _C._memory_size(index)
    used = stats.get("pjrt.bytes_in_use", stats["allocated_bytes.all.current"])
    return max(total - used, 0), total


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Limits this process's storages on the device to ``fraction`` of its memory, as on CUDA."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = devices.index_or_current(device)
    _C._set_memory_limit(index, int(fraction * _C._memory_size(index)),
                         f"set_per_process_memory_fraction({fraction})")


def get_per_process_memory_fraction(device=None) -> float:
    index = devices.index_or_current(device)
    limit = _C._memory_stats(index).get("torchtpu.limit_bytes")
    return 1.0 if limit is None else limit / _C._memory_size(index)


def memory_summary(device=None, abbreviated=False) -> str:
    """A short table of the device's memory statistics."""
    stats = memory_stats(device)
    rows = [("allocated", "allocated_bytes.all"), ("storages", "allocation.all")]
    lines = [f"tpu:{devices.index_or_current(device)} memory summary", f"{'':12}{'current':>16}{'peak':>16}"]
    lines += [f"{name:12}{stats[key + '.current']:>16,}{stats[key + '.peak']:>16,}" for name, key in rows]
    lines.append(f"out-of-memory errors: {stats['num_ooms']}")
    if "torchtpu.limit_bytes" in stats:
        lines.append(f"limit: {stats['torchtpu.limit_bytes']:,} bytes")
    return "\n".join(lines)


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """``torch.cuda.memory._record_memory_history``: accepted so that tools which record around a
    run (TorchTitan's memory snapshots) run on tpu, but nothing is recorded: storages are PJRT
    buffers without a caching allocator's segments or allocation stacks."""
    if enabled:
        warnings.warn("torch.tpu.memory records no allocation history; memory_stats() and "
                      "torchtpu.metrics report what the device holds", stacklevel=2)


def _snapshot(device=None) -> dict:
    """``torch.cuda.memory._snapshot``'s structure, empty (see :func:`_record_memory_history`)."""
    return {"segments": [], "device_traces": [], "allocator_settings": {}}

