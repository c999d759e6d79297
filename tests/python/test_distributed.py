"""torch.distributed on tpu: the tpu_dist backend under torchrun (ranks are processes, host-staged
collectives) and as thread ranks (one process, one device per rank, compiled XLA collectives).

Each scenario runs in fresh processes (tests/python/distributed/worker.py) and checks itself
against CPU PyTorch; a failing rank makes its process exit non-zero, which fails the test here.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
WORKER = os.path.join(HERE, "distributed", "worker.py")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def _run(cmd, env=None, timeout=300):
    full_env = {**os.environ, "TORCHTPU_EAGER_MODE": "strict"}
    full_env.pop("TORCHTPU_NUM_CPU_DEVICES", None)  # each launcher says how many devices it needs
    full_env.update(env or {})
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)


def threads(world, scenario, *args, env=None):
    return _run([sys.executable, WORKER, "--threads", str(world), scenario, *args],
                {"TORCHTPU_NUM_CPU_DEVICES": str(world), **(env or {})})


def torchrun(world, scenario, *args, env=None):
    return _run([TORCHRUN, "--standalone", f"--nproc_per_node={world}", WORKER, scenario, *args], env)


def _ok(result):
    # XLA's and torchrun's informational lines would push the failure out of the message.
    noise = ("I0000", "WARNING: All log", "W1", "I1")
    stderr = "\n".join(line for line in result.stderr.splitlines() if not line.startswith(noise))
    assert result.returncode == 0, result.stdout[-3000:] + stderr[-8000:]


# ---- every collective against CPU PyTorch (and, as processes, gloo on CPU tensors) ----

@pytest.mark.parametrize("world", [2, 4])
def test_collectives_thread_ranks(world):
    _ok(threads(world, "collectives"))


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_torchrun(world):
    _ok(torchrun(world, "collectives"))


def test_init_process_group_without_backend_picks_tpu_dist():
    _ok(torchrun(2, "default_backend"))


def test_device_loader_shards_the_dataset_across_ranks():
    _ok(torchrun(2, "data_shards"))


# ---- the stock parallelisms train like one CPU process ----

@pytest.mark.parametrize("scenario,world", [("ddp", 2), ("fsdp", 2), ("tp", 2), ("fsdp_tp", 4)])
def test_training_thread_ranks(scenario, world):
    _ok(threads(world, scenario))


@pytest.mark.parametrize("scenario,world", [("ddp", 2), ("fsdp", 2), ("tp", 2), ("fsdp_tp", 4)])
def test_training_torchrun(scenario, world):
    _ok(torchrun(world, scenario))


@pytest.mark.parametrize("launch", [threads, torchrun])
def test_ddp_communication_hook_chains_on_the_all_reduce_future(launch):
    _ok(launch(2, "ddp", "fp16_compress_hook"))


def test_distributed_checkpoint_loads_on_cpu_pytorch(tmp_path):
    """FSDP2 shards saved with torch.distributed.checkpoint load in a process that never imports
    torchtpu, equal to the CPU reference training."""
    _ok(torchrun(2, "fsdp_checkpoint", str(tmp_path / "ckpt")))
    check = f"""
import sys, torch
sys.path.insert(0, {os.path.join(HERE, "distributed")!r})
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
import training
dcp_to_torch_save({str(tmp_path / "ckpt")!r}, {str(tmp_path / "model.pt")!r})
loaded = torch.load({str(tmp_path / "model.pt")!r})["model"]
want = training.reference(2).state_dict()
assert loaded.keys() == want.keys(), (loaded.keys(), want.keys())
for k in want:
    torch.testing.assert_close(loaded[k], want[k], atol=2e-4, rtol=1e-3)
assert "torchtpu" not in sys.modules
"""
    _ok(_run([sys.executable, "-c", check], {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))


# ---- rank-divergent code, and failures ----

def test_rank_divergent_code_thread_ranks():
    _ok(threads(2, "divergent"))


def test_rank_divergent_code_and_modes_torchrun():
    _ok(torchrun(2, "divergent"))  # rank 0 in fused mode with extra ops and host reads; rank 1 strict


def test_dead_peer_thread_rank_raises_promptly():
    r = threads(2, "peer_dies")
    assert r.returncode != 0
    assert "SURVIVOR rank 0 raised" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "rank 1 failed" in r.stdout and "mpmd.py" in r.stdout


@pytest.mark.parametrize("launch", [threads, torchrun])
def test_hung_peer_times_out_naming_the_collective(launch):
    r = launch(2, "peer_hangs")
    assert r.returncode != 0
    assert "TIMEOUT rank 0: tpu_dist all_reduce (called at" in r.stdout, r.stdout + r.stderr[-3000:]


@pytest.mark.parametrize("launch", [threads, torchrun])
def test_mismatched_collectives_are_detected(launch):
    r = launch(2, "mismatch", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert r.returncode != 0
    for rank in (0, 1):
        assert f"MISMATCH rank {rank}" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "rank 0: all_reduce" in r.stdout and "rank 1: broadcast" in r.stdout
