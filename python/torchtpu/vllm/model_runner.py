"""vLLM's model runner on a tpu device: vLLM's GPU model runner, with each batch padded to its
token bucket (buckets.py) so that the model's programs depend on the bucket only, and a KV cache of
plain per-layer tensors (vLLM carves its cache out of one int8 buffer through dtype views)."""

import dataclasses

import torch

import torchtpu
from vllm.logger import init_logger
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from .attention import TpuAttentionImpl
from .buckets import MIN_TOKENS, BatchBuckets, every_bucket
from .paged_attention import paged_attention

logger = init_logger("vllm.torchtpu")  # under "vllm": vLLM configures that logger


def copy_whole_buffer_to_device(buffer: CpuGpuBuffer, n: int | None = None) -> torch.Tensor:
    """``CpuGpuBuffer.copy_to_gpu`` copying the whole host buffer (a few KB): a copy into the
    first ``n`` elements would be a program per ``n``, the number of requests or tokens."""
    buffer.gpu.copy_(buffer.cpu, non_blocking=True)
    return buffer.gpu if n is None else buffer.gpu[:n]


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        CpuGpuBuffer.copy_to_gpu = copy_whole_buffer_to_device  # also the block tables' buffers
        super().__init__(vllm_config, device)
        self.buckets = BatchBuckets.of(vllm_config)  # tokens; pages are known with the KV cache

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        padded = self.buckets.tokens(batch.num_tokens)
        return (mode, dataclasses.replace(batch, num_tokens=padded), *rest)

    def load_model(self, *args, **kwargs):
        super().load_model(*args, **kwargs)
        logits_at_exact_rows = self.model.compute_logits

        def compute_logits(hidden_states):
            """The logits of the sampled rows, computed at the requests' bucket: the vocabulary
            projection, the largest matmul of a decoding step, is then one program per bucket."""
            rows = hidden_states.shape[0]
            padding = self.buckets.requests(rows) - rows
            # exact storage: eager mode's own padding would make the projection a second program
            # for the same bucket once it saw the number of rows vary
            with torchtpu.padding(False):
                if padding > 0:
                    hidden_states = torch.cat([hidden_states, hidden_states.new_zeros(padding, *hidden_states.shape[1:])])
                return logits_at_exact_rows(hidden_states)[:rows]
        self.model.compute_logits = compute_logits

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

    def warm_up_buckets(self):
        """Compiles, before the first request, the programs of every bucket: the model's at each
        token bucket, and paged attention's at each grid."""
        sizes = every_bucket(MIN_TOKENS, self.buckets.tokens(self.buckets.max_tokens))
        for i, n in enumerate(sizes):
            logger.info("torchtpu: warming up the model at %d tokens (%d/%d)", n, i + 1, len(sizes))
            self._dummy_run(n, force_attention=True)
        with torchtpu.padding(False):
            self._warm_up_attention()
        torch.tpu.synchronize()

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
