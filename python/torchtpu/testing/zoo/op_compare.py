"""How the tracer keeps an op's values and compares them across runs: snapshots of outputs and
inputs on the CPU, and the verdict on one op's tpu output against CPU float32 and float64.

A verdict is a dict: ``bad`` (tpu is off), ``rel`` (the error, normalized by the output's
magnitude), ``ratio`` (tpu's error over CPU float32's, both against float64), ``max_abs`` and a
``note`` saying how it is off."""

import math

from .specs import ACCURACY_FACTOR, SNAPSHOT_NUMEL


def snapshot(x):
    """An op's output kept for later: tensors copied to the CPU (an even subsample of at most
    SNAPSHOT_NUMEL elements), lists as lists, other values as short text."""
    import torch
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.numel() > SNAPSHOT_NUMEL:
            t = t.reshape(-1)[:: math.ceil(t.numel() / SNAPSHOT_NUMEL)]
        return t.to("cpu", copy=True)
    if isinstance(x, (list, tuple)):
        return [snapshot(v) for v in x]
    if isinstance(x, (bool, int, float, complex)) or x is None:
        return x
    return repr(x)[:60]


def abs_max(x):
    """The largest finite magnitude among the floating tensors and floats in ``x``: the scale an
    op's inputs give its output's difference when no float64 reference measures it."""
    import torch
    if isinstance(x, torch.Tensor):
        if not (x.is_floating_point() or x.is_complex()) or x.numel() == 0:
            return 0.0
        t = x.detach()
        if t.numel() > SNAPSHOT_NUMEL:
            t = t.reshape(-1)[:: math.ceil(t.numel() / SNAPSHOT_NUMEL)]
        t = t.abs().double()
        t = t[torch.isfinite(t)]
        return float(t.max()) if t.numel() else 0.0
    if isinstance(x, (list, tuple)):
        return max([abs_max(v) for v in x] + [0.0])
    if isinstance(x, dict):
        return max([abs_max(v) for v in x.values()] + [0.0])
    if isinstance(x, float) and math.isfinite(x):
        return abs(x)
    return 0.0


def shape_key(x):
    """The shapes of an op's outputs: with the op's name and where it ran, what aligns two runs."""
    import torch
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, (list, tuple)):
        return tuple(shape_key(v) for v in x)
    return type(x).__name__


def _leaves(x):
    """The values of a snapshot (nested lists flattened)."""
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _ok(rel=0.0, ratio=None, max_abs=0.0):
    return {"bad": False, "rel": rel, "ratio": ratio, "max_abs": max_abs, "note": ""}


def bad_result(note, rel=float("inf"), ratio=None, max_abs=None):
    return {"bad": True, "rel": rel, "ratio": ratio, "max_abs": max_abs, "note": note}


def _compare_leaf(g, c, r, in_scale, tol_ref, tol_plain):
    """One output: tpu ``g`` against CPU float32 ``c`` and, when given, CPU float64 ``r``.

    With ``r``: bad when tpu's error against float64 exceeds ACCURACY_FACTOR times CPU float32's
    error plus ``tol_ref`` of the output's magnitude (tpu is clearly less accurate than CPU).
    Without: bad when ``|g - c|`` exceeds ``tol_plain`` of the largest magnitude among the op's
    inputs and this output."""
    import torch
    if isinstance(c, (bool, int, float)) and not isinstance(c, torch.Tensor):
        if not isinstance(g, (bool, int, float)):
            return bad_result(f"got {type(g).__name__}")
        if not (isinstance(c, float) or isinstance(g, float)):
            return _ok() if g == c else bad_result(f"{g} vs {c}")
        # a float scalar is measured as a tensor: rounding, not equality
        g, c = torch.tensor(float(g)), torch.tensor(float(c))
        r = torch.tensor(float(r)) if isinstance(r, (bool, int, float)) else None
    if not isinstance(c, torch.Tensor):
        return _ok() if (g == c or isinstance(c, str)) else bad_result(f"{g!r} vs {c!r}")
    if not isinstance(g, torch.Tensor):
        return bad_result(f"got {type(g).__name__}")
    if tuple(g.shape) != tuple(c.shape):
        return bad_result(f"shape {list(g.shape)} vs {list(c.shape)}")
    if c.numel() == 0:
        return _ok()
    if c.is_complex():
        g, c = torch.view_as_real(g.resolve_conj()), torch.view_as_real(c.resolve_conj())
        r = torch.view_as_real(r.resolve_conj()) if isinstance(r, torch.Tensor) and r.is_complex() else None
    if not c.is_floating_point():
        differing = int((g.to(c.dtype) != c).sum())
        if differing:
            return bad_result(f"{differing} of {c.numel()} {str(c.dtype)[6:]} elements differ")
        return _ok()
    return _compare_floats(g.double(), c.double(), r, in_scale, tol_ref, tol_plain)


def _compare_floats(g, c, r, in_scale, tol_ref, tol_plain):
    """:func:`_compare_leaf` of float64 copies of floating outputs: NaNs and infinities must sit
    where CPU's do, then the finite values are measured."""
    import torch
    nan_g, nan_c = torch.isnan(g), torch.isnan(c)
    if not torch.equal(nan_g, nan_c):
        return bad_result(f"NaN on tpu at {int((nan_g & ~nan_c).sum())}, on CPU at "
                          f"{int((nan_c & ~nan_g).sum())} of {c.numel()} elements")
    inf_c = torch.isinf(c)
    if not torch.equal(torch.isinf(g), inf_c) or not torch.equal(g[inf_c], c[inf_c]):
        return bad_result("infinities differ")
    fin = torch.isfinite(c)
    if not fin.any():
        return _ok()
    diff = float((g[fin] - c[fin]).abs().max())
    usable = (isinstance(r, torch.Tensor) and r.is_floating_point()
              and tuple(r.shape) == tuple(c.shape))
    if usable:
        r = r.double()
        fin = fin & torch.isfinite(r)
        if not fin.any():
            usable = False
    if usable:
        return _against_float64(g, c, r, fin, diff, tol_ref)
    mag = float(c[fin].abs().max())
    rel = diff / max(in_scale, mag, 1e-30)
    return bad_result("", rel, None, diff) if rel > tol_plain else _ok(rel, None, diff)


def _against_float64(g, c, r, fin, diff, tol_ref):
    """tpu ``g`` and CPU ``c`` measured on float64's ``r`` where all are finite (``fin``)."""
    mag = float(r[fin].abs().max())
    e_t = float((g[fin] - r[fin]).abs().max())
    e_c = float((c[fin] - r[fin]).abs().max())
    rel = e_t / max(mag, 1e-30)
    ratio = e_t / e_c if e_c > 0 else (float("inf") if e_t > 0 else 1.0)
    if e_t > ACCURACY_FACTOR * e_c + tol_ref * mag:
        return bad_result(f"error vs float64 {rel:.1e} of the output's magnitude, CPU float32's "
                          f"{e_c / max(mag, 1e-30):.1e}", rel, ratio, diff)
    return _ok(rel, ratio, diff)


def compare(got, cpu, ref64, in_scale, tol_ref, tol_plain):
    """Every output (see :func:`_compare_leaf`); the worst one, bad ones first."""
    gl, cl = _leaves(got), _leaves(cpu)
    rl = _leaves(ref64) if ref64 is not None else None
    if len(gl) != len(cl):
        return bad_result(f"{len(gl)} outputs vs {len(cl)}")
    if rl is not None and len(rl) != len(cl):
        rl = None
    worst = None
    for i, (g, c) in enumerate(zip(gl, cl)):
        res = _compare_leaf(g, c, rl[i] if rl else None, in_scale, tol_ref, tol_plain)
        if len(cl) > 1:
            res["note"] = f"output {i}" + (f": {res['note']}" if res["note"] else "")
        if worst is None or (res["bad"], res["rel"]) > (worst["bad"], worst["rel"]):
            worst = res
    return worst or _ok()


def unordered_ties(name, args, kwargs):
    """Ops whose index output is unspecified among equal values (CPU's unstable sort returns them
    in an arbitrary order): their indices are checked by what they select, not compared."""
    base = name.split("::")[-1]
    if base == "sort.stable":
        return not kwargs.get("stable", False)
    return base.split(".")[0] in ("sort", "topk", "kthvalue", "median", "nanmedian", "mode")


def tied_indices_ok(name, c_args, c_kwargs, got, ref):
    """sort / topk on tpu: do its indices pick, from the input, exactly CPU's values?"""
    import torch
    base = name.split("::")[-1].split(".")[0]
    if base not in ("sort", "topk") or not isinstance(got, list) or len(got) < 2:
        return True
    x = c_args[0]
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return True
    if base == "sort":
        dim = c_kwargs.get("dim", c_args[1] if len(c_args) > 1 and not name.endswith("stable") else -1)
    else:
        dim = c_kwargs.get("dim", c_args[2] if len(c_args) > 2 else -1)
    picked = torch.take_along_dim(x, got[1].to(torch.long), dim=dim)
    return torch.equal(picked.double().nan_to_num(7.5), ref[0].double().nan_to_num(7.5))


def describe_shapes(args):
    import torch
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(f"{str(a.dtype)[6:]}{list(a.shape)}")
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            out.append(f"[{len(a)} tensors]")
        else:
            r = repr(a)
            out.append(r if len(r) < 30 else r[:27] + "...")
    return ", ".join(out)



def input_sample(args):
    """The op's tensor arguments, each as an even sample of at most 2^16 elements, on CPU."""
    import torch
    from torch.utils._pytree import tree_flatten
    out = []
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor):
            t = t.detach().reshape(-1)
            if t.numel() > 1 << 16:
                t = t[:: math.ceil(t.numel() / (1 << 16))]
            out.append(t.to("cpu", copy=True))
    return out


def input_rel(a, b):
    """Largest difference between two runs' samples of an op's inputs, each normalized by that
    input's largest magnitude."""
    import torch
    if a is None or b is None or len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        if x.numel() == 0:
            continue
        if not (y.is_floating_point() or y.is_complex()):
            if not torch.equal(x.to(y.dtype), y):
                return float("inf")
            continue
        x, y = x.double(), y.double()
        if not torch.equal(torch.isnan(x), torch.isnan(y)):
            return float("inf")
        fin = torch.isfinite(y) & torch.isfinite(x)
        if not fin.any():
            continue
        worst = max(worst, float((x[fin] - y[fin]).abs().max()) / max(float(y[fin].abs().max()), 1e-30))
    return worst
