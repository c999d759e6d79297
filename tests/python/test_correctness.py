"""Regression tests for silent wrong answers found by training real models on tpu (issue "Correct
everywhere"): each compares against CPU PyTorch and checks that nothing fell back to the CPU."""

import copy
import math
import re

import pytest
import torch
import torch.nn as nn

import torchtpu


# 1. Parameter sharing survives device moves -------------------------------------------------

class TiedLM(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT-2/BERT/T5 do

    def forward(self, x):
        return self.head(torch.tanh(self.mix(self.emb(x))))


@pytest.mark.parametrize("move", [
    lambda m: m.to("tpu"),
    lambda m: m.tpu(),
    lambda m: m.to("tpu", torch.float64),
    lambda m: m.to(device="tpu", dtype=torch.bfloat16),
    lambda m: m.to("tpu").cpu(),
], ids=["to", "tpu", "to_dtype", "to_kwargs", "and_back"])
def test_module_moves_keep_tied_weights(move):
    m = TiedLM()
    param = m.emb.weight
    moved = move(m)
    assert moved.head.weight is moved.emb.weight
    assert moved.emb.weight is param  # the same Parameter object, as on CUDA
    assert len(list(moved.parameters())) == 3


def test_tied_model_trains_like_cpu(no_fallbacks):
    torch.manual_seed(0)
    ref = TiedLM()
    model = copy.deepcopy(ref).to("tpu")
    model.load_state_dict(ref.state_dict())  # load_state_dict keeps the tie too
    assert model.head.weight is model.emb.weight
    x = torch.randint(0, 40, (4, 6))
    grads = []
    for m, dev in [(ref, "cpu"), (model, "tpu")]:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x.to(dev)).flatten(0, 1), x.to(dev).flatten())
            loss.backward()
            opt.step()
        grads.append(m.emb.weight.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.emb.weight.cpu(), ref.emb.weight, rtol=1e-4, atol=1e-5)


def test_shallow_copy_compatibility_matches_cuda_rules():
    cpu, tpu = torch.ones(2), torch.ones(2, device="tpu")
    assert torch._has_compatible_shallow_copy_type(cpu, tpu)
    assert torch._has_compatible_shallow_copy_type(tpu, cpu)
    assert not torch._has_compatible_shallow_copy_type(tpu, torch.ones(2, device="meta"))
    assert not torch._has_compatible_shallow_copy_type(tpu, torch.ones(2).to_sparse())


# 2. Autocast and GradScaler ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_follows_cuda_policy(dtype, no_fallbacks):
    a, b = torch.randn(4, 8, device="tpu"), torch.randn(8, 3, device="tpu")
    with torch.autocast("tpu", dtype=dtype):
        assert torch.get_autocast_dtype("tpu") == dtype
        mm = a @ b
        lin = nn.functional.linear(a, b.t())
        soft = torch.softmax(mm, -1)                      # fp32 policy
        ln = nn.functional.layer_norm(mm, (3,))           # fp32 policy
        summed = torch.sum(mm)                            # fp32_set_opt_dtype
        mixed = torch.addcmul(a, a.to(dtype), a)          # promote
        plain = mm + 1                                    # falls through
    assert (mm.dtype, lin.dtype, plain.dtype) == (dtype, dtype, dtype)
    assert (soft.dtype, ln.dtype, summed.dtype, mixed.dtype) == (torch.float32,) * 4
    torch.testing.assert_close(mm.float().cpu(), (a.cpu().to(dtype) @ b.cpu().to(dtype)).float())
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        with torch.autocast("tpu", dtype=dtype):
            nn.functional.binary_cross_entropy(torch.rand(3, device="tpu"), torch.rand(3, device="tpu"))


def test_transformer_trains_under_autocast_like_cpu(no_fallbacks):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                        nn.Linear(32, 5))
    x, y = torch.randn(4, 6, 16), torch.randint(0, 5, (4, 6))
    losses = {}
    for dev in ["cpu", "tpu"]:
        m = copy.deepcopy(ref).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        losses[dev] = []
        for _ in range(4):
            opt.zero_grad()
            with torch.autocast(dev, dtype=torch.bfloat16):
                out = m(x.to(dev))
                loss = nn.functional.cross_entropy(out.flatten(0, 1), y.to(dev).flatten())
            loss.backward()
            opt.step()
            losses[dev].append(loss.item())
    # CPU's autocast keeps softmax etc. in bf16 where CUDA's (and ours) use fp32: bf16 tolerance.
    assert losses["tpu"] == pytest.approx(losses["cpu"], rel=2e-2)
    assert losses["tpu"][-1] < losses["tpu"][0]


def test_grad_scaler_skips_steps_with_inf_and_backs_off(no_fallbacks):
    lin = nn.Linear(4, 2).to("tpu")
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu", init_scale=1024.0, growth_interval=2)
    before = lin.weight.detach().cpu().clone()
    with torch.autocast("tpu", dtype=torch.float16):
        loss = lin(torch.full((2, 4), float("inf"), device="tpu")).float().sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 512.0
    torch.testing.assert_close(lin.weight.detach().cpu(), before)  # step skipped
    for _ in range(2):
        opt.zero_grad()
        with torch.autocast("tpu", dtype=torch.float16):
            loss = lin(torch.ones(2, 4, device="tpu")).float().sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.testing.assert_close(lin.weight.grad.cpu(), torch.full((2, 4), 2.0))  # unscaled
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 1024.0  # two good steps: grown once


def test_torch_tpu_amp_aliases():
    from torch.tpu.amp import GradScaler, autocast, custom_fwd

    with autocast(dtype=torch.bfloat16):
        assert (torch.ones(2, 2, device="tpu") @ torch.ones(2, 2, device="tpu")).dtype == torch.bfloat16
    assert GradScaler().get_scale() == 2.0**16
    assert torch.tpu.amp.autocast is autocast and callable(custom_fwd)


# 3. _foreach_norm -------------------------------------------------------------------------------

@pytest.mark.parametrize("ord", [float("inf"), -float("inf"), 0, 1, 2, 3.5])
def test_foreach_norm_matches_cpu(ord, no_fallbacks):
    ts = [torch.tensor([1.0, -3.0, 0.0, 2.0]), torch.tensor([[0.0, 5.0], [0.0, -0.5]]), torch.randn(7),
          torch.tensor([1.0, float("nan")])]  # NaN propagates through max/min too
    expected = torch._foreach_norm(ts, ord)
    actual = torch._foreach_norm([t.to("tpu") for t in ts], ord)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, equal_nan=True)
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        torch._foreach_norm([torch.ones(2, dtype=torch.int32, device="tpu")], ord)


def test_foreach_norm_complex_and_dtype(no_fallbacks):
    ts = [torch.randn(5, dtype=torch.cfloat), torch.randn(3, dtype=torch.cfloat)]
    for a, e in zip(torch._foreach_norm([t.to("tpu") for t in ts], 2), torch._foreach_norm(ts, 2)):
        assert a.dtype == e.dtype == torch.float32
        torch.testing.assert_close(a.cpu(), e)
    wide = torch._foreach_norm([ts[0].to("tpu")], 2, dtype=torch.complex128)[0]
    assert wide.dtype == torch._foreach_norm([ts[0]], 2, dtype=torch.complex128)[0].dtype == torch.float64
    bf = [torch.randn(6).bfloat16()]
    a = torch._foreach_norm([bf[0].to("tpu")], 2, dtype=torch.float32)[0]
    torch.testing.assert_close(a.cpu(), torch._foreach_norm(bf, 2, dtype=torch.float32)[0])


def test_clip_grad_norm_inf(no_fallbacks):
    grads = [torch.tensor([1.0, -7.0]), torch.tensor([3.0])]
    params = [nn.Parameter(torch.zeros_like(g, device="tpu")) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.to("tpu")
    total = nn.utils.clip_grad_norm_(params, max_norm=1.0, norm_type=float("inf"))
    assert total.item() == 7.0
    torch.testing.assert_close(params[0].grad.cpu(), grads[0] / 7.0, rtol=1e-5, atol=1e-6)


# 4. Random ops, every dtype, statistically ------------------------------------------------------

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
COMPLEX = [torch.complex64, torch.complex128]
N = 20000


def _moments(x):
    x = x.cpu().double()
    return x.mean().item(), x.var().item()


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX)
def test_normal_and_randn(dtype, no_fallbacks):
    x = torch.randn(N, dtype=dtype, device="tpu")
    y = torch.empty(N, dtype=dtype, device="tpu").normal_(2.0, 3.0)
    if dtype.is_complex:
        # Variance 1 split evenly between the parts, each with the mean, as PyTorch draws them.
        for part in (x.real, x.imag):
            mean, var = _moments(part)
            assert abs(mean) < 0.03 and abs(var - 0.5) < 0.03
        for part in (y.real, y.imag):
            mean, var = _moments(part)
            assert abs(mean - 2.0) < 0.1 and abs(var - 4.5) < 0.25
        assert abs(torch.corrcoef(torch.stack([x.real.cpu().double(), x.imag.cpu().double()]))[0, 1]) < 0.05
    else:
        mean, var = _moments(x)
        assert abs(mean) < 0.03 and abs(var - 1) < 0.05
        mean, var = _moments(y)
        assert abs(mean - 2.0) < 0.1 and abs(var - 9) < 0.5


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX)
def test_uniform_and_rand(dtype, no_fallbacks):
    x = torch.empty(N, dtype=dtype, device="tpu").uniform_(-2.0, 4.0)
    parts = (x.real, x.imag) if dtype.is_complex else (x,)
    for part in parts:
        p = part.cpu().double()
        assert p.min() >= -2.0 and p.max() <= 4.0
        mean, var = _moments(p)
        assert abs(mean - 1.0) < 0.06 and abs(var - 3.0) < 0.15  # (b-a)^2/12
    r = torch.rand(N, dtype=dtype, device="tpu")
    assert r.real.cpu().min() >= 0 and r.real.cpu().max() < 1


@pytest.mark.parametrize("dtype", FLOATS)
def test_bernoulli_and_exponential(dtype, no_fallbacks):
    b = torch.empty(N, dtype=dtype, device="tpu").bernoulli_(0.3)
    assert set(b.cpu().unique().tolist()) <= {0.0, 1.0}
    assert abs(b.cpu().double().mean().item() - 0.3) < 0.02
    p = torch.full((N,), 0.8, dtype=dtype, device="tpu")
    assert abs(torch.bernoulli(p).cpu().double().mean().item() - 0.8) < 0.02
    e = torch.empty(N, dtype=dtype, device="tpu").exponential_(2.0)
    mean, var = _moments(e)
    assert e.cpu().min() >= 0 and abs(mean - 0.5) < 0.03 and abs(var - 0.25) < 0.04


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_randint_and_random(dtype, no_fallbacks):
    x = torch.randint(3, 10, (N,), dtype=dtype, device="tpu").cpu().double()
    assert x.min() == 3 and x.max() == 9 and abs(x.mean().item() - 6.0) < 0.1
    assert set(x.unique().tolist()) == set(range(3, 10))
    r = torch.empty(N, dtype=dtype, device="tpu").random_(0, 5).cpu().double()
    assert set(r.unique().tolist()) == set(range(5))


def test_random_bool_and_randperm(no_fallbacks):
    b = torch.empty(N, dtype=torch.bool, device="tpu").random_()
    assert abs(b.cpu().double().mean().item() - 0.5) < 0.02
    for n in [0, 1, 7, 1000]:
        assert sorted(torch.randperm(n, device="tpu").cpu().tolist()) == list(range(n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_multinomial_statistics(dtype, no_fallbacks):
    """multinomial ran on the CPU fallback (and so did generate(do_sample=True)). On the device:
    each row's draws follow its probabilities, with and without replacement, a zero probability
    is never drawn, CPU's errors are raised."""
    probs = torch.tensor([[0.1, 0.2, 0.7, 0.0], [0.5, 0.0, 0.25, 0.25]], dtype=dtype)
    draws = torch.multinomial(probs.to("tpu"), N, replacement=True).cpu()
    assert draws.dtype == torch.int64 and draws.shape == (2, N)
    for row, p in zip(draws, probs):
        freq = torch.bincount(row, minlength=4).double() / N
        torch.testing.assert_close(freq, p.double(), atol=0.02, rtol=0)
    # Without replacement, over many rows at once: distinct picks, the first one in proportion
    # to p and the second as CPU's (P(second = 0) = 0.2 * 0.1 / 0.8 + 0.7 * 0.1 / 0.3 = 0.258).
    many = probs[0, :3].expand(N, 3)
    picks = torch.multinomial(many.to("tpu"), 2).cpu()
    reference = torch.multinomial(many, 2)
    assert (picks[:, 0] != picks[:, 1]).all()
    for column in range(2):
        torch.testing.assert_close(torch.bincount(picks[:, column], minlength=3).double() / N,
                                   torch.bincount(reference[:, column], minlength=3).double() / N, atol=0.03, rtol=0)
    assert sorted(torch.multinomial(probs[0].to("tpu"), 3).cpu().tolist()) == [0, 1, 2]
    one = torch.multinomial(probs[1].expand(N, 4).to("tpu"), 1).cpu()  # a token per row, as generate draws
    torch.testing.assert_close(torch.bincount(one[:, 0], minlength=4).double() / N, probs[1].double(), atol=0.02, rtol=0)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(probs[0].to("tpu"), 5)
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):  # at the next sync, as on CUDA
        torch.multinomial(torch.zeros(3, dtype=dtype, device="tpu"), 1).cpu()


def test_geometric_cauchy_log_normal_and_normal_of_tensors(no_fallbacks):
    """These ran on the CPU fallback (torch.distributions' Geometric, Cauchy and LogNormal sample
    them; normal(mean_tensor, std) is Normal.sample). On the device, with CPU's checks."""
    g = torch.empty(N, device="tpu").geometric_(0.25).cpu()
    assert g.min() == 1 and g.eq(g.round()).all() and abs(g.mean().item() - 4) < 0.15
    assert abs(torch.empty(N, dtype=torch.int64, device="tpu").geometric_(0.5).cpu().double().mean().item() - 2) < 0.05
    c = torch.empty(N, device="tpu").cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1) < 0.1 and abs((c.quantile(0.75) - c.quantile(0.25)).item() / 2 - 2) < 0.15
    logs = torch.empty(N, device="tpu").log_normal_(0.5, 0.3).cpu().log()
    assert abs(logs.mean().item() - 0.5) < 0.01 and abs(logs.std().item() - 0.3) < 0.01
    means, stds = torch.tensor([[0.0], [1.0], [2.0]]), torch.tensor([[1.0], [2.0], [0.5]])
    z = torch.normal(means.expand(3, N).to("tpu"), stds.to("tpu")).cpu()
    torch.testing.assert_close(z.mean(1, keepdim=True), means, atol=0.05, rtol=0)
    torch.testing.assert_close(z.std(1, keepdim=True), stds, atol=0.05, rtol=0)
    assert abs(torch.normal(torch.zeros(N, device="tpu"), 3.0).cpu().std().item() - 3) < 0.1
    assert abs(torch.normal(2.0, torch.ones(N, device="tpu")).cpu().mean().item() - 2) < 0.05
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(torch.zeros(2, device="tpu"), -1.0)
    with pytest.raises(RuntimeError, match="all elements of std >= 0.0"):  # at the next sync, as on CUDA
        torch.normal(torch.zeros(2, device="tpu"), torch.tensor([1.0, -1.0], device="tpu")).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gamma_dirichlet_and_beta_samples(dtype, no_fallbacks):
    """_standard_gamma and _sample_dirichlet (torch.distributions' Gamma, Chi2, Beta, Dirichlet,
    StudentT) ran on the CPU fallback. Gamma(a) has mean and variance a; Dirichlet(a) has mean
    a / sum(a) and rows summing to 1; tiny and zero concentrations clamp as on CPU."""
    for a in (0.3, 1.0, 3.0, 20.0):
        g = torch._standard_gamma(torch.full((N,), a, dtype=dtype, device="tpu")).cpu()
        assert g.dtype == dtype and g.min() > 0
        assert abs(g.mean().item() - a) < 0.05 * a + 0.02 and abs(g.var().item() - a) < 0.1 * a + 0.02
    edge = torch.tensor([0.0, 1e-30], dtype=dtype)
    torch.testing.assert_close(torch._standard_gamma(edge.to("tpu")).cpu(), torch._standard_gamma(edge))
    alpha = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
    samples = torch.distributions.Dirichlet(alpha.to("tpu")).sample((N,)).cpu()
    torch.testing.assert_close(samples.mean(0), alpha / alpha.sum(), atol=0.01, rtol=0)
    torch.testing.assert_close(samples.sum(1), torch.ones(N, dtype=dtype))
    beta = torch.distributions.Beta(torch.tensor(2.0, dtype=dtype, device="tpu"), torch.tensor(5.0, dtype=dtype, device="tpu"))
    assert abs(beta.sample((N,)).cpu().mean().item() - 2 / 7) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gamma_sample_gradient_as_cpu(dtype, no_fallbacks):
    """_standard_gamma_grad (the gradient of Gamma, Chi2 and StudentT rsample) ran on the CPU
    fallback. Its three regimes (x < 0.8, concentration > 8 inside and outside x in [0.9a, 1.1a],
    the fitted rational function) and the edges (x = 0, x = inf) against CPU's kernel on the same
    samples; the gradient reaching the concentration through Gamma's rsample; half floats refused as
    on CPU."""
    torch.manual_seed(0)
    a = torch.cat([torch.rand(3000) * 0.5 + 0.01, torch.rand(3000) * 8, torch.rand(3000) * 100 + 8]).to(dtype)
    x = torch._standard_gamma(a)
    a = torch.cat([a, torch.tensor([9.0, 50.0, 0.01, 0.5, 3.0], dtype=dtype)])
    x = torch.cat([x, torch.tensor([9.5, 48.0, 0.0, 1e-30, float("inf")], dtype=dtype)])
    got = torch._standard_gamma_grad(a.to("tpu"), x.to("tpu")).cpu()
    torch.testing.assert_close(got, torch._standard_gamma_grad(a, x), rtol=1e-12 if dtype == torch.float64 else 0,
                               atol=0, equal_nan=True)
    c = torch.tensor([0.7, 2.5, 12.0], dtype=dtype, device="tpu", requires_grad=True)
    sample = torch.distributions.Gamma(c, torch.ones_like(c)).rsample()
    sample.sum().backward()  # d sample / d c, with rate 1
    torch.testing.assert_close(c.grad.cpu(), torch._standard_gamma_grad(c.detach().cpu(), sample.detach().cpu()))
    with pytest.raises(NotImplementedError, match="_standard_gamma_grad_cpu"):
        torch._standard_gamma_grad(a[:3].half().to("tpu"), x[:3].half().to("tpu"))


def test_masked_fill_with_a_cpu_scalar_tensor_as_cpu(no_fallbacks):
    """x.masked_fill(mask, torch.tensor(2.0)) on a tpu x raised "Expected `value` to be on same device
    as `a`" (masked_fill's Python meta kernel sees the meta twin of x beside the CPU value); CUDA
    and CPU take a CPU 0-d value."""
    x = torch.randn(4, 5)
    for case in (lambda x: x.masked_fill(x > 0, torch.tensor(2.0)),
                 lambda x: x.clone().masked_fill_(x > 0, torch.tensor(2, dtype=torch.int64)),
                 lambda x: torch.ops.aten.masked_fill.Tensor_out(x, x > 0, torch.tensor(3.0), out=torch.empty_like(x))):
        torch.testing.assert_close(case(x.to("tpu")).cpu(), case(x), rtol=0, atol=0)
    with pytest.raises(RuntimeError):
        x.to("tpu").masked_fill(x.to("tpu") > 0, torch.ones(2))

# torch.distributions families: parameters (as lists) for a factory on one device.
D = torch.distributions
DISTRIBUTIONS = {
    "Normal": (lambda p: D.Normal(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "LogNormal": (lambda p: D.LogNormal(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "Laplace": (lambda p: D.Laplace(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "Cauchy": (lambda p: D.Cauchy(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "Gumbel": (lambda p: D.Gumbel(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "Exponential": (lambda p: D.Exponential(p[0]), [[0.5, 1.0]]),
    "Uniform": (lambda p: D.Uniform(p[0], p[0] + p[1]), [[0.0, 1.0], [1.0, 2.0]]),
    "Bernoulli": (lambda p: D.Bernoulli(probs=p[0]), [[0.3, 0.6]]),
    "Categorical": (lambda p: D.Categorical(logits=p[0]), [[0.3, 0.6, 0.1]]),
    "RelaxedBernoulli": (lambda p: D.RelaxedBernoulli(p[1][0], logits=p[0]), [[0.3, 0.6], [0.5]]),
    "Binomial": (lambda p: D.Binomial(10, probs=p[0]), [[0.3, 0.6]]),
    "Geometric": (lambda p: D.Geometric(probs=p[0]), [[0.3, 0.6]]),
    "Poisson": (lambda p: D.Poisson(p[0]), [[3.0, 6.0]]),
    "NegativeBinomial": (lambda p: D.NegativeBinomial(5.0, probs=p[0]), [[0.3, 0.6]]),
    "Multinomial": (lambda p: D.Multinomial(10, probs=p[0]), [[0.3, 0.6, 0.1]]),
    "Gamma": (lambda p: D.Gamma(p[0], p[1]), [[2.0, 3.0], [1.0, 2.0]]),
    "Chi2": (lambda p: D.Chi2(p[0]), [[2.0, 3.0]]),
    "StudentT": (lambda p: D.StudentT(p[0]), [[2.0, 3.0]]),
    "Beta": (lambda p: D.Beta(p[0], p[1]), [[2.0, 3.0], [4.0, 5.0]]),
    "Dirichlet": (lambda p: D.Dirichlet(p[0]), [[2.0, 3.0, 1.5]]),
    "FisherSnedecor": (lambda p: D.FisherSnedecor(p[0], p[1]), [[2.0, 3.0], [4.0, 5.0]]),
    "HalfNormal": (lambda p: D.HalfNormal(p[0]), [[1.0, 2.0]]),
    "Pareto": (lambda p: D.Pareto(p[0], p[1]), [[1.0, 2.0], [2.0, 3.0]]),
    "Weibull": (lambda p: D.Weibull(p[0], p[1]), [[1.0, 2.0], [2.0, 3.0]]),
    "Kumaraswamy": (lambda p: D.Kumaraswamy(p[0], p[1]), [[1.0, 2.0], [2.0, 3.0]]),
    "ContinuousBernoulli": (lambda p: D.ContinuousBernoulli(probs=p[0]), [[0.3, 0.6]]),
    "VonMises": (lambda p: D.VonMises(p[0], p[1]), [[0.5, 1.0], [1.0, 2.0]]),
    "MultivariateNormal": (lambda p: D.MultivariateNormal(p[0], scale_tril=torch.diag(p[1])), [[0.5, 1.0], [1.0, 2.0]]),
    "LowRankMultivariateNormal": (lambda p: D.LowRankMultivariateNormal(p[0], p[0].new_ones(2, 1), p[1]),
                                  [[0.5, 1.0], [1.0, 2.0]]),
    "Wishart": (lambda p: D.Wishart(p[0][0], covariance_matrix=torch.diag(p[1])), [[3.0], [1.0, 2.0]]),
    "LKJCholesky": (lambda p: D.LKJCholesky(3, p[0][0]), [[1.5]]),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_distributions_as_cpu(name):
    """torch.distributions on tpu: log_prob (and entropy) of CPU's samples as on CPU, samples and
    reparameterized samples with their gradients on the device. Beta and Dirichlet rsample's
    gradient (_dirichlet_grad) is the one op that still runs on the CPU. Found here: Wishart's
    sampling indexes with CPU index tensors (tril_indices), which tpu refused."""
    make, params = DISTRIBUTIONS[name]
    cpu_params = [torch.tensor(p) for p in params]
    tpu_params = [p.to("tpu").requires_grad_() for p in cpu_params]
    cpu, tpu = make(cpu_params), make(tpu_params)
    torch.manual_seed(0)
    value = cpu.sample((4,))
    torchtpu.metrics.reset()
    torch.testing.assert_close(tpu.log_prob(value.to("tpu")).detach().cpu(), cpu.log_prob(value), rtol=1e-4, atol=1e-5)
    try:
        expected = cpu.entropy()
    except NotImplementedError:
        expected = None
    if expected is not None:
        torch.testing.assert_close(tpu.entropy().detach().cpu(), expected, rtol=1e-4, atol=1e-5)
    sample = tpu.rsample((4,)) if tpu.has_rsample else tpu.sample((4,))
    assert sample.device.type == "tpu" and sample.shape == value.shape
    assert torch.isfinite(sample.detach().cpu()).all()
    if tpu.has_rsample and name != "Wishart":  # Wishart's rsample backward fails on CPU too (an in-place write)
        (sample.sum() + tpu.log_prob(sample).sum()).backward()
        assert all(p.grad is not None and torch.isfinite(p.grad.cpu()).all() for p in tpu_params)
    expected_fallbacks = {"aten::_dirichlet_grad"} if name in ("Beta", "Dirichlet") else set()
    assert set(torchtpu.metrics.cpu_fallbacks()) == expected_fallbacks

def test_poisson_samples(no_fallbacks):
    """poisson (torch.distributions.Poisson) ran on the CPU fallback. On the device, Knuth's method
    below rate 10 and transformed rejection from 10, as CPU: integers whose frequencies match CPU's
    samples, mean and variance the rate; a negative rate raises at the next sync."""
    for rate in (0.0, 0.5, 4.0, 9.9, 10.0, 15.0, 1000.0):
        got = torch.poisson(torch.full((N,), rate, device="tpu")).cpu()
        assert got.eq(got.round()).all() and got.min() >= 0
        assert abs(got.mean().item() - rate) < 0.05 * rate + 0.02 and abs(got.var().item() - rate) < 0.1 * rate + 0.02
        if 0 < rate < 100:
            expected = torch.poisson(torch.full((N,), rate))
            bins = int(3 * rate) + 5
            torch.testing.assert_close(torch.bincount(got.long(), minlength=bins)[:bins].double() / N,
                                       torch.bincount(expected.long(), minlength=bins)[:bins].double() / N, atol=0.015, rtol=0)
    with pytest.raises(RuntimeError, match="invalid Poisson rate"):
        torch.poisson(torch.tensor([-1.0], device="tpu")).cpu()


def test_binomial_samples(no_fallbacks):
    """binomial (torch.distributions.Binomial) ran on the CPU fallback. On the device, inversion for
    count * q < 10 and BTRS from 10 (q = min(p, 1 - p)), as CPU: frequencies match CPU's samples,
    and the edge cases (no trials, p 0 or 1) are exact."""
    for count, prob in ((20, 0.3), (100, 0.3), (100, 0.8), (1000, 0.5), (5, 0.95), (0, 0.5), (10, 0.0), (10, 1.0)):
        counts, probs = torch.full((N,), float(count)), torch.full((N,), prob)
        got, expected = torch.binomial(counts.to("tpu"), probs.to("tpu")).cpu(), torch.binomial(counts, probs)
        assert got.eq(got.round()).all() and got.min() >= 0 and got.max() <= count
        torch.testing.assert_close(torch.bincount(got.long(), minlength=count + 1).double() / N,
                                   torch.bincount(expected.long(), minlength=count + 1).double() / N, atol=0.015, rtol=0)


def test_shift_operators_as_cpu(no_fallbacks):
    """x << s and x >> s (Python's operators: __lshift__, __irshift__, ...) ran on the CPU."""
    x, s = torch.tensor([5, -5, 1, 7]), torch.tensor([2, 70, 0, -1])
    for case in (lambda x, s: x << 2, lambda x, s: x >> 1, lambda x, s: x << s, lambda x, s: x >> s,
                 lambda x, s: x.to(torch.uint8) << 9, lambda x, s: x.clone().__ilshift__(3).__irshift__(s)):
        torch.testing.assert_close(case(x.to("tpu"), s.to("tpu")).cpu(), case(x, s), rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="lshift_cpu"):
        torch.tensor([1.5], device="tpu") << 2


def test_right_shifts_of_unsigned_integers_fill_with_zeros_as_cpu(no_fallbacks):
    """uint8 254 >> 1 gave 255: the shift filled with the sign bit, as for signed integers."""
    x = torch.tensor([254, 255, 128, 7, 0], dtype=torch.uint8)
    s = torch.tensor([1, 7, 3, 9, 2], dtype=torch.uint8)
    for case in (lambda x, s: x >> 1, lambda x, s: x >> s, lambda x, s: torch.bitwise_right_shift(x, s),
                 lambda x, s: x.clone().__irshift__(s), lambda x, s: x.to(torch.int8) >> s.to(torch.int8)):
        torch.testing.assert_close(case(x.to("tpu"), s.to("tpu")).cpu(), case(x, s), rtol=0, atol=0)


def test_shifts_of_bools_promote_as_cpu(no_fallbacks):
    """bools << 1 is int64 on CPU (shifts compute in the promoted dtype); PyTorch's meta kernel for
    the operators refuses bools, and tpu raised with it. Bools shifted by bools stay refused."""
    b, i = torch.tensor([True, False, True]), torch.tensor([1, 2, 3])
    for case in (lambda b, i: b << 1, lambda b, i: b >> 1, lambda b, i: b << i, lambda b, i: i << b,
                 lambda b, i: i.clone().__irshift__(b), lambda b, i: torch.bitwise_left_shift(b, i),
                 lambda b, i: torch.ops.aten.__lshift__.Scalar_out(b, 2, out=torch.empty(3, dtype=torch.long,
                                                                                         device=b.device))):
        got, expected = case(b.to("tpu"), i.to("tpu")), case(b, i)
        assert got.dtype == expected.dtype == torch.int64
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
    for refused in (lambda b: b << b, lambda b: torch.bitwise_right_shift(b, b)):
        with pytest.raises(NotImplementedError, match="shift_cpu\" not implemented for 'Bool'"):
            refused(b)
        with pytest.raises(NotImplementedError, match="shift_cpu\" not implemented for 'Bool'"):
            refused(b.to("tpu"))
    with pytest.raises(RuntimeError, match="can't be cast"):
        b.to("tpu").__ilshift__(1)  # the int64 result does not fit, as on CPU


# 5. Ops ordinary models use run on the device ---------------------------------------------------

@pytest.mark.parametrize("fn", [nn.functional.hardswish, nn.functional.hardsigmoid])
def test_hard_activations_backward_on_device(fn, no_fallbacks):
    x = torch.cat([torch.linspace(-5, 5, 21), torch.tensor([-3.0, 3.0])])  # the kinks themselves
    grads = []
    for dev in ["cpu", "tpu"]:
        xd = x.to(dev).detach().requires_grad_()
        (fn(xd) * torch.arange(23.0, device=dev)).sum().backward()
        grads.append(xd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_unique_family_on_device(no_fallbacks):
    x = torch.tensor([[3.0, 1.0, 2.0], [3.0, 2.0, -1.0]])
    for ri in (False, True):
        for rc in (False, True):
            actual = torch.unique(x.to("tpu"), return_inverse=ri, return_counts=rc)
            expected = torch.unique(x, return_inverse=ri, return_counts=rc)
            for a, e in zip(actual if isinstance(actual, tuple) else [actual],
                            expected if isinstance(expected, tuple) else [expected]):
                torch.testing.assert_close(a.cpu(), e)
    runs = torch.tensor([1, 1, 2, 2, 3, 1, 1, 2])
    for a, e in zip(torch.unique_consecutive(runs.to("tpu"), return_inverse=True, return_counts=True),
                    torch.unique_consecutive(runs, return_inverse=True, return_counts=True)):
        torch.testing.assert_close(a.cpu(), e)
    torch.testing.assert_close(torch.unique(torch.tensor([True, False, True], device="tpu")).cpu(),
                               torch.tensor([False, True]))
    assert torch.unique(torch.tensor([], device="tpu")).shape == (0,)


def test_masked_select_and_boolean_indexing_on_device(no_fallbacks):
    x = torch.arange(12.0).view(3, 4)
    mask = torch.tensor([True, False, True, True])
    xt = x.to("tpu").requires_grad_()
    picked = torch.masked_select(xt, mask.to("tpu"))
    torch.testing.assert_close(picked.detach().cpu(), torch.masked_select(x, mask))
    picked.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), mask.expand(3, 4).float())
    torch.testing.assert_close(x.to("tpu")[x.to("tpu") > 5].cpu(), x[x > 5])
    torch.testing.assert_close(torch.nonzero(x.to("tpu") > 5).cpu(), torch.nonzero(x > 5))


def test_cpu_index_tensors_index_tpu_tensors_as_on_cuda(no_fallbacks):
    """x[cpu_indices], x[cpu_mask] and their assignments on a tpu x raised "Expected all tensors to
    be on the same device"; PyTorch moves a CUDA tensor's CPU index tensors to its device (Wishart's
    rsample indexes with torch.tril_indices' CPU result). index_select keeps refusing, as on CUDA."""
    idx, mask = torch.tensor([0, 2]), torch.tensor([True, False, True])

    def assigned(x, indices, value):
        x = x.clone()
        x[indices] = value.to(x.device)
        return x

    cases = (lambda x: x[idx], lambda x: x[:, idx], lambda x: x[mask], lambda x: x[idx, idx],
             lambda x: x[torch.tensor(1)], lambda x: assigned(x, idx, torch.zeros(2, 4)),
             lambda x: assigned(x, (idx, idx), torch.ones(2)), lambda x: assigned(x, mask, torch.tensor(-1.0)),
             lambda x: x.clone().index_put_((idx,), torch.ones(2, 4, device=x.device), accumulate=True))
    x = torch.arange(12.0).view(3, 4)
    for case in cases:
        torch.testing.assert_close(case(x.to("tpu")).cpu(), case(x), rtol=0, atol=0)
    xt = x.to("tpu").requires_grad_()
    xt[idx].sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), torch.tensor([1.0, 0, 1]).view(3, 1).expand(3, 4))
    with pytest.raises(RuntimeError, match="same device"):
        x.to("tpu").index_select(0, idx)
    wishart = torch.distributions.Wishart(torch.tensor(3.0, device="tpu"), covariance_matrix=torch.eye(2, device="tpu"))
    sample = wishart.rsample((3,))
    assert sample.shape == (3, 2, 2) and torch.allclose(sample.cpu(), sample.cpu().mT)

# 6. bool/uint8 data and low-precision dtypes ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8])
def test_cat_stack_of_masks_and_images(dtype, no_fallbacks):
    a = torch.randint(0, 2, (5, 10)).to(dtype)
    b = torch.randint(0, 2, (3, 10)).to(dtype)
    torch.testing.assert_close(torch.cat([a.to("tpu"), b.to("tpu")]).cpu(), torch.cat([a, b]))
    torch.testing.assert_close(torch.stack([a.to("tpu"), a.to("tpu")], 1).cpu(), torch.stack([a, a], 1))
    if dtype != torch.bool:  # CPU has no abs/sign for bool
        torch.testing.assert_close(torch.abs(a.to("tpu")).cpu(), torch.abs(a))
        torch.testing.assert_close(torch.sign(a.to("tpu")).cpu(), torch.sign(a))


# 7. PyTorch's rounding in every mode ------------------------------------------------------------

@pytest.mark.parametrize("mode", ["strict", "debug", "fused", "lazy"])
def test_low_precision_round_trips_are_kept(mode):
    x = torch.randn(1000) * 3.3
    expected = x.to(torch.bfloat16).mul(3).float().add(1).to(torch.float16).float()
    with torchtpu.eager_mode(mode):
        y = x.to("tpu").to(torch.bfloat16).mul(3).float().add(1).to(torch.float16).float()
        torchtpu.sync()
        assert torch.equal(y.cpu(), expected)


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_float16_products_are_rounded_before_sums(mode):
    """XLA's CPU code, on CPUs with native float16 arithmetic, may fuse a float16 product and the
    following sum into one FMA (one rounding); PyTorch rounds the product first, in every mode."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(4096, generator=g).half() for _ in range(3))
    with torchtpu.eager_mode(mode):
        ta, tb, tc = a.to("tpu"), b.to("tpu"), c.to("tpu")
        results = [ta * tb + tc, tc - ta * tb, ta * 5.0 - 1.0, torch.addcmul(tc, ta, tb)]
        torchtpu.sync()
    for actual, expected in zip(results, [a * b + c, c - a * b, a * 5.0 - 1.0, torch.addcmul(c, a, b)]):
        assert torch.equal(actual.cpu(), expected)


def test_excess_precision_is_an_opt_in():
    # a product of two bfloat16 tensors (a Scalar factor is used in float32 and rounded explicitly)
    x = torch.randn(1000) * 3.3
    product = lambda t: t.to(torch.bfloat16).mul(torch.full_like(t, 3, dtype=torch.bfloat16)).float()
    expected = product(x)
    assert torch.backends.tpu.allow_excess_precision is False
    try:
        torch.backends.tpu.allow_excess_precision = True
        with torchtpu.eager_mode("lazy"):
            y = product(x.to("tpu"))
            torchtpu.sync()
        assert not torch.equal(y.cpu(), expected)  # XLA kept the product in f32
    finally:
        torch.backends.tpu.allow_excess_precision = False
    with torchtpu.eager_mode("lazy"):
        y = product(x.to("tpu"))
        torchtpu.sync()
    assert torch.equal(y.cpu(), expected)


# 8. Integer limits ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_integer_extremes(dtype, no_fallbacks):
    info = torch.iinfo(dtype)
    x = torch.tensor([[info.min, info.max, 0], [info.min, info.min, info.min]], dtype=dtype)
    t = x.to("tpu")
    for f in [lambda v: v.max(), lambda v: v.min(), lambda v: v.amax(1), lambda v: v.amin(1),
              lambda v: v.max(1).values, lambda v: v.argmax(1), lambda v: v.argmin(1),
              lambda v: v.cummax(1).values, lambda v: v.cummin(1).values]:
        torch.testing.assert_close(f(t).cpu(), f(x))
    idx = torch.tensor([[0, 0, 1], [1, 1, 0]])
    for reduce in ["amax", "amin"]:
        e = torch.zeros(2, 2, dtype=dtype).scatter_reduce(1, idx, x, reduce, include_self=False)
        a = torch.zeros(2, 2, dtype=dtype, device="tpu").scatter_reduce(1, idx.to("tpu"), t, reduce, include_self=False)
        torch.testing.assert_close(a.cpu(), e)


def test_cummax_cummin_ties_and_nans(no_fallbacks):
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan")], [2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 4.0]])
    for f in (torch.cummax, torch.cummin):
        for dim in (0, 1):
            a, e = f(x.to("tpu"), dim), f(x, dim)
            torch.testing.assert_close(a.values.cpu(), e.values, equal_nan=True)
            torch.testing.assert_close(a.indices.cpu(), e.indices)


# Ops the model-zoo sweep found falling back (detection/segmentation losses and upsampling,
# Swin's roll, generate's isin): on the device, forward and backward.

def _forward_backward_match(f, *inputs):
    results = []
    for dev in ["cpu", "tpu"]:
        xs = [x.detach().to(dev).requires_grad_(x.is_floating_point()) for x in inputs]
        y = f(*xs)
        if y.is_floating_point():
            (y * torch.linspace(-1, 2, y.numel(), device=dev).view(y.shape)).sum().backward()
        results.append([y.detach().cpu()] + [x.grad.cpu() for x in xs if x.grad is not None])
    for a, e in zip(*reversed(results)):
        torch.testing.assert_close(a, e)


F = nn.functional
_IMG, _TGT = torch.randn(2, 3, 5, 7), torch.randint(0, 3, (2, 5, 7))
MODEL_ZOO_OPS = {
    **{f"{name}_{red}": (lambda red=red, f=f: lambda a, b: f(a, b, reduction=red), (torch.randn(3, 4), torch.randn(3, 4)))
       for red in ["none", "mean", "sum"]
       for name, f in [("mse", F.mse_loss), ("smooth_l1", lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.5, **k)),
                       ("l1_like_smooth_l1", lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.0, **k)),
                       ("huber", lambda a, b, **k: F.huber_loss(a, b, delta=0.7, **k))]},
    "logsigmoid": (lambda: F.logsigmoid, (torch.randn(4, 5) * 5,)),
    "nll_loss2d": (lambda: lambda a: F.cross_entropy(a, _TGT.to(a.device), ignore_index=1), (_IMG,)),
    "upsample_nearest2d": (lambda: lambda a: F.interpolate(a, size=(8, 11), mode="nearest"), (_IMG,)),
    "upsample_nearest1d": (lambda: lambda a: F.interpolate(a, scale_factor=3, mode="nearest"), (torch.randn(2, 3, 5),)),
    "upsample_bilinear2d": (lambda: lambda a: F.interpolate(a, size=(8, 11), mode="bilinear"), (_IMG,)),
    "downsample_bilinear2d_aligned": (lambda: lambda a: F.interpolate(a, size=(3, 4), mode="bilinear", align_corners=True), (_IMG,)),
    "roll": (lambda: lambda a: torch.roll(a, (2, -1), (1, 2)), (torch.randn(3, 4, 5),)),
    "roll_flat": (lambda: lambda a: torch.roll(a, 7), (torch.randn(3, 4, 5),)),
}


@pytest.mark.parametrize("name", sorted(MODEL_ZOO_OPS))
def test_model_zoo_ops_on_device(name, no_fallbacks):
    make, inputs = MODEL_ZOO_OPS[name]
    _forward_backward_match(make(), *inputs)


def test_isin_on_device(no_fallbacks):
    e, t = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([2, 6, 9])
    for invert in (False, True):
        torch.testing.assert_close(torch.isin(e.to("tpu"), t.to("tpu"), invert=invert).cpu(), torch.isin(e, t, invert=invert))
    torch.testing.assert_close(torch.isin(e.to("tpu"), 3).cpu(), torch.isin(e, 3))
    torch.testing.assert_close(torch.isin(torch.tensor([1.0, 2.5], device="tpu"), torch.tensor([2, 1], device="tpu")).cpu(),
                               torch.tensor([True, False]))


def test_backward_keeps_precision_when_input_grad_is_not_needed(no_fallbacks):
    # A first conv's input needs no gradient: convolution_backward's output_mask drops grad_input.
    # That dropped result must not decide the dtype the others are computed in (it did: f32).
    torch.manual_seed(0)
    dtype = torch.float64
    x = torch.randn(4, 3, 16, 16, dtype=dtype)
    w = torch.randn(8, 3, 7, 7, dtype=dtype)
    ln_w = torch.randn(8, dtype=dtype)
    grads = []
    for dev in ["cpu", "tpu"]:
        wd, lnd = w.detach().to(dev).requires_grad_(), ln_w.detach().to(dev).requires_grad_()
        out = nn.functional.conv2d(x.to(dev), wd, stride=2, padding=3)
        out = nn.functional.layer_norm(out, (out.shape[-1],), weight=lnd)
        (out * torch.linspace(-1, 1, out.numel(), dtype=dtype, device=dev).view(out.shape)).sum().backward()
        grads.append((wd.grad.cpu(), lnd.grad.cpu()))
    for a, e in zip(*grads[::-1]):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)


def test_histc_on_device(no_fallbacks):  # Mixtral's router counts tokens per expert with it
    torch.manual_seed(0)
    for x, kw in [(torch.randn(1000), dict(bins=10)), (torch.randn(1000), dict(bins=7, min=-1, max=1)),
                  (torch.tensor([1.0, 1.0, 1.0]), dict(bins=4)),
                  (torch.tensor([0.0, 1, 2, float("nan"), 5, 6]), dict(bins=5, min=0, max=5)),
                  (torch.randn(100, dtype=torch.float64), dict(bins=3))]:
        torch.testing.assert_close(torch.histc(x.to("tpu"), **kw).cpu(), torch.histc(x, **kw))
    counts = torch.histc(torch.tensor([0, 1, 1, 3, 7], dtype=torch.int32, device="tpu"), bins=4, min=0, max=3)
    assert counts.dtype == torch.int32 and counts.cpu().tolist() == [1, 2, 0, 1]  # CPU has no int histc


RNNS = {
    "lstm_2_layers": lambda: torch.nn.LSTM(4, 8, num_layers=2, batch_first=True),
    "lstm_no_bias": lambda: torch.nn.LSTM(4, 8, bias=False),
    "lstm_proj": lambda: torch.nn.LSTM(4, 6, proj_size=3),
    "gru_bidirectional_no_bias": lambda: torch.nn.GRU(4, 8, bias=False, bidirectional=True),
    "lstm_cell": lambda: torch.nn.LSTMCell(4, 8),
    "gru_cell": lambda: torch.nn.GRUCell(4, 8),
}


@pytest.mark.parametrize("name", list(RNNS))
def test_rnn_family_runs_on_the_device_like_cpu(name):
    """nn.LSTM/GRU and their cells call _thnn_fused_{lstm,gru}_cell on a PrivateUse1 device, ops
    with only a CUDA kernel: lowered, they match CPU with no fallback."""
    torch.manual_seed(0)
    cpu = RNNS[name]()
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, 4) if "cell" in name else torch.randn(2, 3, 4)
    before = torchtpu.metrics.cpu_fallbacks()
    outs = []
    for model, inp in ((cpu, x), (dev, x.to("tpu"))):
        out = model(inp)
        out = out[0] if isinstance(out, tuple) else out
        out.square().sum().backward()
        outs.append(out)
    assert torchtpu.metrics.cpu_fallbacks() == before
    torch.testing.assert_close(outs[1].cpu(), outs[0], rtol=1e-5, atol=1e-6)
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-5, atol=1e-6)


def test_cuda_only_op_without_lowering_names_itself():
    """An op PyTorch implements only for CUDA cannot take the CPU fallback: the error says so,
    instead of PyTorch's 'Could not run ... with arguments from the CPU backend'."""
    with pytest.raises(NotImplementedError, match="_fused_dropout has no tpu lowering and no CPU kernel"):
        torch._fused_dropout(torch.ones(4, device="tpu"), 0.5)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int64, torch.uint8])
@pytest.mark.parametrize("fn", [torch.ceil, torch.floor, torch.round, torch.trunc], ids=lambda f: f.__name__)
def test_rounding_integers_returns_them_unchanged(fn, dtype):
    """StableHLO's rounding ops take floats only (the program failed to compile)."""
    x = torch.tensor([3, 0, 1, 7], dtype=dtype)
    assert torch.equal(fn(x.to("tpu")).cpu(), fn(x))
    assert torch.equal(torch._foreach_floor([x.to("tpu")])[0].cpu(), x)


def test_foreach_results_take_the_element_ops_dtype():
    """_foreach_x is x per element: integer tensors divide into floats, a complex scalar makes a
    complex result, sqrt/exp of integers are floats; in-place integer division raises as on CPU
    (the results kept self's dtype: 3 // 2 came back as 1)."""
    ints = [torch.tensor([3, 4], dtype=torch.int16), torch.tensor([5], dtype=torch.int16)]
    floats = [torch.tensor([3.0, 4.0]), torch.tensor([5.0])]
    on_tpu = lambda ts: [t.to("tpu") for t in ts]  # noqa: E731
    for fn, args in ((torch._foreach_div, (ints, 2)), (torch._foreach_div, (ints, ints)),
                     (torch._foreach_mul, (floats, 2 + 1j)), (torch._foreach_sqrt, (ints,)),
                     (torch._foreach_exp, ([torch.tensor([True, False])],))):
        expected = fn(*args)
        got = fn(*[on_tpu(a) if isinstance(a, list) else a for a in args])
        for e, g in zip(expected, got):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g.cpu(), e)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch._foreach_div_(on_tpu(ints), 2)


def _foreach_pow_of_scalar(exponents):  # Adam(capturable=True)'s bias corrections: beta ** steps
    return torch._foreach_pow(0.9, exponents)


FOREACH_CASES = [  # (op, extra arguments, dtype): the element op's own rules must hold per element
    (torch._foreach_div, (3,), torch.int32),  # true division of integers
    (torch._foreach_pow, (3,), torch.int64),  # integer powers stay exact
    (torch._foreach_pow, (0.5,), torch.bfloat16),  # low precision rounds once, as pow does
    (torch._foreach_lerp, ("others", 0.75), torch.float32),  # weight >= 0.5: end - (end - start) * (1 - w)
    (torch._foreach_lerp, ("others", "others"), torch.float32),
    (torch._foreach_lerp, ("others", "others"), torch.complex64),  # |weight| is real
    (torch._foreach_maximum, (0.0,), torch.float32),  # NaN propagates
    (torch._foreach_minimum, ("others",), torch.float32),
    (torch._foreach_clamp_min, ([0.1, -0.2, 0.3],), torch.float32),
    (torch._foreach_addcdiv, ("others", "others", 0.5), torch.bfloat16),
    (torch._foreach_addcmul, ("others", "others", torch.tensor([0.5, -0.3, 0.7])), torch.bfloat16),  # scalars as a tensor
    (torch._foreach_sub, ("others",), torch.int8),
    (torch._foreach_expm1, (), torch.float32),  # PyTorch's slow path ran one program per tensor
    (torch._foreach_sigmoid, (), torch.float16),
    (torch._foreach_max, (), torch.float32),
    (_foreach_pow_of_scalar, (), torch.float32),
]


@pytest.mark.parametrize("fn,extra,dtype", FOREACH_CASES,
                         ids=[f"{f.__name__}-{d}".replace("torch.", "") for f, _, d in FOREACH_CASES])
def test_foreach_ops_compute_what_their_element_op_computes_in_one_program(fn, extra, dtype, no_fallbacks):
    """Each _foreach_x is lowered through x's own lowering (the hand-written copies drifted:
    integer division, lerp's two-sided formula, rounding), one program for the whole list."""
    gen = torch.Generator().manual_seed(0)
    def tensors():
        shapes = [(3, 4), (5,), (2, 1, 3)]
        if dtype.is_complex:
            return [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]
        if dtype.is_floating_point:
            ts = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
            ts[0][0, 0] = float("nan")
            return ts
        return [torch.randint(-5, 6, s, generator=gen).to(dtype) for s in shapes]
    selves = tensors()
    args = [tensors() if a == "others" else a for a in extra]
    if fn is torch._foreach_div or fn is torch._foreach_addcdiv:
        args = [[t.masked_fill(t == 0, 1) for t in a] if isinstance(a, list) and isinstance(a[0], torch.Tensor) else a
                for a in args]
    def on_tpu(a):
        if isinstance(a, torch.Tensor):
            return a.to("tpu")
        return [t.to("tpu") for t in a] if isinstance(a, list) and isinstance(a[0], torch.Tensor) else a
    expected = fn(selves, *args)
    torchtpu.metrics.reset()
    got = fn(on_tpu(selves), *[on_tpu(a) for a in args])
    torch.tpu.synchronize()
    assert torchtpu.metrics.counters()["executions"] == 1
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype
        # libm and complex products may differ in the last bit; arithmetic must not
        exact = {} if fn in (torch._foreach_expm1, torch._foreach_sigmoid) or dtype.is_complex else {"rtol": 0, "atol": 0}
        torch.testing.assert_close(g.cpu(), e, equal_nan=True, **exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32])
def test_complex_scalars_that_do_not_fit_real_tensors_raise_as_on_cpu(dtype):
    """lerp/addcmul/clamp with a complex Scalar on real tensors: CPU raises, the meta kernels (and so
    tpu) computed something; a complex value with no imaginary part is fine."""
    x = torch.arange(1, 4).to(dtype)
    calls = [lambda t: torch.addcmul(t, t, t, value=1 + 1j), lambda t: torch.clamp_min(t, 1 + 1j),
             lambda t: torch._foreach_maximum([t], 1 + 1j)]
    if dtype.is_floating_point:
        calls += [lambda t: torch.lerp(t, t, 0.5 + 1j), lambda t: torch._foreach_lerp([t], [t], 0.5 + 1j)]
    for call in calls:
        with pytest.raises(RuntimeError) as on_cpu:
            call(x)
        with pytest.raises(RuntimeError, match=re.escape(str(on_cpu.value).splitlines()[0])):
            call(x.to("tpu"))
    if dtype.is_floating_point:
        torch.testing.assert_close(torch.lerp(x.to("tpu"), x.to("tpu") * 2, 0.5 + 0j).cpu(), torch.lerp(x, x * 2, 0.5 + 0j))


def test_foreach_and_lerp_refuse_what_cpu_refuses():
    """The element op's checks hold for in-place foreach forms too, and lerp of integers raises."""
    ints = torch.arange(3)
    for call, error in ((lambda d: torch._foreach_sub_([torch.ones(3, device=d)], True), RuntimeError),
                        (lambda d: torch.lerp(ints.to(d), ints.to(d), 0.5), NotImplementedError),
                        (lambda d: torch._foreach_lerp([ints.to(d)], [ints.to(d)], [ints.to(d)]), NotImplementedError)):
        with pytest.raises(error) as on_cpu:
            call("cpu")
        with pytest.raises(error, match=re.escape(str(on_cpu.value).splitlines()[0])):
            call("tpu")


DTYPE_REFUSALS = [  # (call, input): CPU's kernels refuse these dtypes, PyTorch's meta kernels do not
    (torch.abs, [True, False]), (torch.ceil, [True]), (torch.trunc, [1 + 1j]), (torch.frac, [3]),
    (torch.sign, [1 + 1j]), (torch.erf, [1j]), (lambda t: torch.clamp_min(t, True), [True]),
    (lambda t: torch.maximum(t, t), [1j]), (lambda t: t.abs_(), [1 + 1j]),
    (lambda t: torch._foreach_trunc([t]), [True]), (lambda t: torch._foreach_maximum([t], [t]), [1j]),
    (lambda t: torch.pow(t, t), [True]), (torch.max, [1j]), (lambda t: torch.addcmul(t, t, t), [True]),
    (lambda t: torch.logaddexp2(t, t), [1j]),
]


def test_bool_lists_clamp_as_on_cpu():
    """The refusals above apply to the dtype CPU computes in: bools clamped by an int promote."""
    bools = [torch.tensor([True, False]), torch.tensor([False])]
    on_tpu = [t.to("tpu") for t in bools]
    for fn, args in ((torch._foreach_clamp_min, (2,)), (torch._foreach_maximum, (bools,)),
                     (torch._foreach_minimum, (0.5,)), (lambda ts, m: [torch.clamp(t, max=m) for t in ts], (2,))):
        expected = fn(bools, *args)
        got = fn(on_tpu, *[on_tpu if a is bools else a for a in args])
        for e, g in zip(expected, got):
            assert torch.equal(g.cpu(), e)


def test_complex_powers_of_zero_and_in_full_precision():
    """0 ** w is 0 for Re(w) > 0 (XLA gave NaN: exp(w * log 0)); complex64 powers are computed in
    complex128 (XLA's complex64 power lost several ulps)."""
    ints = torch.tensor([0, 1, 2, -3])
    torch.testing.assert_close(torch.pow(ints.to("tpu"), 0.9 + 0.05j).cpu(), torch.pow(ints, 0.9 + 0.05j))
    z = torch.randn(50, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)) * 5
    w = torch.randn(50, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    exact = torch.pow(z.to(torch.complex128), w.to(torch.complex128))
    got = torch.pow(z.to("tpu"), w.to("tpu")).cpu().to(torch.complex128)
    assert ((got - exact).abs() / exact.abs()).max() < 2e-7


@pytest.mark.parametrize("call,values", DTYPE_REFUSALS)
def test_dtypes_cpu_refuses_raise_the_same_error(call, values):
    """tpu computed abs of bools, sign of complex numbers, ... where CPU raises."""
    with pytest.raises((RuntimeError, NotImplementedError)) as on_cpu:
        call(torch.tensor(values))
    with pytest.raises(type(on_cpu.value), match=re.escape(str(on_cpu.value).splitlines()[0])):
        call(torch.tensor(values, device="tpu"))
    assert torch.equal(torch.clamp_min(torch.tensor([True, False], device="tpu"),
                                       torch.tensor([False, True], device="tpu")).cpu(), torch.tensor([True, True]))


def test_inplace_result_that_does_not_fit_self_raises_as_on_cpu():
    """int_tensor.div_(2) (true division gives floats) raised on CPU but wrote truncated ints on
    tpu: PyTorch's meta kernel skips the check, so the functional form's result type decides."""
    for fn in (lambda t: t.div_(2), lambda t: t.mul_(torch.tensor(2.0, device=t.device))):
        with pytest.raises(RuntimeError, match="can't be cast"):
            fn(torch.tensor([3, 4], dtype=torch.int16))
        with pytest.raises(RuntimeError, match="can't be cast"):
            fn(torch.tensor([3, 4], dtype=torch.int16, device="tpu"))
    x = torch.tensor([3, 4], dtype=torch.int16, device="tpu")
    x.add_(1)
    assert x.cpu().tolist() == [4, 5]


# ---- storages seen as bytes: copy.deepcopy, storage clones, views of another width ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128])
def test_deepcopy_and_storage_bytes_match_cpu(dtype, no_fallbacks):
    """copy.deepcopy copies a tensor's storage as bytes (Lightning's checkpoint callback deep-copies
    logged tensors): a float32 storage seen as uint8 must give the CPU's bytes."""
    cpu = (torch.arange(6).reshape(2, 3) % 3).to(dtype)
    copied = copy.deepcopy(cpu.to("tpu"))
    assert copied.device.type == "tpu" and copied.dtype == dtype
    assert torch.equal(copied.cpu(), cpu)
    assert bytes(cpu.to("tpu").untyped_storage().clone().cpu()) == bytes(cpu.untyped_storage())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float16, torch.int32, torch.float64])
def test_views_of_another_width_read_and_write_like_cpu(dtype, no_fallbacks):
    cpu = torch.randn(8)
    tpu = cpu.to("tpu")
    assert torch.equal(tpu.view(dtype).cpu(), cpu.view(dtype))
    expected = cpu.clone()
    expected.view(dtype)[1] = 3
    tpu.view(dtype)[1] = 3
    assert torch.equal(tpu.cpu().view(torch.int32), expected.view(torch.int32))
    complex_cpu = torch.randn(3, dtype=torch.complex64)
    assert torch.equal(complex_cpu.to("tpu").view(torch.uint8).cpu(), complex_cpu.view(torch.uint8))


# ---- index_copy / index_add / index_fill on the device (HF's static KV cache uses index_copy_) ----

def _index_cases():
    g = torch.Generator().manual_seed(0)
    for shape, dim in [((5, 3), 0), ((4, 6, 2), 1), ((2, 3, 7), -1), ((), 0)]:
        size = shape[dim] if shape else 1
        index = torch.randperm(size, generator=g)[: max(1, size - 1)]
        source_shape = list(shape)
        if shape:
            source_shape[dim] = len(index)
        yield torch.randn(shape, generator=g), dim, index, torch.randn(source_shape, generator=g)


@pytest.mark.parametrize("case", list(range(4)))
def test_index_copy_add_fill_match_cpu(case, no_fallbacks):
    self, dim, index, source = list(_index_cases())[case]
    on = lambda t: t.to("tpu")  # noqa: E731
    torch.testing.assert_close(on(self).index_copy(dim, on(index), on(source)).cpu(),
                               self.index_copy(dim, index, source))
    torch.testing.assert_close(on(self).index_add(dim, on(index), on(source), alpha=2.5).cpu(),
                               self.index_add(dim, index, source, alpha=2.5))
    torch.testing.assert_close(on(self).index_fill(dim, on(index), -3.0).cpu(), self.index_fill(dim, index, -3.0))
    torch.testing.assert_close(on(self).index_fill(dim, on(index), torch.tensor(4.0, device="tpu")).cpu(),
                               self.index_fill(dim, index, torch.tensor(4.0)))
    written = on(self)
    written.index_copy_(dim, on(index), on(source))
    torch.testing.assert_close(written.cpu(), self.clone().index_copy_(dim, index, source))


def test_index_add_accumulates_repeated_indices_and_integers(no_fallbacks):
    self = torch.zeros(4, 3, dtype=torch.int64)
    index = torch.tensor([0, 2, 0, 0])
    source = torch.arange(12).reshape(4, 3)
    assert torch.equal(self.to("tpu").index_add(0, index.to("tpu"), source.to("tpu")).cpu(),
                       self.index_add(0, index, source))


def test_index_copy_out_of_range_raises():
    with pytest.raises((IndexError, RuntimeError), match="index"):
        torch.zeros(3, device="tpu").index_copy(0, torch.tensor([5], device="tpu"), torch.ones(1, device="tpu")).cpu()


def test_index_fill_backward_and_old_unique_run_on_the_device(no_fallbacks):
    """index_fill's gradient for a tensor fill value calls aten::_unique (the older unique)."""
    x = torch.randn(4, 5)
    index = torch.tensor([3, 1, 3])
    value = torch.tensor(2.0, requires_grad=True)
    x.index_fill(1, index, value).pow(2).sum().backward()
    value_tpu = torch.tensor(2.0, device="tpu", requires_grad=True)
    x.to("tpu").index_fill(1, index.to("tpu"), value_tpu).pow(2).sum().backward()
    torch.testing.assert_close(value_tpu.grad.cpu(), value.grad)
    data = torch.tensor([3, 1, 3, 7, 1])
    values, inverse = torch._unique(data.to("tpu"), sorted=True, return_inverse=True)
    want_values, want_inverse = torch._unique(data, sorted=True, return_inverse=True)
    assert torch.equal(values.cpu(), want_values) and torch.equal(inverse.cpu(), want_inverse)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int64])
def test_cpu_zero_dim_tensors_beside_tpu_tensors_compute_as_on_cpu(dtype):
    """A CPU 0-d tensor beside a tpu tensor becomes a Scalar operand, read in place: Python numbers
    PyTorch wraps, 0-d tensors of each Scalar kind, and conjugated or negated views, whose bits say
    to conjugate or negate when read (their values must not be taken raw)."""
    x = torch.arange(1, 5).to(dtype)
    others = [1.5, 2, True, 1 - 2j, torch.tensor(2.5, dtype=torch.float64), torch.tensor(3),
              torch.tensor(True), torch.tensor(2.0)._neg_view(), torch.tensor(1 + 2j).conj(),
              torch.tensor(1 + 2j, dtype=torch.complex64).conj(), torch.tensor(0.5, dtype=torch.float16)]
    torchtpu.metrics.reset()
    for other in others:
        expected = x * other
        got = x.to("tpu") * other
        assert got.dtype == expected.dtype, other
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, msg=f"times {other!r}")
    assert torchtpu.metrics.cpu_fallbacks() == {}


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_bool_operands_keep_ieee_nans(mode):
    """False * inf and False / 0 are NaN, as on CPU: XLA rewrote a converted bool times a
    broadcast scalar into a select, which gave 0 (also across ops fused into one program)."""
    mask = torch.tensor([True, False, True, False])
    cases = [lambda m: m / False, lambda m: m * float("inf"), lambda m: m.float() * float("nan"),
             lambda m: m / torch.tensor(False, device=m.device), lambda m: m.to(torch.bfloat16) / 0.0,
             lambda m: m.to(torch.complex64) * float("inf")]
    with torchtpu.eager_mode(mode):
        for case in cases:
            torch.testing.assert_close(case(mask.to("tpu")).cpu(), case(mask), equal_nan=True)


def test_division_by_a_constant_is_ieee_division(no_fallbacks):
    """XLA rewrote a division by a constant into a multiplication by its reciprocal: linspace(50,
    1, 50) of int64 lost 25 (24.999... truncated) and float16's was 0.016 off; a compiled x / 49
    was one ulp off for some x."""
    for dtype in (torch.int64, torch.float16, torch.float32, torch.float64):
        for args in ((50, 1, 50), (-2.0, 50, 50), (3, -20, 13)):
            expected = torch.linspace(*args, dtype=dtype)
            # CPU's float16 result depends on its vector width (with AVX-512 it rounds step * i to
            # half before adding start, with AVX2 it does not): one ulp either way
            rtol = 1e-3 if dtype == torch.float16 else 0
            torch.testing.assert_close(torch.linspace(*args, dtype=dtype, device="tpu").cpu(), expected,
                                       rtol=rtol, atol=0)
    x = torch.arange(1, 4000, dtype=torch.float32) * 49
    divide = torch.compile(lambda t: t / 49.0, backend="tpu")
    torch.testing.assert_close(divide(x.to("tpu")).cpu(), x / 49.0, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_gcd_lcm_on_device(dtype, no_fallbacks):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(0)
    a = torch.randint(max(info.min, -1000), min(info.max, 1000), (200,), generator=g, dtype=dtype)
    b = torch.randint(max(info.min, -1000), min(info.max, 1000), (200,), generator=g, dtype=dtype)
    a[:3], b[:3] = torch.tensor([0, 0, 7], dtype=dtype), torch.tensor([0, 5, 0], dtype=dtype)
    for fn in (torch.gcd, torch.lcm):
        torch.testing.assert_close(fn(a.to("tpu"), b.to("tpu")).cpu(), fn(a, b), rtol=0, atol=0)


def test_bool_max_and_min_reductions_start_from_false_and_true(no_fallbacks):
    """A max's identity, "the lowest value", was written true for bools: cummax and scatter_reduce
    amax (include_self=False) of bools gave true everywhere."""
    x = torch.tensor([[True, False, True, False], [False, False, True, True]])
    for dim in (0, 1):
        for fn in (torch.cummax, torch.cummin):
            expected, got = fn(x, dim), fn(x.to("tpu"), dim)
            assert torch.equal(got.values.cpu(), expected.values) and torch.equal(got.indices.cpu(), expected.indices)
    index = torch.tensor([[0, 1, 0, 2], [1, 1, 2, 0]])
    base = torch.tensor([[False, True, False], [True, False, False]])
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            expected = base.scatter_reduce(1, index, x, reduce, include_self=include_self)
            got = base.to("tpu").scatter_reduce(1, index.to("tpu"), x.to("tpu"), reduce, include_self=include_self)
            assert torch.equal(got.cpu(), expected), (reduce, include_self)


def test_triangle_indices_bincount_and_scalar_scatter_reduce_on_device(no_fallbacks):
    for rows, cols, offset in ((4, 3, 1), (3, 5, -2), (1, 1, 0), (0, 3, 0), (5, 5, 7)):
        for fn in (torch.tril_indices, torch.triu_indices):
            expected = fn(rows, cols, offset)
            assert torch.equal(fn(rows, cols, offset, device="tpu").cpu(), expected), (fn, rows, cols, offset)
    assert torch.tril_indices(4, 3, dtype=torch.int32, device="tpu").dtype == torch.int32
    x = torch.tensor([1, 3, 3, 0, 7])
    w = torch.tensor([0.5, 1.0, 2.0, 4.0, 8.0])
    for kwargs in ({}, {"minlength": 10}, {"weights": w}, {"weights": w.double()}, {"weights": w.half()}):
        expected = torch.bincount(x, **kwargs)
        got = torch.bincount(x.to("tpu"), **{k: v.to("tpu") if torch.is_tensor(v) else v for k, v in kwargs.items()})
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected)
    assert torch.bincount(torch.tensor([], dtype=torch.long, device="tpu"), minlength=3).tolist() == [0, 0, 0]
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device="tpu"))
    base = torch.ones(3, 4)
    index = torch.tensor([[0, 1, 2, 0], [1, 1, 0, 2]])
    for reduce in ("add", "multiply"):
        expected = base.scatter(0, index, 2.5, reduce=reduce)
        torch.testing.assert_close(base.to("tpu").scatter(0, index.to("tpu"), 2.5, reduce=reduce).cpu(), expected)


def test_conjugated_operands_of_matrix_products(no_fallbacks):
    """PyTorch hands BLAS-style ops (mm, addmm, bmm, baddbmm, dot, vdot, solve_triangular) tensors
    with a lazy conjugate bit; they ignored it, so a @ a.mH, torch.cov and corrcoef of complex
    inputs were wrong."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, dtype=torch.complex64, generator=g)
    b = torch.randn(4, 2, dtype=torch.complex64, generator=g)
    v = torch.randn(4, dtype=torch.complex64, generator=g)
    tri = torch.randn(3, 3, dtype=torch.complex64, generator=g).triu() + 3 * torch.eye(3)
    cases = [lambda a, b, v, t: a @ a.mH, lambda a, b, v, t: a.conj() @ b, lambda a, b, v, t: a @ b.conj(),
             lambda a, b, v, t: torch.addmm(b[:3, :1].conj(), a.conj(), b),
             lambda a, b, v, t: torch.bmm(a[None].conj(), b[None]),
             lambda a, b, v, t: torch.baddbmm(torch.zeros_like(a[None, :, :2]), a[None].conj(), b[None]),
             lambda a, b, v, t: torch.dot(v.conj(), v), lambda a, b, v, t: torch.vdot(v.conj(), v),
             lambda a, b, v, t: torch.linalg.solve_triangular(t.conj(), b[:3], upper=True),
             lambda a, b, v, t: torch.cov(a), lambda a, b, v, t: torch.corrcoef(a)]
    for case in cases:
        expected = case(a, b, v, tri)
        got = case(a.to("tpu"), b.to("tpu"), v.to("tpu"), tri.to("tpu"))
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_complex_fills_logsumexp_and_norm_dtypes(no_fallbacks):
    x = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True, False, True, True]] * 3)
    cases = [lambda x, m: torch.full((2, 3), 1 + 2j, device=x.device),
             lambda x, m: torch.full((2,), -0.5j, dtype=torch.complex128, device=x.device),
             lambda x, m: torch.full_like(x, 3 - 1j), lambda x, m: x.new_full((2,), 1j),
             lambda x, m: torch.logsumexp(x, 1),
             lambda x, m: torch.linalg.vector_norm(x, 2, 1, dtype=torch.complex128),
             lambda x, m: torch.masked.normalize(x, 2.0, 1, mask=m)]
    for case in cases:
        expected, got = case(x, mask), case(x.to("tpu"), mask.to("tpu"))
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="cannot be converted"):
        torch.zeros(2, device="tpu").fill_(1 + 2j)


def test_logspace_of_one_step_is_base_to_the_unrounded_start(no_fallbacks):
    """CPU fills one step with base ** start in double precision: float16 gave 19984 for
    logspace(4.3, 0, 1) (10 ** 4.30078, the start rounded to half first), int64 10000 (10 ** 4)."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.complex64):
        for args in ((4.3, 0, 1), (4.300000190734863, -3, 1), (4.3, 1, 1, 5.0), (2, 4, 3, 2.0)):
            torch.testing.assert_close(torch.logspace(*args, dtype=dtype, device="tpu").cpu(),
                                       torch.logspace(*args, dtype=dtype), rtol=0, atol=0)


def test_uint8_images_resize_as_cpu(no_fallbacks):
    """Bilinear and bicubic resizing of uint8 images (torchvision's Resize on uint8 tensors) was 0
    everywhere: the weights were computed in uint8. CPU's uint8 kernel rounds each pass (width
    first) and clamps; its fixed-point weights still differ from the exact ones by 1 (rarely 2) in
    up to a tenth of the pixels."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 40, 30), dtype=torch.uint8)
    for mode in ("bilinear", "bicubic"):
        for align_corners in (False, True):
            for antialias in (False, True):
                for size in ((17, 23), (60, 45)):
                    kw = dict(size=size, mode=mode, align_corners=align_corners, antialias=antialias)
                    expected = torch.nn.functional.interpolate(x, **kw)
                    got = torch.nn.functional.interpolate(x.to("tpu"), **kw).cpu()
                    assert got.dtype == torch.uint8
                    diff = (got.int() - expected.int()).abs()
                    assert diff.max() <= 2 and (diff > 0).float().mean() < 0.15, (kw, diff.max(), (diff > 0).sum())


def test_integer_fills_wrap_or_raise_as_cpu(no_fallbacks):
    """full(-9, uint8) failed to compile (an out-of-range literal); CPU wraps it to 247 and
    rejects values that overflow a signed type."""
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        for value in (-9, -1, 200, 255, -128, -300, 70000):
            try:
                expected = torch.full((3,), value, dtype=dtype)
            except RuntimeError:
                with pytest.raises(RuntimeError, match="overflow"):
                    torch.full((3,), value, dtype=dtype, device="tpu")
                continue
            assert torch.equal(torch.full((3,), value, dtype=dtype, device="tpu").cpu(), expected), (dtype, value)
    assert torch.scalar_tensor(-5, dtype=torch.uint8, device="tpu").item() == 251


def _bits(t):
    """Exact comparison for every dtype, complex32 included (CPU cannot compare complex32)."""
    return torch.view_as_real(t) if t.dtype == torch.complex32 else t


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_complex32_tensors_compute_as_cpu(mode, no_fallbacks):
    """complex32 (torch.chalf) was not a tpu dtype: x.chalf(), torch.complex of float16 parts and
    float16 foreach ops with a complex Scalar raised TypeError. It is stored as float16 pairs and
    computed in complex64, rounded as CPU rounds (a Scalar to complex32 first)."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(4, 5, dtype=torch.half, generator=g)
    c = torch.complex(h, torch.randn(4, 5, dtype=torch.half, generator=g))
    cases = [lambda c, h: h.chalf(), lambda c, h: torch.complex(h, 2 * h), lambda c, h: c + c,
             lambda c, h: c * (2 - 1j), lambda c, h: c - (0.3 + 1j), lambda c, h: h + (0.3 + 1j),
             lambda c, h: -c, lambda c, h: c.abs(), lambda c, h: c.conj().resolve_conj(),
             lambda c, h: c.t().contiguous(), lambda c, h: torch.cat([c, c]), lambda c, h: c.clone().fill_(1 - 2j),
             lambda c, h: torch.view_as_real(c).clone(), lambda c, h: c.to(torch.complex64), lambda c, h: c == c,
             lambda c, h: torch.zeros(3, dtype=torch.chalf, device=h.device),
             lambda c, h: torch._foreach_add([h, h], 0.3 + 2j)[1], lambda c, h: torch._foreach_mul([h], 2 + 1j)[0]]
    with torchtpu.eager_mode(mode):
        for case in cases:
            expected, got = case(c, h), case(c.to("tpu"), h.to("tpu"))
            assert got.dtype == expected.dtype
            torch.testing.assert_close(_bits(got.cpu()), _bits(expected), rtol=0, atol=0)
        assert c.to("tpu")[1, 2].item() == c[1, 2].item()
    for refused in (lambda c, h: c / 2, lambda c, h: torch._foreach_pow([h], 2 + 1j)):  # as CPU
        with pytest.raises(NotImplementedError, match="ComplexHalf"):
            refused(c, h)
        with pytest.raises(NotImplementedError, match="ComplexHalf"):
            refused(c.to("tpu"), h.to("tpu"))


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_add_rounds_as_cpu(dtype, mode, no_fallbacks):
    """CPU's add kernel sees a Scalar as a tensor of the output dtype (x + 0.883 in float16 adds
    0.8833: 160 of 400 elements were an ulp off), and with alpha its vectorized loop rounds
    a + alpha * b once where its scalar loop (the last n mod 32 elements on AVX-512) rounds alpha * b
    first; torchtpu rounded once everywhere. Bit for bit now, foreach ops (their element ops) too."""
    g = torch.Generator().manual_seed(0)
    shapes = [(7, 7), (19, 19), (20, 20), (100,), (3, 33)]
    xs = [torch.randn(s, dtype=dtype, generator=g) for s in shapes]
    ys = [torch.randn(s, dtype=dtype, generator=g) for s in shapes]
    cases = [lambda x, y: x + 0.8831494822540025, lambda x, y: torch.add(x, y, alpha=3.14),
             lambda x, y: torch.sub(x, y, alpha=-3.125), lambda x, y: torch.rsub(x, y, alpha=0.3),
             lambda x, y: x.clone().add_(y, alpha=1.7)]
    with torchtpu.eager_mode(mode):
        for case in cases:
            for x, y in zip(xs, ys):
                torch.testing.assert_close(case(x.to("tpu"), y.to("tpu")).cpu(), case(x, y), rtol=0, atol=0)
        # Layouts that change CPU's loop: a strided operand (all scalar loop), rows with gaps between
        # them and a broadcast row (one vectorized loop per row, each with its tail).
        big = torch.randn(38, 76, dtype=dtype, generator=g)
        layouts = [lambda t: (t[:19, ::2], t[19:, :38]), lambda t: (t[::2, :35], t[1::2, 40:75]),
                   lambda t: (t[:, :70], t[0:1, :70]), lambda t: (t[:5, :5].t(), t[5:10, :5])]
        for layout in layouts:
            for case in cases[1:4]:
                torch.testing.assert_close(case(*layout(big.to("tpu"))).cpu(), case(*layout(big)), rtol=0, atol=0)
        tpu = lambda ts: [t.to("tpu") for t in ts]
        for got, expected in zip(torch._foreach_add(tpu(xs), tpu(ys), alpha=3.14), torch._foreach_add(xs, ys, alpha=3.14)):
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
        for got, expected in zip(torch._foreach_add(tpu(xs), [0.3, 0.7, 1.1, 2.9, 0.01]), torch._foreach_add(xs, [0.3, 0.7, 1.1, 2.9, 0.01])):
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_zero_gradients_are_made_on_the_device(no_fallbacks):
    """Autograd makes a gradient it knows is zero (sgn of a real tensor) with
    _efficientzerotensor, which ran on the CPU fallback: the last float32 OpInfo sample that
    needed one. Zeros are now made on the device."""
    for dtype in (torch.float32, torch.complex64):
        x = torch.tensor([-1.5, 0.0, 2.0 + 1j if dtype.is_complex else 2.0], dtype=dtype)
        grads = []
        for device in ("cpu", "tpu"):
            leaf = x.clone().to(device).requires_grad_()
            out = leaf.sgn()
            (torch.view_as_real(out) if dtype.is_complex else out).sum().backward()
            grads.append(leaf.grad.cpu())
        torch.testing.assert_close(grads[1], grads[0])
    assert torch.ops.aten._efficientzerotensor([2, 3], device="tpu").cpu().eq(0).all()


# Layouts: eager results have the strides torch.compile's fake tensors assume ----------------

def _dense_strides(t):  # the strides of dimensions longer than 1: the others mean nothing
    return tuple(s for n, s in zip(t.shape, t.stride()) if n > 1) if t.numel() else ()


def _channels_last_net(dims):
    Conv, ConvT, Norm, Pad, Pool = {
        2: (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.ReflectionPad2d, nn.MaxPool2d),
        3: (nn.Conv3d, nn.ConvTranspose3d, nn.BatchNorm3d, nn.ReflectionPad3d, nn.MaxPool3d)}[dims]
    return nn.Sequential(Norm(3), Conv(3, 8, 3), Norm(8), nn.Hardswish(), Pad(1), Conv(8, 8, 3, groups=8), Pool(2),
                         ConvT(8, 4, 3, stride=2), nn.ConstantPad2d(1, 0.5) if dims == 2 else nn.ConstantPad3d(1, 0.5),
                         nn.AdaptiveAvgPool2d(2) if dims == 2 else nn.AdaptiveAvgPool3d(2), nn.Flatten(),
                         nn.Linear(4 * 2 ** dims, 3))


@pytest.mark.parametrize("dims", [2, 3])
def test_channels_last_models_train_as_cpu_eager_and_compiled(dims, no_fallbacks):
    """A channels-last model under torch.compile(backend="tpu") failed ("view size is not
    compatible with input tensor's size and stride" at its Flatten) when an eager tpu kernel laid
    out a result unlike the fake tensors torch.compile traces with: compiled graphs take views of
    results by the traced strides."""
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    torch.manual_seed(0)
    ref = _channels_last_net(dims).eval().to(memory_format=fmt)
    x = torch.randn((4, 3) + (9,) * dims).contiguous(memory_format=fmt)
    runs = [(ref, "cpu"), (copy.deepcopy(ref).to("tpu"), "tpu"),
            (torch.compile(copy.deepcopy(ref).to("tpu"), backend="tpu"), "tpu")]
    results = []
    for m, device in runs:
        out = m(x.to(device))
        out.square().sum().backward()
        params = m._orig_mod.parameters() if hasattr(m, "_orig_mod") else m.parameters()
        results.append([out.detach().cpu()] + [p.grad.cpu() for p in params])
    for got in results[1:]:
        for a, e in zip(got, results[0]):
            torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


def _layout_cases():
    A = torch.ops.aten
    cl = torch.channels_last

    def conv(x, w):
        return A.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    def stats(x):
        return torch.zeros(3, device=x.device), torch.ones(3, device=x.device)
    return {
        "convolution": lambda x, w, g: conv(x, w),
        "convolution_of_contiguous_input": lambda x, w, g: conv(x.contiguous(), w),
        "convolution_backward": lambda x, w, g: A.convolution_backward(
            conv(x, w), x, w, [8], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])[:2],
        "batch_norm": lambda x, w, g: A._native_batch_norm_legit(x, None, None, *stats(x), True, 0.1, 1e-5)[0],
        "batch_norm_eval": lambda x, w, g: A._native_batch_norm_legit_no_training(x, None, None, *stats(x), 0.1, 1e-5)[0],
        "batch_norm_backward": lambda x, w, g: A.native_batch_norm_backward(
            g, x, None, None, None, *stats(x), True, 1e-5, [True, False, False])[0],
        "constant_pad": lambda x, w, g: A.constant_pad_nd(x, [1, 1, 1, 1], 0.0),
        "reflection_pad": lambda x, w, g: A.reflection_pad2d(x, [1, 1, 1, 1]),
        "max_pool": lambda x, w, g: A.max_pool2d_with_indices(x, [2, 2], [2, 2]),
        "max_unpool": lambda x, w, g: A.max_unpool2d(*A.max_pool2d_with_indices(x, [2, 2], [2, 2]), [6, 6]),
        "adaptive_avg_pool": lambda x, w, g: A._adaptive_avg_pool2d(x, [2, 2]),
        "upsample": lambda x, w, g: A.upsample_bilinear2d(x, [8, 8], False),
        "hardswish_backward": lambda x, w, g: A.hardswish_backward(g, x),
        # (CPU's kernel computes wrong values for a gradient laid out unlike the input; tpu's
        # does not, and autograd never passes one)
        "group_norm_backward": lambda x, w, g: A.native_group_norm_backward(
            g.contiguous(memory_format=cl), x, torch.zeros(2, 3, device=x.device), torch.ones(2, 3, device=x.device), None, 2, 3, 36, 3,
            [True, False, False])[0],
        "geqrf": lambda x, w, g: A.geqrf(x[0, 0])[0],
        "eig_vectors": lambda x, w, g: A.linalg_eig(x[0, 0])[1].abs(),  # abs: free of each vector's phase
        "svd_vh": lambda x, w, g: A._linalg_svd(x[0, 0])[2].abs(),
    }


@pytest.mark.parametrize("case", list(_layout_cases()))
def test_eager_layouts_are_what_torch_compile_assumes(case, no_fallbacks):
    """Eager tpu results of channels-last inputs have the strides FakeTensor computes for tpu
    (what AOT autograd traces with), and CPU's values."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fn = _layout_cases()[case]
    torch.manual_seed(0)
    cpu_args = (torch.randn(2, 3, 6, 6).contiguous(memory_format=torch.channels_last),
                torch.randn(8, 3, 3, 3).contiguous(memory_format=torch.channels_last), torch.randn(2, 3, 6, 6))
    tpu_args = tuple(a.to("tpu") for a in cpu_args)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = fn(*(mode.from_tensor(a) for a in tpu_args))
    got, expected = fn(*tpu_args), fn(*cpu_args)
    for g, f, e in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, fake, expected))):
        assert _dense_strides(g) == _dense_strides(f)
        torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fn", [
    torch.nonzero, torch.argwhere, lambda t: torch.nonzero(t, as_tuple=True)[0], lambda t: t[t > 0],
    lambda t: torch.geqrf(t.reshape(-1, 4))[0],
], ids=["nonzero", "argwhere", "nonzero_as_tuple", "boolean_index", "geqrf"])
def test_column_major_results_as_cpu(fn, no_fallbacks):
    """CPU and CUDA return nonzero's coordinates column by column (each index tensor of
    as_tuple=True contiguous) and LAPACK-style factors column-major; tpu returned them row-major."""
    for x in (torch.randn(2, 3, 4), torch.zeros(3, 4), torch.tensor([1.0, -2.0, 3.0, 0.5])):
        expected, got = fn(x), fn(x.to("tpu"))
        assert _dense_strides(got) == _dense_strides(expected)
        torch.testing.assert_close(got.cpu(), expected)
