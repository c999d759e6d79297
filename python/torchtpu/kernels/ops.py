"""JAX functions as PyTorch custom ops (``torch.library``), with autograd from ``jax.vjp``.

The op's schema comes from the function's signature: parameters without a default are tensors,
parameters with one are static (an ``int``, ``float``, ``bool``, ``int[]`` or ``str`` baked into
the lowering). On tpu tensors the op calls the function's StableHLO inside torchtpu's programs; on
CPU tensors it runs the same function with JAX on the host; under fake tensors (torch.compile,
meta) its result shapes come from ``jax.eval_shape``.
"""

import functools
import inspect

import torch

from . import lowering

_STATIC_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def _static_type(name, default):
    if isinstance(default, (tuple, list)) and all(isinstance(v, int) for v in default):
        return "int[]"
    for t, schema in _STATIC_TYPES.items():
        if type(default) is t:
            return schema
    raise TypeError(f"static argument {name}={default!r}: use a bool, int, float, str or tuple of ints")


def _static_value(v):
    return tuple(v) if isinstance(v, list) else v


class _Signature:
    """Which parameters are tensors and which static, and the op's schema."""

    def __init__(self, fn, num_outputs):
        self.tensors, self.statics = [], {}
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{fn.__name__}: *args/**kwargs are not supported; name each parameter")
            if p.default is p.empty:
                self.tensors.append(p.name)
            else:
                self.statics[p.name] = p.default
        self.num_outputs = num_outputs

    def schema(self):
        args = [f"Tensor {n}" for n in self.tensors]
        args += [f"{_static_type(n, d)} {n}={_default_literal(d)}" for n, d in self.statics.items()]
        rets = "Tensor" if self.num_outputs == 1 else "(" + ", ".join(["Tensor"] * self.num_outputs) + ")"
        return f"({', '.join(args)}) -> {rets}"

    def split(self, args):
        """(tensors, statics) from the op's positional arguments."""
        n = len(self.tensors)
        statics = {k: _static_value(v) for k, v in zip(self.statics, args[n:])}
        return list(args[:n]), statics


def _default_literal(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(map(str, v)) + "]"
    return repr(v)


def _on_host(fn, tensors, statics):
    """The function run by JAX on CPU tensors (the op's CPU kernel)."""
    import jax
    import numpy as np

    with lowering._x64(tensors):
        args = [jax.numpy.asarray(t.detach().float().numpy()).astype(lowering._TORCH_TO_JAX[t.dtype])
                if t.dtype == torch.bfloat16 else jax.numpy.asarray(t.detach().numpy()) for t in tensors]
        outs = jax.tree_util.tree_leaves(jax.jit(functools.partial(fn, **statics))(*args))
    result = []
    for o in outs:
        dtype = lowering.torch_dtype(o.dtype)
        host = np.asarray(o.astype("float32") if dtype == torch.bfloat16 else o)
        result.append(torch.from_numpy(host.copy()).to(dtype))
    return result


class _Kernel:
    """Per-signature lowerings of one JAX function, and the op's implementations."""

    def __init__(self, name, fn, sig):
        self.name, self.fn, self.sig = name, fn, sig
        self.lowered = {}

    def _lowering(self, tensors, statics):
        key = tuple((tuple(t.shape), t.dtype) for t in tensors) + tuple(sorted(statics.items()))
        lowered = self.lowered.get(key)
        if lowered is None:
            lowered = self.lowered[key] = lowering.lower(self.name, self.fn, tensors, statics)
        return lowered

    def _result(self, outs):
        if len(outs) != self.sig.num_outputs:
            raise RuntimeError(f"{self.name}: the JAX function returned {len(outs)} arrays; the op was "
                               f"defined with num_outputs={self.sig.num_outputs}")
        return outs[0] if self.sig.num_outputs == 1 else tuple(outs)

    def on_tpu(self, *args):
        tensors, statics = self.sig.split(args)
        return self._result(lowering.run(self.name, self._lowering(tensors, statics), tensors))

    def on_cpu(self, *args):
        tensors, statics = self.sig.split(args)
        return self._result(_on_host(self.fn, tensors, statics))

    def fake(self, *args):
        import jax

        tensors, statics = self.sig.split(args)
        with lowering._x64(tensors):
            try:
                shapes = jax.eval_shape(functools.partial(self.fn, **statics), *lowering.jax_avals(tensors))
            except Exception as e:
                raise ValueError(f"{self.name}: JAX rejected these inputs: {e}") from e
        device = tensors[0].device if tensors else torch.device("tpu")
        outs = [torch.empty(s.shape, dtype=lowering.torch_dtype(s.dtype), device=device)
                for s in jax.tree_util.tree_leaves(shapes)]
        return self._result(outs)


def _define(name, fn, num_outputs):
    sig = _Signature(fn, num_outputs)
    kernel = _Kernel(name, fn, sig)
    op = torch.library.custom_op(name, kernel.on_cpu, mutates_args=(), schema=sig.schema())
    op.register_kernel("tpu", kernel.on_tpu)
    op.register_fake(kernel.fake)
    return op, sig


def _vjp_function(fn, sig):
    """fn's pullback as a JAX function of (primals..., cotangents..., statics)."""
    import jax

    n = len(sig.tensors)

    def pullback(*tensors_and_cotangents, **statics):
        primals, cotangents = tensors_and_cotangents[:n], tensors_and_cotangents[n:]
        outputs, vjp = jax.vjp(functools.partial(fn, **statics), *primals)
        structure = jax.tree_util.tree_structure(outputs)
        grads = vjp(jax.tree_util.tree_unflatten(structure, list(cotangents)))
        # integer inputs get float0 "gradients": return zeros of their own type instead
        return tuple(g if g.dtype != jax.dtypes.float0 else jax.numpy.zeros(p.shape, p.dtype)
                     for g, p in zip(grads, primals))

    names = sig.tensors + [f"grad_{i}" for i in range(sig.num_outputs)]
    params = [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in names]
    params += [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v) for k, v in sig.statics.items()]
    pullback.__signature__ = inspect.Signature(params)
    return pullback


def jax_op(name: str, fn=None, *, num_outputs: int = 1):
    """``fn`` (a JAX function, possibly calling Pallas kernels) as the PyTorch op ``name``
    (``"namespace::op"``). Returns the ``torch.library`` ``CustomOpDef``; usable as a decorator.

    Gradients come from ``jax.vjp`` of ``fn`` (itself a second op, ``name`` + ``_jax_vjp``, so it
    also runs inside torchtpu's programs); ``op.register_autograd(...)`` replaces them."""
    if fn is None:
        return lambda f: jax_op(name, f, num_outputs=num_outputs)
    op, sig = _define(name, fn, num_outputs)
    vjp_op, _ = _define(name + "_jax_vjp", _vjp_function(fn, sig), len(sig.tensors))
    n = len(sig.tensors)

    def setup_context(ctx, inputs, output):
        tensors, statics = sig.split(inputs)
        ctx.save_for_backward(*tensors)
        ctx.statics = statics

    def backward(ctx, *grads):
        primals = ctx.saved_tensors
        outs = op(*primals, *ctx.statics.values()) if any(g is None for g in grads) else None
        outs = (outs,) if num_outputs == 1 else outs
        grads = [torch.zeros_like(outs[i]) if g is None else g for i, g in enumerate(grads)]
        result = vjp_op(*primals, *grads, *ctx.statics.values())
        result = (result,) if n == 1 else tuple(result)
        tensor_grads = [g if p.is_floating_point() or p.is_complex() else None for g, p in zip(result, primals)]
        return (*tensor_grads, *([None] * len(sig.statics)))

    op.register_autograd(backward, setup_context=setup_context)
    return op
