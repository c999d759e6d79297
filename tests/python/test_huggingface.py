"""Hugging Face transformers on the tpu device: ``Trainer`` (through accelerate) and ``generate()``.

What a user sets is in docs/porting.md ("Hugging Face"): ``ACCELERATE_TORCH_DEVICE=tpu``; the
default optimizer (``adamw_torch_fused``) runs on the device. Models are tiny and
built from configs (no hub access), the data is random token ids (no tokenizer).
"""

import math

import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

VOCAB, SEQ = 64, 16


class RandomTokens(torch.utils.data.Dataset):
    """Causal-LM examples of random token ids; labels are the inputs (the model shifts them)."""

    def __init__(self, n, seed):
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gpt2():
    torch.manual_seed(0)
    # Dropout off: the tpu's RNG stream is not the CPU's, so dropout masks would differ.
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=None, pad_token_id=1)
    return GPT2LMHeadModel(cfg)


def llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=0, eos_token_id=None, pad_token_id=1)
    return LlamaForCausalLM(cfg)


class DeviceLog(TrainerCallback):
    """Where the parameters are at every optimizer step."""

    def __init__(self):
        self.param_devices = set()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.param_devices |= {p.device for p in model.parameters()}


def train_and_evaluate(tmp_path, monkeypatch, on_tpu):
    if on_tpu:
        monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "tpu")
    else:
        # accelerate's env device wins over use_cpu=True (see docs/porting.md), so a CPU run
        # must not see it.
        monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    model = gpt2()
    input_devices = set()
    model.register_forward_pre_hook(
        lambda mod, args, kwargs: input_devices.add(kwargs["input_ids"].device), with_kwargs=True)
    args = TrainingArguments(
        output_dir=str(tmp_path / ("tpu" if on_tpu else "cpu")), use_cpu=not on_tpu,
        max_steps=4, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        learning_rate=1e-3, logging_steps=1, seed=0, save_strategy="no", report_to=[],
        disable_tqdm=True)  # the default optimizer, adamw_torch_fused (aten::_fused_adamw_)
    log = DeviceLog()
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(32, seed=1),
                      eval_dataset=RandomTokens(8, seed=2), callbacks=[log])
    trainer.train()
    eval_loss = trainer.evaluate()["eval_loss"]
    steps = [h for h in trainer.state.log_history if "loss" in h]
    return dict(args=args, trainer=trainer, params=log.param_devices, inputs=input_devices,
                loss=[h["loss"] for h in steps], grad_norm=[h["grad_norm"] for h in steps],
                eval_loss=eval_loss)


def test_trainer_train_and_evaluate_match_cpu(tmp_path, monkeypatch):
    cpu = train_and_evaluate(tmp_path, monkeypatch, on_tpu=False)
    torchtpu.metrics.reset()
    tpu = train_and_evaluate(tmp_path, monkeypatch, on_tpu=True)

    tpu0 = torch.device("tpu", 0)
    assert tpu["args"].device == tpu0
    assert tpu["trainer"].accelerator.device.type == "tpu"
    assert tpu["params"] == {tpu0}, "parameters left the device during training"
    assert tpu["inputs"] == {tpu0}, "a train or eval batch was not on the device"
    assert torchtpu.metrics.cpu_fallbacks() == {}, "part of the run went through the CPU fallback"
    assert cpu["params"] == {torch.device("cpu")} and cpu["inputs"] == {torch.device("cpu")}

    # Float32 on both sides, the same init, batches and optimizer; only XLA's summation order and
    # fusion differ, a few ulps per reduction. Over 4 AdamW steps the losses agree to ~1e-7
    # relative (observed); 1e-5 is ~80 ulps of margin and still far below what one wrong op or a
    # skipped step changes (the loss moves by ~1e-3 per step here). The gradient norm sums the
    # squares of all 28.5k gradients, a longer reduction in a different order, so it gets 1e-4.
    assert len(tpu["loss"]) == len(cpu["loss"]) == 4
    for a, b in zip(tpu["loss"], cpu["loss"]):
        assert math.isclose(a, b, rel_tol=1e-5), (tpu["loss"], cpu["loss"])
    for a, b in zip(tpu["grad_norm"], cpu["grad_norm"]):
        assert math.isclose(a, b, rel_tol=1e-4), (tpu["grad_norm"], cpu["grad_norm"])
    assert math.isclose(tpu["eval_loss"], cpu["eval_loss"], rel_tol=1e-5)


def accelerate_reset():
    # TrainingArguments resets accelerate's process-wide state itself; a bare Accelerator does not.
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def test_accelerator_places_model_and_batches_on_tpu(monkeypatch):
    from accelerate import Accelerator

    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "tpu")
    accelerate_reset()
    try:
        acc = Accelerator()
        model = gpt2()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(RandomTokens(8, seed=1), batch_size=4)
        model, opt, loader = acc.prepare(model, opt, loader)
        assert acc.device.type == "tpu"
        assert {p.device.type for p in model.parameters()} == {"tpu"}
        torchtpu.metrics.reset()
        for batch in loader:
            assert batch["input_ids"].device.type == "tpu"
            acc.backward(model(**batch).loss)
            opt.step()
            opt.zero_grad()
        assert torchtpu.metrics.cpu_fallbacks() == {}
    finally:
        accelerate_reset()


def prompt():
    ids = torch.randint(2, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # the second prompt is left-padded
    return ids, mask


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_generate_with_kv_cache_matches_cpu(make):
    ids, mask = prompt()
    kw = dict(max_new_tokens=6, do_sample=False, use_cache=True, return_dict_in_generate=True)
    want = make().eval().generate(ids, attention_mask=mask, **kw).sequences
    model = make().eval().to("tpu")
    torchtpu.metrics.reset()
    out = model.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kw)
    assert torchtpu.metrics.cpu_fallbacks() == {}
    assert out.sequences.device.type == "tpu"
    assert torch.equal(out.sequences.cpu(), want)
    # The cache was used and lives on the device: keys for every position but the last token.
    cache = out.past_key_values
    assert cache.get_seq_length() == want.shape[1] - 1
    assert cache.layers[0].keys.device.type == "tpu"


def test_generate_with_static_cache_matches_cpu():
    ids, mask = prompt()
    kw = dict(max_new_tokens=8, do_sample=False, use_cache=True, cache_implementation="static")
    want = llama().eval().generate(ids, attention_mask=mask, **kw)
    model = llama().eval().to("tpu")
    torchtpu.metrics.reset()
    got = model.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kw)
    assert torch.equal(got.cpu(), want)
    fallbacks = torchtpu.metrics.cpu_fallbacks()  # the cache writes with index_copy_, on the device
    assert fallbacks == {}
