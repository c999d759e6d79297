"""Lightning on the tpu device: an accelerator for Lightning Fabric and the PyTorch Lightning Trainer.

    import torchtpu.integrations.lightning  # registers the name "torchtpu"
    trainer = pl.Trainer(accelerator="torchtpu", devices=1, precision="bf16-mixed")
    fabric = Fabric(accelerator="torchtpu", devices=1)

or pass ``accelerator=TorchTPUAccelerator()``. The name is "torchtpu", not "tpu": Lightning's "tpu"
is its XLAAccelerator, which drives torch_xla, and torchtpu never stands in for torch_xla.

Lightning (2.x) knows the device of a single-device run only for CUDA and MPS: for any other
accelerator its connectors build ``SingleDeviceStrategy("cpu")``, and they give "16-mixed" /
"bf16-mixed" a ``MixedPrecision`` plugin that autocasts for "cuda". Importing this module wraps the
two connector methods that make those choices (``_choose_strategy``, ``_check_and_init_precision``)
so that, when the accelerator is this one and the user left the choice to Lightning, the strategy
runs on the tpu device and autocast is ``torch.autocast("tpu", ...)``. Every other accelerator goes
through Lightning's code unchanged. An explicit strategy or precision plugin is used as given; if a
future Lightning renames those methods, ``setup_device`` refuses a non-tpu device with the explicit
spelling (``strategy=SingleDeviceStrategy("tpu")``, ``plugins=[MixedPrecision(..., "tpu")]``)
instead of silently training on the CPU.

One device per process: several devices would need a DDP strategy over torchtpu's "tpu_dist"
process group, which is not wired up here yet.
"""

from typing import Any, Union

import torch

import torchtpu  # noqa: F401  (registers the tpu device when torch's autoload is off)
from lightning_fabric.accelerators import ACCELERATOR_REGISTRY as _FABRIC_REGISTRY
from lightning_fabric.utilities.exceptions import MisconfigurationException

try:  # the Trainer's base class also derives from Fabric's, so one class serves both
    import pytorch_lightning as _pl
    from pytorch_lightning.accelerators import Accelerator as _Base
except ImportError:  # Fabric alone
    _pl = None
    from lightning_fabric.accelerators import Accelerator as _Base

NAME = "torchtpu"
_MIXED = ("16-mixed", "bf16-mixed")


class TorchTPUAccelerator(_Base):
    """Runs a Lightning model on torchtpu's ``tpu`` device (one device per process)."""

    def setup_device(self, device: torch.device) -> None:
        device = torch.device(device)
        if device.type != "tpu":
            # Lightning picked the strategy's device without asking the accelerator: refuse
            # rather than train on the CPU while the user believes it is the tpu.
            raise MisconfigurationException(
                f"TorchTPUAccelerator was given device {device}. Pass "
                "strategy=SingleDeviceStrategy('tpu') to the Trainer or Fabric.")
        torch.tpu.set_device(device)

    def get_device_stats(self, device) -> dict[str, Any]:
        # torch.cuda.memory_stats's keys, as CUDAAccelerator reports them (DeviceStatsMonitor).
        return dict(torch.tpu.memory_stats(device))

    def teardown(self) -> None:
        # As CUDAAccelerator: hand cached memory back (a no-op while torchtpu has no cache).
        torch.tpu.empty_cache()

    @staticmethod
    def parse_devices(devices: Union[int, str, list[int]]) -> list[int]:
        """``devices`` as Lightning's GPU accelerators read it: a count (``-1``: all), a
        comma-separated string of indices, or a list of indices."""
        indices = _device_indices(devices)
        count = torch.tpu.device_count()
        bad = [i for i in indices if not 0 <= i < count]
        if not indices or bad or len(set(indices)) != len(indices):
            raise MisconfigurationException(
                f"devices={devices!r} does not name distinct tpu devices out of {count}.")
        return indices

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device("tpu", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        # devices="auto" means one device: that is what this accelerator runs (see the module doc).
        return 1 if TorchTPUAccelerator.is_available() else 0

    @staticmethod
    def is_available() -> bool:
        # torchtpu's answer: the PJRT plugin loaded and has devices. Counting them starts the
        # PJRT client (which the run needs anyway) but runs nothing on a device.
        try:
            return torch.tpu.is_available()
        except RuntimeError:  # no plugin could be loaded
            return False

    @staticmethod
    def name() -> str:
        return NAME

    @classmethod
    def register_accelerators(cls, accelerator_registry) -> None:
        if NAME not in accelerator_registry:
            accelerator_registry.register(NAME, cls, description=cls.__name__)


def _device_indices(devices) -> list[int]:
    if isinstance(devices, str):
        devices = devices.strip()
        if "," in devices:
            return [int(d) for d in devices.split(",") if d.strip()]
        devices = int(devices)
    if isinstance(devices, int):
        return list(range(torch.tpu.device_count() if devices == -1 else devices))
    return [int(d) for d in devices]


# Connector hooks (see the module doc). `connector` is Lightning's _AcceleratorConnector (Trainer)
# or _Connector (Fabric); both have created `accelerator` by the time these methods run.


def _is_ours(connector) -> bool:
    return isinstance(getattr(connector, "accelerator", None), TorchTPUAccelerator)


def _hook_strategy(connector_cls, single_device_cls) -> None:
    original = connector_cls._choose_strategy

    def _choose_strategy(self):
        if not _is_ours(self):
            return original(self)
        if self._num_nodes_flag == 1 and len(self._parallel_devices) == 1:
            return single_device_cls(device=self._parallel_devices[0])
        raise MisconfigurationException(
            "TorchTPUAccelerator runs one tpu device per process (devices=1 or devices=[i]).")

    _install(connector_cls, "_choose_strategy", _choose_strategy)


def _hook_precision(connector_cls, mixed_cls, plain_strategies, flag_attr, plugin_attr) -> None:
    original = connector_cls._check_and_init_precision

    def _check_and_init_precision(self):
        flag = getattr(self, flag_attr)
        if (_is_ours(self) and getattr(self, plugin_attr) is None and flag in _MIXED
                and isinstance(self.strategy, plain_strategies)):
            # Lightning would autocast for "cuda", which leaves tpu ops in float32; for
            # "16-mixed" the GradScaler must also be the tpu one.
            return mixed_cls(flag, device="tpu")
        return original(self)

    _install(connector_cls, "_check_and_init_precision", _check_and_init_precision)


def _install(cls, name, fn) -> None:
    if getattr(getattr(cls, name), "_torchtpu_hook", False):
        return  # already wrapped (module reloaded)
    fn._torchtpu_hook = True
    setattr(cls, name, fn)


def _register() -> None:
    from lightning_fabric import connector as fabric_connector
    from lightning_fabric.plugins.precision.amp import MixedPrecision as FabricMixed
    from lightning_fabric.strategies import DDPStrategy as FabricDDP
    from lightning_fabric.strategies import SingleDeviceStrategy as FabricSingle

    TorchTPUAccelerator.register_accelerators(_FABRIC_REGISTRY)
    _hook_strategy(fabric_connector._Connector, FabricSingle)
    _hook_precision(fabric_connector._Connector, FabricMixed, (FabricSingle, FabricDDP),
                    "_precision_input", "_precision_instance")
    if _pl is None:
        return
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.plugins.precision import MixedPrecision
    from pytorch_lightning.strategies import DDPStrategy, SingleDeviceStrategy
    from pytorch_lightning.trainer.connectors import accelerator_connector

    TorchTPUAccelerator.register_accelerators(AcceleratorRegistry)
    _hook_strategy(accelerator_connector._AcceleratorConnector, SingleDeviceStrategy)
    _hook_precision(accelerator_connector._AcceleratorConnector, MixedPrecision,
                    (SingleDeviceStrategy, DDPStrategy), "_precision_flag", "_precision_plugin_flag")


_register()
