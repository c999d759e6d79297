"""Where each scheduled token's key and value go in the KV cache (vLLM's ``slot_mapping``), in
place of vLLM's Triton kernel. Computed on the host: the inputs are a few hundred integers, and a
device program would be compiled per number of tokens."""

import numpy as np
import torch


def _on_host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.cpu().numpy().reshape(-1).astype(np.int64)


# The parameters are the Triton kernel's, by name: vLLM passes them by keyword.
def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                         block_table_stride, slot_mapping_ptr, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE,
                         TOTAL_CP_RANK, CP_KV_CACHE_INTERLEAVE_SIZE, PAD_ID, BLOCK_SIZE):
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("vLLM on torchtpu does not support context parallelism")
    starts = _on_host(query_start_loc_ptr)
    positions = _on_host(positions_ptr)[:num_tokens]
    table = block_table_ptr.cpu().numpy().reshape(-1, block_table_stride)
    request = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    slots = np.full(max_num_tokens, PAD_ID, np.int64)
    blocks = table[request, positions // KV_CACHE_BLOCK_SIZE].astype(np.int64)
    slots[:num_tokens] = blocks * KV_CACHE_BLOCK_SIZE + positions % KV_CACHE_BLOCK_SIZE
    slot_mapping_ptr[:max_num_tokens].copy_(torch.from_numpy(slots))
