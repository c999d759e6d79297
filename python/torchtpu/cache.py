"""The compile cache every mode shares: in memory (LRU), ``TORCHTPU_CACHE_DIR`` (default
``~/.cache/torchtpu``; empty turns it off) and ``TORCHTPU_SHARED_CACHE_DIR`` (many hosts)."""

import atexit
import os
import sys
import time

from . import _C


@atexit.register
def _finish_compiles_before_exit():
    """A compile still running when the process exits would race the plugin's own teardown, so exit
    waits for it (queued ones are dropped). The wait says so after a second, and Ctrl-C ends it at
    once: the process then leaves without tearing anything down (exit status 130)."""
    _C._drop_queued_compiles()
    started = time.monotonic()
    announced = False
    try:
        while _C._running_compiles():
            if not announced and time.monotonic() - started > 1:
                print("torchtpu: waiting for a compile to finish before exiting (Ctrl-C to exit now)",
                      file=sys.stderr, flush=True)
                announced = True
            time.sleep(0.05)
    except KeyboardInterrupt:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)


def stats() -> dict:
    """``requests``, ``hits`` per tier (memory, disk, shared), ``misses`` (compiled), of those
    ``quick_compiles`` (compiled quickly first, see docs/design.md "Tiered compiles"),
    ``promotions`` (quick programs that ran often enough to be compiled again, optimized, in the
    background; not counted as misses), the pending background compiles (``background_pending``),
    of those ``deferred`` (fused windows that ran once, compiled when they run again or the
    background compiles are waited for), ``skipped_background`` (fused windows not compiled
    because their shape kept changing), ``prefetched`` (disk hits
    that a background thread had loaded before they were needed: the executables this command used
    when it last ran, see docs/design.md), ``started_ahead`` (compiles, or disk loads, started on
    a thread of their own before the op that needs them ran: strict mode's waiting ops, a fused
    window run op by op after a host read, see docs/modes.md), and ``compiles``: ``(what, seconds, temp_bytes)`` for
    the most recent compiles, ``temp_bytes`` being the memory one run of the program needs for its
    intermediates as XLA planned it (-1 when the plugin does not say)."""
    return dict(_C._cache_stats())


def reset_stats() -> None:
    _C._cache_reset_stats()


def clear() -> None:
    """Drops loaded executables and the persistent directory's entries (not the shared one's)."""
    _C._cache_clear()


def wait_for_background_compiles() -> None:
    """Blocks until the background compiles have finished: fused mode's windows, zero fills',
    promotions of quick programs, and the first runs of torch.compile graphs."""
    _C._wait_for_background_compiles()
