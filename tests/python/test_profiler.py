"""torch.profiler with ProfilerActivity.PrivateUse1 records what the tpu device did: program runs
(single ops, fused windows), compiles with their cache tier, host<->device copies with their
sizes, each naming the user's line; the chrome trace and TensorBoard's trace files carry them."""

import glob
import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import torchtpu
from torchtpu import _C

# PyTorch's own notes about profiler schedules, not about what is being tested.
pytestmark = [pytest.mark.filterwarnings("ignore:Profiler won't be using warmup"),
              pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")]

THIS_FILE = os.path.basename(__file__) + ":"
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
# Each test trains at a width no other test uses, so its programs are compiled inside the profile.
_widths = iter(range(41, 100, 2))


def make_model(width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to("tpu")
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(model, opt, width):
    x = torch.randn(16, width).to("tpu")
    y = torch.randn(16, 1).to("tpu")
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def device_events(trace_file):
    """torchtpu's events in a chrome trace: program runs, copies, compiles and cache loads."""
    with open(trace_file) as f:
        events = json.load(f)["traceEvents"]
    cats = ("kernel", "gpu_memcpy", "privateuse1_runtime")
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats]


def check_device_events(events, width, fused):
    """The trace of one training step at `width` (compiled inside the profile)."""
    runs = [e for e in events if e["cat"] == "kernel"]
    assert runs, "no device executions"
    for e in runs:
        assert e["dur"] >= 0 and e["args"]["ops"] >= 1 and e["args"]["program"]
    if fused:
        windows = [e for e in runs if e["args"]["program"] == "fused window"]
        assert windows and all(e["args"]["ops"] > 1 for e in windows)
        assert all(e["name"].startswith("fused window (") for e in windows)
        assert all("first op" in e["args"] and "cut" in e["args"] for e in windows)
    else:
        assert any(e["name"].startswith("aten::addmm") for e in runs)

    compiles = [e for e in events if e["name"] == "compile"]
    assert compiles, "a fresh shape compiled, but no compile event"
    assert all(e["args"]["cache"] == "miss" and e["dur"] > 0 for e in compiles)

    to_device = [e for e in events if e["name"] == "copy host to device"]
    to_host = [e for e in events if e["name"] == "copy device to host"]
    assert any(e["args"]["bytes"] == 16 * width * 4 for e in to_device)  # the batch
    assert any(e["args"]["bytes"] == 4 and e["args"]["reason"] == "item" for e in to_host)  # loss.item()

    # The user's line: this file's, for everything the step caused.
    for e in runs + compiles + to_device + to_host:
        assert THIS_FILE in e["args"].get("user line", ""), e


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_step_is_traced(mode, tmp_path):
    width = next(_widths)
    with torchtpu.eager_mode(mode):
        model, opt = make_model(width)
        torchtpu.cache.wait_for_background_compiles()  # an earlier test's must not land in this trace
        with profile(activities=ACTIVITIES) as prof:
            train_step(model, opt, width)
            if mode == "fused":  # the first step runs op by op while its windows compile
                torchtpu.cache.wait_for_background_compiles()
                train_step(model, opt, width)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    check_device_events(device_events(path), width, fused=mode == "fused")
    # torch's own summary sees the device time too.
    assert "copy host to device" in prof.key_averages().table(sort_by="self_cpu_time_total")


def test_nothing_is_recorded_without_a_device_profiler():
    width = next(_widths)
    model, opt = make_model(width)
    before = _C._trace_events_emitted()
    train_step(model, opt, width)  # no profiler
    with profile(activities=[ProfilerActivity.CPU]):  # the CPU alone: no device events
        train_step(model, opt, width)
    assert _C._trace_events_emitted() == before
    with profile(activities=ACTIVITIES):
        train_step(model, opt, width)
    after = _C._trace_events_emitted()
    assert after > before
    train_step(model, opt, width)  # the profiler has stopped
    assert _C._trace_events_emitted() == after


def test_cpu_fallback_is_traced_on_the_host_thread(tmp_path):
    t = torch.tensor([[1.0, 2], [1, 2], [3, 4]], device="tpu")
    with profile(activities=ACTIVITIES) as prof:
        torch.ops.torchtpu_test.cpu_only(t[:2])  # runs on the CPU (a CPU-only custom op, conftest.py)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    fallbacks = [e for e in device_events(path) if e["name"].startswith("cpu fallback (torchtpu_test::cpu_only")]
    assert len(fallbacks) == 1
    assert fallbacks[0]["pid"] == os.getpid() and THIS_FILE in fallbacks[0]["args"]["user line"]


def test_tensorboard_trace_handler_writes_the_device_events(tmp_path):
    width = next(_widths)
    model, opt = make_model(width)
    with profile(activities=ACTIVITIES, schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        train_step(model, opt, width)
        prof.step()
    files = glob.glob(str(tmp_path / "*.pt.trace.json"))
    assert len(files) == 1
    check_device_events(device_events(files[0]), width, fused=False)
