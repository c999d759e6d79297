"""The PyTorch releases torchtpu supports, checked once at import.

The extension is built against the installed torch (its C++ API differs between releases only in
a few places, each guarded by a version check in the source), so any release in the window works;
outside it, import stops with one error that names the window instead of failing later in a model.
"""

import torch

OLDEST = (2, 11)  # what the GPU test machine ships
NEWEST = (2, 15)  # the latest release tested (scripts/test_torch_versions.sh)


def release(version: str) -> tuple:
    """(major, minor) of a version string such as "2.14.0+cpu" or "2.16.0.dev20261201"."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def supported_range() -> str:
    return f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


def check(version: str = torch.__version__) -> None:
    if not OLDEST <= release(version) <= NEWEST:
        raise ImportError(f"torchtpu supports PyTorch {supported_range()}; this environment has torch "
                          f"{version}. Install a supported release (pip install 'torch>=2.11,<2.16') or "
                          f"run bash scripts/setup.sh --torch VERSION.")
