"""Causal flash attention written in Pallas (online softmax over key blocks), used in a small
transformer language model trained on tpu; its backward is a second op written in JAX.

    .venv/bin/python examples/kernels/flash_attention_pallas.py
"""

import functools
import math

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torchtpu  # noqa: F401
from torchtpu.kernels import jax_op

BLOCK = 8


def _flash_kernel(q_ref, k_ref, v_ref, o_ref, *, seq, scale):
    qi = pl.program_id(1)
    q = q_ref[...] * scale  # (BLOCK, d)
    rows = qi * BLOCK + jnp.arange(BLOCK)[:, None]

    def body(kb, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(kb * BLOCK, BLOCK), :]
        v = v_ref[pl.ds(kb * BLOCK, BLOCK), :]
        s = q @ k.T
        s = jnp.where(kb * BLOCK + jnp.arange(BLOCK)[None, :] <= rows, s, -jnp.inf)  # causal
        m_new = jnp.maximum(m, s.max(-1, keepdims=True))
        p = jnp.exp(s - m_new)
        correction = jnp.exp(m - m_new)
        return m_new, l * correction + p.sum(-1, keepdims=True), acc * correction + p @ v

    d = q.shape[-1]
    init = (jnp.full((BLOCK, 1), -jnp.inf, q.dtype), jnp.zeros((BLOCK, 1), q.dtype), jnp.zeros((BLOCK, d), q.dtype))
    _, l, acc = jax.lax.fori_loop(0, qi + 1, body, init)  # key blocks up to the diagonal
    o_ref[...] = acc / l


@jax_op("examples::flash_attention")
def flash_attention(q, k, v):
    """q, k, v: (batch*heads, seq, head_dim), seq a multiple of BLOCK."""
    bh, seq, d = q.shape
    spec = pl.BlockSpec((None, BLOCK, d), lambda b, i: (b, i, 0))
    full = pl.BlockSpec((None, seq, d), lambda b, i: (b, 0, 0))
    return pl.pallas_call(
        functools.partial(_flash_kernel, seq=seq, scale=1.0 / math.sqrt(d)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(bh, seq // BLOCK),
        in_specs=[spec, full, full],
        out_specs=spec,
    )(q, k, v)


def _reference_attention(q, k, v):
    seq = q.shape[1]
    s = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


@jax_op("examples::flash_attention_backward", num_outputs=3)
def flash_attention_backward(q, k, v, grad):
    _, vjp = jax.vjp(_reference_attention, q, k, v)  # recomputes attention, as flash backward does
    return vjp(grad)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


flash_attention.register_autograd(lambda ctx, grad: flash_attention_backward(*ctx.saved_tensors, grad),
                                  setup_context=_setup)


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, -1)
        heads = [z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2).reshape(b * self.heads, t, -1)
                 for z in (q, k, v)]
        y = flash_attention(*heads).reshape(b, self.heads, t, -1).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


def main():
    torch.manual_seed(0)
    vocab, dim, seq = 32, 32, 16
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, dim), Block(dim, 4), torch.nn.Linear(dim, vocab)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.arange(4 * (seq + 1)).reshape(4, seq + 1) % vocab  # a learnable pattern
    x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")
    for step in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == 39:
            print(f"step {step:2d}  loss {loss.item():.4f}")
    q, k, v = (torch.randn(2, seq, 8) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(flash_attention(q.to("tpu"), k.to("tpu"), v.to("tpu")).cpu(), expected,
                               rtol=1e-5, atol=1e-5)
    print("matches scaled_dot_product_attention")


if __name__ == "__main__":
    main()
