"""The benchmark workloads written in plain JAX: the same computations as models.py, with weights
taken from the PyTorch modules, so every runtime starts from the same parameters. This is what the
XLA compiler does with no framework around it: the practical limit for torchtpu."""

import math

import jax
import jax.numpy as jnp
import numpy as np


def params_of(module):
    """A PyTorch module's parameters and buffers as {name: jnp array}."""
    state = {k: v for k, v in module.state_dict().items() if not k.endswith("num_batches_tracked")}
    return {k: jnp.asarray(v.detach().cpu().numpy()) for k, v in state.items()}


def linear(p, name, x):
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if name + ".bias" in p else y


def layer_norm(p, name, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def cross_entropy(logits, targets):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def mlp_forward(p, x):
    h = jax.nn.relu(linear(p, "0", x))
    h = jax.nn.relu(linear(p, "2", h))
    return linear(p, "4", h)


def gpt_forward(p, idx, layers, heads):
    b, t = idx.shape
    x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(t)]
    d = x.shape[-1]
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))
    for i in range(layers):
        pre = f"blocks.{i}."
        qkv = linear(p, pre + "qkv", layer_norm(p, pre + "ln1", x))
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, axis=-1))
        scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d // heads)
        att = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1) @ v
        x = x + linear(p, pre + "proj", att.transpose(0, 2, 1, 3).reshape(b, t, d))
        h = jax.nn.gelu(linear(p, pre + "fc1", layer_norm(p, pre + "ln2", x)), approximate=False)
        x = x + linear(p, pre + "fc2", h)
    return linear(p, "head", layer_norm(p, "ln", x))


def conv(x, w, stride=1, padding=1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(padding, padding)] * 2,
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def batch_norm(p, name, x, eps=1e-5):  # training mode: batch statistics
    mean = x.mean((0, 2, 3), keepdims=True)
    var = x.var((0, 2, 3), keepdims=True)
    scale = p[name + ".weight"][None, :, None, None]
    return (x - mean) / jnp.sqrt(var + eps) * scale + p[name + ".bias"][None, :, None, None]


def resnet_forward(p, x, stages):
    x = jax.nn.relu(batch_norm(p, "stem.1", conv(x, p["stem.0.weight"])))
    for i in range(stages):
        pre = f"blocks.{i}."
        stride = 1 if i == 0 else 2
        out = jax.nn.relu(batch_norm(p, pre + "bn1", conv(x, p[pre + "conv1.weight"], stride)))
        out = batch_norm(p, pre + "bn2", conv(out, p[pre + "conv2.weight"]))
        if pre + "shortcut.0.weight" in p:
            x = batch_norm(p, pre + "shortcut.1", conv(x, p[pre + "shortcut.0.weight"], stride, 0))
        x = jax.nn.relu(out + x)
    return linear(p, "fc", x.mean((2, 3)))


def trainable(p):
    return {k: v for k, v in p.items() if not (k.endswith("running_mean") or k.endswith("running_var"))}


def sgd_momentum(lr, momentum):
    """torch.optim.SGD(lr, momentum): buf = momentum * buf + g (buf = g on the first step)."""
    def init(params):
        return {"step": 0, "buf": jax.tree_util.tree_map(jnp.zeros_like, params)}

    def update(params, grads, state):
        first = state["step"] == 0
        buf = jax.tree_util.tree_map(lambda b, g: jnp.where(first, g, momentum * b + g), state["buf"], grads)
        params = jax.tree_util.tree_map(lambda p, b: p - lr * b, params, buf)
        return params, {"step": state["step"] + 1, "buf": buf}
    return init, update


def adamw(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """torch.optim.AdamW with its defaults."""
    b1, b2 = betas

    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"step": 0, "m": zeros, "v": zeros}

    def update(params, grads, state):
        t = state["step"] + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        step_size = lr / (1 - b1 ** t)
        bc2_sqrt = jnp.sqrt(1 - b2 ** t)

        def apply(p, m, v):
            p = p * (1 - lr * weight_decay)
            return p - step_size * m / (jnp.sqrt(v) / bc2_sqrt + eps)
        return jax.tree_util.tree_map(apply, params, m, v), {"step": t, "m": m, "v": v}
    return init, update


def train_step(forward, optimizer_update, frozen):
    """A jitted step: (params, opt_state, x, y) -> (params, opt_state, loss)."""
    def loss_fn(params, x, y):
        return cross_entropy(forward({**frozen, **params}, x), y)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params, state = optimizer_update(params, grads, state)
        return params, state, loss
    return step


def to_jax(t):
    return jnp.asarray(np.asarray(t))
