"""vLLM's attention backend on tpu: the metadata of a scheduled batch, laid out at bucket sizes on
the host, and the layer's forward: write the new keys and values into their cache slots, then
``paged_attention`` (a torchtpu kernel) over the block table. No CUDA, Triton or ``vllm._C``."""

from dataclasses import dataclass

import numpy as np
import torch

from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, CommonAttentionMetadata)
from vllm.v1.kv_cache_layout import KVCacheLayout

from .buckets import BatchBuckets
from .paged_attention import paged_attention


class TpuAttentionBackend(AttentionBackend):
    supported_dtypes = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"  # registered under this name by the platform

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBHNC,)  # [blocks, kv_heads, block_size, keys and values]

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuAttentionMetadata:
    """One batch at bucket sizes, on the device. ``slot_blocks`` and ``slot_offsets`` [tokens]:
    where each token's key and value go (padding tokens: block 0, vLLM's null block, never read);
    the rest are paged_attention's arguments."""
    num_tokens: int
    slot_blocks: torch.Tensor
    slot_offsets: torch.Tensor
    block_table: torch.Tensor
    query_tokens: torch.Tensor
    query_positions: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.buckets = BatchBuckets.of(vllm_config, self.block_size)

    def build(self, common_prefix_len: int, cm: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        n = cm.num_reqs
        starts = cm.query_start_loc_cpu[: n + 1].numpy().astype(np.int64)
        seq_lens = (cm.seq_lens_cpu_upper_bound if cm.seq_lens_cpu_upper_bound is not None
                    else cm.seq_lens.cpu())[:n].numpy().astype(np.int64)
        query_lens = np.diff(starts)
        tokens = self.buckets.tokens(int(starts[-1]))
        requests = self.buckets.requests(n)
        queries = self.buckets.queries(int(query_lens.max(initial=1)))
        pages = self.buckets.pages(-(-int(seq_lens.max(initial=1)) // self.block_size))

        table = np.zeros((requests, pages), np.int32)
        rows = cm.block_table_tensor[:n].cpu().numpy()
        columns = min(pages, rows.shape[1])  # pages past the table's width stay 0: masked
        table[:n, :columns] = rows[:, :columns]
        grid = np.arange(queries)[None, :]
        in_query = grid < query_lens[:, None]
        query_tokens = np.zeros((requests, queries), np.int32)
        query_positions = np.full((requests, queries), -1, np.int32)
        query_tokens[:n] = np.where(in_query, starts[:-1, None] + grid, 0)
        query_positions[:n] = np.where(in_query, (seq_lens - query_lens)[:, None] + grid, -1)

        positions = query_positions[:n][in_query]  # in token order: requests are contiguous
        request_of_token = np.repeat(np.arange(n), query_lens)
        slot_blocks = np.zeros(tokens, np.int64)
        slot_offsets = np.zeros(tokens, np.int64)
        # vLLM's dummy batches (warm-up, profiling) may claim more tokens than a request can hold
        page = np.minimum(positions // self.block_size, table.shape[1] - 1)
        slot_blocks[: len(positions)] = table[request_of_token, page]
        slot_offsets[: len(positions)] = positions % self.block_size

        def on_device(a):
            return torch.from_numpy(a).to(self.device)
        return TpuAttentionMetadata(tokens, on_device(slot_blocks), on_device(slot_offsets), on_device(table),
                                    on_device(query_tokens), on_device(query_positions))


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None, **extra):
        refused = {"ALiBi": alibi_slopes is not None, "sliding-window attention": sliding_window is not None,
                   "logits soft-capping": bool(logits_soft_cap),
                   "KV cache sharing across layers": kv_sharing_target_layer_name is not None}
        for feature, used in refused.items():
            if used:
                raise NotImplementedError(f"torchtpu's vLLM attention does not support {feature} yet")
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        md = attn_metadata
        if md is None:  # a profiling run without a KV cache
            return output.zero_()
        if query.shape[0] != md.num_tokens:
            raise RuntimeError(f"attention got {query.shape[0]} tokens; the batch was built for "
                               f"{md.num_tokens} (the runner's and the backend's buckets disagree)")
        kv_cache[md.slot_blocks, :, md.slot_offsets] = torch.cat([key, value], -1).to(kv_cache.dtype)
        # contiguous: the kernel's program then depends on the grid only, not on where the model's
        # query view lies in its QKV projection (the warm-up compiled it for each grid)
        result = paged_attention(query.contiguous(), kv_cache, md.block_table, md.query_tokens, md.query_positions,
                                 scale=self.scale)
        output.copy_(result.reshape(output.shape))
        return output
