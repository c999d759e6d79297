"""Dynamic sizes padded up to buckets, so that a graph compiles once per bucket, not per size.

A graph Dynamo traced with symbolic sizes (``dynamic=True``, ``torch._dynamo.mark_dynamic``, or
automatically after a size changed) runs with every dynamic size of its input tensors padded up
to its bucket: inputs are zero-padded, outputs are the valid part. The padded part must never
reach a valid result, so the graph is rewritten first:

- reductions and contractions over a padded dimension (sum, mean, amax/amin, softmax,
  log_softmax and their backwards, matmuls, a LayerNorm's backward, an embedding's backward)
  read the padded part masked out (``where(index < size, x, identity)``; means divide by the
  true count);
- losses over padded rows (``nll_loss``, hence ``cross_entropy``) see the padded targets as
  ``ignore_index``; ``constant_pad_nd`` of a dynamic dimension sets its padded part to the value;
- ops that depend on the index itself (``tril``/``triu``, ``arange``, slicing, ``cat``) are allowed
  where an index means the same position padded or not, and so is indexing a dynamic dimension by
  its own positions (``mask[batch, arange(n)]``, how Hugging Face reads an attention mask);
- the true sizes reach the program as runtime inputs, so one program serves every size of a
  bucket.

Each dimension carries its factors (see "layouts" below), so a dynamic dimension merged with
another one by a reshape (``[B, S, D] -> [B*S, D]`` around every Linear) is padded, masked and
sliced per factor. Ops whose treatment of the padded part is not known here (a convolution or
sort over a dynamic dimension, a BatchNorm over a dynamic batch, ops pairing sizes Dynamo could
not prove equal, an input written in place) make the graph run at its exact sizes instead, one
program per size, with the reason recorded.
"""

import functools

import sympy
import torch
from torch.utils import _pytree as pytree

from .. import _C
from .captured_graph import CapturedGraph
from .layout import factor_list, sizes, value
from .padding import bucket, narrow, pad
from .rewriter import SAVED_PADDED, NotBucketable, Rewriter, saved_padded_layout, tensor_exprs

aten = torch.ops.aten


def _symbolic_inputs(gm):
    """{placeholder index: size expression} of the graph's SymInt inputs."""
    out = {}
    for i, n in enumerate(p for p in gm.graph.nodes if p.op == "placeholder"):
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt) and v.node.expr.free_symbols:
            out[i] = v.node.expr
    return out


def _tensor_size_symbols(gm):
    """The symbols in the sizes of input tensors: the ones padded. An int argument Dynamo made
    symbolic (an index, a count) keeps its value: the program is captured per value, like any int."""
    return {s for p in gm.graph.nodes if p.op == "placeholder" and isinstance(p.meta.get("val"), torch.Tensor)
            for e in tensor_exprs(p.meta["val"]) for s in e.free_symbols}


def _symbol_nodes(gm, inputs, shape_symbols):
    """{symbol: the node whose value it is}: the placeholder of a symbol given as a plain input,
    else the size of an input tensor that has it (a graph split off a larger one may get only
    the tensor)."""
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    nodes = {e: placeholders[i] for i, e in inputs.items() if isinstance(e, sympy.Symbol)}
    with gm.graph.inserting_after(placeholders[-1]):
        for symbol, (i, d) in shape_symbols.items():
            nodes[symbol] = gm.graph.call_function(aten.sym_size.int, (placeholders[i], d))
    return nodes


def _shape_symbols(gm, inputs):
    """{symbol: (placeholder index, dimension)} for the symbols no plain input gives that are
    whole dimensions of input tensors arriving at their true sizes."""
    given = {e for e in inputs.values() if isinstance(e, sympy.Symbol)}
    found = {}
    for i, p in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        if isinstance(p.meta.get("val"), torch.Tensor) and saved_padded_layout(p) is None:
            for d, e in enumerate(tensor_exprs(p.meta["val"])):
                if isinstance(e, sympy.Symbol) and e not in given:
                    found.setdefault(e, (i, d))
    return found


@functools.lru_cache(maxsize=4096)
def _solve(expr, value):
    """The symbol's value when the one-symbol ``expr`` equals ``value`` (an input like 4*s0)."""
    (symbol,) = expr.free_symbols
    roots = [r for r in sympy.solve(sympy.Eq(expr, value), symbol) if r.is_integer and r > 0]
    if len(roots) != 1:
        raise NotBucketable(f"cannot recover {symbol} from {expr} = {value}")
    return symbol, int(roots[0])


def _mutates_inputs(gm):
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable:
            return True
    return False


class BucketedGraph:
    """Runs a dynamic-size graph padded to its buckets (see the module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, symbolic_inputs: dict, saved_from=None):
        self.name = name
        self.symbolic_inputs = symbolic_inputs  # placeholder index -> size expression
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.arrive_padded = [saved_padded_layout(p) is not None for p in placeholders]
        self.padded = _tensor_size_symbols(gm)
        self.shape_symbols = _shape_symbols(gm, symbolic_inputs)
        rewriter = Rewriter(gm, _symbol_nodes(gm, symbolic_inputs, self.shape_symbols), self.padded)
        rewriter.plan()
        # the layouts of the inputs that run padded (a parameter's static layout needs nothing)
        self.input_layouts = [rewriter.final(rewriter.layout(p)) if isinstance(p.meta.get("val"), torch.Tensor) else None
                              for p in placeholders]
        self.input_layouts = [layout if layout is not None and _is_dynamic(layout, self.padded) else None
                              for layout in self.input_layouts]
        output = next(n for n in gm.graph.nodes if n.op == "output")
        self.output_layouts = [  # a tensor's layout, a size's expression, or None
            (rewriter.final(rewriter.layout(a)) if isinstance(a.meta.get("val"), torch.Tensor)
             else a.meta["val"].node.expr if isinstance(a.meta.get("val"), torch.SymInt) else None)
            if isinstance(a, torch.fx.Node) else None
            for a in pytree.tree_leaves(output.args[0])]
        self.keep_padded = [False] * len(self.output_layouts)
        if saved_from is not None:  # a forward graph: what it saves for its backward stays padded
            for i, a in enumerate(pytree.tree_leaves(output.args[0])):
                if i >= saved_from and isinstance(self.output_layouts[i], list):
                    self.keep_padded[i] = True
                    setattr(a.meta["val"], SAVED_PADDED, self.output_layouts[i])
        rewriter.rewrite()
        self.size_exprs = list(rewriter.sizes)  # what the added true-size placeholders hold, in order
        self.graph = CapturedGraph(gm, name)

    def __call__(self, *args):
        true, padded = _true_and_padded(self.symbolic_inputs, self.padded, args, self.shape_symbols)
        bound = []
        for i, (a, layout) in enumerate(zip(args, self.input_layouts)):
            if layout is not None and not (self.arrive_padded[i] and list(a.shape) == sizes(layout, padded)[0]):
                a = pad(a, layout, true, padded)
            elif i in self.symbolic_inputs:
                a = value(self.symbolic_inputs[i], frozenset(padded.items()))
            bound.append(a)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("tpu"))
        true_sizes = [torch.tensor(value(e, frozenset(true.items())), dtype=torch.int64) for e in self.size_exprs]
        if true_sizes:  # the true sizes, as runtime inputs, in one transfer
            true_sizes = list(torch.stack(true_sizes).to(device).unbind())
        out = self.graph(*bound, *true_sizes)
        flat, spec = pytree.tree_flatten(out)
        for i, layout in enumerate(self.output_layouts):
            if isinstance(layout, list):
                if not self.keep_padded[i]:
                    flat[i] = narrow(flat[i], layout, true, padded)
            elif layout is not None:
                flat[i] = value(layout, frozenset(true.items()))
        return pytree.tree_unflatten(flat, spec)


def _is_dynamic(layout, padded_symbols):
    return any(f.free_symbols & padded_symbols for dim in layout for f in factor_list(dim))


def _true_and_padded(symbolic_inputs, padded_symbols, args, shape_symbols=None):
    """Each symbol's value in this call, and the value it runs at (its bucket when padded)."""
    true = {}
    for i, expr in symbolic_inputs.items():
        if isinstance(expr, sympy.Symbol):
            true[expr] = args[i]
    for symbol, (i, d) in (shape_symbols or {}).items():
        true[symbol] = args[i].shape[d]
    for i, expr in symbolic_inputs.items():
        if not expr.free_symbols <= true.keys():
            symbol, solved = _solve(expr, args[i])
            true[symbol] = solved
    return true, {s: bucket(v) if s in padded_symbols else v for s, v in true.items()}


class _Unpadding:
    """A backward run at exact sizes whose forward kept saved activations padded: cuts them to
    their exact sizes first."""

    def __init__(self, run, gm, layouts):
        self.run, self.layouts = run, layouts  # placeholder index -> the forward's layout
        self.symbolic_inputs, self.padded = _symbolic_inputs(gm), _tensor_size_symbols(gm)

    def __call__(self, *args):
        true, padded = _true_and_padded(self.symbolic_inputs, self.padded, args)
        args = list(args)
        for i, layout in self.layouts.items():
            if list(args[i].shape) == sizes(layout, padded)[0]:
                args[i] = narrow(args[i], layout, true, padded)
        return self.run(*args)


def unpad_saved(gm, run):
    """``run`` (a backward's callable), taking the activations its forward saved padded."""
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    layouts = {i: saved_padded_layout(p) for i, p in enumerate(placeholders) if saved_padded_layout(p) is not None}
    return run if not layouts or isinstance(run, BucketedGraph) else _Unpadding(run, gm, layouts)


def _copy(gm):
    """``gm`` with a graph of its own (the rewrite must not touch a graph that may be split and
    captured again), sharing the nodes' metadata."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def build(gm: torch.fx.GraphModule, name: str, saved_from=None):
    """A BucketedGraph for a graph with dynamic sizes, else None (the reason is recorded).
    ``saved_from``: in a forward graph, where the outputs saved for its backward begin."""
    inputs = _symbolic_inputs(gm)
    if not inputs or not _tensor_size_symbols(gm):
        return None
    try:
        if _mutates_inputs(gm):
            raise NotBucketable("it writes to an input in place")
        return BucketedGraph(_copy(gm), name, inputs, saved_from)
    except NotBucketable as e:
        _C._record_recompile(f"{name}: dynamic sizes run unpadded, one program per size, because {e}")
        return None
