"""The functional collectives (``torch.ops._c10d_functional``) on tpu tensors.

DTensor, tensor parallelism and compiled graphs call these ops rather than the ProcessGroup
methods. Their stock kernels call into the C++ group, which cannot reach a Python group's
``_allgather_base`` and friends, so for tpu tensors they run here, through the group's methods.
Each returns finished results (the collective has been issued), so ``wait_tensor`` has nothing
left to wait for.
"""

import torch
from torch._C import _distributed_c10d as c10d

from .process_group import REDUCE_OPS, options


_lib = None


def _group(name):
    return c10d._resolve_process_group(name)


def _reduce(op: str):
    return REDUCE_OPS[op.lower()]


def all_reduce_(input, reduce_op, group_name):
    _group(group_name).allreduce([input], options(c10d.AllreduceOptions, reduceOp=_reduce(reduce_op))).wait()
    return input


def all_reduce(input, reduce_op, group_name):
    return all_reduce_(input.clone(memory_format=torch.contiguous_format), reduce_op, group_name)


def all_reduce_coalesced_(inputs, reduce_op, group_name):
    for t in inputs:
        all_reduce_(t, reduce_op, group_name)
    return inputs


def all_reduce_coalesced(inputs, reduce_op, group_name):
    return [all_reduce(t, reduce_op, group_name) for t in inputs]


def all_gather_into_tensor_out(input, group_size, group_name, *, out):
    _group(group_name)._allgather_base(out, input.contiguous()).wait()
    return out


def all_gather_into_tensor(input, group_size, group_name):
    out = input.new_empty((input.shape[0] * group_size, *input.shape[1:]) if input.dim() else (group_size,))
    return all_gather_into_tensor_out(input, group_size, group_name, out=out)


def all_gather_into_tensor_coalesced(inputs, group_size, group_name):
    return [all_gather_into_tensor(t, group_size, group_name) for t in inputs]


def reduce_scatter_tensor_out(input, reduce_op, group_size, group_name, *, out):
    opts = options(c10d.ReduceScatterOptions, reduceOp=_reduce(reduce_op))
    _group(group_name)._reduce_scatter_base(out, input.contiguous(), opts).wait()
    return out


def reduce_scatter_tensor(input, reduce_op, group_size, group_name):
    out = input.new_empty((input.shape[0] // group_size, *input.shape[1:]))
    return reduce_scatter_tensor_out(input, reduce_op, group_size, group_name, out=out)


def reduce_scatter_tensor_coalesced(inputs, reduce_op, group_size, group_name):
    return [reduce_scatter_tensor(t, reduce_op, group_size, group_name) for t in inputs]


def all_to_all_single(input, output_split_sizes, input_split_sizes, group_name):
    rows = sum(output_split_sizes) if output_split_sizes else input.shape[0]
    out = input.new_empty((rows, *input.shape[1:]))
    _group(group_name).alltoall_base(out, input.contiguous(), list(output_split_sizes),
                                     list(input_split_sizes), c10d.AllToAllOptions()).wait()
    return out


def broadcast_(input, src, group_name):
    _group(group_name).broadcast([input], options(c10d.BroadcastOptions, rootRank=src)).wait()
    return input


def broadcast(input, src, group_name):
    return broadcast_(input.clone(memory_format=torch.contiguous_format), src, group_name)


def register():
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("_c10d_functional", "IMPL")
    for fn in (all_reduce, all_reduce_, all_reduce_coalesced, all_reduce_coalesced_, all_gather_into_tensor,
               all_gather_into_tensor_out, all_gather_into_tensor_coalesced, reduce_scatter_tensor,
               reduce_scatter_tensor_out, reduce_scatter_tensor_coalesced, all_to_all_single, broadcast,
               broadcast_):
        _lib.impl(fn.__name__, fn, "PrivateUse1")
