"""JAX functions, Pallas kernels and StableHLO text as PyTorch ops on tpu, against PyTorch."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch

import torchtpu
from torchtpu.kernels import jax_op, stablehlo_op


def _rms_norm(x, w, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


rms_norm = jax_op("torchtpu_test::rms_norm", _rms_norm)


def _torch_rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


@jax_op("torchtpu_test::softmax_pallas")
def softmax_pallas(x):
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        v = x_ref[...]
        e = jnp.exp(v - jnp.max(v, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@jax_op("torchtpu_test::split_stats", num_outputs=2)
def split_stats(x, axis=0):
    return jnp.mean(x, axis=axis), jnp.max(x, axis=axis)


def _counters():
    return torchtpu.metrics.counters()


def test_jax_op_matches_pytorch_forward_and_backward():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    xt, wt = (t.detach().to("tpu").requires_grad_() for t in (x, w))
    before = torchtpu.metrics.cpu_fallbacks()
    out = rms_norm(xt, wt, 1e-5)
    expected = _torch_rms_norm(x, w, 1e-5)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn(4, 8)
    out.backward(g.to("tpu"))
    expected.backward(g)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)
    assert torchtpu.metrics.cpu_fallbacks() == before  # ran on the device


def test_same_op_runs_on_cpu_tensors():
    x, w = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(rms_norm(x, w), _torch_rms_norm(x, w), rtol=1e-5, atol=1e-5)


def test_gradcheck_float64():
    x = torch.randn(3, 5, dtype=torch.float64, device="tpu", requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, device="tpu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b), (x, w))


def test_pallas_kernel_in_interpret_mode_on_cpu_plugin():
    x = torch.randn(8, 16)
    xt = x.to("tpu").requires_grad_()
    out = softmax_pallas(xt)
    torch.testing.assert_close(out.cpu(), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_multiple_outputs_and_static_arguments():
    x = torch.randn(5, 6)
    mean, mx = split_stats(x.to("tpu"), 1)
    torch.testing.assert_close(mean.cpu(), x.mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mx.cpu(), x.amax(1))


def test_registered_backward_overrides_jax_vjp():
    op = jax_op("torchtpu_test::scaled", lambda x: x * 3.0)
    op.register_autograd(lambda ctx, g: g * 100.0)
    x = torch.ones(3, device="tpu", requires_grad=True)
    op(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 100.0))


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_in_every_eager_mode_the_kernel_joins_the_window(mode):
    x, w = torch.randn(4, 8), torch.randn(8)
    with torchtpu.eager_mode(mode):
        before = _counters()
        y = rms_norm(x.to("tpu") * 2, w.to("tpu")) + 1
        torchtpu.sync()
        result = y.cpu()
        after = _counters()
    torch.testing.assert_close(result, _torch_rms_norm(x * 2, w) + 1, rtol=1e-5, atol=1e-5)
    if mode != "strict":  # multiply, kernel and add recorded into one window
        assert after[f"{mode}_ops"] - before[f"{mode}_ops"] >= 3
        ran = after["windows"] + after["op_by_op_windows"] - before["windows"] - before["op_by_op_windows"]
        assert ran >= 1


def test_inside_torch_compile():
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 8).to("tpu")
    w = torch.ones(8, device="tpu")

    @torch.compile(backend="tpu")
    def f(x):
        return rms_norm(model(x), w).sum()

    x = torch.randn(4, 8, device="tpu")
    for _ in range(2):
        loss = f(x)
    expected = _torch_rms_norm(model(x), w).sum()
    torch.testing.assert_close(loss.cpu(), expected.cpu(), rtol=1e-5, atol=1e-5)
    runs = _counters()["compiled_graph_runs"]
    f(x).backward()
    assert _counters()["compiled_graph_runs"] > runs


def test_shapes_jax_rejects_raise_at_the_call():
    with pytest.raises(ValueError, match="JAX rejected"):
        rms_norm(torch.randn(4, 8, device="tpu"), torch.randn(5, device="tpu"))


def test_stablehlo_op():
    add_one = stablehlo_op("torchtpu_test::add_one", textwrap.dedent("""
        func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
          %c = stablehlo.constant dense<1.0> : tensor<2x3xf32>
          %y = stablehlo.add %x, %c : tensor<2x3xf32>
          return %y : tensor<2x3xf32>
        }
    """))
    x = torch.randn(2, 3)
    torch.testing.assert_close(add_one(x.to("tpu")).cpu(), x + 1)
    with pytest.raises(ValueError, match="takes"):
        add_one(torch.randn(3, 3, device="tpu"))
    with pytest.raises(ValueError, match="does not parse"):
        stablehlo_op("torchtpu_test::broken", "func.func @main(")


def test_second_process_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import torch, torchtpu, jax, jax.numpy as jnp
        from torchtpu.kernels import jax_op
        op = jax_op("t::gelu", lambda x: jax.nn.gelu(x))
        x = torch.randn(4, 4, device="tpu", requires_grad=True)
        op(x).sum().backward()
        print("MISSES", torchtpu.cache.stats()["misses"])
    """)
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    misses = [int(r.stdout.split("MISSES")[-1]) for r in runs]
    assert misses[0] > 0 and misses[1] == 0


def _example(name):
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "kernels", name + ".py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pallas_flash_attention_with_registered_backward_matches_sdpa():
    flash = _example("flash_attention_pallas")
    q, k, v = (torch.randn(2, 16, 8, requires_grad=True) for _ in range(3))
    qt, kt, vt = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
    out = flash.flash_attention(qt, kt, vt)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(expected)
    out.backward(g.to("tpu"))
    expected.backward(g)
    for a, b in ((qt, q), (kt, k), (vt, v)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["rms_norm", "softmax_pallas", "flash_attention_pallas"])
def test_examples_train(name):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "kernels", name + ".py")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    losses = [float(line.split()[-1]) for line in r.stdout.splitlines() if line.startswith("step")]
    assert losses[-1] < losses[0] / 2, losses


def test_a_kernel_newer_than_the_plugin_reads_names_both_versions(monkeypatch):
    info = dict(torchtpu._C._platform_info())
    info["stablehlo_current_version"] = "0.0.1"  # a plugin older than any StableHLO JAX can target
    monkeypatch.setattr(torchtpu._C, "_platform_info", lambda: info)
    op = jax_op("torchtpu_test::versioned", lambda x: x * 2.0)
    with pytest.raises(RuntimeError, match=r"emits StableHLO 1\.\d+\.\d+, the PJRT plugin \(cpu\) reads StableHLO up to 0\.0\.1"):
        op(torch.ones(2, device="tpu"))
