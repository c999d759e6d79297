"""The layout of a padded tensor: each dimension's *factors* (pure sympy algebra, no FX).

A reshape that merges the dynamic dimension with an outer one ([B, S, D] -> [B*S, D], as every
Linear on a sequence does) interleaves the padded part: row b*S_padded + s is valid when s < S.
So each dimension carries its *factors*, outermost first ((B, S) for that merged dimension), and
masks, output slicing and input padding work on the tensor viewed as its factors, where the
valid part of each factor is a prefix. A dimension nothing has split is one factor: padded at
its end. An input's dimension of size B*S becomes (B, S) when an op of the graph reads it so
(a reshape to [B, S, ...], or an element-wise op with a tensor laid out so); the graph is then
planned again with that layout for every dimension of that size.
"""

import functools
import math

import sympy


class Unsplit:
    """A dimension of size ``expr`` (a product, such as B*S) whose factors no op named yet: one
    factor, padded at its end, until an op splits it. ``origin`` is (node, dimension)."""

    __slots__ = ("expr", "origin")

    def __init__(self, expr, origin):
        self.expr, self.origin = expr, origin

    def __eq__(self, other):
        return isinstance(other, Unsplit) and other.origin == self.origin

    def __hash__(self):
        return hash(self.origin)

    def __repr__(self):
        return f"({self.expr},)"


def factor_list(dim):
    return (dim.expr,) if isinstance(dim, Unsplit) else dim


def size(dim):
    return math.prod(factor_list(dim))


def norm(factors):
    """Factors without ones, adjacent constants multiplied (their split never matters)."""
    out = []
    for f in factors:
        if f == 1:
            continue
        if out and f.is_number and out[-1].is_number:
            out[-1] = out[-1] * f
        else:
            out.append(f)
    return tuple(out) or (sympy.Integer(1),)


def divides(f, e):
    return sympy.fraction(sympy.cancel(e / f))[1] == 1


def prefix_indexed(dim):
    """Whether an index along the dimension means the same position padded or not (only its
    outermost factor may be dynamic)."""
    return all(f.is_number for f in factor_list(dim)[1:])


def sizes(layout, values):
    """Each dimension's size, and each factor's, with the symbols set to ``values`` (the lists are
    shared: do not change them)."""
    values = frozenset(values.items())
    dims = [value(size(dim), values) for dim in layout]
    flat = [value(f, values) for dim in layout for f in factor_list(dim)]
    return dims, flat


@functools.lru_cache(maxsize=1 << 16)
def value(expr, values: frozenset) -> int:
    """``expr`` with the symbols set to ``values``: sympy's subs takes a good part of a
    millisecond, so once per expression and size, not on every call of a graph."""
    return int(expr.subs(dict(values)))
