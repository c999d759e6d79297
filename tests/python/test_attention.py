"""F.scaled_dot_product_attention on tpu runs as one fused op forward and one backward (the
overrideable SDPA backend), not PyTorch's math decomposition: outputs and gradients against CPU
PyTorch, the cases that keep the math path, and the op count that shows which path ran."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torchtpu


def _inputs(dtype, L, S, heads=4, mask=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, L, 8, generator=g, dtype=dtype)
    k = torch.randn(2, heads, S, 8, generator=g, dtype=dtype)
    v = torch.randn(2, heads, S, 6, generator=g, dtype=dtype)
    m = None
    if mask == "float":
        m = torch.randn(L, S, generator=g, dtype=dtype)
    elif mask == "bool":
        m = torch.rand(2, 1, L, S, generator=g) > 0.3
        m[0, 0, 3] = False  # a fully masked row: zeros out, as PyTorch's safe softmax
    return q, k, v, m


def _attention(device, q, k, v, m, **kwargs):
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    mask = None if m is None else m.to(device)
    if mask is not None and mask.is_floating_point():
        mask.requires_grad_()
        leaves.append(mask)
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=mask, **kwargs)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
    (out * weights).sum().backward()
    return [out.detach()] + [t.grad for t in leaves]


CASES = [
    dict(L=16, S=16, is_causal=False),
    dict(L=16, S=16, is_causal=True),
    dict(L=12, S=20, is_causal=True),  # causal with L != S: top-left aligned, as PyTorch's tril
    dict(L=20, S=12, is_causal=True),
    dict(L=16, S=24, mask="float"),  # an additive bias, broadcast over batch and heads: its grad is summed
    dict(L=16, S=16, mask="bool"),
    dict(L=16, S=16, scale=0.3),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_attention_matches_cpu(case, dtype, mode, no_fallbacks):
    case = dict(case)
    q, k, v, m = _inputs(dtype, case.pop("L"), case.pop("S"), mask=case.pop("mask", None))
    with torchtpu.eager_mode(mode):
        got = _attention("tpu", q, k, v, m, **case)
        got = [t.cpu() for t in got]
    expected = _attention("cpu", q, k, v, m, **case)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for name, a, e in zip(["out", "dq", "dk", "dv", "dmask"], got, expected):
        torch.testing.assert_close(a, e, **tol, msg=lambda s: f"{name}: {s}")


def _ops_of(q, k, v, **kwargs):
    """The output on tpu and how many ops it took."""
    q, k, v = q.to("tpu"), k.to("tpu"), v.to("tpu")
    torch.tpu.synchronize()
    before = torchtpu.metrics.counters()["strict_ops"]
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    return out, torchtpu.metrics.counters()["strict_ops"] - before


def _forward_ops(**kwargs):
    q, k, v, _ = _inputs(torch.float32, 16, 16)
    out, ops = _ops_of(q, k, v, **kwargs)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, **kwargs))
    return ops


def test_attention_is_one_op_and_the_math_path_stays_available():
    assert _forward_ops(is_causal=True) == 1
    with sdpa_kernel(SDPBackend.MATH):  # the user's choice of backend is respected
        assert _forward_ops(is_causal=True) > 1


def test_grouped_query_attention_keeps_the_math_path(no_fallbacks):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 8, 8, generator=g)
    k = torch.randn(1, 2, 8, 8, generator=g)
    v = torch.randn(1, 2, 8, 8, generator=g)
    got, ops = _ops_of(q, k, v, enable_gqa=True)
    assert ops > 1
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


def _pytorch_batches_unbatched_inputs():
    """Whether F.scaled_dot_product_attention itself gives 3-d inputs a batch dimension of 1 before
    it chooses a backend (PyTorch 2.14 does, 2.11 did not): its first op on CPU is an unsqueeze."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstOp(TorchDispatchMode):
        ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    q = torch.randn(2, 4, 8)
    with FirstOp() as mode:
        F.scaled_dot_product_attention(q, q, q)
    return mode.ops[0] is torch.ops.aten.unsqueeze.default


def test_three_d_inputs_take_the_path_pytorch_chooses(no_fallbacks):
    """Unbatched [heads, L, E] inputs. tpu's backend choice (aten/ops/attention.cpp) takes the fused
    op for 4-d tensors only. PyTorch 2.14 unsqueezes 3-d inputs to a batch of one before choosing,
    on every device, so they run as the one fused op; 2.11 chose on the 3-d tensors, so they took
    the math decomposition. Either way the result is CPU's."""
    q, k, v, _ = _inputs(torch.float32, 16, 16)
    q, k, v = q[0], k[0], v[0]  # [heads, L, E]: no batch dimension
    batched = _pytorch_batches_unbatched_inputs()
    release = torchtpu.torch_versions.release(torch.__version__)
    assert batched == (release >= (2, 14)) or (2, 11) < release < (2, 14)  # known for 2.11 and 2.14
    got, ops = _ops_of(q, k, v, is_causal=True)
    assert ops == 1 if batched else ops > 1
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_dropout_keeps_the_math_path(no_fallbacks):
    q, k, v, _ = _inputs(torch.float32, 16, 16)
    got, ops = _ops_of(q, k, v, dropout_p=0.5)
    assert ops > 1  # the random mask is the math path's, drawn on the device
    kept = F.scaled_dot_product_attention(q, k, v)
    # each output row is a dropped-out, rescaled mix of v's rows: finite and of the same shape
    assert got.shape == kept.shape and torch.isfinite(got.cpu()).all()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flex_attention_runs_on_tpu_as_dense_attention(compiled, no_fallbacks):
    """FlexAttention (a score_mod reading a learned per-head bias, a block mask from a causal and
    document mask_mod) forward as CPU's flex_attention, gradients (the bias's too) as the same
    attention written densely in float64 (CPU's flex_attention refuses gradients); uncompiled
    and under torch.compile(backend="tpu")."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 128, 16, generator=g) for _ in range(3))
    bias = torch.randn(2, generator=g)  # per head
    document = torch.arange(128) // 48

    def attend(q, k, v, bias, document):
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + bias[h] * (q_idx - kv_idx) / 128

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (document[q_idx] == document[kv_idx])
        mask = create_block_mask(mask_mod, None, None, 128, 128, device=q.device)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)

    leaves = [t.to("tpu").requires_grad_() for t in (q, k, v, bias)]
    run = torch.compile(attend, backend="tpu") if compiled else attend
    out = run(*leaves, document.to("tpu"))
    out.sum().backward()

    torch.testing.assert_close(out.detach().cpu(), attend(q, k, v, bias, document))
    wide = [t.double().requires_grad_() for t in (q, k, v, bias)]
    i = torch.arange(128)
    scores = wide[0] @ wide[1].mT / 4 + wide[3][:, None, None] * (i[:, None] - i) / 128
    allowed = (i[:, None] >= i) & (document[:, None] == document)
    dense = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ wide[2]
    dense.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), dense.float(), atol=1e-5, rtol=1e-5)
    for t, w in zip(leaves, wide):
        torch.testing.assert_close(t.grad.cpu(), w.grad.float(), atol=1e-5, rtol=1e-5)


def test_flex_attention_keeps_pytorchs_checks_for_other_devices():
    from torch.nn.attention.flex_attention import flex_attention
    q = torch.randn(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q)
