"""Models for the trainer: Hugging Face architectures built from a config, never downloaded."""

from pathlib import Path

import torch


def build_model(config, vocab_size: int, seq_len: int) -> torch.nn.Module:
    """A causal language model with randomly initialized weights. ``config.path`` names a local
    folder holding a config.json; otherwise ``config.type`` is a transformers model type and
    ``config.config`` its values. The vocabulary and context length follow the data unless set."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if config.path is not None:
        if not (Path(config.path) / "config.json").is_file():
            raise FileNotFoundError(f"model.path: no config.json in '{config.path}'")
        hf_config = AutoConfig.from_pretrained(config.path, local_files_only=True, **config.config)
    else:
        # Byte-level data has no special tokens.
        values = {"vocab_size": vocab_size, "bos_token_id": None, "eos_token_id": None,
                  **config.config}
        if config.type == "gpt2":
            values.setdefault("n_positions", seq_len)
        else:
            values.setdefault("max_position_embeddings", seq_len)
        try:
            hf_config = AutoConfig.for_model(config.type, **values)
        except ValueError as e:
            raise ValueError(f"model.type: {e}") from None
    model = AutoModelForCausalLM.from_config(hf_config)
    if getattr(model, "loss_type", None) is None:
        model.loss_type = "ForCausalLM"  # the default, named so that transformers does not warn
    return model


def causal_lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of ``ids`` (the model shifts the labels)."""
    return model(input_ids=ids, labels=ids).loss


@torch.no_grad()
def sample(model, prompt: torch.Tensor, tokens: int, context: int, temperature=1.0, top_k=None,
           generator=None) -> torch.Tensor:
    """``tokens`` new ids after ``prompt``. The model always sees a window of exactly ``context``
    ids (the text so far at its start, padding after it): a causal model's logits at position t
    do not depend on what comes later, and one shape means one compiled program for every token,
    where a growing input would compile anew for each."""
    device = next(model.parameters()).device
    text = prompt.tolist()
    for _ in range(tokens):
        visible = text[-context:]
        window = torch.tensor([visible + [0] * (context - len(visible))]).to(device)
        # All logits come back (a few hundred KB): picking one position on the device would be a
        # different program for every position.
        logits = model(input_ids=window).logits[0].float().cpu()[len(visible) - 1] / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        text.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)))
    return torch.tensor(text[len(prompt):])
