"""Training-step speed of the eager modes on a GPT-style decoder, and time to the first step with a
cold vs a warm persistent compile cache, in one run.

    python benchmarks/eager_modes.py [--steps 20] [--warmup 5] [--json FILE] [--small]

Each mode trains the same model (same initial weights, same batches, AdamW) in its own process,
reads the loss every step (a host sync, as a training loop that logs does), and reports the
median and spread of step times after warm-up, and each phase's median (zero_grad, forward,
backward, optimizer step, the wait at `.item()`). PyTorch's own CPU eager mode trains the same
model first, as the reference: what the Python, module, autograd and optimizer code costs with
kernels that do almost nothing at these sizes. The first-step figures run a new process on one
fresh cache directory: the first compiles everything (cold), the next ones load it (warm): with
the executables the command used last time loaded on a background thread from the moment the
runtime starts (the default), without that (TORCHTPU_CACHE_PREFETCH=0), and once more under the
profiler, which times every load (read and deserialize) of an executable.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext

HERE = os.path.dirname(os.path.abspath(__file__))


PHASES = ("zero_grad", "forward", "backward", "optimizer", "item")


def train(mode, steps, warmup, small, profile_loads=False):
    """Trains on tpu in eager mode `mode`, or on the CPU with PyTorch alone for mode "cpu" (the
    reference: the same Python, module, autograd and optimizer work with PyTorch's own kernels)."""
    import torch
    import torchtpu
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, HERE)
    from models import GPT, gpt_batches, lm_loss

    device = "cpu" if mode == "cpu" else "tpu"
    sizes = dict(vocab=128, d_model=32, heads=4, layers=1, seq=16) if small else {}
    torch.manual_seed(0)
    model = GPT(**sizes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = gpt_batches(warmup + steps, batch=2 if small else 8, seq=sizes.get("seq", 128),
                          vocab=sizes.get("vocab", 1024))
    times, losses, phases = [], [], {p: [] for p in PHASES}
    start_all = time.perf_counter()
    first_step = None
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    in_mode = torchtpu.eager_mode(mode) if device == "tpu" else nullcontext()
    with in_mode, profile(activities=activities) if profile_loads else nullcontext() as prof:
        for i, (x, y) in enumerate(batches):
            if i == warmup and mode == "fused":
                torchtpu.cache.wait_for_background_compiles()  # warm-up ends with windows compiled
            marks = [time.perf_counter()]
            opt.zero_grad(set_to_none=True)
            marks.append(time.perf_counter())
            loss = lm_loss(model(x.to(device)), y.to(device))
            marks.append(time.perf_counter())
            loss.backward()
            marks.append(time.perf_counter())
            opt.step()
            if mode == "lazy":
                torchtpu.sync()
            marks.append(time.perf_counter())
            losses.append(loss.item())
            marks.append(time.perf_counter())
            if first_step is None:
                first_step = marks[-1] - start_all
            if i >= warmup:
                times.append(marks[-1] - marks[0])
                for name, begin, end in zip(PHASES, marks, marks[1:]):
                    phases[name].append(end - begin)
    m = torchtpu.metrics.as_dict()
    loads = load_times(prof) if profile_loads else []
    return {"mode": mode, "step_s": times, "phase_s": phases, "losses": losses, "first_step_s": first_step,
            "load_s": loads, "prefetched": m["cache"]["prefetched"], "compiles": m["compiles"], "windows": m["windows"], "op_by_op_windows": m["op_by_op_windows"],
            "cache_hits": m["cache"]["hits"]}


def load_times(prof):
    """Seconds per executable loaded from the persistent cache, from the profiler's trace."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return [e["dur"] / 1e6 for e in events if e.get("name") == "load compiled program"]


def in_process(args, env=None):
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="a tiny model, for a quick check")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "STEPS", "WARMUP"), help=argparse.SUPPRESS)
    ap.add_argument("--profile-loads", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, steps, warmup = args.child
        print(json.dumps(train(mode, int(steps), int(warmup), args.small, args.profile_loads)))
        return
    small = ["--small"] if args.small else []
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {"TORCHTPU_CACHE_DIR": cache}
        for mode in ("cpu", "strict", "fused", "lazy"):
            results[mode] = in_process([*small, "--child", mode, str(args.steps), str(args.warmup)], env)
    with tempfile.TemporaryDirectory() as cache:
        env = {"TORCHTPU_CACHE_DIR": cache}
        first = [*small, "--child", "strict", "1", "0"]
        cold = in_process(first, env)
        warm = in_process(first, env)  # the same command again: what cold used is prefetched
        unprefetched = in_process(first, dict(env, TORCHTPU_CACHE_PREFETCH="0"))
        loads = in_process([*first, "--profile-loads"], dict(env, TORCHTPU_CACHE_PREFETCH="0"))["load_s"]
    base = results["strict"]["losses"]
    for mode, r in results.items():
        if mode == "cpu":
            continue  # float32 on another backend: its losses are compared in tests, not here
        drift = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base))
        assert drift < 1e-3, f"{mode} losses differ from strict by {drift:.2e}"
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"{'mode':8} {'median step':>12} {'spread':>20} {'steps/s':>8} {'vs strict':>9}  compiles")
    strict_median = statistics.median(results["strict"]["step_s"])
    for mode, r in results.items():
        med = statistics.median(r["step_s"])
        print(f"{mode:8} {med * 1e3:10.1f}ms {min(r['step_s']) * 1e3:8.1f}-{max(r['step_s']) * 1e3:.1f}ms "
              f"{1 / med:8.2f} {strict_median / med:8.2f}x  {r['compiles'] if mode != 'cpu' else '-'}")
    print("median ms per phase of a step (" + ", ".join(PHASES) + "; optimizer includes lazy's sync, item the wait for the loss)")
    for mode, r in results.items():
        print(f"{mode:8} " + " ".join(f"{statistics.median(r['phase_s'][p]) * 1e3:9.3f}" for p in PHASES))
    print(f"first finished step in a new process (strict): cold cache {cold['first_step_s']:.2f} s, "
          f"warm cache {warm['first_step_s']:.2f} s ({warm['prefetched']} executables prefetched), "
          f"ratio {warm['first_step_s'] / cold['first_step_s']:.2f}; warm without prefetching "
          f"{unprefetched['first_step_s']:.2f} s, ratio {unprefetched['first_step_s'] / cold['first_step_s']:.2f}")
    print(f"loading an executable from the persistent cache (read + deserialize, {len(loads)} of them): "
          f"median {statistics.median(loads) * 1e3:.2f} ms, max {max(loads) * 1e3:.2f} ms, "
          f"total {sum(loads) * 1e3:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"modes": results, "cold": cold, "warm": warm, "warm_unprefetched": unprefetched,
                       "load_s": loads}, f, indent=1)


if __name__ == "__main__":
    main()
