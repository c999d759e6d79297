"""uint16 and the float8 dtypes on tpu (torch.float8_e4m3fn, torch.float8_e5m2): they could not be
tpu tensors at all. Every value and every rounding is compared bit for bit with CPU PyTorch's,
and nothing may fall back to the CPU."""

import pytest
import torch

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def same_bits(tpu, cpu):
    """Bit for bit, but any NaN for a NaN: converting a NaN to float8_e5m2, CPU keeps payload bits
    XLA drops (0xFF vs 0xFE); PyTorch promises no NaN payload."""
    assert tpu.device.type == "tpu" and tpu.dtype == cpu.dtype and tpu.shape == cpu.shape
    back = tpu.cpu()
    width = {1: torch.uint8, 2: torch.int16}[cpu.element_size()]
    if cpu.is_floating_point():
        nan = cpu.float().isnan()
        assert torch.equal(back.float().isnan(), nan)
        back, cpu = back[~nan], cpu[~nan]
    assert torch.equal(back.view(width), cpu.view(width))


def every_float8(dtype):
    return torch.arange(256, dtype=torch.int16).to(torch.uint8).view(dtype)


def float32_probes():
    """Every float16 value (NaN and infinities included), float32 values around each float8
    rounding boundary and overflow, and random magnitudes from 2^-30 to 2^20."""
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    edges = torch.tensor([448.0, 464.0, 479.9, 480.0, 500.0, 57344.0, 61439.0, 61440.0, 65536.0, 1e30,
                          2.0 ** -9, 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 2.0 ** -18, 1.5 * 2.0 ** -17])
    g = torch.Generator().manual_seed(0)
    random = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-30, 20, (20000,), generator=g).float())
    return torch.cat([halves, edges, -edges, random])


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_widens_and_rounds_as_cpu(dtype, no_fallbacks):
    every = every_float8(dtype)
    same_bits(every.to("tpu"), every)
    for wide in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        torch.testing.assert_close(every.to("tpu").to(wide).cpu(), every.to(wide), rtol=0, atol=0, equal_nan=True)
    probes = float32_probes()
    same_bits(probes.to("tpu").to(dtype), probes.to(dtype))
    for narrow in (torch.bfloat16, torch.float16, torch.float64):
        same_bits(probes.to(narrow).to("tpu").to(dtype), probes.to(narrow).to(dtype))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_overflow_and_double_rounding_as_cpu(dtype, no_fallbacks):
    """Beyond float8_e4m3fn's range (±448; no infinities) CPU's conversion gives NaN up to PyTorch
    2.11 and ±448 after (PyTorch #178817): tpu follows the torch it is built against, in conversions
    from every dtype and in products. A float64 or an integer reaches float8 through float32, as
    PyTorch's float8 types are constructed from a float (1.0625 + 2^-40 is 1.0, not 1.125)."""
    wide = torch.tensor([448.0, 464.0, 470.0, 479.0, 480.0, 1000.0, 1e30, float("inf"), float("nan"),
                         1.0625 + 2.0 ** -40, 1.125 + 2.0 ** -40, 57344.0, 61440.0, 1e6], dtype=torch.float64)
    wide = torch.cat([wide, -wide])
    for source in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.float8_e5m2):
        same_bits(wide.to(source).to("tpu").to(dtype), wide.to(source).to(dtype))
    integers = torch.tensor([460, 470, 1000, 70000, -100000, 2 ** 40, 3])
    for source in (torch.int64, torch.int32):
        same_bits(integers.to(source).to("tpu").to(dtype), integers.to(source).to(dtype))
    big = torch.tensor([20.0, -300.0, 400.0, 448.0, 2.0]).to(dtype)
    same_bits(big.to("tpu") * big.to("tpu"), big * big)
    same_bits(big.to("tpu").mul_(big.to("tpu")), big.clone().mul_(big))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_ops_cpu_supports(dtype, no_fallbacks):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(6, 5, generator=g) * 4).to(dtype)
    y = (torch.randn(6, 5, generator=g) * 4).to(dtype)
    cases = {
        "mul": lambda a, b: a * b,
        "abs": lambda a, b: a.abs(),
        "cat": lambda a, b: torch.cat([a, b], 1),
        "stack": lambda a, b: torch.stack([a, b]),
        "flip": lambda a, b: a.flip(0),
        "clone of a transpose": lambda a, b: a.t().contiguous(),
        "fill_": lambda a, b: a.clone().fill_(0.3),
        "zero_": lambda a, b: a.clone().zero_(),
        "where": lambda a, b: torch.where(a.float() > 0, a, b),
        "index": lambda a, b: a[torch.tensor([0, 2, 2]).to(a.device)],
        "index_put_": lambda a, b: a.clone().index_put_((torch.tensor([1]).to(a.device),), b[0]),
        "copy_ from float32": lambda a, b: a.clone().copy_(b.float() * 3),
        "view as uint8": lambda a, b: a.view(torch.uint8),
    }
    for name, case in cases.items():
        expected = case(x, y)
        same_bits(case(x.to("tpu"), y.to("tpu")), expected)
    for name, case in {"eq": lambda a, b: a == b, "isnan": lambda a, b: a.isnan()}.items():
        assert torch.equal(case(x.to("tpu"), y.to("tpu")).cpu(), case(x, y)), name
    factory = torch.ones(3, dtype=dtype, device="tpu")
    same_bits(factory, torch.ones(3, dtype=dtype))


def test_uint16_as_cpu(no_fallbacks):
    values = torch.arange(0, 65536, 7, dtype=torch.int32).to(torch.uint16)
    tpu = values.to("tpu")
    same_bits(tpu, values)
    torch.testing.assert_close(tpu.to(torch.int32).cpu(), values.to(torch.int32), rtol=0, atol=0)
    same_bits(torch.tensor([70000, -1, 3]).to("tpu").to(torch.uint16), torch.tensor([70000, -1, 3]).to(torch.uint16))
    same_bits(torch.cat([tpu, tpu[:5]]), torch.cat([values, values[:5]]))
    assert torch.equal((tpu == 7).cpu(), values == 7)
    assert torch.zeros(2, 3, dtype=torch.uint16, device="tpu").cpu().sum().item() == 0


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn], ids=str)
def test_scaled_mm_as_cpu(out_dtype, no_fallbacks):
    """float8 matmul with per-tensor scales (torchao's float8 training calls it)."""
    g = torch.Generator().manual_seed(2)
    a = (torch.randn(16, 32, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(48, 32, generator=g) * 2).to(torch.float8_e4m3fn).t()
    scale_a, scale_b, bias = torch.tensor(0.5), torch.tensor(0.25), torch.randn(48, generator=g).to(out_dtype)
    kwargs = dict(out_dtype=out_dtype, bias=None if out_dtype == torch.float8_e4m3fn else bias)
    expected = torch._scaled_mm(a, b, scale_a, scale_b, **kwargs)
    on_tpu = {k: v.to("tpu") if torch.is_tensor(v) else v for k, v in kwargs.items()}
    got = torch._scaled_mm(a.to("tpu"), b.to("tpu"), scale_a.to("tpu"), scale_b.to("tpu"), **on_tpu)
    assert got.dtype == expected.dtype and got.device.type == "tpu"
    # the sums' order may differ: a float8 result may land one rounding step away
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float8_e4m3fn: 0.13}[out_dtype]
    torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=tolerance, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_ops_cpu_refuses_raise_its_error(dtype):
    x = torch.randn(4, 4).to(dtype)
    for op in (lambda a: a + a, lambda a: -a, lambda a: a.sum(), lambda a: a.max(), torch.relu, lambda a: a > a):
        with pytest.raises(NotImplementedError) as cpu:
            op(x)
        with pytest.raises(NotImplementedError) as tpu:
            op(x.to("tpu"))
        assert str(tpu.value).split("\n")[0] == str(cpu.value).split("\n")[0]
