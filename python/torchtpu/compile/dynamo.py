"""The Dynamo backend: ``torch.compile(model_or_fn, backend="tpu")``.

Dynamo turns Python into FX graphs (graph breaks run eagerly in between); AOT autograd turns each
into forward and backward graphs of ATen ops (PyTorch's core decompositions only for ops without a
tpu kernel); each of those becomes one XLA program (``CapturedGraph``), with the nodes that
cannot join it run eagerly in between (``partition``).
"""

import functools
import itertools
import re

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from .. import _C
from . import direct, partition
from .captured_graph import NeedsEager

# Ops a capture found it could not record (a lowering that falls back to the CPU for some
# arguments): they run eagerly in every graph from then on.
_eager_ops = set()
_graph_numbers = itertools.count()
_guard_failures_seen = {}


def _on_tpu_only(decomposition):
    """``decomposition`` for calls with a tpu tensor argument. Other calls run the op as it is:
    they run eagerly on their own device, whose kernel is the reference (PyTorch's decomposition
    of ``_scaled_dot_product_flash_attention_for_cpu`` gives wrong gradients on CPU tensors)."""

    @functools.wraps(decomposition)
    def on_tpu(*args, **kwargs):
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        if not any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in leaves):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return on_tpu


@functools.cache
def _decompositions() -> dict:
    table = torch._decomp.core_aten_decompositions()
    return {
        op: _on_tpu_only(fn)
        for op, fn in table.items()
        if not (isinstance(op, torch._ops.OpOverload) and partition.has_tpu_kernel(op))
    }


def _user_line(gm: torch.fx.GraphModule) -> str:
    """Where the graph's code starts in the user's source: "train.py:42 in forward"."""
    for n in gm.graph.nodes:
        trace = n.meta.get("stack_trace")
        if trace:
            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
            if frames:
                path, line, fn = frames[-1]
                return f"{path.rsplit('/', 1)[-1]}:{line} in {fn}"
    return "?"


class _Graph:
    """One AOT graph (forward, backward or inference) as compiled programs and eager nodes."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, saved_from=None):
        self.gm = gm
        self.name = name
        self.saved_from = saved_from
        self.run = partition.build(gm, name, _eager_ops, saved_from)

    def __call__(self, *args):
        while True:
            try:
                return self.run(*args)
            except NeedsEager as e:
                if e.node.target in _eager_ops:
                    raise
                _eager_ops.add(e.node.target)
                self.run = partition.build(self.gm, self.name, _eager_ops, self.saved_from)


def _note_dynamo_recompiles() -> None:
    """When Dynamo compiles a frame again, counts one recompile with the guard failures that
    caused it: each cached graph of the frame failed one (listed as Dynamo's recompile log does)."""
    from torch._dynamo.utils import guard_failures

    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None or not compile_id.frame_compile_id:
        return  # a first compile
    prefix = f"{compile_id.frame_id}/"
    for code, reasons in list(guard_failures.items()):
        seen = _guard_failures_seen.get(code, 0)
        if seen > len(reasons):  # torch._dynamo.reset() cleared them
            seen = 0
        _guard_failures_seen[code] = len(reasons)
        new = [r for r in reasons[seen:] if r.startswith(prefix)]
        if new:
            where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
            _C._record_recompile(f"torch.compile of {code.co_name} ({where}) recompiled: " + "; ".join(new[:10]))
            return
    _C._record_recompile(f"torch.compile recompiled frame {compile_id} (no guard failure recorded)")


def _saved_outputs_start():
    """In a forward graph AOT autograd is compiling, where the outputs it saves for the backward
    begin (after effect tokens, written inputs, the user's outputs and an RNG offset)."""
    context = torch._guards.TracingContext.try_get()
    meta = context.fw_metadata if context is not None else None
    return None if meta is None else len(meta.tokens) + meta.num_forward


def _compiler(kind: str, user_line: str):
    def compile_graph(gm, example_inputs):
        name = f"torch.compile graph {next(_graph_numbers)} ({kind}, {user_line})"
        return make_boxed_func(_Graph(gm, name, _saved_outputs_start() if kind == "forward" else None))

    return compile_graph


def _through_aot_autograd(gm, example_inputs, line):
    return aot_autograd(
        fw_compiler=_compiler("forward", line),
        bw_compiler=_compiler("backward", line),
        inference_compiler=_compiler("inference", line),
        decompositions=_decompositions(),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The ``backend="tpu"`` entry point Dynamo calls with each graph it captures."""
    _note_dynamo_recompiles()
    if all(n.op in ("placeholder", "output") for n in gm.graph.nodes):
        return gm.forward  # no op to compile (Dynamo sends such graphs when it resumes a frame)
    line = _user_line(gm)
    plan = direct.Plan(gm)
    if plan.refused:
        return _through_aot_autograd(gm, example_inputs, line)
    name = f"torch.compile graph {next(_graph_numbers)} (no autograd, {line})"
    return direct.DirectGraph(plan, name, lambda args: _through_aot_autograd(gm, list(args), line))
