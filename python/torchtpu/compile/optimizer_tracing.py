"""Dynamo traces an optimizer step without importing Inductor.

While tracing ``optimizer.step()`` Dynamo asks, for every gradient, whether CUDA graphs could
treat it as static (``_is_static_for_cudagraphs``, for a performance hint), and the question
imports Inductor's CUDA-graph module, which imports most of Inductor: ~0.3 s of the first
compiled GPT training step on a 2-core CPU (1.1 s under a profiler), for an answer that is always
"yes" for tensors not on CUDA. For those, the function below answers without the import; CUDA tensors still go to
PyTorch's. A patch of a private function of the pinned torch, like fake_kernels.py.
"""

import sys


def install() -> None:
    """Patches Dynamo's optimizer tracing if Dynamo is imported (importing it costs a second)."""
    module = sys.modules.get("torch._dynamo.variables.optimizer")
    original = getattr(module, "_is_static_for_cudagraphs", None)
    if original is None or getattr(original, "_torchtpu", False):
        return

    def _is_static_for_cudagraphs(x):
        return original(x) if x.is_cuda else True

    _is_static_for_cudagraphs._torchtpu = True
    module._is_static_for_cudagraphs = _is_static_for_cudagraphs
