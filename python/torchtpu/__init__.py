"""torchtpu: a native PyTorch backend for XLA devices through PJRT.

``import torchtpu`` makes ``torch.device("tpu")`` a PyTorch device. Every operation on a tpu tensor
runs as StableHLO compiled by XLA on the PJRT plugin found at import (libtpu on Cloud TPUs, the
XLA CUDA plugin on NVIDIA GPUs, the XLA CPU plugin anywhere else).
"""

import os
import sys


def _autoload():
    """PyTorch's device-extension entry point (``torch.backends`` group): ``import torch`` imports
    this package, which is all the setup there is. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off.
    Defined before ``import torch`` below: when this package is imported first, torch calls it on
    the partly imported package, and the rest of this file runs once torch's import returns."""


import torch  # noqa: E402

from . import torch_versions  # noqa: E402

torch_versions.check()  # before the extension, which links against one torch release

# The C++ runtime searches these folders for PJRT plugins (xla_plugins/..., jax_plugins/...).
os.environ.setdefault(
    "TORCHTPU_PLUGIN_DIRS", os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
)

# XLA logs every client start at INFO level; keep warnings and errors only unless asked.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

# Errors name the op and the user's line; the C++ stack only on request.
if os.environ.get("TORCHTPU_SHOW_CPP_STACKTRACES", "0") not in ("", "0"):
    os.environ["TORCH_SHOW_CPP_STACKTRACES"] = "1"

torch.utils.rename_privateuse1_backend("tpu")

from . import _C  # noqa: E402  (registers the device with PyTorch's dispatcher)
from . import autograd_exit, cache, device_module, metrics, modes  # noqa: E402,F401
from .modes import eager_mode, get_eager_mode, mark_step, optimizer_step, padding, set_eager_mode, sync  # noqa: E402,F401

if get_eager_mode() == "fused":  # (a bad TORCHTPU_EAGER_MODE fails here, at import)
    set_eager_mode("fused")  # installs what fused mode needs

torch._register_device_module("tpu", device_module)
from . import amp, backends, checkpoint, data  # noqa: E402,F401  (torch.tpu.amp as torch.cuda.amp; torch.backends.tpu)

backends.register()

# Adam/AdamW/SGD(fused=True): aten::_fused_{adam,adamw,sgd}_ run on the device, not the CPU fallback.
from . import fused_optimizers  # noqa: E402

fused_optimizers.register()

device_module.amp = amp
sys.modules["torch.tpu.amp"] = amp
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True
)

# torchvision's custom ops (roi_align, nms) on tpu. Registered without importing torchvision (slow):
# the dispatcher attaches the kernels when torchvision defines its ops, if it ever does.
from .integrations import torchvision as _torchvision_ops  # noqa: E402

_torchvision_ops.register()

# torch.compile: backend="tpu" comes from the torch_dynamo_backends entry point.
from . import compile as _compile  # noqa: E402

compile_options = _compile.compile_options

# The pieces of PyTorch torchtpu replaces, each listed with its reason in patches.py.
from . import patches  # noqa: E402

patches.install("import")

# torch.distributed: the "tpu_dist" backend (and tpu kernels for the functional collectives).
if torch.distributed.is_available():
    from . import distributed  # noqa: E402

    distributed.register()

__version__ = "0.1.0"



def platform() -> str:
    """The PJRT platform under the tpu device: "cpu", "cuda" or "tpu"."""
    return _C._platform_info()["platform"]


def platform_info() -> dict:
    """Everything the PJRT plugin reports: platform, versions (xla, StableHLO), plugin path."""
    return dict(_C._platform_info())


counters = metrics.counters
reset_counters = metrics.reset
