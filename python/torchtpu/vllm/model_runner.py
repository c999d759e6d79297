"""vLLM's model runner on a tpu device: vLLM's GPU model runner, with each batch padded to its
token bucket (buckets.py) so that the model's programs depend on the bucket only, its inputs
prepared on the host, sampling at the requests' bucket (sampling.py), and a KV cache of plain
per-layer tensors (vLLM carves its cache out of one int8 buffer through dtype views)."""

import dataclasses
import functools

import torch

import torchtpu
from vllm.logger import init_logger
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from .attention import TpuAttentionImpl
from .buckets import MIN_GRID, MIN_TOKENS, BatchBuckets, every_bucket
from .paged_attention import paged_attention
from .sampling import cut_rows, keep_parameters_on_host, pads_safely, padded_metadata

logger = init_logger("vllm.torchtpu")  # under "vllm": vLLM configures that logger


def copy_whole_buffer_to_device(buffer: CpuGpuBuffer, n: int | None = None) -> torch.Tensor:
    """``CpuGpuBuffer.copy_to_gpu`` copying the whole host buffer (a few KB) where vLLM copies its
    first ``n`` elements (the number of requests or tokens): a copy into a part of a device buffer
    is a program per part. (Reading a part needs no such care: torchtpu downloads a small storage
    whole.)"""
    if buffer.gpu is not buffer.cpu:  # not one of the HOST_BUFFERS
        buffer.gpu.copy_(buffer.cpu, non_blocking=True)
    return buffer.gpu if n is None else buffer.gpu[:n]


# vLLM's runner computes the batch's positions and sequence lengths on the device, with slices of
# these buffers at the batch's exact token and request counts: a handful of small programs for
# every new count. Kept on the host, that bookkeeping is numpy-speed work and compiles nothing;
# what the model reads is uploaded at the token bucket (``load_model``, ``_prepare_inputs``).
HOST_TENSORS = ("num_computed_tokens", "positions", "seq_lens")
HOST_BUFFERS = ("req_indices", "query_pos", "num_scheduled_tokens", "query_start_loc")


def without_eager_padding(method):
    """The runner's work runs with torchtpu's eager padding off: its batches come at bucket sizes
    already, and eager padding, seeing those sizes vary, would run some ops in padded programs of
    their own (gathers) next to the exact ones the warm-up compiled."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        with torchtpu.padding(False):
            return method(*args, **kwargs)
    return call


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        CpuGpuBuffer.copy_to_gpu = copy_whole_buffer_to_device  # also the block tables' buffers
        super().__init__(vllm_config, device)
        for name in HOST_TENSORS:
            setattr(self, name, getattr(self, name).cpu())
        for name in HOST_BUFFERS:
            buffer = getattr(self, name)
            buffer.gpu = buffer.cpu
        keep_parameters_on_host(self.input_batch)
        self.buckets = BatchBuckets.of(vllm_config)  # tokens; pages are known with the KV cache
        self.sampled_rows = None  # (padded, exact): the rows of the step's logits_indices
        self.step_logits = None  # (padded, exact): the step's logits, and the rows sampled

    def may_reinitialize_input_batch(self, *args, **kwargs):
        super().may_reinitialize_input_batch(*args, **kwargs)
        keep_parameters_on_host(self.input_batch)

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        """The rows to sample (one per request), padded to the requests' bucket and on the device:
        ``hidden_states[logits_indices]`` is then one program per pair of buckets."""
        logits_indices, *rest = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        rows = len(logits_indices)
        padded = logits_indices.new_zeros(self.buckets.requests(rows))
        padded[:rows] = logits_indices
        self.sampled_rows = (len(padded), rows)
        return (padded.to(self.device), *rest)

    execute_model = without_eager_padding(GPUModelRunner.execute_model)
    sample_tokens = without_eager_padding(GPUModelRunner.sample_tokens)

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        padded = self.buckets.tokens(batch.num_tokens)
        return (mode, dataclasses.replace(batch, num_tokens=padded), *rest)

    def load_model(self, *args, **kwargs):
        super().load_model(*args, **kwargs)
        forward_on_device = self.model.forward

        def forward(*args, positions, **kwargs):
            """The positions, a slice of the host buffer at the token bucket, uploaded."""
            return forward_on_device(*args, positions=positions.to(self.device), **kwargs)
        self.model.forward = forward
        logits_at_exact_rows = self.model.compute_logits

        def compute_logits(hidden_states):
            """The logits of the sampled rows, computed at the requests' bucket: the vocabulary
            projection, the largest matmul of a decoding step, is then one program per bucket.
            A step's rows come padded already (``_prepare_inputs``); others (a dummy sampler run)
            are padded here."""
            rows = hidden_states.shape[0]
            exact = self.sampled_rows[1] if self.sampled_rows and self.sampled_rows[0] == rows else rows
            self.sampled_rows = None
            padding = self.buckets.requests(rows) - rows
            if padding > 0:
                hidden_states = torch.cat([hidden_states, hidden_states.new_zeros(padding, *hidden_states.shape[1:])])
            logits = logits_at_exact_rows(hidden_states)
            self.step_logits = (logits, logits[:exact])
            return self.step_logits[1]
        self.model.compute_logits = compute_logits

    def _sample(self, logits, spec_decode_metadata):
        """Sampling at the requests' bucket (sampling.py), where the step's logits come padded;
        at the exact number of requests where a logits processor needs that. Either way the
        per-request parameters, kept on the host, go to the device with the logits' rows."""
        padded, exact = self.step_logits or (None, None)
        self.step_logits = None
        if spec_decode_metadata is not None:
            return super()._sample(logits, spec_decode_metadata)
        metadata = self.input_batch.sampling_metadata
        self.input_batch.update_async_output_token_ids()
        sampled = padded if logits is exact and pads_safely(metadata) else logits
        output = self.sampler(logits=sampled,
                              sampling_metadata=padded_metadata(metadata, sampled.shape[0], self.device))
        return cut_rows(output, logits.shape[0])

    def _prepare_padding_mask(self, num_tokens_unpadded, num_tokens_padded):
        """Which of the batch's tokens are padding: made on the host (vLLM fills two slices of a
        device buffer, programs per token count)."""
        mask = torch.arange(num_tokens_padded) >= num_tokens_unpadded
        return mask.to(self.device)

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes, kv_cache_allocation_context=None):
        kv_caches = {}
        for group in kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            for name in group.layer_names:
                blocks = kv_cache_config.num_blocks
                kv_caches[name] = torch.zeros(blocks, spec.num_kv_heads, spec.block_size, 2 * spec.head_size,
                                              dtype=spec.dtype, device=self.device)
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context, self.kv_caches)
        return kv_caches

    @without_eager_padding
    def warm_up_buckets(self):
        """Compiles, before the first request, the programs of every bucket: the model's at each
        token bucket, sampling at each requests' bucket, and paged attention's at each grid."""
        sizes = every_bucket(MIN_TOKENS, self.buckets.tokens(self.buckets.max_tokens))
        for i, n in enumerate(sizes):
            logger.info("torchtpu: warming up the model at %d tokens (%d/%d)", n, i + 1, len(sizes))
            hidden_states, _ = self._dummy_run(n, force_attention=True)
            self._warm_up_sampling(hidden_states)
        self._warm_up_attention()
        torch.tpu.synchronize()

    def _warm_up_sampling(self, hidden_states):
        """The gather of the rows to sample, their logits and vLLM's sampler warm-up (greedy, and
        random with top-k and top-p), at each requests' bucket a batch of these tokens can have."""
        most = self.buckets.requests(min(hidden_states.shape[0], self.buckets.max_requests))
        for requests in every_bucket(MIN_GRID, most):
            rows = torch.zeros(requests, dtype=self.query_start_loc.cpu.dtype).to(self.device)
            self._dummy_sampler_run(hidden_states[rows])

    def _warm_up_attention(self):
        kv_cache = self.kv_caches[0]
        grids = list(BatchBuckets.of(self.vllm_config, kv_cache.shape[2]).attention_grids())
        logger.info("torchtpu: warming up paged attention at %d grids", len(grids))
        impl = next(layer.impl for layer in self.compilation_config.static_forward_context.values()
                    if isinstance(getattr(layer, "impl", None), TpuAttentionImpl))
        for tokens, requests, queries, pages in grids:
            query = kv_cache.new_zeros(tokens, impl.num_heads, impl.head_size)
            tokens_of_grid, positions = (torch.zeros(requests, queries, dtype=torch.int32, device=self.device)
                                         for _ in range(2))
            table = torch.zeros(requests, pages, dtype=torch.int32, device=self.device)
            paged_attention(query, kv_cache, table, tokens_of_grid, positions, scale=impl.scale)
