"""The compile cache every mode shares: in memory (LRU), ``TORCHTPU_CACHE_DIR`` (default
``~/.cache/torchtpu``; empty turns it off) and ``TORCHTPU_SHARED_CACHE_DIR`` (many hosts)."""

import atexit

from . import _C

# A compile still running when the process exits would race the plugin's own teardown.
atexit.register(_C._stop_background_compiles)


def stats() -> dict:
    """``requests``, ``hits`` per tier (memory, disk, shared), ``misses`` (compiled), the pending
    background compiles, and ``compiles``: ``(what, seconds)`` for the most recent compiles."""
    return dict(_C._cache_stats())


def reset_stats() -> None:
    _C._cache_reset_stats()


def clear() -> None:
    """Drops loaded executables and the persistent directory's entries (not the shared one's)."""
    _C._cache_clear()


def wait_for_background_compiles() -> None:
    """Blocks until the fused mode's background compiles have finished."""
    _C._wait_for_background_compiles()
