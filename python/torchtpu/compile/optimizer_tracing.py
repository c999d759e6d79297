"""Dynamo traces an optimizer step without importing Inductor.

While tracing ``optimizer.step()`` Dynamo asks, for every gradient, whether CUDA graphs could
treat it as static (``_is_static_for_cudagraphs``, for a performance hint), and the question
imports Inductor's CUDA-graph module, which imports most of Inductor: ~0.3 s of the first
compiled GPT training step on a 2-core CPU (1 s when the optimizer step is the first frame
compiled), for an answer that is always "yes" for tensors not on CUDA. For those, the function
below answers without the import; CUDA tensors still go to PyTorch's. A patch of a private
function of the pinned torch, like fake_kernels.py, installed when Dynamo is imported (importing
it with torchtpu would cost every process a second).
"""

import importlib.abc
import importlib.util
import sys

_MODULE = "torch._dynamo.variables.optimizer"


def install() -> None:
    """Patches Dynamo's optimizer tracing if Dynamo is imported."""
    module = sys.modules.get(_MODULE)
    original = getattr(module, "_is_static_for_cudagraphs", None)
    if original is None or getattr(original, "_torchtpu", False):
        return

    def _is_static_for_cudagraphs(x):
        return original(x) if x.is_cuda else True

    _is_static_for_cudagraphs._torchtpu = True
    module._is_static_for_cudagraphs = _is_static_for_cudagraphs


class _InstallWhenImported(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds Dynamo's optimizer module as the other finders do, and patches it once it has run."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None:
            self.loader = spec.loader
            spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        sys.modules[_MODULE] = module
        install()


def install_when_dynamo_is_imported() -> None:
    if _MODULE in sys.modules:
        install()
    elif not any(isinstance(f, _InstallWhenImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallWhenImported())
