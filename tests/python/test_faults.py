"""Faults give a clear Python exception and leave the process usable: a missing or broken PJRT
plugin, Ctrl-C during a long compile or fused window, an exception in the middle of a fused window,
and tensors computed from an op whose device-side check failed. (Cache-directory faults are in
test_compile_cache.py, out-of-memory in test_memory.py.)"""

import _ctypes
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torchtpu

PROBE = textwrap.dedent("""
    import torch, torchtpu
    print("available", torch.tpu.is_available())
    try:
        torch.ones(2, device="tpu")
    except RuntimeError as e:
        print("error:", e)
    print("cpu still works", torch.ones(2).sum().item())
""")


def broken_plugins(tmp_path):
    real = torchtpu._C._platform_info()["plugin_path"]
    garbage = tmp_path / "garbage.so"
    garbage.write_bytes(os.urandom(4096))
    truncated = tmp_path / "truncated.so"
    with open(real, "rb") as f:
        truncated.write_bytes(f.read(1 << 20))
    return {
        "missing": (str(tmp_path / "nowhere.so"), "PJRT plugin not found"),
        "garbage": (str(garbage), "cannot load PJRT plugin"),
        "truncated": (str(truncated), "cannot load PJRT plugin"),
        "not a plugin": (_ctypes.__file__, "is not a PJRT plugin"),  # a shared library, but no GetPjrtApi
    }


@pytest.mark.parametrize("kind", ["missing", "garbage", "truncated", "not a plugin"])
def test_a_broken_plugin_is_an_error_that_names_it(kind, tmp_path):
    path, expected = broken_plugins(tmp_path)[kind]
    env = dict(os.environ, TORCHTPU_PJRT_PLUGIN=path)
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "available False" in p.stdout
    assert "error: " in p.stdout and expected in p.stdout and path in p.stdout
    assert "cpu still works 2.0" in p.stdout


# Thousands of distinct ops in one window: compiling it takes a minute on this machine.
LONG_WINDOW = textwrap.dedent("""
    import sys, torch, torchtpu
    torchtpu.set_eager_mode(sys.argv[1])
    x = torch.linspace(0, 1, 64, device="tpu")
    for i in range(1000):
        x = torch.sin(x) * 1.001 + x.roll(i % 7) * 0.5
    print("running", flush=True)
    print(x.sum().item())
""")


def interrupt(p):
    """Ctrl-C, and Ctrl-C again if the exit then waits for a compile. Returns (stderr, seconds
    until Ctrl-C took effect: a KeyboardInterrupt traceback, or the process gone)."""
    p.send_signal(signal.SIGINT)
    start, err, seen_at = time.monotonic(), b"", None
    while p.poll() is None and time.monotonic() - start < 120:
        if select.select([p.stderr], [], [], 0.2)[0]:
            chunk = os.read(p.stderr.fileno(), 1 << 16)
            err += chunk
            if seen_at is None and b"KeyboardInterrupt" in err:
                seen_at = time.monotonic() - start
            if b"waiting for a compile to finish" in chunk:
                p.send_signal(signal.SIGINT)
    if p.poll() is None:
        p.kill()
        pytest.fail("the process hung after Ctrl-C")
    err += p.stderr.read()
    return err.decode(), seen_at if seen_at is not None else time.monotonic() - start


@pytest.mark.parametrize("mode", ["lazy", "fused"])
def test_ctrl_c_during_a_long_compile_exits_and_leaves_the_cache_whole(mode, tmp_path):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path), TORCHTPU_SHARED_CACHE_DIR="")
    # Ctrl-C reaches the child as a shell delivers it, even when a test before this one left the
    # worker ignoring SIGINT (a child inherits that, and Python then installs no handler)
    p = subprocess.Popen([sys.executable, "-c", LONG_WINDOW, mode], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline().strip() == b"running"
    time.sleep(0.5)  # lazy: inside the window's compile; fused: running op by op while it compiles
    stderr, seconds = interrupt(p)
    assert p.returncode != 0, stderr
    assert seconds < 10, f"Ctrl-C took {seconds:.1f} s"  # not after the minute-long compile
    if mode == "lazy":  # the main thread was waiting for the window's compile
        assert "KeyboardInterrupt" in stderr, stderr
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]  # no half-written entry
    probe = "import torch, torchtpu; print((torch.ones(3, device='tpu') * 2).sum().item())"
    again = subprocess.run([sys.executable, "-W", "always", "-c", probe], env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == "6.0" and "damaged" not in again.stderr


@pytest.mark.parametrize("mode", ["fused", "lazy"])
def test_an_exception_in_user_code_mid_window_loses_nothing(mode):
    a_cpu = torch.randn(5, 5)
    with torchtpu.eager_mode(mode):
        a = a_cpu.to("tpu")
        b = a @ a + 1  # pending
        with pytest.raises(ValueError):
            c = b.relu()
            raise ValueError("user code fails mid-window")
        with pytest.raises(RuntimeError, match="must match|broadcast"):
            b + torch.ones(3, device="tpu")  # an op that fails mid-window
        d = b * 2 + c
        torch.testing.assert_close(d.cpu(), (a_cpu @ a_cpu + 1) * 2 + (a_cpu @ a_cpu + 1).relu())


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_tensors_computed_from_a_failed_op_raise_its_error_again(mode):
    t_cpu = torch.randn(4, 3)
    with torchtpu.eager_mode(mode):
        t = t_cpu.to("tpu")
        good = t * 2
        picked = t.index_select(0, torch.tensor([1, 7], device="tpu"))  # 7 is out of range
        derived = picked + 1  # computed before anyone learned that the check failed
        with pytest.raises(IndexError, match="index out of range.*index_select"):
            picked.cpu()
        for use in (lambda: picked.cpu(), lambda: derived.cpu(), lambda: picked * 3, lambda: derived.sum().item()):
            with pytest.raises(IndexError, match="index out of range.*index_select"):
                use()
        torch.testing.assert_close(good.cpu(), t_cpu * 2)  # unrelated tensors are fine
        picked = t.index_select(0, torch.tensor([1, 2], device="tpu"))  # the name rebinds: usable again
        torch.testing.assert_close((picked + 1).cpu(), t_cpu[[1, 2]] + 1)


def test_in_debug_mode_the_failed_op_raises_at_once():
    t = torch.randn(4, 3, device="tpu")
    with torchtpu.eager_mode("debug"), pytest.raises(IndexError, match="index out of range"):
        t.index_select(0, torch.tensor([1, 7], device="tpu"))


def test_exit_waits_for_autograd_threads_to_let_go_of_the_last_backward():
    """PyTorch 2.14 keeps a Python object with every backward pass, and an autograd device thread
    that lets go of a pass after shutdown began aborts the process. The exit hook runs one empty
    pass on each tpu device's autograd thread (threads run passes in order): it must run there,
    and make no program."""
    import threading

    from torchtpu import autograd_exit

    model = torch.nn.Linear(8, 2).to("tpu")
    model(torch.randn(4, 8, device="tpu")).sum().backward()
    torch.tpu.synchronize()
    threads = []
    original = autograd_exit._Empty.backward

    def recording(ctx, grad):
        threads.append(threading.get_ident())
        return original(ctx, grad)

    autograd_exit._Empty.backward = staticmethod(recording)
    try:
        before = torchtpu.metrics.counters()["executions"]
        autograd_exit._let_autograd_threads_finish()
        assert torchtpu.metrics.counters()["executions"] == before
    finally:
        autograd_exit._Empty.backward = staticmethod(original)
    assert len(threads) == torch.tpu.device_count()
    assert threading.get_ident() not in threads


def test_a_forked_child_is_refused_the_parents_device_instead_of_hanging():
    """A child forked after the runtime started has a copy of the client but none of its threads:
    every use raises (as CUDA does) where it used to wait forever; the parent is unaffected."""
    x = torch.ones(3, device="tpu") + 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each use raised, then leave without cleanup
        messages = []
        for use in (lambda: x.cpu(), lambda: x * 2, lambda: torch.zeros(2, device="tpu"), torch.tpu.synchronize):
            try:
                use()
                messages.append("no error")
            except RuntimeError as e:
                messages.append("fork" if "'spawn'" in str(e) and "fork of it" in str(e) else str(e))
        os.write(write, ";".join(messages).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 4096).decode() == ";".join(["fork"] * 4)
    assert status == 0
    assert torch.equal((x * 2).cpu(), torch.full((3,), 4.0))
