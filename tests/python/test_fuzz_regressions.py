"""Regression tests for what the differential fuzzer (test_fuzz.py) found, each against CPU
PyTorch in every eager mode. See docs/reliability.md."""

import pytest
import torch

import torchtpu

MODES = ["strict", "debug", "lazy", "fused"]
nan, inf = float("nan"), float("inf")


def same_as_cpu(fn, *inputs, mode):
    """fn's result on tpu in `mode` equals its result on CPU (NaNs where CPU has them), or raises
    the exception class CPU raises."""
    try:
        want = fn(*inputs)
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        with torchtpu.eager_mode(mode), pytest.raises(type(e)):
            fn(*[t.to("tpu") for t in inputs]).cpu()
        return
    with torchtpu.eager_mode(mode):
        got = fn(*[t.to("tpu") for t in inputs])
        got = got.cpu() if isinstance(got, torch.Tensor) else [g.cpu() for g in got]
    for g, w in zip([got] if isinstance(got, torch.Tensor) else got, [want] if isinstance(want, torch.Tensor) else want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda a, b: torch.maximum(a, b), lambda a, b: torch.minimum(a, b),
    lambda a, b: torch.clamp(a, min=b), lambda a, b: torch.clamp(a, max=b),
    lambda a, b: a.amax(), lambda a, b: b.amin(0), lambda a, b: a.max(), lambda a, b: b.min(),
], ids=["maximum", "minimum", "clamp_min", "clamp_max", "amax", "amin", "max", "min"])
def test_nan_in_either_operand_propagates(case, mode):
    same_as_cpu(case, torch.tensor([nan, 1.0, 2.0]), torch.tensor([1.0, nan, inf]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_max_and_min_of_bools_start_from_the_right_end(mode):
    x = torch.tensor([[False, False], [False, True]])
    for fn in (lambda t: t.amax(0), lambda t: t.amin(1), lambda t: torch.max(t, 1), lambda t: torch.min(t, 0),
               lambda t: t.max(), lambda t: t.flatten().max(0)):
        same_as_cpu(fn, x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda t: torch.max(t, 1), lambda t: torch.min(t, 1), lambda t: t.amax(1), lambda t: t.argmax(1),
    lambda t: t.flatten().amax(), lambda t: t.flatten().max(), lambda t: t.argmax(), lambda t: t.amax(0),
], ids=["max.dim", "min.dim", "amax.dim", "argmax.dim", "amax.all", "max.all", "argmax.all", "amax.nonempty"])
def test_extremes_over_an_empty_dimension_raise_as_on_cpu(case, mode):
    same_as_cpu(case, torch.ones(4, 0), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_vector_norm_drops_a_reduced_dimension_of_size_one(mode):
    same_as_cpu(lambda t: torch.linalg.vector_norm(t, dim=-1), torch.ones(2, 1), mode=mode)
    same_as_cpu(lambda t: torch.linalg.vector_norm(t, dim=(0, 1), keepdim=True), torch.ones(2, 1), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_an_out_argument_grows_to_the_result(mode):
    def add_into_small(x):
        out = torch.zeros(1, device=x.device)
        torch.add(x, x, out=out)
        return out

    same_as_cpu(add_into_small, torch.arange(6.0).reshape(2, 3), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_index_put_with_more_indices_than_dimensions_raises(mode):
    def put(t):
        return t.index_put_((torch.zeros(0, dtype=torch.long, device=t.device),), torch.tensor(2.0, device=t.device))

    same_as_cpu(put, torch.tensor(1.5), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda a: a.add_(a.t()), lambda a: a.copy_(a.t()), lambda a: a[1:].copy_(a[:3]),
    lambda a: torch.add(a.t(), 1, out=a), lambda a: a.expand(2, 4, 4).mul_(2), lambda a: a.add_(a),
], ids=["add_", "copy_ transposed", "copy_ shifted", "out=", "expanded", "the same view"])
def test_writes_that_overlap_their_inputs_raise_as_on_cpu(case, mode):
    same_as_cpu(lambda a: case(a.clone()), torch.arange(16.0).reshape(4, 4), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_integer_division_by_zero_raises_as_on_cpu_and_does_not_kill_the_process(mode):
    # XLA folds divisions of constants at compile time, so a window that divided by 0 died of
    # SIGFPE; then tpu gave XLA's values (x // 0 = -1, x % 0 = x), as CUDA gives values. CPU raises
    # RuntimeError("ZeroDivisionError"): tpu raises it too, at the next host sync (a device check).
    with torchtpu.eager_mode(mode):
        ones, zeros = torch.ones(3, dtype=torch.int32, device="tpu"), torch.zeros(3, dtype=torch.int32, device="tpu")
        for divide in (torch.floor_divide, torch.remainder, torch.fmod, lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                       lambda a, b: torch.div(a, 0, rounding_mode="floor"), lambda a, b: a % 0, lambda a, b: torch.remainder(1, b)):
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                divide(ones, zeros).tolist()
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                divide(ones.cpu(), zeros.cpu())
        # the process goes on; float division by zero and integer division by non-zeros are unchecked
        assert (ones.float() // 0).tolist() == [float("inf")] * 3 and (ones // 1).tolist() == [1] * 3
        assert torch.div(ones, zeros).tolist() == [float("inf")] * 3  # true division
        assert (torch.empty(0, dtype=torch.int64, device="tpu") // 0).tolist() == []


@pytest.mark.parametrize("mode", MODES)
def test_the_most_negative_integer_divided_by_minus_one_wraps(mode):
    # CPU PyTorch itself dies of SIGFPE on torch.floor_divide(INT_MIN, -1): the expected values
    # are written out (two's complement wraps -INT_MIN to INT_MIN; Python's rules otherwise).
    low = -2**31
    with torchtpu.eager_mode(mode):
        a = torch.tensor([low, 7, -7], dtype=torch.int32, device="tpu")
        b = torch.tensor([-1, -1, 2], dtype=torch.int32, device="tpu")
        assert torch.floor_divide(a, b).tolist() == [low, -7, -4]
        assert torch.remainder(a, b).tolist() == [0, 0, 1]
        assert torch.fmod(a, b).tolist() == [0, 0, -1]
        assert torch.div(a, b, rounding_mode="trunc").tolist() == [low, -7, -3]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda a, b: a - b.bool(), lambda a, b: a.bool() - True, lambda a, b: a @ b.long(),
    lambda a, b: a.long().var(), lambda a, b: torch.masked_select(a, b.long()), lambda a, b: a[b],
    lambda a, b: a.index_put_((b.long(),), b.long()),
], ids=["sub bool", "sub True", "matmul dtypes", "var of ints", "int mask", "float index", "put dtype"])
def test_argument_errors_cpu_raises(case, mode):
    same_as_cpu(case, torch.ones(2, 2), torch.tensor([0.0, 1.0]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda x, i: x.flip(0), lambda x, i: torch.masked_select(x, x > 0), lambda x, i: torch.cat([x, x]),
    lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, torch.cat([i, i])),
    lambda x, i: torch.gather(x, 0, i + 1),
], ids=["flip", "masked_select", "cat", "index_select", "index_select twice", "gather out of range"])
def test_zero_dimensional_tensors(case, mode):
    same_as_cpu(case, torch.tensor(5.0), torch.tensor(0), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda x: x[torch.zeros(0, dtype=torch.bool, device=x.device)], lambda x: x[torch.zeros(0, dtype=torch.long, device=x.device)],
    lambda x: x[torch.zeros(2, dtype=torch.long, device=x.device)], lambda x: torch.cat([x, x], dim=-2),
    lambda x: torch.gather(x.reshape(0, 1), 0, torch.zeros(0, 1, dtype=torch.long, device=x.device)),
    lambda x: torch.gather(x.reshape(0, 1), 0, torch.zeros(1, 1, dtype=torch.long, device=x.device)),
], ids=["empty mask", "no indices", "indices into size 0", "cat of legacy empties", "empty gather", "gather from size 0"])
def test_empty_tensors(case, mode):
    same_as_cpu(case, torch.ones(0), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_gather_and_scatter_out_of_range_raise_runtime_error_as_on_cpu(mode):
    x, bad = torch.arange(4.0).reshape(2, 2), torch.tensor([[0, 2]])
    same_as_cpu(lambda x, i: torch.gather(x, 0, i), x, bad, mode=mode)
    same_as_cpu(lambda x, i: x.clone().scatter_(0, i, 1.0), x, bad, mode=mode)
    same_as_cpu(lambda x, i: x.clone().scatter_add_(0, i, x[:1]), x, bad, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_special_values(mode):
    same_as_cpu(lambda a, b: torch.floor_divide(a, b), torch.tensor([inf, 5.0, -7.5, 7.0, 0.0]),
                torch.tensor([1.0, -inf, 2.0, 0.0, -3.0]), mode=mode)
    same_as_cpu(lambda a, b: torch.atan2(a, b), torch.tensor([0.0, -0.0, 0.0, -0.0]),
                torch.tensor([0.0, 0.0, -0.0, -0.0]), mode=mode)
    same_as_cpu(lambda a: torch.pow(a, True), torch.tensor([True, False]), mode=mode)
    same_as_cpu(lambda a: a.clone().pow_(False), torch.tensor([True, False]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_out_forms_run_on_the_device(mode, monkeypatch):
    """The Tensor_out spellings of binary ops, isnan.out, the binary max/min and floor_divide_ have
    lowerings: with fallbacks forbidden they still run (and an int result converts into a float out=)."""
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    a, b = torch.tensor([6, 3, -4]), torch.tensor([4, 2, 3])

    def forms(a, b):
        outs = [torch.empty(3, device=a.device) for _ in range(6)]
        torch.bitwise_and(a, b, out=outs[0])
        torch.eq(a, b, out=outs[1])
        torch.fmod(a, b, out=outs[2])
        torch.remainder(a, b, out=outs[3])
        torch.isnan(a.float(), out=outs[4])
        torch.max(a.float(), b.float(), out=outs[5])
        return torch.stack(outs + [a.clone().floor_divide_(b).float(), torch.min(a, b).float()])

    same_as_cpu(forms, a, b, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_index_put_values_must_broadcast_to_the_indexed_shape(mode):
    def put(x, v):
        x[torch.zeros(0, dtype=torch.long, device=x.device)] = v
        return x

    same_as_cpu(put, torch.ones(0, dtype=torch.long), torch.tensor([1, 2]), mode=mode)
    same_as_cpu(put, torch.ones(3, 2), torch.ones(2), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda x, i: torch.cat([x, x], out=x), lambda x, i: torch.gather(x, 0, i, out=x),
    lambda x, i: x.index_put_((i,), x), lambda x, i: x.scatter_add_(0, i, x),
    lambda x, i: torch.index_select(x, 0, i, out=x), lambda x, i: torch.add(x[:1], x, out=x[:1]),
], ids=["cat", "gather", "index_put_", "scatter_add_", "index_select", "out= that must grow"])
def test_indexing_ops_refuse_a_destination_that_is_an_input(case, mode):
    same_as_cpu(lambda x, i: case(x.clone(), i), torch.arange(3.0), torch.tensor([2, 0, 1]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    lambda x: torch.topk(x, 1, dim=2), lambda x: torch.sort(x, dim=2), lambda x: torch.clamp(x),
], ids=["topk", "sort", "clamp without bounds"])
def test_bad_dimensions_and_bounds_raise_what_cpu_raises(case, mode):
    same_as_cpu(case, torch.ones(3), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_with_no_indices_and_norms_of_integers(mode):
    same_as_cpu(lambda x, src: x.clone().scatter_add_(0, torch.zeros(0, dtype=torch.long, device=x.device), src),
                torch.ones(2), torch.ones(2, 2), mode=mode)
    same_as_cpu(lambda x: torch.linalg.vector_norm(x, dim=0), torch.tensor(3), mode=mode)
    same_as_cpu(lambda x: x.argmax(1), torch.tensor(3.0), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", [torch.floor_divide, torch.remainder, torch.fmod,
                                lambda a, b: torch.div(a, b, rounding_mode="trunc")],
                         ids=["floor_divide", "remainder", "fmod", "div_trunc"])
def test_integer_division_of_a_padded_tensor_checks_only_its_elements(op, mode):
    """A padded integer tensor (stored in a box of its bucket size, zeros past its elements) divided
    by itself: the zero-divisor check must not see the box's zeros."""
    x = torch.tensor([3, -2, 5])
    with torchtpu.eager_mode(mode):
        padded = torchtpu._C._to_tpu_padded(x, [3])
        torch.testing.assert_close(op(padded, padded).cpu(), op(x, x), rtol=0, atol=0)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            op(padded, torchtpu._C._to_tpu_padded(torch.tensor([1, 0, 2]), [3])).cpu()


@pytest.mark.parametrize("mode", MODES)
def test_a_padded_cat_with_an_empty_part_reads_nothing_from_it(mode):
    """A cat at a line whose lengths vary runs padded; an empty part's program gathered from its
    empty storage, which XLA refuses to compile (found by the fuzzer)."""
    def cat(a, b):
        return torch.cat([a, b], dim=0)

    g = torch.Generator().manual_seed(0)
    for n, m in [(3, 1), (5, 2), (2, 0)]:
        same_as_cpu(cat, torch.randn(n, 2, 2, generator=g), torch.randn(m, 2, 2, generator=g), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [lambda x: x[x[::2]], lambda x: x[:, torch.tensor([True])],
                                  lambda x: x[x.new_ones(2, 3)], lambda x: x.clone().index_put_((x[:1].clone(),), torch.tensor(False))],
                         ids=["mask_of_one", "after_a_slice", "two_dims", "index_put"])
def test_a_mask_whose_sizes_differ_from_the_indexed_dimensions_raises_as_on_cpu(case, mode):
    """CPU raises IndexError where a boolean mask's sizes differ from those of the dimensions it
    indexes (one of size 1 does not broadcast); tpu indexed the true positions (found by the fuzzer)."""
    same_as_cpu(case, torch.tensor([[True, False], [False, True]]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_index_select_into_its_own_index_raises_as_on_cpu(mode):
    same_as_cpu(lambda x, i: torch.index_select(x, 0, i, out=i), torch.tensor([4, 5]), torch.zeros(0, dtype=torch.long),
                mode=mode)
    same_as_cpu(lambda x, i: torch.index_select(x, 0, i, out=i), torch.tensor([4, 5]), torch.tensor([1, 0]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_bool_sum_into_a_float_out_is_the_bools_or(mode):
    x, y = torch.tensor([[False], [True]]), torch.tensor([[True, False, True]])
    same_as_cpu(lambda a: torch.add(a, a, out=torch.empty(2, 1, device=a.device)), x, mode=mode)
    same_as_cpu(lambda a, b: torch.add(a, b, out=torch.empty(2, 3, device=a.device)), x, y, mode=mode)
    same_as_cpu(lambda a, b: torch.add(a, b, alpha=False, out=torch.empty(2, 3, device=a.device)), x, y, mode=mode)
