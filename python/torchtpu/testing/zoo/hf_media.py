"""Hugging Face models of speech, images and both images and text, built from small configs,
with their batches.

Importing this module registers them in ``MODELS``."""

from .hf_text import from_config, hf_loss
from .specs import BATCH, BOS, EOS, PAD, VOCAB, Spec, gen, image_batch, register, tokens


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
    g = gen(step)
    return {"input_features": torch.randn(BATCH, 16, 32, generator=g),
            "labels": tokens(g, seq=8)}


def _whisper_generate(model, batch):
    # the plain greedy loop of GenerationMixin (Whisper's own generate adds language detection and
    # timestamp logic that needs a tokenizer-backed generation config)
    from transformers import GenerationMixin
    return GenerationMixin.generate(model, input_features=batch["input_features"], max_new_tokens=6,
                                    min_new_tokens=6, do_sample=False)


register(Spec("whisper", "HF speech", _whisper, _whisper_batch, hf_loss, generate=_whisper_generate))


def _waveform_batch(step):
    """0.1 s of 16 kHz audio per clip and a binary label."""
    import torch
    g = gen(step)
    return {"input_values": torch.randn(BATCH, 1600, generator=g),
            "labels": torch.randint(0, 2, (BATCH,), generator=g)}


# wav2vec2's feature encoder (strided 1-d convolutions, group norm), its grouped convolutional
# position embedding and a transformer; HuBERT shares the architecture
_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4, num_labels=2, hidden_dropout=0.0, attention_dropout=0.0,
              activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0)
for _name, _prefix in [("wav2vec2", "Wav2Vec2"), ("hubert", "Hubert")]:
    register(Spec(_name, "HF speech", from_config(_prefix + "Config", _prefix + "ForSequenceClassification",
                                                  **_AUDIO), _waveform_batch, hf_loss))


def _vit():
    import transformers
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0, num_labels=10)
    return transformers.ViTForImageClassification(cfg)


register(Spec("vit", "HF vision", _vit, image_batch, hf_loss))

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
    register(Spec(_name, "HF vision", from_config(_config, _model, num_labels=10, **_kw), image_batch,
                  hf_loss))


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
    g = gen(step)
    ids = tokens(g, seq=12)
    ids[:, 0] = BOS
    ids[0, -1] = EOS
    ids[1, 7] = EOS
    ids[1, 8:] = PAD
    mask = (torch.arange(12) < torch.tensor([[12], [8]])).long()
    return {"input_ids": ids, "attention_mask": mask,
            "pixel_values": torch.randn(BATCH, 3, 32, 32, generator=g)}


register(Spec("clip", "HF multimodal", _clip, _clip_batch,
              lambda m, b: m(**b, return_loss=True).loss))
