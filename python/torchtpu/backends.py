"""``torch.backends.tpu``: process-wide numerics settings of the tpu backend.

``torch.backends.tpu.allow_excess_precision`` (default False, or ``TORCHTPU_ALLOW_EXCESS_PRECISION=1``):
when True, XLA may keep bfloat16/float16 intermediates of a multi-op program (fused and lazy
windows, compiled graphs) in float32 instead of rounding them as PyTorch does after every op. That
is faster and often more accurate, but results then differ from CPU/CUDA PyTorch.
"""

import sys
import types

from . import _C


class _TpuBackendModule(types.ModuleType):
    @property
    def allow_excess_precision(self) -> bool:
        return _C._allow_excess_precision()

    @allow_excess_precision.setter
    def allow_excess_precision(self, allow: bool) -> None:
        _C._set_allow_excess_precision(bool(allow))


tpu = _TpuBackendModule("torch.backends.tpu", __doc__)


def register() -> None:
    import torch.backends

    torch.backends.tpu = tpu
    sys.modules["torch.backends.tpu"] = tpu
