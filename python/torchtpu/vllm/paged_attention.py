"""Paged attention over vLLM's KV cache, as a torchtpu kernel (a JAX function, ``torchtpu.kernels``).

One call serves a whole scheduled batch, prefills and decodes mixed. The batch arrives at bucket
sizes (``buckets.py``), so the program depends only on the buckets: the requests' query tokens are
laid out as a ``[requests, query bucket]`` grid (``query_tokens``), each request's keys and values
are gathered from its pages through the block table, and a key is visible to a query token when
its position is at most the token's (``query_positions``; -1 marks a grid cell without a token).
"""

import jax
import jax.numpy as jnp

from torchtpu.kernels import jax_op


@jax_op("torchtpu_vllm::paged_attention")
def paged_attention(query, kv_cache, block_table, query_tokens, query_positions, scale=1.0):
    """``query`` [tokens, heads, head_size]; ``kv_cache`` [blocks, kv_heads, block_size,
    2 * head_size] (keys, then values, in the last dimension); ``block_table`` [requests,
    pages]; ``query_tokens`` and ``query_positions`` [requests, queries]. Returns the attention
    output, [tokens, heads, head_size]; rows of tokens outside the grid are zero."""
    tokens, heads, head_size = query.shape
    kv_heads, block_size = kv_cache.shape[1], kv_cache.shape[2]
    requests, pages = block_table.shape
    group = heads // kv_heads

    # [requests, kv_heads, keys, 2 * head_size]: each request's pages in order
    kv = kv_cache[block_table].transpose(0, 2, 1, 3, 4).reshape(requests, kv_heads, pages * block_size, -1)
    keys, values = kv[..., :head_size], kv[..., head_size:]
    q = query[query_tokens].reshape(requests, -1, kv_heads, group, head_size)

    scores = jnp.einsum("rqkgd,rkld->rkgql", q, keys, preferred_element_type=jnp.float32) * scale
    visible = jnp.arange(pages * block_size)[None, None, :] <= query_positions[:, :, None]  # [r, q, l]
    scores = jnp.where(visible[:, None, None], scores, -jnp.inf)
    # a grid cell without a token sees no key: give it a finite row, its output is dropped
    scores = jnp.where(visible.any(-1)[:, None, None, :, None], scores, 0.0)
    weights = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    out = jnp.einsum("rkgql,rkld->rqkgd", weights, values, preferred_element_type=jnp.float32)
    out = out.reshape(-1, heads, head_size).astype(query.dtype)

    # scatter the grid back to token order; cells without a token add to a spare row
    has_token = (query_positions >= 0).reshape(-1)
    rows = jnp.where(has_token, query_tokens.reshape(-1), tokens)
    return jnp.zeros((tokens + 1, heads, head_size), query.dtype).at[rows].set(out)[:tokens]
