"""The pieces of PyTorch torchtpu replaces (torchtpu/patches.py): each target still exists in the
installed PyTorch, each is installed when it should be, and a CPU-only user sees nothing."""

import json
import os
import subprocess
import sys

import pytest
import torch

import torchtpu
from torchtpu import patches, torch_versions


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.target)
def test_every_patch_target_exists_in_this_pytorch(patch):
    """A PyTorch release that renames or removes what a patch replaces fails here, by name."""
    owner, name = patch.owner_and_name()
    assert owner is not None and name is not None
    assert patch.why and patch.versions == torch_versions.supported_range()


def test_import_installs_the_import_patches():
    import_patches = [p for p in patches.PATCHES if p.when == "import"]
    assert len(import_patches) >= 5
    for p in import_patches:
        owner, name = p.owner_and_name()
        installed = owner.py_kernels[name] if isinstance(p, patches.MetaKernelPatch) else getattr(owner, name)
        assert getattr(installed, "_torchtpu_patch", False), p.target


def test_a_missing_target_is_named():
    missing = patches.Patch("torch.autograd.no_such_function", lambda f: f, "a test")
    with pytest.raises(AttributeError, match="no_such_function"):
        missing.owner_and_name()


def _python(code, **env):
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_CPU_USER = """
import json, torch
from torch.optim import optimizer
x = torch.linspace(-1, 1, 7, requires_grad=True)
(x.sin() * 3).sum().backward()
print(json.dumps({
    "torchtpu_loaded": "torchtpu" in __import__("sys").modules,
    "backward_patched": hasattr(torch.autograd.backward, "_torchtpu_patch"),
    "grad_patched": hasattr(torch.autograd.grad, "_torchtpu_patch"),
    "optimizer_hooks": len(optimizer._global_optimizer_pre_hooks) + len(optimizer._global_optimizer_post_hooks),
    "repr": repr(x.grad), "grad": x.grad.tolist(),
}))
"""


def test_a_cpu_only_user_of_import_torch_sees_nothing_changed():
    """With autoload (torchtpu imported by `import torch`) a CPU-only program gets the same values
    and printouts, and nothing of fused mode is installed."""
    with_torchtpu = _python(_CPU_USER, TORCH_DEVICE_BACKEND_AUTOLOAD="1", TORCHTPU_EAGER_MODE="strict")
    without = _python(_CPU_USER, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert with_torchtpu["torchtpu_loaded"] and not without["torchtpu_loaded"]
    assert not with_torchtpu["backward_patched"] and not with_torchtpu["grad_patched"]
    assert with_torchtpu["optimizer_hooks"] == 0
    assert with_torchtpu["repr"] == without["repr"] and with_torchtpu["grad"] == without["grad"]


def test_fused_mode_installs_its_cuts():
    got = _python("import json, torch, torchtpu\n"
                  "from torch.optim import optimizer\n"
                  "before = hasattr(torch.autograd.backward, '_torchtpu_patch')\n"
                  "with torchtpu.eager_mode('fused'): pass\n"
                  "print(json.dumps([before, hasattr(torch.autograd.backward, '_torchtpu_patch'),\n"
                  "  hasattr(torch.autograd.grad, '_torchtpu_patch'), len(optimizer._global_optimizer_pre_hooks)]))",
                  TORCHTPU_EAGER_MODE="strict")
    assert got == [False, True, True, 1]


def test_the_replacements_hand_other_devices_to_pytorch():
    """Each import-time replacement calls the original for CPU tensors."""
    calls = []
    from torchtpu import compile as tpu_compile, tensor_repr
    from torchtpu.integrations import flex_attention
    x = torch.ones(2)
    tpu_compile.inductor_or_tpu(lambda self, gm, inputs: calls.append("inductor"))(None, None, [x])
    assert tensor_repr.formatting_on_host(lambda t, indent: "original")(x, 0) == "original"
    flex_attention.validate_device_or_tpu(lambda q, k, v: calls.append("validated"))(x, x, x)
    assert calls == ["inductor", "validated"]


@pytest.mark.parametrize("version,ok", [("2.11.0", True), ("2.14.0+cpu", True), ("2.15.1", True),
                                        ("2.10.0", False), ("2.16.0.dev20261201", False), ("3.0.0", False)])
def test_a_torch_outside_the_window_is_refused_by_name(version, ok):
    if ok:
        torch_versions.check(version)
    else:
        with pytest.raises(ImportError, match=r"supports PyTorch 2\.11 to 2\.15; .* torch " + version.replace(".", r"\.")):
            torch_versions.check(version)


def test_the_installed_torch_is_in_the_window():
    torch_versions.check(torch.__version__)
    assert torchtpu.__version__
