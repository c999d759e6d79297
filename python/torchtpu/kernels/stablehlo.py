"""Hand-written StableHLO modules as PyTorch ops on tpu."""

import hashlib

import torch

from . import lowering

_ELEMENT_TYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16, "i1": torch.bool,
    "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64, "ui8": torch.uint8,
    "complex<f32>": torch.complex64, "complex<f64>": torch.complex128,
}


def _tensor_types(types):
    from jax._src.lib.mlir import ir

    out = []
    for t in types:
        ranked = ir.RankedTensorType(t)
        out.append((tuple(ranked.shape), _ELEMENT_TYPES[str(ranked.element_type)]))
    return out


def _parse(name, text):
    """(functions text, entry, input types, result types) of a module whose entry is ``main``."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        try:
            module = ir.Module.parse(text)
        except Exception as e:
            raise ValueError(f"{name}: the StableHLO text does not parse: {e}") from e
        mains = [op for op in module.body.operations
                 if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
        if not mains:
            raise ValueError(f"{name}: the module has no function named main")
        ftype = ir.FunctionType(ir.TypeAttr(mains[0].attributes["function_type"]).value)
        inputs, results = _tensor_types(ftype.inputs), _tensor_types(ftype.results)
        lowering.check_version(name, module)
        body = lowering._functions_text(module)
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    prefix = f"k{digest}_"
    return lowering.Lowered(f"{name}:{digest}", lowering._rename(body, prefix), prefix + "main", results), inputs


def stablehlo_op(name: str, text: str):
    """The StableHLO module ``text`` (its ``main`` function, static shapes) as the PyTorch op
    ``name`` on tpu tensors. Returns the ``torch.library`` ``CustomOpDef``."""
    lowered, inputs = _parse(name, text)
    rets = "Tensor" if len(lowered.results) == 1 else "(" + ", ".join(["Tensor"] * len(lowered.results)) + ")"
    schema = "(" + ", ".join(f"Tensor x{i}" for i in range(len(inputs))) + ") -> " + rets

    def check(tensors):
        got = [(tuple(t.shape), t.dtype) for t in tensors]
        if got != inputs:
            raise ValueError(f"{name}: the module takes {inputs}, got {got}")

    def result(outs):
        return outs[0] if len(outs) == 1 else tuple(outs)

    def on_tpu(*tensors):
        check(tensors)
        return result(lowering.run(name, lowered, tensors))

    def on_other_devices(*tensors):
        raise NotImplementedError(f"{name} is a StableHLO module: it runs on tpu tensors only")

    def fake(*tensors):
        check(tensors)
        return result([torch.empty(s, dtype=d, device=tensors[0].device) for s, d in lowered.results])

    op = torch.library.custom_op(name, on_other_devices, mutates_args=(), schema=schema)
    op.register_kernel("tpu", on_tpu)
    op.register_fake(fake)
    return op
