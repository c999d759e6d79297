"""Bounded dynamism in eager mode (docs/design.md, "Shapes that change"): ops with a padding rule
whose sizes vary from call to call run padded to buckets, one program per bucket, their results
stored with a bucket's capacity. Every result is compared with CPU PyTorch."""

import copy
import inspect
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu

pytestmark = pytest.mark.skipif(os.environ.get("TORCHTPU_BUCKETS") in ("off", "0"),
                                reason="padding turned off for this run")


def _counters():
    return torchtpu.metrics.counters()


def _decode(device, steps, start=5, heads=2, dim=8, grad=False, seed=0):
    """A KV cache grown by cat along dim 2 and attended to each step, as Hugging Face's
    DynamicCache does: returns each step's attention output and the final cache."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(1, heads, start, dim, generator=g).to(device)
    v = torch.randn(1, heads, start, dim, generator=g).to(device)
    outs = []
    for _ in range(steps):
        q = torch.randn(1, heads, 1, dim, generator=g).to(device)
        new_k = torch.randn(1, heads, 1, dim, generator=g).to(device)
        new_v = torch.randn(1, heads, 1, dim, generator=g).to(device)
        k = torch.cat([k, new_k], dim=2)
        v = torch.cat([v, new_v], dim=2)
        outs.append(F.scaled_dot_product_attention(q, k, v))
    return outs, k, v


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_growing_kv_cache_matches_cpu_and_stops_compiling_inside_a_bucket(mode):
    with torchtpu.modes.eager_mode(mode):
        cpu_outs, cpu_k, _ = _decode("cpu", 40)
        before = _counters()
        tpu_outs, tpu_k, _ = _decode("tpu", 40)
        assert tpu_k.shape == cpu_k.shape == (1, 2, 45, 8)
        for step, (c, t) in enumerate(zip(cpu_outs, tpu_outs)):
            torch.testing.assert_close(t.cpu(), c, msg=lambda m: f"step {step}: {m}")
        torch.testing.assert_close(tpu_k.cpu(), cpu_k)
        assert _counters()["padded_ops"] > before["padded_ops"]
        # Lengths 34..45 are in the bucket of 64: a second run there compiles nothing new.
        _decode("tpu", 40, seed=1)
        compiles = _counters()["compiles"]
        outs, _, _ = _decode("tpu", 40, seed=2)
        torch.testing.assert_close(outs[-1].cpu(), _decode("cpu", 40, seed=2)[0][-1])
    assert _counters()["compiles"] == compiles


def _in_a_fresh_process(function, cache_dir, *args):
    """The list of integers this file's `function` returns for `args`, run in a new process with
    an empty compile cache (no sizes marked as varying by earlier tests)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            f"from test_padded_eager import {function}\n"
            f"print({function}(*{args!r}))\n")
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], capture_output=True, text=True,
                         env={**os.environ, "TORCHTPU_CACHE_DIR": str(cache_dir)}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [int(n) for n in out.stdout.strip().splitlines()[-1].strip("[]").split(",")]


def growing_cache_compiles():
    """The lengths at which growing a cache and attending to it compiled, from 8 to 70 (each
    step's result compared with CPU's)."""
    g = torch.Generator().manual_seed(0)
    k_cpu = torch.randn(1, 4, 7, 64, generator=g)
    k = k_cpu.to("tpu")
    compiled_at = []
    for length in range(8, 71):
        new, q = torch.randn(1, 4, 1, 64, generator=g), torch.randn(1, 4, 1, 64, generator=g)
        before = _counters()["compiles"]
        k = torch.cat([k, new.to("tpu")], dim=2)
        out = F.scaled_dot_product_attention(q.to("tpu"), k, k).cpu()
        if _counters()["compiles"] > before:
            compiled_at.append(length)
        k_cpu = torch.cat([k_cpu, new], dim=2)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k_cpu, k_cpu), msg=f"length {length}")
    torch.testing.assert_close(k.cpu(), k_cpu)
    return compiled_at


def test_a_growing_cache_compiles_only_where_it_enters_a_bucket(tmp_path):
    # Four heads of 64: the cache's H·L equals its head size at L = 16, and 48 is a multiple of
    # 16; neither may make a later length a size of its own. Each bucket's first step reads the
    # last box and writes the new one, its second reads and writes the new one: two steps compile.
    # In a process of its own with an empty cache: the sizes earlier tests saw vary are marked
    # process-wide, and one of them (12 once, in a full suite's worker) can make a length a size
    # of its own.
    compiled_at = _in_a_fresh_process("growing_cache_compiles", tmp_path)
    entering = {first + step for first in (17, 33, 65) for step in (0, 1)}
    assert set(compiled_at) - set(range(8, 11)) <= entering, compiled_at
    assert {8, 17, 33, 65} <= set(compiled_at)  # it did compile where a bucket starts


def caches_from_one_projection():
    """How many programs the key cache's cat and the value cache's cat (a line each) compiled
    from length 8 to 40, after checking both caches against CPU: key and value are parts of one
    projection's storage, at other offsets."""
    def grow(device):
        g = torch.Generator().manual_seed(0)
        k = torch.randn(1, 2, 7, 16, generator=g).to(device)
        v = torch.randn(1, 2, 7, 16, generator=g).to(device)
        for _ in range(33):
            qkv = torch.randn(1, 2, 1, 48, generator=g).to(device)
            k = torch.cat([k, qkv[..., 16:32]], dim=2)
            v = torch.cat([v, qkv[..., 32:]], dim=2)
        return k, v
    for tpu, cpu in zip(grow("tpu"), grow("cpu")):
        torch.testing.assert_close(tpu.cpu(), cpu)
    lines, first = inspect.getsourcelines(grow)
    compiled = [what for what, *_ in torchtpu.cache.stats()["compiles"]]
    counts = []
    for cat in ("k = torch.cat", "v = torch.cat"):
        line = first + next(n for n, text in enumerate(lines) if cat in text)
        counts.append(sum(what.endswith(f"{os.path.basename(__file__)}:{line}") for what in compiled))
    return counts


def test_two_caches_grown_from_one_projection_share_their_programs(tmp_path):
    # The key's and value's parts of the projection sit at other offsets of one storage: beside
    # the padded cache, each reads its offset at run time, so the value's cat runs the key's
    # programs. Only its first call, at exact sizes (a line's first size is not padded), compiles.
    key, value = _in_a_fresh_process("caches_from_one_projection", tmp_path)
    assert key >= 4 and value == 1, (key, value)


def test_the_peak_of_padding_is_kept_until_a_reset():
    torchtpu.metrics.reset()
    held_before = torchtpu.metrics.counters()["padded_bytes"]
    outs, k, v = _decode("tpu", 6)
    counters = torchtpu.metrics.counters()
    assert counters["peak_padded_bytes"] >= counters["padded_bytes"] > held_before
    del outs, k, v
    counters = torchtpu.metrics.counters()
    assert counters["padded_bytes"] <= held_before < counters["peak_padded_bytes"]
    torchtpu.metrics.reset()  # the peak restarts at what is held now
    assert torchtpu.metrics.counters()["peak_padded_bytes"] == torchtpu.metrics.counters()["padded_bytes"]


def test_a_padded_tensor_looks_exact_everywhere():
    outs, k, v = _decode("tpu", 6)
    _, cpu_k, _ = _decode("cpu", 6)
    assert k.shape == (1, 2, 11, 8) and k.stride() == cpu_k.stride()
    assert torchtpu.metrics.counters()["padded_bytes"] > 0
    assert repr(k[0, 0, -1]) == repr(cpu_k[0, 0, -1].to("tpu"))
    # Views, in-place writes and ops with no padding rule read it at its exact size.
    torch.testing.assert_close(k[:, :, 3:].sum(dim=2).cpu(), cpu_k[:, :, 3:].sum(dim=2))
    k2, c2 = k.clone(), cpu_k.clone()
    k2[:, :, -2:] += 1
    c2[:, :, -2:] += 1
    torch.testing.assert_close(k2.cpu(), c2)
    torch.testing.assert_close(torch.cat([k, k], dim=1).cpu(), torch.cat([cpu_k, cpu_k], dim=1))
    # A compiled graph reads it whole, at its exact bytes.
    compiled = torch.compile(lambda x: x * 2, backend="tpu")
    torch.testing.assert_close(compiled(k).cpu(), cpu_k * 2)


def test_gradients_flow_through_padded_attention():
    def run(device):
        g = torch.Generator().manual_seed(3)
        cache = torch.randn(1, 2, 4, 8, generator=g).to(device)
        q = torch.randn(1, 2, 3, 8, generator=g).to(device).requires_grad_()
        total = 0
        for _ in range(12):
            cache = torch.cat([cache, torch.randn(1, 2, 1, 8, generator=g).to(device)], dim=2)
            total = total + F.scaled_dot_product_attention(q, cache, cache).sum()
        total.backward()
        return total.detach(), q.grad

    (cpu_total, cpu_grad), (tpu_total, tpu_grad) = run("cpu"), run("tpu")
    torch.testing.assert_close(tpu_total.cpu(), cpu_total)
    torch.testing.assert_close(tpu_grad.cpu(), cpu_grad)


def _block(ids, emb, w):
    """A small decoder step on token ids: every op family that has a padding rule."""
    x = F.layer_norm(F.embedding(ids, emb), (emb.shape[1],))
    h = torch.tanh(x @ w) * 0.5 + x
    scores = h @ h.transpose(-1, -2)
    # Masks from the data, not torch.ones_like: a fill reads nothing padded, so it runs at its
    # exact size (docs/design.md, "Shapes that change").
    causal = (scores == scores).triu(1)
    p = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
    positions = torch.cumsum((ids >= 0).long(), dim=1) - 1
    return p @ h, positions, (ids > 25).any(dim=1), (ids >= 0).all()


@pytest.mark.parametrize("batch", [1, 2])
def test_a_decoder_block_at_varying_lengths_matches_cpu(batch):
    g = torch.Generator().manual_seed(0)
    emb, w = torch.randn(50, 16, generator=g), torch.randn(16, 16, generator=g) / 4
    emb_tpu, w_tpu = emb.to("tpu"), w.to("tpu")
    compiled = {}
    for length in [9, 10, 12, 13, 11, 16, 14, 20, 27]:
        ids = torch.randint(0, 50, (batch, length), generator=g)
        before = _counters()["compiles"]
        got = _block(ids.to("tpu"), emb_tpu, w_tpu)
        for k, (t, c) in enumerate(zip(got, _block(ids, emb, w))):
            assert t.shape == c.shape
            torch.testing.assert_close(t.cpu(), c, msg=lambda m: f"length {length}, output {k}: {m}")
        compiled[length] = _counters()["compiles"] - before
    assert compiled[11] == compiled[14] == compiled[27] == 0, compiled


class _TinyGPT(torch.nn.Module):
    """Token and position embeddings, one pre-norm attention block, an LM head."""

    def __init__(self, vocab=40, d=16, heads=2, seq=32):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        b, t = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x)


def varying_length_training_compiles(mode, batch=3, lengths=(20, 23, 17, 32, 29, 31, 18, 25)):
    """The programs compiled at each step of training a _TinyGPT at lengths of one bucket (17..32,
    its own size included), after checking each step's loss and the final parameters against CPU's."""
    torch.manual_seed(0)
    cpu_model = _TinyGPT()
    tpu_model = _TinyGPT().to("tpu")
    tpu_model.load_state_dict(cpu_model.state_dict())
    models = {"cpu": cpu_model, "tpu": tpu_model}
    optimizers = {d: torch.optim.SGD(m.parameters(), lr=0.5) for d, m in models.items()}
    g = torch.Generator().manual_seed(1)
    compiled = []
    with torchtpu.eager_mode(mode):
        for length in lengths:
            ids = torch.randint(0, 40, (batch, length), generator=g)
            targets = torch.randint(0, 40, (batch, length), generator=g)
            torchtpu.metrics.reset()
            losses = {}
            for device, model in models.items():
                optimizers[device].zero_grad()
                loss = F.cross_entropy(model(ids.to(device)).flatten(0, 1), targets.to(device).flatten())
                loss.backward()
                optimizers[device].step()
                losses[device] = loss.item()
            torchtpu.cache.wait_for_background_compiles()
            compiled.append(torchtpu.metrics.counters()["compiles"])
            assert losses["tpu"] == pytest.approx(losses["cpu"], rel=1e-5), length
    assert torchtpu.metrics.cpu_fallbacks() == {}
    for name, p in tpu_model.named_parameters():
        torch.testing.assert_close(p.detach().cpu(), cpu_model.get_parameter(name).detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")
    return compiled


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_at_varying_lengths_matches_cpu_and_stops_compiling(mode, tmp_path):
    # Nothing compiles after the first step: the positions' `arange` is as long as the padded ids
    # and pads from its first call (before, it ran exact once and every op reading it compiled
    # twice). Fused mode's windows, compiled in the background, are waited for after each step.
    # (Where B·L equals a static size, d_ff = 64 at B = 2 and L = 32, that length still compiles
    # the weight gradients' programs once: marks are sizes, docs/design.md.) In a fresh process:
    # the model's lines, shared with tests here at other batch sizes, would make the batch vary.
    compiled = _in_a_fresh_process("varying_length_training_compiles", tmp_path, mode)
    assert compiled[0] > 0 and compiled[1:] == [0] * 7, compiled


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_model_size_equal_to_a_varying_one_compiles_nothing(mode, tmp_path):
    # At batch 2, B·L equals the qkv projection's width 3·d = 48 at L = 24 and d_ff = 64 at L = 32.
    # Marks are sizes, so at those lengths the qkv weight looked varying (its output [48, 48] was
    # stored in a box of [64, 64]) and so did the columns of [B·L, 3·d] and [B·L, d_ff], and each
    # compiled its own programs. A matmul's unmarked weight now keeps its sizes, and of equal sizes
    # only the dimension with the stride its storage varied along pads.
    compiled = _in_a_fresh_process("varying_length_training_compiles", tmp_path, mode, 2,
                                   [20, 23, 17, 24, 29, 32, 18, 25])
    assert compiled[0] > 0 and compiled[1:] == [0] * 7, compiled


def test_a_compiled_graph_is_captured_at_exact_sizes_after_eager_padding():
    """torch.compile captures through the eager kernels; after eager steps at varying lengths taught
    them where sizes change, the capture must still run at the graph's sizes (padding there turned
    a training step's slices and transposes into gathers, 5x slower)."""
    torch.manual_seed(0)
    cpu_model = _TinyGPT()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    g = torch.Generator().manual_seed(1)

    def loss_of(model, ids):
        return F.cross_entropy(model(ids).flatten(0, 1), ids.roll(-1, 1).flatten())

    for length in [20, 23, 17]:  # eager: these lines' sizes vary, so they run padded
        loss_of(tpu_model, torch.randint(0, 40, (3, length), generator=g).to("tpu")).backward()
    tpu_model.zero_grad()
    ids = torch.randint(0, 40, (3, 29), generator=g)
    before = _counters()["padded_ops"]
    loss = torch.compile(loss_of, backend="tpu", dynamic=False)(tpu_model, ids.to("tpu"))
    loss.backward()
    assert _counters()["padded_ops"] == before
    expected = loss_of(cpu_model, ids)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    for name, p in tpu_model.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), cpu_model.get_parameter(name).grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")


def test_indexing_a_padded_tensor_wraps_and_checks_at_its_exact_size():
    """x[i] of a tensor stored in a box (length 5 in 16): a negative index counts from the exact end,
    and an index past it is out of range, though the box has room there."""
    x = torchtpu._C._to_tpu_padded(torch.arange(10.).reshape(5, 2), [5])
    before = _counters()["padded_ops"]
    got = x[torch.tensor([-1, 0, 4], device="tpu")]
    torch.testing.assert_close(got.cpu(), torch.arange(10.).reshape(5, 2)[[-1, 0, 4]])
    assert _counters()["padded_ops"] > before
    with pytest.raises(IndexError, match="out of range"):
        x[torch.tensor([5], device="tpu")].cpu()
    with pytest.raises(IndexError, match="out of range"):
        x[torch.tensor([-6], device="tpu")].cpu()


def _zero_row(x, i):
    x[i].zero_()  # one line, so its offset varies between calls


def test_a_whole_write_at_a_line_whose_offset_varies_lands_in_a_padded_storage():
    """A line that wrote rows at several offsets (run-time offsets since) then writes the only row of
    a tensor stored in a box: the write covers the whole storage. It failed to build its program
    (a sparse softmax's index clone hit it)."""
    rows = torch.ones(3, 4, device="tpu")
    _zero_row(rows, 0)
    _zero_row(rows, 1)
    x = torchtpu._C._to_tpu_padded(torch.ones(1, 20), [20]).add(1)
    _zero_row(x, 0)
    torch.testing.assert_close(x.cpu(), torch.zeros(1, 20))
    torch.testing.assert_close(rows.cpu(), torch.tensor([[0.] * 4, [0.] * 4, [1.] * 4]))


def test_ops_run_at_exact_sizes_on_padded_tensors_are_counted_by_name():
    x = torch.ones(2, 3, device="tpu")
    for _ in range(3):
        x = torch.cat([x, torch.ones(2, 1, device="tpu")], dim=1)  # a line whose length changes: padded
    torchtpu.metrics.reset()
    got = torch.linalg.vector_norm(x, dim=1)  # no padding rule
    torch.testing.assert_close(got.cpu(), torch.full((2,), 6.0).sqrt())
    assert torchtpu.metrics.counters()["padded_bytes"] > 0
    assert torchtpu.metrics.unpadded_ops().get("aten::linalg_vector_norm", 0) >= 1, torchtpu.metrics.unpadded_ops()


def _padded_ops_in_subprocess(env):
    code = ("import torch, torchtpu\n"
            "x = torch.zeros(1, 3, device='tpu')\n"
            "for _ in range(12): x = torch.cat([x, torch.ones(1, 3, device='tpu')])\n"
            "assert x.cpu().sum().item() == 36\n"
            "print(torchtpu.metrics.counters()['padded_ops'])\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_buckets_can_be_turned_off_or_listed():
    assert _padded_ops_in_subprocess({"TORCHTPU_BUCKETS": "off"}) == 0
    assert _padded_ops_in_subprocess({"TORCHTPU_BUCKETS": "16,32"}) > 0
    out = subprocess.run([sys.executable, "-c", "import torch, torchtpu; torch.cat([torch.ones(2, device='tpu')] * 2)"],
                         env={**os.environ, "TORCHTPU_BUCKETS": "big"}, capture_output=True, text=True, timeout=300)
    assert "TORCHTPU_BUCKETS=big" in out.stderr


def test_padding_can_be_turned_off_for_a_block_of_one_thread():
    with torchtpu.padding(False):
        before = _counters()["padded_ops"]
        outs, k, _ = _decode("tpu", 12, seed=3)
        assert _counters()["padded_ops"] == before  # every op at its exact sizes
        torch.testing.assert_close(outs[-1].cpu(), _decode("cpu", 12, seed=3)[0][-1])

        def other_thread():
            other.append(_counters()["padded_ops"])
            _decode("tpu", 12, seed=4)
            other.append(_counters()["padded_ops"])
        other = []
        import threading
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert other[1] > other[0]  # the setting is the calling thread's
    before = _counters()["padded_ops"]
    _decode("tpu", 12, seed=5)
    assert _counters()["padded_ops"] > before  # back on after the block


def backward_zeros_compiles():
    """The compiles of each step of a pooler-like model's forward and backward (on tpu) at lengths
    that vary inside one bucket, each step's gradients compared with CPU's."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Embedding(50, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 2))
    dev = copy.deepcopy(cpu).to("tpu")
    compiles = []
    for length in [20, 23, 27, 30, 25, 29, 18, 31]:
        ids = torch.randint(0, 50, (4, length))
        grads = []
        for model, device in ((cpu, "cpu"), (dev, "tpu")):
            model.zero_grad()
            before = _counters()["compiles"]
            hidden = model[1](model[0](ids.to(device)))
            model[2](hidden[:, 0]).square().sum().backward()
            grads.append([p.grad.cpu() for p in model.parameters()])
            if device == "tpu":
                compiles.append(_counters()["compiles"] - before)
        for expected, got in zip(*grads):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    return compiles


def test_zeros_a_backward_scatters_into_stay_padded(tmp_path):
    """select's backward scatters the gradient into zeros of its input's sizes, made on the autograd
    engine's thread (a pooler's `hidden[:, 0]`). Where the length varies those zeros are stored
    padded, so the layer norm's backward that reads them compiles nothing for a new length in a
    seen bucket; gradients equal CPU's. In a process of its own with an empty cache, as the growing
    cache's test above: sizes that earlier tests of a full suite's worker saw vary are marked
    process-wide and made length 25 compile 3 programs there once."""
    compiles = _in_a_fresh_process("backward_zeros_compiles", tmp_path)
    assert compiles[0] > 0 and compiles[2:] == [0] * 6, compiles


def pointwise_programs_with_a_gather(dump_dir):
    """Element-wise ops on activations of varying length [4, L, 24], with a bias, a per-row scale
    and in place, each result compared with CPU's: returns how many of the dumped programs of
    gelu, add_ and mul gather."""
    os.environ["TORCHTPU_DUMP_PROGRAMS"] = dump_dir
    g = torch.Generator().manual_seed(0)
    bias = torch.randn(24, generator=g)
    for length in (19, 23, 30):
        ids = torch.randint(0, 50, (4, length), generator=g)
        table = torch.randn(50, 24, generator=g)
        scale = torch.randn(4, 1, 1, generator=g)
        x_cpu = F.embedding(ids, table)
        x = F.embedding(ids.to("tpu"), table.to("tpu"))  # padded: the ids' length varies
        y_cpu, y = F.gelu(x_cpu + bias), F.gelu(x + bias.to("tpu"))
        y_cpu.add_(x_cpu)
        y.add_(x)
        torch.testing.assert_close(y.cpu(), y_cpu, msg=f"length {length}")
        # A scale per batch row broadcasts along a dimension before the varying one: read as a box.
        torch.testing.assert_close((y * scale.to("tpu")).cpu(), y_cpu * scale, msg=f"length {length}")
    names = {"aten::gelu", "aten::add_.Tensor", "aten::mul.Tensor"}
    programs = [open(os.path.join(dump_dir, f)).read() for f in os.listdir(dump_dir)]
    mine = [p for p in programs if p.split(" at ")[0].split("\n")[0][3:] in names]
    assert len(mine) >= 3, [p.splitlines()[0] for p in programs]
    return [sum("stablehlo.gather" in p for p in mine if "gelu" in p.splitlines()[0]),
            sum("stablehlo.gather" in p for p in mine if "add_" in p.splitlines()[0]),
            sum("stablehlo.gather" in p for p in mine if "mul" in p.splitlines()[0])]


def test_pointwise_ops_read_padded_operands_as_stored(tmp_path):
    """A pointwise op whose padded operands share one layout computes on their buffers as they are
    stored: no gather into the box, no write per row; an operand broadcast along a dimension before
    the varying one (a scale per batch row) still needs the box."""
    gelu, add_, mul = _in_a_fresh_process("pointwise_programs_with_a_gather", tmp_path / "cache", str(tmp_path / "dump"))
    assert (gelu, add_) == (0, 0)
    assert mul > 0


def rowwise_programs_with_a_gather(dump_dir):
    """Ops over the rows of activations of varying length [4, L, 24] (a matmul, a linear layer,
    layer norm, softmax and their backward), and a matmul contracting the rows, each result compared
    with CPU's: returns how many dumped programs of the row-wise ops gather, and how many of mm's
    programs do and do not."""
    os.environ["TORCHTPU_DUMP_PROGRAMS"] = dump_dir
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    w, w2, b = torch.randn(24, 16, generator=g), torch.randn(8, 24, generator=g), torch.randn(8, generator=g)
    scale, shift = torch.randn(24, generator=g), torch.randn(24, generator=g)

    def ops(x, w, w2, b, scale, shift):
        y = torch.log_softmax(x, -1)
        flat = x.reshape(-1, 24)
        return [x @ w, F.linear(x, w2, b), *aten.native_layer_norm(x, [24], scale, shift, 1e-5), torch.softmax(x, -1),
                y, aten._log_softmax_backward_data(x, y, -1, torch.float32),
                aten._softmax_backward_data(x, y.exp(), -1, torch.float32), flat.t() @ flat]

    for length in (19, 23, 30):
        ids = torch.randint(0, 50, (4, length), generator=g)
        table = torch.randn(50, 24, generator=g)
        x = F.embedding(ids.to("tpu"), table.to("tpu"))  # padded: the ids' length varies
        expected = ops(F.embedding(ids, table), w, w2, b, scale, shift)
        got = ops(x, *(t.to("tpu") for t in (w, w2, b, scale, shift)))
        for i, (e, t) in enumerate(zip(expected, got)):
            torch.testing.assert_close(t.cpu(), e, msg=f"length {length}, result {i}")
    rowwise = {"aten::addmm", "aten::native_layer_norm", "aten::_softmax", "aten::_log_softmax",
               "aten::_log_softmax_backward_data", "aten::_softmax_backward_data"}
    programs = [open(os.path.join(dump_dir, f)).read() for f in os.listdir(dump_dir)]
    named = [(p.split(" at ")[0].split("\n")[0][3:], p) for p in programs]
    assert {name for name, _ in named} >= rowwise | {"aten::mm"}, [name for name, _ in named]
    mm = [p for name, p in named if name == "aten::mm"]
    return [sum("stablehlo.gather" in p for name, p in named if name in rowwise),
            sum("stablehlo.gather" not in p for p in mm), sum("stablehlo.gather" in p for p in mm)]


def test_rowwise_ops_read_padded_operands_as_stored(tmp_path):
    """An op over rows (a matmul's, layer norm's, softmax's) whose padded operands share one layout
    in their rows computes on their buffers as stored, like a pointwise op; a matmul contracting
    the padded rows still reads boxes."""
    rowwise, mm_as_stored, mm_boxed = _in_a_fresh_process("rowwise_programs_with_a_gather", tmp_path / "cache",
                                                          str(tmp_path / "dump"))
    assert rowwise == 0
    assert mm_as_stored >= 1 and mm_boxed >= 1


def sums_over_padded_rows(dump_dir, mode):
    """Sums over the rows of padded results of several kinds of writes (element-wise in storage
    order, in place, a row-wise matmul, layer norm, softmax, a copy) and of a view short of its
    storage's end, each compared with CPU's, in eager mode `mode`: returns how many of the dumped
    programs of one sum mask the rows they read and how many do not."""
    os.environ["TORCHTPU_DUMP_PROGRAMS"] = dump_dir
    torchtpu.set_eager_mode(mode)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 24, generator=g)

    def results(x, w):
        y = F.gelu(x)
        y.add_(x)
        return [y, (x @ w).relu(), F.layer_norm(x, [24]), torch.softmax(x, -1), x.clone()]

    for length in (19, 23, 30):
        ids = torch.randint(0, 50, (4, length), generator=g)
        table = torch.randn(50, 24, generator=g) + 3  # no zeros: a stale tail would show in the sums
        expected = results(F.embedding(ids, table), w)
        got = results(F.embedding(ids.to("tpu"), table.to("tpu")), w.to("tpu"))
        for i, (e, t) in enumerate(zip(expected, got)):
            flat_e, flat_t = e.reshape(-1, 24), t.reshape(-1, 24)
            for what, summed_e, summed_t in [("rows", flat_e.sum(0), flat_t.sum(0)),
                                            ("rows of a part", flat_e[:-5].sum(0), flat_t[:-5].sum(0)),
                                            ("products", flat_e.t() @ flat_e, flat_t.t() @ flat_t)]:
                # Layer norm rounds differently from CPU's (ulps), which sums of 120 products grow
                # to 1e-4; a row read from a stale tail would add units.
                torch.testing.assert_close(summed_t.cpu(), summed_e, rtol=1e-5, atol=1e-4,
                                           msg=f"length {length}, result {i}, {what}")
    programs = [open(os.path.join(dump_dir, f)).read() for f in os.listdir(dump_dir)]
    sums = [p for p in programs if p.startswith("// aten::sum.dim_IntList")]
    return [sum("stablehlo.select" in p for p in sums), sum("stablehlo.select" not in p for p in sums)]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_sums_over_padded_rows_read_the_storage_tail_as_zeros(tmp_path, mode):
    """Past a padded storage's logical elements its buffer holds zeros, whatever wrote it: a sum
    over the rows of a whole storage reads them without a mask (and matches CPU); a sum over part
    of one still masks the rest. (Fused mode's programs are windows: there only the results count.)"""
    masked, unmasked = _in_a_fresh_process("sums_over_padded_rows", tmp_path / "cache", str(tmp_path / "dump"), mode)
    if mode == "strict":
        assert masked >= 1 and unmasked >= 1


def test_the_capacity_past_a_pointwise_result_stays_zeros(monkeypatch):
    """log of a padded tensor computes log(0) = -inf past its logical elements; what is stored there
    must still be zeros (a NaN check reads the whole buffer)."""
    monkeypatch.setenv("TORCHTPU_CHECK_NANS", "1")
    g = torch.Generator().manual_seed(0)
    with torchtpu.modes.eager_mode("debug"):
        for length in (19, 23):
            ids = torch.randint(0, 50, (4, length), generator=g)
            table = torch.rand(50, 24, generator=g) + 0.5
            x = F.embedding(ids.to("tpu"), table.to("tpu"))
            torch.testing.assert_close(torch.log(x).cpu(), torch.log(F.embedding(ids, table)))


def attention_programs_with_an_element_gather(dump_dir):
    """Attention over heads split from one qkv projection of activations of varying length, forward
    and backward, compared with CPU: returns how many dumped attention programs gather element by
    element (the heads are strided views of the projection, the output a transposed storage)."""
    os.environ["TORCHTPU_DUMP_PROGRAMS"] = dump_dir
    g = torch.Generator().manual_seed(0)
    table, w = torch.randn(50, 32, generator=g), torch.randn(32, 96, generator=g) / 6

    def attend(ids, table, w):
        x = F.embedding(ids, table)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, 2, d // 2).transpose(1, 2) for z in (x @ w).split(d, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, d)

    for length in (19, 23, 30):
        ids = torch.randint(0, 50, (3, length), generator=g)
        leaves = [table.clone().requires_grad_(), w.clone().requires_grad_()]
        on_tpu = [t.detach().to("tpu").requires_grad_() for t in leaves]
        expected, got = attend(ids, *leaves), attend(ids.to("tpu"), *on_tpu)
        torch.testing.assert_close(got.cpu(), expected, msg=f"length {length}")
        expected.square().sum().backward()
        got.square().sum().backward()
        for c, t in zip(leaves, on_tpu):
            torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5, msg=f"length {length}")
    programs = [open(os.path.join(dump_dir, f)).read() for f in os.listdir(dump_dir)]
    attention = [p for p in programs if "scaled_dot_product" in p.splitlines()[0]]
    assert attention, [p.splitlines()[0] for p in programs]
    return [sum("collapsed_slice_dims" in p for p in attention)]


def test_head_slices_and_transposed_results_are_read_by_rows(tmp_path):
    """Views that hold whole rows of their storage in another order (a head slice of a fused qkv
    projection, attention's transposed output) are read one window of rows per batch row, not
    element by element, with the same results as CPU."""
    element_gathers, = _in_a_fresh_process("attention_programs_with_an_element_gather", tmp_path / "cache",
                                           str(tmp_path / "dump"))
    assert element_gathers == 0
