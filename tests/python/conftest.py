import atexit
import os
import shutil
import tempfile

# Tests compile into a cache of their own, one per pytest-xdist worker: counts of compiles and hits
# are then this process's, and a user's ~/.cache/torchtpu is left alone. Set before torchtpu reads
# it (at its first compile). Workers inherit the controller's directory and take a folder in it.
# The process that made the directory removes it at exit: a suite's programs fill hundreds of MB.
if "TORCHTPU_CACHE_DIR" not in os.environ:
    os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TORCHTPU_CACHE_DIR"], ignore_errors=True)
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["TORCHTPU_CACHE_DIR"] = os.path.join(os.environ["TORCHTPU_CACHE_DIR"],
                                                    os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(os.environ["TORCHTPU_CACHE_DIR"], exist_ok=True)

import pytest  # noqa: E402
import torch  # noqa: E402  (after the cache directory is set)

import torchtpu  # noqa: E402


# An op with only a CPU kernel, as a user's custom op often has: on tpu it can only run through the
# CPU fallback. The fallback tests use it instead of an ATen op that happens not to be lowered yet.
@torch.library.custom_op("torchtpu_test::cpu_only", mutates_args=(), device_types="cpu")
def cpu_only(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@cpu_only.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.fixture
def no_fallbacks():
    """Fails the test if any op of it ran on the CPU fallback: a result computed there is not a
    result of the device."""
    torchtpu.metrics.reset()
    yield
    assert torchtpu.metrics.cpu_fallbacks() == {}
