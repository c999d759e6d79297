"""``tpu_dist``: the c10d process group for tpu tensors.

c10d only lets Python implement a whole ``ProcessGroup`` (its ``Backend`` class has no Python
trampoline), so this class is the group for every device: tpu tensors go through its transport,
CPU tensors too (host staging passes them straight to gloo; thread ranks move them to the rank's
device). The transport is where collectives actually run:

- ``HostTransport`` (ranks are processes; on the XLA CPU plugin, which cannot run a collective
  across processes): results are staged through host memory and PyTorch's gloo.
- ``ThreadTransport`` (ranks are threads of one process, one device each): every collective is one
  compiled XLA collective across the ranks' devices.

Each method mirrors the c10d ``ProcessGroup`` method of the same name (DDP's reducer and c10d's
Python API call them) and returns a :class:`Work`.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

from .. import _C
from .work import Work, hidden_from_modes

_OWN_PACKAGES = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))


def user_line() -> str:
    """``file:line`` of the innermost frame outside torch and torchtpu (where the user called)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_OWN_PACKAGES):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


# The reductions by the names the transports and the functional collectives use.
REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
              "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND,
              "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
_REDUCE_NAMES = {op: name for name, op in REDUCE_OPS.items()}


def options(cls, **fields):
    """A c10d options object (``AllreduceOptions``, ...) with ``fields`` set."""
    opts = cls()
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


def _reduce_name(op) -> str:
    if isinstance(op, dist.ReduceOp):
        op = op.op
    if op not in _REDUCE_NAMES:
        raise ValueError(f"tpu_dist does not support ReduceOp.{op.name}")
    return _REDUCE_NAMES[op]


def _reduce_op(opts):
    """(reduction name, PREMUL_SUM factor or None): PREMUL_SUM is a sum of the inputs multiplied
    by its factor, which only C++ can read off the ReduceOp."""
    op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    if (op.op if isinstance(op, dist.ReduceOp) else op) == dist.ReduceOp.PREMUL_SUM:
        return "sum", _C._premul_sum_factor(op)
    return _reduce_name(op), None


def _scaled(t, factor):
    return t if factor is None else t * factor


def _listed(tensors):
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


class ProcessGroupTPU(dist.ProcessGroup):
    def __init__(self, transport, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self.transport = transport
        self.timeout = timeout
        self._group_name = self._group_desc = ""

    def getBackendName(self):
        return "tpu_dist"

    # The stock ProcessGroup reads its name from a C++ backend, which a Python group has none of.
    def getGroupName(self):
        return self._group_name

    def setGroupName(self, name):
        self._group_name = name

    def getGroupDesc(self):
        return self._group_desc

    def setGroupDesc(self, desc):
        self._group_desc = desc

    # c10d asks the group for its per-device backend (init_process_group(device_id=...) does):
    # this group is its own backend for every device, and cannot be split.
    supports_splitting = False

    def _get_backend(self, device):
        return self

    @property
    def _device_types(self):  # c10d picks the device of object collectives from this: CPU first
        return [torch.device("cpu"), torch.device("tpu")]

    # ---- collectives (c10d's names and argument orders) ----

    def allreduce(self, tensors, opts=None):
        tensors = _listed(tensors)
        op, factor = _reduce_op(opts)
        if factor is not None:  # in place: the result overwrites the inputs anyway
            with torch.no_grad():
                for t in tensors:
                    t.mul_(factor)
        return self._work("all_reduce", opts, tensors, lambda w: self.transport.allreduce(tensors, op, w))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        tensors = _listed(tensors)
        return self._work("broadcast", opts, tensors, lambda w: self.transport.broadcast(tensors, opts.rootRank, w))

    def reduce(self, tensors, opts):
        tensors = _listed(tensors)
        op = _reduce_name(opts.reduceOp)
        return self._work("reduce", opts, tensors, lambda w: self.transport.reduce(tensors, op, opts.rootRank, w))

    def allgather(self, output_lists, inputs, opts=None):
        inputs = _listed(inputs)
        outs = [t for ts in output_lists for t in ts]
        return self._work("all_gather", opts, outs, lambda w: self.transport.allgather(output_lists, inputs, w))

    def _allgather_base(self, output, input, opts=None):
        return self._work("all_gather_into_tensor", opts, [output],
                          lambda w: self.transport.allgather_base(output, input, w))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        def run(w):
            return _chain([self.transport.allgather_base(o, i, w) for o, i in zip(outputs, inputs)])
        return self._work("all_gather_into_tensor_coalesced", opts, outputs, run)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self.allgather(output_lists, inputs, opts)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        outputs = _listed(outputs)
        op, factor = _reduce_op(opts)
        input_lists = [[_scaled(t, factor) for t in ts] for ts in input_lists]
        return self._work("reduce_scatter", opts, outputs,
                          lambda w: self.transport.reduce_scatter(outputs, input_lists, op, w))

    def _reduce_scatter_base(self, output, input, opts=None):
        op, factor = _reduce_op(opts)
        input = _scaled(input, factor)
        return self._work("reduce_scatter_tensor", opts, [output],
                          lambda w: self.transport.reduce_scatter_base(output, input, op, w))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op, factor = _reduce_op(opts)
        inputs = [_scaled(t, factor) for t in inputs]

        def run(w):
            return _chain([self.transport.reduce_scatter_base(o, i, op, w) for o, i in zip(outputs, inputs)])
        return self._work("reduce_scatter_tensor_coalesced", opts, outputs, run)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._work("all_to_all_single", opts, [output], lambda w: self.transport.alltoall_base(
            output, input, list(output_split_sizes), list(input_split_sizes), w))

    def alltoall(self, outputs, inputs, opts=None):
        return self._work("all_to_all", opts, outputs, lambda w: self.transport.alltoall(outputs, inputs, w))

    def gather(self, output_lists, inputs, opts):
        inputs = _listed(inputs)
        outs = [t for ts in output_lists for t in ts]
        return self._work("gather", opts, outs, lambda w: self.transport.gather(output_lists, inputs, opts.rootRank, w))

    def scatter(self, outputs, input_lists, opts):
        outputs = _listed(outputs)
        return self._work("scatter", opts, outputs,
                          lambda w: self.transport.scatter(outputs, input_lists, opts.rootRank, w))

    def gather_single(self, output, input, opts):
        """Gathers one tensor from each rank into ``output`` (its chunks, in rank order) on the root."""
        output_lists = [list(output.chunk(self.size()))] if self.rank() == opts.rootRank else []
        return self.gather(output_lists, [input], opts)

    # PyTorch 2.14 renamed the single-tensor collectives its Python calls (torch.distributed's
    # all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single and their coalesced forms).
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced
    all_to_all_single = alltoall_base

    def set_timeout(self, timeout):
        """dist.set_timeout(timeout, group): the default timeout of this group's later collectives."""
        self.timeout = timeout

    def send(self, tensors, dst, tag=0):
        tensors = _listed(tensors)
        return self._work("send", None, tensors, lambda w: self.transport.send(tensors, dst, tag, w))

    def recv(self, tensors, src, tag=0):
        tensors = _listed(tensors)
        return self._work("recv", None, tensors, lambda w: self.transport.recv(tensors, src, tag, w))

    def barrier(self, opts=None):
        return self._work("barrier", opts, [], lambda w: self.transport.barrier(w))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self.barrier().wait()

    def abort(self):
        self.transport.shutdown()

    def shutdown(self):
        self.transport.shutdown()

    def _work(self, name, opts, outputs, call):
        """Issues one collective: ``call(where)`` starts it and returns a future of its outputs, a
        finish step for ``wait()``, or None when it is complete already."""
        timeout = getattr(opts, "timeout", None)
        if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() <= 0:
            timeout = self.timeout
        where = _Where(name, user_line(), timeout, outputs)
        with hidden_from_modes():
            started = call(where)
        if isinstance(started, torch._C.Future):
            return Work(result=outputs, future=started, where=where)
        return Work(started, outputs)


class _Where:
    """One collective call: its name, the user's line and its timeout, for errors."""

    def __init__(self, name, line, timeout, outputs=()):
        self.name, self.line, self.timeout = name, line, timeout
        self.outputs = outputs

    def signature(self) -> str:
        """What every rank of a group must agree on: the collective and its tensors."""
        if self.name in _SHAPES_MAY_DIFFER:
            return self.name
        return f"{self.name}({', '.join(f'{t.dtype}{list(t.shape)}' for t in self.outputs)})"

    def error(self, message):
        return dist.DistBackendError(f"tpu_dist {self.name} (called at {self.line}): {message}")


# Roots and uneven exchanges legitimately pass different tensors on different ranks.
_SHAPES_MAY_DIFFER = {"gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv"}


def _chain(started):
    """One completion for several collectives (futures, finish steps or None)."""
    futures = [s for s in started if isinstance(s, torch._C.Future)]
    finishes = [s for s in started if callable(s) and not isinstance(s, torch._C.Future)]
    if not futures and not finishes:
        return None

    def finish():
        for f in futures:
            f.wait()
        for f in finishes:
            f()
    return finish
