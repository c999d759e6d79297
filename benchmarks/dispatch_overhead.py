"""Strict-mode dispatch overhead: microseconds per op on tpu beside PyTorch CPU eager, in one run.

    python benchmarks/dispatch_overhead.py [--repeats 15] [--json FILE]

Workloads: a chain of small adds (f32[16]) and a chain of 256x256 matmuls. Each repeat runs the
chain once and waits for the result (tpu: torch.tpu.synchronize()); the first repeat of each is a
warm-up that compiles. Reports the median and the spread (min-max) of per-op times. Then the
recording cost of fused and lazy mode: the same add chain timed until its last op is recorded
(the window runs at the synchronize after the clock stops).
"""

import argparse
import json
import platform
import statistics
import time

import torch

import torchtpu


def chain(device, op, n, make):
    x = make(device)
    y = x
    for _ in range(n):
        y = op(y, x)
    return y


def timed(device, op, n, make, repeats):
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    per_op = []
    for i in range(repeats + 1):
        sync()
        start = time.perf_counter()
        chain(device, op, n, make)
        sync()
        if i:  # the first run compiles
            per_op.append((time.perf_counter() - start) / n * 1e6)
    return per_op


def recording(mode, n, repeats):
    """Microseconds per op to record `y + 1.0` on f32[16] in `mode`; three warm-up repeats."""
    per_op = []
    with torchtpu.eager_mode(mode):
        x = torch.ones(16, device="tpu")
        for i in range(repeats + 3):
            y = x
            start = time.perf_counter()
            for _ in range(n):
                y = y + 1.0
            elapsed = time.perf_counter() - start
            torch.tpu.synchronize()
            if i >= 3:
                per_op.append(elapsed / n * 1e6)
    return per_op


def checked_chain(k, repeats):
    """(dispatch us/op, sync us/op) for k chained index_select calls on f32[16] between syncs: an
    op with a device-side check, whose flag each sync reads (docs/design.md, "Failed device-side
    checks")."""
    x, idx = torch.arange(16.0, device="tpu"), torch.arange(15, -1, -1, device="tpu")
    dispatch, sync = [], []
    for i in range(repeats + 3):
        y = x
        start = time.perf_counter()
        for _ in range(k):
            y = y.index_select(0, idx)
        dispatched = time.perf_counter()
        torch.tpu.synchronize()
        if i >= 3:
            dispatch.append((dispatched - start) / k * 1e6)
            sync.append((time.perf_counter() - dispatched) / k * 1e6)
    return statistics.median(dispatch), statistics.median(sync)


WORKLOADS = {
    "add f32[16] (x1000)": (lambda a, b: a + b, 1000, lambda d: torch.ones(16, device=d)),
    "matmul 256x256 (x100)": (lambda a, b: torch.mm(a, b) * 0.01, 100,
                              lambda d: torch.full((256, 256), 0.01, device=d)),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    for name, (op, n, make) in WORKLOADS.items():
        row = {}
        for device in ("cpu", "tpu"):
            samples = timed(device, op, n, make, args.repeats)
            row[device] = {"median_us": statistics.median(samples), "min_us": min(samples),
                           "max_us": max(samples)}
        row["ratio_tpu_vs_cpu"] = row["tpu"]["median_us"] / row["cpu"]["median_us"]
        results[name] = row
    recorded = {}
    for mode in ("fused", "lazy"):
        samples = recording(mode, 1000, args.repeats)
        recorded[mode] = {"median_us": statistics.median(samples), "min_us": min(samples), "max_us": max(samples)}
    checked = {k: checked_chain(k, args.repeats) for k in (10, 50, 500)}
    info = {"machine": platform.processor() or platform.machine(), "cpus": torch.get_num_threads(),
            "torch": torch.__version__, "platform": torchtpu.platform(), "results": results,
            "recording": recorded, "checked_chain_us": checked}
    print(f"{'workload':26} {'cpu eager us/op':>16} {'tpu strict us/op':>17} {'tpu/cpu':>8}")
    for name, row in results.items():
        c, t = row["cpu"], row["tpu"]
        print(f"{name:26} {c['median_us']:9.1f} ({c['min_us']:.1f}-{c['max_us']:.1f}) "
              f"{t['median_us']:9.1f} ({t['min_us']:.1f}-{t['max_us']:.1f}) {row['ratio_tpu_vs_cpu']:7.2f}")
    for mode, r in recorded.items():
        print(f"recording y + 1.0, {mode:5}  {r['median_us']:9.2f} us/op ({r['min_us']:.2f}-{r['max_us']:.2f})")
    for k, (dispatch, sync) in checked.items():
        print(f"checked index_select x{k:<4} dispatch {dispatch:6.2f} us/op, sync {sync:6.2f} us/check")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
