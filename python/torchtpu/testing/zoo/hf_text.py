"""Hugging Face language models built from small configs: decoders (causal LM, with greedy
``generate``), encoders (masked LM) and encoder-decoders, with their token batches.

Importing this module registers them in ``MODELS``."""

import functools

from .specs import BOS, EOS, PAD, VOCAB, Spec, gen, register, tokens


def _causal_batch(step):
    import torch
    g = gen(step)
    ids = tokens(g)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # the second sequence is right-padded
    ids[1, -4:] = PAD
    labels = ids.clone()
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _masked_batch(step, pad=PAD, mask_id=3):
    import torch
    g = gen(step)
    ids = tokens(g, low=4)
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
    g = gen(step)
    src = tokens(g)
    mask = torch.ones_like(src)
    mask[1, -4:] = 0
    src[1, -4:] = PAD
    labels = tokens(g, seq=8)
    return {"input_ids": src, "attention_mask": mask, "labels": labels}


def hf_loss(model, batch):
    """The loss a Hugging Face model computes itself from the batch's ``labels``."""
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


def from_config(config_cls, model_cls, **kw):
    """A build function: transformers' ``model_cls`` from ``config_cls(**kw)``."""
    def build():
        import transformers
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kw))
    return build


def _decoder(name, config_cls, model_cls, **extra):
    kw = dict(_lm_common(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              attention_dropout=0.0)
    register(Spec(name, "HF decoder", from_config(config_cls, model_cls, **dict(kw, **extra)), _causal_batch,
                  hf_loss, generate=_causal_generate))


def _gpt2():
    import transformers
    cfg = transformers.GPT2Config(n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, **_lm_common())
    return transformers.GPT2LMHeadModel(cfg)


register(Spec("gpt2", "HF decoder", _gpt2, _causal_batch, hf_loss, generate=_causal_generate))
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
    register(Spec(name, "HF decoder", from_config(config_cls, model_cls, **dict(kw, **extra)), _causal_batch,
                  hf_loss, generate=_causal_generate))


_gpt_style("gptj", "GPTJConfig", "GPTJForCausalLM", rotary_dim=4)
_gpt_style("codegen", "CodeGenConfig", "CodeGenForCausalLM", rotary_dim=4, n_ctx=64)
_gpt_style("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", multi_query=True)


def _mpt():
    import transformers
    cfg = transformers.MptConfig(d_model=32, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=64,
                                 resid_pdrop=0.0, emb_pdrop=0.0, attn_config={"attn_pdrop": 0}, **_lm_common())
    return transformers.MptForCausalLM(cfg)


register(Spec("mpt", "HF decoder", _mpt, _causal_batch, hf_loss, generate=_causal_generate))


def _encoder(name, config_cls, model_cls, **extra):
    kw = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, pad_token_id=PAD)
    register(Spec(name, "HF encoder", from_config(config_cls, model_cls, **dict(kw, **extra)), _masked_batch,
                  hf_loss))


def _roberta():
    import transformers
    cfg = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64 + 2, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2)
    return transformers.RobertaForMaskedLM(cfg)


_encoder("bert", "BertConfig", "BertForMaskedLM")
register(Spec("roberta", "HF encoder", _roberta, lambda s: _masked_batch(s, pad=1), hf_loss))
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
    register(Spec(name, family, from_config(config_cls, model_cls, **kw), batch, hf_loss))


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
    register(Spec(name, "HF encoder-decoder", from_config(config_cls, model_cls, **dict(kw, **extra)),
                  _seq2seq_batch, hf_loss, generate=_seq2seq_generate))


register(Spec("t5", "HF encoder-decoder", _t5, _seq2seq_batch, hf_loss, generate=_seq2seq_generate))
_bart_like("bart", "BartConfig", "BartForConditionalGeneration")
_bart_like("mbart", "MBartConfig", "MBartForConditionalGeneration")
_bart_like("marian", "MarianConfig", "MarianMTModel", decoder_start_token_id=PAD, decoder_vocab_size=VOCAB)
_bart_like("pegasus", "PegasusConfig", "PegasusForConditionalGeneration", decoder_start_token_id=PAD)
