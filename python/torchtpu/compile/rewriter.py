"""Rewriting a dynamic-size graph so that it runs padded to its buckets: each node's layout
(compile/layout.py), planned over the whole graph, then the masks the padded part needs. The
rules per op are one table, ``_RULES``; compile/buckets.py runs the rewritten graph."""

import functools
import math
import operator
from typing import NamedTuple, Optional

import sympy
import torch

from .layout import Unsplit, divides, factor_list, norm, prefix_indexed, size

aten = torch.ops.aten

# ---------------------------------------------------------------- analysis of the graph

class NotBucketable(Exception):
    pass


def tensor_exprs(val):
    """The size expressions (sympy) of a tensor example value."""
    return [s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s) for s in val.shape]


def _padded_dims(node, symbols):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return []
    return [d for d, e in enumerate(tensor_exprs(val)) if e.free_symbols & symbols]


def _dims_arg(node, rank):
    dims = node.args[1] if len(node.args) > 1 else None
    if dims is None or dims == []:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return [d % rank for d in dims]


# ---------------------------------------------------------------- planning

class _Replan(Exception):
    """A dimension's factors were learned: plan the graph again."""


_VIEWS = {aten.t.default, aten.transpose.int, aten.permute.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.clone.default,
          aten.detach.default, aten.alias.default, aten._to_copy.default, aten.view.default,
          aten._unsafe_view.default, aten.reshape.default}
_RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_REDUCTIONS = {aten.sum.dim_IntList: 0.0, aten.sum.default: 0.0, aten.amax.default: -math.inf,
               aten.amin.default: math.inf, aten.mean.dim: 0.0, aten.mean.default: 0.0}
_SOFTMAX = {aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default}
_SOFTMAX_BACKWARD = {aten._softmax_backward_data.default, aten._log_softmax_backward_data.default}
# ops along one dimension (dim argument, default -1), row-wise when that dimension is static (a
# mixture of experts' top-k routing over the experts)
_ALONG_DIM = {aten.topk.default: 2, aten.sort.default: 1}
# ops whose result at an index depends on the index itself: valid only where the index means the
# same position padded or not
_POSITIONAL = {aten.tril.default, aten.triu.default, aten.slice.Tensor, aten.select.int,
               aten.select_backward.default, aten.slice_backward.default}
_SIZE_QUERIES = {aten.sym_size.int, aten.sym_numel.default}
# new tensors whose values do not depend on the input's (only its dtype, device, or shape)
_FRESH = {aten.new_ones.default, aten.new_zeros.default, aten.new_full.default, aten.new_empty.default,
          aten.new_empty_strided.default}
_FRESH_LIKE = {aten.zeros_like.default, aten.ones_like.default, aten.full_like.default, aten.empty_like.default}
_CONTRACTIONS = {aten.mm.default: 2, aten.bmm.default: 3, aten.addmm.default: 2}
_SCALAR_TO_TENSOR = {aten.div.Scalar: aten.div.Tensor, aten.mul.Scalar: aten.mul.Tensor,
                     aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor}
_END = 2**62  # a slice "to the end"
# the arguments whose leading dimensions an op pairs up, row by row
_PAIRED_ARGS = {aten.nll_loss_forward.default: (0, 1), aten.nll_loss_backward.default: (0, 1, 2),
                aten._softmax_backward_data.default: (0, 1), aten._log_softmax_backward_data.default: (0, 1),
                aten.native_layer_norm_backward.default: (0, 1, 3, 4),
                aten.embedding_dense_backward.default: (0, 1)}


class _Rule(NamedTuple):
    """How an op with a dynamic dimension among its inputs runs padded. ``layout``: the
    Rewriter method giving its result's layout; ``row_wise``: it must not reduce over a padded
    dimension (check_row_wise); ``pairs_rows``: the rows of its arguments pair up (pair_rows);
    ``mask``: the Rewriter method that masks its padded part, run once the whole graph is planned.
    Element-wise ops (PyTorch's pointwise tag) need no entry: they broadcast their inputs' layouts."""
    layout: str
    row_wise: bool = False
    pairs_rows: bool = False
    mask: Optional[str] = None


def _rules():
    table = {}

    def add(ops, *args, **kwargs):
        table.update(dict.fromkeys(ops, _Rule(*args, **kwargs)))

    # positions only: which are valid, no mask
    add(_VIEWS, "view_layout")
    add(_POSITIONAL, "positional_layout")
    add(_FRESH, "plain_layout")
    add(_FRESH_LIKE, "first_input_layout")
    add([aten.split.Tensor, aten.split_with_sizes.default], "split_layout")
    add([aten.cat.default], "cat_layout")
    add([aten.constant_pad_nd.default], "pad_layout")
    add([aten.index.Tensor], "index_layout")
    # reading the padded part: masked
    add(_REDUCTIONS, "result_layout", mask="reduction")
    add(_CONTRACTIONS, "result_layout", mask="contraction")
    add(_SOFTMAX | _SOFTMAX_BACKWARD, "result_layout", row_wise=True, pairs_rows=True, mask="softmax")
    add([aten.nll_loss_forward.default, aten.nll_loss_backward.default], "result_layout", pairs_rows=True, mask="loss")
    add([aten.native_layer_norm_backward.default], "result_layout", pairs_rows=True, mask="layer_norm_backward")
    add([aten.embedding_dense_backward.default], "result_layout", pairs_rows=True, mask="embedding_backward")
    # row by row, never across the padded part
    add([aten.native_layer_norm.default, aten.embedding.default, aten._native_batch_norm_legit_no_training.default],
        "result_layout", row_wise=True, pairs_rows=True)
    add(_ALONG_DIM, "result_layout", row_wise=True)
    return table


_RULES = _rules()



# A forward graph's outputs that only its backward reads (saved activations) stay padded: the
# backward takes them as they are, instead of a copy out to exact sizes and a pad back per
# tensor, each a small program compiled per size. The forward's layout is noted on the example
# value its output node and the backward's placeholder share.
SAVED_PADDED = "_torchtpu_saved_padded_layout"


def saved_padded_layout(node):
    val = node.meta.get("val")
    return getattr(val, SAVED_PADDED, None) if isinstance(val, torch.Tensor) else None


class Rewriter:
    """Plans the masks over the whole graph (raising NotBucketable for unknown cases) before
    changing anything, then inserts them."""

    def __init__(self, gm, symbol_nodes, padded):
        self.gm, self.graph = gm, gm.graph
        self.symbol_nodes = symbol_nodes  # symbol -> its SymInt placeholder (its value at run)
        self.symbols = padded  # the symbols that are padded (sizes of input tensors)
        self.sizes = {}  # symbol -> placeholder holding its true size (added)
        self.layouts = {}  # node -> its dimensions' factors (a list of them for multi-output ops)
        self.splits = {}  # an Unsplit's origin -> the factors ops gave it (or another Unsplit)
        self.actions = []
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.last_placeholder = placeholders[-1]
        self.positions = {}  # node -> the dimension along which its values are their positions

    def plan(self):
        for _ in range(64):
            self.layouts, self.actions = {}, []
            try:
                for n in list(self.graph.nodes):
                    self.visit(n)
                break
            except _Replan:
                continue
        else:
            raise NotBucketable("the layouts of its dimensions did not settle")
        self.check_sizes()

    def check_sizes(self):
        """Every dynamic size a mask may need can be computed from the size inputs: the rewrite
        that follows must not fail halfway."""
        def computable(e):
            return e.is_number or e in self.symbol_nodes or ((e.is_Add or e.is_Mul) and all(map(computable, e.args)))

        for n in self.graph.nodes:
            if isinstance(n.meta.get("val"), torch.Tensor):
                for dim in self.final(self.layout(n)):
                    for e in (*dim, size(dim)):
                        if self.dynamic(e) and not computable(e):
                            raise NotBucketable(f"no size input gives {e}")

    def rewrite(self):
        for action in self.actions:
            action()
        for node in self.symbol_nodes.values():  # sizes of input tensors no mask needed
            if node.op == "call_function" and not node.users:
                self.graph.erase_node(node)
        self.graph.lint()
        self.gm.recompile()

    def layout(self, node):
        """The factors of each dimension of ``node``'s tensor value."""
        if node in self.layouts:
            return self.layouts[node]
        if node.op == "placeholder" and saved_padded_layout(node) is not None:
            return saved_padded_layout(node)
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in self.layouts:
            return self.layouts[node.args[0]][node.args[1]]
        return self.plain_layout(node)

    def plain_layout(self, node):
        """Each dimension one factor (or as an op split one of its size since)."""
        return [self.plain(e, (node, d)) for d, e in enumerate(tensor_exprs(node.meta["val"]))]

    def plain(self, e, origin):
        """The factors of a dimension of size ``e`` that no op made: one, unless it is a product
        an op has split since."""
        if not (e.is_Mul and self.dynamic(e)):
            return (e,)
        return self.resolved(Unsplit(e, origin))

    def resolved(self, dim):
        while isinstance(dim, Unsplit) and dim.origin in self.splits:
            dim = self.splits[dim.origin]
        return dim

    def final(self, layout):
        """A layout with every dimension as its tuple of factors."""
        return [factor_list(self.resolved(dim)) for dim in layout]

    def dynamic(self, e):
        return bool(e.free_symbols & self.symbols)

    def unify(self, a, b, what):
        """The common layout of two dimensions an op pairs up; a dimension no op split yet takes
        the other's factors (and the graph is planned again)."""
        a, b = self.resolved(a), self.resolved(b)
        if a == b:
            return a
        if sympy.expand(size(a) - size(b)) == 0:
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Unsplit):
                    self.splits[x.origin] = y
                    raise _Replan()
        raise NotBucketable(f"{what} pairs dimensions laid out as {a} and {b}")

    def regroup(self, layout, out_exprs):
        """The factors of a reshape's output dimensions, from its input's factors. An Unsplit
        dimension may be split here (planned again then); one kept whole stays itself."""
        flat = []  # (factor, the Unsplit it is part of)
        for dim in map(self.resolved, layout):
            flat += [(dim.expr, dim)] if isinstance(dim, Unsplit) else [(f, None) for f in dim if f != 1]
        pieces = {}  # an Unsplit -> the factors it was split into
        out = []
        for o in out_exprs:
            taken, prod = [], sympy.Integer(1)
            while sympy.expand(prod - o) != 0:
                if not flat:
                    raise NotBucketable(f"a reshape to {out_exprs} of dimensions {layout}")
                f, whole = flat.pop(0)
                missing = sympy.cancel(o / prod)
                if not divides(f, missing):
                    part = sympy.gcd(f, missing)
                    if part == 1 or not (f.is_number or whole is not None):
                        raise NotBucketable(f"a reshape to {out_exprs} splits a dimension of {layout}")
                    flat.insert(0, (sympy.cancel(f / part), whole))
                    f = part
                if whole is not None:
                    pieces.setdefault(whole, []).append(f)
                taken.append((f, whole))
                prod *= f
            kept_whole = len(taken) == 1 and taken[0][1] is not None and taken[0][0] == taken[0][1].expr
            out.append(taken[0][1] if kept_whole else norm([f for f, _ in taken]))
        if flat:
            raise NotBucketable(f"a reshape to {out_exprs} of dimensions {layout}")
        for whole, parts in pieces.items():
            if len(norm(parts)) > 1:
                self.splits[whole.origin] = norm(parts)
                raise _Replan()
        return out

    def true_size(self, expr):
        """A placeholder for the true value of a size expression (a 0-d int64 tensor at run)."""
        if expr not in self.sizes:
            with self.graph.inserting_after(self.last_placeholder):
                node = self.graph.placeholder(f"true_size_{len(self.sizes)}")
            self.last_placeholder = node
            self.sizes[expr] = node
        return self.sizes[expr]

    def padded_size(self, expr):
        """A graph value holding a size expression's padded value (a plain int while capturing)."""
        if expr.is_number:
            return int(expr)
        if expr in self.symbol_nodes:
            return self.symbol_nodes[expr]
        if not (expr.is_Add or expr.is_Mul):
            raise NotBucketable(f"no size input gives {expr}")
        combine = operator.add if expr.is_Add else operator.mul
        terms = [self.padded_size(a) for a in expr.args]
        node = terms[0]
        for t in terms[1:]:
            node = self.graph.call_function(combine, (node, t))
        return node

    def masked(self, before, x, dims, fill):
        """``x`` with its padded part along ``dims`` replaced by ``fill`` (on ``x`` viewed as its
        dimensions' factors, where each valid part is a prefix)."""
        val = x.meta["val"]
        layout = self.final(self.layout(x))
        flat = [f for factors in layout for f in factors]
        split = len(flat) != len(layout)
        with self.graph.inserting_before(before):
            y = x
            if split:
                y = self.graph.call_function(aten.reshape.default, (x, [self.padded_size(f) for f in flat]))
            position = 0
            for d, factors in enumerate(layout):
                for f in factors:
                    if d in dims and self.dynamic(f):
                        y = self.mask_factor(y, position, len(flat), f, fill, val.dtype, val.device)
                    position += 1
            if split:
                y = self.graph.call_function(aten.reshape.default, (y, [self.padded_size(e) for e in tensor_exprs(val)]))
        return y

    def mask_factor(self, y, position, rank, factor, fill, dtype, device):
        if dtype == torch.bool:
            fill = bool(fill)
        elif not (dtype.is_floating_point or dtype.is_complex):  # an integer: keep its type
            info = torch.iinfo(dtype)
            fill = info.min if fill == -math.inf else info.max if fill == math.inf else int(fill)
        length = self.padded_size(factor)
        index = self.graph.call_function(aten.arange.default, (length,), {"device": device, "dtype": torch.int64})
        valid = self.graph.call_function(aten.lt.Tensor, (index, self.true_size(factor)))
        shape = [1] * rank
        shape[position] = length
        valid = self.graph.call_function(aten.view.default, (valid, shape))
        return self.graph.call_function(aten.where.ScalarOther, (valid, y, fill))

    def count(self, before, x, dims):
        """How many valid elements ``dims`` of ``x`` hold, as a tensor of x's dtype."""
        exprs = tensor_exprs(x.meta["val"])
        static = 1
        total = None
        with self.graph.inserting_before(before):
            for d in dims:
                if not self.dynamic(exprs[d]):
                    static *= int(exprs[d])
                    continue
                n = self.true_size(exprs[d])
                total = n if total is None else self.graph.call_function(aten.mul.Tensor, (total, n))
            total = self.graph.call_function(aten._to_copy.default, (total,), {"dtype": x.meta["val"].dtype})
            return self.graph.call_function(aten.mul.Scalar, (total, static))

    def visit(self, n):
        if n.op != "call_function" or n.target is operator.getitem:
            return
        self.value_uses_of_sizes(n)
        t = n.target
        if t in _SIZE_QUERIES or not any(_padded_dims(a, self.symbols) for a in n.all_input_nodes):
            return  # a size query gives the padded size, which is what sizes in the graph are
        if isinstance(t, torch._ops.OpOverload) and torch.Tag.pointwise in t.tags:
            self.layouts[n] = self.broadcast_layout(n)
            return
        rule = _RULES.get(t)
        if rule is None:
            raise NotBucketable(f"{t} reads a dynamic dimension")
        if rule.row_wise:
            self.check_row_wise(n)
        if rule.pairs_rows:
            self.pair_rows(n)
        self.layouts[n] = getattr(self, rule.layout)(n)
        if rule.mask:
            self.actions.append(functools.partial(getattr(self, rule.mask), n))

    # -- the layouts of results

    def broadcast_layout(self, n, inputs=None, exprs=None):
        """An element-wise op's result: each dimension as its inputs lay it out (they must agree)."""
        exprs = exprs if exprs is not None else tensor_exprs(n.meta["val"])
        layout = []
        for d, e in enumerate(exprs):
            factors = None
            for a in (inputs if inputs is not None else n.all_input_nodes):
                val = a.meta.get("val")
                k = d - (len(exprs) - val.dim()) if isinstance(val, torch.Tensor) else -1
                if k >= 0 and val.shape[k] != 1:
                    mine = self.layout(a)[k]
                    factors = mine if factors is None else self.unify(factors, mine, n.target)
            layout.append(factors or self.plain(e, (n, d)))
        return layout

    def first_input_layout(self, n):
        return self.layout(n.args[0])

    def view_layout(self, n):
        src = self.layout(n.args[0])
        out = tensor_exprs(n.meta["val"])
        t = n.target
        if t in _RESHAPES:
            return self.regroup(src, out)
        if t in (aten.t.default, aten.transpose.int, aten.permute.default):
            if t is aten.t.default:
                order = list(range(len(src)))[::-1]
            elif t is aten.transpose.int:
                order = list(range(len(src)))
                a, b = n.args[1] % len(src), n.args[2] % len(src)
                order[a], order[b] = order[b], order[a]
            else:
                order = [d % len(src) for d in n.args[1]]
            return [src[d] for d in order]
        if t is aten.expand.default:
            offset = len(out) - len(src)
            return [self.plain(e, (n, d)) if d < offset or src[d - offset] == (1,) else src[d - offset]
                    for d, e in enumerate(out)]
        if t in (aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default):
            return self.regroup(src, out)  # adds or drops dimensions of size 1
        return src  # clone, detach, alias, _to_copy

    def positional_layout(self, n):
        src = self.layout(n.args[0])
        t = n.target
        rank = len(src)
        if t in (aten.tril.default, aten.triu.default):
            if not (prefix_indexed(src[-2]) and prefix_indexed(src[-1])):
                raise NotBucketable(f"{t} of a dimension merged with a dynamic one")
            return src
        if t is aten.slice_backward.default:  # (grad, input_sizes, dim, start, end, step)
            dim, start, step = n.args[2] % rank, n.args[3], n.args[5]
            if any(self.dynamic(f) for f in factor_list(src[dim])) or self.dynamic(tensor_exprs(n.meta["val"])[dim]):
                if len(factor_list(src[dim])) != 1 or not isinstance(start, int) or start < 0 or step != 1:
                    raise NotBucketable(f"{t} of a dynamic dimension from {start} by {step}")
                # the gradient's padded part lands where the input had valid rows (a slice that
                # dropped the last rows): zero it first
                self.actions.append(lambda: self.mask_arg(n, 0, [dim], 0.0))
            return src[:dim] + [self.plain(tensor_exprs(n.meta["val"])[dim], (n, dim))] + src[dim + 1:]
        if t is aten.select_backward.default:  # (grad, input_sizes, dim, index)
            dim = n.args[2] % (rank + 1)
            if self.dynamic(tensor_exprs(n.meta["val"])[dim]):
                raise NotBucketable(f"{t} along a dynamic dimension")
            return src[:dim] + [self.plain(tensor_exprs(n.meta["val"])[dim], (n, dim))] + src[dim:]
        dim = n.args[1] % rank
        factors = factor_list(self.resolved(src[dim]))
        moved = any(self.dynamic(f) for f in factors)
        if t is aten.select.int:
            index = n.args[2]
            if moved and not (prefix_indexed(src[dim]) and isinstance(index, int) and index >= 0):
                raise NotBucketable(f"{t} along a dynamic dimension from its end")
            return src[:dim] + src[dim + 1:]
        start, end, step = (list(n.args[2:]) + [None, None, None])[:3]
        if moved:
            keeps_prefix = (len(factors) == 1 and isinstance(start or 0, int) and (start or 0) >= 0
                            and (step or 1) == 1
                            and (end is None or isinstance(end, torch.fx.Node) or end < 0 or end >= _END))
            if not keeps_prefix:
                raise NotBucketable(f"{t} of a dynamic dimension from {start} to {end}")
        return src[:dim] + [self.plain(tensor_exprs(n.meta["val"])[dim], (n, dim))] + src[dim + 1:]

    def index_layout(self, n):
        """x[i_0, i_1, ...] (aten.index.Tensor over leading dimensions): a dynamic dimension of x
        may be indexed only by positions (arange(m), m its size or another), which mean the same
        element padded or not: where CPU's indexing is in range (m <= n), m's bucket is within n's.
        A static dimension of x takes static indices only (a padded index could be out of range).
        The result is laid out as the indices broadcast, then x's other dimensions."""
        x, indices = n.args[0], list(n.args[1])
        src = self.layout(x)
        if any(i is None for i in indices):
            raise NotBucketable(f"{n.target} with a skipped dimension")
        for k, i in enumerate(indices):
            if self.dynamic(size(src[k])):
                d = self.positions_dim(i)
                if d is None or not (prefix_indexed(src[k]) and prefix_indexed(self.layout(i)[d])):
                    raise NotBucketable(f"{n.target} of a dynamic dimension by other than its positions")
            elif any(self.dynamic(size(dim)) for dim in self.layout(i)):
                raise NotBucketable(f"{n.target} of a static dimension by a dynamic index")
        out = tensor_exprs(n.meta["val"])
        indexed = len(out) - (len(src) - len(indices))
        return self.broadcast_layout(n, indices, out[:indexed]) + src[len(indices):]

    def positions_dim(self, node):
        """The dimension along which ``node``'s values are their own positions there (arange(n)
        plus 0, viewed, broadcast or cut to a prefix), or None."""
        if node not in self.positions:
            self.positions[node] = self._positions_dim(node)
        return self.positions[node]

    def _positions_dim(self, node):
        if not isinstance(node, torch.fx.Node) or node.op != "call_function":
            return None
        t, args = node.target, node.args
        if t is aten.arange.default or (t is aten.arange.start and args[0] == 0):
            return 0
        d = self.positions_dim(args[0]) if args else None
        if d is None:
            return None
        if t in (aten.add.Tensor, aten.sub.Tensor) and args[1] == 0 and "alpha" not in node.kwargs:
            return d
        if t in (aten.clone.default, aten.alias.default, aten.detach.default, aten._to_copy.default):
            return d
        if t is aten.unsqueeze.default:
            return d + (1 if args[1] % node.meta["val"].dim() <= d else 0)
        if t is aten.expand.default:
            return d + node.meta["val"].dim() - args[0].meta["val"].dim()
        if t is aten.slice.Tensor:
            dim, start, step = args[1] % node.meta["val"].dim(), (list(args[2:3]) + [0])[0], (list(args[4:5]) + [1])[0]
            return d if dim != d or ((start or 0) == 0 and (step or 1) == 1) else None
        return None

    def split_layout(self, n):
        src = self.layout(n.args[0])
        dim = (n.args[2] if len(n.args) > 2 else 0) % len(src)
        if self.dynamic(size(src[dim])):
            raise NotBucketable(f"{n.target} along a dynamic dimension")
        return [src[:dim] + [(tensor_exprs(v)[dim],)] + src[dim + 1:] for v in n.meta["val"]]

    def pad_layout(self, n):
        """constant_pad_nd: padding a dynamic dimension puts the value after its padded part, so
        that part is set to the value first (what lands at the true end is then the value)."""
        src = self.layout(n.args[0])
        pads = list(n.args[1])
        out = list(src)
        masked = []
        for i in range(len(pads) // 2):
            d = len(src) - 1 - i
            before, after = pads[2 * i], pads[2 * i + 1]
            if before == 0 and after == 0:
                continue
            if self.dynamic(size(src[d])):
                if len(factor_list(src[d])) != 1 or not (isinstance(before, int) and isinstance(after, int)) \
                        or before < 0 or after < 0:
                    raise NotBucketable(f"{n.target} pads a dynamic dimension by {before}, {after}")
                masked.append(d)
            out[d] = self.plain(tensor_exprs(n.meta["val"])[d], (n, d))
        if masked:
            fill = n.args[2] if len(n.args) > 2 else 0
            self.actions.append(lambda: self.mask_arg(n, 0, masked, fill))
        return out

    def cat_layout(self, n):
        """cat along a dimension of one input dynamic along it: the inputs after that one are
        moved to follow its true end (a KV cache's append), so the padded part is a suffix; its
        other dimensions pair up like an element-wise op's."""
        inputs = _cat_inputs(n)
        dim = (n.args[1] if len(n.args) > 1 else 0) % len(tensor_exprs(n.meta["val"]))
        layouts = [self.layout(a) for a in inputs]
        out = []
        for d, e in enumerate(tensor_exprs(n.meta["val"])):
            if d == dim:
                moving = [i for i, lay in enumerate(layouts) if self.dynamic(size(lay[d]))]
                if len(moving) > 1 or (moving and len(factor_list(layouts[moving[0]][d])) != 1):
                    raise NotBucketable(f"{n.target} joins several dynamic sizes along a dimension")
                if moving and moving[0] < len(inputs) - 1:
                    self.actions.append(functools.partial(self.follow_true_end, n, dim, moving[0]))
                out.append(layouts[0][d] if len(inputs) == 1 else self.plain(e, (n, d)))
                continue
            factors = layouts[0][d]
            for lay in layouts[1:]:
                factors = self.unify(factors, lay[d], n.target)
            out.append(factors)
        return out

    def result_layout(self, n):
        """Reductions drop or keep dimensions; contractions keep their operands' outer dimensions;
        the other ops keep the first input's leading dimensions."""
        t = n.target
        val = n.meta["val"]
        if t in _REDUCTIONS:
            src = self.layout(n.args[0])
            if t in (aten.sum.default, aten.mean.default):
                return []
            dims = _dims_arg(n, len(src))
            keepdim = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
            return [(sympy.Integer(1),) if d in dims else f for d, f in enumerate(src) if keepdim or d not in dims]
        if t in _CONTRACTIONS:
            first = 1 if t is aten.addmm.default else 0
            a, b = self.layout(n.args[first]), self.layout(n.args[first + 1])
            k_a, k_b = len(a) - 1, len(b) - 2
            self.unify(a[k_a], b[k_b], t)
            if t is aten.bmm.default:
                self.unify(a[0], b[0], t)
            return a[:-1] + [b[-1]]
        source = n.args[1] if t in (aten.embedding.default, aten.nll_loss_backward.default) else n.args[0]
        src = self.layout(source)
        vals = val if isinstance(val, (tuple, list)) else [val]
        layouts = [self.like(n, src, v) if isinstance(v, torch.Tensor) else None for v in vals]
        return layouts if isinstance(val, (tuple, list)) else layouts[0]

    def pair_rows(self, n):
        """The rows an op pairs across its arguments (a loss's scores and targets, a backward's
        gradient and saved values: their leading dimensions) must be laid out alike, and of the
        same size for every size: a dynamic size Dynamo could not prove equal may pad apart."""
        args = [n.args[i] for i in _PAIRED_ARGS.get(n.target, ())
                if i < len(n.args) and isinstance(n.args[i], torch.fx.Node)]
        args = [a for a in args if isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].dim() > 0]
        for i, a in enumerate(args):
            for b in args[i + 1:]:
                for d, (x, y) in enumerate(zip(tensor_exprs(a.meta["val"]), tensor_exprs(b.meta["val"]))):
                    if x == y and self.dynamic(x):
                        self.unify(self.layout(a)[d], self.layout(b)[d], n.target)
                    elif x != y and 1 not in (x, y) and (self.dynamic(x) or self.dynamic(y)):
                        raise NotBucketable(f"{n.target} pairs sizes {x} and {y}")

    def like(self, n, src, val):
        """``val``'s layout where its leading dimensions are ``src``'s (same sizes), then plain."""
        out = []
        for d, e in enumerate(tensor_exprs(val)):
            same = d < len(src) and sympy.expand(size(src[d]) - e) == 0
            if self.dynamic(e) and not same:
                raise NotBucketable(f"{n.target} gives a dimension of size {e} of unknown layout")
            out.append(src[d] if same else self.plain(e, (n, d)))
        return out

    # -- checks and masks

    def value_uses_of_sizes(self, n):
        """A size used as a number (a mean's backward divides by the element count) must be the
        true size: the op takes it as a runtime tensor instead."""
        if not isinstance(n.target, torch._ops.OpOverload):
            return
        for i, (a, arg) in enumerate(zip(n.args, n.target._schema.arguments)):
            if not (isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.SymInt)):
                continue
            if str(arg.type) in ("int", "SymInt", "Optional[int]", "Optional[SymInt]"):
                continue  # a size: the padded one is right
            if n.target is aten.arange.default or (n.target is aten.arange.start and arg.name == "end"
                                                   and n.args[0] == 0):
                continue  # arange(n): a size too; the padded part counts on past n
            if n.target not in _SCALAR_TO_TENSOR:
                raise NotBucketable(f"{n.target} uses a dynamic size as a value")
            self.actions.append(lambda n=n, i=i, a=a: self.use_true_value(n, i, a))

    def use_true_value(self, n, i, a):
        args = list(n.args)
        args[i] = self.true_size(a.meta["val"].node.expr)
        n.args = tuple(args)
        n.target = _SCALAR_TO_TENSOR[n.target]

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
        elif n.target in _ALONG_DIM:
            i = _ALONG_DIM[n.target]
            normalized = [(n.args[i] if len(n.args) > i else n.kwargs.get("dim", -1)) % max(rank, 1)]
        else:  # softmax(x, dim, ...) or softmax_backward_data(grad, output, dim, ...)
            normalized = [(n.args[2] if "backward" in n.target.name() else n.args[1]) % rank]
        if set(normalized) & set(padded) and n.target not in _SOFTMAX | _SOFTMAX_BACKWARD:
            raise NotBucketable(f"{n.target} reads a dynamic dimension")

    def softmax(self, n):
        """Padded entries weigh nothing: -inf before a softmax, a zero gradient in its backward
        (which sums the gradient, times the output, over the dimension)."""
        rank = n.args[0].meta["val"].dim()
        backward = n.target in _SOFTMAX_BACKWARD
        dim = n.args[2 if backward else 1] % rank
        if dim in _padded_dims(n.args[0], self.symbols):
            self.mask_arg(n, 0, [dim], 0.0 if backward else -math.inf)

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

    def follow_true_end(self, n, dim, dynamic):
        """The padded cat ``n`` with the inputs after its dynamic one moved to follow that one's
        true end: position j takes the padded cat's element while j < start (the sizes before it,
        its true size included), then the later inputs' element j - start."""
        inputs = _cat_inputs(n)
        val = n.meta["val"]
        static_before = sum(int(a.meta["val"].shape[dim]) for a in inputs[:dynamic])
        later = inputs[dynamic + 1:]
        static_after = sum(int(a.meta["val"].shape[dim]) for a in later)
        true_end = factor_list(self.final(self.layout(inputs[dynamic]))[dim])[0]
        call = self.graph.call_function
        with self.graph.inserting_before(n.next):
            length = self.padded_size(tensor_exprs(val)[dim])
            j = call(aten.arange.default, (length,), {"device": val.device, "dtype": torch.int64})
            start = call(aten.add.Tensor, (self.true_size(true_end), static_before))
            index = call(aten.clamp.default, (call(aten.sub.Tensor, (j, start)), 0, static_after - 1))
            tail = later[0] if len(later) == 1 else call(aten.cat.default, (later, dim))
            moved = call(aten.index_select.default, (tail, dim, index))
            shape = [1] * val.dim()
            shape[dim] = length
            keep = call(aten.view.default, (call(aten.lt.Tensor, (j, start)), shape))
            result = call(aten.where.self, (keep, n, moved))
        result.meta = dict(n.meta)  # the same value, for the masks planned after it
        self.layouts[result] = self.layouts[n]
        n.replace_all_uses_with(result, delete_user_cb=lambda user: user is not result)

    def embedding_backward(self, n):
        self.mask_arg(n, 0, _padded_dims(n.args[0], self.symbols), 0.0)

    def mask_arg(self, n, index, dims, fill):
        if dims:
            args = list(n.args)
            args[index] = self.masked(n, args[index], dims, fill)
            n.args = tuple(args)


def _cat_inputs(n):
    return [a for a in n.args[0] if tuple(a.meta["val"].shape) != (0,)]  # cat skips these
