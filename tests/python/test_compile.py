"""torch.compile(backend="tpu"): compiled graphs against eager tpu and CPU PyTorch."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torchtpu

from torchtpu.testing.zoo import MODELS


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: Dynamo's per-function graph cache (and its recompile limit)
    is shared by every torch.compile'd module."""
    torch._dynamo.reset()
    yield


def _counters():
    return torchtpu.metrics.counters()


def _recompiles():
    return torchtpu.metrics.as_dict()["recompiles"]


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=tol, atol=tol)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))


class _Decoder(torch.nn.Module):
    """A small GPT: token + position embeddings, pre-norm causal blocks, tied LM head."""

    def __init__(self, vocab=50, dim=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(seq, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        n = ids.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        h = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


def _gpt():
    torch.manual_seed(0)
    return _Decoder()


def _batches(kind, steps):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        if kind == "gpt":
            ids = torch.randint(0, 50, (2, 16), generator=g)
            yield ids, ids.roll(-1, 1)
        elif kind == "cnn":
            yield torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g)
        else:
            yield torch.randn(6, 8, generator=g), torch.randint(0, 4, (6,), generator=g)


def _loss(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _lm_step(model, x, y):
    return _loss(model(x), y)


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = _loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


BUILD = {"mlp": _mlp, "cnn": _cnn, "gpt": _gpt}


@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt"])
@pytest.mark.parametrize("whole_step", [False, True], ids=["module", "whole_step"])
def test_training_matches_eager(kind, whole_step):
    """Module compile and whole-step compile train like eager tpu, and like CPU."""
    cpu = BUILD[kind]()
    eager = copy.deepcopy(cpu).to("tpu")
    compiled = copy.deepcopy(cpu).to("tpu")
    # SGD: Adam turns rounding noise in mathematically-zero gradients (a key bias, a bias before
    # BatchNorm) into full-size steps, which would compare noise
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu, eager, compiled)]
    step = torch.compile(_step, backend="tpu") if whole_step else _step
    target = compiled if whole_step else torch.compile(compiled, backend="tpu")
    for i, (x, y) in enumerate(_batches(kind, 4)):
        lc = _step(cpu, opts[0], x, y)
        le = _step(eager, opts[1], x.to("tpu"), y.to("tpu"))
        before = _counters()
        lt = step(target, opts[2], x.to("tpu"), y.to("tpu"))
        after = _counters()
        _close(lt, le)
        _close(lt, lc, 1e-4)
        if i >= 2:  # warm: nothing recorded, nothing compiled, only compiled graphs ran
            assert after["captured_ops"] == before["captured_ops"]
            assert after["compiles"] == before["compiles"]
            assert after["compiled_graph_runs"] > before["compiled_graph_runs"]
    for pe, pt in zip(eager.parameters(), compiled.parameters()):
        _close(pt, pe, 1e-4)
    for be, bt in zip(eager.buffers(), compiled.buffers()):  # BatchNorm statistics written back
        _close(bt, be, 1e-4)


def test_compiled_step_runs_no_eager_ops():
    """A warm compiled forward dispatches no op: its inputs are bound to one program."""
    model = torch.compile(_mlp().to("tpu"), backend="tpu")
    x = torch.randn(6, 8, device="tpu")
    with torch.no_grad():
        model(x)
        before = _counters()
        model(x)
        after = _counters()
    assert after["strict_ops"] == before["strict_ops"]
    assert after["compiled_graph_runs"] == before["compiled_graph_runs"] + 1


@pytest.mark.parametrize("capturable", [False, True])
def test_optimizer_step_compiles(capturable):
    cpu = _mlp()
    dev = copy.deepcopy(cpu).to("tpu")
    oc = torch.optim.Adam(cpu.parameters(), lr=1e-2)
    od = torch.optim.Adam(dev.parameters(), lr=1e-2, capturable=capturable)
    step = torch.compile(od.step, backend="tpu")
    for x, y in _batches("mlp", 3):
        for m, o, s, d in ((cpu, oc, oc.step, "cpu"), (dev, od, step, "tpu")):
            o.zero_grad()
            _loss(m(x.to(d)), y.to(d)).backward()
            s()
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        _close(pd, pc, 1e-5)


def test_optimizer_steps_in_compiled_code_run_as_one_program():
    """An optimizer of tpu parameters in a compiled step is not traced by Dynamo: it runs as one
    recorded program (compile/optimizer_steps.py) that donates what it updates, and a learning
    rate a scheduler changes every step recompiles nothing (Dynamo guarded on its value)."""
    cpu = _mlp()
    dev = copy.deepcopy(cpu).to("tpu")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in (cpu, dev)]
    scheds = [torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.7) for o in opts]
    step = torch.compile(_step, backend="tpu")
    before_recompiles = len(_recompiles())
    for i, (x, y) in enumerate(_batches("mlp", 5)):
        expected = _step(cpu, opts[0], x, y)
        before = _counters()
        _close(step(dev, opts[1], x.to("tpu"), y.to("tpu")), expected, 1e-5)
        after = _counters()
        for s in scheds:
            s.step()
        assert after["windows"] == before["windows"] + 1 and after["op_by_op_windows"] == before["op_by_op_windows"]
        assert after["donated_buffers"] - before["donated_buffers"] == 3 * 4  # 4 parameters, 2 states each
        if i >= 1:  # the first step's states are uploaded zeros: its program is every step's
            assert after["compiles"] == before["compiles"]
    assert [r for r in _recompiles()[before_recompiles:] if r.startswith("torch.compile of")] == []
    assert not [name for name, _, _ in torchtpu.cache.stats()["compiles"] if "adam" in name]
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        _close(pd, pc, 1e-5)


def test_a_graph_without_ops_compiles_to_nothing():
    """Dynamo can hand the backend a graph without a single node (when it resumes a frame after a
    graph break): it runs as it is, with no program (it raised IndexError)."""
    from torchtpu.compile import backend

    graph = torch.fx.Graph()
    graph.output(None)
    compiled = backend(torch.fx.GraphModule(torch.nn.Module(), graph), [])
    before = _counters()["compiles"]
    assert compiled() is None
    assert _counters()["compiles"] == before


def test_hugging_face_model_trains():
    spec = MODELS["gpt2"]
    torch.manual_seed(0)
    eager = spec.build().to("tpu")
    compiled = copy.deepcopy(eager)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, compiled)]
    forward = torch.compile(compiled, backend="tpu")
    for step in range(3):
        batch = {k: v.to("tpu") for k, v in spec.batch(step).items()}
        losses = []
        for m, o in ((eager, opts[0]), (forward, opts[1])):
            o.zero_grad()
            loss = spec.loss(m, batch)
            loss.backward()
            o.step()
            losses.append(loss)
        _close(losses[1], losses[0], 1e-4)


def test_inference_mode_and_no_grad():
    cpu = _cnn().eval()
    model = torch.compile(copy.deepcopy(cpu).to("tpu"), backend="tpu")
    x = torch.randn(2, 3, 8, 8)
    expected = cpu(x)
    with torch.inference_mode():
        _close(model(x.to("tpu")), expected)
    with torch.no_grad():
        _close(model(x.to("tpu")), expected)


def test_input_mutation_is_written_back():
    @torch.compile(backend="tpu")
    def f(x, buf):
        buf.add_(x)
        x.mul_(2)
        return (x + buf).sum()

    x, buf = torch.arange(4.0), torch.ones(4)
    xt, buft = x.to("tpu"), buf.to("tpu")
    for _ in range(3):
        buf.add_(x)
        x.mul_(2)
        expected = (x + buf).sum()
        _close(f(xt, buft), expected)
    _close(xt, x)
    _close(buft, buf)


def test_outputs_alias_inputs_and_each_other():
    @torch.compile(backend="tpu")
    def f(x):
        y = x * 2
        return x.t(), y, y[1:], y.view(-1)

    x = torch.randn(3, 4)
    for _ in range(2):
        outs = f(x.to("tpu"))
    assert outs[1].untyped_storage().data_ptr() == outs[2].untyped_storage().data_ptr()
    outs[1].zero_()  # a write through one output is seen by its views, as in eager
    assert outs[3].abs().sum().item() == 0
    _close(outs[0], x.t())


def test_dropout_draws_like_eager():
    """Random ops in a compiled graph advance the device generator exactly as eager ops do."""
    def f(x):
        return F.dropout(x, 0.5, training=True) + torch.rand_like(x)

    compiled = torch.compile(f, backend="tpu")
    x = torch.ones(64, device="tpu")
    compiled(x)  # capture
    torch.manual_seed(7)
    eager = [f(x).cpu() for _ in range(3)]
    torch.manual_seed(7)
    ran = [compiled(x).cpu() for _ in range(3)]
    for e, r in zip(eager, ran):
        torch.testing.assert_close(r, e)
    assert not torch.equal(ran[0], ran[1])


def test_graph_breaks_run_between_compiled_pieces(capsys):
    def f(x):
        y = torch.sin(x) * 2
        print("halfway", y.sum().item() > -100)
        if y.sum() > 0:  # data-dependent control flow
            y = y + 1
        return torch.cos(y)

    x = torch.randn(5)
    compiled = torch.compile(f, backend="tpu")
    _close(compiled(x.to("tpu")), f(x))
    assert "halfway True" in capsys.readouterr().out
    explained = torch._dynamo.explain(_mlp().to("tpu"))(torch.randn(2, 8, device="tpu"))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_op_without_lowering_runs_eagerly_for_that_node(monkeypatch):
    """An op with no tpu kernel runs through the (counted) CPU fallback; the rest stays compiled."""
    from torchtpu.compile import partition

    real = partition.has_tpu_kernel
    monkeypatch.setattr(partition, "has_tpu_kernel", lambda op: op.name() != "aten::sin" and real(op))

    @torch.compile(backend="tpu")
    def f(x):
        return torch.sin(x * 2) + 1

    x = torch.randn(6)
    for _ in range(2):
        _close(f(x.to("tpu")), torch.sin(x * 2) + 1)


def test_new_shape_recompiles_once_with_cause():
    mlp = _mlp().to("tpu")

    @torch.compile(backend="tpu", dynamic=False)
    def model(x):  # a function of its own: torch.compile'd modules share one frame in Dynamo
        return mlp(x)

    counts = []
    with torch.no_grad():
        for n in (3, 3, 5, 5, 5):
            model(torch.randn(n, 8, device="tpu"))
            counts.append(torchtpu.metrics.as_dict()["recompile_count"])
    assert counts[1] == counts[0] and counts[4] == counts[3] == counts[2]
    causes = [r for r in _recompiles() if r.startswith("torch.compile of")]
    assert "size mismatch at index 0. expected 3, actual 5" in causes[-1], causes


def test_default_torch_compile_uses_tpu_backend():
    @torch.compile
    def f(x):
        return torch.relu(x) * 3

    x = torch.randn(7)
    before = _counters()["compiled_graph_runs"]
    _close(f(x.to("tpu")), torch.relu(x) * 3)
    assert _counters()["compiled_graph_runs"] == before + 1


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_torch_compile_modes_are_accepted(mode):
    """Code written for CUDA keeps its mode= when it switches to backend="tpu"."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.relu(x) * 3, backend="tpu", mode=mode)
    x = torch.randn(7)
    before = _counters()["compiled_graph_runs"]
    _close(f(x.to("tpu")), torch.relu(x) * 3)
    assert _counters()["compiled_graph_runs"] == before + 1


def test_unknown_modes_and_options_are_refused_by_name():
    torch._dynamo.reset()
    x = torch.randn(3, device="tpu")
    with pytest.raises(Exception, match="takes no options=.*compile_options"):
        torch.compile(lambda x: x + 1, backend="tpu", options={"triton.cudagraphs": True})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(lambda x: x + 2, backend="tpu", mode="fastest")(x)
    torch._dynamo.reset()


def test_a_compiled_step_does_not_import_inductor():
    """Nothing in a compiled training step imports Inductor (a second): Dynamo's own optimizer
    tracing would, for a CUDA-graph hint, but tpu optimizer steps are not traced
    (compile/optimizer_steps.py), whether the step is compiled alone or within the function."""
    script = textwrap.dedent("""
        import sys, torch, torchtpu
        m = torch.nn.Linear(8, 2).to("tpu")
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)

        @torch.compile(backend="tpu")
        def step(x):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            return loss

        losses = [step(torch.ones(4, 8, device="tpu")).item() for _ in range(3)]
        assert losses[2] < losses[0], losses
        print("IMPORTED", "torch._inductor.cudagraph_trees" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "IMPORTED False" in r.stdout
    # The optimizer step as the first frame Dynamo compiles (no backend call before it).
    alone = script.replace("@torch.compile(backend=\"tpu\")\n", "").replace(
        "opt.step()", "torch.compile(opt.step, backend=\"tpu\")()")
    assert alone.count("torch.compile(") == 1 and "torch.compile(opt.step" in alone
    r = subprocess.run([sys.executable, "-c", alone], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "IMPORTED False" in r.stdout


def test_reprs_while_dynamo_compiles_copy_nothing_to_the_host():
    """Dynamo formats each tensor it guards on by identity into the guard's description (an
    optimizer's parameters and states when it traces an optimizer step): while it compiles a
    frame, a tpu tensor's repr is "..." (tensor_repr.py), not a host copy that waits for every
    program writing the tensor; a print in compiled code and outside shows values."""
    from torch._guards import CompileContext, CompileId, compile_context

    weight = torch.nn.Parameter(torch.randn(3))
    on_tpu = torch.nn.Parameter(weight.detach().to("tpu"))
    torch.tpu.synchronize()
    before = torchtpu.metrics.as_dict()["bytes_to_host"]
    with compile_context(CompileContext(CompileId(frame_id=0, frame_compile_id=0))):
        assert repr(on_tpu) == "Parameter containing:\ntensor(..., device='tpu:0', requires_grad=True)"
    assert torchtpu.metrics.as_dict()["bytes_to_host"] == before
    assert repr(on_tpu).replace("device='tpu:0', ", "") == repr(weight)  # values, outside a compile


def test_second_process_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import torch, torchtpu
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to("tpu")
        step = torch.compile(lambda x: m(x).square().mean(), backend="tpu")
        step(torch.randn(4, 8, device="tpu")).backward()
        s = torchtpu.cache.stats()
        print("MISSES", s["misses"], "DISK", s["hits"]["disk"])
    """)
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split("MISSES")[-1].split() for r in runs)
    assert int(first[0]) > 0
    assert int(second[0]) == 0 and int(second[2]) > 0


def test_precision_reaches_eager_and_compiled_programs(tmp_path, monkeypatch):
    """torch.tpu.precision and torch.set_float32_matmul_precision become the programs'
    precision_config; each setting is its own program."""
    import glob

    monkeypatch.setenv("TORCHTPU_DUMP_PROGRAMS", str(tmp_path))
    a, b = torch.randn(13, 17), torch.randn(17, 3)
    mm = torch.compile(lambda x, y: x @ y, backend="tpu")

    def dots():
        texts = [open(f).read() for f in glob.glob(str(tmp_path / "*.mlir"))]
        return {"HIGHEST" if "precision HIGHEST" in t else "HIGH" if "precision HIGH>" in t else "DEFAULT"
                for t in texts if "dot_general" in t}

    _close(mm(a.to("tpu"), b.to("tpu")), a @ b)
    assert dots() == {"HIGHEST"}  # PyTorch's default
    with torch.tpu.precision("high"):
        _close(a.to("tpu") @ b.to("tpu"), a @ b)
        _close(mm(a.to("tpu"), b.to("tpu")), a @ b)
    assert dots() == {"HIGHEST", "HIGH"}
    assert "captured again (float32 matmul precision: 2 -> 1)" in _recompiles()[-1]
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        _close(mm(a.to("tpu"), b.to("tpu")), a @ b)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert dots() == {"HIGHEST", "HIGH", "DEFAULT"}
    assert "GLOBAL_STATE changed: allow_tf32" in _recompiles()[-1]  # Dynamo guards this one itself
    with pytest.raises(ValueError, match="unknown precision"):
        with torch.tpu.precision("fast"):
            pass


def test_cpu_tensors_through_the_tpu_backend_train_like_eager_cpu():
    """A graph on CPU tensors runs its ops as they are: PyTorch's decomposition of the CPU
    attention kernel (_scaled_dot_product_flash_attention_for_cpu) gave the attention's input
    bias gradients off by up to 7.6."""
    eager = _gpt()
    compiled = copy.deepcopy(eager)
    step = torch.compile(_lm_step, backend="tpu")
    ids, y = next(_batches("gpt", 1))
    _loss(eager(ids), y).backward()
    step(compiled, ids, y).backward()
    for (name, pe), pc in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-5, atol=1e-5, msg=name)


def _train_like_cpu(cpu, dev, batches, loss_of, compiled):
    """One step per batch (tensors on CPU): ``loss_of(cpu, *batch)`` eagerly on CPU and
    ``compiled(dev, *batch)`` on the tpu copy; losses and gradients must match. Returns, per
    batch, whether the tpu step captured a program; a step that captured none must compile none."""
    captures = []
    for batch in batches:
        for m in (cpu, dev):
            m.zero_grad()
        expected = loss_of(cpu, *batch)
        expected.backward()
        torch.tpu.synchronize()  # the previous step's compiles are counted there
        before = _counters()
        got = compiled(dev, *(t.to("tpu") for t in batch))
        got.backward()
        torch.tpu.synchronize()
        after = _counters()
        captured = after["captured_ops"] > before["captured_ops"]
        if not captured:  # a size in a bucket seen before: its programs, not one more
            assert after["compiles"] == before["compiles"], f"a new size {batch[0].shape} compiled a program"
        captures.append(captured)
        _close(got, expected, 1e-5)
        for (name, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=name)
    return captures


def test_dynamic_sizes_run_padded_to_buckets():
    """A dynamic batch compiles once per bucket (powers of two) and matches CPU at every size:
    the padded rows are masked out of the mean loss and of the weight gradients."""
    cpu = _mlp()
    dev = copy.deepcopy(cpu).to("tpu")

    def loss_of(model, x, y):
        return F.cross_entropy(model(x), y) + model(x).square().mean()

    batches = [(torch.randn(n, 8), torch.randint(0, 4, (n,))) for n in (9, 10, 12, 16, 11, 20)]
    captures = _train_like_cpu(cpu, dev, batches, loss_of, torch.compile(loss_of, backend="tpu", dynamic=True))
    # sizes 9..16 share the bucket 16 (captured once, at 9); 20 is bucket 32
    assert captures == [True, False, False, False, False, True]


def _sequence_batch(n, vocab=50):
    ids = torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(n))
    return ids, ids.roll(-1, 1)


def test_causal_decoder_sequence_lengths_run_padded_to_buckets():
    """A GPT-style decoder (causal mask from triu, Linear layers that merge batch and sequence)
    trains at sequence lengths 9..20 with one program per bucket, forward and backward, and
    matches CPU: the padded positions never reach a valid one."""
    cpu = _Decoder(seq=32)
    dev = copy.deepcopy(cpu).to("tpu")
    batches = [_sequence_batch(n) for n in (9, 10, 16, 11, 20)]
    captures = _train_like_cpu(cpu, dev, batches, _lm_step, torch.compile(_lm_step, backend="tpu"))
    # Dynamo compiles 9 static, then 10 with symbolic sizes (bucket 16); 20 is bucket 32
    assert captures == [True, True, False, False, True]
    assert not any("run unpadded" in r for r in _recompiles())


def test_a_kv_cache_append_runs_padded_without_a_program_per_length():
    """Attention over a cache that grows by cat([cache, new], dim=seq) (Hugging Face's dynamic
    cache): the new entries land after the cache's true end, not after its padding, and a new
    length in a seen bucket captures and compiles nothing."""
    g = torch.Generator().manual_seed(0)
    q, new_k = torch.randn(2, 1, 8, generator=g), torch.randn(2, 1, 8, generator=g)

    def step(cache, q, new_k):
        keys = torch.cat([cache, new_k], dim=1)
        weights = torch.softmax(q @ keys.transpose(1, 2) / 8 ** 0.5, dim=-1)
        return keys, weights @ keys

    compiled = torch.compile(step, backend="tpu")
    captured_at = []
    for n in (5, 9, 10, 12, 11, 13):
        cache = torch.randn(2, n, 8, generator=g)
        torch.tpu.synchronize()
        before = _counters()
        keys, out = compiled(cache.to("tpu"), q.to("tpu"), new_k.to("tpu"))
        torch.tpu.synchronize()
        after = _counters()
        if after["captured_ops"] > before["captured_ops"]:
            captured_at.append(n)
        else:
            assert after["compiles"] == before["compiles"], f"cache length {n} compiled a program"
        expected_keys, expected = step(cache, q, new_k)
        _close(keys, expected_keys)
        _close(out, expected)
    assert captured_at == [5, 9]  # 5 static, then every length of bucket 16 (9..13 + 1) symbolic
    assert not any("run unpadded" in r for r in _recompiles())


def _zoo_model_pair(name):
    """A model-zoo model (seeded) on CPU and its copy on tpu."""
    torch.manual_seed(0)
    cpu = MODELS[name].build()
    return cpu, copy.deepcopy(cpu).to("tpu")


def _lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def test_hugging_face_causal_lm_sequence_lengths_run_padded_to_buckets():
    """HF GPT-2 (its cache's cat, its loss's label shift by pad and slice) with Dynamo's automatic
    dynamic shapes: a new sequence length within a bucket captures nothing."""
    cpu, dev = _zoo_model_pair("gpt2")
    batches = [_sequence_batch(n, vocab=cpu.config.vocab_size)[:1] for n in (9, 12, 16, 20, 24)]
    captures = _train_like_cpu(cpu, dev, batches, _lm_loss, torch.compile(_lm_loss, backend="tpu"))
    assert captures == [True, True, False, True, False]  # 9 static; 12, 16 -> 16; 20, 24 -> 32


def test_hugging_face_attention_mask_runs_padded_to_buckets():
    """GPT-2 with a right-padded attention_mask: Hugging Face reads the mask at the key positions
    (mask[batch, arange(n)], aten.index.Tensor), which the padding keeps valid; no length runs
    unpadded, and losses and gradients match CPU."""
    cpu, dev = _zoo_model_pair("gpt2")

    def lm_loss(model, ids, mask):
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    def batch(n):
        ids = _sequence_batch(n, vocab=cpu.config.vocab_size)[0]
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0
        return ids, mask

    torchtpu.metrics.reset()
    batches = [batch(n) for n in (9, 12, 16, 20, 24)]
    captures = _train_like_cpu(cpu, dev, batches, lm_loss, torch.compile(lm_loss, backend="tpu"))
    assert captures == [True, True, False, True, False]
    assert not any("run unpadded" in r for r in _recompiles())


def test_hugging_face_mixtral_float32_compiles_and_trains_like_cpu():
    """transformers sends tpu tensors to torch._grouped_mm in every dtype; PyTorch's shape
    function (its fake kernel) accepted bfloat16 only, so Dynamo stopped on a float32 Mixtral."""
    cpu, dev = _zoo_model_pair("mixtral")
    torchtpu.metrics.reset()
    batches = [_sequence_batch(9, vocab=cpu.config.vocab_size)[:1]]
    assert _train_like_cpu(cpu, dev, batches, _lm_loss, torch.compile(_lm_loss, backend="tpu")) == [True]
    assert torchtpu.metrics.cpu_fallbacks() == {}


def test_top_k_routing_along_a_static_dimension_runs_padded():
    """topk and sort along a static dimension (a mixture of experts' routing over its experts)
    are row by row: a dynamic number of tokens runs padded."""

    @torch.compile(backend="tpu")
    def route(x):
        weights, experts = x.softmax(-1).topk(2, dim=-1)
        return weights * experts, x.sort(-1).values[:, 0]

    torchtpu.metrics.reset()
    for n in (9, 11, 13):
        x = torch.randn(n, 8)
        x_tpu = x.to("tpu")
        torch._dynamo.mark_dynamic(x_tpu, 0)
        weights, experts = x.softmax(-1).topk(2, dim=-1)
        for got, want in zip(route(x_tpu), (weights * experts, x.sort(-1).values[:, 0])):
            _close(got, want)
    assert not any("run unpadded" in r for r in _recompiles())


def test_dynamic_int_arguments_keep_their_values():
    """An int Dynamo made symbolic (an index) is not a size: it is never padded."""

    @torch.compile(backend="tpu")
    def f(x, k):
        return x.select(1, k) * 2 + x.sum(1)  # a column by an index that becomes symbolic

    for n, k in ((9, 3), (11, 5), (13, 12)):
        x = torch.randn(n, 16)
        x_tpu = x.to("tpu")
        torch._dynamo.mark_dynamic(x_tpu, 0)
        _close(f(x_tpu, k), x.select(1, k) * 2 + x.sum(1))
    assert not any("run unpadded" in r for r in _recompiles())


def test_fresh_tensors_shaped_like_padded_ones_run_padded():
    """new_ones / zeros_like of a padded tensor (an attention mask's defaults) are padded alike."""

    @torch.compile(backend="tpu", dynamic=True)
    def f(x):
        return (x.new_ones(x.shape) * 2 + torch.zeros_like(x) + x).softmax(0).sum(1)

    for n in (9, 12):
        x = torch.randn(n, 3)
        _close(f(x.to("tpu")), (x.new_ones(x.shape) * 2 + x).softmax(0).sum(1))
    assert not any("run unpadded" in r for r in _recompiles())


@pytest.mark.parametrize("backward_padded", [True, False], ids=["padded_backward", "exact_backward"])
def test_saved_activations_stay_padded_between_forward_and_backward(monkeypatch, backward_padded):
    """The forward keeps what it saves for the backward padded (no copy out and back per size);
    a backward that runs at exact sizes cuts those to exact sizes first."""
    from torchtpu.compile import buckets

    if not backward_padded:
        build = buckets.BucketedGraph.__init__

        def refuse_backwards(self, gm, name, *args):
            if "(backward," in name:
                raise buckets.NotBucketable("the test runs backwards at exact sizes")
            build(self, gm, name, *args)

        monkeypatch.setattr(buckets.BucketedGraph, "__init__", refuse_backwards)
    cpu = _Decoder(seq=32)
    dev = copy.deepcopy(cpu).to("tpu")
    batches = [_sequence_batch(n) for n in (9, 12)]
    _train_like_cpu(cpu, dev, batches, _lm_step, torch.compile(_lm_step, backend="tpu", dynamic=True))
    unpadded = [r for r in _recompiles() if "run unpadded" in r]
    assert not any("(forward," in r for r in unpadded)
    assert any("(backward," in r for r in unpadded) != backward_padded


def test_ops_pairing_sizes_dynamo_could_not_prove_equal_run_at_exact_sizes():
    """Scores and targets whose sizes are separate symbols may pad apart: such a graph runs
    unpadded (and right) rather than pairing a padded row with a valid one."""

    @torch.compile(backend="tpu", dynamic=True)
    def f(scores, targets):
        return F.cross_entropy(scores.reshape(-1, 5), targets.reshape(-1))

    for n in (9, 10):
        s, t = torch.randn(2, n, 5), torch.randint(0, 5, (n, 2))  # 2*n rows either way
        _close(f(s.to("tpu"), t.to("tpu")), F.cross_entropy(s.reshape(-1, 5), t.reshape(-1)))
    assert any("run unpadded" in r and "nll_loss" in r for r in _recompiles())


def test_dynamic_sizes_an_op_that_mixes_rows_runs_at_exact_sizes():
    bn = torch.nn.BatchNorm1d(4).to("tpu").eval()

    @torch.compile(backend="tpu", dynamic=True)
    def f(x):
        return torch.sort(bn(x), dim=0).values  # sorting along the dynamic batch

    for n in (3, 5):
        x = torch.randn(n, 4)
        _close(f(x.to("tpu")), torch.sort(bn.cpu()(x), dim=0).values)
        bn.to("tpu")
    assert any("run unpadded" in r and "sort" in r for r in _recompiles())


def test_bucket_sizes_are_configurable():
    torchtpu.compile_options(buckets=[12, 24])
    try:
        lin = torch.nn.Linear(8, 2).to("tpu")

        @torch.compile(backend="tpu", dynamic=True)
        def f(x):
            return lin(x).softmax(0).sum(1)  # a softmax over the dynamic dimension

        captures = []
        for n in (5, 12, 13, 30):
            x = torch.randn(n, 8)
            before = _counters()["captured_ops"]
            _close(f(x.to("tpu")), lin.cpu()(x).softmax(0).sum(1))
            lin.to("tpu")
            captures.append(_counters()["captured_ops"] > before)
        assert captures == [True, False, True, True]  # 5, 12 -> 12; 13 -> 24; 30 runs at its size
    finally:
        torchtpu.compile_options(buckets=None)


def test_compiled_steps_keep_device_memory_flat():
    """Flat once the recent-scalar cache is full (aten/scalar_cache.cpp: 128 device copies of
    Scalars, 8 bytes each; AdamW's bias corrections are two new values per step)."""
    import gc

    model = _mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(_step, backend="tpu")
    x, y = torch.randn(6, 8, device="tpu"), torch.randint(0, 4, (6,), device="tpu")
    used = {}
    for i in range(90):
        step(model, opt, x, y).item()
        if i == 3 or i >= 70:  # a full collection costs seconds late in a long test session
            gc.collect()
            used[i] = torch.tpu.memory_allocated()
    assert used[89] - used[3] <= 128 * 8, used
    assert [used[i] for i in range(70, 90)] == [used[70]] * 20, used


def test_item_inside_a_graph_runs_between_programs(monkeypatch):
    """With Dynamo's capture_scalar_outputs, .item() stays in the graph: it runs eagerly between
    the compiled parts instead of reading captured data on the host."""
    monkeypatch.setattr(torch._dynamo.config, "capture_scalar_outputs", True)

    @torch.compile(backend="tpu")
    def f(x):
        return x * x.sum().item()

    x = torch.randn(5)
    for _ in range(2):
        _close(f(x.to("tpu")), x * x.sum().item())


def test_written_back_inputs_donate_their_buffers_unless_still_read():
    """An input written in place (an optimizer's parameters and states) reuses its old buffer for
    the new contents; a buffer that a pending eager op still reads is kept (copied) instead."""
    model = _mlp().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = torch.compile(_step, backend="tpu")
    x, y = torch.randn(6, 8, device="tpu"), torch.randint(0, 4, (6,), device="tpu")
    for _ in range(3):
        step(model, opt, x, y)
    before = _counters()["donated_buffers"]
    step(model, opt, x, y)
    assert _counters()["donated_buffers"] >= before + 8  # 4 parameters and 4 momentum buffers

    @torch.compile(backend="tpu")
    def bump(buf, delta):
        buf.add_(delta)

    buf, delta = torch.zeros(5, device="tpu"), torch.ones(5, device="tpu")
    for _ in range(2):
        bump(buf, delta)
    with torchtpu.eager_mode("lazy"):
        pending = buf * 1  # reads buf's current buffer; not run yet
        before = _counters()["donated_buffers"]
        bump(buf, delta)
        assert _counters()["donated_buffers"] == before  # kept for the pending read
        torch.testing.assert_close(pending.cpu(), torch.full((5,), 2.0))
    torch.testing.assert_close(buf.cpu(), torch.full((5,), 3.0))


def _aot_compiles():
    return torch._dynamo.utils.counters["aot_autograd"]["total"]


def test_graphs_without_autograd_skip_aot_autograd():
    """Optimizer math (torch.optim's functional AdamW: step counts and bias corrections on the
    CPU) and an inference forward are captured from Dynamo's graph as they are, with no AOT
    autograd pass, and match eager PyTorch on the CPU. (An optimizer's own step() in compiled
    code is not traced: test_optimizer_steps_in_compiled_code_run_as_one_program.)"""
    from torch.optim.adamw import adamw

    cpu = _mlp()
    dev = copy.deepcopy(cpu).to("tpu")
    opt = torch.optim.AdamW(cpu.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
    params = list(dev.parameters())
    exp_avgs, exp_avg_sqs = ([torch.zeros_like(p) for p in params] for _ in range(2))
    steps = [torch.tensor(0.0) for _ in params]

    @torch.compile(backend="tpu")
    def adamw_step(grads):
        with torch.no_grad():
            adamw(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, amsgrad=False, beta1=0.9,
                  beta2=0.999, lr=1e-2, weight_decay=0.1, eps=1e-8, maximize=False)

    before = _aot_compiles()
    for x, y in _batches("mlp", 3):
        opt.zero_grad()
        _loss(cpu(x), y).backward()
        opt.step()
        grads = torch.autograd.grad(_loss(dev(x.to("tpu")), y.to("tpu")), params)
        adamw_step(list(grads))
    assert _aot_compiles() == before
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        _close(pd, pc, 1e-5)
    for p, sd in zip(cpu.parameters(), exp_avg_sqs):
        _close(sd, opt.state[p]["exp_avg_sq"], 1e-6)
    assert all(t.device.type == "cpu" and t.item() == 3 for t in steps)

    gpt = _gpt()
    forward = torch.compile(copy.deepcopy(gpt).to("tpu"), backend="tpu")
    with torch.no_grad():
        for x, _ in _batches("gpt", 2):
            _close(forward(x.to("tpu")), gpt(x), 1e-4)
    assert _aot_compiles() == before


def test_graph_without_autograd_falls_back_when_an_op_cannot_be_captured():
    """An op without a lowering in such a graph sends it through AOT autograd (the op then runs
    eagerly); the CPU work before it runs once per call, not again in the fallback."""
    @torch.compile(backend="tpu")
    def f(a, count):
        count.add_(1)
        return torch.ops.torchtpu_test.cpu_only(a * count)  # no tpu kernel (conftest.py): runs on the CPU

    a, count, count_dev = torch.randn(3, 3), torch.zeros(()), torch.zeros(())
    before = _aot_compiles()
    for _ in range(3):
        count.add_(1)
        expected = torch.ops.torchtpu_test.cpu_only(a * count)
        _close(f(a.to("tpu"), count_dev), expected, 1e-5)
    assert count_dev.item() == count.item() == 3
    assert _aot_compiles() == before + 1


def test_graph_without_autograd_keeps_cpu_writes_ordered_with_device_reads():
    """A CPU value written after a tpu op read it: the graph cannot run its CPU work first, so it
    goes through AOT autograd, with eager results."""
    @torch.compile(backend="tpu")
    def f(x, c):
        y = x * c
        c.add_(1)
        return y * c

    x, c, c_dev = torch.randn(4), torch.ones(()), torch.ones(())
    for _ in range(3):
        y = x * c
        c.add_(1)
        _close(f(x.to("tpu"), c_dev), y * c)
    assert c_dev.item() == c.item()


def _masked_intersection(boxes, others):
    """torchvision's box-loss pattern: zeros_like, then a write through a boolean mask."""
    x1, _, x2, _ = boxes.unbind(dim=-1)
    x1g, _, x2g, _ = others.unbind(dim=-1)
    low, high = torch.max(x1, x1g), torch.min(x2, x2g)
    inter = torch.zeros_like(x1)
    mask = high > low
    inter[mask] = high[mask] - low[mask]
    return inter, torch.empty(0, 4, device=boxes.device), x1 + x2


def test_outputs_the_graph_never_writes_come_back_empty():
    """An output whose storage the graph never writes (zeros_like of no boxes: FCOS's loss with no
    positive samples) failed the capture ("an output storage was never written")."""
    compiled = torch.compile(_masked_intersection, backend="tpu")
    for n in (3, 0, 0, 5):  # the empty case captured, then run from the compiled graph
        boxes, others = torch.rand(n, 4), torch.rand(n, 4)
        got = compiled(boxes.to("tpu"), others.to("tpu"))
        for g, e in zip(got, _masked_intersection(boxes, others)):
            assert g.shape == e.shape and torch.equal(g.cpu(), e)


def test_views_at_other_offsets_of_a_storage_read_their_own_elements():
    """Rows of one tensor have the same sizes and strides, so Dynamo runs them through one graph;
    the program read every row at the first row's offset (Faster R-CNN's proposals, image by
    image, were the first image's)."""
    compiled = torch.compile(lambda r: r * 2 + 1, backend="tpu")
    x = torch.arange(24.0).reshape(4, 6)
    t = x.to("tpu")
    for i in range(4):
        assert torch.equal(compiled(t[i]).cpu(), x[i] * 2 + 1), i
    for j in (1, 4):  # columns: strided views at offsets
        assert torch.equal(compiled(t[:, j]).cpu(), x[:, j] * 2 + 1), j


def test_sparse_embedding_gradients_under_compile_as_cpu(no_fallbacks):
    """EmbeddingBag(sparse=True) compiled: the backward graph's sparse gradient was made part of a
    program ("Cannot access storage of SparseTensorImpl"); it is made eagerly between programs."""
    torch.manual_seed(0)
    cpu = torch.nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
    dev = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(dev, backend="tpu")
    weights = torch.arange(6.0).reshape(2, 3)
    for ids in ([1, 2, 4, 4], [0, 9, 9, 3]):
        ids, offsets = torch.tensor(ids), torch.tensor([0, 2])
        (compiled(ids.to("tpu"), offsets.to("tpu")) * weights.to("tpu")).sum().backward()
        (cpu(ids, offsets) * weights).sum().backward()
    assert dev.weight.grad.layout == torch.sparse_coo
    assert torch.equal(dev.weight.grad.to_dense().cpu(), cpu.weight.grad.to_dense())

