"""Runs PyTorch's OpInfo samples on tpu against the CPU reference.

    python -m torchtpu.testing.opinfo --json FILE [--ops NAME ...] [--dtypes float32 ...]
                                      [--jobs 2] [--markdown FILE]

The ops are every entry of ``torch.testing._internal.common_methods_invocations.op_db`` and of its
foreach databases (``foreach_unary_op_db``, ``foreach_binary_op_db``, ``foreach_pointwise_op_db``,
``foreach_reduce_op_db``, ``foreach_other_op_db``), or the named ones. A foreach op appears twice:
``_foreach_add`` (the out-of-place function) and ``_foreach_add_`` (the in-place one, compared by
the tensors it mutates). For each dtype the op supports on CPU (by default all twelve of
``DTYPES``), every sample input runs on CPU and on tpu and the outputs (after the sample's
``output_process_fn_grad``, as PyTorch's ``test_compare_cpu`` does: singular vectors are compared
up to sign) are compared with ``torch.testing.assert_close`` at the dtype's default tolerances
(indices that PyTorch leaves unspecified among equal values, of ``topk``, ``kthvalue``, ``mode``
and an unstable ``sort``, pass when they select the values CPU's select). Ops that support autograd also get
a gradient check in float32: backward of the summed outputs on tpu vs CPU.

Samples are made on the CPU and copied to tpu keeping their structure: a view becomes the same
view of a tpu copy of its base (so non-contiguous inputs stay non-contiguous and aliases stay
aliases), arguments PyTorch wants on the CPU stay there (``CPU_ARGS``), and factories get
``device="tpu"``.

A sample *passed on the device* only when no CPU fallback (``torchtpu.metrics.cpu_fallbacks()``)
ran while tpu computed it (forward and gradient); one that matched only with a fallback's help is
counted as *passed via CPU fallback*. *errors* are samples where tpu raised and CPU did not (or
raised another kind of exception); *failed* ones gave wrong values, shapes or dtypes. A float
sample that does not match CPU's is measured against the op run on float64 copies of its inputs:
it counts as *rounding* instead of failed when tpu's largest error against that result is at most
twice CPU's or within the dtype's tolerance (``_against_exact``); a failure's message gives both
errors.

``--padded`` stores every sample tensor that is not a view padded on tpu, as eager mode stores a
tensor whose sizes vary (docs/modes.md, "Shapes that change"): each size of the sample's first
tensor of at least 2 is marked as varying, so a tensor is held in a box of bucket sizes (16, 32,
...) and ops with a padding rule run on boxes with the exact sizes as program inputs. The samples
are compared with CPU as always; ``ran_padded`` counts those whose tpu run had padded ops
(``torchtpu.metrics.counters()["padded_ops"]``), ``read_exact`` those where an op without a rule
read a padded input at its exact sizes (``torchtpu.metrics.unpadded_ops()``).

Each (op, dtype) runs in a worker subprocess, so a crash is recorded for it and the run goes on.
"""

import argparse
import json
import os
import sys
import time

from ._conformance_report import write_markdown
from ._dtypes import DTYPES, SHORT
from ._workers import announce, record, run_units
from .compare import compare_trees, count_fallbacks, same_kind_of_error, summed_outputs, tpu_copier

GRAD_DTYPES = ["float32"]

# Ops whose results are random by design: comparing them with CPU values is meaningless.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "normal_in_place", "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.multi_head_attention_forward", "empty", "empty_like", "empty_strided",
    "new_empty", "new_empty_strided", "empty_permuted", "torch.ops.aten._efficientzerotensor",
    "randperm", "bernoulli_", "nn.functional.gumbel_softmax", "sparse.sampled_addmm",
    # draw random numbers inside: pooling regions, and the random projections of the sketch
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "svd_lowrank", "pca_lowrank",
}

# Ops PyTorch implements for the CPU only (CUDA raises "Could not run" as tpu does): no device
# result to compare. Listed in the report.
CPU_ONLY_OPS = {"sparse.mm.reduce"}  # _sparse_mm_reduce_impl

# Ops whose indices PyTorch leaves unspecified among equal values (topk, kthvalue, mode, an
# unstable sort): (position of `dim`, of `keepdim`). Their indices pass when they select the same
# values as CPU's do; the values themselves are compared as usual.
TIED_INDEX_OPS = {"topk": (2, None), "kthvalue": (2, 3), "mode": (1, 2), "sort": (1, None), "argsort": (1, None)}

# Arguments (by position, the input being 0) that PyTorch requires on the CPU whatever the
# input's device: the harness leaves them there, as a sample made on the device would have them.
CPU_ARGS = {"tensor_split": (1,)}

FOREACH_DBS = ["foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
               "foreach_reduce_op_db", "foreach_other_op_db"]

COUNTS = ("samples", "passed", "passed_fallback", "rounding", "failed", "errors", "not_run",
          "grad_samples", "grad_failed", "ran_padded", "read_exact")
FAILURES_KEPT = 3  # failure messages kept per (op, dtype)
# A mismatch with CPU is rounding when tpu's largest error against the float64 result is at most
# this many times CPU's (_against_exact)
ROUNDING_FACTOR = 2.0


# ---------------------------------------------------------------------------------------------
# Telling rounding from wrong values: a mismatch measured against the float64 result.

class NotAValueMismatch(AssertionError):
    """A result that differs from CPU's in something other than its values (a device, strides)."""


def _is_narrow_float(x):
    import torch
    return (isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
            and x.dtype not in (torch.float64, torch.complex128))


def _widened(x):
    """x as a float64 (complex128) copy if it is a narrower float tensor, else x itself."""
    import torch
    if not _is_narrow_float(x):
        return x
    return x.detach().to(torch.complex128 if x.is_complex() else torch.float64)


def _against_exact(actual, expected, exact):
    """Measures a tpu result that failed against CPU's on the float64 result: -> (rounding, how)
    with `how` None when it cannot be measured (no float output, shapes differ).

    `exact` is the op run on CPU with its float inputs widened to float64 (complex128). The
    mismatch counts as rounding when each output's largest error against the exact result is at
    most twice CPU's (two summation orders of one sum have error bounds of the same size; a wrong
    value is off by far more), or tpu's result is within the dtype's default tolerance of the
    exact one (then CPU's is the less accurate side). Integer outputs and shapes must match CPU's
    exactly, and where the two differ at a special value (NaN, an infinity) tpu's must be the exact
    result's: a wrong index or a lost NaN stays a failure, while CPU's overflow to NaN where the
    exact result is finite counts against CPU."""
    import torch
    from torch.testing._comparison import default_tolerances
    from torch.utils._pytree import tree_flatten

    def tensor(v):
        return v.detach().cpu() if isinstance(v, torch.Tensor) else torch.tensor(v)

    a_leaves, e_leaves, x_leaves = (tree_flatten(v)[0] for v in (actual, expected, exact))
    if not len(a_leaves) == len(e_leaves) == len(x_leaves):
        return False, None
    rounding, errors, differs = True, [], False
    for a, e, x in zip(a_leaves, e_leaves, x_leaves):
        if not all(isinstance(v, (torch.Tensor, float, complex)) for v in (a, e, x)):
            tensors = isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
            rounding &= (torch.equal(a.cpu(), e.cpu()) if tensors else
                         not isinstance(a, torch.Tensor) and not isinstance(e, torch.Tensor) and a == e)
            continue
        a, e, x = tensor(a), tensor(e), tensor(x)
        if not (e.is_floating_point() or e.is_complex()) or x.dtype not in (torch.float64, torch.complex128) \
                or e.dtype == x.dtype or not a.dtype == e.dtype or not a.shape == e.shape == x.shape:
            rounding &= a.shape == e.shape and torch.equal(a, e)
            continue
        rtol, atol = default_tolerances(e)
        representable = x.to(e.dtype).to(x.dtype)  # beyond the dtype's range: an infinity
        a, e = a.to(x.dtype), e.to(x.dtype)
        same = (a == e) | (a.isnan() & e.isnan())
        differs |= not bool(same.all())
        # where they differ, tpu must have the exact result's special value (NaN, an infinity),
        # or a finite value where it is finite; CPU's NaN or overflow there is its error
        like_x = (a == representable) | (a.isnan() & x.isnan())
        measured = ~same & representable.isfinite()
        if not bool((same | like_x | (measured & a.isfinite())).all()):
            rounding = False
        err_a, err_e = (a - x)[measured].abs(), (e - x)[measured].abs().nan_to_num(float("inf"))
        worst_a, worst_e = (float(err.max()) if err.numel() else 0.0 for err in (err_a, err_e))
        near = bool((err_a <= atol + rtol * x[measured].abs()).all())
        rounding &= near or worst_a <= ROUNDING_FACTOR * worst_e
        errors.append(f"{worst_a:.2g} vs CPU's {worst_e:.2g}")
    if not differs:  # equal values: the failure was something else (strides, a device)
        return False, None
    return bool(rounding), "largest error against the float64 result: tpu " + ", ".join(errors)


# ---------------------------------------------------------------------------------------------
# The op tables: name -> entry, shared by the parent (to plan) and the workers (to run).

class _Entry:
    """One row of the report: an op_db OpInfo, or one variant of a foreach OpInfo."""

    def __init__(self, name, opinfo, kind, fn, inplace=False):
        self.name, self.opinfo, self.kind, self.fn, self.inplace = name, opinfo, kind, fn, inplace

    def dtypes(self):
        return {str(d).replace("torch.", "") for d in self.opinfo.supported_dtypes("cpu")}

    def wants_grad(self, dtype_name, grad_dtypes):
        return (dtype_name in grad_dtypes and self.opinfo.supports_autograd and not self.inplace)


def _entries():
    from torch.testing._internal import common_methods_invocations as cmi
    entries = {}
    for op in cmi.op_db:
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        entries.setdefault(name, _Entry(name, op, "op_db", op))
    for db in FOREACH_DBS:
        for op in getattr(cmi, db):
            if op.supports_out:  # has an out-of-place function
                entries[op.name] = _Entry(op.name, op, db, op.method_variant)
            if op.inplace_variant is not None:
                entries[op.name + "_"] = _Entry(op.name + "_", op, db, op.inplace_variant, inplace=True)
    return entries


# ---------------------------------------------------------------------------------------------
# The worker: runs (op, dtype) units and appends one JSON line per unit to a log.

def _describe(x, depth=0):
    """A short description of a sample argument, for failure messages."""
    import torch
    if isinstance(x, torch.Tensor):
        s = f"{SHORT.get(str(x.dtype).replace('torch.', ''), x.dtype)}{list(x.shape)}"
        if x.layout != torch.strided:  # sparse layouts have no contiguity
            return s + str(x.layout).replace("torch.", " ")
        return s + ("nc" if x.numel() > 1 and not x.is_contiguous() else "")
    if isinstance(x, (list, tuple)):
        if depth > 2:
            return "[...]"
        inner = [_describe(v, depth + 1) for v in x[:3]]
        more = f", ...({len(x)})" if len(x) > 3 else ""
        o, c = ("[", "]") if isinstance(x, list) else ("(", ")")
        return o + ", ".join(inner) + more + c
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={_describe(v, depth + 1)}" for k, v in x.items()) + "}"
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _describe_call(args, kwargs):
    return ", ".join([_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()])


def _short_error(e):
    """The informative part of an exception: the assert_close summary lines or the first line."""
    text = str(e)
    if not text:
        return type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.startswith(("Mismatched elements", "Greatest absolute",
                                                 "Greatest relative", "Expected ", "Absolute diff",
                                                 "Relative diff", "The failure occurred"))]
    msg = lines[0] + (" " + " ".join(keep) if keep else "")
    return msg[:400]


def _dense_strides(t):
    """The strides that mean something: of dimensions longer than 1, of a non-empty tensor."""
    return tuple(s for n, s in zip(t.shape, t.stride()) if n > 1) if t.numel() else ()


def _compare(actual, expected, out_device, strides):
    compare_trees(actual, expected, lambda a, e: _compare_leaf(a, e, out_device, strides), "outputs",
                  number_leaves=True)


def _compare_leaf(a, e, out_device, strides):
    import torch

    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            raise AssertionError(f"got {type(a).__name__}, expected a tensor")
        if e.device.type == "cpu" and a.device.type != out_device:
            raise NotAValueMismatch(f"output on {a.device}, expected {out_device}")
        torch.testing.assert_close(a.detach().cpu(), e.detach(), equal_nan=True,
                                   check_stride=False, check_layout=False)
        if strides and e.layout == torch.strided and _dense_strides(a) != _dense_strides(e):
            raise NotAValueMismatch(f"strides {tuple(a.stride())}, CPU's {tuple(e.stride())} (shape {tuple(e.shape)})")
    elif isinstance(e, (float, complex)) and isinstance(a, (float, complex)):
        torch.testing.assert_close(a, e, equal_nan=True)
    elif a != e:
        raise AssertionError(f"{a!r} != {e!r}")


def _equal_at_tied_indices(name, args, kwargs, actual, expected, strides):
    """Whether tpu's indices select the values CPU's select (and any values output matches)."""
    import torch
    x = args[0]
    dim_at, keepdim_at = TIED_INDEX_OPS[name]
    arg = lambda at, key, default: kwargs.get(key, args[at] if at is not None and len(args) > at else default)
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or arg(None, "stable", False):
        return False
    dim = arg(dim_at, "dim", -1)
    if name == "argsort":
        a_idx, e_idx = actual, expected
    else:
        try:
            _compare_leaf(actual[0], expected[0], "tpu", strides)
        except AssertionError:
            return False
        a_idx, e_idx = actual[1], expected[1]
    a_idx = a_idx.cpu()
    if a_idx.shape != e_idx.shape:
        return False
    if keepdim_at is not None and not arg(keepdim_at, "keepdim", False):
        a_idx, e_idx = a_idx.unsqueeze(dim), e_idx.unsqueeze(dim)
    try:
        torch.testing.assert_close(x.gather(dim, a_idx), x.gather(dim, e_idx), rtol=0, atol=0, equal_nan=True)
    except (AssertionError, RuntimeError):
        return False
    return True


def _grad_check(expected, actual, args, t_args):
    import torch
    from torch.utils._pytree import tree_flatten

    e_total = summed_outputs(expected)
    if e_total is None:
        return None
    a_total = summed_outputs(actual)
    inputs = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
    t_inputs = [a for a in tree_flatten(t_args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
    try:
        e_grads = torch.autograd.grad(e_total, inputs, allow_unused=True)
    except Exception:
        return None  # no CPU reference
    try:
        if a_total is None:
            raise AssertionError("tpu outputs do not require grad")
        a_grads = torch.autograd.grad(a_total, t_inputs, allow_unused=True)
        for a, e in zip(a_grads, e_grads):
            if e is None:
                continue
            if a is None:
                raise AssertionError("gradient missing on tpu")
            torch.testing.assert_close(a.cpu(), e, equal_nan=True, rtol=1e-4, atol=1e-4)
    except Exception as e:
        return _short_error(e)
    return "ok"


def _rounding_only(fn, wide_args, wide_kwargs, process, actual, expected):
    """Whether tpu's result is as far from the exact (float64) one as CPU's, and how far."""
    if wide_args is None:
        return False, None
    try:
        exact = process(fn(*wide_args, **wide_kwargs))
    except Exception:
        return False, None  # the op has no float64 form on CPU
    return _against_exact(actual, expected, exact)


def _padded_copier(sample_input):
    """A tpu copier (compare.tpu_copier) that stores tensors which are not views padded, varying
    in the sizes of ``sample_input`` (the sample's first tensor) of at least 2."""
    import torch
    from torch.utils._pytree import tree_flatten

    from .. import _C
    first = next((t for t in tree_flatten(sample_input)[0] if isinstance(t, torch.Tensor)), None)
    varying = sorted({n for n in first.shape if n >= 2}) if first is not None else []
    plain = tpu_copier(keep_views=True)

    def to_tpu(x):
        if (isinstance(x, torch.Tensor) and x.device.type == "cpu" and x._base is None and x.dim() > 0
                and x.layout == torch.strided and not x.is_conj() and not x.is_neg()):
            return _C._to_tpu_padded(x.detach(), varying).requires_grad_(x.requires_grad)
        return plain(x)
    return to_tpu


def _run_sample(name, fn, args, kwargs, want_grad, process, strides, padded=False):
    """-> (result, why, grad_result) with result one of passed / failed / errors. `process` is
    the sample's output_process_fn_grad, applied to both results as PyTorch's own
    test_compare_cpu and gradient tests do: it keeps the well-defined part of outputs that
    are not unique (singular vectors up to sign, the thin part of a full U)."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    # tpu copies first: the CPU call may mutate its inputs
    to_tpu = _padded_copier(args[0]) if padded else tpu_copier(keep_views=True)
    keep = CPU_ARGS.get(name, ())
    t_args = tuple(a if i in keep else tree_map(to_tpu, a) for i, a in enumerate(args))
    t_kwargs = tree_map(to_tpu, kwargs)
    leaves = tree_flatten((args, kwargs))[0]
    # factories: the tpu run must make tpu tensors. Samples without any tensor get
    # device= on both sides, unless the op takes no device (then nothing runs on tpu).
    inject = "device" not in kwargs and not any(isinstance(x, torch.Tensor) for x in leaves)
    if str(kwargs.get("device")) == "cpu" or inject:
        t_kwargs["device"] = "tpu"
    # outputs belong on tpu, unless the sample asks for the CPU (e.g. x.to("cpu"))
    asked = tree_flatten((args, {k: v for k, v in kwargs.items() if k != "device"}))[0]
    out_device = "cpu" if any(str(x) == "cpu" for x in asked
                              if isinstance(x, (str, torch.device))) else "tpu"
    # float64 copies of the float inputs, made before the CPU call mutates any: on a mismatch,
    # the op run on them tells rounding from a wrong value
    narrow = any(_is_narrow_float(x) for x in leaves)
    wide_args, wide_kwargs = tree_map(_widened, (args, kwargs)) if narrow else (None, None)
    try:
        expected, cpu_exc = fn(*args, **(dict(kwargs, device="cpu") if inject else kwargs)), None
    except TypeError as e:
        expected, cpu_exc = None, e
        if inject:
            inject = False
            del t_kwargs["device"]
            try:
                expected, cpu_exc = fn(*args, **kwargs), None
            except Exception as e2:
                expected, cpu_exc = None, e2
    except Exception as e:
        expected, cpu_exc = None, e
    if cpu_exc is not None:
        try:
            fn(*t_args, **t_kwargs)
            torch.tpu.synchronize()
        except Exception as e:
            if same_kind_of_error(e, cpu_exc):
                return "passed", None, None  # both reject the input
            return ("errors", f"CPU raised {type(cpu_exc).__name__}, tpu raised "
                    f"{type(e).__name__}: {_short_error(e)}", None)
        return "failed", f"CPU raised, tpu did not: {_short_error(cpu_exc)}", None
    try:
        actual = process(fn(*t_args, **t_kwargs))
        torch.tpu.synchronize()
    except Exception as e:
        return "errors", f"{type(e).__name__}: {_short_error(e)}", None
    expected = process(expected)
    try:
        _compare(actual, expected, out_device, strides)
    except Exception as e:
        if not (name in TIED_INDEX_OPS and _equal_at_tied_indices(name, args, kwargs, actual, expected, strides)):
            if isinstance(e, NotAValueMismatch):
                return "failed", _short_error(e), None
            rounding, how = _rounding_only(fn, wide_args, wide_kwargs, process, actual, expected)
            if rounding:
                return "rounding", "rounding: " + how, None
            return "failed", _short_error(e) + (f" ({how})" if how else ""), None
    if not want_grad:
        return "passed", None, None
    return "passed", None, _grad_check(expected, actual, args, t_args)


def _samples_of(entry, dtype, want_grad, layout):
    import torch

    op = entry.opinfo
    if entry.kind == "op_db":
        for s in op.sample_inputs("cpu", dtype, requires_grad=want_grad):
            yield s.noncontiguous() if layout == "noncontiguous" else s
        return
    # foreach: as test_foreach.py's parity test, contiguous and not; "cpu:0" so the samples
    # also intersperse empty tensors (the generator skips those for device "cpu")
    for nc in {"both": [False, True], "contiguous": [False], "noncontiguous": [True]}[layout]:
        for s in op.sample_inputs("cpu:0", dtype, requires_grad=want_grad and not nc,
                                  noncontiguous=nc, allow_higher_dtype_scalars=True):
            yield s
    if op.supports_scalar_self_arg and not entry.inplace:  # _foreach_pow(scalar, tensors)
        for s in op.sample_inputs("cpu:0", dtype, requires_grad=want_grad):
            if len(s.args) == 1 and isinstance(s.args[0], list) and \
                    all(isinstance(t, torch.Tensor) for t in s.args[0]):
                from torch.testing._internal.opinfo.core import SampleInput
                yield SampleInput(2 if not (dtype.is_floating_point or dtype.is_complex) else 1.5,
                                  args=(s.input,))
                break


def _call_of(entry):
    if not entry.inplace:
        return entry.fn

    def inplace(self_, *args, **kwargs):
        entry.fn(self_, *args, **kwargs)
        return self_
    return inplace


def _run_unit(entry, name, dtype_name, grad_dtypes, time_limit, layout, strides, padded=False):
    """One (op, dtype) unit: every sample on CPU and tpu, counted into one record."""
    import torch

    import torchtpu

    rec = {"op": name, "dtype": dtype_name, "failures": [], "roundings": [], "fallback_ops": {}}
    rec.update({k: 0 for k in COUNTS})
    dtype = getattr(torch, dtype_name)
    want_grad = entry.wants_grad(dtype_name, grad_dtypes)
    fn = _call_of(entry)
    started = time.time()
    try:
        samples = list(_samples_of(entry, dtype, want_grad, layout))
    except Exception as e:
        samples = []
        rec["sample_error"] = _short_error(e)
    for i, sample in enumerate(samples):
        if time.time() - started > time_limit:
            rec["not_run"] = len(samples) - i
            break
        if sample.kwargs.get("dropout_p", 0) or (sample.kwargs.get("training") and "dropout" in name):
            rec["random_samples_excluded"] = rec.get("random_samples_excluded", 0) + 1
            continue  # draws random numbers: values cannot match CPU
        args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
        before = torchtpu.metrics.cpu_fallbacks()
        padded_before = torchtpu.metrics.counters()["padded_ops"]
        exact_before = sum(torchtpu.metrics.unpadded_ops().values())
        try:
            result, why, grad = _run_sample(name, fn, args, kwargs, want_grad,
                                            sample.output_process_fn_grad, strides, padded)
        except Exception as e:  # the harness itself, e.g. copying an odd argument
            result, why, grad = "errors", f"harness: {_short_error(e)}", None
        used = count_fallbacks(rec["fallback_ops"], before, torchtpu.metrics.cpu_fallbacks())
        rec["samples"] += 1
        rec["ran_padded"] += torchtpu.metrics.counters()["padded_ops"] > padded_before
        rec["read_exact"] += sum(torchtpu.metrics.unpadded_ops().values()) > exact_before
        if result == "passed" and used:
            result = "passed_fallback"
        rec[result] += 1
        if grad is not None:
            rec["grad_samples"] += 1
            if grad != "ok":
                rec["grad_failed"] += 1
                if len(rec["failures"]) < FAILURES_KEPT:
                    rec["failures"].append({"sample": _describe_call(args, kwargs),
                                            "why": "gradient: " + grad, "index": i})
        kept = rec["roundings" if result == "rounding" else "failures"]  # apart: real failures first
        if why and len(kept) < FAILURES_KEPT:
            kept.append({"sample": _describe_call(args, kwargs), "why": why,
                         "index": i, "fallback": sorted(used)})
    return rec


def _worker(units, out_path, grad_dtypes, time_limit, layout, strides=False, padded=False):
    entries = _entries()
    with open(out_path, "a") as out:
        for name, dtype_name in units:
            announce(out, (name, dtype_name))
            rec = _run_unit(entries[name], name, dtype_name, grad_dtypes, time_limit, layout, strides, padded)
            record(out, (name, dtype_name), rec)


# ---------------------------------------------------------------------------------------------
# The parent: plans (op, dtype) units, runs workers, aggregates, reports.

def _aggregate(units_done, names, dtypes, entries):
    ops = {}
    for name in names:
        e = entries[name]
        r = {k: 0 for k in COUNTS}
        r.update({"kind": e.kind, "dtypes_supported": sorted(e.dtypes() & set(dtypes),
                                                             key=DTYPES.index),
                  "by_dtype": {}, "fallback_ops": [], "first_failure": None})
        ops[name] = r
    for (name, dtype_name), rec in units_done.items():
        r = ops[name]
        d = {k: rec.get(k, 0) for k in COUNTS}
        d["failures"] = rec.get("failures", [])
        d["roundings"] = rec.get("roundings", [])
        d["fallback_ops"] = rec.get("fallback_ops", {})
        if rec.get("sample_error"):
            d["sample_error"] = rec["sample_error"]
        r["by_dtype"][dtype_name] = d
    for r in ops.values():
        r["by_dtype"] = {k: r["by_dtype"][k] for k in sorted(r["by_dtype"], key=DTYPES.index)}
        fallbacks = set()
        for dtype_name, d in r["by_dtype"].items():
            for k in COUNTS:
                r[k] += d[k]
            fallbacks |= set(d["fallback_ops"])
            if r["first_failure"] is None and d["failures"]:
                r["first_failure"] = f"{dtype_name}: {d['failures'][0]['why']}"
        r["fallback_ops"] = sorted(fallbacks)
    return ops


def _totals(ops, dtypes, kind=None):
    sel = {n: r for n, r in ops.items() if kind is None or (r["kind"] == "op_db") == (kind == "op_db")}
    per = {}
    for dtype_name in dtypes:
        t = {k: 0 for k in COUNTS}
        t["ops"] = 0
        for r in sel.values():
            d = r["by_dtype"].get(dtype_name)
            if d is None:
                continue
            t["ops"] += 1
            for k in COUNTS:
                t[k] += d[k]
        per[dtype_name] = t
    total = {k: sum(t[k] for t in per.values()) for k in COUNTS}
    total["ops_total"] = len(sel)
    total["ops_all_passed"] = sum(1 for r in sel.values()
                                  if r["samples"] and r["passed"] == r["samples"]
                                  and not r["grad_failed"] and not r["not_run"])
    return {"all": total, "per_dtype": per}


def _extension_stamp():
    import glob
    import importlib.util
    spec = importlib.util.find_spec("torchtpu")
    found = glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so")) if spec else []
    if not found:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(found[0])))


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--ops", nargs="*", help="op names (default: all of op_db and the foreach dbs)")
    parser.add_argument("--dtypes", nargs="*", default=DTYPES, choices=DTYPES)
    parser.add_argument("--grad-dtypes", nargs="*", default=GRAD_DTYPES, choices=DTYPES,
                        help="dtypes that also get the gradient check (default: float32)")
    parser.add_argument("--no-grad", action="store_true", help="skip the gradient checks")
    parser.add_argument("--no-foreach", action="store_true", help="only op_db (when --ops is not given)")
    parser.add_argument("--foreach-contiguous-only", action="store_true",
                        help="foreach samples only with contiguous tensors (default: both)")
    parser.add_argument("--noncontiguous", action="store_true",
                        help="every sample's tensors as strided views (op_db: PyTorch's SampleInput.noncontiguous(); "
                             "foreach: its non-contiguous lists only), as test_noncontiguous_samples does")
    parser.add_argument("--strides", action="store_true",
                        help="also compare each result's strides with CPU's (dimensions longer than 1): "
                             "a layout CPU's kernel chooses and tpu does not counts as a failure")
    parser.add_argument("--padded", action="store_true",
                        help="store sample tensors padded on tpu, varying in the first tensor's sizes")
    parser.add_argument("--chunk", type=int, default=150, help="(op, dtype) units per worker process")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    parser.add_argument("--time-limit", type=float, default=120,
                        help="seconds per (op, dtype); samples beyond it are not run (counted as such)")
    parser.add_argument("--stall-limit", type=float, default=900,
                        help="seconds a worker may go without finishing a unit before it is killed")
    parser.add_argument("--markdown", help="also write the results as a Markdown report")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)  # a JSON file of units
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    return parser


def _selected_ops(args, entries, parser):
    """(names to run, random ops excluded, CPU-only ops excluded)."""
    if args.ops:
        names = list(dict.fromkeys(args.ops))
    else:
        names = [n for n, e in entries.items() if not (args.no_foreach and e.kind != "op_db")]
    unknown = sorted(set(names) - set(entries))
    if unknown:
        parser.error(f"not in PyTorch's op_db or foreach dbs: {', '.join(unknown)}")
    excluded = sorted(n for n in names if n.split(".")[0] in RANDOM_OPS or n in RANDOM_OPS)
    cpu_only = sorted(n for n in names if n in CPU_ONLY_OPS)
    return [n for n in names if n not in excluded and n not in CPU_ONLY_OPS], excluded, cpu_only


def _padding_rules():
    """How many of the lowered ATen ops have a padding rule, and which."""
    from .. import _C
    padded = _C._padded_ops()
    return {"lowered_ops": len(_C._lowered_ops()), "with_rule": len(padded), "ops_with_rule": padded}


def _worker_command(args):
    """The command line of a worker process that runs the units in `unit_file`, logging to `log`."""
    def command(unit_file, log):
        cmd = [sys.executable, "-m", "torchtpu.testing.opinfo", "--json", args.json,
               "--time-limit", str(args.time_limit), "--_out", log, "--_worker", unit_file,
               "--grad-dtypes", *args.grad_dtypes]
        flags = {"--no-grad": args.no_grad, "--foreach-contiguous-only": args.foreach_contiguous_only,
                 "--noncontiguous": args.noncontiguous, "--strides": args.strides, "--padded": args.padded}
        return cmd + [flag for flag, on in flags.items() if on]
    return command


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    grad_dtypes = [] if args.no_grad else args.grad_dtypes
    layout = "noncontiguous" if args.noncontiguous else "contiguous" if args.foreach_contiguous_only else "both"

    if args._worker is not None:
        with open(args._worker) as f:
            units = [tuple(u) for u in json.load(f)]
        _worker(units, args._out, grad_dtypes, args.time_limit, layout, args.strides, args.padded)
        return 0

    wall_start = time.time()
    so_start = _extension_stamp()
    entries = _entries()
    names, excluded, cpu_only = _selected_ops(args, entries, parser)
    # units ordered dtype-major inside each op, ops in order; chunks keep an op's dtypes together
    todo = [(n, d) for n in names for d in args.dtypes if d in entries[n].dtypes()]
    results = run_units(todo, _worker_command(args), args.jobs, args.chunk, args.stall_limit)

    ops = _aggregate(results, names, args.dtypes, entries)
    totals = _totals(ops, args.dtypes)
    report = {
        "ops": ops,
        "totals": totals["all"],
        "per_dtype": totals["per_dtype"],
        "op_db": _totals(ops, args.dtypes, "op_db"),
        "foreach": _totals(ops, args.dtypes, "foreach"),
        "excluded_random": excluded,
        "excluded_cpu_only": cpu_only,
        "padded": _padding_rules() if args.padded else None,
        "dtypes": args.dtypes,
        "grad_dtypes": grad_dtypes,
        "wall_seconds": round(time.time() - wall_start, 1),
        # the extension may be rebuilt during a long run: then results mix two builds
        "extension_built": {"start": so_start, "end": _extension_stamp()},
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    if args.markdown:
        write_markdown(args.markdown, report, args)
    print(json.dumps(totals["all"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
