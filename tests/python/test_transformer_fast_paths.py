"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder in eval mode take
PyTorch's fused fast paths (`_native_multi_head_attention`, `_transformer_encoder_layer_fwd`, and
for an encoder given a padding mask, nested tensors); they ran on the CPU, or failed, on tpu. Each
is compared with CPU PyTorch, with the profiler proving that the fast path ran and no CPU fallback."""

import pytest
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

import torchtpu

PADDING = torch.tensor([[False] * 6, [False, False, False, False, True, True], [False] + [True] * 5])


def _run_both(module, *args, **kwargs):
    """module(*args) on CPU and on tpu in no_grad eval; the tpu run's outputs and its op names."""
    module = module.eval()
    with torch.no_grad():
        expected = module(*args, **kwargs)
        module.to("tpu")
        on_device = lambda t: t.to("tpu") if torch.is_tensor(t) else t
        targs = [on_device(a) for a in args]
        torchtpu.metrics.reset()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            actual = module(*targs, **{k: on_device(v) for k, v in kwargs.items()})
        assert torchtpu.metrics.cpu_fallbacks() == {}
    return expected, actual, {e.key for e in prof.key_averages()}


def _close(expected, actual):
    if isinstance(expected, tuple):
        for e, a in zip(expected, actual):
            _close(e, a)
    elif expected is None:
        assert actual is None
    else:
        torch.testing.assert_close(actual.cpu(), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [{}, dict(need_weights=False), dict(average_attn_weights=False), dict(key_padding_mask=PADDING),
     dict(attn_mask=torch.triu(torch.ones(6, 6, dtype=torch.bool), 1))],
    ids=["weights", "no-weights", "per-head", "key-padding", "attn-mask"])
def test_multi_head_attention_fast_path(kwargs):
    torch.manual_seed(0)
    x = torch.randn(3, 6, 16)
    x_tpu = x.to("tpu")
    m = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        expected = m(x, x, x, **kwargs)
        m.to("tpu")
        torchtpu.metrics.reset()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            actual = m(x_tpu, x_tpu, x_tpu, **{k: v.to("tpu") for k, v in kwargs.items() if torch.is_tensor(v)},
                       **{k: v for k, v in kwargs.items() if not torch.is_tensor(v)})
    assert torchtpu.metrics.cpu_fallbacks() == {}
    assert "aten::_native_multi_head_attention" in {e.key for e in prof.key_averages()}
    _close(expected, actual)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_fast_path(norm_first, activation):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first, activation=activation)
    expected, actual, ops = _run_both(layer, torch.randn(3, 6, 16), src_key_padding_mask=PADDING)
    assert "aten::_transformer_encoder_layer_fwd" in ops
    _close(expected, actual)


def test_encoder_with_padding_runs_nested_and_zeros_the_padding():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16), enable_nested_tensor=True)
    expected, actual, ops = _run_both(encoder, torch.randn(3, 6, 16), src_key_padding_mask=PADDING)
    assert "aten::_nested_tensor_from_mask" in ops and "aten::to_padded_tensor" in ops
    _close(expected, actual)
    # The padding reads back as zeros before the final norm, which makes it its bias.
    assert torch.equal(actual.cpu()[PADDING], encoder.norm.bias.cpu().expand(int(PADDING.sum()), 16))


def test_masked_softmax_mask_types_and_errors():
    torch.manual_seed(0)
    scores = torch.randn(3, 2, 6, 6)
    masks = {1: PADDING, 0: torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), 2: torch.rand(3, 2, 6, 6) > 0.5}
    masks[2][0, 0, 1] = True  # a row masked throughout: NaN, as on CPU
    for mask_type, mask in masks.items():
        expected = torch._masked_softmax(scores, mask, 3, mask_type)
        actual = torch._masked_softmax(scores.to("tpu"), mask.to("tpu"), 3, mask_type)
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    assert expected[0, 0, 1].isnan().all()
    with pytest.raises(RuntimeError, match="Mask shape should match input"):
        torch._masked_softmax(scores.to("tpu"), torch.ones(2, 6, dtype=torch.bool, device="tpu"), 3, 2)
