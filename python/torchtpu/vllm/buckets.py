"""The sizes a scheduled batch runs at: powers of two, so that serving compiles one set of programs
per bucket whatever lengths the requests have, and the start-up warm-up (model_runner.py) can
compile them all before the first request."""

from dataclasses import dataclass

# At least 16, eager mode's smallest bucket (aten/varying_sizes.h): a power of two from 16 up is
# its own bucket there, so a tensor of these sizes is stored at them exactly whatever sizes eager
# mode has seen vary, and the warm-up's programs are the ones the batches run.
MIN_TOKENS = 16
MIN_GRID = 16  # the fewest requests, queries per request and pages paged_attention runs at


def bucket(n: int, smallest: int, largest: int) -> int:
    """The power of two at least ``n`` and ``smallest``, capped at ``largest``."""
    return min(max(smallest, 1 << max(0, n - 1).bit_length()), largest)


def every_bucket(smallest: int, largest: int) -> list[int]:
    sizes = [smallest]
    while sizes[-1] < largest:
        sizes.append(bucket(sizes[-1] + 1, smallest, largest))
    return sizes


@dataclass(frozen=True)
class BatchBuckets:
    """The buckets of one engine's batches: scheduled tokens (the model's inputs), and paged
    attention's grid of requests x queries per request x pages per request."""
    max_tokens: int
    max_requests: int
    max_pages: int

    @classmethod
    def of(cls, vllm_config, block_size: int = 1) -> "BatchBuckets":
        """The buckets of an engine's configuration, with KV cache pages of ``block_size`` tokens."""
        return cls(vllm_config.scheduler_config.max_num_batched_tokens, vllm_config.scheduler_config.max_num_seqs,
                   -(-vllm_config.model_config.max_model_len // block_size))

    # Each bucket is capped at the engine's limit, but never below the smallest bucket.
    def tokens(self, n: int) -> int:
        return bucket(n, MIN_TOKENS, max(MIN_TOKENS, self.max_tokens))

    def requests(self, n: int) -> int:
        return bucket(n, MIN_GRID, max(MIN_GRID, self.max_requests))

    def queries(self, n: int) -> int:
        return bucket(n, MIN_GRID, max(MIN_GRID, self.max_tokens))

    def pages(self, n: int) -> int:
        return bucket(n, MIN_GRID, max(MIN_GRID, self.max_pages))

    def attention_grids(self):
        """Every (tokens, requests, queries, pages) a batch can run paged attention at."""
        for tokens in every_bucket(MIN_TOKENS, self.tokens(self.max_tokens)):
            for requests in every_bucket(MIN_GRID, min(self.requests(self.max_requests), tokens)):
                for queries in every_bucket(MIN_GRID, tokens):
                    for pages in every_bucket(MIN_GRID, self.pages(self.max_pages)):
                        yield tokens, requests, queries, pages
