"""The GPT training step of benchmarks/run.py with AdamW's three implementations, in strict mode.

    .venv/bin/python benchmarks/optimizer_step.py [--size quick|full] [--rounds 2]

``foreach`` (torch.optim's default for tpu, one program per ``_foreach_*`` op), ``fused``
(``fused=True``: ``aten::_fused_adamw_``, whose tpu kernel records its ops and runs them as one
program, python/torchtpu/fused_optimizers.py) and ``fused, op by op`` (the same kernel with each op
its own program, as before 2026-12-05), beside PyTorch CPU eager with ``foreach`` and ``fused``.
Each configuration runs in its own process, the rounds alternate them; median step times.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {  # name: (device, AdamW implementation, one program per fused step)
    "PyTorch CPU, foreach": ("cpu", "foreach", True),
    "PyTorch CPU, fused": ("cpu", "fused", True),
    "tpu strict, foreach": ("tpu", "foreach", True),
    "tpu strict, fused": ("tpu", "fused", True),
    "tpu strict, fused op by op": ("tpu", "fused", False),
}


def child(config, size, steps):
    import torch
    sys.path.insert(0, HERE)
    import models
    import run
    device, implementation, one_program = CONFIGS[config]
    if device == "tpu":
        import torchtpu.fused_optimizers
        if not one_program:
            torchtpu.fused_optimizers._one_program = torch.no_grad
    model, x, y = models.workload("gpt_train", run.WORKLOADS["gpt_train"][size])
    model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **{implementation: True})

    def step():
        opt.zero_grad(set_to_none=True)
        loss = models.lm_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(5):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps(statistics.median(times) * 1e3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="quick", choices=["quick", "full"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.size, args.steps)
    results = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name in CONFIGS:
            out = subprocess.run([sys.executable, __file__, "--child", name, "--size", args.size,
                                  "--steps", str(args.steps)], check=True, capture_output=True, text=True)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    reference = statistics.median(results["tpu strict, foreach"])
    print(f"| AdamW on the {args.size} GPT step | median step ms (per round) | vs tpu strict foreach |")
    print("| --- | --- | --- |")
    for name, times in results.items():
        per_round = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {name} | {statistics.median(times):.1f} ({per_round}) | {statistics.median(times) / reference:.2f}× |")


if __name__ == "__main__":
    main()
