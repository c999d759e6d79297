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
    output, [tokens, heads, head_size]; rows of tokens outside the grid are zero.

    The pages are visited one at a time with an online softmax (a running maximum, sum and
    weighted sum per query), so memory grows with requests x queries x one page, not x every key."""
    tokens, heads, head_size = query.shape
    kv_heads, block_size = kv_cache.shape[1], kv_cache.shape[2]
    requests, pages = block_table.shape
    group = heads // kv_heads
    q = query[query_tokens].reshape(requests, -1, kv_heads, group, head_size)  # [r, q, k, g, d]
    queries = q.shape[1]

    def visit(state, page):
        best, total, weighted = state  # [r, k, g, q], [r, k, g, q], [r, k, g, q, d]
        kv = kv_cache[block_table[:, page]]  # [r, kv_heads, block_size, 2 * head_size]
        keys, values = kv[..., :head_size], kv[..., head_size:]
        scores = jnp.einsum("rqkgd,rkld->rkgql", q, keys, preferred_element_type=jnp.float32) * scale
        position = page * block_size + jnp.arange(block_size)
        visible = position[None, None, :] <= query_positions[:, :, None]  # [r, q, l]
        scores = jnp.where(visible[:, None, None], scores, -jnp.inf)
        new_best = jnp.maximum(best, scores.max(-1))
        base = jnp.where(jnp.isfinite(new_best), new_best, 0.0)  # a query that saw no key yet
        rescale = jnp.exp(best - base)
        weights = jnp.exp(scores - base[..., None])
        total = total * rescale + weights.sum(-1)
        weighted = weighted * rescale[..., None] + jnp.einsum(
            "rkgql,rkld->rkgqd", weights.astype(values.dtype), values, preferred_element_type=jnp.float32)
        return (new_best, total, weighted), None

    shape = (requests, kv_heads, group, queries)
    start = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32),
             jnp.zeros(shape + (head_size,), jnp.float32))
    (_, total, weighted), _ = jax.lax.scan(visit, start, jnp.arange(pages))
    # a grid cell without a token saw no key (total 0): its output is dropped below
    out = weighted / jnp.where(total > 0, total, 1.0)[..., None]
    out = out.transpose(0, 3, 1, 2, 4).reshape(-1, heads, head_size).astype(query.dtype)

    # scatter the grid back to token order; cells without a token add to a spare row
    has_token = (query_positions >= 0).reshape(-1)
    rows = jnp.where(has_token, query_tokens.reshape(-1), tokens)
    return jnp.zeros((tokens + 1, heads, head_size), query.dtype).at[rows].set(out)[:tokens]
