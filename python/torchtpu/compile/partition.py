"""Splitting an FX graph into the parts that become compiled programs and the nodes that run eagerly.

A node joins a program when it is an ATen op with a tpu kernel (a lowering, or a composite kernel
made of lowered ops) whose tensor results live on tpu. Everything else runs eagerly between the
programs, in graph order: ops without a lowering (through the counted CPU fallback), arithmetic on
CPU tensors (an optimizer's step count), and Python-level nodes.
"""

import operator

import torch
from torch.fx.passes.split_module import split_module

from . import buckets
from .captured_graph import CapturedGraph

_KERNEL_KEYS = ("PrivateUse1", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
_aten = torch.ops.aten
_SIZE_QUERIES = {_aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int, _aten.sym_storage_offset.default}


def has_tpu_kernel(op: torch._ops.OpOverload) -> bool:
    name = op.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _KERNEL_KEYS)


def _tensors(val) -> list:
    return [v for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]


def _on_tpu(val) -> bool:
    """Whether every tensor in a node's example value is a dense tpu tensor (and there is at
    least one): a program's values are dense (a sparse gradient is made eagerly)."""
    tensors = _tensors(val)
    return bool(tensors) and all(t.device.type == "tpu" and t.layout == torch.strided for t in tensors)


def _reads_sparse(node: torch.fx.Node) -> bool:
    return any(t.layout != torch.strided for a in node.all_input_nodes for t in _tensors(a.meta.get("val")))


def joins_program(node: torch.fx.Node, eager_ops) -> bool:
    if node.op == "call_function" and isinstance(node.meta.get("val"), (torch.SymInt, int)):
        # size queries and arithmetic on them are plain ints while capturing; an int read from a
        # tensor's data (item) is not
        return not isinstance(node.target, torch._ops.OpOverload) or node.target in _SIZE_QUERIES
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target in eager_ops or not has_tpu_kernel(node.target) or _reads_sparse(node):
        return False
    return _on_tpu(node.meta.get("val"))


def _hoist_eager_prologue(gm, joins) -> None:
    """Moves the eager nodes that need no program result (an optimizer's step counts and bias
    corrections, computed on the CPU) before the first program node, so that they do not cut
    the graph into many parts. Mutating nodes keep their place: later nodes read the old value."""
    hoisted = set()
    anchor = None
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            anchor = n
            continue
        if n.op == "output" or joins[n]:
            continue
        mutates = isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
        inputs_ready = all(a.op in ("placeholder", "get_attr") or a in hoisted for a in n.all_input_nodes)
        if not mutates and inputs_ready:
            hoisted.add(n)
            if anchor is not None and anchor.next is not n:
                anchor.append(n)
            anchor = n
    gm.graph.lint()
    gm.recompile()


def _sink_eager_epilogue(gm, joins) -> None:
    """Moves eager writes to inputs (copies into an optimizer's CPU step counts) after the last
    program node, when no program node after them reads what they write."""
    nodes = list(gm.graph.nodes)
    output = nodes[-1]
    for i, n in enumerate(nodes[:-1]):
        if n.op != "call_function" or joins[n] or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if not n.target._schema.is_mutable or n.users:
            continue
        schema_args = n.target._schema.arguments
        written = {a for a, arg in zip(n.args, schema_args) if arg.alias_info and arg.alias_info.is_write}
        later_readers = [m for m in nodes[i + 1:-1] if joins.get(m) and written & set(m.all_input_nodes)]
        if not later_readers:
            output.prepend(n)
    gm.graph.lint()
    gm.recompile()


def build(gm: torch.fx.GraphModule, name: str, eager_ops, saved_from=None):
    """``gm`` as a callable: one program (padded to buckets when its sizes are dynamic) when every
    node joins; else split into parts. ``saved_from``: see buckets.build."""
    return buckets.unpad_saved(gm, _build(gm, name, eager_ops, saved_from))


def _build(gm, name, eager_ops, saved_from):
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    joins = {}
    for n in compute:
        if n.target is operator.getitem and n.args[0] in joins:
            joins[n] = joins[n.args[0]]  # a multi-output op's results go where the op goes
        else:
            joins[n] = joins_program(n, eager_ops)
    if all(joins.values()):
        return buckets.build(gm, name, saved_from) or CapturedGraph(gm, name)
    _hoist_eager_prologue(gm, joins)
    _sink_eager_epilogue(gm, joins)
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]

    part, last, ids = -1, None, {}
    for n in compute:
        if joins[n] != last:
            part, last = part + 1, joins[n]
        ids[n] = part
    split = split_module(gm, None, lambda n: ids[n], keep_original_order=True)
    device_parts = {ids[n] for n in compute if joins[n]}
    for child_name, child in list(split.named_children()):
        if int(child_name.rsplit("_", 1)[1]) in device_parts:
            del split._modules[child_name]
            part = f"{name} part {child_name}"
            object.__setattr__(split, child_name, buckets.build(child, part) or CapturedGraph(child, part))
    return split
