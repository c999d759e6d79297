"""``torch.compile(model_or_fn, backend="tpu")``: Dynamo graphs as XLA programs (see docs/compile.md).

Dynamo finds ``backend`` through the ``torch_dynamo_backends`` entry point (``tpu``), so nothing
here is imported until a compile asks for it: Dynamo and AOT autograd take a second to import.
"""

import torch

from .options import compile_options

# torch.compile's modes, all accepted: an XLA program already launches as one unit (what
# "reduce-overhead" gets from CUDA graphs) and XLA chooses its fusions itself (no autotuning)
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def backend(gm: torch.fx.GraphModule, example_inputs, *, mode=None, options=None):
    """The ``backend="tpu"`` entry point Dynamo calls with each graph it captures.
    ``torch.compile(..., mode=...)`` passes ``mode`` here."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"torch.compile(backend=\"tpu\"): unknown mode {mode!r}; one of {', '.join(MODES)}")
    if options:
        raise ValueError(f"torch.compile(backend=\"tpu\") takes no options= (got {sorted(options)}); "
                         "set its options with torchtpu.compile_options(...)")
    from .dynamo import backend as compile_graph

    return compile_graph(gm, example_inputs)


def _on_tpu(inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in inputs)


def inductor_or_tpu(inductor_call):
    """Inductor's entry (``torch._TorchCompileInductorWrapper.__call__``) sending graphs of tpu
    tensors to this backend: plain ``torch.compile(fn)`` on tpu tensors uses it, as Inductor has
    no code generator for the device (installed by patches.py)."""
    def __call__(self, model_, inputs_):
        if _on_tpu(inputs_):
            return backend(model_, inputs_)
        return inductor_call(self, model_, inputs_)
    return __call__


__all__ = ["backend", "compile_options"]
