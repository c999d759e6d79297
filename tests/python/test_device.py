"""The tpu device as PyTorch code sees it: storage semantics, torch.tpu, RNG, errors."""

import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu


def tpu(t):
    return t.to("tpu")


def test_writes_through_views_reach_every_alias():
    base = torch.zeros(4, 6)
    t = tpu(base)
    t[1:3, ::2] = 5.0
    t.diagonal().fill_(-1.0)
    t.t()[2].add_(3.0)
    base[1:3, ::2] = 5.0
    base.diagonal().fill_(-1.0)
    base.t()[2].add_(3.0)
    torch.testing.assert_close(t.cpu(), base)


def test_copy_between_overlapping_views():
    base = torch.arange(10.0)
    t = tpu(base)
    t[2:8].copy_(t[0:6].clone())
    base[2:8].copy_(base[0:6].clone())
    torch.testing.assert_close(t.cpu(), base)


def test_index_put_accumulate_and_masked_fill():
    base = torch.zeros(5)
    idx = torch.tensor([0, 2, 2, 4])
    want = base.index_put((idx,), torch.ones(4), accumulate=True)
    got = tpu(base).index_put_((tpu(idx),), tpu(torch.ones(4)), accumulate=True)
    torch.testing.assert_close(got.cpu(), want)
    x = torch.randn(3, 4)
    torch.testing.assert_close(tpu(x).masked_fill(tpu(x > 0), 0.5).cpu(), x.masked_fill(x > 0, 0.5))


def test_storage_resize_to_zero_and_back_like_fsdp2():
    p = tpu(torch.arange(6.0))
    storage = p.untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == 0
    storage.resize_(6 * 4)
    p.copy_(tpu(torch.full((6,), 2.0)))
    torch.testing.assert_close(p.cpu(), torch.full((6,), 2.0))


def test_set_and_resize_and_data_assignment():
    a = tpu(torch.arange(4.0))
    b = torch.empty(0, device="tpu")
    b.set_(a)
    assert b.data_ptr() == a.data_ptr()
    a.add_(1)
    torch.testing.assert_close(b.cpu(), torch.arange(4.0) + 1)
    c = torch.empty(2, device="tpu").resize_(3, 2).fill_(1.0)
    assert c.shape == (3, 2)
    w = torch.nn.Parameter(tpu(torch.zeros(3)))
    w.data = tpu(torch.ones(3))
    torch.testing.assert_close(w.detach().cpu(), torch.ones(3))


def test_out_variants_and_dtype_promotion():
    a, b = torch.randn(3, 4), torch.randn(4)
    out = torch.empty(0, device="tpu")
    torch.add(tpu(a), tpu(b), out=out)
    torch.testing.assert_close(out.cpu(), a + b)
    i = torch.arange(6).reshape(2, 3)
    torch.testing.assert_close((tpu(i) / 4).cpu(), i / 4)
    torch.testing.assert_close((tpu(i) // 4).cpu(), i // 4)
    assert (tpu(i) > 2).dtype == torch.bool


def test_rng_is_reproducible_under_manual_seed():
    torch.manual_seed(7)
    a = torch.rand(100, device="tpu"), torch.randn(100, device="tpu"), torch.randint(0, 10, (50,), device="tpu")
    torch.manual_seed(7)
    b = torch.rand(100, device="tpu"), torch.randn(100, device="tpu"), torch.randint(0, 10, (50,), device="tpu")
    for x, y in zip(a, b):
        assert torch.equal(x.cpu(), y.cpu())
    assert 0 <= a[0].min().item() and a[0].max().item() < 1
    assert 0 <= a[2].min().item() and a[2].max().item() < 10
    state = torch.tpu.get_rng_state()
    first = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), first)


def test_random_ops_draw_from_a_generator_they_are_given():
    """exponential_ (what vLLM's sampler draws with, one generator per seeded request) with an
    explicit generator: PyTorch's Python meta kernel for it refuses generators, so the shape
    inference must not pass one on."""
    def draws(seed):
        g = torch.Generator("tpu").manual_seed(seed)
        return [torch.empty(1000, device="tpu").exponential_(generator=g).cpu(),
                torch.empty(5, device="tpu").uniform_(generator=g).cpu()]
    first, again, other = draws(3), draws(3), draws(4)
    for x, y in zip(first, again):
        assert torch.equal(x, y)
    assert not torch.equal(first[0], other[0])
    assert first[0].min() > 0 and abs(first[0].mean().item() - 1) < 0.15  # Exp(1) has mean 1


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_recomputes_the_same_dropout_mask(use_reentrant):
    """torch.utils.checkpoint restores the device's RNG state before recomputing, as on CPU: the
    gradient is the one of the uncheckpointed model (a new mask in the recompute made it wrong)."""
    from torch.utils.checkpoint import checkpoint

    def grads(device, checkpointed):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.GELU(),
                                    torch.nn.Linear(8, 2)).to(device)
        x = torch.randn(3, 4).to(device).requires_grad_()
        torch.manual_seed(5)
        y = checkpoint(model, x, use_reentrant=use_reentrant) if checkpointed else model(x)
        y.sum().backward()
        return x.grad.cpu(), model[0].weight.grad.cpu()

    for device in ("cpu", "tpu"):
        for with_checkpoint, without in zip(grads(device, True), grads(device, False)):
            torch.testing.assert_close(with_checkpoint, without, rtol=0, atol=0)


def test_dropout_and_bernoulli_statistics():
    torch.manual_seed(0)
    x = torch.ones(20000, device="tpu")
    y = F.dropout(x, 0.25)
    dropped = (y == 0).float().mean().item()
    assert 0.23 < dropped < 0.27
    assert y.max().item() == pytest.approx(1 / 0.75)
    assert sorted(torch.randperm(20, device="tpu").cpu().tolist()) == list(range(20))


@pytest.mark.parametrize("name,fn", [
    ("conv2d", lambda x: F.conv2d(x, torch.ones(2, 3, 3, 3, device=x.device), stride=2, padding=1)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2, ceil_mode=True)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True)),
    ("interpolate", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear")),
    ("rfft2", lambda x: torch.fft.rfft2(x).abs()),
])
def test_vision_ops_forward_and_backward_match_cpu(name, fn):
    x = torch.randn(2, 3, 7, 9, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    want, got = fn(x), fn(xt)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-3, atol=1e-3)


def test_boolean_mask_indexing_and_nonzero_run_on_device():
    torchtpu.metrics.reset()
    x = torch.randn(5, 4)
    t = tpu(x)
    torch.testing.assert_close(t[t > 0].cpu(), x[x > 0])
    torch.testing.assert_close(torch.nonzero(t > 0).cpu(), torch.nonzero(x > 0))
    assert torchtpu.metrics.cpu_fallbacks() == {}


def test_index_out_of_range_is_detected_on_device():
    x = torch.randn(5, 3, device="tpu")
    with pytest.raises(IndexError, match="index out of range"):
        torch.index_select(x, 0, torch.tensor([1, 7], device="tpu")).cpu()
    with pytest.raises(IndexError, match="index out of range"):
        x[torch.tensor([5], device="tpu")]
        torch.tpu.synchronize()
    # and nothing is left pending afterwards
    assert x[torch.tensor([4], device="tpu")].cpu().shape == (1, 3)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_class_targets_out_of_range_raise_as_on_cpu(mode):
    """A class index outside [0, classes) that is not ignore_index: CPU raises IndexError (CUDA a
    device-side assert); tpu computed a loss from it."""
    x = torch.randn(3, 4)
    with torchtpu.eager_mode(mode):
        for target in ([0, 1, 9], [0, -1, 2]):
            with pytest.raises(IndexError, match="Target"):
                F.cross_entropy(x, torch.tensor(target))
            with pytest.raises(IndexError, match="Target is out of bounds"):
                F.cross_entropy(tpu(x), torch.tensor(target, device="tpu")).cpu()
        ignored = torch.tensor([0, -100, 3])
        torch.testing.assert_close(F.cross_entropy(tpu(x), tpu(ignored)).cpu(), F.cross_entropy(x, ignored))
        images, labels = torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4))
        labels[0, 0, 0] = 3
        with pytest.raises(IndexError, match="Target is out of bounds"):
            F.cross_entropy(tpu(images), tpu(labels)).cpu()


def test_empty_random_ranges_and_integer_softmax_are_refused_as_on_cpu():
    for make in (lambda d: torch.randint(5, 2, (3,), device=d), lambda d: torch.empty(3, device=d).random_(0),
                 lambda d: torch.empty(3, device=d).random_(4, 4)):
        with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
            make("cpu")
        with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
            make("tpu")
    for dtype in (torch.int64, torch.uint8, torch.bool):
        for fn in (torch.softmax, torch.log_softmax):
            with pytest.raises(NotImplementedError, match="not implemented for"):
                fn(torch.ones(2, 3, dtype=dtype), 0)
            with pytest.raises(NotImplementedError, match="not implemented for"):
                fn(torch.ones(2, 3, dtype=dtype, device="tpu"), 0)
    torch.testing.assert_close(torch.softmax(torch.arange(3, device="tpu"), 0, dtype=torch.float32).cpu(),
                               torch.softmax(torch.arange(3), 0, dtype=torch.float32))


SCALAR_OPS = {
    "masked_fill": lambda x, v: x.masked_fill(x > 1, v), "index_fill": lambda x, v: x.index_fill(0, torch.tensor([0], device=x.device), v),
    "scatter": lambda x, v: x.scatter(0, torch.tensor([0], device=x.device), v), "clamp": lambda x, v: x.clamp(max=v),
    "clamp_": lambda x, v: x.clone().clamp_(min=-v), "threshold": lambda x, v: torch.threshold(x, 1, v),
    "hardtanh": lambda x, v: F.hardtanh(x, 0, abs(v)), "pow": lambda x, v: x ** v,
    "pow of a tensor": lambda x, v: (x - 2) ** torch.tensor([64, 65, 127, -1], device=x.device).to(x.dtype),
    "addcmul": lambda x, v: torch.addcmul(x, x, x, value=v), "sub alpha": lambda x, v: torch.sub(x, x, alpha=v),
    "add bool alpha": lambda x, v: torch.add(x, x, alpha=v > 0),
    "fill_": lambda x, v: x.clone().fill_(v), "fill_ one element": lambda x, v: x[:1].clone().fill_(v),
    "where": lambda x, v: torch.where(x > 1, x, v), "scalar_tensor": lambda x, v: torch.scalar_tensor(v, dtype=x.dtype, device=x.device),
}


@pytest.mark.parametrize("op", SCALAR_OPS)
def test_scalars_that_overflow_the_dtype_raise_where_cpu_raises(op):
    """CPU converts these ops' Scalars to the computed dtype with an overflow check (int8
    masked_fill of 300 raises; a float16 fill of -1e9 raises, a float16 where of -1e9 gives -inf)
    and checks add's alpha against it; tpu wrapped or saturated them. Integer powers wrap as CPU's
    (XLA's gave 3 ** 64 == 1)."""
    outcomes = {}
    for dtype, value in itertools.product([torch.int8, torch.uint8, torch.int32, torch.float16, torch.bfloat16],
                                          [300, -1, 2, 7e4, 3e9, 1e40, -3]):
        for device in ("cpu", "tpu"):
            x = torch.arange(4, device=device).to(dtype)
            try:
                outcomes[device] = SCALAR_OPS[op](x, value).cpu()
            except Exception as e:  # noqa: BLE001 -- CPU's exception is the expectation
                outcomes[device] = (type(e), "without overflow" in str(e))  # CPU names C++ types
        if isinstance(outcomes["cpu"], tuple):
            assert outcomes["tpu"] == outcomes["cpu"], (dtype, value, outcomes["tpu"])
        else:
            torch.testing.assert_close(outcomes["tpu"], outcomes["cpu"], rtol=0, atol=0, msg=f"{dtype} {value}")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_rounding_division_of_complex_numbers_is_refused_as_on_cpu(mode):
    """div(rounding_mode="trunc") of complex numbers returned the untruncated quotient on tpu; CPU
    refuses both rounding modes for them."""
    a, b = torch.tensor([1 + 2j, 3 - 1j]), torch.tensor([2.0, -1.5])
    cases = [lambda x, y: torch.div(x, y, rounding_mode="trunc"), lambda x, y: torch.div(y, x, rounding_mode="floor"),
             lambda x, y: torch.div(y, 2 + 1j, rounding_mode="trunc"), lambda x, y: x.div_(3, rounding_mode="trunc"),
             lambda x, y: torch.div(x.to(torch.complex128), y, rounding_mode="trunc"),
             lambda x, y: torch.div(x.to(torch.chalf), 2, rounding_mode="trunc")]
    with torchtpu.eager_mode(mode):
        for fn in cases:
            with pytest.raises(NotImplementedError) as cpu:
                fn(a.clone(), b)
            with pytest.raises(NotImplementedError) as on_tpu:
                fn(tpu(a), tpu(b)).cpu()
            assert str(on_tpu.value) == str(cpu.value)
        assert torch.equal(torch.div(tpu(b), 0.7, rounding_mode="trunc").cpu(), torch.div(b, 0.7, rounding_mode="trunc"))


def _t(values, dtype, device):
    return torch.tensor(values, dtype=dtype, device=device)


# Found by comparing binary ops over every pair of dtypes with CPU: refusals judged on the dtype
# the arguments promote to (pow refused bools raised to an int8 power, which CPU computes; complex
# atan2, xlogy, comparisons, maximum..., integer hypot and nextafter gave values where CPU raises).
PROMOTED_REFUSALS = {
    "pow(bool, uint8)": lambda d: torch.pow(_t([True, False], torch.bool, d), _t([2, 3], torch.uint8, d)),
    "pow(bool, 0-d float)": lambda d: torch.pow(_t([True, False], torch.bool, d), _t(2.0, torch.float32, d)),
    "pow(bool, bool)": lambda d: torch.pow(_t([True, False], torch.bool, d), _t([True, True], torch.bool, d)),
    "atan2(float, complex)": lambda d: torch.atan2(torch.ones(2, device=d), torch.ones(2, dtype=torch.cfloat, device=d)),
    "atan2_(complex, float)": lambda d: torch.ones(2, dtype=torch.cfloat, device=d).atan2_(torch.ones(2, device=d)),
    "xlogy(complex Scalar, float)": lambda d: torch.xlogy(1 + 2j, torch.ones(2, device=d)),
    "xlogy(complex, 2)": lambda d: torch.xlogy(torch.ones(2, dtype=torch.cfloat, device=d), 2),
    "xlogy(2.0, float)": lambda d: torch.xlogy(2.0, torch.full((2,), 3.0, device=d)),
    "hypot(int8, 0-d int64)": lambda d: torch.hypot(_t([1, 2], torch.int8, d), _t(3, torch.int64, d)),
    "hypot(int8, float)": lambda d: torch.hypot(_t([1, 2], torch.int8, d), torch.ones(2, device=d)),
    "hypot(bool, 0-d bool)": lambda d: torch.hypot(_t([True, False], torch.bool, d), _t(True, torch.bool, d)),
    "hypot(float, complex)": lambda d: torch.hypot(torch.ones(2, device=d), _t(1j, torch.cfloat, d)),
    "nextafter(uint8, int8)": lambda d: torch.nextafter(_t([1, 2], torch.uint8, d), _t([3, -1], torch.int8, d)),
    # a complex remainder crashed the process in XLA's CPU compiler
    "remainder(bool, complex)": lambda d: torch.remainder(_t([True, False], torch.bool, d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "remainder(2.0, complex)": lambda d: torch.remainder(2.0, _t([2 + 1j, 1j], torch.cfloat, d)),
    "fmod(complex, 1.5)": lambda d: torch.fmod(_t([2 + 1j, 1j], torch.cfloat, d), 1.5),
    "copysign(complex, float)": lambda d: torch.copysign(_t([2 + 1j, 1j], torch.cfloat, d), torch.ones(2, device=d)),
    "gcd(float, complex)": lambda d: torch.gcd(torch.ones(2, device=d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "special.xlog1py(2.0, complex)": lambda d: torch.special.xlog1py(2.0, _t([2 + 1j, 1j], torch.cfloat, d)),
    "heaviside(float, complex)": lambda d: torch.heaviside(torch.ones(2, device=d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "maximum(float, complex)": lambda d: torch.maximum(torch.ones(2, device=d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "fmin(int8, complex)": lambda d: torch.fmin(_t([1, 2], torch.int8, d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "lt(float, 1j)": lambda d: torch.lt(torch.ones(2, device=d), 1j),
    "ge(int8, complex)": lambda d: torch.ge(_t([1, 2], torch.int8, d), _t([2 + 1j, 1j], torch.cfloat, d)),
    "bool.remainder_(complex)": lambda d: _t([True, False], torch.bool, d).remainder_(_t([2 + 1j, 1j], torch.cfloat, d)),
    "float.copysign_(complex)": lambda d: torch.ones(2, device=d).copysign_(_t([2 + 1j, 1j], torch.cfloat, d)),
    "logical_and(half, 0-d complex)": lambda d: torch.logical_and(torch.ones(2, dtype=torch.half, device=d),
                                                                  _t(1 + 1j, torch.cfloat, d)),
}


@pytest.mark.parametrize("case", PROMOTED_REFUSALS)
def test_dtype_refusals_judged_on_the_promoted_dtype_as_cpu(case):
    fn = PROMOTED_REFUSALS[case]
    try:
        expected = fn("cpu")
    except (NotImplementedError, RuntimeError, TypeError) as e:  # PyTorch 2.15: maximum's TypeError
        with pytest.raises(type(e)) as on_tpu:
            fn("tpu").cpu()
        assert type(on_tpu.value) is type(e) and str(on_tpu.value) == str(e)
        return
    actual = fn("tpu").cpu()
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


def test_is_set_to_and_in_place_promotion_errors_as_cpu():
    """is_set_to ran on the CPU fallback, whose copies never share a storage (x.is_set_to(x) was
    False); int.add_(float) raised with another message than CPU's."""
    for device in ("cpu", "tpu"):
        x = torch.ones(4, 4, device=device)
        assert x.is_set_to(x) and x.is_set_to(x.view(16).view(4, 4))
        assert not x.is_set_to(x[1:]) and not x.is_set_to(x.t()) and not x.is_set_to(x.clone())
        for update in (lambda t: t.add_(1.5), lambda t: t[:, 0].sub_(torch.ones(3, device=device)), lambda t: t.add_(1, alpha=0.5)):
            with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long|argument alpha must not"):
                update(torch.arange(6, device=device).reshape(3, 2))


def test_tensors_on_two_devices_get_cudas_error():
    """A CPU tensor beside tpu ones: CUDA's "Expected all tensors to be on the same device" (the
    message named meta tensors, which the user never made); CPU 0-d tensors are scalars."""
    a, b = torch.ones(3, device="tpu"), torch.ones(3)
    for fn in (lambda: a + b, lambda: b * a, lambda: torch.nn.Linear(3, 2)(a), lambda: torch.cat([a, b]),
               lambda: torch.where(b > 0, a, a), lambda: a.index_select(0, torch.tensor([0, 1]))):
        with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, .* tpu:0 and cpu"):
            fn()
    torch.testing.assert_close((a + torch.tensor(2.0) * b[0]).cpu(), torch.full((3,), 3.0))


SHAPE_ERRORS = {
    "matmul": lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 5, device=d),
    "linear": lambda d: F.linear(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)),
    "broadcast": lambda d: torch.ones(2, 3, device=d) + torch.ones(4, device=d),
    "conv channels": lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(2, 4, 3, 3, device=d)),
    "cat": lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]),
    "out dtype": lambda d: torch.sqrt(torch.ones(2, device=d), out=torch.empty(2, dtype=torch.long, device=d)),
    "class weights": lambda d: F.nll_loss(torch.ones(3, 5, device=d), torch.zeros(3, dtype=torch.long, device=d),
                                          weight=torch.ones(4, device=d)),
    "bmm batch": lambda d: torch.bmm(torch.ones(2, 3, 4, device=d), torch.ones(3, 4, 5, device=d)),
}


@pytest.mark.parametrize("case", SHAPE_ERRORS, ids=list(SHAPE_ERRORS))
def test_bad_shapes_give_cpus_error(case):
    """PyTorch's meta kernels word many errors differently from CPU and CUDA ("a and b must have
    same reduction dim" for "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)", "Invalid
    channel dimensions", an AssertionError for class weights): tpu gives CPU's exception."""
    fn = SHAPE_ERRORS[case]
    errors = []
    for device in ("cpu", "tpu"):
        with pytest.raises(Exception) as info:
            fn(device)
        errors.append((type(info.value), str(info.value)))
    assert errors[1] == errors[0]


def test_a_dtype_the_lowering_cannot_compile_gives_cpus_error_or_names_the_op():
    """logcumsumexp of int8 failed in XLA's compiler ("'stablehlo.exponential' op operand #0 must
    be ... float"): in debug mode tpu now raises CPU's NotImplementedError; in strict, fused and
    lazy mode, where a first-seen op's program compiles while the ops after it are recorded, the
    error names the op and its line at the next read, and the tensors computed before it stay
    usable."""
    x = torch.tensor([1, 2, 3], dtype=torch.int8)
    with pytest.raises(NotImplementedError) as cpu:
        torch.logcumsumexp(x, 0)
    with torchtpu.eager_mode("debug"), pytest.raises(NotImplementedError) as tpu_error:
        torch.logcumsumexp(x.to("tpu"), 0)
    assert str(tpu_error.value) == str(cpu.value)
    for mode in ("strict", "fused", "lazy"):
        with torchtpu.eager_mode(mode):
            doubled = x.to("tpu") * 2
            with pytest.raises(RuntimeError, match=r"aten::_logcumsumexp at .*test_device.py:\d+: compiling"):
                torch.logcumsumexp(doubled, 0).cpu()
            assert doubled.cpu().tolist() == [2, 4, 6]


def test_probabilities_outside_0_1_raise_as_on_cpu():
    """bernoulli with p > 1 or NaN returned ones where CPU raises."""
    for fn in (lambda d: torch.empty(2, device=d).bernoulli_(1.5), lambda d: torch.bernoulli(torch.ones(2, device=d), -0.5),
               lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)).cpu(),
               lambda d: torch.empty(2, device=d).bernoulli_(torch.tensor([float("nan")], device=d)).cpu()):
        for device in ("cpu", "tpu"):
            with pytest.raises(RuntimeError, match=r"p to be in \[0, 1\]|Expected p_in >= 0 && p_in <= 1"):
                fn(device)
    assert torch.bernoulli(torch.tensor([0.0, 1.0], device="tpu")).cpu().tolist() == [0.0, 1.0]


def test_cpu_fallback_is_counted_and_can_be_an_error(monkeypatch):
    torchtpu.metrics.reset()
    x = tpu(torch.randn(4, 4))
    torch.ops.torchtpu_test.cpu_only(x)  # a CPU-only custom op (conftest.py)
    assert torchtpu.metrics.cpu_fallbacks() == {"torchtpu_test::cpu_only": 1}
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match="TORCHTPU_FALLBACK=error"):
        torch.ops.torchtpu_test.cpu_only(x)


def _assert_error(device, *args):
    """What torch._assert_async raises (its type and message's first part), or None."""
    try:
        torch._assert_async(*(a.to(device) if isinstance(a, torch.Tensor) else a for a in args))
        if device == "tpu":
            torch.tpu.synchronize()  # a device-side assert raises at the next sync, as on CUDA
    except RuntimeError as e:
        return type(e), str(e).split(" (aten::")[0]
    return None


@pytest.mark.parametrize("mode", ["debug", "strict", "fused", "lazy"])
def test_assert_async_checks_on_the_device_like_cpu(mode, monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")  # checked on the device, not on the CPU
    cases = [(torch.tensor(2.5),), (torch.tensor([True]),), (torch.tensor(-1), "fine"),
             (torch.tensor(0),), (torch.tensor(0.0),), (torch.tensor([False]), "x must be positive"),
             (torch.tensor(False), ""), (torch.zeros(2),), (torch.zeros(0),)]
    with torchtpu.eager_mode(mode):
        for args in cases:
            assert _assert_error("tpu", *args) == _assert_error("cpu", *args), args
    assert _assert_error("cpu", *cases[5]) == (RuntimeError, "x must be positive")  # the cases raise


def test_assert_async_in_a_compiled_function_raises_cpus_error():
    @torch.compile(backend="tpu")
    def double_positive(x):
        torch._assert_async((x > 0).all(), "x must be positive")
        return x * 2

    torch.testing.assert_close(double_positive(torch.ones(3, device="tpu")).cpu(), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="x must be positive") as error:
        double_positive(-torch.ones(3, device="tpu")).cpu()
    assert error.type is RuntimeError  # not the IndexError of an index check


def test_torch_tpu_module_and_memory_accounting():
    assert torch.tpu.is_available() and torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(1, device="tpu:0")):
        assert torch.tpu.current_device() == 0
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError and not torch.tpu.is_current_stream_capturing()
    before = torch.tpu.memory_allocated()
    t = torch.ones(256, 256, device="tpu")
    assert torch.tpu.memory_allocated() >= before + 256 * 256 * 4
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    del t
    assert torch.tpu.memory_allocated() <= before
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    assert torch.tpu.get_device_properties().name
    assert torch.ones(2).tpu().is_tpu
    assert next(torch.nn.Linear(2, 2).tpu().parameters()).device.type == "tpu"


def test_save_and_load_state_dict_across_devices(tmp_path):
    m = torch.nn.Linear(3, 2).to("tpu")
    path = tmp_path / "m.pt"
    torch.save(m.state_dict(), path)
    loaded = torch.load(path, map_location="cpu")
    for k, v in m.state_dict().items():
        assert loaded[k].device.type == "cpu"
        torch.testing.assert_close(loaded[k], v.cpu())


def test_printing_item_tolist_numpy_non_blocking():
    t = tpu(torch.tensor([[1.5, -2.0], [0.25, 4.0]]))
    assert "tpu:0" in repr(t)
    assert t[1, 1].item() == 4.0
    assert t.tolist() == [[1.5, -2.0], [0.25, 4.0]]
    assert t.cpu().numpy().shape == (2, 2)
    u = torch.ones(3).to("tpu", non_blocking=True)
    assert u.sum().item() == 3.0


def test_arange_shapes_follow_scalar_values_not_a_cached_shape():
    # Output metadata is cached by argument signature; arange's length depends on its Scalar values.
    for start, end, step in [(0, 25, 5), (0, 9, 3), (1.5, 4.0, 0.5), (10, 0, -3)]:
        torch.testing.assert_close(torch.arange(start, end, step, device="tpu").cpu(),
                                   torch.arange(start, end, step))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_forward_and_backward_on_device(mode, monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    torch.manual_seed(0)
    weight = torch.randn(12, 4, requires_grad=True)
    index = torch.tensor([3, 1, 1, 7, 0, 11, 5, 2])
    offsets = torch.tensor([0, 3, 3, 6])  # the second bag is empty
    per_sample = torch.rand(8, requires_grad=True) if mode == "sum" else None
    want = F.embedding_bag(index, weight, offsets, mode=mode, per_sample_weights=per_sample, padding_idx=7)
    want.pow(2).sum().backward()
    w = weight.detach().to("tpu").requires_grad_()
    p = per_sample.detach().to("tpu").requires_grad_() if per_sample is not None else None
    got = F.embedding_bag(index.to("tpu"), w, offsets.to("tpu"), mode=mode, per_sample_weights=p, padding_idx=7)
    got.pow(2).sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(w.grad.cpu(), weight.grad)
    if p is not None:
        torch.testing.assert_close(p.grad.cpu(), per_sample.grad)


def test_printing_formats_on_the_host_and_compiles_nothing():
    import torchtpu
    x = torch.randn(5, 7, dtype=torch.float64)
    before = torchtpu.metrics.counters()["compiles"]
    text = repr(torch.nn.Parameter(x.to("tpu")))
    assert torchtpu.metrics.counters()["compiles"] == before
    assert text == repr(torch.nn.Parameter(x)).replace("dtype=torch.float64", "device='tpu:0', dtype=torch.float64")


def test_zero_fills_never_wait_for_a_compile():
    """torch.zeros of a shape the single-op cache lacks uploads zeros and compiles its program in
    the background; once compiled, zeros of that shape run the program. Other fills (-0.0 is not
    all-zero bytes), partial zero fills and every mode give CPU's values."""
    counters = torchtpu.metrics.counters
    torchtpu.cache.wait_for_background_compiles()
    before = counters()["executions"]
    fresh = torch.zeros(3, 5, 7, 11, device="tpu")  # a shape no other test uses
    assert counters()["executions"] == before  # uploaded, not run
    torchtpu.cache.wait_for_background_compiles()
    again = torch.zeros(3, 5, 7, 11, device="tpu")
    assert counters()["executions"] == before + 1
    for t in (fresh, again):
        assert torch.equal(t.cpu(), torch.zeros(3, 5, 7, 11))
    for mode in ("strict", "fused", "lazy"):
        with torchtpu.eager_mode(mode):
            made = [torch.zeros(7, dtype=torch.bool, device="tpu"), torch.zeros(2, dtype=torch.complex64, device="tpu"),
                    torch.zeros_like(torch.ones(13, device="tpu"))]
            for t in made:
                assert torch.equal(t.cpu(), torch.zeros(t.shape, dtype=t.dtype))
            assert torch.signbit(torch.empty(4, device="tpu").fill_(-0.0).cpu()).all()
            written = torch.arange(5.0, device="tpu")
            written[1:3].zero_()
            assert written.cpu().tolist() == [0.0, 0.0, 0.0, 3.0, 4.0]


def _python(code, **env):
    import os
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)


def test_import_torch_alone_makes_tpu_available():
    """PyTorch's device-extension autoload (the torch.backends entry point scripts/setup.sh
    installs); TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off."""
    code = "import sys, torch; print('torchtpu' in sys.modules, (torch.ones(2, device='tpu') * 3).sum().item())"
    r = _python(code)
    assert r.returncode == 0 and r.stdout.split() == ["True", "6.0"], r.stderr[-2000:]
    r = _python("import sys, torch; print('torchtpu' in sys.modules)", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr[-2000:]


def test_checkpoint_loads_in_a_process_that_never_imports_torchtpu(tmp_path):
    m = torch.nn.Linear(3, 2).to("tpu")
    torch.save({"model": m.state_dict(), "step": 7}, tmp_path / "ckpt.pt")
    torch.save({k: v.cpu() for k, v in m.state_dict().items()}, tmp_path / "want.pt")
    code = f"""
import sys, torch
ckpt = torch.load({str(tmp_path / 'ckpt.pt')!r}, map_location="cpu")
want = torch.load({str(tmp_path / 'want.pt')!r})
assert ckpt["step"] == 7 and "torchtpu" not in sys.modules
for k in want:
    assert ckpt["model"][k].device.type == "cpu" and torch.equal(ckpt["model"][k], want[k]), k
print("ok")
"""
    r = _python(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_streams_and_events_are_handles_to_the_devices_ordered_stream():
    s = torch.tpu.Stream()
    assert s == torch.tpu.current_stream() and s.device == torch.device("tpu", 0)
    # torch.Stream / torch.Event subclasses, as torch.cuda's: PyTorch's APIs taking a stream accept
    # them (record_stream raised "unknown parameter type", and had no tpu kernel)
    assert isinstance(s, torch.Stream) and s == torch.accelerator.current_stream()
    assert isinstance(torch.tpu.Event(), torch.Event)
    kept = torch.ones(4, device="tpu")
    kept.record_stream(s)
    kept.record_stream(torch.accelerator.current_stream())
    torch.accelerator.current_stream().wait_event(torch.tpu.Event())
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with torch.tpu.stream(s):
        start.record()
        x = torch.ones(64, 64, device="tpu") @ torch.ones(64, 64, device="tpu")
        end.record()
    s.wait_stream(torch.tpu.default_stream())
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    assert x[0, 0].item() == 64
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.tpu.Event().elapsed_time(end)


def test_torch_accelerator_api_on_tpu():
    """The device-generic API PyTorch code uses instead of torch.cuda: current accelerator,
    synchronization, memory statistics, torch.Stream and torch.Event."""
    acc = torch.accelerator
    assert acc.current_accelerator() == torch.device("tpu") and acc.device_count() >= 1
    acc.reset_peak_memory_stats()
    before = acc.memory_allocated()
    t = torch.ones(128, 128, device="tpu")
    assert acc.memory_allocated() >= before + 128 * 128 * 4
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_stats()["allocated_bytes.all.current"] == acc.memory_allocated()
    del t
    assert acc.memory_allocated() <= before
    acc.empty_cache()
    s = torch.Stream("tpu")
    assert s == acc.current_stream()
    start, end = torch.Event("tpu", enable_timing=True), torch.Event("tpu", enable_timing=True)
    start.record(s)
    y = torch.ones(64, 64, device="tpu") @ torch.ones(64, 64, device="tpu")
    end.record(s)
    s.wait_event(end)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0 and y[0, 0].item() == 64
    acc.synchronize()
    # the dtypes a tpu tensor holds: exactly those torch.empty accepts (it raised "Backend doesn't
    # support getting device capabilities")
    supported = acc.get_device_capability()["supported_dtypes"]
    for dtype in (torch.bool, torch.uint8, torch.int64, torch.bfloat16, torch.float64, torch.complex64, torch.uint16,
                  torch.float8_e4m3fn, torch.qint8):
        try:
            torch.empty(2, dtype=dtype, device="tpu")
            holds = True
        except (TypeError, NotImplementedError):  # NotImplementedError: quantized tensors
            holds = False
        assert (dtype in supported) == holds, dtype


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_sync_debug_mode_warns_or_raises_on_host_reads_as_cuda(mode):
    """torch.tpu.set_sync_debug_mode as torch.cuda's: every host read of device data warns (1) or
    raises (2), naming the read; explicit waits do not."""
    x = torch.arange(6.0, device="tpu")
    with torchtpu.eager_mode(mode):
        assert torch.tpu.get_sync_debug_mode() == 0
        try:
            torch.tpu.set_sync_debug_mode("warn")
            for read, name in ((lambda: (x * 2).sum().item(), "item"), (lambda: (x + 1).cpu(), "cpu"),
                               (lambda: torch.nonzero(x > 2), "item"), (lambda: print(x - 1), "print")):
                with pytest.warns(UserWarning, match=rf"called a synchronizing tpu operation \({name}\)"):
                    read()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                torch.tpu.synchronize()
                torchtpu.sync()
                y = x * 3  # no read
            torch.tpu.set_sync_debug_mode(2)
            with pytest.raises(RuntimeError, match="called a synchronizing tpu operation"):
                y.sum().item()
            torch.tpu.set_sync_debug_mode("default")
            assert y.sum().item() == 45.0
            with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
                torch.tpu.set_sync_debug_mode("loud")
        finally:
            torch.tpu.set_sync_debug_mode(0)


def test_availability_does_not_start_the_runtime():
    """torch.tpu.is_available() (and torch.accelerator's) answer from the installed plugin without
    loading it; the first tensor starts it. No plugin: False, and no error."""
    import subprocess
    import sys
    probe = ("import torch; a = torch.tpu.is_available(); b = torch.accelerator.is_available(); "
             "i = torch.tpu.is_initialized(); torch.ones(1, device='tpu'); "
             "print(a, b, i, torch.tpu.is_initialized())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "True", "False", "True"], done.stderr[-2000:]
    init = subprocess.run([sys.executable, "-c", "import torch; i = torch.tpu.is_initialized(); torch.tpu.init(); "
                           "torch.tpu.init(); print(i, torch.tpu.is_initialized())"],
                          capture_output=True, text=True, timeout=120)
    assert init.stdout.split() == ["False", "True"], init.stderr[-2000:]
    missing = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.is_available())"],
                             capture_output=True, text=True, timeout=120,
                             env={**__import__("os").environ, "TORCHTPU_PJRT_PLUGIN": "/nonexistent/plugin.so"})
    assert missing.stdout.split() == ["False"], missing.stderr[-2000:]


def test_pinned_host_memory_is_pinned_as_on_cuda():
    x = torch.randn(100, 3)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and pinned[7:].is_pinned() and not x.is_pinned()
    assert torch.equal(pinned, x) and torch.empty(5, pin_memory=True).is_pinned()
    assert torch.equal(pinned.to("tpu", non_blocking=True).cpu(), x)
    data = torch.utils.data.TensorDataset(torch.randn(10, 4), torch.arange(10))
    for features, labels in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True):
        assert features.is_pinned() and labels.is_pinned()
        assert torch.equal(labels.to("tpu", non_blocking=True).cpu(), labels)
    assert not torch.tensor([1.0]).is_pinned()
    # the device's host allocator, as torch.accelerator sees it (this crashed the process before)
    torch.accelerator.empty_host_cache()
    assert torch.equal(pinned.to("tpu").cpu(), x)


def test_non_blocking_copies_from_pinned_memory_outlive_their_source():
    """A non_blocking copy from pinned memory returns before the device has read the data, as
    CUDA's does; the pinned block is not freed or reused until the read is done, even when the
    source tensor is dropped at once (the DataLoader pattern), and synchronize() waits for it."""
    torch.manual_seed(0)
    sources = [torch.randn(1 << 18) for _ in range(12)]
    asynchronous = lambda: torchtpu.metrics.counters()["async_bytes_to_device"]
    before = asynchronous()
    sources[0].to("tpu", non_blocking=True)  # pageable memory: a copy before the call returns
    sources[0].pin_memory().to("tpu")  # not asked to be non-blocking
    assert asynchronous() == before
    copies = []
    for source in sources:
        pinned = source.pin_memory()
        copies.append(pinned.to("tpu", non_blocking=True))
        assert asynchronous() - before == source.numel() * 4 * len(copies)
        del pinned
        torch.full((1 << 18,), 7.0).pin_memory().fill_(-1.0)  # would land in a block freed too early
    torch.tpu.synchronize()
    for copy, source in zip(copies, sources):
        assert torch.equal(copy.cpu(), source)
    view = torch.arange(40.0).pin_memory()[8:24]  # a view inside a pinned block, cast on the way
    assert torch.equal(view.to("tpu", non_blocking=True).cpu(), torch.arange(8.0, 24.0))
    assert torch.equal(view.to("tpu", torch.float64, non_blocking=True).cpu(), torch.arange(8.0, 24.0, dtype=torch.float64))

