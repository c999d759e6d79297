"""Collectives of ranks that are processes, staged through host memory and PyTorch's gloo.

The XLA CPU plugin cannot run one program across processes, so here a tpu tensor's contents are
copied to the host, gloo runs the collective between the processes, and the results are copied
back into the tpu tensors when the Work is waited on. CPU tensors go to gloo unchanged.
"""

import atexit
import time

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from .. import _C
from .process_group import REDUCE_OPS, options

# gloo has no AVG: it runs SUM and the result is divided by the group size afterwards.
_GLOO_OPS = {**REDUCE_OPS, "avg": dist.ReduceOp.SUM}


class _Staging:
    """Host copies of one collective's tensors: inputs read now, outputs written back when gloo
    is done (on gloo's thread, through the Work's future: backward goes on meanwhile)."""

    def __init__(self, handed):
        self.writes = []  # (output tensor, the host tensor gloo writes; the same for CPU tensors)
        self.give, self.give_future = handed.give, handed.give_future  # see _Handed

    def read(self, t):
        return self.give(t if t.device.type == "cpu" else t.detach().cpu())

    def write(self, t, read=False):
        host = t if t.device.type == "cpu" else t.detach().cpu() if read else torch.empty(t.shape, dtype=t.dtype)
        self.writes.append((t, host))
        return self.give(host)

    def _copy_back(self, divide_by):
        # on gloo's thread, where the caller's inference mode does not hold: a tensor made under
        # it can only be written inside it
        inference = any(t.is_inference() for t, _ in self.writes)
        with torch.no_grad(), torch.inference_mode(inference):
            for t, host in self.writes:
                if host is not t:
                    t.copy_(host)
                if divide_by:
                    t.div_(divide_by)

    def future(self, work, where, divide_by=None):
        """A future of the outputs, completed once gloo finished and the results are in place
        (or, for gloo work that has no future, a finish step run at wait())."""
        try:
            done = work.get_future()
        except RuntimeError:  # "Work::getFuture not implemented" (send, recv, reduce_scatter)
            return self.finish(work, where, divide_by)

        def copy_back(done):
            done.wait()  # raises gloo's error; Work.wait() names the collective
            self._copy_back(divide_by)
            return [t for t, _ in self.writes]
        return self.give_future(done.then(copy_back))

    def finish(self, work, where, divide_by=None):
        """Completion at wait(), for gloo work without a future."""
        def finish():
            try:
                work.wait(where.timeout)
            except RuntimeError as e:
                raise where.error(str(e)) from e
            self._copy_back(divide_by)
        return finish


class _Handed:
    """Tensors handed to gloo, kept until gloo lets go of them.

    gloo drops its references on its own thread after a collective; if that is the last
    reference to a tensor made in Python, freeing it takes the GIL, which kills the thread (and the
    process, with "terminate called without an active exception") when the interpreter is exiting.
    Holding them until gloo is done makes the last release ours; the same goes for the result
    callbacks gloo's thread runs (and then frees): ``drain`` waits for both, at group shutdown and
    at exit."""

    def __init__(self):
        self.tensors = []  # (tensor, its use count before gloo took it)
        self.futures = []  # results copied back by callbacks on gloo's thread

    def give(self, t):
        self.tensors.append((t, t._use_count()))
        return t

    def give_future(self, f):
        """A callback gloo's thread runs; its Python objects are freed there too, after it ran."""
        self.futures = [g for g in self.futures if not g.done()] + [f]
        return f

    def prune(self):
        self.tensors = [(t, n) for t, n in self.tensors if t._use_count() > n]

    def drain(self, seconds=5.0):
        deadline = time.monotonic() + seconds
        while (self.tensors or self.futures) and time.monotonic() < deadline:
            self.prune()
            if self.futures and all(f.done() for f in self.futures):
                time.sleep(0.01)  # gloo's thread frees the callbacks right after running them
                self.futures = []
            time.sleep(0.001)


class HostTransport:
    def __init__(self, store, rank, size, timeout):
        self.rank, self.size = rank, size
        self.gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self.handed = _Handed()
        atexit.register(self.handed.drain)

    def _start(self, where):
        _C._count_collective()
        self.handed.prune()
        if where.name not in ("send", "recv") and dist.get_debug_level() == dist.DebugLevel.DETAIL:
            self._check_same_call(where)
        return _Staging(self.handed)

    def _check_same_call(self, where, width=512):
        """TORCH_DISTRIBUTED_DEBUG=DETAIL: every rank's call must match, as PyTorch's debug wrapper checks."""
        mine = torch.zeros(width, dtype=torch.uint8)
        encoded = where.signature().encode()[:width]
        mine[:len(encoded)] = torch.tensor(list(encoded), dtype=torch.uint8)
        every = [self.handed.give(torch.empty_like(mine)) for _ in range(self.size)]
        self.handed.give(mine)
        try:
            self.gloo.allgather([every], [mine]).wait(where.timeout)
        except RuntimeError as e:
            raise where.error(str(e)) from e
        calls = [bytes(t[t != 0].tolist()).decode(errors="replace") for t in every]
        if len(set(calls)) > 1:
            listed = ", ".join(f"rank {r}: {c}" for r, c in enumerate(calls))
            raise where.error(f"ranks called different collectives ({listed})")

    def _divisor(self, op):
        return self.size if op == "avg" else None

    def allreduce(self, tensors, op, where):
        s = self._start(where)
        host = [s.write(t, read=True) for t in tensors]
        work = self.gloo.allreduce(host, options(c10d.AllreduceOptions, reduceOp=_GLOO_OPS[op]))
        return s.future(work, where, self._divisor(op))

    def broadcast(self, tensors, src, where):
        s = self._start(where)
        host = [s.write(t, read=True) for t in tensors]
        return s.future(self.gloo.broadcast(host, options(c10d.BroadcastOptions, rootRank=src)), where)

    def reduce(self, tensors, op, dst, where):
        s = self._start(where)
        host = [s.write(t, read=True) if self.rank == dst else s.read(t) for t in tensors]
        opts = options(c10d.ReduceOptions, reduceOp=_GLOO_OPS[op], rootRank=dst)
        return s.future(self.gloo.reduce(host, opts), where, self._divisor(op))

    def allgather(self, output_lists, inputs, where):
        s = self._start(where)
        outs = [[s.write(t) for t in ts] for ts in output_lists]
        return s.future(self.gloo.allgather(outs, [s.read(t) for t in inputs]), where)

    def allgather_base(self, output, input, where):
        s = self._start(where)
        host_in = s.give(s.read(input).contiguous())
        # gloo splits the output along dim 0 into pieces shaped like the input.
        host_out = s.write(output)
        host_out = s.give(host_out.view(-1, *host_in.shape[1:])) if host_in.dim() else host_out
        return s.future(self.gloo._allgather_base(host_out, host_in), where)

    def reduce_scatter(self, outputs, input_lists, op, where):
        # gloo's reduce_scatter takes lists; the tensor form is built from it.
        s = self._start(where)
        outs = [s.write(t) for t in outputs]
        ins = [[s.read(t) for t in ts] for ts in input_lists]
        opts = options(c10d.ReduceScatterOptions, reduceOp=_GLOO_OPS[op])
        return s.future(self.gloo.reduce_scatter(outs, ins, opts), where, self._divisor(op))

    def reduce_scatter_base(self, output, input, op, where):
        s = self._start(where)
        opts = options(c10d.ReduceScatterOptions, reduceOp=_GLOO_OPS[op])
        work = self.gloo._reduce_scatter_base(s.write(output), s.give(s.read(input).contiguous()), opts)
        return s.future(work, where, self._divisor(op))

    def alltoall_base(self, output, input, output_splits, input_splits, where):
        s = self._start(where)
        work = self.gloo.alltoall_base(s.write(output), s.read(input), output_splits, input_splits,
                                       c10d.AllToAllOptions())
        return s.future(work, where)

    def alltoall(self, outputs, inputs, where):
        # gloo has only the single-tensor form: the lists travel as one flat tensor with splits.
        s = self._start(where)
        flat_in = s.give(torch.cat([s.read(t).reshape(-1) for t in inputs]))
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype)
        for t, piece in zip(outputs, flat_out.split([t.numel() for t in outputs])):
            s.writes.append((t, piece.view(t.shape)))
        s.give(flat_out)  # after its views exist: they count as ours
        work = self.gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                                       [t.numel() for t in inputs], c10d.AllToAllOptions())
        return s.future(work, where)

    def gather(self, output_lists, inputs, dst, where):
        s = self._start(where)
        outs = [[s.write(t) for t in ts] for ts in output_lists]
        opts = options(c10d.GatherOptions, rootRank=dst)
        return s.future(self.gloo.gather(outs, [s.read(t) for t in inputs], opts), where)

    def scatter(self, outputs, input_lists, src, where):
        s = self._start(where)
        ins = [[s.read(t) for t in ts] for ts in input_lists]
        opts = options(c10d.ScatterOptions, rootRank=src)
        return s.future(self.gloo.scatter([s.write(t) for t in outputs], ins, opts), where)

    def send(self, tensors, dst, tag, where):
        s = self._start(where)
        return s.future(self.gloo.send([s.read(t) for t in tensors], dst, tag), where)

    def recv(self, tensors, src, tag, where):
        s = self._start(where)
        return s.future(self.gloo.recv([s.write(t) for t in tensors], src, tag), where)

    def barrier(self, where):
        s = self._start(where)
        return s.future(self.gloo.barrier(c10d.BarrierOptions()), where)

    def shutdown(self):
        self.handed.drain()
