"""RMSNorm written in JAX, used as a PyTorch op inside a small model that trains on tpu.

    .venv/bin/python examples/kernels/rms_norm.py
"""

import jax
import jax.numpy as jnp
import torch

import torchtpu  # noqa: F401
from torchtpu.kernels import jax_op


@jax_op("examples::rms_norm")
def rms_norm(x, weight, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), RMSNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 16, device="tpu")
    y = x.sum(-1, keepdim=True).sin()
    for step in range(50):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)  # gradients of the JAX op from jax.vjp
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == 49:
            print(f"step {step:2d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
