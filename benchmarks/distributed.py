"""torch.distributed on tpu beside gloo on CPU tensors, in one invocation.

    python benchmarks/distributed.py [--repeats 5] [--markdown FILE]

1. all_reduce bus bandwidth, 4 KiB to 64 MiB of float32, 2 ranks: tpu tensors as torchrun
   processes (tpu_dist, host-staged through gloo), tpu tensors as thread ranks (tpu_dist, one
   compiled XLA all-reduce over two CPU-plugin devices), and CPU tensors on gloo (the peer).
   Bus bandwidth = bytes * 2(n-1)/n / median time, as nccl-tests reports it.
2. DDP and FSDP2 training-step time of the GPT-style test model for 1, 2 and 4 torchrun ranks
   (median ms per step, the first steps not counted).
Each measurement runs in fresh processes; ranks beyond the machine's cores share them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def _median_seconds(fn, repeats):
    fn()  # compiles, connects
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _all_reduce_times(device, repeats, group=None):
    import torch
    import torch.distributed as dist
    out = {}
    for size in SIZES:
        t = torch.ones(size // 4, device=device)

        def step():
            dist.all_reduce(t, group=group)
            if device == "tpu":
                torch.tpu.synchronize()  # the result exists on the device
        out[size] = _median_seconds(step, repeats)
    return out


def _train_step_ms(kind, repeats):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "distributed"))
    import training
    rank, world = dist.get_rank(), dist.get_world_size()
    model = training.seeded_gpt().to("tpu")
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = training.batch(0, world, per_rank=8).chunk(world)[rank].to("tpu")

    def step():
        opt.zero_grad()
        loss = training.loss_of(model, tokens)
        loss.backward()
        opt.step()
        loss.item()
    _median_seconds(step, 1)
    return _median_seconds(step, repeats) * 1000


def worker(task, out_path, repeats):
    """One rank (torchrun) or the thread-rank driver: measures and, on rank 0, writes JSON."""
    import torch
    import torch.distributed as dist
    import torchtpu
    result = {}
    if task == "threads":
        result = torchtpu.distributed.run_threads(lambda rank, world: _all_reduce_times("tpu", repeats), 2)[0]
    else:
        torch.tpu.set_device(0)
        dist.init_process_group("tpu_dist")
        if task == "processes":
            result["tpu"] = _all_reduce_times("tpu", repeats)
            result["gloo"] = _all_reduce_times("cpu", repeats, dist.new_group(backend="gloo"))
        else:
            result = _train_step_ms(task, repeats)
        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return
    with open(out_path, "w") as f:
        json.dump(result, f)


def launch(task, ranks, repeats):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [__file__, "--worker", task, out.name, str(repeats)]
        env = {**os.environ, "TORCHTPU_EAGER_MODE": "strict", "TF_CPP_MIN_LOG_LEVEL": "2"}
        if task == "threads":
            cmd = [sys.executable, *args]
            env["TORCHTPU_NUM_CPU_DEVICES"] = "2"
        else:
            torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
            cmd = [torchrun, "--standalone", f"--nproc_per_node={ranks}", *args]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        with open(out.name) as f:
            return json.load(f)


def busbw(size, seconds, n=2):
    return size * 2 * (n - 1) / n / seconds / 1e9


def main():
    if "--worker" in sys.argv:
        _, _, task, out, repeats = sys.argv
        return worker(task, out, int(repeats))
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--markdown")
    args = p.parse_args()
    procs = launch("processes", 2, args.repeats)
    threads = launch("threads", 2, args.repeats)
    lines = ["| all_reduce size | tpu, processes (host-staged) | tpu, thread ranks (XLA) | gloo, CPU tensors |",
             "|---|---|---|---|"]
    for size in SIZES:
        cells = [f"{t[str(size)] * 1e3:.2f} ms, {busbw(size, t[str(size)]):.2f} GB/s"
                 for t in (procs["tpu"], threads, procs["gloo"])]
        lines.append(f"| {size >> 10} KiB | " + " | ".join(cells) + " |")
    lines += ["", "| training step (GPT test model, 8 sequences per rank) | 1 rank | 2 ranks | 4 ranks |",
              "|---|---|---|---|"]
    for kind in ("ddp", "fsdp"):
        cells = [f"{launch(kind, n, args.repeats):.1f} ms" for n in (1, 2, 4)]
        lines.append(f"| {kind.upper()} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
