"""Every c10d collective, run on one device and checked against CPU PyTorch.

Each case's inputs are a function of (rank, world), so every rank can compute what the collective
must produce from all ranks' inputs with plain CPU torch (``expect``). Used by the thread-rank
tests (tests/python/test_distributed.py) and the torchrun workers (``python -m`` this file's
sibling ``worker.py``), which also run each case through gloo on CPU tensors.
"""

import torch
import torch.distributed as dist


def data(rank, n=6, dtype=torch.float32, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(0, 7, (n,), generator=g).to(dtype)


def _all(world, **kw):
    return [data(r, **kw) for r in range(world)]


def all_reduce(op, dtype=torch.float32):
    combine = {dist.ReduceOp.SUM: lambda xs: torch.stack(xs).sum(0),
               dist.ReduceOp.AVG: lambda xs: torch.stack(xs).mean(0),
               dist.ReduceOp.PRODUCT: lambda xs: torch.stack(xs).prod(0),
               dist.ReduceOp.MIN: lambda xs: torch.stack(xs).min(0).values,
               dist.ReduceOp.MAX: lambda xs: torch.stack(xs).max(0).values,
               dist.ReduceOp.BAND: lambda xs: _fold(xs, torch.bitwise_and),
               dist.ReduceOp.BOR: lambda xs: _fold(xs, torch.bitwise_or),
               dist.ReduceOp.BXOR: lambda xs: _fold(xs, torch.bitwise_xor)}[op]

    def run(rank, world, device, group):
        t = data(rank, dtype=dtype).to(device)
        dist.all_reduce(t, op=op, group=group)
        return [t]

    def expect(rank, world):
        return [combine(_all(world, dtype=dtype)).to(dtype)]
    return run, expect


def all_reduce_premul_sum():
    def run(rank, world, device, group):
        t = data(rank).to(device)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=group)
        return [t]
    return run, lambda rank, world: [0.5 * torch.stack(_all(world)).sum(0)]


def _fold(xs, f):
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out


def broadcast():
    def run(rank, world, device, group):
        t = data(rank).to(device)
        dist.broadcast(t, src=world - 1, group=group)
        return [t]
    return run, lambda rank, world: [data(world - 1)]


def reduce():
    def run(rank, world, device, group):
        t = data(rank).to(device)
        dist.reduce(t, dst=0, group=group)
        return [t] if rank == 0 else []
    return run, lambda rank, world: [sum(_all(world))] if rank == 0 else []


def all_gather():
    def run(rank, world, device, group):
        out = [torch.empty(6, device=device) for _ in range(world)]
        dist.all_gather(out, data(rank).to(device), group=group)
        return out
    return run, lambda rank, world: _all(world)


def all_gather_into_tensor():
    def run(rank, world, device, group):
        out = torch.empty(world * 2, 3, device=device)
        dist.all_gather_into_tensor(out, data(rank).view(2, 3).to(device), group=group)
        return [out]
    return run, lambda rank, world: [torch.stack(_all(world)).view(world * 2, 3)]


def reduce_scatter():
    def run(rank, world, device, group):
        out = torch.empty(6, device=device)
        dist.reduce_scatter(out, [data(rank, salt=j).to(device) for j in range(world)], group=group)
        return [out]
    return run, lambda rank, world: [sum(data(r, salt=rank) for r in range(world))]


def reduce_scatter_tensor(op=dist.ReduceOp.SUM):
    def run(rank, world, device, group):
        out = torch.empty(3, device=device)
        dist.reduce_scatter_tensor(out, data(rank, n=3 * world).to(device), op=op, group=group)
        return [out]

    def expect(rank, world):
        total = torch.stack([data(r, n=3 * world) for r in range(world)])
        total = total.mean(0) if op == dist.ReduceOp.AVG else total.sum(0)
        return [total[3 * rank:3 * rank + 3]]
    return run, expect


def _splits(rank, world):
    return [(rank + j) % 3 + 1 for j in range(world)]  # rows rank sends to j


def all_to_all_single_uneven():
    def run(rank, world, device, group):
        send = _splits(rank, world)
        recv = [_splits(j, world)[rank] for j in range(world)]
        x = data(rank, n=sum(send) * 2).view(-1, 2).to(device)
        out = torch.empty(sum(recv), 2, device=device)
        dist.all_to_all_single(out, x, recv, send, group=group)
        return [out]

    def expect(rank, world):
        pieces = []
        for j in range(world):
            send = _splits(j, world)
            x = data(j, n=sum(send) * 2).view(-1, 2)
            start = sum(send[:rank])
            pieces.append(x[start:start + send[rank]])
        return [torch.cat(pieces)]
    return run, expect


def all_to_all():
    def run(rank, world, device, group):
        ins = [data(rank, n=j + 1, salt=j).to(device) for j in range(world)]
        outs = [torch.empty(rank + 1, device=device) for _ in range(world)]
        dist.all_to_all(outs, ins, group=group)
        return outs
    return run, lambda rank, world: [data(j, n=rank + 1, salt=rank) for j in range(world)]


def gather():
    def run(rank, world, device, group):
        out = [torch.empty(6, device=device) for _ in range(world)] if rank == 1 else None
        dist.gather(data(rank).to(device), out, dst=1, group=group)
        return out or []
    return run, lambda rank, world: _all(world) if rank == 1 else []


def scatter():
    def run(rank, world, device, group):
        out = torch.empty(6, device=device)
        ins = [data(j, salt=7).to(device) for j in range(world)] if rank == 0 else None
        dist.scatter(out, ins, src=0, group=group)
        return [out]
    return run, lambda rank, world: [data(rank, salt=7)]


def send_recv_ring():
    def run(rank, world, device, group):
        ops = [dist.P2POp(dist.isend, data(rank).to(device), (rank + 1) % world, group=group),
               dist.P2POp(dist.irecv, out := torch.empty(6, device=device), (rank - 1) % world, group=group)]
        if rank % 2:  # odd ranks receive first: no pair waits on itself
            ops.reverse()
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [out]
    return run, lambda rank, world: [data((rank - 1) % world)]


def barrier():
    def run(rank, world, device, group):
        dist.barrier(group=group)
        return []
    return run, lambda rank, world: []


CASES = {
    "all_reduce_sum": all_reduce(dist.ReduceOp.SUM),
    "all_reduce_avg": all_reduce(dist.ReduceOp.AVG),
    "all_reduce_product": all_reduce(dist.ReduceOp.PRODUCT),
    "all_reduce_min": all_reduce(dist.ReduceOp.MIN),
    "all_reduce_max": all_reduce(dist.ReduceOp.MAX),
    "all_reduce_premul_sum": all_reduce_premul_sum(),
    "all_reduce_band_int": all_reduce(dist.ReduceOp.BAND, torch.int32),
    "all_reduce_bor_int": all_reduce(dist.ReduceOp.BOR, torch.int64),
    "all_reduce_bxor_int": all_reduce(dist.ReduceOp.BXOR, torch.int32),
    "broadcast": broadcast(),
    "reduce": reduce(),
    "all_gather": all_gather(),
    "all_gather_into_tensor": all_gather_into_tensor(),
    "reduce_scatter": reduce_scatter(),
    "reduce_scatter_tensor": reduce_scatter_tensor(),
    "reduce_scatter_tensor_avg": reduce_scatter_tensor(dist.ReduceOp.AVG),
    "all_to_all_single_uneven": all_to_all_single_uneven(),
    "all_to_all": all_to_all(),
    "gather": gather(),
    "scatter": scatter(),
    "send_recv_ring": send_recv_ring(),
    "barrier": barrier(),
}


def check(name, rank, world, device, group):
    """Runs case ``name`` on ``device``; raises AssertionError naming the case if it differs from
    CPU PyTorch's result."""
    run, expect = CASES[name]
    got = [t.cpu() for t in run(rank, world, device, group)]
    want = expect(rank, world)
    assert len(got) == len(want), f"{name}: {len(got)} outputs, expected {len(want)}"
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, msg=lambda m: f"{name} on rank {rank} ({device}): {m}")
