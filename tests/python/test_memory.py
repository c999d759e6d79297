"""Device memory as on CUDA: storages count from allocation, ``torch.cuda``'s memory API, and the
limit (``TORCHTPU_MEMORY_LIMIT``, ``set_per_process_memory_fraction``) past which an allocation
raises ``torch.OutOfMemoryError`` naming the request, the limit, what is in use and the user's
line, and loses nothing."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchtpu

MiB = 1 << 20


@pytest.fixture
def limit_above_current():
    """A limit 8 MiB above what is held now, removed afterwards."""
    gc.collect()
    fraction = (torch.tpu.memory_allocated() + 8 * MiB) / torchtpu._C._memory_size(0)
    torch.tpu.set_per_process_memory_fraction(fraction)
    yield
    torchtpu._C._set_memory_limit(0, None, "")


def test_a_storage_counts_from_its_allocation_like_cuda():
    before = torch.tpu.memory_allocated()
    t = torch.empty(1024, 256, device="tpu")  # never written
    assert torch.tpu.memory_allocated() == before + MiB
    assert torch.tpu.memory_stats()["allocation.all.current"] >= 1
    del t
    assert torch.tpu.memory_allocated() == before


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy", "debug"])
def test_past_the_limit_an_allocation_raises_and_loses_nothing(mode, limit_above_current):
    with torchtpu.eager_mode(mode):
        kept = torch.arange(1000, device="tpu", dtype=torch.float32) * 2  # pending in fused and lazy
        ooms = torch.tpu.memory_stats()["num_ooms"]
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.ones(4096, 1024, device="tpu")  # 16 MiB: marker
        message = str(info.value)
        assert "tried to allocate 16.00 MiB" in message and "the limit is" in message
        assert "set_per_process_memory_fraction" in message and "tensors hold" in message
        assert f"test_memory.py:{line_of('16 MiB: marker')}" in message
        assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
        torch.testing.assert_close(kept.cpu(), torch.arange(1000, dtype=torch.float32) * 2)
        fits = torch.ones(512, 1024, device="tpu") + kept[0]  # 2 + 2 MiB: the device is still usable
        assert fits.sum().item() == 512 * 1024


def test_a_batch_too_large_can_be_retried_smaller(limit_above_current):
    model = torch.nn.Linear(256, 256).to("tpu")
    batch = 8192
    while True:
        try:
            loss = model(torch.randn(batch, 256, device="tpu")).square().mean()
            loss.backward()
            break
        except torch.OutOfMemoryError:
            batch //= 2
    assert 0 < batch < 8192 and model.weight.grad is not None
    assert torch.isfinite(model.weight.grad).all()


def test_memory_api_behaves_as_on_cuda(limit_above_current):
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    t = torch.zeros(512, 1024, device="tpu")  # 2 MiB
    del t
    stats = torch.tpu.memory_stats()
    assert torch.tpu.max_memory_allocated() == base + 2 * MiB == stats["allocated_bytes.all.peak"]
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated() == base
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    free, total = torch.tpu.mem_get_info()
    assert total == stats["torchtpu.limit_bytes"] and free == total - base
    assert torch.tpu.get_per_process_memory_fraction() == pytest.approx(total / torchtpu._C._memory_size(0))
    torch.tpu.empty_cache()
    assert torch.tpu.memory_allocated() == base
    assert torch.accelerator.memory_stats()["num_ooms"] == stats["num_ooms"]
    assert "memory summary" in torch.tpu.memory_summary()
    with pytest.raises(ValueError, match="fraction"):
        torch.tpu.set_per_process_memory_fraction(1.5)


def run_limited(limit, code):
    env = dict(os.environ, TORCHTPU_MEMORY_LIMIT=limit)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)


def test_the_environment_sets_a_per_device_limit_in_bytes_or_as_a_fraction():
    p = run_limited("64MiB", """
        import torch, torchtpu
        a = torch.ones(8 << 20, device="tpu")  # 32 MiB
        try:
            b = torch.ones(9 << 20, device="tpu")  # 36 MiB more
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        print("total", torch.tpu.mem_get_info()[1], "sum", a.sum().item())
    """)
    assert p.returncode == 0, p.stderr
    assert "the limit is 64.00 MiB (TORCHTPU_MEMORY_LIMIT=64MiB)" in p.stdout and "<string>:5" in p.stdout
    assert f"total {64 * MiB} sum {float(8 << 20)}" in p.stdout
    p = run_limited("0.5", "import torch, torchtpu; print(torch.tpu.mem_get_info()[1], torchtpu._C._memory_size(0))")
    total, size = map(int, p.stdout.split())
    assert total == size // 2


def test_a_malformed_limit_is_an_error_that_names_it():
    p = run_limited("lots", "import torch, torchtpu; torch.ones(3, device='tpu')")
    assert p.returncode != 0 and "TORCHTPU_MEMORY_LIMIT='lots'" in p.stderr


def line_of(marker):
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, start=1) if marker in line and "line_of" not in line)


def test_what_torchtitan_reads_of_the_device_module():
    """TorchTitan's memory monitor and profiler: the keys it reads of memory_stats(), the device's
    total memory, peak resets and the torch.tpu.memory submodule (as torch.cuda.memory)."""
    device = torch.device("tpu")  # (TorchTitan passes the device without an index)
    torch.tpu.reset_peak_memory_stats()
    x = torch.ones(1024, device=device)
    stats = torch.tpu.memory_stats(device)
    for key in ("active_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms"):
        assert key in stats, key
    assert stats["active_bytes.all.peak"] >= x.nbytes
    assert torch.tpu.get_device_properties(device).total_memory > 0
    assert torch.tpu.memory.memory_stats is torch.tpu.memory_stats
    torch.tpu.memory._record_memory_history(enabled=None)
    assert torch.tpu.memory._snapshot()["segments"] == []
