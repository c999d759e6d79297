"""Model-zoo sweep: small Hugging Face transformers and torchvision models trained on tpu against
CPU PyTorch.

    python -m torchtpu.testing.models --json FILE [--markdown docs/models.md] [--models NAME ...]
                                      [--steps N] [--timeout S] [--trace auto|always|never]
                                      [--mode strict|debug|fused|lazy] [--list]

Every model is built from a config (nothing is downloaded; tiny sizes: 2 layers, hidden 32, vocab
100, images 32-64 px) with ``torch.manual_seed(0)``. The same initial weights then train for a few
steps on CPU (the reference) and on tpu, on the same deterministic batches, dropout off (configs
with dropout 0, and every ``nn.Dropout`` set to ``p=0``). Language models also ``generate`` a few
tokens greedily. Per model the record has the loss of every step on both devices and their largest
relative difference, whether the generated ids are equal, the ops that fell back to the CPU
(:func:`torchtpu.metrics.cpu_fallbacks`, reset before the tpu run), wall times and any error.

Losses that differ by more than ``LOSS_RTOL`` are held against the model's own float32 noise: how
far CPU float32 runs from weights moved by one rounding error (and, when those do not cover the
difference, a float64 run) end up from CPU float32. Within ``NOISE_FACTOR`` times that, they count
as equal.

When the results still differ (or tpu raised) the model is traced: the training steps up to the
first differing one (or ``generate``) run again on CPU float32, CPU float64 and tpu under a
``TorchDispatchMode`` that records every ATen op's outputs (and a sample of its inputs), tagged
with the module that issued it (for backward ops, the autograd node and the module whose forward
created it). Two findings come out:

* *first divergence*: the op sequences are aligned (they differ where PyTorch picks a
  device-specific path, e.g. attention kernels) and the first op whose tpu output is further from
  float64 than ``ACCURACY_FACTOR`` times CPU float32's is reported, with how much its inputs
  already differed between the runs.
* *replay*: during the tpu run every op is also run on CPU, in float32 and float64, on copies of
  its own tpu inputs; ops whose tpu results are off by more than ``ACCURACY_FACTOR`` times CPU's
  error are wrong lowerings, independent of any drift.

A model whose replay is clean and whose first divergence had inputs equal to rounding is marked
``drift``: float32 rounding amplified (a ReLU mask flipping on a value within rounding of 0), not a
wrong op. Otherwise it is a ``mismatch``.

Each model runs in its own subprocess with a timeout: a crash or a hang is recorded and the sweep
goes on. :func:`run_model` runs one model in-process (used by the tests).
"""

import argparse
import copy
import datetime
import difflib
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

LOSS_RTOL = 1e-5    # largest relative loss difference (any step) counted as parity
ACCURACY_FACTOR = 10  # traces: an op's tpu output is off when its error against CPU float64 is
                      # more than this many times CPU float32's error, plus:
TRACE_ATOL = 1e-5   #   two-run trace: this fraction of the output's magnitude
REPLAY_ATOL = 1e-6  #   replay (same inputs on both devices): this fraction of the output's magnitude
TRACE_TOL = 1e-3    # without a float64 reference: normalized difference at which the runs diverged
REPLAY_TOL = 1e-4   # without a float64 reference: normalized difference of a wrong tpu op
NOISE_FACTOR = 10   # beyond LOSS_RTOL, a loss still counts as equal when it is within this many
                    # times the model's own float32 noise (how far CPU runs in float64, or from
                    # weights moved by one rounding error, end up from CPU float32)
DRIFT_INPUT_TOL = 1e-4  # a divergence is amplified rounding (drift) when the op's inputs differed
                        # by less than this (normalized) between the runs
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


def _from_config(config_cls, model_cls, **kw):
    """A build function: transformers' ``model_cls`` from ``config_cls(**kw)``."""
    def build():
        import transformers
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kw))
    return build


def _decoder(name, config_cls, model_cls, **extra):
    kw = dict(_lm_common(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              attention_dropout=0.0)
    _register(Spec(name, "HF decoder", _from_config(config_cls, model_cls, **dict(kw, **extra)), _causal_batch,
                   _hf_loss, generate=_causal_generate))


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
_decoder("gemma2", "Gemma2Config", "Gemma2ForCausalLM", head_dim=8, sliding_window=8,
         query_pre_attn_scalar=8)
_decoder("qwen3", "Qwen3Config", "Qwen3ForCausalLM", head_dim=8)
_decoder("mixtral", "MixtralConfig", "MixtralForCausalLM", num_local_experts=4,
         num_experts_per_tok=2)
_decoder("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
         moe_intermediate_size=32, shared_expert_intermediate_size=32)
_decoder("phi3", "Phi3Config", "Phi3ForCausalLM")
_decoder("phi", "PhiConfig", "PhiForCausalLM", resid_pdrop=0.0, embd_pdrop=0.0)
_decoder("olmo", "OlmoConfig", "OlmoForCausalLM")
_decoder("cohere", "CohereConfig", "CohereForCausalLM")
_decoder("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", residual_dropout=0.0, embedding_dropout=0.0)
_decoder("stablelm", "StableLmConfig", "StableLmForCausalLM")
_decoder("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", hidden_dropout=0.0)
_decoder("falcon", "FalconConfig", "FalconForCausalLM", hidden_dropout=0.0)
_decoder("mamba", "MambaConfig", "MambaForCausalLM", state_size=8)  # a state-space model, no attention
_decoder("opt", "OPTConfig", "OPTForCausalLM", ffn_dim=64, word_embed_proj_dim=32, dropout=0.0,
         activation_dropout=0.0, layerdrop=0.0)
_decoder("bloom", "BloomConfig", "BloomForCausalLM", n_layer=2, n_head=4, hidden_dropout=0.0)  # ALiBi
_decoder("biogpt", "BioGptConfig", "BioGptForCausalLM", hidden_dropout_prob=0.0,
         attention_probs_dropout_prob=0.0, activation_dropout=0.0, layerdrop=0.0)
_decoder("persimmon", "PersimmonConfig", "PersimmonForCausalLM", hidden_dropout=0.0, num_key_value_heads=4)
_decoder("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", head_dim=8, sliding_window=8,
         query_pre_attn_scalar=8)
_decoder("granite", "GraniteConfig", "GraniteForCausalLM")
_decoder("olmo2", "Olmo2Config", "Olmo2ForCausalLM")
_decoder("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", head_dim=8, num_experts=4,
         num_experts_per_tok=2, moe_intermediate_size=32)


def _gpt_style(name, config_cls, model_cls, **extra):
    """Decoders configured with GPT-2's key names (n_embd, n_layer, n_head, n_positions)."""
    kw = dict(_lm_common(), n_embd=32, n_layer=2, n_head=4, n_positions=64, n_inner=64,
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    _register(Spec(name, "HF decoder", _from_config(config_cls, model_cls, **dict(kw, **extra)), _causal_batch,
                   _hf_loss, generate=_causal_generate))


_gpt_style("gptj", "GPTJConfig", "GPTJForCausalLM", rotary_dim=4)
_gpt_style("codegen", "CodeGenConfig", "CodeGenForCausalLM", rotary_dim=4, n_ctx=64)
_gpt_style("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", multi_query=True)


def _mpt():
    import transformers
    cfg = transformers.MptConfig(d_model=32, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=64,
                                 resid_pdrop=0.0, emb_pdrop=0.0, attn_config={"attn_pdrop": 0}, **_lm_common())
    return transformers.MptForCausalLM(cfg)


_register(Spec("mpt", "HF decoder", _mpt, _causal_batch, _hf_loss, generate=_causal_generate))


def _encoder(name, config_cls, model_cls, **extra):
    kw = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, pad_token_id=PAD)
    _register(Spec(name, "HF encoder", _from_config(config_cls, model_cls, **dict(kw, **extra)), _masked_batch,
                   _hf_loss))


def _roberta():
    import transformers
    cfg = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64 + 2, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2)
    return transformers.RobertaForMaskedLM(cfg)


_encoder("bert", "BertConfig", "BertForMaskedLM")
_register(Spec("roberta", "HF encoder", _roberta, lambda s: _masked_batch(s, pad=1), _hf_loss))
_encoder("albert", "AlbertConfig", "AlbertForMaskedLM", embedding_size=16)
_encoder("electra", "ElectraConfig", "ElectraForMaskedLM", embedding_size=32)
_encoder("deberta_v2", "DebertaV2Config", "DebertaV2ForMaskedLM")
_encoder("distilbert", "DistilBertConfig", "DistilBertForMaskedLM", dim=32, n_layers=2, n_heads=4,
         hidden_dim=64, dropout=0.0, attention_dropout=0.0)
_encoder("bigbird", "BigBirdConfig", "BigBirdForMaskedLM", attention_type="original_full")
_encoder("convbert", "ConvBertConfig", "ConvBertForMaskedLM", embedding_size=32, head_ratio=2,
         conv_kernel_size=3)
_encoder("roformer", "RoFormerConfig", "RoFormerForMaskedLM", embedding_size=32)


def _configured(name, family, config_cls, model_cls, batch, **kw):
    """A model built from its config's own key names."""
    _register(Spec(name, family, _from_config(config_cls, model_cls, **kw), batch, _hf_loss))


_ROBERTA_LIKE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64 + 2, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2)
_pad1 = functools.partial(_masked_batch, pad=1)
_configured("xlm_roberta", "HF encoder", "XLMRobertaConfig", "XLMRobertaForMaskedLM", _pad1, **_ROBERTA_LIKE)
_configured("mpnet", "HF encoder", "MPNetConfig", "MPNetForMaskedLM", _pad1, **_ROBERTA_LIKE)
_configured("longformer", "HF encoder", "LongformerConfig", "LongformerForMaskedLM", _pad1, attention_window=4,
            **_ROBERTA_LIKE)
_configured("esm", "HF encoder", "EsmConfig", "EsmForMaskedLM", _pad1, mask_token_id=3,
            position_embedding_type="rotary",
            **{k: v for k, v in _ROBERTA_LIKE.items() if k not in ("bos_token_id", "eos_token_id")})
_configured("funnel", "HF encoder", "FunnelConfig", "FunnelForMaskedLM", _masked_batch, vocab_size=VOCAB,
            block_sizes=[1, 1], num_decoder_layers=1, d_model=32, n_head=4, d_head=8, d_inner=64,
            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD)
_configured("xlnet", "HF encoder", "XLNetConfig", "XLNetLMHeadModel", _masked_batch, vocab_size=VOCAB,
            d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0.0, pad_token_id=PAD, bos_token_id=BOS,
            eos_token_id=EOS)


def _t5():
    import transformers
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                                dropout_rate=0.0, pad_token_id=PAD, eos_token_id=EOS,
                                decoder_start_token_id=PAD)
    return transformers.T5ForConditionalGeneration(cfg)


def _bart_like(name, config_cls, model_cls, **extra):
    """BART and its relatives (mBART, Marian, Pegasus), configured with BART's key names."""
    kw = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
              encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
              decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
              activation_dropout=0.0, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
              decoder_start_token_id=EOS, forced_eos_token_id=None)
    _register(Spec(name, "HF encoder-decoder", _from_config(config_cls, model_cls, **dict(kw, **extra)),
                   _seq2seq_batch, _hf_loss, generate=_seq2seq_generate))


_register(Spec("t5", "HF encoder-decoder", _t5, _seq2seq_batch, _hf_loss, generate=_seq2seq_generate))
_bart_like("bart", "BartConfig", "BartForConditionalGeneration")
_bart_like("mbart", "MBartConfig", "MBartForConditionalGeneration")
_bart_like("marian", "MarianConfig", "MarianMTModel", decoder_start_token_id=PAD, decoder_vocab_size=VOCAB)
_bart_like("pegasus", "PegasusConfig", "PegasusForConditionalGeneration", decoder_start_token_id=PAD)


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


def _waveform_batch(step):
    """0.1 s of 16 kHz audio per clip and a binary label."""
    import torch
    g = _gen(step)
    return {"input_values": torch.randn(BATCH, 1600, generator=g),
            "labels": torch.randint(0, 2, (BATCH,), generator=g)}


# wav2vec2's feature encoder (strided 1-d convolutions, group norm), its grouped convolutional
# position embedding and a transformer; HuBERT shares the architecture
_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4, num_labels=2, hidden_dropout=0.0, attention_dropout=0.0,
              activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0)
for _name, _prefix in [("wav2vec2", "Wav2Vec2"), ("hubert", "Hubert")]:
    _register(Spec(_name, "HF speech", _from_config(_prefix + "Config", _prefix + "ForSequenceClassification",
                                                    **_AUDIO), _waveform_batch, _hf_loss))


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

_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
for _name, _config, _model, _kw in [
        ("dinov2", "Dinov2Config", "Dinov2ForImageClassification",
         dict(_NO_DROPOUT, image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, mlp_ratio=2)),
        ("swin", "SwinConfig", "SwinForImageClassification",
         dict(_NO_DROPOUT, image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
              window_size=4)),
        ("segformer", "SegformerConfig", "SegformerForImageClassification",
         dict(_NO_DROPOUT, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
              patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
              classifier_dropout_prob=0.0)),
        ("convnext", "ConvNextConfig", "ConvNextForImageClassification",
         dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32, drop_path_rate=0.0)),
        ("mobilevit", "MobileViTConfig", "MobileViTForImageClassification",
         dict(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0))]:
    _register(Spec(_name, "HF vision", _from_config(_config, _model, num_labels=10, **_kw), _image_batch,
                   _hf_loss))


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

def _frozen_bn(build):
    """``build``'s model with its BatchNorm frozen, as fine-tuning does (torchvision uses
    FrozenBatchNorm2d whenever a backbone is pretrained): a few images normalized over 1x1 maps
    are where rounding differences flip signs and no two implementations agree."""
    def frozen():
        import torch
        from torchvision.ops.misc import FrozenBatchNorm2d
        model = build()
        for parent in list(model.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.BatchNorm2d):
                    f = FrozenBatchNorm2d(child.num_features, eps=child.eps)
                    for k in ("weight", "bias", "running_mean", "running_var"):
                        getattr(f, k).copy_(getattr(child, k).detach())
                    setattr(parent, child_name, f)
        return model
    return frozen


def _tv_cls_loss(model, batch):
    import torch
    return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def _tv_cls(name, build, size=64, batch=4, note=""):
    # CNNs train with BatchNorm: at 32 px and batch 2 their last stages normalize over 2 values
    # (1x1 maps), where float rounding flips signs and no two implementations agree
    _register(Spec(name, "torchvision classification", build,
                   lambda s: _image_batch(s, size=size, batch=batch), _tv_cls_loss, optimizer="sgd",
                   note=note or f"{batch} images of {size} px"))


def _tvm(fn, **kw):
    def build():
        import importlib
        mod, _, attr = ("torchvision.models." + fn).rpartition(".")
        return getattr(importlib.import_module(mod), attr)(weights=None, **kw)
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
_tv_cls("vit_mini", _vit_tiny, size=32, batch=BATCH,
        note="torchvision VisionTransformer (vit_b_16's class): 2 layers, 32 wide, 8 px patches")
_tv_cls("convnext_mini", _convnext_small_cfg, size=32, batch=BATCH,
        note="torchvision ConvNeXt: 2 stages of 2 blocks, 16 and 32 channels")
_tv_cls("swin_mini", _swin_small_cfg, size=32, batch=BATCH,
        note="torchvision SwinTransformer: 2 stages of 2 blocks, 16 wide, 4x4 windows")


def _maxvit_mini():
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


_tv_cls("maxvit_mini", _maxvit_mini, note="torchvision MaxVit: 2 blocks of 16 and 32 channels, 2x2 partitions")
_tv_cls("squeezenet1_1", _tvm("squeezenet1_1", num_classes=10, dropout=0.0))
# Deeper CNNs with BatchNorm over 4 images of 64 px are chaotic (CPU's own float32 runs from
# weights one rounding apart differ by up to 100% in loss): they train with it frozen, as fine-tuning does.
for _name, _kw, _size in [("densenet121", {}, 64), ("googlenet", dict(aux_logits=False, init_weights=True), 64),
                          ("mnasnet0_5", {}, 64), ("regnet_y_400mf", {}, 64), ("vgg11_bn", {}, 64),
                          ("mobilenet_v2", {}, 64), ("efficientnet_v2_s", dict(stochastic_depth_prob=0.0), 64)]:
    _dropout = {} if _name in ("densenet121", "regnet_y_400mf") else dict(dropout=0.0)
    _tv_cls(_name, _frozen_bn(_tvm(_name, num_classes=10, **_dropout, **_kw)), size=_size,
            note=f"4 images of {_size} px, BatchNorm frozen")


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
    build = _frozen_bn(_tvm(fn, weights_backbone=None, num_classes=3, **kw))
    _register(Spec(name, "torchvision detection", build, _det_batch, _det_loss, optimizer="sgd",
                   setup=_cpu_randperm, note="2 images of 64 px, 2 boxes each, 3 classes, "
                   "BatchNorm frozen; samplers' randperm drawn on CPU"))


_tv_det("fasterrcnn_mobilenet_v3_large_fpn", "detection.fasterrcnn_mobilenet_v3_large_fpn", min_size=64,
        max_size=64)
_tv_det("ssdlite320_mobilenet_v3_large", "detection.ssdlite320_mobilenet_v3_large")
_tv_det("retinanet_resnet50_fpn", "detection.retinanet_resnet50_fpn", min_size=64, max_size=64)
_tv_det("fcos_resnet50_fpn", "detection.fcos_resnet50_fpn", min_size=64, max_size=64)


def _mask_batch(step, size=64):
    """Detection targets with an instance mask per box (the box's area)."""
    import torch
    batch = _det_batch(step, size)
    for target in batch["targets"]:
        masks = torch.zeros(len(target["boxes"]), size, size, dtype=torch.uint8)
        for k, box in enumerate(target["boxes"].long().tolist()):
            masks[k, box[1]:box[3], box[0]:box[2]] = 1
        target["masks"] = masks
    return batch


# at SGD's learning rate the CPU run itself diverges (loss NaN in step 2)
_register(Spec("maskrcnn_resnet50_fpn", "torchvision detection",
               _frozen_bn(_tvm("detection.maskrcnn_resnet50_fpn", weights_backbone=None, num_classes=3,
                               min_size=64, max_size=64)),
               _mask_batch, _det_loss, setup=_cpu_randperm,
               note="2 images of 64 px, 2 boxes with masks each, 3 classes, BatchNorm frozen, AdamW"))


def _video_batch(step):
    import torch
    g = _gen(step)
    return {"pixel_values": torch.randn(BATCH, 3, 4, 32, 32, generator=g),
            "labels": torch.randint(0, 10, (BATCH,), generator=g)}


_register(Spec("r3d_18", "torchvision video", _tvm("video.r3d_18", num_classes=10), _video_batch,
               _tv_cls_loss, optimizer="sgd", note="2 clips of 4 frames of 32 px"))


def _raft():
    from torchvision.models.optical_flow import raft_small
    return raft_small(weights=None)


def _flow_batch(step, size=128):  # RAFT's correlation pyramid needs 128 px
    import torch
    g = _gen(step)
    return {"first": torch.rand(1, 3, size, size, generator=g), "second": torch.rand(1, 3, size, size, generator=g),
            "flow": torch.randn(1, 2, size, size, generator=g)}


def _flow_loss(model, batch):
    flows = model(batch["first"], batch["second"], num_flow_updates=2)
    return sum((f - batch["flow"]).abs().mean() for f in flows)


_register(Spec("raft_small", "torchvision optical flow", _raft, _flow_batch, _flow_loss, optimizer="sgd",
               note="one pair of 128 px images, 2 flow updates (grid_sample, correlation volumes)"))


def _seg_batch(step, size=64, classes=3, batch=4):
    import torch
    g = _gen(step)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=g),
            "labels": torch.randint(0, classes, (batch, size, size), generator=g)}


def _seg_loss(model, batch):
    import torch.nn.functional as F
    out = model(batch["pixel_values"])
    loss = F.cross_entropy(out["out"], batch["labels"])
    if "aux" in out:
        loss = loss + 0.5 * F.cross_entropy(out["aux"], batch["labels"])
    return loss


def _tv_seg(name, fn, **kw):
    _register(Spec(name, "torchvision segmentation", _tvm(fn, weights_backbone=None, num_classes=3, **kw),
                   _seg_batch, _seg_loss, optimizer="sgd", note="4 images of 64 px, 3 classes"))


_tv_seg("lraspp_mobilenet_v3_large", "segmentation.lraspp_mobilenet_v3_large")
_tv_seg("deeplabv3_mobilenet_v3_large", "segmentation.deeplabv3_mobilenet_v3_large", aux_loss=True)
_tv_seg("fcn_resnet50", "segmentation.fcn_resnet50", aux_loss=True)


# ---------------------------------------------------------------------------------------------
# Recurrent networks
# ---------------------------------------------------------------------------------------------

def _rnn_lm():
    from torch import nn

    class RNNLM(nn.Module):
        """A language model of stacked recurrent layers: a 2-layer LSTM, then a bidirectional GRU."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.gru = nn.GRU(32, 32, batch_first=True, bidirectional=True)
            self.head = nn.Linear(64, VOCAB)

        def forward(self, ids):
            h, _ = self.lstm(self.embed(ids))
            h, _ = self.gru(h)
            return self.head(h)

    return RNNLM()


def _rnn_loss(model, batch):
    import torch.nn.functional as F
    ids = batch["input_ids"]
    return F.cross_entropy(model(ids)[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


_register(Spec("lstm_gru_lm", "recurrent", _rnn_lm, lambda s: {"input_ids": _tokens(_gen(s))}, _rnn_loss,
               note="embedding, 2-layer LSTM, bidirectional GRU, next-token loss"))


# ---------------------------------------------------------------------------------------------
# Recommendation: sparse embedding gradients
# ---------------------------------------------------------------------------------------------

def _dlrm():
    import torch
    from torch import nn

    class DLRM(nn.Module):
        """DLRM's shape: categorical features summed through EmbeddingBag(sparse=True) tables, dense
        features through a bottom MLP, their pairwise dot products into a top MLP."""

        def __init__(self, tables=(50, 30, 20), dim=8, dense=4):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum", sparse=True) for n in tables)
            self.bottom = nn.Sequential(nn.Linear(dense, 16), nn.ReLU(), nn.Linear(16, dim), nn.ReLU())
            features = len(tables) + 1
            self.top = nn.Sequential(nn.Linear(dim + features * (features - 1) // 2, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, dense, ids, offsets):
            features = [self.bottom(dense)] + [t(i, o) for t, i, o in zip(self.tables, ids, offsets)]
            stacked = torch.stack(features, 1)
            dots = stacked @ stacked.transpose(1, 2)
            i, j = torch.triu_indices(len(features), len(features), 1, device=dots.device)
            return self.top(torch.cat([features[0], dots[:, i, j]], 1)).squeeze(1)

    return DLRM()


def _dlrm_batch(step, batch=8, tables=(50, 30, 20)):
    """Each sample has 0-3 ids per table (an empty bag too), as offsets into a flat id list."""
    import torch
    g = _gen(step)
    ids, offsets = [], []
    for size in tables:
        counts = torch.randint(0, 4, (batch,), generator=g)
        ids.append(torch.randint(0, size, (int(counts.sum()),), generator=g))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)[:-1]]))
    return {"dense": torch.randn(batch, 4, generator=g), "ids": ids, "offsets": offsets,
            "labels": torch.randint(0, 2, (batch,), generator=g).float()}


def _dlrm_loss(model, batch):
    import torch
    logits = model(batch["dense"], batch["ids"], batch["offsets"])
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["labels"])


_register(Spec("dlrm", "recommendation", _dlrm, _dlrm_batch, _dlrm_loss, optimizer="adagrad",
               note="3 EmbeddingBag(sparse=True) tables, 8 samples; Adagrad takes the sparse gradients"))


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


def _to_double(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to_double(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to_double(v) for v in x)
    return x


def _perturbed(model, seed):
    """``model`` with every floating parameter moved by one float32 rounding error (relative 2^-24,
    random sign): what any other float32 implementation may do to it."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                sign = torch.randint(0, 2, p.shape, generator=g).to(p.dtype) * 2 - 1
                p.mul_(1 + sign * 2.0 ** -24)
    return model


def _zero_dropout(model):
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0


def _optimizer(kind, params):
    import torch
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4, foreach=True)
    if kind == "adagrad":  # sparse and dense gradients alike (foreach takes no sparse ones)
        return torch.optim.Adagrad(params, lr=0.05)
    return torch.optim.AdamW(params, lr=1e-3, foreach=True)


def _error_text(e):
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[:6])[:1500]


def _execute(spec, model, device, batches, steps, do_generate, phase=lambda label: None,
             keep_state=False, compiled=False):
    """Trains ``model`` (already initialized) on ``device`` for ``steps`` steps, then generates;
    ``compiled``: the loss runs through ``torch.compile(model, backend="tpu")``.
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
        forward = torch.compile(model, backend="tpu") if compiled else model
        for step in range(steps):
            batch = _to(batches[step], device)
            phase(f"step {step + 1} forward")
            loss = spec.loss(forward, batch)
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


def _dynamo_counts():
    """How Dynamo split the compiled run: graphs compiled, graph breaks by reason."""
    from torch._dynamo.utils import counters
    breaks = dict(counters["graph_break"])
    return {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(breaks.values()),
            "graph_break_reasons": {k.split("\n")[0][:160]: v
                                    for k, v in sorted(breaks.items(), key=lambda kv: -kv[1])[:3]}}


def _rel(a, b):
    if a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b):  # b, CPU's, is finite (run_model checks): a NaN never matches
        return float("inf")
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


def _beyond_noise(spec, model, batches, steps, cpu_losses, tpu_losses, bad_steps, rec):
    """The steps whose loss difference is more than float32 rounding makes of this model: the same
    CPU training in float64, and in float32 from weights moved by one rounding error, say how far
    two honest float32 implementations may drift apart (ReLU masks and BatchNorm over few values
    amplify rounding differences). Records the runs and the noise in ``rec``."""
    noise = [0.0] * steps
    rec["loss_noise_runs"] = {}

    def within(i):
        return abs(tpu_losses[i] - cpu_losses[i]) <= NOISE_FACTOR * noise[i]

    # the perturbed float32 runs first: cheap, and enough for most ill-conditioned models;
    # float64 (slow on CPU for convolutions) only when they do not cover the difference
    for label in ("perturbed 1", "perturbed 2", "float64"):
        if all(within(i) for i in bad_steps):
            break
        if label == "float64":
            run = _execute(spec, copy.deepcopy(model).double(), "cpu", _to_double(batches), steps, False)
        else:
            run = _execute(spec, _perturbed(copy.deepcopy(model), int(label[-1])), "cpu", batches, steps, False)
        if run["error"] or len(run["losses"]) != steps:
            rec["loss_noise_runs"][label] = run["error"]
            continue
        rec["loss_noise_runs"][label] = run["losses"]
        noise = [max(n, abs(c - r)) for n, c, r in zip(noise, cpu_losses, run["losses"])]
    rec["fp32_noise_rel"] = max(n / max(abs(c), 1e-12) for n, c in zip(noise, cpu_losses))
    bad_steps = [i for i in bad_steps if not within(i)]
    rec["loss_parity_within_noise"] = not bad_steps
    return bad_steps


def _trace_into(rec, spec, model, batches, steps, tpu_error, first_bad_step):
    """Traces the run up to where it first went wrong into ``rec["trace"]``; a mismatch whose
    ops all match CPU on their own inputs becomes ``drift``."""
    if tpu_error:
        t_steps, t_gen = steps, True
    elif first_bad_step is not None:
        t_steps, t_gen = first_bad_step + 1, False
    elif not rec.get("generate_parity", True):
        t_steps, t_gen = steps, True  # generation follows the training steps
    else:
        t_steps, t_gen = steps, spec.generate is not None
    t0 = time.perf_counter()
    try:
        rec["trace"] = _trace(spec, model, batches, t_steps, t_gen)
    except Exception as e:  # noqa: BLE001
        rec["trace"] = {"error": _error_text(e), "traceback": traceback.format_exc()[-3000:]}
    rec["trace"]["seconds"] = round(time.perf_counter() - t0, 2)
    tr = rec["trace"]
    fd = tr.get("first_divergence")
    if (rec["status"] == "mismatch" and not tr.get("error") and not tr.get("tpu_error")
            and not tr.get("replay_mismatches") and fd
            and fd.get("input_rel") is not None and fd["input_rel"] <= DRIFT_INPUT_TOL):
        # every tpu op matches CPU on its own inputs, and where the runs part, the op's inputs
        # were still equal to rounding: float32 rounding amplified, not a wrong op
        rec["status"] = "drift"
    rec["phase"] = "done"


def _status(rec, tpu_error):
    if tpu_error:
        return "error"
    if not (rec["loss_parity"] and rec.get("generate_parity", True)):
        return "mismatch"
    return "fallback" if rec["fallbacks"] else "pass"


def run_model(name, steps=3, trace="auto", mode=None, progress=None, compiled=False):
    """Runs one zoo model on CPU and tpu in this process; returns its result record (a dict).
    ``compiled``: tpu's forward and backward run as ``torch.compile(model, backend="tpu")``."""
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
    if compiled:
        rec["compiled"] = True
        trace = "never"  # the op trace records eager dispatch
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
    diverged = [i for i, v in enumerate(cpu["losses"]) if not math.isfinite(v)]
    if diverged:  # NaN on both sides would "match": such a model tests nothing
        rec.update(status="error", error=f"CPU reference diverged: loss {cpu['losses'][diverged[0]]} at step "
                   f"{diverged[0]}; nothing to compare")
        return rec

    rec["phase"] = "tpu"
    save(rec)
    torchtpu.metrics.reset()
    if compiled:  # Dynamo's counters are per process: count this model's graphs only
        from torch._dynamo.utils import counters
        counters.clear()
    tpu = _execute(spec, copy.deepcopy(model), "tpu", batches, steps, True, keep_state=True, compiled=compiled)
    if compiled:
        rec.update(_dynamo_counts())
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
    bad_steps = [i for i, r in enumerate(rels) if r > LOSS_RTOL]
    if bad_steps and not tpu["error"] and len(rels) == steps:
        rec["phase"] = "noise"
        save(rec)
        bad_steps = _beyond_noise(spec, model, batches, steps, cpu["losses"], tpu["losses"], bad_steps, rec)
    rec["loss_parity"] = not tpu["error"] and len(rels) == steps and not bad_steps
    first_bad_step = bad_steps[0] if bad_steps else None
    if spec.generate is not None:
        rec["generated_cpu"] = cpu["generated"]
        rec["generated_tpu"] = tpu["generated"]
        rec["generate_parity"] = (None if tpu["generated"] is None and tpu["error"]
                                  else tpu["generated"] == cpu["generated"])
    if tpu["error"]:
        rec["error"] = tpu["error"]
        rec["traceback"] = tpu["traceback"]
    else:
        rec["param_rel_diff"], rec["param_worst"] = _state_diff(tpu["state"], cpu["state"])
    rec["status"] = _status(rec, tpu["error"])
    rec["phase"] = "done"
    save(rec)

    if trace == "always" or (trace == "auto" and rec["status"] in ("mismatch", "error")):
        rec["phase"] = "trace"
        save(rec)
        _trace_into(rec, spec, model, batches, steps, tpu["error"], first_bad_step)
    rec["total_s"] = round(time.perf_counter() - started, 2)
    save(rec)
    return rec


# ---------------------------------------------------------------------------------------------
# Tracing: per-op outputs on CPU (float32 and float64) and tpu, and a CPU replay of every tpu op
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
        t = t.abs().double()
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


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _ok(rel=0.0, ratio=None, max_abs=0.0):
    return {"bad": False, "rel": rel, "ratio": ratio, "max_abs": max_abs, "note": ""}


def _bad(note, rel=float("inf"), ratio=None, max_abs=None):
    return {"bad": True, "rel": rel, "ratio": ratio, "max_abs": max_abs, "note": note}


def _compare_leaf(g, c, r, in_scale, tol_ref, tol_plain):
    """One output: tpu ``g`` against CPU float32 ``c`` and, when given, CPU float64 ``r``.

    With ``r``: bad when tpu's error against float64 exceeds ACCURACY_FACTOR times CPU float32's
    error plus ``tol_ref`` of the output's magnitude (tpu is clearly less accurate than CPU).
    Without: bad when ``|g - c|`` exceeds ``tol_plain`` of the largest magnitude among the op's
    inputs and this output."""
    import torch
    if isinstance(c, (bool, int, float)) and not isinstance(c, torch.Tensor):
        if not isinstance(g, (bool, int, float)):
            return _bad(f"got {type(g).__name__}")
        if isinstance(c, float) or isinstance(g, float):
            g, c = torch.tensor(float(g)), torch.tensor(float(c))
            r = torch.tensor(float(r)) if isinstance(r, (bool, int, float)) else None
        else:
            return _ok() if g == c else _bad(f"{g} vs {c}")
    if not isinstance(c, torch.Tensor):
        return _ok() if (g == c or isinstance(c, str)) else _bad(f"{g!r} vs {c!r}")
    if not isinstance(g, torch.Tensor):
        return _bad(f"got {type(g).__name__}")
    if tuple(g.shape) != tuple(c.shape):
        return _bad(f"shape {list(g.shape)} vs {list(c.shape)}")
    if c.numel() == 0:
        return _ok()
    if c.is_complex():
        g, c = torch.view_as_real(g.resolve_conj()), torch.view_as_real(c.resolve_conj())
        r = torch.view_as_real(r.resolve_conj()) if isinstance(r, torch.Tensor) and r.is_complex() else None
    if not c.is_floating_point():
        bad = int((g.to(c.dtype) != c).sum())
        return _bad(f"{bad} of {c.numel()} {str(c.dtype)[6:]} elements differ") if bad else _ok()
    g, c = g.double(), c.double()
    nan_g, nan_c = torch.isnan(g), torch.isnan(c)
    if not torch.equal(nan_g, nan_c):
        return _bad(f"NaN on tpu at {int((nan_g & ~nan_c).sum())}, on CPU at "
                    f"{int((nan_c & ~nan_g).sum())} of {c.numel()} elements")
    inf_c = torch.isinf(c)
    if not torch.equal(torch.isinf(g), inf_c) or not torch.equal(g[inf_c], c[inf_c]):
        return _bad("infinities differ")
    fin = torch.isfinite(c)
    if not fin.any():
        return _ok()
    diff = float((g[fin] - c[fin]).abs().max())
    usable = (isinstance(r, torch.Tensor) and r.is_floating_point()
              and tuple(r.shape) == tuple(c.shape))
    if usable:
        r = r.double()
        fin = fin & torch.isfinite(r)
        if not fin.any():
            usable = False
    if usable:
        mag = float(r[fin].abs().max())
        e_t = float((g[fin] - r[fin]).abs().max())
        e_c = float((c[fin] - r[fin]).abs().max())
        rel = e_t / max(mag, 1e-30)
        ratio = e_t / e_c if e_c > 0 else (float("inf") if e_t > 0 else 1.0)
        if e_t > ACCURACY_FACTOR * e_c + tol_ref * mag:
            return _bad(f"error vs float64 {rel:.1e} of the output's magnitude, CPU float32's "
                        f"{e_c / max(mag, 1e-30):.1e}", rel, ratio, diff)
        return _ok(rel, ratio, diff)
    mag = float(c[fin].abs().max())
    rel = diff / max(in_scale, mag, 1e-30)
    return _bad("", rel, None, diff) if rel > tol_plain else _ok(rel, None, diff)


def _compare(got, cpu, ref64, in_scale, tol_ref, tol_plain):
    """Every output (see :func:`_compare_leaf`); the worst one, bad ones first."""
    gl, cl = _leaves(got), _leaves(cpu)
    rl = _leaves(ref64) if ref64 is not None else None
    if len(gl) != len(cl):
        return _bad(f"{len(gl)} outputs vs {len(cl)}")
    if rl is not None and len(rl) != len(cl):
        rl = None
    worst = None
    for i, (g, c) in enumerate(zip(gl, cl)):
        res = _compare_leaf(g, c, rl[i] if rl else None, in_scale, tol_ref, tol_plain)
        if len(cl) > 1:
            res["note"] = f"output {i}" + (f": {res['note']}" if res["note"] else "")
        if worst is None or (res["bad"], res["rel"]) > (worst["bad"], worst["rel"]):
            worst = res
    return worst or _ok()


def _unordered_ties(name, args, kwargs):
    """Ops whose index output is unspecified among equal values (CPU's unstable sort returns them
    in an arbitrary order): their indices are checked by what they select, not compared."""
    base = name.split("::")[-1]
    if base == "sort.stable":
        return not kwargs.get("stable", False)
    return base.split(".")[0] in ("sort", "topk", "kthvalue", "median", "nanmedian", "mode")


def _tied_indices_ok(name, c_args, c_kwargs, got, ref):
    """sort / topk on tpu: do its indices pick, from the input, exactly CPU's values?"""
    import torch
    base = name.split("::")[-1].split(".")[0]
    if base not in ("sort", "topk") or not isinstance(got, list) or len(got) < 2:
        return True
    x = c_args[0]
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return True
    if base == "sort":
        dim = c_kwargs.get("dim", c_args[1] if len(c_args) > 1 and not name.endswith("stable") else -1)
    else:
        dim = c_kwargs.get("dim", c_args[2] if len(c_args) > 2 else -1)
    picked = torch.take_along_dim(x, got[1].to(torch.long), dim=dim)
    return torch.equal(picked.double().nan_to_num(7.5), ref[0].double().nan_to_num(7.5))


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


class _Tracer:
    """Records every ATen op (a TorchDispatchMode) with where it ran: the phase, the module whose
    forward issued it, or for backward ops the autograd node and the module whose forward created
    that node. With ``replay``, also runs each op on CPU (float32 and float64) on copies of its
    inputs and compares."""

    def __init__(self, model, replay, inputs=True):
        """``model``: the very module that will run (its submodules' names tag the ops);
        ``inputs``: also keep a sample of every op's input tensors."""
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten, tree_map

        self.records, self.replay_bad, self.phase, self.stack = [], [], "", []
        self.replays, self.replay_max = 0, {"op": None, "rel": 0.0}
        names = {id(m): n or "<model>" for n, m in model.named_modules()}
        self.param_names = {id(p): n for n, p in model.named_parameters()}
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

        def to_f64(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return x.double()
            if isinstance(x, torch.Tensor) and x.is_complex():
                return x.to(torch.complex128)
            return x

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.name()
                where = tracer.where()
                values = not _no_values(name)
                replay_this = (replay and values and not func.is_view
                               and not any(s in name for s in _NO_REPLAY))
                in_scale = 0.0
                if replay_this:
                    c_args, c_kwargs = tree_map(to_cpu, (args, kwargs))
                    in_scale = max(_abs_max(c_args), _abs_max(c_kwargs))
                    ins = _input_sample(c_args) if inputs else None
                else:
                    if values and not replay:
                        in_scale = max(_abs_max(args), _abs_max(kwargs))
                    ins = _input_sample(args) if inputs else None  # before an in-place op writes
                out = func(*args, **kwargs)
                snap = _snapshot(out) if values else None
                tied = _unordered_ties(name, args, kwargs)
                kept = snap[:1] if (tied and isinstance(snap, list)) else snap
                tracer.records.append({"op": name, "key": (name, _shape_key(out), where),
                                       "where": where, "out": kept, "scale": in_scale, "ins": ins})
                if replay_this:
                    tracer.check(func, name, where, c_args, c_kwargs, snap, kept, in_scale, tied,
                                 args, to_f64)
                return out

        self.modes = [Annotate(), Record()]

    def check(self, func, name, where, c_args, c_kwargs, snap, kept, in_scale, tied, args, to_f64):
        from torch.utils._pytree import tree_map
        try:
            ref = _snapshot(func(*c_args, **c_kwargs))
        except Exception:  # noqa: BLE001 - no CPU kernel for these arguments
            return
        try:
            a64, k64 = tree_map(to_f64, (c_args, c_kwargs))
            ref64 = _snapshot(func(*a64, **k64))
        except Exception:  # noqa: BLE001 - no float64 kernel: compared with float32 only
            ref64 = None
        self.replays += 1
        if tied:
            res = _compare(kept, ref[:1], ref64[:1] if ref64 else None, in_scale, REPLAY_ATOL,
                           REPLAY_TOL)
            if not res["bad"] and not _tied_indices_ok(name, c_args, c_kwargs, snap, ref):
                res = _bad("indices select other values than CPU's")
        else:
            res = _compare(snap, ref, ref64, in_scale, REPLAY_ATOL, REPLAY_TOL)
        if res["rel"] > self.replay_max["rel"]:
            self.replay_max = {"op": name, "rel": res["rel"], "ratio": res["ratio"]}
        if res["bad"]:
            self.replay_bad.append(dict(res, index=len(self.records) - 1, op=name, where=where,
                                        shapes=_describe_shapes(args), f64=ref64 is not None))

    def where(self):
        import torch
        node = torch._C._current_autograd_node()
        if node is not None:
            var = getattr(node, "variable", None)  # AccumulateGrad: the parameter
            if var is not None:
                return f"{self.phase}: AccumulateGrad of {self.param_names.get(id(var), '?')}"
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


def _input_sample(args):
    """The op's tensor arguments, each as an even sample of at most 2^16 elements, on CPU."""
    import torch
    from torch.utils._pytree import tree_flatten
    out = []
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor):
            t = t.detach().reshape(-1)
            if t.numel() > 1 << 16:
                t = t[:: math.ceil(t.numel() / (1 << 16))]
            out.append(t.to("cpu", copy=True))
    return out


def _input_rel(a, b):
    """Largest difference between two runs' samples of an op's inputs, each normalized by that
    input's largest magnitude."""
    import torch
    if a is None or b is None or len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        if x.numel() == 0:
            continue
        if not (y.is_floating_point() or y.is_complex()):
            if not torch.equal(x.to(y.dtype), y):
                return float("inf")
            continue
        x, y = x.double(), y.double()
        if not torch.equal(torch.isnan(x), torch.isnan(y)):
            return float("inf")
        fin = torch.isfinite(y) & torch.isfinite(x)
        if not fin.any():
            continue
        worst = max(worst, float((x[fin] - y[fin]).abs().max()) / max(float(y[fin].abs().max()), 1e-30))
    return worst


def _traced_run(spec, model, device, batches, steps, do_generate, replay, inputs=True):
    tracer = _Tracer(model, replay=replay, inputs=inputs)
    with tracer:
        res = _execute(spec, model, device, batches, steps, do_generate,
                       phase=lambda label: setattr(tracer, "phase", label))
    return tracer, res


def _trace(spec, model, batches, steps, do_generate):
    """Runs ``steps`` training steps (and ``generate``) traced on CPU float32, CPU float64 and tpu
    (with replay); returns the findings (see the module docstring)."""
    cpu_t, cpu_r = _traced_run(spec, copy.deepcopy(model), "cpu", batches, steps, do_generate, False)
    tpu_t, tpu_r = _traced_run(spec, copy.deepcopy(model), "tpu", batches, steps, do_generate, True)
    f64_t, f64_r = _traced_run(spec, copy.deepcopy(model).double(), "cpu", _to_double(batches), steps,
                               do_generate, False, inputs=False)
    out = {"steps": steps, "generate": do_generate, "cpu_ops": len(cpu_t.records),
           "tpu_ops": len(tpu_t.records), "tpu_error": tpu_r["error"],
           "tpu_traceback": tpu_r.get("traceback"), "cpu_error": cpu_r["error"],
           "f64_error": f64_r["error"], "replayed_ops": tpu_t.replays,
           "replay_largest": tpu_t.replay_max}

    # CPU float32 <-> float64: the same op sequence; tpu <-> CPU float32: aligned (device-specific
    # paths, e.g. attention kernels, differ)
    def key(r):
        return repr(r["key"])

    f64_of = {}
    sm64 = difflib.SequenceMatcher(None, [key(r) for r in cpu_t.records],
                                   [key(r) for r in f64_t.records], autojunk=False)
    for blk in sm64.get_matching_blocks():
        for k in range(blk.size):
            f64_of[blk.a + k] = blk.b + k
    sm = difflib.SequenceMatcher(None, [key(r) for r in cpu_t.records],
                                 [key(r) for r in tpu_t.records], autojunk=False)
    diverged, unmatched, prev_b = [], 0, 0
    for blk in sm.get_matching_blocks():
        unmatched += blk.b - prev_b
        for k in range(blk.size):
            c, t = cpu_t.records[blk.a + k], tpu_t.records[blk.b + k]
            if c["out"] is None:
                continue
            j = f64_of.get(blk.a + k)
            r64 = f64_t.records[j]["out"] if j is not None else None
            res = _compare(t["out"], c["out"], r64, c["scale"], TRACE_ATOL, TRACE_TOL)
            if res["bad"]:
                diverged.append(dict(res, index=blk.b + k, op=t["op"], where=t["where"],
                                     f64=r64 is not None, unaligned_ops_before=unmatched,
                                     input_rel=_input_rel(t["ins"], c["ins"])))
                if len(diverged) >= 8:
                    break
        if len(diverged) >= 8:
            break
        prev_b = blk.b + blk.size
    out["first_divergence"] = diverged[0] if diverged else None
    out["next_divergences"] = diverged[1:]
    out["aligned_ops"] = sum(b.size for b in sm.get_matching_blocks())
    only = {}  # ops present on one device only (device-specific paths), by name
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        for side, recs in (("cpu only", cpu_t.records[i1:i2]), ("tpu only", tpu_t.records[j1:j2])):
            for r in recs:
                only.setdefault(side, {}).setdefault(r["op"], 0)
                only[side][r["op"]] += 1
    out["unaligned"] = only

    bad = tpu_t.replay_bad
    out["replay_first"] = bad[0] if bad else None
    per_op = {}
    for b in bad:
        p = per_op.setdefault(b["op"], {"count": 0, "max_rel": 0.0, "max_ratio": None,
                                        "first_where": b["where"], "first_shapes": b["shapes"],
                                        "note": b["note"]})
        p["count"] += 1
        p["max_rel"] = max(p["max_rel"], b["rel"])
        if b["ratio"] is not None:
            p["max_ratio"] = max(p["max_ratio"] or 0.0, b["ratio"])
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

    rec = run_model(args.worker, steps=args.steps, trace=args.trace, mode=args.mode, progress=save,
                    compiled=args.compile)
    save(rec)


def run_in_subprocess(name, steps=3, trace="auto", mode=None, timeout=600, log=None, compiled=False):
    """Runs :func:`run_model` for one model in a fresh interpreter; a crash or a timeout becomes the
    record's ``status``."""
    with tempfile.TemporaryDirectory(prefix="torchtpu-models-") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "torchtpu.testing.models", "--worker", name, "--result", result,
               "--steps", str(steps), "--trace", trace]
        if mode:
            cmd += ["--mode", mode]
        if compiled:
            cmd.append("--compile")
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


def _replay_text(tr):
    rm = tr.get("replay_mismatches") or {}
    if rm:
        ops = sorted(rm.items(), key=lambda kv: -kv[1]["max_rel"])
        return ("replay: " + ", ".join(
            f"`{op}` ×{v['count']} ({v['note'] or 'off by ' + _fmt(v['max_rel'])}; "
            f"{_fmt_where(v['first_shapes'])})" for op, v in ops[:4])
            + (f", +{len(ops) - 4} more" if len(ops) > 4 else ""))
    if tr.get("replayed_ops"):
        return f"replay: all {tr['replayed_ops']} ops match CPU"
    return ""


def _divergence_text(r):
    tr = r.get("trace")
    if not tr:
        return "—"
    if tr.get("error") and not tr.get("first_divergence") and not tr.get("replay_first"):
        return "trace failed: " + tr["error"][:150]
    parts = []
    fd = tr.get("first_divergence")
    if fd:
        text = f"`{fd['op']}` in {_fmt_where(fd['where'])}: "
        text += fd["note"] if fd.get("note") else f"off by {_fmt(fd['rel'])} (normalized)"
        if fd.get("input_rel") is not None:
            text += f"; its inputs differed by {_fmt(fd['input_rel'])}"
        parts.append(text)
    else:
        parts.append("no aligned op beyond tolerance")
    if _replay_text(tr):
        parts.append(_replay_text(tr))
    if tr.get("tpu_error") and not r.get("error"):
        parts.append("traced tpu run raised: " + tr["tpu_error"][:150])
    return "; ".join(parts).replace("\n", " ")


_STATUS = {"pass": "pass", "fallback": "pass, CPU fallbacks", "drift": "drift (no wrong op)",
           "mismatch": "**mismatch**", "error": "**error**", "timeout": "**timeout**",
           "crash": "**crash**"}


def _status_text(r):
    s = r.get("status") or "?"
    return _STATUS.get(s, s)


COMPILED_NOTE = '; the tpu run through `torch.compile(model, backend="tpu")`'


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
        "# Model zoo on tpu against CPU PyTorch" + (", compiled" if args.compile else ""), "",
        f"Generated {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), "
        f"platform `{torchtpu.platform()}`, eager mode `{args.mode or 'strict'}`"
        f"{COMPILED_NOTE if args.compile else ''}; torch "
        f"{torch.__version__}, transformers {transformers.__version__}, torchvision "
        f"{torchvision.__version__}; the sweep took {seconds / 60:.1f} minutes. Command:", "",
        "```", cmd, "```", "",
        "Each model is built from a small config (nothing downloaded: 2 layers, hidden 32, vocab "
        "100, images 32-64 px) with `torch.manual_seed(0)`. The same initial weights train for "
        f"{args.steps} steps on CPU and on tpu, on the same batches, dropout off (AdamW for "
        "transformers, SGD with momentum for torchvision, `foreach=True` on both devices, Adagrad "
        "for the recommender's sparse gradients; "
        "detection models with frozen BatchNorm, as torchvision fine-tunes them). Text batches are 2 "
        "sequences of 16 tokens, the second right-padded by 4 (8 target tokens for "
        "encoder-decoders). Language models then `generate` 6 tokens greedily.", "",
        f"- *loss parity*: the largest relative difference of a step's loss; equal at ≤ {LOSS_RTOL:g}, "
        f"or within {NOISE_FACTOR}× the model's own float32 noise (shown in parentheses when "
        "measured: how far CPU float32 runs from weights moved by one rounding error end up, "
        "and a float64 run when those do not cover the difference).",
        "- *fallback ops*: ops that ran on the CPU during the tpu run "
        "(`torchtpu.metrics.cpu_fallbacks()`).",
        "- *first divergence* (models that differ or fail): the training steps run again on CPU "
        "float32, CPU float64 and tpu recording every ATen op's outputs (a `TorchDispatchMode`); "
        "the op sequences are aligned and the first op whose tpu output is off from float64 by "
        f"more than {ACCURACY_FACTOR}× CPU float32's error (plus {TRACE_ATOL:g} of its magnitude) "
        "is named, with where it ran (module, or autograd node and the module that created it) "
        "and how much its inputs already differed. *replay*: every tpu op is also run on CPU on "
        "copies of its own tpu inputs; ops off by more than "
        f"{ACCURACY_FACTOR}× CPU's error (plus {REPLAY_ATOL:g}) are wrong lowerings whatever the "
        "drift.",
        "- *drift (no wrong op)*: the losses differ beyond the noise, but every op matches CPU on "
        "its own inputs and where the runs part the op's inputs were equal to rounding (e.g. a "
        "ReLU mask flipping on a value within rounding of 0): float32 rounding amplified.",
        "- *time (s)*: the tpu run (training and generation; compiles included, except those "
        "the compile cache already held) / the CPU run / the model's whole subprocess (imports, "
        "both runs, noise runs and trace).", "",
        "| status | models |", "| --- | ---: |",
    ]
    for k in _STATUS:
        if counts.get(k):
            lines.append(f"| {_STATUS[k]} | {counts[k]} |")
    lines += ["", "| model | family | params | steps | status | loss parity | generate parity | "
              f"fallback ops | {'Dynamo graphs' if args.compile else 'first divergence'} | time (s) |",
              "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- | ---: |"]
    for r in records:
        gen = r.get("generate_parity")
        gen = "—" if gen is None else ("equal" if gen else "**differs**")
        fb = r.get("fallbacks") or {}
        fb_text = ", ".join(f"`{k}` ×{v}" for k, v in sorted(fb.items())) if fb else \
            ("none" if "fallbacks" in r else "—")
        rel = r.get("loss_rel_diff")
        lp = "—" if rel is None else _fmt(rel)
        if r.get("fp32_noise_rel") is not None:
            lp += f" (noise {_fmt(r['fp32_noise_rel'])})"
        div = _divergence_text(r)
        if r.get("compiled"):  # no op trace: how Dynamo split the model instead
            div = f"{r.get('graphs', '—')} graphs, {r.get('graph_breaks', '—')} graph breaks" + "".join(
                f"; `{k}` ×{v}" for k, v in (r.get("graph_break_reasons") or {}).items())
        if r.get("error"):
            # where tpu raised, the exception is the finding (the op sequences usually part
            # because the device takes another path); the replay verdict still helps
            verdict = _replay_text(r.get("trace") or {})
            div = ("**" + r["error"][:400].replace("|", "\\|").replace("\n", " ") + "**"
                   + (f"; until then {verdict}" if verdict else ""))
        time_text = " / ".join("—" if r.get(k) is None else f"{r[k]:.1f}"
                               for k in ("tpu_s", "cpu_s", "wall_s"))
        params = r.get("params")
        lines.append(f"| {r['model']} | {r['family']} | {params if params is not None else '—'} | "
                     f"{r.get('steps', '—')} | {_status_text(r)} | {lp} | {gen} | {fb_text} | {div} "
                     f"| {time_text} |")
    notes = [f"- {n}: {MODELS[n].note}" for n in (r["model"] for r in records)
             if n in MODELS and MODELS[n].note]
    if notes:
        lines += ["", "Model notes:", ""] + notes
    lines += ["", "Losses per step, CPU / tpu:", ""]
    for r in records:
        if r.get("loss_cpu"):
            tpu = r.get("loss_tpu") or []
            pairs = ", ".join(f"{c:.6f} / {tpu[i]:.6f}" if i < len(tpu) else f"{c:.6f} / —"
                              for i, c in enumerate(r["loss_cpu"]))
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
    parser.add_argument("--compile", action="store_true",
                        help='train on tpu through torch.compile(model, backend="tpu")')
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
                                         timeout=args.timeout, log=log, compiled=args.compile))
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
