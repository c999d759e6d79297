"""JAX functions (and Pallas kernels) lowered to StableHLO functions a tpu op can call.

A function is lowered once per input signature (shapes, dtypes, static arguments) for the platform
under torchtpu ("cpu", "cuda" or "tpu"), printed in MLIR's generic form (stable across StableHLO
releases, like the rest of torchtpu's programs), and its symbols renamed to a prefix unique to the
text, so any number of kernels can live in one program. On the CPU platform ``pallas_call`` is
lowered in Pallas interpret mode: the same kernel code runs everywhere.
"""

import hashlib
import re

import torch

from .. import _C, platform

_TORCH_TO_JAX = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8",
    torch.bool: "bool", torch.complex64: "complex64", torch.complex128: "complex128",
}
_JAX_TO_TORCH = {v: k for k, v in _TORCH_TO_JAX.items()}
_SYMBOL = re.compile(r'sym_name = "([^"]+)"')


class Lowered:
    """One signature's StableHLO: the functions' text, the entry symbol, the result types."""

    def __init__(self, key, text, entry, results):
        self.key, self.text, self.entry, self.results = key, text, entry, results


def torch_dtype(jax_dtype) -> torch.dtype:
    return _JAX_TO_TORCH[str(jax_dtype)]


def jax_avals(tensors):
    import jax

    try:
        return [jax.ShapeDtypeStruct(tuple(t.shape), _TORCH_TO_JAX[t.dtype]) for t in tensors]
    except KeyError as e:
        raise TypeError(f"JAX kernels take tensors of {sorted(map(str, _TORCH_TO_JAX))}, got {e.args[0]}") from None


def _x64(tensors):
    """64-bit types exist in JAX only under x64; enabled just for the lowering that needs it."""
    import contextlib

    import jax

    if any(t.dtype in (torch.float64, torch.int64, torch.complex128) for t in tensors):
        return jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()
    return contextlib.nullcontext()


def _jax_platform() -> str:
    return {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda", "tpu": "tpu"}.get(platform(), platform())


def _force_pallas_interpret() -> None:
    """On the CPU platform, lower every pallas_call in interpret mode (Pallas has no CPU compiler)."""
    from jax._src.interpreters import mlir
    from jax._src.pallas import pallas_call

    if getattr(_force_pallas_interpret, "done", False):
        return

    def interpreted(ctx, *in_nodes, interpret=False, **params):
        return pallas_call._pallas_call_lowering(ctx, *in_nodes, interpret=True, **params)

    mlir.register_lowering(pallas_call.pallas_call_p, interpreted, platform="cpu")
    _force_pallas_interpret.done = True


def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


def check_version(name: str, module) -> None:
    """JAX may emit a newer StableHLO than the plugin reads: the module must be expressible in the
    plugin's version (checked by serializing it as a portable artifact for that version)."""
    import jax
    from jaxlib.mlir.dialects import stablehlo

    plugin = _C._platform_info().get("stablehlo_current_version")
    emitted = stablehlo.get_current_version()
    if not plugin or _version(emitted) <= _version(plugin):
        return
    try:
        stablehlo.serialize_portable_artifact_str(str(module), plugin)
    except Exception as e:
        raise RuntimeError(
            f"{name}: JAX {jax.__version__} emits StableHLO {emitted}, the PJRT plugin ({platform()}) reads "
            f"StableHLO up to {plugin}, and this kernel cannot be expressed in {plugin} ({e}). Use the JAX "
            f"version pinned in requirements.txt, or a plugin built with a newer StableHLO.") from e


def _functions_text(module) -> str:
    """The module's func.func ops, generic form, without the module around them."""
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    body = text[text.index("({") + 2: text.rindex("})")]
    if '"func.func"' not in body:
        raise RuntimeError("the lowered module has no functions")
    return body


def _rename(text: str, prefix: str) -> str:
    """Prefixes every function symbol (definitions and references); all become private."""
    for name in sorted(set(_SYMBOL.findall(text)), key=len, reverse=True):
        text = text.replace(f'sym_name = "{name}"', f'sym_name = "{prefix}{name}"')
        text = re.sub(rf"@{re.escape(name)}\b", f"@{prefix}{name}", text)
    return text.replace('sym_visibility = "public"', 'sym_visibility = "private"')


def lower(name: str, fn, tensors, statics: dict) -> Lowered:
    """``fn(*tensors, **statics)`` as StableHLO for the tpu platform."""
    import jax

    if _jax_platform() == "cpu":
        _force_pallas_interpret()
    avals = jax_avals(tensors)
    with _x64(tensors):
        try:
            traced = jax.jit(lambda *xs: fn(*xs, **statics)).trace(*avals)
        except Exception as e:  # a shape or dtype JAX rejects: the user's error, at the call
            raise ValueError(f"{name}: JAX rejected inputs {[(a.shape, str(a.dtype)) for a in avals]} "
                             f"with {statics}: {e}") from e
        lowered = traced.lower(lowering_platforms=(_jax_platform(),))
        module = lowered.compiler_ir("stablehlo")
        check_version(name, module)
        text = _functions_text(module)
        results = jax.tree_util.tree_leaves(traced.out_info)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    prefix = f"k{digest}_"
    entry = prefix + "main"
    text = _rename(text, prefix)
    if f'sym_name = "{entry}"' not in text:
        raise RuntimeError(f"{name}: the lowered module has no main function")
    return Lowered(f"{name}:{digest}", text, entry, [(tuple(r.shape), torch_dtype(r.dtype)) for r in results])


def run(name: str, lowered: Lowered, tensors):
    """Runs the lowered function on tpu tensors; returns its results as new tpu tensors."""
    device = tensors[0].device if tensors else torch.device("tpu")
    outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in lowered.results]
    _C._call_stablehlo(name, lowered.key, lowered.text, lowered.entry, list(tensors), outs)
    return outs
