"""Every piece of PyTorch that torchtpu replaces, in one list.

Each patch names its target (a module path, then attributes), why it exists, the PyTorch releases
it was written against and when it is installed: at import; when fused mode is first turned on
(the only mode it matters for); or only while ``torchtpu.distributed.run_threads`` runs ranks as
threads. The replacements themselves live beside the code they serve; this module only installs
them. ``tests/python/test_patches.py`` checks that every target still exists
in the installed PyTorch (a PyTorch upgrade that moves one fails there, not in a model) and that
none changes anything for a CPU-only user of ``import torch``: each replacement hands every call
that does not involve a tpu tensor to the original, and fused mode's are not installed at all
until fused mode is used.
"""

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from . import torch_versions

ALL_SUPPORTED = torch_versions.supported_range()


def _from(module: str, factory: str):
    """The replacement that ``factory(original)`` of torchtpu's ``module`` makes, the module
    imported only when the patch is installed."""
    def make(original):
        return getattr(importlib.import_module(module, __package__), factory)(original)
    return make


@dataclass(frozen=True)
class Patch:
    target: str                  # "torch.autograd.backward"
    replacement: Callable[[Any], Any]  # the original -> what replaces it
    why: str
    versions: str = ALL_SUPPORTED  # the PyTorch releases it was written and tested against
    when: str = "import"         # or "fused": the first switch to fused mode; or "run_threads":
    #                              while torchtpu.distributed.run_threads runs ranks as threads

    def owner_and_name(self):
        """The object holding the target and the target's attribute name (raises when PyTorch no
        longer has it)."""
        parts = self.target.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            for attr in parts[split:-1]:
                owner = getattr(owner, attr)
            getattr(owner, parts[-1])
            return owner, parts[-1]
        raise ImportError(f"no module in {self.target}")

    def install(self) -> None:
        owner, name = self.owner_and_name()
        original = getattr(owner, name)
        if getattr(original, "_torchtpu_patch", False):
            return  # installed already
        replacement = self.replacement(original)
        replacement._torchtpu_patch = True
        if isinstance(owner, type) and isinstance(owner.__dict__.get(name), staticmethod):
            replacement = staticmethod(replacement)
        setattr(owner, name, replacement)


class MetaKernelPatch(Patch):
    """Replaces an op's Python meta kernel (what fake tensors run), not an attribute."""

    def owner_and_name(self):
        from torch._C import DispatchKey
        owner, name = super().owner_and_name()
        op = getattr(owner, name)
        if DispatchKey.Meta not in op.py_kernels:
            raise LookupError(f"{self.target} has no Python meta kernel any more")
        return op, DispatchKey.Meta

    def install(self) -> None:
        import torch
        op, key = self.owner_and_name()
        original = op.py_kernels[key]
        if getattr(original, "_torchtpu_patch", False):
            return
        kernel = self.replacement(original)
        kernel._torchtpu_patch = True
        op.py_kernels[key] = kernel
        torch._decomp.meta_table[op] = kernel
        op._dispatch_cache.clear()


PATCHES = (
    Patch("torch.optim.Optimizer.profile_hook_step",
          _from(".compile.optimizer_steps", "routed_profile_hook_step"),
          "an optimizer step of tpu parameters in compiled code runs as one recorded program, not "
          "as a Dynamo graph (compile/optimizer_steps.py); the wrapper PyTorch puts around each "
          "optimizer class's step on its first instance"),
    Patch("torch._TorchCompileInductorWrapper.__call__",
          _from(".compile", "inductor_or_tpu"),
          "plain torch.compile(fn) (Inductor) on tpu tensors uses backend='tpu': Inductor has no "
          "code generator for the device"),
    Patch("torch._tensor_str._tensor_str",
          _from(".tensor_repr", "formatting_on_host"),
          "printing a tpu tensor copies it to the host once and formats it there, instead of "
          "formatting with device ops compiled per shape"),
    Patch("torch.nn.attention.flex_attention._validate_device",
          _from(".integrations.flex_attention", "validate_device_or_tpu"),
          "flex_attention refuses devices outside an allow-list; uncompiled, its dense "
          "implementation is made of ops tpu lowers"),
    MetaKernelPatch("torch.ops.aten._grouped_mm.default",
                    _from(".compile.fake_kernels", "grouped_mm_meta"),
                    "the meta kernel accepts bfloat16 only (its CUDA kernel's limit); tpu runs "
                    "every floating dtype"),
    Patch("torch.autograd.backward",
          _from(".modes", "cut_before_backward"),
          "fused mode cuts a window where the backward pass begins, so every training step makes "
          "the same windows", when="fused"),
    Patch("torch.autograd.grad",
          _from(".modes", "cut_before_backward"),
          "as torch.autograd.backward", when="fused"),
    Patch("torch.distributed.distributed_c10d._world",
          _from(".distributed", "per_thread_world"),
          "c10d keeps its groups in one process-wide registry; ranks that are threads each need "
          "their own", when="run_threads"),
    Patch("torch._subclasses.fake_tensor.FakeTensorMode.cache",
          _from(".distributed", "fake_tensor_cache_per_device"),
          "the fake tensors' dispatch cache keys an index-less device argument ('tpu', as DTensor "
          "makes them) but caches outputs on the current device: rank threads, each on its own "
          "device, would get each other's", when="run_threads"),
)


@contextlib.contextmanager
def installed(when: str):
    """The patches of `when` for the duration of the block; the originals are put back after."""
    saved = []
    try:
        for patch in PATCHES:
            if patch.when == when:
                owner, name = patch.owner_and_name()
                saved.append((owner, name, getattr(owner, name)))
                setattr(owner, name, patch.replacement(saved[-1][2]))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def install(when: str = "import") -> None:
    """Installs the patches of `when` ("import" or "fused"); a patch already in place is kept."""
    for patch in PATCHES:
        if patch.when == when:
            patch.install()
    if when == "fused":
        from . import modes
        modes.register_optimizer_cuts()
