"""Splitting an FX graph into the parts that become compiled programs and the nodes that run eagerly.

A node joins a program when it is an ATen op with a tpu kernel (a lowering, or a composite kernel
made of lowered ops) whose tensor results live on tpu. Everything else runs eagerly between the
programs, in graph order: ops without a lowering (through the counted CPU fallback), arithmetic on
CPU tensors (an optimizer's step count), and Python-level nodes.
"""

import operator

import torch
from torch.fx.passes.split_module import split_module

from .captured_graph import CapturedGraph

_KERNEL_KEYS = ("PrivateUse1", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def has_tpu_kernel(op: torch._ops.OpOverload) -> bool:
    name = op.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _KERNEL_KEYS)


def _on_tpu(val) -> bool:
    """Whether every tensor in a node's example value is on tpu (and there is at least one)."""
    tensors = [v for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "tpu" for t in tensors)


def joins_program(node: torch.fx.Node, eager_ops) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target in eager_ops or not has_tpu_kernel(node.target):
        return False
    return _on_tpu(node.meta.get("val"))


def build(gm: torch.fx.GraphModule, name: str, eager_ops) -> torch.nn.Module:
    """``gm`` as a callable: one CapturedGraph when every node joins; else split into parts."""
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    joins = {}
    for n in compute:
        if n.target is operator.getitem and n.args[0] in joins:
            joins[n] = joins[n.args[0]]  # a multi-output op's results go where the op goes
        else:
            joins[n] = joins_program(n, eager_ops)
    if all(joins.values()):
        return CapturedGraph(gm, name)

    part, last, ids = -1, None, {}
    for n in compute:
        if joins[n] != last or not joins[n]:
            part, last = part + 1, joins[n]
        ids[n] = part
    split = split_module(gm, None, lambda n: ids[n], keep_original_order=True)
    device_parts = {ids[n] for n in compute if joins[n]}
    for child_name, child in list(split.named_children()):
        if int(child_name.rsplit("_", 1)[1]) in device_parts:
            del split._modules[child_name]
            object.__setattr__(split, child_name, CapturedGraph(child, f"{name} part {child_name}"))
    return split
