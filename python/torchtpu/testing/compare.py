"""What the CPU-against-tpu harnesses share: moving a sample's tensors, walking two results side by
side, and counting the CPU fallbacks a run used.

The harnesses are ``opinfo`` (PyTorch's OpInfo samples), ``modules`` (module_db and optim_db) and
the model zoo (``zoo``). Each keeps its own verdict on a pair of values (tolerances, what counts
as rounding); this module holds only the mechanics that were the same in all of them.
"""

import math


# ---------------------------------------------------------------------------------------------
# Moving tensors

def map_tensors(x, fn):
    """``x`` with ``fn`` applied to every tensor inside its dicts, lists and tuples (a model's
    batch: containers keep their type, anything else stays as it is)."""
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, dict):
        return {k: map_tensors(v, fn) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(map_tensors(v, fn) for v in x)
    return x


def to_device(x, device):
    """Every tensor of ``x`` moved to ``device``."""
    return map_tensors(x, lambda t: t.to(device))


def to_double(x):
    """Every floating tensor of ``x`` as float64 (the reference runs); other tensors unchanged."""
    return map_tensors(x, lambda t: t.double() if t.is_floating_point() else t)


def tpu_copier(keep_views=False, share_repeats=False):
    """A function that copies one CPU tensor of a sample to tpu (anything else passes through),
    keeping what the harness's comparison relies on:

    ``keep_views``: a CPU view becomes the same view of a tpu copy of its base (one copy per base,
    so aliases stay aliases), as when a sample is made on the device; where that cannot hold (no
    base, conj/neg bits, another dtype) a plain copy. The OpInfo harness tests strided inputs so.

    ``share_repeats``: one tensor passed twice (``KLDivLoss(x, x)``) is copied once, so its
    gradient sums both uses as on CPU. The module harness needs that; the OpInfo harness copies
    every occurrence apart."""
    import torch
    bases, copies = {}, {}

    def fresh(x):
        return x.detach().to("tpu").requires_grad_(x.requires_grad)

    def to_tpu(x):
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
            return x
        if keep_views:
            view = _view_of_copied_base(x, bases)
            if view is not None:
                return view
        if not share_repeats:
            return fresh(x)
        if id(x) not in copies:  # the tensor is kept with its copy: its id stays unique
            copies[id(x)] = (x, fresh(x))
        return copies[id(x)][1]
    return to_tpu


def _view_of_copied_base(x, bases):
    """``x`` (a CPU view) as the same view of its base's tpu copy, made once per base in
    ``bases``; None when ``x`` is not such a view, or its base's copy got other strides."""
    import torch
    base = x._base
    if not (base is not None and x.layout == torch.strided and base.layout == torch.strided
            and x.dtype == base.dtype and not x.is_conj() and not x.is_neg()
            and not base.is_conj() and not base.is_neg()):
        return None
    if id(base) not in bases:
        t = base.detach().to("tpu")
        bases[id(base)] = (base, t if t.stride() == base.stride() else None)
    t_base = bases[id(base)][1]
    if t_base is None:
        return None
    return t_base.as_strided(x.size(), x.stride(), x.storage_offset()).requires_grad_(x.requires_grad)


# ---------------------------------------------------------------------------------------------
# Walking two results side by side

def compare_trees(actual, expected, compare_leaf, noun, number_leaves=False):
    """Calls ``compare_leaf(a, e)`` (which raises AssertionError on a mismatch) on the leaves of
    two pytrees; a different leaf count is a mismatch named with ``noun`` ("outputs").
    ``number_leaves``: a mismatch in one of several leaves says which ("output 1 of 2: ..."),
    keeping its exception class."""
    from torch.utils._pytree import tree_flatten
    a_leaves, e_leaves = tree_flatten(actual)[0], tree_flatten(expected)[0]
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{len(a_leaves)} {noun}, expected {len(e_leaves)}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        try:
            compare_leaf(a, e)
        except AssertionError as err:
            if number_leaves and len(e_leaves) > 1:
                raise type(err)(f"output {i} of {len(e_leaves)}: {err}") from None
            raise


def summed_outputs(out):
    """The sum of every floating output that requires grad (complex ones by magnitude), the scalar
    whose gradients the harnesses compare; None when no output requires grad."""
    import torch
    from torch.utils._pytree import tree_flatten
    leaves = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad
              and (o.is_floating_point() or o.is_complex())]
    return sum(o.abs().sum() if o.is_complex() else o.sum() for o in leaves) if leaves else None


def same_kind_of_error(a, b):
    """CPU and tpu both rejected an input: they agree when one exception's class is the other's
    or derives from it (a device may raise a more specific error)."""
    return isinstance(a, type(b)) or isinstance(b, type(a))


def count_fallbacks(totals, before, after):
    """The CPU fallbacks used between two ``torchtpu.metrics.cpu_fallbacks()`` readings, added
    into ``totals`` (op -> count); returns them."""
    used = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    for k, v in used.items():
        totals[k] = totals.get(k, 0) + v
    return used


# ---------------------------------------------------------------------------------------------
# Training runs: losses and final weights

def loss_rel(a, b):
    """Relative difference of tpu's loss ``a`` from CPU's ``b``; None when either is missing."""
    if a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b):  # b, CPU's, is finite (run_model checks): a NaN never matches
        return float("inf")
    return abs(a - b) / max(abs(b), 1e-12)


def state_diff(a, b):
    """Largest difference over the floating parameters and buffers after training, relative to
    the largest magnitude among them all (Adam turns the rounding noise of gradients that are ~0,
    e.g. attention key biases, into lr-sized steps: a per-tensor scale would call that a mismatch).
    -> (difference, name of the tensor where it is largest)."""
    worst, where = 0.0, None
    tensors = [e for e in b.values() if e.is_floating_point() and e.numel()]
    scale = max([float(e.abs().max()) for e in tensors] + [1e-12])
    for k, e in b.items():
        t = a.get(k)
        if t is None or not e.is_floating_point() or t.shape != e.shape:
            continue
        d = float((t.double() - e.double()).abs().max()) / scale if e.numel() else 0.0
        if math.isnan(d):
            d = float("inf")
        if d > worst:
            worst, where = d, k
    return worst, where
