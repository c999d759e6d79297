"""Training on batches of varying sequence length: what recompiling costs, side by side.

    python benchmarks/variable_lengths.py [--steps 12] [--fixed-length N] [--runtimes ...] [--json FILE]

A GPT-style decoder (benchmarks/models.py) trains with SGD on batches whose sequence length is
drawn from 33..64 (the same seeded draw for every runtime); the loss function (model and loss)
is compiled once and called on every batch. Each runtime runs in its own process with a fresh compile cache:

- torch-cpu: PyTorch eager (no compiles);
- inductor-cpu: ``torch.compile(loss_of)`` (Dynamo's automatic dynamic shapes: after the second
  length, one symbolic-size kernel set);
- torchtpu-exact: ``torch.compile(loss_of, backend="tpu", dynamic=False)``: one program per length;
- torchtpu-buckets: ``torch.compile(loss_of, backend="tpu")``: automatic dynamic shapes, padded to
  buckets (powers of two): one program per bucket;
- torchtpu-strict, torchtpu-fused: eager modes, whose ops run padded to buckets where sizes vary
  (docs/modes.md, "Shapes that change").

``--fixed-length N`` trains every step at length N instead: the floor a varying-length run is
measured against.

Reported per runtime: the whole run (compiles included), the median step of the last half of
the steps, the number of XLA compiles (``torchtpu.metrics``), and the losses' largest relative
difference from PyTorch eager's.
"""

import json
import os
import statistics
import sys
import time

import fresh_process

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = ["torch-cpu", "inductor-cpu", "torchtpu-exact", "torchtpu-buckets", "torchtpu-strict", "torchtpu-fused"]
SIZES = dict(vocab=512, d_model=128, heads=4, layers=2, seq=64, batch=8)


def lengths(steps, fixed=None):
    import random
    rng = random.Random(0)
    return [fixed or rng.randint(33, 64) for _ in range(steps)]


def child(runtime, steps, fixed=None):
    import torch
    sys.path.insert(0, HERE)
    import models
    device = "cpu"
    if runtime.startswith("torchtpu"):
        import torchtpu
        torchtpu.set_eager_mode("fused" if runtime == "torchtpu-fused" else "strict")
        device = "tpu"
    torch.manual_seed(0)
    sizes = {k: v for k, v in SIZES.items() if k != "batch"}
    model = models.GPT(**sizes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_of(x, y):
        return models.lm_loss(model(x), y)

    loss_of = {"inductor-cpu": lambda f: torch.compile(f),
               "torchtpu-exact": lambda f: torch.compile(f, backend="tpu", dynamic=False),
               "torchtpu-buckets": lambda f: torch.compile(f, backend="tpu")}.get(runtime, lambda f: f)(loss_of)
    g = torch.Generator().manual_seed(1)
    losses, times = [], []
    start = time.perf_counter()
    for n in lengths(steps, fixed):
        x = torch.randint(0, SIZES["vocab"], (SIZES["batch"], n), generator=g).to(device)
        y = torch.randint(0, SIZES["vocab"], (SIZES["batch"], n), generator=g).to(device)
        t = time.perf_counter()
        opt.zero_grad()
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    compiles = memory = None
    if runtime.startswith("torchtpu"):
        import torchtpu
        compiles = torchtpu.metrics.counters()["compiles"]
        memory = {"peak_padded": torchtpu.metrics.counters()["peak_padded_bytes"],
                  "peak": torch.tpu.max_memory_allocated()}
    return {"total_s": total, "step_s": times, "losses": losses, "compiles": compiles, "memory": memory}


def mib(memory, key):
    return "—" if not memory else f"{memory[key] / 2**20:.2f}"


def table(results, steps):
    ref = results.get("torch-cpu", {}).get("losses")
    rows = ["| runtime | whole run s | median step ms (last half) | XLA compiles | loss vs eager "
            "| peak device MiB | of it padding, peak MiB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rt, r in results.items():
        if "error" in r:
            rows.append(f"| {rt} | error: {r['error']} | | | | | |")
            continue
        tail = r["step_s"][steps // 2:]
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref)) if ref else float("nan")
        rows.append(f"| {rt} | {r['total_s']:.1f} | {statistics.median(tail) * 1e3:.1f} | "
                    f"{'—' if r['compiles'] is None else r['compiles']} | {diff:.1e} | "
                    f"{mib(r.get('memory'), 'peak')} | {mib(r.get('memory'), 'peak_padded')} |")
    return "\n".join(rows)


def main():
    def options(ap):
        ap.add_argument("--steps", type=int, default=12)
        ap.add_argument("--fixed-length", type=int, default=None)

    args = fresh_process.command_line(__doc__, RUNTIMES, options)
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.fixed_length)))
        return
    forwarded = ["--steps", str(args.steps)] + (["--fixed-length", str(args.fixed_length)] if args.fixed_length else [])
    results = fresh_process.run_all(__file__, args.runtimes, forwarded, lambda r: f"{r['total_s']:.1f} s")
    print(f"lengths: {lengths(args.steps, args.fixed_length)}")
    print(table(results, args.steps))
    fresh_process.save(results, args.json)


if __name__ == "__main__":
    main()
