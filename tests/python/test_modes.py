"""The four eager modes: same losses, stable fused windows, errors that name the user's line."""

import contextlib
import inspect

import pytest
import torch

import torchtpu
from test_training import cnn_case, mlp_case, train, transformer_case

CASES = [mlp_case, cnn_case, transformer_case]
IDS = ["mlp_sgd_momentum", "cnn_adamw", "transformer_adamw"]


@pytest.mark.parametrize("mode", ["debug", "fused", "lazy"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_mode_trains_like_strict_and_cpu(case, mode):
    torch.manual_seed(0)
    model, optimizer, batches = case()
    want = train(model, "cpu", optimizer, batches)
    strict = train(model, "tpu", optimizer, batches)
    torchtpu.metrics.reset()
    with torchtpu.eager_mode(mode):
        got = train(model, "tpu", optimizer, batches)
    m = torchtpu.metrics.as_dict()
    assert m[f"{mode}_ops"] > 0 and m["strict_ops"] == 0
    assert m["cpu_fallbacks"] == {}
    torch.testing.assert_close(got, strict, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_fused_windows_repeat_so_a_warm_training_loop_compiles_nothing():
    torch.manual_seed(0)
    model, optimizer, batches = transformer_case()
    model = model.to("tpu")
    opt = optimizer(model.parameters())

    def steps(n):
        for x, y in batches[:n]:
            opt.zero_grad()
            out = model(x.to("tpu"))
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.to("tpu").reshape(-1))
            loss.backward()
            opt.step()
            loss.item()

    with torchtpu.eager_mode("fused"):
        steps(3)
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.metrics.reset()
        steps(10)
    m = torchtpu.metrics.as_dict()
    assert m["compiles"] == 0 and m["recompile_count"] == 0
    assert m["op_by_op_windows"] == 0
    # three windows per step (forward, backward, optimizer), the same three every step
    assert m["windows"] == 30 and len(m["window_sizes"]) == 3
    assert m["window_cuts"] == {"backward": 10, "optimizer step start": 10, "optimizer step": 10}
    assert m["executions"] == 30  # each window is one program


def test_a_window_whose_shape_keeps_changing_stops_compiling_in_the_background():
    """Each new length of a growing sequence makes a new fused window, which would run once: after
    eight such variants the window's ops run one by one and no more window programs compile. A
    variant compiled before still runs whole, and so does one asked for twice in a row (the shape
    has settled); every result equals CPU's."""
    def step(x):
        return ((x * 2 + 1).sin() * x).sum()

    def check(length):
        x = torch.randn(length)
        torch.testing.assert_close(step(x.to("tpu")).cpu(), step(x))

    with torchtpu.eager_mode("fused"):
        for length in range(3, 11):  # eight variants, each compiled in the background
            check(length)
            torchtpu.cache.wait_for_background_compiles()
        torchtpu.metrics.reset()
        for length in range(11, 17):  # new lengths: not compiled
            check(length)
        torchtpu.cache.wait_for_background_compiles()
        m = torchtpu.metrics.as_dict()
        assert m["cache"]["skipped_background"] == 6
        assert m["windows"] == 0 and m["op_by_op_windows"] == 6
        check(5)  # a length seen early: its window runs whole
        assert torchtpu.metrics.as_dict()["windows"] == 1
        check(20)
        check(20)  # asked for twice in a row: it has settled, and is compiled after all
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.metrics.reset()
        check(20)
        assert torchtpu.metrics.as_dict()["windows"] == 1


def _window_compiles(function):
    """The cache's recorded compiles of fused windows that start at `function`'s first line."""
    where = f"test_modes.py:{function.__code__.co_firstlineno + 1})"
    return [c for c in torchtpu.cache.stats()["compiles"] if c[0].startswith("a fused window") and where in c[0]]


def test_a_fused_window_cut_by_a_host_read_compiles_when_it_comes_back():
    """A window cut by a host read waits until it runs again: a prompt's prefill runs once, and
    compiling it beside the caller's own single-op compiles made a first `generate` slower.
    Waiting for the background compiles compiles a deferred window as well. A window cut where a
    training step is (here `torchtpu.sync()`) compiles at its first run: it comes back every step."""
    def once_then_again(x):
        return ((x * 3 + 2).cos() * x).sum()

    def once_then_waited(x):
        return ((x * 5 - 1).sin() * x).sum()

    def a_step(x):
        return ((x * 7 + 4).tanh() * x).sum()

    x = torch.randn(37)
    with torchtpu.eager_mode("fused"):
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.cache.reset_stats()
        torch.testing.assert_close(once_then_again(x.to("tpu")).cpu(), once_then_again(x))
        assert torchtpu.cache.stats()["deferred"] == 1
        once_then_again(x.to("tpu")).cpu()  # it comes back: compiled in the background
        assert torchtpu.cache.stats()["deferred"] == 0
        torchtpu.cache.wait_for_background_compiles()
        assert len(_window_compiles(once_then_again)) == 1
        torch.testing.assert_close(once_then_waited(x.to("tpu")).cpu(), once_then_waited(x))
        assert torchtpu.cache.stats()["deferred"] == 1
        torchtpu.cache.wait_for_background_compiles()
        assert torchtpu.cache.stats()["deferred"] == 0 and len(_window_compiles(once_then_waited)) == 1
        loss = a_step(x.to("tpu"))
        torchtpu.sync()
        # Compiling in the background at once (it may have finished while the ops ran one by one).
        stats = torchtpu.cache.stats()
        assert stats["deferred"] == 0 and (stats["background_pending"] == 1 or len(_window_compiles(a_step)) == 1)
        torch.testing.assert_close(loss.cpu(), a_step(x))
        torchtpu.cache.wait_for_background_compiles()
        assert len(_window_compiles(a_step)) == 1
        torchtpu.metrics.reset()
        torch.testing.assert_close(once_then_again(x.to("tpu")).cpu(), once_then_again(x))
        torch.testing.assert_close(once_then_waited(x.to("tpu")).cpu(), once_then_waited(x))
    assert torchtpu.metrics.as_dict()["windows"] == 2 and torchtpu.metrics.as_dict()["op_by_op_windows"] == 0


def test_a_fused_window_run_op_by_op_after_a_host_read_compiles_its_ops_ahead():
    """Run op by op while its own program is not ready, a window cut by a host read (a prompt's
    prefill, a decoding step) compiles its ops' programs ahead of them, two at a time, as strict mode
    does; a window that ends a training step's part (here `torchtpu.sync()`) does not (compiling
    ahead there made a varying-length training run's windows ready later)."""
    def read(x):
        return ((x * 3 - 2).exp() * x + 1).sum()

    def a_step(x):
        return ((x * 6 - 1).exp() * x + 2).sum()

    x = torch.randn(41)  # a size no other test here uses: every op's program is new
    with torchtpu.eager_mode("fused"):
        torchtpu.cache.reset_stats()
        loss = a_step(x.to("tpu"))
        torchtpu.sync()
        assert torchtpu.cache.stats()["started_ahead"] == 0
        torch.testing.assert_close(loss.cpu(), a_step(x))
        torch.testing.assert_close(read(x.to("tpu")).cpu(), read(x))
        assert torchtpu.cache.stats()["started_ahead"] > 0


def test_zero_fills_of_many_shapes_from_one_line_still_compile():
    """An optimizer's state is one zero fill per parameter shape, from one line: those programs are
    compiled however many shapes there are (without one, the zeros are uploaded from the host)."""
    skipped = torchtpu.cache.stats()["skipped_background"]
    with torchtpu.eager_mode("fused"):
        for n in range(100, 112):
            torch.zeros(n, device="tpu").cpu()
    assert torchtpu.cache.stats()["skipped_background"] == skipped


def test_a_window_materializes_only_live_values():
    x = torch.randn(64, device="tpu")
    torchtpu.metrics.reset()
    with torchtpu.eager_mode("lazy"):
        y = ((x * 2).sin() + 1).relu()
        assert torchtpu.metrics.as_dict()["pending_ops"] == 4
        got = y.cpu()
    assert torchtpu.metrics.as_dict()["executions"] == 1
    torch.testing.assert_close(got, ((x.cpu() * 2).sin() + 1).relu())


def test_fused_mode_runs_a_matrix_vector_product_between_windows():
    """Inside a window XLA CPU makes a matrix-vector dot an element loop; fused mode runs one (a
    decode step's projection) as a program of its own and fuses what comes before and after."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 48, generator=g), torch.randn(48, 40, generator=g)
    tx, tw = x.to("tpu"), w.to("tpu")
    with torchtpu.eager_mode("fused"):
        (((tx * 2).relu() @ tw).sin() + 1).cpu()  # the windows compile in the background
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.metrics.reset()
        got = (((tx * 2).relu() @ tw).sin() + 1).cpu()
    counters = torchtpu.metrics.counters()
    torch.testing.assert_close(got, (((x * 2).relu() @ w).sin() + 1))
    # two windows of two ops (mul, relu; sin, add) and the product between them
    assert (counters["executions"], counters["windows"], counters["window_ops"]) == (3, 2, 4), counters
    with torchtpu.eager_mode("fused"):  # a matrix times a matrix stays in its window
        ((tx.expand(8, 48) * 2).relu() @ tw).sin().cpu()
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.metrics.reset()
        ((tx.expand(8, 48) * 2).relu() @ tw).sin().cpu()
    assert torchtpu.metrics.counters()["executions"] == 1


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_one_program_blocks_donate_the_old_contents_of_what_they_update(mode):
    """In a one-program block (an optimizer step), an in-place update's old contents, held by no
    tensor any more, lend their buffer to the program's results; a clone or a result read from
    the old contents keeps its values, a view sees the new ones. Other windows do not donate
    (exec/executor.h: donating makes the dispatch wait for pending readers)."""
    cpu = [torch.randn(6, 4), torch.randn(3)]
    dev = [t.to("tpu") for t in cpu]
    views = [t.view(-1) for t in dev]
    with torchtpu.eager_mode(mode):
        for step in range(5):
            torchtpu.cache.wait_for_background_compiles()  # fused: the window's program is ready
            before = torchtpu.metrics.as_dict()["donated_buffers"]
            old = [t.clone() for t in dev]
            doubled = [t * 2 for t in dev]
            block = torchtpu.modes.one_program() if step % 2 else contextlib.nullcontext()
            with block:
                for t in dev + cpu:
                    t.mul_(0.5).add_(1.0)
                torchtpu.sync()
            donated = torchtpu.metrics.as_dict()["donated_buffers"] - before
            # fused mode ran the first donating window op by op while its program compiled
            donating = step == 3 or (step == 1 and mode != "fused")
            assert donated == (len(dev) if donating else 0), (step, donated)
            for d, c, o, x, v in zip(dev, cpu, old, doubled, views):
                torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)
                torch.testing.assert_close(v.cpu(), c.view(-1), rtol=0, atol=0)
                torch.testing.assert_close(o.cpu(), (c - 1.0) / 0.5, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(x.cpu(), (c - 1.0) / 0.5 * 2, rtol=1e-6, atol=1e-6)


def test_equal_scalars_do_not_rewire_a_window():
    """Scalars travel as device copies cached by value; two that happen to be equal are still two
    parameters of the program, so a window whose values coincide once (AdamW's first step) is the
    program of every other step (it recompiled: "the same ops, wired differently")."""
    x = torch.randn(13, 3, device="tpu")
    compiles = []
    with torchtpu.eager_mode("lazy"):
        for a, b in [(0.3125, 0.3125), (0.5, 0.75), (0.125, 0.375)]:
            before = torchtpu.metrics.counters()["compiles"]
            got = x.mul(a).sub(b).cpu()
            compiles.append(torchtpu.metrics.counters()["compiles"] - before)
            torch.testing.assert_close(got, x.cpu() * a - b)
    assert compiles[1:] == [0, 0], compiles


def test_lazy_mode_runs_nothing_until_sync():
    a = torch.ones(8, device="tpu")
    torchtpu.metrics.reset()
    with torchtpu.eager_mode("lazy"):
        b = a * 3
        c = b + a
        assert torchtpu.metrics.as_dict()["executions"] == 0
        torchtpu.sync()
        assert torchtpu.metrics.as_dict()["executions"] == 1
        torchtpu.mark_step()  # nothing pending: nothing runs
        assert torchtpu.metrics.as_dict()["executions"] == 1
    torch.testing.assert_close(c.cpu(), torch.full((8,), 4.0))


def test_optimizer_step_helper_steps_and_syncs():
    p = torch.nn.Parameter(torch.ones(3, device="tpu"))
    opt = torch.optim.SGD([p], lr=0.5)
    with torchtpu.eager_mode("lazy"):
        p.sum().backward()
        torchtpu.optimizer_step(opt)
        assert torchtpu.metrics.as_dict()["pending_ops"] == 0
    torch.testing.assert_close(p.detach().cpu(), torch.full((3,), 0.5))


def test_mode_selection_api_and_validation():
    assert torchtpu.get_eager_mode() == "strict"
    with torchtpu.eager_mode("fused"):
        assert torchtpu.get_eager_mode() == "fused"
    assert torchtpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="unknown eager mode"):
        torchtpu.set_eager_mode("eager")


def line_of(marker):
    source, start = inspect.getsourcelines(inspect.currentframe().f_back.f_code)
    return start + next(i for i, line in enumerate(source) if marker in line)


@pytest.mark.parametrize("mode", ["debug", "strict", "fused", "lazy"])
def test_device_side_errors_name_the_op_and_the_users_line(mode):
    t = torch.randn(4, 3, device="tpu")
    bad = torch.tensor([1, 7], device="tpu")
    with torchtpu.eager_mode(mode), pytest.raises(IndexError) as info:
        picked = t.index_select(0, bad)  # marker: index_select (debug mode raises here)
        picked.cpu()
    line = line_of("marker: index_select")
    assert "aten::index_select" in str(info.value)
    assert f"test_modes.py:{line}" in str(info.value)


@pytest.mark.parametrize("mode", ["debug", "strict", "fused", "lazy"])
def test_shape_errors_raise_at_the_op_in_every_mode(mode):
    a, b = torch.ones(2, 3, device="tpu"), torch.ones(4, device="tpu")
    with torchtpu.eager_mode(mode), pytest.raises(RuntimeError, match="broadcast|must match"):
        a + b


def test_debug_mode_nan_check_names_the_op_and_line(monkeypatch):
    monkeypatch.setenv("TORCHTPU_CHECK_NANS", "1")
    x = torch.zeros(3, device="tpu")
    with torchtpu.eager_mode("debug"), pytest.raises(ValueError) as info:
        x / x  # marker: nan
    assert "aten::div" in str(info.value)
    assert f"test_modes.py:{line_of('marker: nan')}" in str(info.value)


def test_metrics_report_names_syncs_and_recompiles():
    torchtpu.metrics.reset()
    for n in (5, 6):  # the same line with a new shape: a recompilation
        torch.ones(n, device="tpu").mul(3).sum().item()
    m = torchtpu.metrics.as_dict()
    assert m["host_syncs"].get("item", 0) >= 2
    assert any("test_modes.py" in r for r in m["recompiles"])
    report = torchtpu.metrics.report()
    for heading in ("ops recorded", "compiles", "compile cache", "recompilations", "host syncs", "CPU fallbacks"):
        assert heading in report


def test_host_syncs_are_counted_by_reason():
    t = torch.ones(3, device="tpu")
    torchtpu.metrics.reset()
    t.sum().item()
    if t.sum() > 0:  # control flow on a tensor
        pass
    repr(t * 2)  # printing
    (t * 3).cpu()
    syncs = torchtpu.metrics.as_dict()["host_syncs"]
    for reason in ("item", "control flow", "print", "cpu"):
        assert syncs.get(reason, 0) >= 1, (reason, syncs)


def run_python(code, **env):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, **env},
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def test_environment_selects_the_mode_and_rejects_unknown_ones():
    code = "import torchtpu; print(torchtpu.get_eager_mode())"
    assert run_python(code, TORCHTPU_EAGER_MODE="lazy")[1].strip() == "lazy"
    assert run_python(code, TORCHTPU_LAUNCH_BLOCKING="1")[1].strip() == "debug"
    rc, _, err = run_python(code, TORCHTPU_EAGER_MODE="eager")
    assert rc != 0 and "TORCHTPU_EAGER_MODE=eager is not a mode" in err


def test_metrics_on_exit_and_program_dumps(tmp_path):
    code = "import torch, torchtpu; (torch.ones(3, device='tpu') * 5).cpu()"
    rc, out, err = run_python(code, TORCHTPU_METRICS_ON_EXIT="1", TORCHTPU_DUMP_PROGRAMS=str(tmp_path),
                              TORCHTPU_CACHE_DIR="")
    assert rc == 0, err
    assert "torchtpu metrics" in out and "compiles:" in out
    dumps = list(tmp_path.glob("*.mlir"))
    assert dumps and all("stablehlo" in d.read_text() for d in dumps)


def test_a_user_project_in_a_folder_named_torchtpu_gets_its_own_line(tmp_path):
    """Whether a frame is torchtpu's own is decided by where the package is installed, not by a
    folder called torchtpu: a user's script there is named in errors, not pytest or a library."""
    project = tmp_path / "torchtpu" / "work"
    project.mkdir(parents=True)
    script = project / "train.py"
    script.write_text("import torch, torchtpu\n"
                      "t = torch.randn(4, 3, device='tpu')\n"
                      "try:\n"
                      "    t.index_select(0, torch.tensor([1, 7], device='tpu')).cpu()\n"
                      "except IndexError as e:\n"
                      "    print(e)\n")
    code, out, err = run_python(f"import runpy; runpy.run_path({str(script)!r})")
    assert code == 0, err
    assert f"{script}:4" in out, out
