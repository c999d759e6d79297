"""Rank-divergent (MPMD) code and failures: what PyTorch users write, which must neither deadlock
nor mis-fuse, and peers that die, hang or call the wrong collective."""

import os
import sys
import time

import torch
import torch.distributed as dist

import torchtpu

THREADS = "--threads" in sys.argv


def divergent(rank, world):
    if not THREADS:  # the eager mode is per process: ranks may differ
        torchtpu.set_eager_mode("fused" if rank == 0 else "strict")
    x = torch.arange(6.0, device="tpu") * (rank + 1)
    if rank == 0:  # logging with a host read, extra ops in the fused window, evaluation
        print(f"rank 0 sees {(x * 2).sin().sum().item():.3f}")
        with torch.no_grad():
            scores = torch.nn.Linear(6, 3).to("tpu")(x.view(1, 6)).softmax(-1)
        assert abs(scores.sum().item() - 1) < 1e-5
    else:  # different shapes on different ranks
        torch.ones(3 + rank, 5, device="tpu").cumsum(0).sum().item()
    y = x * 1  # pending in rank 0's fused window when the collective comes
    dist.all_reduce(y)
    total = world * (world + 1) / 2
    assert y.cpu().tolist() == [i * total for i in range(6)], y
    if rank == world - 1:
        dist.send(y + 1, 0)
    elif rank == 0:
        got = torch.empty(6, device="tpu")
        dist.recv(got, world - 1)
        assert got.cpu().tolist() == [i * total + 1 for i in range(6)], got
    dist.barrier()


def peer_dies(rank, world):
    """Rank 1 dies before the all_reduce; the others must raise naming it, within the timeout."""
    if rank == 1:
        if THREADS:
            raise RuntimeError("rank 1 crashed on purpose")
        os._exit(3)
    t = torch.ones(4, device="tpu")
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        dist.barrier()  # a dying peer may be noticed at the next collective
    except dist.DistBackendError as e:
        message = str(e)
        assert "tpu_dist" in message and "mpmd.py" in message, message
        print(f"SURVIVOR rank {rank} raised after {time.monotonic() - start:.1f} s: {message}", flush=True)
        if THREADS:
            raise
        return
    raise AssertionError("the collective completed without rank 1")


def peer_hangs(rank, world):
    """Rank 1 is busy for longer than the group's timeout: the others time out naming the collective."""
    if rank == 1:
        time.sleep(8)
        return
    t = torch.ones(4, device="tpu")
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        assert "timed out" in str(e).lower() and "all_reduce" in str(e), str(e)
        print(f"TIMEOUT rank {rank}: {e}", flush=True)
        raise
    raise AssertionError("the collective completed without rank 1")


def mismatch(rank, world):
    """Rank 0 calls all_reduce while the others broadcast: everyone raises, naming both."""
    t = torch.ones(4, device="tpu")
    try:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)
    except dist.DistBackendError as e:
        assert "all_reduce" in str(e) and "broadcast" in str(e), str(e)
        print(f"MISMATCH rank {rank}: {e}", flush=True)
        raise
    raise AssertionError("mismatched collectives completed")


SCENARIOS = {"divergent": divergent, "peer_dies": peer_dies, "peer_hangs": peer_hangs, "mismatch": mismatch}
