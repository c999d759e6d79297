"""Tensors in and out of a program that runs at bucket sizes: inputs padded up, results cut down.

A dynamic size ``n`` runs at ``bucket(n)``. An input arrives at its exact size, so padding it on
the device would be a program of that exact size: one compile per new length, the cost buckets
exist to avoid. A small input (token ids, labels, an attention mask: what a training step or a
decoding step is called with) is padded on the host instead, a copy each way and no program; a
large one (an activation after a graph break) on the device, where copying it out would cost
more than a compile. Results are cut to their exact sizes the same way.

This is the boundary with eager mode, whose tensors are stored at their exact sizes; once eager
storage can stay padded (docs/design.md, "Shapes that change"), a tensor crossing it needs no copy.
"""

import torch

from . import options
from .layout import sizes

# The largest tensor padded or cut on the host: 1 MiB is a 128k-token batch of int64 ids, and copies
# in microseconds where a program compiles in tens of milliseconds.
HOST_PAD_BYTES = 1 << 20


def bucket(n: int) -> int:
    """The size a dynamic size ``n`` runs at (see torchtpu.compile_options)."""
    buckets = options.bucket_sizes()
    if buckets is None:
        return max(8, 1 << max(0, n - 1).bit_length())
    return next((b for b in buckets if b >= n), n)


def pad(t, layout, true, padded):
    """``t`` zero-padded at the end of each dimension's factors. Always a new tensor, also at a
    bucket's exact size: which inputs share storage must not depend on the size."""
    dims, factors = sizes(layout, padded)
    true_factors = sizes(layout, true)[1]
    on_host = _small(t)
    x = t.cpu() if on_host else t
    split = len(factors) != len(dims)
    if split:
        x = x.reshape(true_factors)
    widths = []
    for have, want in reversed(list(zip(x.shape, factors))):
        widths += [0, want - have]
    x = torch.constant_pad_nd(x, widths, 0)
    if split:
        x = x.reshape(dims)
    return x.to(t.device) if on_host else x


def narrow(t, layout, true, padded):
    """The valid part of a padded result, each dimension's factors cut to their true sizes: a
    new contiguous tensor, as eager mode's result would be (``.view`` must work on it). A small
    one is cut on the host, like a small input is padded there; that waits for the program."""
    dims, factors = sizes(layout, true)
    if list(t.shape) == dims:
        return t
    on_host = _small(t)
    x = t.cpu() if on_host else t
    split = len(factors) != len(dims)
    if split:
        x = x.reshape(sizes(layout, padded)[1])
    for d, n in enumerate(factors if split else dims):
        if x.shape[d] != n:
            x = x.narrow(d, 0, n)
    x = x.reshape(dims).contiguous()
    return x.to(t.device) if on_host else x


def _small(t):
    return t.device.type != "cpu" and t.numel() * t.element_size() <= HOST_PAD_BYTES
