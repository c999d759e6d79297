"""``torch.compile(model_or_fn, backend="tpu")``: Dynamo graphs as XLA programs (see docs/compile.md).

Dynamo finds ``backend`` through the ``torch_dynamo_backends`` entry point (``tpu``), so nothing
here is imported until a compile asks for it: Dynamo and AOT autograd take a second to import.
"""

import torch

options = {"buckets": None}


def compile_options(*, buckets=None) -> None:
    """Options of torch.compile(backend="tpu").

    ``buckets``: the sizes a dynamic dimension is padded up to (graphs compiled with
    ``dynamic=True`` or ``torch._dynamo.mark_dynamic``, see docs/compile.md). ``None`` (the
    default): the next power of two, at least 8. A list: the smallest listed size that fits
    (larger sizes run unpadded)."""
    options["buckets"] = None if buckets is None else sorted(int(b) for b in buckets)


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


def route_default_backend() -> None:
    """``torch.compile(fn)`` (Inductor, the default) on tpu tensors uses this backend: Inductor
    has no code generator for the device."""
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_torchtpu", False):
        return
    inductor_call = wrapper.__call__

    def __call__(self, model_, inputs_):
        if _on_tpu(inputs_):
            return backend(model_, inputs_)
        return inductor_call(self, model_, inputs_)

    __call__._torchtpu = True
    wrapper.__call__ = __call__


def install_patches() -> None:
    """Dynamo traces with fake tensors before any backend runs: their shape functions for tpu
    tensors are installed when torchtpu is imported (fake_kernels.py); optimizer steps of tpu
    parameters in compiled code run as one recorded program instead of a Dynamo graph
    (optimizer_steps.py)."""
    from . import fake_kernels, optimizer_steps

    fake_kernels.install()
    optimizer_steps.install()


__all__ = ["backend", "compile_options"]
