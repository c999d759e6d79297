"""The layout algebra of padded tensors (torchtpu.compile.layout), without graphs or devices."""

import sympy

from torchtpu.compile.layout import Unsplit, divides, factor_list, norm, prefix_indexed, size, sizes, value
from torchtpu.compile.padding import bucket

B, S = sympy.symbols("B S", positive=True, integer=True)


def test_norm_drops_ones_and_multiplies_adjacent_constants():
    assert norm((sympy.Integer(1), B, sympy.Integer(2), sympy.Integer(3), S)) == (B, sympy.Integer(6), S)
    assert norm((sympy.Integer(1),)) == (sympy.Integer(1),)
    assert norm((sympy.Integer(4), B)) == (sympy.Integer(4), B)


def test_divides_works_on_products_of_sizes():
    assert divides(S, B * S)
    assert divides(4 * S, 8 * B * S)
    assert not divides(B * S, S)
    assert not divides(sympy.Integer(3), 4 * S)


def test_an_unsplit_dimension_is_one_factor_named_by_its_origin():
    a, b = Unsplit(B * S, ("node", 0)), Unsplit(B * S, ("node", 0))
    assert a == b and hash(a) == hash(b)
    assert a != Unsplit(B * S, ("other", 0))
    assert factor_list(a) == (B * S,)
    assert size((B, S, sympy.Integer(2))) == 2 * B * S


def test_only_the_outermost_factor_may_be_dynamic_for_positions_to_mean_the_same():
    assert prefix_indexed((S, sympy.Integer(4)))
    assert not prefix_indexed((B, S))
    assert prefix_indexed(Unsplit(B * S, ("n", 0)))  # one factor, nothing inside it


def test_sizes_gives_each_dimension_and_each_factor():
    layout = [(B, S), (sympy.Integer(16),)]  # [B*S, 16] seen as [B, S, 16]
    assert sizes(layout, {B: 2, S: 37}) == ([74, 16], [2, 37, 16])
    assert sizes(layout, {B: 2, S: 64}) == ([128, 16], [2, 64, 16])
    assert value(B * S + 1, frozenset({B: 3, S: 5}.items())) == 16


def test_buckets_are_powers_of_two_from_eight_unless_set():
    import torchtpu

    assert [bucket(n) for n in (1, 8, 9, 33, 64, 65)] == [8, 8, 16, 64, 64, 128]
    torchtpu.compile_options(buckets=[12, 24])
    try:
        assert [bucket(n) for n in (5, 12, 13, 25)] == [12, 12, 24, 25]  # larger sizes run unpadded
    finally:
        torchtpu.compile_options(buckets=None)
