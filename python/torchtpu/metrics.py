"""What the backend did: executions per mode, compiles and recompiles, cache hits per tier, CPU
fallbacks, ops run at exact sizes on padded tensors, bytes moved, host syncs by reason, fused
windows. ``TORCHTPU_METRICS_ON_EXIT=1`` prints :func:`report` when the process exits."""

import atexit
import os

from . import _C, cache


def as_dict() -> dict:
    m = dict(_C._metrics())
    out = dict(m["counters"])
    out["mode"] = _C._eager_mode()
    out["host_syncs"] = dict(m["host_syncs"])
    out["window_cuts"] = dict(m["window_cuts"])
    out["window_sizes"] = dict(m["window_sizes"])
    out["recompiles"] = list(m["recompiles"])
    out["recompile_count"] = m["recompile_count"]
    out["cpu_fallbacks"] = dict(m["cpu_fallbacks"])
    out["unpadded_ops"] = dict(m["unpadded_ops"])
    out["pending_ops"] = m["pending_ops"]
    s = cache.stats()
    out["background_compiles_pending"] = s["background_pending"]
    out["cache"] = {k: s[k] for k in ("requests", "hits", "misses", "quick_compiles", "promotions", "prefetched",
                                      "skipped_background", "deferred", "dir", "shared_dir")}
    return out


def counters() -> dict:
    """The executor's numeric counters (executions, ops per mode, windows, compiles, bytes)."""
    return dict(_C._metrics()["counters"])


def cpu_fallbacks() -> dict:
    """``{op: count}`` of ops that ran on the CPU because they have no tpu lowering yet."""
    return dict(_C._cpu_fallbacks())


def unpadded_ops() -> dict:
    """``{op: count}`` of ops that read a padded tensor at its exact sizes (no padding rule covers
    them): each compiles once per exact size, where bounded dynamism has a gap."""
    return dict(_C._metrics()["unpadded_ops"])


def reset() -> None:
    _C._reset_counters()
    cache.reset_stats()


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def report() -> str:
    """A readable summary of :func:`as_dict`."""
    m = as_dict()
    c = m["cache"]
    lines = [
        f"torchtpu metrics (mode: {m['mode']})",
        "ops recorded: " + ", ".join(f"{k} {m[k + '_ops']}" for k in ("debug", "strict", "fused", "lazy")),
        f"programs executed: {m['executions']}",
        f"fused windows: {m['windows']} executed as one program ({m['window_ops']} ops, largest "
        f"{m['max_window_ops']}); {m['op_by_op_windows']} run op by op while compiling; "
        f"{m['background_compiles_pending']} background compiles pending",
        f"window cuts: {m['window_cuts'] or 'none'}",
        f"torch.compile graphs: {m['compiled_graph_runs']} runs ({m['captured_ops']} ops captured)",
        f"compiles: {m['compiles']} (total {_seconds(m['compile_ns'])}, max {_seconds(m['max_compile_ns'])}; "
        f"{c['quick_compiles']} quick, {c['promotions']} promoted to optimized since)",
        f"compile cache: {c['requests']} requests, hits {c['hits']}, misses {c['misses']} "
        f"(dir {c['dir'] or 'off'}, shared {c['shared_dir'] or 'off'})",
        f"recompilations: {m['recompile_count']}",
    ]
    lines += [f"  {r}" for r in m["recompiles"][-10:]]
    lines += [
        f"host syncs: {m['host_syncs'] or 'none'}",
        f"bytes moved: host->device {m['bytes_to_device']} ({m['async_bytes_to_device']} asynchronously), "
        f"device->host {m['bytes_to_host']}",
        f"collectives: {m['collectives']}",
        f"CPU fallbacks: {m['cpu_fallbacks'] or 'none'}",
        f"ops run at exact sizes on padded tensors: {m['unpadded_ops'] or 'none'}",
    ]
    return "\n".join(lines)


if os.environ.get("TORCHTPU_METRICS_ON_EXIT", "0") not in ("", "0"):
    atexit.register(lambda: print(report()))
