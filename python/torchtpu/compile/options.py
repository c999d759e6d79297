"""Options of ``torch.compile(backend="tpu")``, set with ``torchtpu.compile_options(...)``."""

_bucket_sizes = None


def compile_options(*, buckets=None) -> None:
    """Options of torch.compile(backend="tpu").

    ``buckets``: the sizes a dynamic dimension is padded up to (graphs compiled with
    ``dynamic=True`` or ``torch._dynamo.mark_dynamic``, see docs/compile.md). ``None`` (the
    default): the next power of two, at least 8. A list: the smallest listed size that fits
    (larger sizes run unpadded)."""
    global _bucket_sizes
    _bucket_sizes = None if buckets is None else sorted(int(b) for b in buckets)


def bucket_sizes():
    """The sizes set by compile_options(buckets=...), sorted, or None (powers of two)."""
    return _bucket_sizes
