"""Runs PyTorch's module and optimizer databases on tpu against the CPU reference.

    python -m torchtpu.testing.modules --json FILE [--modules NAME ...] [--optimizers NAME ...]
                                       [--jobs 2] [--markdown FILE]

**Modules** (``torch.testing._internal.common_modules.module_db``): every ``ModuleInput`` of every
``ModuleInfo``, in float32, in train and in eval mode. The module is built on the CPU (lazy
modules materialized by one CPU forward), deep-copied to tpu, and both run the sample: outputs,
buffers after the call (running statistics), and the gradients of the summed outputs with respect
to the inputs and every parameter are compared (``assert_close`` defaults for values, 1e-4 for
gradients). Modules that draw random numbers are excluded where they do (training mode, or always).

**Optimizers** (``torch.testing._internal.common_optimizers.optim_db``): every configuration of
``optim_inputs_func`` (the CUDA list, which adds the ``capturable`` ones) in each implementation
the optimizer has — the for-loop, ``foreach``, ``fused`` where CPU has it, ``differentiable`` —
runs five steps on a small model on tpu and on CPU; parameters after every step and the final
optimizer state are compared (rtol = atol = 1e-5). CPU has no ``capturable`` mode: those
configurations are compared with CPU's plain run of the same arithmetic.

As in ``torchtpu.testing.opinfo``, a sample *passed on the device* only when no CPU fallback ran
while tpu computed it; one that matched only with a fallback's help is *passed via CPU fallback*.
"""

import argparse
import copy
import json
import sys
import time

from ._workers import announce, record, run_units
from .compare import compare_trees, count_fallbacks, same_kind_of_error, summed_outputs, tpu_copier

COUNTS = ("samples", "passed", "passed_fallback", "failed", "errors", "excluded_random")
FAILURES_KEPT = 3
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)
OPTIM_TOL = dict(rtol=1e-5, atol=1e-5)
OPTIM_STEPS = 5
OPTIM_DTYPES = ("float32", "float64")
# Modules that draw random numbers in training mode: their values cannot match CPU's there.
RANDOM_IN_TRAINING = ("nn.Dropout", "nn.AlphaDropout", "nn.FeatureAlphaDropout", "nn.RReLU")
# Modules that draw random numbers in both modes (random pooling regions).
RANDOM = ("nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d")


def _short_error(e, limit=300):
    text = " ".join(str(e).split())
    return (text[:limit] + "...") if len(text) > limit else text


def _compare(actual, expected, **tol):
    """Compares two pytrees of tensors and plain values; tensors must sit on tpu."""
    compare_trees(actual, expected, lambda a, e: _compare_leaf(a, e, tol), "values")


def _compare_leaf(a, e, tol):
    import torch
    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.device.type != "tpu":
            raise AssertionError(f"got {type(a).__name__} on "
                                 f"{getattr(a, 'device', '-')}, expected a tpu tensor")
        torch.testing.assert_close(a.detach().cpu(), e.detach(), equal_nan=True,
                                   check_stride=False, **tol)
    elif isinstance(e, float) and isinstance(a, float):
        torch.testing.assert_close(a, e, equal_nan=True, **tol)
    elif a != e:
        raise AssertionError(f"{a!r} != {e!r}")


class _Tally:
    """One unit's counts and first failures, and which CPU fallbacks its samples used."""

    def __init__(self):
        import torchtpu
        self.metrics = torchtpu.metrics
        self.rec = {k: 0 for k in COUNTS}
        self.rec.update(failures=[], fallback_ops={})

    def run(self, desc, sample):
        """Runs ``sample()`` (which returns None on success or raises) and counts it."""
        before = self.metrics.cpu_fallbacks()
        try:
            sample()
            result, why = "passed", None
        except _Mismatch as e:
            result, why = "failed", str(e)
        except Exception as e:  # the tpu run raised where CPU did not
            result, why = "errors", f"{type(e).__name__}: {_short_error(e)}"
        used = count_fallbacks(self.rec["fallback_ops"], before, self.metrics.cpu_fallbacks())
        if result == "passed" and used:
            result = "passed_fallback"
        self.rec["samples"] += 1
        self.rec[result] += 1
        if why and len(self.rec["failures"]) < FAILURES_KEPT:
            self.rec["failures"].append({"sample": desc, "why": why, "fallback": sorted(used)})


class _Mismatch(Exception):
    """tpu ran but its results differ from CPU's."""


def _check(what, actual, expected, **tol):
    try:
        _compare(actual, expected, **tol)
    except AssertionError as e:
        raise _Mismatch(f"{what}: {_short_error(e)}") from None


def _same_exception(cpu_exc, run_tpu):
    """CPU raised: tpu must raise an exception of a related class."""
    try:
        run_tpu()
    except Exception as e:
        if same_kind_of_error(e, cpu_exc):
            return
        raise
    raise _Mismatch(f"CPU raised, tpu did not: {_short_error(cpu_exc)}")


# ---------------------------------------------------------------------------------------------
# module_db

def _module_infos():
    from torch.testing._internal.common_modules import module_db
    return {m.name: m for m in module_db}


def _module_sample(info, module_input, training):
    """One ModuleInput: builds the module on CPU, copies it to tpu, runs both, compares."""
    import torch
    from torch.nn.parameter import is_lazy
    from torch.utils._pytree import tree_flatten, tree_map

    c, f = module_input.constructor_input, module_input.forward_input
    torch.manual_seed(0)
    m = info.module_cls(*c.args, **c.kwargs).train(training)
    if any(is_lazy(p) for p in m.parameters()):
        with torch.no_grad():
            m(*tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, f.args),
              **f.kwargs)
    t_m = copy.deepcopy(m).to("tpu")
    to_tpu = tpu_copier(share_repeats=True)
    t_args, t_kwargs = tree_map(to_tpu, f.args), tree_map(to_tpu, f.kwargs)  # before CPU mutates
    try:
        expected = m(*f.args, **f.kwargs)
    except Exception as cpu_exc:
        return _same_exception(cpu_exc, lambda: torch.tpu.synchronize(t_m(*t_args, **t_kwargs)))
    actual = t_m(*t_args, **t_kwargs)
    _check("output", actual, expected)
    _check("buffers", dict(t_m.named_buffers()), dict(m.named_buffers()))
    e_total, a_total = summed_outputs(expected), summed_outputs(actual)
    if e_total is None:
        return
    if a_total is None:
        raise _Mismatch("tpu outputs do not require grad")
    wrt = lambda args, module: ([x for x in tree_flatten(args)[0]  # noqa: E731
                                 if isinstance(x, torch.Tensor) and x.requires_grad]
                                + [p for p in module.parameters() if p.requires_grad])
    e_grads = torch.autograd.grad(e_total, wrt((f.args, f.kwargs), m), allow_unused=True)
    a_grads = torch.autograd.grad(a_total, wrt((t_args, t_kwargs), t_m), allow_unused=True)
    for i, (a, e) in enumerate(zip(a_grads, e_grads)):
        if e is not None:
            if a is None:
                raise _Mismatch(f"gradient {i} missing on tpu")
            _check(f"gradient {i}", a, e, **GRAD_TOL)


def _module_unit(info, mode):
    import torch
    training = mode == "train"
    tally = _Tally()
    for i, mi in enumerate(info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                                   requires_grad=True, training=training)):
        if mi.forward_input is None:
            continue
        random = info.name in RANDOM or training and (info.name.startswith(RANDOM_IN_TRAINING)
                                                      or mi.constructor_input.kwargs.get("dropout", 0))
        if random:
            tally.rec["excluded_random"] += 1
            continue
        tally.run(f"#{i} {mi.desc or ''}".strip(), lambda: _module_sample(info, mi, training))
    return tally.rec


# ---------------------------------------------------------------------------------------------
# optim_db

def _optim_infos():
    from torch.testing._internal.common_optimizers import optim_db
    return {o.optim_cls.__name__: o for o in optim_db}


def _impls(info):
    """The implementations to compare: the for-loop, then the optimizer's others CPU has."""
    impls = ["forloop"] + [i for i in info.supported_impls if i != "fused"]
    if "fused" in info.supported_impls and "cpu" in info.supports_fused_on:
        impls.append("fused")
    return impls


def _optim_run(info, kwargs, device, dtype, differentiable):
    """Five steps of ``info``'s optimizer on a small linear model; returns parameters after each
    step and the final state. Gradients are assigned (not accumulated), so non-leaf parameters
    (what ``differentiable=True`` optimizes) work the same way."""
    import torch
    g = torch.Generator().manual_seed(0)
    shapes = [(3, 4)] if info.optim_cls.__name__ == "Muon" else [(3, 4), (3,)]  # Muon: 2-D only
    leaves = [torch.randn(s, generator=g, dtype=dtype).to(device).requires_grad_() for s in shapes]
    params = [p.clone() for p in leaves] if differentiable else leaves
    data = [tuple(torch.randn(16, n, generator=g, dtype=dtype).to(device) for n in (4, 3))
            for _ in range(OPTIM_STEPS)]
    opt = info.optim_cls(params, **kwargs)
    history = []
    for x, y in data:
        def closure(x=x, y=y):
            out = x @ params[0].t() + (params[1] if len(params) > 1 else 0)
            loss = ((out - y) ** 2).mean()  # convex: LBFGS's 20 inner steps stay well-conditioned
            for p, grad in zip(params, torch.autograd.grad(loss, params, create_graph=False)):
                p.grad = grad
            return loss.detach()
        if info.step_requires_closure:
            opt.step(closure)
        else:
            closure()
            opt.step()
        history.append([p.detach().clone() for p in params])
    state = [{k: v for k, v in s.items()} for s in opt.state_dict()["state"].values()]
    return history, state


def _optim_kwargs(info, cfg_kwargs, impl, device):
    """The configuration's arguments with ``impl`` chosen explicitly (left to itself, an optimizer
    picks foreach on tpu and the for-loop on CPU)."""
    import torch
    kwargs = dict(cfg_kwargs)
    if "foreach" in info.supported_impls:
        kwargs["foreach"] = impl == "foreach"
    if impl in ("fused", "differentiable"):
        kwargs.update({impl: True, "foreach": False})
    if device == "cpu" and kwargs.pop("capturable", False) and "foreach" in kwargs:
        kwargs["foreach"] = False  # CPU has no capturable mode: its for-loop does the same arithmetic
    elif isinstance(kwargs.get("lr"), torch.Tensor) and kwargs.get("capturable"):
        kwargs["lr"] = kwargs["lr"].to(device)
    return kwargs


def _optim_unit(info, variant):
    import torch
    impl, dtype = variant.split(" ")
    dtype = getattr(torch, dtype)
    tally = _Tally()
    for cfg in info.optim_inputs_func(device="cuda"):
        cpu_kwargs = _optim_kwargs(info, cfg.kwargs, impl, "cpu")
        tpu_kwargs = _optim_kwargs(info, cfg.kwargs, impl, "tpu")
        differentiable = impl == "differentiable"

        def sample(cpu_kwargs=cpu_kwargs, tpu_kwargs=tpu_kwargs):
            try:
                expected = _optim_run(info, cpu_kwargs, "cpu", dtype, differentiable)
            except Exception as cpu_exc:
                return _same_exception(cpu_exc, lambda: _optim_run(info, tpu_kwargs, "tpu", dtype,
                                                                   differentiable))
            actual = _optim_run(info, tpu_kwargs, "tpu", dtype, differentiable)
            torch.tpu.synchronize()
            _check("parameters", actual[0], expected[0], **OPTIM_TOL)
            on_tpu = [{k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                      for s in actual[1]]  # a non-capturable step counter stays on the CPU
            _check("state", on_tpu, expected[1], **OPTIM_TOL)
        tally.run(cfg.desc, sample)
    return tally.rec


# ---------------------------------------------------------------------------------------------
# The worker and the parent

def _worker(units, out_path):
    import torchtpu  # noqa: F401  (the tpu device)
    modules, optims = _module_infos(), _optim_infos()
    with open(out_path, "a") as out:
        for kind, name, variant in (u.split("|") for u, _ in units):
            unit = (f"{kind}|{name}|{variant}", "")
            announce(out, unit)
            started = time.time()
            try:
                rec = (_module_unit(modules[name], variant) if kind == "module"
                       else _optim_unit(optims[name], variant))
            except Exception as e:  # making the samples failed
                rec = {k: 0 for k in COUNTS}
                rec.update(samples=1, errors=1, fallback_ops={},
                           failures=[{"sample": "?", "why": f"harness: {_short_error(e)}"}])
            rec["seconds"] = round(time.time() - started, 1)
            record(out, unit, rec)


def _rows(results):
    rows = {}
    for (unit, _), rec in results.items():
        kind, name, variant = unit.split("|")
        rows.setdefault(kind, {}).setdefault(name, {})[variant] = {
            k: rec.get(k, 0) for k in COUNTS + ("failures", "fallback_ops")}
    return rows


def _totals(rows):
    total = {k: 0 for k in COUNTS}
    for variants in rows.values():
        for r in variants.values():
            for k in COUNTS:
                total[k] += r[k]
    return total


def write_markdown(path, report):
    def pct(n, d):
        return f"{100 * n / d:.1f}%" if d else "-"

    lines = [f"Generated {report['date']} by `python -m torchtpu.testing.modules "
             f"{' '.join(report['argv'])}` in {report['wall_seconds'] / 60:.0f} minutes "
             f"(torch {report['torch']}).", ""]
    for kind, title, variant_name in (("module", "module_db (float32)", "mode"),
                                      ("optim", "optim_db", "implementation")):
        rows = report["rows"].get(kind, {})
        t = _totals(rows)
        lines += [f"### {title}", "",
                  f"{t['samples']} samples: **{t['passed']} passed on the device "
                  f"({pct(t['passed'], t['samples'])})**, {t['passed_fallback']} passed via CPU "
                  f"fallback, {t['failed']} failed, {t['errors']} errors; "
                  f"{t['excluded_random']} excluded as random.", "",
                  f"| name | {variant_name} | samples | on device | via fallback | failed | errors "
                  "| fallback ops | first failure |", "| --- " * 9 + "|"]
        for name in sorted(rows):
            for variant, r in sorted(rows[name].items()):
                first = r["failures"][0] if r["failures"] else None
                why = f"{first['sample']}: {first['why']}"[:200] if first else ""
                lines.append(f"| {name} | {variant} | {r['samples']} | {r['passed']} | "
                             f"{r['passed_fallback']} | {r['failed']} | {r['errors']} | "
                             f"{', '.join(sorted(r['fallback_ops']))} | {why.replace('|', '/')} |")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--modules", nargs="*", help="module_db names, e.g. nn.LSTM (default: all)")
    parser.add_argument("--optimizers", nargs="*", help="optim_db names, e.g. Adam (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    parser.add_argument("--chunk", type=int, default=40, help="units per worker process")
    parser.add_argument("--markdown", help="also write the results as a Markdown report")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker is not None:
        with open(args._worker) as f:
            _worker(json.load(f), args._out)
        return 0

    import torch
    started = time.time()
    modules, optims = _module_infos(), _optim_infos()
    # naming only one kind runs only that kind; a flag with no names runs none of its kind
    either = args.modules is not None or args.optimizers is not None
    module_names = list(modules) if args.modules is None and not either else (args.modules or [])
    optim_names = list(optims) if args.optimizers is None and not either else (args.optimizers or [])
    unknown = sorted(set(module_names) - set(modules)) + sorted(set(optim_names) - set(optims))
    if unknown:
        parser.error(f"not in module_db or optim_db: {', '.join(unknown)}")
    todo = ([(f"module|{n}|{mode}", "") for n in module_names for mode in ("train", "eval")]
            + [(f"optim|{n}|{impl} {dtype}", "") for n in optim_names for impl in _impls(optims[n])
               for dtype in OPTIM_DTYPES])

    def worker_command(unit_file, log):
        return [sys.executable, "-m", "torchtpu.testing.modules", "--json", args.json,
                "--_worker", unit_file, "--_out", log]

    results = run_units(todo, worker_command, args.jobs, args.chunk)
    report = {"rows": _rows(results), "argv": sys.argv[1:] if argv is None else list(argv),
              "wall_seconds": round(time.time() - started, 1), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d")}
    report["totals"] = {kind: _totals(rows) for kind, rows in report["rows"].items()}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    if args.markdown:
        write_markdown(args.markdown, report)
    print(json.dumps(report["totals"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
