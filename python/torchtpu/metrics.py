"""What the backend did: executions, compiles, cache hits, bytes moved, CPU fallbacks."""

from . import _C


def counters() -> dict:
    """Executor counters: executions, compiles (count, total and max ns), cache hits, bytes moved."""
    return dict(_C._counters())


def cpu_fallbacks() -> dict:
    """``{op: count}`` of ops that ran on the CPU because they have no tpu lowering yet."""
    return dict(_C._cpu_fallbacks())


def reset() -> None:
    _C._reset_counters()
