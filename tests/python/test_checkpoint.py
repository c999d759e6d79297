"""Checkpoints: safetensors files read and written on tpu, one tensor at a time on the host."""

import io
import os
import pickle
import subprocess
import sys

import pytest
import safetensors.torch
import torch

import torchtpu
from torchtpu.checkpoint import load_safetensors, save_safetensors

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]


def sample_state():
    g = torch.Generator().manual_seed(0)
    state = {f"t_{str(d).split('.')[1]}": (torch.randn(3, 5, generator=g) * 4).to(d) for d in DTYPES}
    state["empty"] = torch.zeros(0, 4)
    state["scalar"] = torch.tensor(2.5)
    state["strided"] = torch.randn(4, 6, generator=g).t()  # not contiguous
    return state


def test_save_on_tpu_reads_back_anywhere(tmp_path):
    cpu = sample_state()
    path = tmp_path / "m.safetensors"
    save_safetensors({k: v.to("tpu") for k, v in cpu.items()}, path, metadata={"step": 3})
    by_safetensors = safetensors.torch.load_file(path)  # the reference reader, on CPU
    assert by_safetensors.keys() == cpu.keys()
    for name, value in cpu.items():
        assert by_safetensors[name].dtype == value.dtype and torch.equal(by_safetensors[name], value), name
    with safetensors.safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"step": "3"}
    on_device = load_safetensors(path, device="tpu")
    for name, value in cpu.items():
        assert on_device[name].device.type == "tpu" and torch.equal(on_device[name].cpu(), value), name


def test_pickle_and_legacy_torch_save_round_trip_tpu_tensors():
    """pickle.dumps of a tpu tensor (multiprocessing, object collectives) goes through PyTorch's
    legacy format, which wraps the storage's address in a storage of its own: it segfaulted."""
    cpu = sample_state()
    cpu["param"] = torch.nn.Parameter(torch.randn(2, 3))
    tpu = {k: v.to("tpu") for k, v in cpu.items()}
    tpu["param"] = torch.nn.Parameter(cpu["param"].detach().to("tpu"))
    tpu["view"] = tpu["t_float32"][1:, ::2]  # a view of another entry's storage
    back = pickle.loads(pickle.dumps(tpu))
    for name, value in back.items():
        expected = cpu["t_float32"][1:, ::2] if name == "view" else cpu[name]
        assert value.device.type == "tpu" and value.dtype == expected.dtype, name
        assert value.stride() == expected.stride() and torch.equal(value.cpu(), expected.detach()), name
    assert isinstance(back["param"], torch.nn.Parameter) and back["param"].requires_grad
    buffer = io.BytesIO()
    torch.save(tpu, buffer, _use_new_zipfile_serialization=False)
    buffer.seek(0)
    legacy = torch.load(buffer)
    assert legacy["view"].untyped_storage().data_ptr() == legacy["t_float32"].untyped_storage().data_ptr()
    assert torch.equal(legacy["t_bfloat16"].cpu(), cpu["t_bfloat16"])


def test_load_what_safetensors_wrote_into_a_model(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    safetensors.torch.save_file(model.state_dict(), tmp_path / "ref.safetensors")
    on_tpu = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("tpu")
    on_tpu.load_state_dict(load_safetensors(tmp_path / "ref.safetensors"))
    x = torch.randn(3, 4)
    torch.testing.assert_close(on_tpu(x.to("tpu")).cpu(), model(x))


def test_safetensors_loads_onto_tpu_by_device_index(tmp_path):
    """safetensors refuses device="tpu" but takes an index of the current accelerator (porting.md)."""
    tensors = {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int32)}
    safetensors.torch.save_file(tensors, tmp_path / "m.safetensors")
    loaded = safetensors.torch.load_file(tmp_path / "m.safetensors", device=0)
    for name, t in tensors.items():
        assert loaded[name].device == torch.device("tpu", 0)
        assert torch.equal(loaded[name].cpu(), t)


def test_unsupported_dtype_is_a_clear_error_and_leaves_no_file(tmp_path):
    with pytest.raises(TypeError, match="'u' has dtype torch.uint32"):
        save_safetensors({"u": torch.zeros(2, dtype=torch.uint32, device="tpu")}, tmp_path / "x.safetensors")
    assert not list(tmp_path.iterdir())


# Peak RSS while saving: the kernel's high-water mark (VmHWM), reset just before the save
# (/proc/self/clear_refs), less the RSS then. Earlier peaks (imports, compiles) cannot hide it.
RSS_PROBE = r"""
import os, sys, torch, torchtpu, safetensors.torch
state = {f"w{i}": torch.randn(4 * 1024 * 1024, device="tpu") for i in range(16)}  # 16 x 16 MiB
torch.tpu.synchronize()
save = {"torch.save": torch.save, "torchtpu": torchtpu.checkpoint.save_safetensors,
        "safetensors": safetensors.torch.save_file}[sys.argv[1]]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
start = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
save(state, sys.argv[2])
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM"))
print((peak - start) / 2**20)
"""


# glibc serves a large block from its heap once a block that size was freed (its mmap threshold
# adapts), and a freed heap block may stay resident: RSS then counts copies already freed, and
# torch.save's one-at-a-time copies measured anywhere from 1 to 227 MiB. A fixed threshold maps
# every block of 1 MiB or more on its own, and unmaps it when freed.
MALLOC_RETURNS_FREED = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def test_saving_streams_one_tensor_at_a_time(tmp_path):
    """Peak host memory while saving 256 MiB of tpu tensors (16 MiB each): torch.save and
    save_safetensors grow by one or two tensors; safetensors' own save_file, which assembles the
    file in memory, is the control that shows the measurement sees a full copy."""
    growth = {}
    for how in ("torch.save", "torchtpu", "safetensors"):
        done = subprocess.run([sys.executable, "-c", RSS_PROBE, how, str(tmp_path / how)],
                              capture_output=True, text=True, timeout=300, env=MALLOC_RETURNS_FREED)
        assert done.returncode == 0, done.stderr[-3000:]
        growth[how] = float(done.stdout.split()[-1])
    print("peak RSS growth while saving 256 MiB (MiB):", growth)
    # streaming: at most a tensor or two in flight (16 MiB each); the full copy: most of 256 MiB
    assert growth["torch.save"] < 48 and growth["torchtpu"] < 48, growth
    assert growth["safetensors"] > 128, growth
