"""Model-zoo sweep: small Hugging Face transformers and torchvision models trained on tpu against
CPU PyTorch.

    python -m torchtpu.testing.models --json FILE [--markdown docs/models.md] [--models NAME ...]
                                      [--steps N] [--timeout S] [--trace auto|always|never]
                                      [--mode strict|debug|fused|lazy] [--list]

Every model is built from a config (nothing is downloaded; tiny sizes: 2 layers, hidden 32, vocab
100, images 32-64 px) with ``torch.manual_seed(0)``. The same initial weights then train for a few
steps on CPU (the reference) and on tpu, on the same deterministic batches, dropout off (configs
with dropout 0, and every ``nn.Dropout`` set to ``p=0``). Language models also ``generate`` a few
tokens greedily. Per model the report has the loss of every step on both devices and their largest
relative difference, whether the generated ids are equal, the ops that fell back to the CPU
(:func:`torchtpu.metrics.cpu_fallbacks`, reset before the tpu run), wall times and any error.

When the results differ (or tpu raised) the model is traced: the training steps up to the first
differing one (or ``generate``) run again on both devices under a ``TorchDispatchMode`` that
records every ATen op's outputs, tagged with the module that issued it (for backward ops, the
autograd node and the module whose forward created it). Two findings come out:

* *first divergence*: the two op sequences are aligned (they may differ where PyTorch picks a
  device-specific path, e.g. attention kernels) and the first aligned op whose outputs differ
  beyond ``TRACE_TOL`` is reported. This is where the runs part ways; an op whose small error gets
  amplified later may be the real cause, hence:
* *replay*: during the tpu run every op is also run on CPU on copies of its own tpu inputs; ops
  whose tpu results differ from that beyond ``REPLAY_TOL`` are wrong lowerings, independent of any
  drift. The first one, and a count per op, are reported.

Errors are normalized by the largest magnitude among the op's inputs and outputs, so sums that
cancel (gradients summing to ~0) are not mistaken for errors.

Each model runs in its own subprocess with a timeout: a crash or a hang is recorded and the sweep
goes on. :func:`run_model` runs one model in-process (used by the tests).
"""

import argparse
import copy
import datetime
import difflib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

LOSS_RTOL = 1e-4    # largest relative loss difference (any step) counted as parity
TRACE_TOL = 1e-3    # two-run trace: normalized difference at which the runs have diverged
REPLAY_TOL = 1e-4   # replay: normalized difference at which one op's tpu result is wrong
SNAPSHOT_NUMEL = 1 << 22  # larger outputs are recorded as an even subsample


# ---------------------------------------------------------------------------------------------
# The zoo
# ---------------------------------------------------------------------------------------------

class Spec:
    """One model: how to build it, its batches, its loss and (optionally) how it generates."""

    def __init__(self, name, family, build, batch, loss, optimizer="adamw", generate=None,
                 setup=None, note=""):
        self.name, self.family, self.build, self.batch, self.loss = name, family, build, batch, loss
        self.optimizer, self.generate, self.setup, self.note = optimizer, generate, setup, note


MODELS = {}


def _register(spec):
    MODELS[spec.name] = spec
    return spec


VOCAB, SEQ, BATCH = 100, 16, 2
PAD, BOS, EOS = 0, 1, 2


def _gen(step):
    import torch
    return torch.Generator().manual_seed(1000 + step)


def _tokens(g, batch=BATCH, seq=SEQ, low=3):
    import torch
    return torch.randint(low, VOCAB, (batch, seq), generator=g)


def _causal_batch(step):
    import torch
    g = _gen(step)
    ids = _tokens(g)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # the second sequence is right-padded
    ids[1, -4:] = PAD
    labels = ids.clone()
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _masked_batch(step, pad=PAD, mask_id=3):
    import torch
    g = _gen(step)
    ids = _tokens(g, low=4)
    attn = torch.ones_like(ids)
    attn[1, -4:] = 0
    ids[1, -4:] = pad
    chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (attn == 1)
    chosen[0, 1] = True  # at least one masked position
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    ids = torch.where(chosen, torch.full_like(ids, mask_id), ids)
    return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def _seq2seq_batch(step):
    import torch
    g = _gen(step)
    src = _tokens(g)
    mask = torch.ones_like(src)
    mask[1, -4:] = 0
    src[1, -4:] = PAD
    labels = _tokens(g, seq=8)
    return {"input_ids": src, "attention_mask": mask, "labels": labels}


def _hf_loss(model, batch):
    return model(**batch).loss


def _causal_generate(model, batch):
    import torch
    prompt = batch["input_ids"][:, :5]
    return model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                          min_new_tokens=6, do_sample=False, pad_token_id=PAD)


def _seq2seq_generate(model, batch):
    return model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          max_new_tokens=6, min_new_tokens=6, do_sample=False)


def _lm_common():
    return dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                tie_word_embeddings=True)


def _decoder(name, config_cls, model_cls, **extra):
    def build():
        import transformers
        kw = dict(_lm_common(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  attention_dropout=0.0)
        kw.update(extra)
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kw))
    _register(Spec(name, "HF decoder", build, _causal_batch, _hf_loss, generate=_causal_generate))


def _gpt2():
    import transformers
    cfg = transformers.GPT2Config(n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, **_lm_common())
    return transformers.GPT2LMHeadModel(cfg)


_register(Spec("gpt2", "HF decoder", _gpt2, _causal_batch, _hf_loss, generate=_causal_generate))
_decoder("llama", "LlamaConfig", "LlamaForCausalLM")
_decoder("mistral", "MistralConfig", "MistralForCausalLM", sliding_window=8)
_decoder("qwen2", "Qwen2Config", "Qwen2ForCausalLM")
_decoder("gemma", "GemmaConfig", "GemmaForCausalLM", head_dim=8, num_key_value_heads=1)


def _bert():
    import transformers
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, pad_token_id=PAD)
    return transformers.BertForMaskedLM(cfg)


def _roberta():
    import transformers
    cfg = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64 + 2, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2)
    return transformers.RobertaForMaskedLM(cfg)


_register(Spec("bert", "HF encoder", _bert, _masked_batch, _hf_loss))
_register(Spec("roberta", "HF encoder", _roberta, lambda s: _masked_batch(s, pad=1), _hf_loss))


def _t5():
    import transformers
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                                dropout_rate=0.0, pad_token_id=PAD, eos_token_id=EOS,
                                decoder_start_token_id=PAD)
    return transformers.T5ForConditionalGeneration(cfg)


def _bart():
    import transformers
    cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4,
                                  encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                  pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                                  decoder_start_token_id=EOS, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(cfg)


_register(Spec("t5", "HF encoder-decoder", _t5, _seq2seq_batch, _hf_loss, generate=_seq2seq_generate))
_register(Spec("bart", "HF encoder-decoder", _bart, _seq2seq_batch, _hf_loss,
               generate=_seq2seq_generate))


def _whisper():
    import transformers
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                     max_source_positions=16, max_target_positions=32, dropout=0.0,
                                     attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD,
                                     bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
                                     suppress_tokens=[], begin_suppress_tokens=[])
    return transformers.WhisperForConditionalGeneration(cfg)


def _whisper_batch(step):
    import torch
    g = _gen(step)
    return {"input_features": torch.randn(BATCH, 16, 32, generator=g),
            "labels": _tokens(g, seq=8)}


def _whisper_generate(model, batch):
    # the plain greedy loop of GenerationMixin (Whisper's own generate adds language detection and
    # timestamp logic that needs a tokenizer-backed generation config)
    from transformers import GenerationMixin
    return GenerationMixin.generate(model, input_features=batch["input_features"], max_new_tokens=6,
                                    min_new_tokens=6, do_sample=False)


_register(Spec("whisper", "HF speech", _whisper, _whisper_batch, _hf_loss, generate=_whisper_generate))


def _vit():
    import transformers
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0, num_labels=10)
    return transformers.ViTForImageClassification(cfg)


def _image_batch(step, size=32, classes=10, batch=BATCH):
    import torch
    g = _gen(step)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=g),
            "labels": torch.randint(0, classes, (batch,), generator=g)}


_register(Spec("vit", "HF vision", _vit, _image_batch, _hf_loss))


def _clip():
    import transformers
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=32, attention_dropout=0.0,
                pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, attention_dropout=0.0)
    cfg = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)
    return transformers.CLIPModel(cfg)


def _clip_batch(step):
    import torch
    g = _gen(step)
    ids = _tokens(g, seq=12)
    ids[:, 0] = BOS
    ids[0, -1] = EOS
    ids[1, 7] = EOS
    ids[1, 8:] = PAD
    mask = (torch.arange(12) < torch.tensor([[12], [8]])).long()
    return {"input_ids": ids, "attention_mask": mask,
            "pixel_values": torch.randn(BATCH, 3, 32, 32, generator=g)}


_register(Spec("clip", "HF multimodal", _clip, _clip_batch,
               lambda m, b: m(**b, return_loss=True).loss))


# torchvision ---------------------------------------------------------------------------------

def _tv_cls_loss(model, batch):
    import torch
    return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def _tv_cls(name, build, size=32):
    _register(Spec(name, "torchvision classification", build, lambda s: _image_batch(s, size=size),
                   _tv_cls_loss, optimizer="sgd"))


def _tvm(fn, **kw):
    def build():
        import torchvision
        return getattr(torchvision.models, fn)(weights=None, **kw)
    return build


def _vit_tiny():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32,
                             mlp_dim=64, num_classes=10)


def _convnext_small_cfg():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 2)], stochastic_depth_prob=0.0,
                    num_classes=10)


def _swin_small_cfg():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


_tv_cls("resnet18", _tvm("resnet18", num_classes=10))
_tv_cls("mobilenet_v3_small", _tvm("mobilenet_v3_small", num_classes=10, dropout=0.0))
_tv_cls("efficientnet_b0", _tvm("efficientnet_b0", num_classes=10, dropout=0.0,
                                stochastic_depth_prob=0.0))
_tv_cls("shufflenet_v2_x0_5", _tvm("shufflenet_v2_x0_5", num_classes=10))
_tv_cls("vit_b_16 (2 layers, 32 wide)", _vit_tiny)
_tv_cls("convnext (2 stages, 16/32 wide)", _convnext_small_cfg)
_tv_cls("swin (2 stages, 16 wide)", _swin_small_cfg)


def _det_batch(step, size=64, classes=3):
    import torch
    g = _gen(step)
    images = [torch.rand(3, size, size, generator=g) for _ in range(BATCH)]
    targets = []
    for i in range(BATCH):
        xy = torch.rand(2, 2, generator=g) * size * 0.5
        wh = 8 + torch.rand(2, 2, generator=g) * size * 0.4
        boxes = torch.cat([xy, (xy + wh).clamp(max=size - 1)], dim=1)
        targets.append({"boxes": boxes, "labels": torch.randint(1, classes, (2,), generator=g)})
    return {"images": images, "targets": targets}


def _det_loss(model, batch):
    losses = model(batch["images"], batch["targets"])
    return sum(losses.values())


def _cpu_randperm():
    """Detection samplers draw ``torch.randperm`` on the model's device; values from two devices'
    generators cannot match, so it is drawn from the CPU generator and moved (both runs seed it)."""
    import torch
    orig = torch.randperm

    def randperm(n, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type != "cpu":
            return orig(n, *args, **kwargs).to(device)
        return orig(n, *args, device=device, **kwargs)
    torch.randperm = randperm


def _tv_det(name, fn, **kw):
    _register(Spec(name, "torchvision detection", _tvm(fn, weights_backbone=None, num_classes=3, **kw),
                   _det_batch, _det_loss, optimizer="sgd", setup=_cpu_randperm))


_tv_det("fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_mobilenet_v3_large_fpn", min_size=64,
        max_size=64)
_tv_det("ssdlite320_mobilenet_v3_large", "ssdlite320_mobilenet_v3_large")


def _seg_batch(step, size=64, classes=3):
    import torch
    g = _gen(step)
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=g),
            "labels": torch.randint(0, classes, (BATCH, size, size), generator=g)}


def _seg_loss(model, batch):
    import torch.nn.functional as F
    out = model(batch["pixel_values"])
    loss = F.cross_entropy(out["out"], batch["labels"])
    if "aux" in out:
        loss = loss + 0.5 * F.cross_entropy(out["aux"], batch["labels"])
    return loss


def _tv_seg(name, fn, **kw):
    _register(Spec(name, "torchvision segmentation", _tvm(fn, weights_backbone=None, num_classes=3, **kw),
                   _seg_batch, _seg_loss, optimizer="sgd"))


_tv_seg("lraspp_mobilenet_v3_large", "lraspp_mobilenet_v3_large")
_tv_seg("deeplabv3_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", aux_loss=True)
_tv_seg("fcn_resnet50", "fcn_resnet50", aux_loss=True)


# ---------------------------------------------------------------------------------------------
# Running one model
# ---------------------------------------------------------------------------------------------

def _to(x, device):
    import torch
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def _zero_dropout(model):
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0


def _optimizer(kind, params):
    import torch
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4, foreach=True)
    return torch.optim.AdamW(params, lr=1e-3, foreach=True)


def _error_text(e):
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[:6])[:1500]


def _execute(spec, model, device, batches, steps, do_generate, phase=lambda label: None,
             keep_state=False):
    """Trains ``model`` (already initialized) on ``device`` for ``steps`` steps, then generates.
    -> {"losses", "generated", "error", "traceback", "train_s", "generate_s", "state"}."""
    import torch
    out = {"losses": [], "generated": None, "error": None}
    torch.manual_seed(0)
    t0 = time.perf_counter()
    try:
        phase("to device")
        model = model.to(device)
        model.train()
        opt = _optimizer(spec.optimizer, [p for p in model.parameters() if p.requires_grad])
        for step in range(steps):
            batch = _to(batches[step], device)
            phase(f"step {step + 1} forward")
            loss = spec.loss(model, batch)
            phase(f"step {step + 1} backward")
            loss.backward()
            phase(f"step {step + 1} optimizer")
            opt.step()
            opt.zero_grad(set_to_none=True)
            phase(f"step {step + 1} loss.item")
            out["losses"].append(loss.item())
        out["train_s"] = time.perf_counter() - t0
        if do_generate and spec.generate is not None:
            t1 = time.perf_counter()
            phase("generate")
            model.eval()
            with torch.no_grad():
                out["generated"] = spec.generate(model, _to(batches[0], device)).cpu().tolist()
            out["generate_s"] = time.perf_counter() - t1
        if keep_state:
            phase("state_dict")
            out["state"] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        out["error"] = _error_text(e)
        out["traceback"] = traceback.format_exc()[-4000:]
    out["total_s"] = time.perf_counter() - t0
    return out


def _rel(a, b):
    if a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b):
        return 0.0 if (math.isnan(a) and math.isnan(b)) else float("inf")
    return abs(a - b) / max(abs(b), 1e-12)


def _state_diff(a, b):
    """Largest difference over the floating parameters and buffers after training, relative to
    the largest magnitude among them all (Adam turns the rounding noise of gradients that are ~0,
    e.g. attention key biases, into lr-sized steps: a per-tensor scale would call that a mismatch)."""
    worst, where = 0.0, None
    tensors = [e for e in b.values() if e.is_floating_point() and e.numel()]
    scale = max([float(e.abs().max()) for e in tensors] + [1e-12])
    for k, e in b.items():
        t = a.get(k)
        if t is None or not e.is_floating_point() or t.shape != e.shape:
            continue
        d = float((t.double() - e.double()).abs().max()) / scale if e.numel() else 0.0
        if math.isnan(d):
            d = float("inf")
        if d > worst:
            worst, where = d, k
    return worst, where


def run_model(name, steps=3, trace="auto", mode=None, progress=None):
    """Runs one zoo model on CPU and tpu in this process; returns its result record (a dict)."""
    import torch

    import torchtpu

    spec = MODELS[name]
    rec = {"model": name, "family": spec.family, "steps": steps, "status": None, "error": None,
           "phase": "build"}
    save = progress or (lambda r: None)
    started = time.perf_counter()
    if mode:
        torchtpu.set_eager_mode(mode)
    rec["mode"] = mode or torchtpu.metrics.as_dict()["mode"]
    if spec.setup:
        spec.setup()
    torch.manual_seed(0)
    try:
        model = spec.build()
    except Exception as e:  # noqa: BLE001
        rec.update(status="error", error="build: " + _error_text(e), traceback=traceback.format_exc())
        return rec
    _zero_dropout(model)
    rec["params"] = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    batches = [spec.batch(s) for s in range(steps)]

    rec["phase"] = "cpu"
    save(rec)
    cpu = _execute(spec, copy.deepcopy(model), "cpu", batches, steps, True, keep_state=True)
    rec["cpu_s"] = round(cpu["total_s"], 3)
    if cpu["error"]:
        rec.update(status="error", error="CPU reference: " + cpu["error"], traceback=cpu["traceback"])
        return rec
    rec["loss_cpu"] = cpu["losses"]

    rec["phase"] = "tpu"
    save(rec)
    torchtpu.metrics.reset()
    tpu = _execute(spec, copy.deepcopy(model), "tpu", batches, steps, True, keep_state=True)
    rec["tpu_s"] = round(tpu["total_s"], 3)
    rec["tpu_train_s"] = round(tpu.get("train_s", 0.0), 3)
    if "generate_s" in tpu:
        rec["tpu_generate_s"] = round(tpu["generate_s"], 3)
    rec["fallbacks"] = torchtpu.metrics.cpu_fallbacks()
    counters = torchtpu.metrics.counters()
    rec["compiles"] = counters.get("compiles")
    rec["executions"] = counters.get("executions")
    rec["loss_tpu"] = tpu["losses"]
    rels = [_rel(a, b) for a, b in zip(tpu["losses"], cpu["losses"])]
    rec["loss_rel_diff"] = max(rels) if rels else None
    rec["loss_parity"] = (not tpu["error"] and len(rels) == steps and max(rels) <= LOSS_RTOL)
    first_bad_step = next((i for i, r in enumerate(rels) if r > LOSS_RTOL), None)
    if spec.generate is not None:
        rec["generated_cpu"] = cpu["generated"]
        rec["generated_tpu"] = tpu["generated"]
        rec["generate_parity"] = tpu["generated"] is not None and tpu["generated"] == cpu["generated"]
    if tpu["error"]:
        rec["error"] = tpu["error"]
        rec["traceback"] = tpu["traceback"]
    else:
        rec["param_rel_diff"], rec["param_worst"] = _state_diff(tpu["state"], cpu["state"])
    ok = rec["loss_parity"] and rec.get("generate_parity", True)
    if tpu["error"]:
        rec["status"] = "error"
    elif not ok:
        rec["status"] = "mismatch"
    elif rec["fallbacks"]:
        rec["status"] = "fallback"
    else:
        rec["status"] = "pass"
    rec["phase"] = "done"
    save(rec)

    if trace == "always" or (trace == "auto" and rec["status"] in ("mismatch", "error")):
        rec["phase"] = "trace"
        save(rec)
        if tpu["error"]:
            t_steps, t_gen = steps, True
        elif first_bad_step is not None:
            t_steps, t_gen = first_bad_step + 1, False
        elif not rec.get("generate_parity", True):
            t_steps, t_gen = 0, True
        else:
            t_steps, t_gen = steps, spec.generate is not None
        t0 = time.perf_counter()
        try:
            rec["trace"] = _trace(spec, model, batches, t_steps, t_gen)
        except Exception as e:  # noqa: BLE001
            rec["trace"] = {"error": _error_text(e), "traceback": traceback.format_exc()[-3000:]}
        rec["trace"]["seconds"] = round(time.perf_counter() - t0, 2)
        rec["phase"] = "done"
    rec["total_s"] = round(time.perf_counter() - started, 2)
    save(rec)
    return rec


# ---------------------------------------------------------------------------------------------
# Tracing: per-op outputs on both devices, and a CPU replay of every tpu op
# ---------------------------------------------------------------------------------------------

_NO_VALUES = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "exponential",
              "cauchy", "geometric", "poisson", "empty")
_NO_REPLAY = ("as_strided", "set_", "resize_", "record_stream")


def _no_values(op_name):
    base = op_name.split("::")[-1].split(".")[0]
    return any(s in base for s in _NO_VALUES)


def _snapshot(x):
    import torch
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.numel() > SNAPSHOT_NUMEL:
            t = t.reshape(-1)[:: math.ceil(t.numel() / SNAPSHOT_NUMEL)]
        return t.to("cpu", copy=True)
    if isinstance(x, (list, tuple)):
        return [_snapshot(v) for v in x]
    if isinstance(x, (bool, int, float, complex)) or x is None:
        return x
    return repr(x)[:60]


def _abs_max(x):
    import torch
    if isinstance(x, torch.Tensor):
        if not (x.is_floating_point() or x.is_complex()) or x.numel() == 0:
            return 0.0
        t = x.detach()
        if t.numel() > SNAPSHOT_NUMEL:
            t = t.reshape(-1)[:: math.ceil(t.numel() / SNAPSHOT_NUMEL)]
        t = t.abs().float()
        t = t[torch.isfinite(t)]
        return float(t.max()) if t.numel() else 0.0
    if isinstance(x, (list, tuple)):
        return max([_abs_max(v) for v in x] + [0.0])
    if isinstance(x, dict):
        return max([_abs_max(v) for v in x.values()] + [0.0])
    if isinstance(x, float) and math.isfinite(x):
        return abs(x)
    return 0.0


def _shape_key(x):
    import torch
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, (list, tuple)):
        return tuple(_shape_key(v) for v in x)
    return type(x).__name__


def _diff(a, e, scale):
    """Normalized difference of ``a`` against the reference ``e`` -> (err, max_abs, note)."""
    import torch
    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            return float("inf"), None, f"got {type(a).__name__}"
        if tuple(a.shape) != tuple(e.shape):
            return float("inf"), None, f"shape {list(a.shape)} vs {list(e.shape)}"
        if e.numel() == 0:
            return 0.0, 0.0, ""
        if e.is_complex():
            a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
        if not e.is_floating_point():
            bad = int((a.to(e.dtype) != e).sum())
            return (float("inf"), None, f"{bad} of {e.numel()} {str(e.dtype)[6:]} elements differ") \
                if bad else (0.0, 0.0, "")
        a, e = a.double(), e.double()
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        if not torch.equal(nan_a, nan_e):
            return float("inf"), None, (f"NaN on tpu at {int((nan_a & ~nan_e).sum())}, on CPU at "
                                        f"{int((nan_e & ~nan_a).sum())} elements")
        fin = torch.isfinite(e) & torch.isfinite(a)
        if not torch.equal(a[~fin & ~nan_e], e[~fin & ~nan_e]):
            return float("inf"), None, "infinities differ"
        if not fin.any():
            return 0.0, 0.0, ""
        d = float((a[fin] - e[fin]).abs().max())
        return d / max(scale, 1e-30), d, ""
    if isinstance(e, (list, tuple)):
        if not isinstance(a, (list, tuple)) or len(a) != len(e):
            return float("inf"), None, "different number of outputs"
        worst = (0.0, 0.0, "")
        for i, (x, y) in enumerate(zip(a, e)):
            r = _diff(x, y, scale)
            if r[0] > worst[0]:
                worst = (r[0], r[1], f"output {i}" + (f": {r[2]}" if r[2] else ""))
        return worst
    if isinstance(e, (int, float, bool)) and isinstance(a, (int, float, bool)):
        if isinstance(e, float) and math.isnan(e):
            return (0.0, 0.0, "") if math.isnan(a) else (float("inf"), None, "NaN on CPU only")
        d = abs(float(a) - float(e))
        if isinstance(e, float):
            return d / max(scale, abs(e), 1e-30), d, ""
        return (float("inf"), d, f"{a} vs {e}") if d else (0.0, 0.0, "")
    return (0.0, 0.0, "") if a == e or isinstance(e, str) else (float("inf"), None, f"{a!r} vs {e!r}")


class _Tracer:
    """Records every ATen op (TorchDispatchMode) with the module issuing it; on tpu also replays
    each op on CPU copies of its inputs."""

    def __init__(self, model, replay):
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten, tree_map

        self.records, self.replay_bad, self.phase, self.stack = [], [], "", []
        replay_on = on_tpu = replay
        self.replays = 0
        names = {id(m): n or "<model>" for n, m in model.named_modules()}
        tracer = self

        def pre(mod, args):
            tracer.stack.append(names.get(id(mod), type(mod).__name__))

        def post(mod, args, out):
            if tracer.stack:
                tracer.stack.pop()

        self._hooks = (pre, post)

        class Annotate(TorchFunctionMode):
            """Tags each autograd node with the module whose forward created it."""

            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if tracer.stack:
                    for t in tree_flatten(out)[0]:
                        if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                            md = t.grad_fn.metadata
                            if "module" not in md:
                                md["module"] = tracer.stack[-1]
                return out

        def to_cpu(x):
            if isinstance(x, torch.Tensor):
                return x.detach().to("cpu", copy=True)
            if isinstance(x, torch.device) and x.type != "cpu":
                return torch.device("cpu")
            return x

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.name()
                where = tracer.where()
                values = not _no_values(name)
                replay = (replay_on and values and not func.is_view
                          and not any(s in name for s in _NO_REPLAY))
                in_scale = 0.0
                if replay:
                    c_args, c_kwargs = tree_map(to_cpu, (args, kwargs))
                    in_scale = max(_abs_max(c_args), _abs_max(c_kwargs))
                elif values and not on_tpu:
                    in_scale = max(_abs_max(args), _abs_max(kwargs))
                out = func(*args, **kwargs)
                snap = _snapshot(out) if values else None
                scale = max(in_scale, _abs_max(snap))
                tracer.records.append({"op": name, "key": (name, _shape_key(out)), "where": where,
                                       "out": snap, "scale": scale})
                if replay:
                    try:
                        ref = func(*c_args, **c_kwargs)
                    except Exception:  # noqa: BLE001 - no CPU kernel for these arguments
                        ref = None
                    if ref is not None:
                        tracer.replays += 1
                        ref = _snapshot(ref)
                        err, d, note = _diff(snap, ref, max(scale, _abs_max(ref)))
                        if err > REPLAY_TOL:
                            tracer.replay_bad.append({
                                "index": len(tracer.records) - 1, "op": name, "where": where,
                                "rel": err, "max_abs": d, "note": note,
                                "shapes": _describe_shapes(args)})
                return out

        self.modes = [Annotate(), Record()]

    def where(self):
        import torch
        node = torch._C._current_autograd_node()
        if node is not None:
            mod = node.metadata.get("module", "?") if hasattr(node, "metadata") else "?"
            return f"{self.phase}: {node.name()} of {mod}"
        return f"{self.phase}: {self.stack[-1] if self.stack else '<top>'}"

    def __enter__(self):
        from torch.nn.modules.module import (register_module_forward_hook,
                                             register_module_forward_pre_hook)
        self._handles = [register_module_forward_pre_hook(self._hooks[0]),
                         register_module_forward_hook(self._hooks[1])]
        for m in self.modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self.modes):
            m.__exit__(*exc)
        for h in self._handles:
            h.remove()
        return False


def _describe_shapes(args):
    import torch
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(f"{str(a.dtype)[6:]}{list(a.shape)}")
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            out.append(f"[{len(a)} tensors]")
        else:
            r = repr(a)
            out.append(r if len(r) < 30 else r[:27] + "...")
    return ", ".join(out)


def _trace(spec, model, batches, steps, do_generate):
    runs = {}
    for device in ("cpu", "tpu"):
        tracer = _Tracer(model, replay=(device == "tpu"))
        m = copy.deepcopy(model)
        with tracer:
            res = _execute(spec, m, device, batches, steps, do_generate,
                           phase=lambda label, t=tracer: setattr(t, "phase", label))
        runs[device] = (tracer, res)
    cpu_t, tpu_t = runs["cpu"][0], runs["tpu"][0]
    out = {"steps": steps, "generate": do_generate, "cpu_ops": len(cpu_t.records),
           "tpu_ops": len(tpu_t.records), "tpu_error": runs["tpu"][1]["error"],
           "replayed_ops": tpu_t.replays}

    # align the two op sequences, compare aligned ops in order
    a_keys = [repr(r["key"]) for r in cpu_t.records]
    b_keys = [repr(r["key"]) for r in tpu_t.records]
    sm = difflib.SequenceMatcher(None, a_keys, b_keys, autojunk=False)
    first, unmatched, prev_b = None, 0, 0
    for blk in sm.get_matching_blocks():
        unmatched += blk.b - prev_b
        for k in range(blk.size):
            c, t = cpu_t.records[blk.a + k], tpu_t.records[blk.b + k]
            if c["out"] is None:
                continue
            err, d, note = _diff(t["out"], c["out"], c["scale"])
            if err > TRACE_TOL:
                first = {"index": blk.b + k, "op": t["op"], "where": t["where"], "rel": err,
                         "max_abs": d, "note": note, "unaligned_ops_before": unmatched}
                break
        if first:
            break
        prev_b = blk.b + blk.size
    out["first_divergence"] = first
    out["aligned_ops"] = sum(b.size for b in sm.get_matching_blocks())
    # ops present on one device only (device-specific paths), by name
    only = {}
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        for r in cpu_t.records[i1:i2]:
            only.setdefault("cpu only", {}).setdefault(r["op"], 0)
            only["cpu only"][r["op"]] += 1
        for r in tpu_t.records[j1:j2]:
            only.setdefault("tpu only", {}).setdefault(r["op"], 0)
            only["tpu only"][r["op"]] += 1
    out["unaligned"] = only

    bad = tpu_t.replay_bad
    out["replay_first"] = bad[0] if bad else None
    per_op = {}
    for b in bad:
        p = per_op.setdefault(b["op"], {"count": 0, "max_rel": 0.0, "first_where": b["where"],
                                        "first_shapes": b["shapes"], "note": b["note"]})
        p["count"] += 1
        p["max_rel"] = max(p["max_rel"], b["rel"])
    out["replay_mismatches"] = per_op
    return out


# ---------------------------------------------------------------------------------------------
# The sweep: one subprocess per model
# ---------------------------------------------------------------------------------------------

def _worker_main(args):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings
    warnings.filterwarnings("ignore")

    def save(rec):
        tmp = args.result + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f, default=str)
        os.replace(tmp, args.result)

    rec = run_model(args.worker, steps=args.steps, trace=args.trace, mode=args.mode, progress=save)
    save(rec)


def run_in_subprocess(name, steps=3, trace="auto", mode=None, timeout=600, log=None):
    """Runs :func:`run_model` for one model in a fresh interpreter; a crash or a timeout becomes the
    record's ``status``."""
    with tempfile.TemporaryDirectory(prefix="torchtpu-models-") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "torchtpu.testing.models", "--worker", name, "--result", result,
               "--steps", str(steps), "--trace", trace]
        if mode:
            cmd += ["--mode", mode]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
        t0 = time.perf_counter()
        stderr_path = os.path.join(tmp, "stderr")
        with open(stderr_path, "w") as err:
            try:
                proc = subprocess.run(cmd, stdout=err, stderr=subprocess.STDOUT, env=env,
                                      timeout=timeout)
                rc, timed_out = proc.returncode, False
            except subprocess.TimeoutExpired:
                rc, timed_out = None, True
        wall = time.perf_counter() - t0
        rec = None
        if os.path.exists(result):
            with open(result) as f:
                rec = json.load(f)
        with open(stderr_path, errors="replace") as f:
            tail = f.read()[-3000:]
    if rec is None:
        rec = {"model": name, "family": MODELS[name].family, "steps": steps, "phase": "start"}
    rec["wall_s"] = round(wall, 2)
    if timed_out:
        rec["status"] = "timeout"
        rec["error"] = f"timed out after {timeout} s in phase '{rec.get('phase')}'"
    elif rc != 0:
        # a result saved before the crash keeps its findings; the crash is the error
        rec["status"] = "crash" if rec.get("phase") != "trace" else rec.get("status")
        msg = f"worker exited with {rc} in phase '{rec.get('phase')}'"
        if rec.get("phase") == "trace":
            rec.setdefault("trace", {})["error"] = msg
        else:
            rec["error"] = msg
        rec["stderr_tail"] = tail
    if log:
        log(rec)
    return rec


def _fmt(x, digits=1):
    if x is None:
        return "—"
    if isinstance(x, float):
        if math.isinf(x):
            return "inf"
        return f"{x:.{digits}e}"
    return str(x)


def _fmt_where(w):
    return w.replace("|", "\\|")


def _divergence_text(r):
    tr = r.get("trace")
    if not tr:
        return "—"
    if tr.get("error") and not tr.get("first_divergence") and not tr.get("replay_first"):
        return "trace failed: " + tr["error"][:150]
    parts = []
    fd = tr.get("first_divergence")
    if fd:
        parts.append(f"`{fd['op']}` in {_fmt_where(fd['where'])}, rel {_fmt(fd['rel'])}"
                     + (f" ({fd['note']})" if fd.get("note") else ""))
    else:
        parts.append("no aligned op beyond tolerance")
    rm = tr.get("replay_mismatches") or {}
    if rm:
        ops = sorted(rm.items(), key=lambda kv: -kv[1]["max_rel"])
        parts.append("replay: " + ", ".join(f"`{op}` ×{v['count']} (max rel {_fmt(v['max_rel'])})"
                                            for op, v in ops[:4])
                     + (f", +{len(ops) - 4} more" if len(ops) > 4 else ""))
    elif tr.get("replayed_ops"):
        parts.append(f"replay: all {tr['replayed_ops']} ops match")
    return "; ".join(parts)


def _status_text(r):
    s = r.get("status") or "?"
    return {"pass": "pass", "fallback": "pass (fallbacks)", "mismatch": "**mismatch**",
            "error": "**error**", "timeout": "**timeout**", "crash": "**crash**"}.get(s, s)


def write_markdown(path, records, args, seconds):
    import torch
    import torchvision
    import transformers

    import torchtpu
    cmd = "python -m torchtpu.testing.models " + " ".join(args.argv)
    counts = {}
    for r in records:
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
    lines = [
        "# Model zoo on tpu against CPU PyTorch", "",
        f"Generated {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), "
        f"platform `{torchtpu.platform()}`, eager mode `{args.mode or 'strict'}`; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, torchvision {torchvision.__version__}; "
        f"{seconds / 60:.1f} minutes, by:", "",
        "```", cmd, "```", "",
        "Each model is built from a small config (no downloads; 2 layers, hidden 32, vocab 100, "
        "images 32-64 px) with `torch.manual_seed(0)`; the same initial weights train for "
        f"{args.steps} steps on CPU and on tpu on the same batches, dropout off (AdamW for "
        "transformers, SGD with momentum for torchvision; `foreach=True` on both devices). "
        "Language models then `generate` 6 tokens greedily. *loss parity*: the largest relative "
        f"difference of a step's loss (pass at ≤ {LOSS_RTOL:g}). *fallback ops*: ops that ran on "
        "the CPU during the tpu run. *first divergence* (only for models that differ or fail): the "
        "first ATen op whose outputs differ by more than "
        f"{TRACE_TOL:g} (normalized by the largest magnitude among its inputs and outputs) between "
        "the CPU and tpu runs, where the op sequences are aligned; *replay*: tpu ops whose results "
        f"differ by more than {REPLAY_TOL:g} from the same op run on CPU on copies of their tpu inputs "
        "(wrong lowerings, whatever the drift). *time*: the tpu run (training and generation, "
        "compiles included; CPU run in parentheses).", "",
        "| status | count |", "| --- | --- |",
    ]
    for k in ("pass", "fallback", "mismatch", "error", "timeout", "crash"):
        if counts.get(k):
            lines.append(f"| {_status_text({'status': k})} | {counts[k]} |")
    lines += ["", "| model | family | params | steps | status | loss parity | generate parity | "
              "fallback ops | first divergence | time (s) |",
              "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- | ---: |"]
    for r in records:
        gen = r.get("generate_parity")
        gen = "—" if gen is None else ("equal" if gen else "**differs**")
        fb = r.get("fallbacks") or {}
        fb_text = ", ".join(f"`{k}` ×{v}" for k, v in sorted(fb.items())) if fb else \
            ("0" if "fallbacks" in r else "—")
        rel = r.get("loss_rel_diff")
        lp = "—" if rel is None else (f"{_fmt(rel)}" + ("" if r.get("loss_parity") else " ✗"))
        div = _divergence_text(r)
        if r.get("error"):
            div = ("error: " + r["error"][:300].replace("|", "\\|").replace("\n", " ")
                   + ("; " + div if div != "—" else ""))
        t = r.get("tpu_s")
        time_text = "—" if t is None else f"{t:.1f} ({r.get('cpu_s', 0):.1f})"
        params = r.get("params")
        lines.append(f"| {r['model']} | {r['family']} | {params if params is not None else '—'} | "
                     f"{r.get('steps', '—')} | {_status_text(r)} | {lp} | {gen} | {fb_text} | {div} "
                     f"| {time_text} |")
    lines += ["", "Losses per step (CPU / tpu):", ""]
    for r in records:
        if r.get("loss_cpu"):
            pairs = ", ".join(f"{c:.6f} / {t:.6f}" for c, t in
                              zip(r["loss_cpu"], r.get("loss_tpu") or [float("nan")] * len(r["loss_cpu"])))
            lines.append(f"- {r['model']}: {pairs}")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m torchtpu.testing.models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every model's record to this file")
    parser.add_argument("--markdown", help="also write the results as a Markdown report")
    parser.add_argument("--models", nargs="+", help="only these models (default: all)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--trace", choices=["auto", "always", "never"], default="auto",
                        help="trace ops for the first divergence: for failing models (auto)")
    parser.add_argument("--mode", choices=["strict", "debug", "fused", "lazy"])
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.worker:
        return _worker_main(args)
    if args.list:
        for n, s in MODELS.items():
            print(f"{n}\t{s.family}")
        return 0
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown models: {unknown}; --list shows them")
    if not args.json and not args.markdown:
        parser.error("give --json and/or --markdown")

    records, t0 = [], time.perf_counter()

    def log(rec):
        fb = rec.get("fallbacks") or {}
        extra = f" fallbacks={sorted(fb)}" if fb else ""
        if rec.get("error"):
            extra += f" error={rec['error'][:200]}"
        fd = (rec.get("trace") or {}).get("first_divergence")
        if fd:
            extra += f" first-divergence={fd['op']} @ {fd['where']} rel={_fmt(fd['rel'])}"
        print(f"[{time.perf_counter() - t0:7.1f}s] {rec['model']:<34} {rec.get('status')!s:<9} "
              f"loss-rel={_fmt(rec.get('loss_rel_diff'))} gen={rec.get('generate_parity')} "
              f"({rec.get('wall_s')} s){extra}", flush=True)

    for name in names:
        records.append(run_in_subprocess(name, steps=args.steps, trace=args.trace, mode=args.mode,
                                         timeout=args.timeout, log=log))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"command": "python -m torchtpu.testing.models " + " ".join(argv),
                           "seconds": round(time.perf_counter() - t0, 1), "models": records}, f,
                          indent=1, default=str)
    seconds = time.perf_counter() - t0
    if args.markdown:
        write_markdown(args.markdown, records, args, seconds)
    passed = sum(r.get("status") == "pass" for r in records)
    print(f"{passed}/{len(records)} models pass ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
