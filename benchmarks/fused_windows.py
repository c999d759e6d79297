"""Fused mode's window cuts on training steps: strict mode, fused mode with the whole step in one
window, and fused mode as shipped (forward, backward and optimizer windows), interleaved in one
process so this noisy machine's drift hits all three alike.

    .venv/bin/python benchmarks/fused_windows.py [--workloads mlp_train resnet_train gpt_train]

Each round runs a block of steps per configuration and times it from a synchronized device to a
synchronized device (a step's loss is read with .item(), as a logging loop does, but work queued
behind it is counted too). Prints the median and quartiles of the per-step time over the rounds.
"""

import argparse
import os
import statistics
import sys
import time

import torch

import torchtpu
from torchtpu import modes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from run import WORKLOADS  # noqa: E402

ROUNDS = {"mlp_train": (20, 10), "resnet_train": (10, 5), "gpt_train": (6, 4)}  # (rounds, steps per block)


def training_step(name):
    torch.manual_seed(0)
    model, x, y = models.workload(name, WORKLOADS[name]["full"])
    model, x, y = model.to("tpu"), x.to("tpu"), y.to("tpu")
    if name.startswith("gpt"):
        opt, loss_of = torch.optim.AdamW(model.parameters(), lr=1e-3), models.lm_loss
    else:
        opt, loss_of = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def configurations():
    """name -> (eager mode, the cut function fused mode's hooks call)."""
    three_windows = modes._cut

    def one_window(reason):  # only the cut at the end of the optimizer step
        if reason == "optimizer step":
            three_windows(reason)
    return {"strict": ("strict", three_windows), "fused, one window per step": ("fused", one_window),
            "fused (forward, backward, optimizer)": ("fused", three_windows)}


def measure(name):
    step, configs = training_step(name), configurations()
    for mode, cut in configs.values():  # warm-up: every configuration's programs compiled
        torchtpu.set_eager_mode(mode)
        modes._cut = cut
        for _ in range(4):
            step()
        torchtpu.cache.wait_for_background_compiles()
    rounds, per = ROUNDS[name]
    times = {c: [] for c in configs}
    for _ in range(rounds):
        for c, (mode, cut) in configs.items():
            torchtpu.set_eager_mode(mode)
            modes._cut = cut
            torch.tpu.synchronize()
            start = time.perf_counter()
            for _ in range(per):
                step()
            torch.tpu.synchronize()
            times[c].append((time.perf_counter() - start) / per * 1e3)
    modes._cut = configs["strict"][1]
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(ROUNDS), choices=list(ROUNDS))
    args = ap.parse_args(argv)
    print("| workload | configuration | median ms/step | quartiles | vs strict |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.workloads:
        times = measure(name)
        strict = statistics.median(times["strict"])
        for c, ts in times.items():
            q = statistics.quantiles(ts, n=4)
            print(f"| {name} | {c} | {statistics.median(ts):.2f} | {q[0]:.2f}–{q[2]:.2f} | "
                  f"{statistics.median(ts) / strict:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
