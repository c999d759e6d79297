"""vLLM's sampler run at the requests' bucket: the logits of a step come padded to a power of two of
rows (model_runner.py), and the per-request sampling parameters are padded on the host to match, so
that sampling compiles one set of programs per bucket, not per number of requests. The padded rows
repeat the first request's parameters (valid values) and their samples are dropped."""

import dataclasses

import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.logits_processor.builtin import (LogitBiasLogitsProcessor, MinPLogitsProcessor,
                                                      MinTokensLogitsProcessor)
from vllm.v1.sample.metadata import SamplingMetadata

# The input batch's per-request parameters, which vLLM copies into device buffers at the exact
# number of requests (a program per number): kept on the host, where they are padded per step.
HOST_PARAMETERS = ("temperature", "top_p", "top_k", "frequency_penalties", "presence_penalties",
                   "repetition_penalties")
PENALTIES = ("frequency_penalties", "presence_penalties", "repetition_penalties")
# Logits processors that index the logits by request and so work on padded rows unchanged.
ROW_INDEXED = (LogitBiasLogitsProcessor, MinTokensLogitsProcessor)


def keep_parameters_on_host(input_batch) -> None:
    for name in HOST_PARAMETERS:
        setattr(input_batch, name, getattr(input_batch, f"{name}_cpu_tensor"))
    input_batch.sampling_metadata = input_batch._make_sampling_metadata()


def pads_safely(metadata: SamplingMetadata) -> bool:
    """Whether every logits processor in use works on padded rows: min-p keeps a tensor of the exact
    number of requests, and a custom processor may too (those batches sample at exact sizes)."""
    for processor in metadata.logitsprocs.all:
        if isinstance(processor, MinPLogitsProcessor):
            if processor.min_p_count:
                return False
        elif not isinstance(processor, ROW_INDEXED):
            return False
    return True


def pad_rows(tensor: torch.Tensor | None, rows: int, device) -> torch.Tensor | None:
    """``tensor``'s rows followed by copies of its first, ``rows`` in all, on the device."""
    if tensor is None:
        return None
    host = tensor.cpu()
    padding = host[:1].expand(rows - host.shape[0], *host.shape[1:])
    return torch.cat([host, padding]).to(device)


def padded_metadata(metadata: SamplingMetadata, rows: int, device) -> SamplingMetadata:
    """``metadata`` for ``rows`` requests, the batch's followed by copies of its first, its
    tensors on the device."""
    padded = {name: pad_rows(getattr(metadata, name), rows, device)
              for name in ("temperature", "top_p", "top_k", "prompt_token_ids", "allowed_token_ids_mask")}
    if not metadata.no_penalties:
        padded.update({name: pad_rows(getattr(metadata, name), rows, device) for name in PENALTIES})
    tokens = metadata.output_token_ids
    if tokens:
        padded["output_token_ids"] = list(tokens) + [[] for _ in range(rows - len(tokens))]
    return dataclasses.replace(metadata, **padded)


def cut_rows(output: SamplerOutput, rows: int) -> SamplerOutput:
    """The sampler's results for the batch's first ``rows`` requests."""
    logprobs = output.logprobs_tensors
    if logprobs is not None:
        logprobs = logprobs._replace(**{name: getattr(logprobs, name)[:rows] for name in
                                        ("logprob_token_ids", "logprobs", "selected_token_ranks")
                                        if getattr(logprobs, name).numel()})
    return SamplerOutput(sampled_token_ids=output.sampled_token_ids[:rows], logprobs_tensors=logprobs)
