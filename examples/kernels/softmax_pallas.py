"""A fused softmax written in Pallas, used as a PyTorch op in a small classifier trained on tpu.

On the XLA CPU plugin the kernel runs in Pallas interpret mode (chosen automatically); on a GPU
or TPU the same code compiles with Triton / Mosaic. Pallas kernels have no automatic derivative,
so the backward is registered as a second op written in JAX.

    .venv/bin/python examples/kernels/softmax_pallas.py
"""

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torchtpu  # noqa: F401
from torchtpu.kernels import jax_op


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


@jax_op("examples::softmax")
def softmax(x):
    rows, cols = x.shape
    block = 8 if rows % 8 == 0 else rows  # one grid step per block of rows
    return pl.pallas_call(
        _softmax_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // block,),
        in_specs=[pl.BlockSpec((block, cols), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((block, cols), lambda i: (i, 0)),
    )(x)


@jax_op("examples::softmax_backward")
def softmax_backward(y, grad):
    return y * (grad - jnp.sum(grad * y, axis=-1, keepdims=True))


softmax.register_autograd(lambda ctx, grad: softmax_backward(*ctx.saved_tensors, grad),
                          setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 5).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.randn(64, 20, device="tpu")
    labels = (x[:, :5].argmax(-1)).to("tpu")
    for step in range(60):
        opt.zero_grad()
        probs = softmax(model(x))
        loss = -torch.log(probs[torch.arange(64, device="tpu"), labels] + 1e-9).mean()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == 59:
            print(f"step {step:2d}  loss {loss.item():.4f}")
    torch.testing.assert_close(softmax(x).cpu(), torch.softmax(x.cpu(), -1), rtol=1e-5, atol=1e-6)
    print("matches torch.softmax")


if __name__ == "__main__":
    main()
