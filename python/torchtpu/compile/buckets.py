"""Dynamic sizes padded up to buckets, so that a graph compiles once per bucket, not per size.

A graph Dynamo traced with symbolic sizes (``dynamic=True``, ``torch._dynamo.mark_dynamic``, or
automatically after a size changed) runs with every dynamic size padded up to its bucket: tensor
inputs are zero-padded along their dynamic dimensions, outputs are views of the valid part. The
padded part must never reach a valid result, so the graph is rewritten first:

- reductions and contractions over a padded dimension (sum, mean, amax/amin, softmax,
  log_softmax, matmuls, a LayerNorm's backward, an embedding's backward) read the padded part
  masked out (``where(index < size, x, identity)``; means divide by the true count);
- losses over padded rows (``nll_loss``, hence ``cross_entropy``) see the padded targets as
  ``ignore_index``;
- the true sizes reach the program as runtime inputs, so one program serves every size of a
  bucket.

Ops whose treatment of the padded part is not known here (a convolution or sort over a dynamic
dimension, a BatchNorm over a dynamic batch, an input written in place) make the graph run at its
exact sizes instead, one program per size, with the reason recorded.
"""

import functools
import math
import operator

import sympy
import torch
from torch.utils import _pytree as pytree

from .. import _C
from . import options
from .captured_graph import CapturedGraph

aten = torch.ops.aten

def bucket(n: int) -> int:
    """The size a dynamic size ``n`` runs at (see torchtpu.compile_options)."""
    buckets = options["buckets"]
    if buckets is None:
        return max(8, 1 << max(0, n - 1).bit_length())
    return next((b for b in buckets if b >= n), n)


# ---------------------------------------------------------------- analysis of the graph

_VIEWS = {aten.t.default, aten.transpose.int, aten.permute.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.clone.default,
          aten.detach.default, aten.alias.default, aten._to_copy.default, aten.view.default,
          aten._unsafe_view.default, aten.reshape.default}
_REDUCTIONS = {aten.sum.dim_IntList: 0.0, aten.sum.default: 0.0, aten.amax.default: -math.inf,
               aten.amin.default: math.inf, aten.mean.dim: 0.0, aten.mean.default: 0.0}
_ROW_WISE = {aten._softmax.default, aten._log_softmax.default, aten._softmax_backward_data.default,
             aten._log_softmax_backward_data.default, aten.native_layer_norm.default,
             aten.embedding.default, aten._native_batch_norm_legit_no_training.default}
_CONTRACTIONS = {aten.mm.default: 2, aten.bmm.default: 3, aten.addmm.default: 2}
_SCALAR_TO_TENSOR = {aten.div.Scalar: aten.div.Tensor, aten.mul.Scalar: aten.mul.Tensor,
                     aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor}
_MASKED_ARGS = {aten.nll_loss_forward.default, aten.nll_loss_backward.default,
                aten.native_layer_norm_backward.default, aten.embedding_dense_backward.default}


class NotBucketable(Exception):
    pass


def _exprs(val):
    """The size expressions (sympy) of a tensor example value."""
    return [s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s) for s in val.shape]


def _padded_dims(node, symbols):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return []
    return [d for d, e in enumerate(_exprs(val)) if e.free_symbols & symbols]


def _dims_arg(node, rank):
    dims = node.args[1] if len(node.args) > 1 else None
    if dims is None or dims == []:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return [d % rank for d in dims]


class _Rewriter:
    """Plans the masks over the whole graph (raising NotBucketable for unknown cases) before
    changing anything, then inserts them."""

    def __init__(self, gm, symbol_nodes):
        self.gm, self.graph = gm, gm.graph
        self.symbol_nodes = symbol_nodes  # symbol -> its SymInt placeholder (the padded size at run)
        self.symbols = set(symbol_nodes)
        self.sizes = {}  # symbol -> placeholder holding its true size (added)
        self.actions = []
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.last_placeholder = placeholders[-1]

    def rewrite(self):
        for n in list(self.graph.nodes):
            self.visit(n)
        for action in self.actions:
            action()
        self.graph.lint()
        self.gm.recompile()

    def true_size(self, expr):
        """A placeholder for the true value of a size expression (a 0-d int64 tensor at run)."""
        if expr not in self.sizes:
            with self.graph.inserting_after(self.last_placeholder):
                node = self.graph.placeholder(f"true_size_{len(self.sizes)}")
            self.last_placeholder = node
            self.sizes[expr] = node
        return self.sizes[expr]

    def masked(self, before, x, dims, fill):
        """``x`` with its padded part along ``dims`` replaced by ``fill``."""
        val = x.meta["val"]
        exprs = _exprs(val)
        with self.graph.inserting_before(before):
            for d in dims:
                (symbol,) = exprs[d].free_symbols & self.symbols
                if exprs[d] != symbol:
                    raise NotBucketable(f"{before.target} reduces a dimension of size {exprs[d]}")
                size = self.symbol_nodes[symbol]
                index = self.graph.call_function(aten.arange.default, (size,),
                                                 {"device": val.device, "dtype": torch.int64})
                valid = self.graph.call_function(aten.lt.Tensor, (index, self.true_size(symbol)))
                shape = [1] * val.dim()
                shape[d] = size
                valid = self.graph.call_function(aten.view.default, (valid, shape))
                x = self.graph.call_function(aten.where.ScalarOther, (valid, x, fill))
        return x

    def count(self, before, x, dims):
        """How many valid elements ``dims`` of ``x`` hold, as a tensor of x's dtype."""
        exprs = _exprs(x.meta["val"])
        static = 1
        total = None
        with self.graph.inserting_before(before):
            for d in dims:
                padded = exprs[d].free_symbols & self.symbols
                if not padded:
                    static *= int(exprs[d])
                    continue
                n = self.true_size(next(iter(padded)))
                total = n if total is None else self.graph.call_function(aten.mul.Tensor, (total, n))
            total = self.graph.call_function(aten._to_copy.default, (total,), {"dtype": x.meta["val"].dtype})
            return self.graph.call_function(aten.mul.Scalar, (total, static))

    def visit(self, n):
        if n.op != "call_function":
            return
        self.value_uses_of_sizes(n)
        inputs_padded = {a: _padded_dims(a, self.symbols) for a in n.all_input_nodes}
        if not any(inputs_padded.values()) or n.target is operator.getitem:
            return
        t = n.target
        if isinstance(t, torch._ops.OpOverload) and torch.Tag.pointwise in t.tags:
            return
        if t in _VIEWS:
            return self.check_view(n)
        if t in _ROW_WISE:
            self.check_row_wise(n)
        elif t not in _REDUCTIONS and t not in _CONTRACTIONS and t not in _MASKED_ARGS:
            raise NotBucketable(f"{t} reads a dynamic dimension")
        self.actions.append(lambda: self.apply(n))

    def apply(self, n):
        t = n.target
        if t in _REDUCTIONS:
            return self.reduction(n)
        if t in _CONTRACTIONS:
            return self.contraction(n)
        if t in (aten._softmax.default, aten._log_softmax.default):
            return self.softmax(n)
        if t in (aten.nll_loss_forward.default, aten.nll_loss_backward.default):
            return self.loss(n)
        if t is aten.native_layer_norm_backward.default:
            return self.layer_norm_backward(n)
        if t is aten.embedding_dense_backward.default:
            return self.mask_arg(n, 0, _padded_dims(n.args[0], self.symbols), 0.0)

    def value_uses_of_sizes(self, n):
        """A size used as a number (a mean's backward divides by the element count) must be the
        true size: the op takes it as a runtime tensor instead."""
        if not isinstance(n.target, torch._ops.OpOverload):
            return
        for i, (a, arg) in enumerate(zip(n.args, n.target._schema.arguments)):
            if not (isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.SymInt)):
                continue
            if str(arg.type) in ("int", "SymInt", "int?", "SymInt?"):
                continue  # a size: the padded one is right
            if n.target not in _SCALAR_TO_TENSOR:
                raise NotBucketable(f"{n.target} uses a dynamic size as a value")
            self.actions.append(lambda n=n, i=i, a=a: self.use_true_value(n, i, a))

    def use_true_value(self, n, i, a):
        args = list(n.args)
        args[i] = self.true_size(a.meta["val"].node.expr)
        n.args = tuple(args)
        n.target = _SCALAR_TO_TENSOR[n.target]

    def check_view(self, n):
        src = n.args[0]
        if n.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
            before, after = _exprs(src.meta["val"]), _exprs(n.meta["val"])
            padded_in = [d for d, e in enumerate(before) if e.free_symbols & self.symbols]
            padded_out = [d for d, e in enumerate(after) if e.free_symbols & self.symbols]
            # the padded part stays a suffix only while the dynamic dimension stays outermost
            if padded_in != [0] or padded_out != [0]:
                raise NotBucketable(f"{n.target} reshapes a dynamic dimension that is not the first")

    def reduction(self, n):
        x = n.args[0]
        rank = x.meta["val"].dim()
        dims = _dims_arg(n, rank) if n.target not in (aten.sum.default, aten.mean.default) else list(range(rank))
        padded = [d for d in dims if d in _padded_dims(x, self.symbols)]
        if not padded:
            return
        fill = _REDUCTIONS[n.target]
        masked = self.masked(n, x, padded, fill)
        if n.target in (aten.mean.dim, aten.mean.default):
            keepdim = n.target is aten.mean.dim and len(n.args) > 2 and n.args[2]
            with self.graph.inserting_before(n):
                total = self.graph.call_function(aten.sum.dim_IntList, (masked, dims, keepdim))
            count = self.count(n, x, dims)
            with self.graph.inserting_before(n):
                mean = self.graph.call_function(aten.div.Tensor, (total, count))
            mean.meta = dict(n.meta)
            n.replace_all_uses_with(mean)
            self.graph.erase_node(n)
            return
        n.replace_input_with(x, masked)

    def contraction(self, n):
        first = 1 if n.target is aten.addmm.default else 0
        a, b = n.args[first], n.args[first + 1]
        rank = _CONTRACTIONS[n.target]
        k_a, k_b = rank - 1, rank - 2  # the contracted dimension of each operand
        if k_a in _padded_dims(a, self.symbols) or k_b in _padded_dims(b, self.symbols):
            self.mask_arg(n, first, [k_a], 0.0)
            self.mask_arg(n, first + 1, [k_b], 0.0)

    def check_row_wise(self, n):
        x = n.args[0]
        padded = _padded_dims(x, self.symbols)
        rank = x.meta["val"].dim()
        if n.target in (aten.embedding.default, aten._native_batch_norm_legit_no_training.default):
            return  # row by row: an embedding's lookups, an eval BatchNorm's running statistics
        if n.target is aten.native_layer_norm.default:
            normalized = list(range(rank - len(n.args[1]), rank))
        else:  # softmax(x, dim, ...) or softmax_backward_data(grad, output, dim, ...)
            normalized = [(n.args[2] if "backward" in n.target.name() else n.args[1]) % rank]
        softmax = n.target in (aten._softmax.default, aten._log_softmax.default)
        if set(normalized) & set(padded) and not softmax:
            raise NotBucketable(f"{n.target} normalizes over a dynamic dimension")

    def softmax(self, n):
        rank = n.args[0].meta["val"].dim()
        dim = n.args[1] % rank
        if dim in _padded_dims(n.args[0], self.symbols):
            self.mask_arg(n, 0, [dim], -math.inf)

    def loss(self, n):
        target_index = 1 if n.target is aten.nll_loss_forward.default else 2
        target = n.args[target_index]
        padded = _padded_dims(target, self.symbols)
        if padded:
            ignore_index = n.args[target_index + 3]
            self.mask_arg(n, target_index, padded, ignore_index)

    def layer_norm_backward(self, n):
        # (grad_out, input, normalized_shape, mean, rstd, weight, bias, mask): sums over rows
        rows = _padded_dims(n.args[0], self.symbols)
        self.mask_arg(n, 0, rows, 0.0)
        self.mask_arg(n, 1, _padded_dims(n.args[1], self.symbols), 0.0)

    def mask_arg(self, n, index, dims, fill):
        if dims:
            args = list(n.args)
            args[index] = self.masked(n, args[index], dims, fill)
            n.args = tuple(args)


def _symbolic_inputs(gm):
    """{placeholder index: size expression} of the graph's SymInt inputs."""
    out = {}
    for i, n in enumerate(p for p in gm.graph.nodes if p.op == "placeholder"):
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt) and v.node.expr.free_symbols:
            out[i] = v.node.expr
    return out


def _symbol_nodes(gm, inputs):
    """{symbol: the placeholder whose value it is}, for symbols given as plain inputs."""
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    return {e: placeholders[i] for i, e in inputs.items() if isinstance(e, sympy.Symbol)}


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

    def __init__(self, gm: torch.fx.GraphModule, name: str, symbolic_inputs: dict):
        self.name = name
        self.symbolic_inputs = symbolic_inputs  # placeholder index -> size expression
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.input_exprs = [_exprs(p.meta["val"]) if isinstance(p.meta.get("val"), torch.Tensor) else None
                            for p in placeholders]
        output = next(n for n in gm.graph.nodes if n.op == "output")
        self.output_exprs = [
            (_exprs(a.meta["val"]) if isinstance(a.meta.get("val"), torch.Tensor)
             else a.meta["val"].node.expr if isinstance(a.meta.get("val"), torch.SymInt) else None)
            if isinstance(a, torch.fx.Node) else None
            for a in pytree.tree_leaves(output.args[0])]
        rewriter = _Rewriter(gm, _symbol_nodes(gm, symbolic_inputs))
        rewriter.rewrite()
        self.size_exprs = list(rewriter.sizes)  # what the added true-size placeholders hold, in order
        self.graph = CapturedGraph(gm, name)

    def _true_sizes(self, args):
        true = {}
        for i, expr in self.symbolic_inputs.items():
            if isinstance(expr, sympy.Symbol):
                true[expr] = args[i]
        for i, expr in self.symbolic_inputs.items():
            if not expr.free_symbols <= true.keys():
                symbol, value = _solve(expr, args[i])
                true[symbol] = value
        return true

    def __call__(self, *args):
        true = self._true_sizes(args)
        padded = {s: bucket(v) for s, v in true.items()}
        bound = []
        for i, (a, exprs) in enumerate(zip(args, self.input_exprs)):
            if exprs is not None:
                a = _pad(a, [int(e.subs(padded)) for e in exprs])
            elif i in self.symbolic_inputs:
                a = int(self.symbolic_inputs[i].subs(padded))
            bound.append(a)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("tpu"))
        sizes = [torch.tensor(int(e.subs(true)), dtype=torch.int64) for e in self.size_exprs]
        if sizes:  # the true sizes, as runtime inputs, in one transfer
            sizes = list(torch.stack(sizes).to(device).unbind())
        out = self.graph(*bound, *sizes)
        flat, spec = pytree.tree_flatten(out)
        for i, exprs in enumerate(self.output_exprs):
            if isinstance(exprs, list):
                flat[i] = _narrow(flat[i], [int(e.subs(true)) for e in exprs])
            elif exprs is not None:
                flat[i] = int(exprs.subs(true))
        return pytree.tree_unflatten(flat, spec)


def _pad(t, sizes):
    """``t`` zero-padded at the end of each dimension up to ``sizes`` (one small op). Always a new
    tensor, also at a bucket's exact size: which inputs share storage must not depend on the size."""
    widths = []
    for have, want in reversed(list(zip(t.shape, sizes))):
        widths += [0, want - have]
    return torch.constant_pad_nd(t, widths, 0)


def _narrow(t, sizes):
    for d, n in enumerate(sizes):
        if t.shape[d] != n:
            t = t.narrow(d, 0, n)
    return t


def build(gm: torch.fx.GraphModule, name: str):
    """A BucketedGraph for a graph with dynamic sizes, else None (the reason is recorded)."""
    inputs = _symbolic_inputs(gm)
    if not inputs:
        return None
    try:
        if _mutates_inputs(gm):
            raise NotBucketable("it writes to an input in place")
        return BucketedGraph(gm, name, inputs)
    except NotBucketable as e:
        _C._record_recompile(f"{name}: dynamic sizes run unpadded, one program per size, because {e}")
        return None
