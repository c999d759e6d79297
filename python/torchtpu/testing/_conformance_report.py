"""Writes the results of ``python -m torchtpu.testing.opinfo`` as Markdown (docs/conformance.md)."""

import datetime
import os
import platform

from ._dtypes import DTYPES, SHORT


def _core_ops():
    import torch
    core = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not hasattr(packet, "overloads"):
            continue
        for overload in packet.overloads():
            if torch.Tag.core in getattr(packet, overload).tags:
                core.add("aten::" + name + ("" if overload == "default" else "." + overload))
    return core


def _platform():
    try:
        import torchtpu
        return torchtpu.platform()
    except Exception:
        return "unknown"


def _cell(text, limit=160):
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _pct(n, d):
    return f"{100.0 * n / d:.1f}%" if d else "–"


def _dtype_table(per_dtype, total, ops):
    """One row per dtype. *ops clean* counts ops whose every sample (and gradient check) in that
    dtype passed on the device: sample counts alone are dominated by the few ops with hundreds."""
    lines = ["| dtype | ops | ops clean | samples | passed on device | passed via CPU fallback "
             "| rounding | failed | errors | not run (time limit) | on device | on device or rounding "
             "| grad checks (failed) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def clean(d):
        return d["samples"] and d["passed"] == d["samples"] and not d["grad_failed"] and not d["not_run"]

    rows = [(n, per_dtype[n]) for n in DTYPES if n in per_dtype] + [("**all**", total)]
    for dtype_name, t in rows:
        if not t["samples"] and dtype_name != "**all**":
            continue
        if dtype_name == "**all**":
            n_ops = len(ops)
            n_clean = sum(1 for r in ops.values() if r["by_dtype"]
                          and all(clean(d) for d in r["by_dtype"].values()))
        else:
            n_ops = sum(1 for r in ops.values() if dtype_name in r["by_dtype"])
            n_clean = sum(1 for r in ops.values() if dtype_name in r["by_dtype"]
                          and clean(r["by_dtype"][dtype_name]))
        grad = f"{t['grad_samples']} ({t['grad_failed']})" if t["grad_samples"] else ""
        lines.append(f"| {dtype_name} | {n_ops} | {n_clean} | {t['samples']} | {t['passed']} | "
                     f"{t['passed_fallback']} | {t['rounding']} | {t['failed']} | {t['errors']} | "
                     f"{t['not_run']} | {_pct(t['passed'], t['samples'])} | "
                     f"{_pct(t['passed'] + t['rounding'], t['samples'])} | {grad} |")
    return lines


def _op_rows(ops):
    lines = ["| op | samples | on device | via fallback | rounding | failed | errors | grad (failed) "
             "| dtypes with failures | CPU fallbacks | first failure |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in ops.items():
        bad = []
        for dtype_name, d in r["by_dtype"].items():
            n = d["failed"] + d["errors"] + d["grad_failed"]
            if n:
                bad.append(f"{SHORT[dtype_name]} ({n})")
            elif d["not_run"]:
                bad.append(f"{SHORT[dtype_name]} (not run {d['not_run']})")
        fb = ", ".join(f"`{f.replace('aten::', '')}`" for f in r["fallback_ops"])
        grad = f"{r['grad_samples']} ({r['grad_failed']})" if r["grad_samples"] else ""
        lines.append(f"| {name} | {r['samples']} | {r['passed']} | {r['passed_fallback']} | "
                     f"{r['rounding']} | {r['failed']} | {r['errors']} | {grad} | {', '.join(bad)} | {fb} | "
                     f"{_cell(r['first_failure'])} |")
    return lines


def _padded_section(report):
    """The padded run's part (--padded): how many samples ran padded, per op."""
    rules = report["padded"]
    t = report["totals"]
    lines = ["## Stored padded (`--padded`)", "",
             f"Every sample tensor that is not a view was stored padded, varying in the sizes of the sample's "
             f"first tensor. Samples whose tpu run had padded ops: {t['ran_padded']} of {t['samples']}; "
             f"samples where an op without a rule read a padded input at its exact sizes: {t['read_exact']}. "
             f"Lowered ATen ops with a padding rule: {rules['with_rule']} of {rules['lowered_ops']}.", "",
             "| op | samples | ran padded | read exact | failed | errors |", "| --- | --- | --- | --- | --- | --- |"]
    for name, r in report["ops"].items():
        lines.append(f"| {name} | {r['samples']} | {r['ran_padded']} | {r['read_exact']} | {r['failed']} | {r['errors']} |")
    return lines + [""]


def write_markdown(path, report, args):
    import torch
    ops = report["ops"]
    core = _core_ops()
    core_fallbacks = sorted({f for r in ops.values() for f in r["fallback_ops"] if f in core})
    t = report["totals"]
    cmd = (f"python -m torchtpu.testing.opinfo --json {args.json}"
           + (f" --ops {' '.join(args.ops)}" if args.ops else "")
           + (f" --dtypes {' '.join(args.dtypes)}" if args.dtypes != DTYPES else "")
           + (f" --grad-dtypes {' '.join(args.grad_dtypes)}" if args.grad_dtypes != ["float32"] else "")
           + (" --no-grad" if args.no_grad else "")
           + (f" --time-limit {args.time_limit:g}" if args.time_limit != 120 else "")
           + (" --no-foreach" if args.no_foreach else "")
           + (" --foreach-contiguous-only" if args.foreach_contiguous_only else "")
           + (" --padded" if args.padded else "")
           + f" --jobs {args.jobs} --markdown {path}")
    minutes = report["wall_seconds"] / 60
    lines = [
        "# Conformance against PyTorch's OpInfo database", "",
        f"Generated {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), "
        f"torch {torch.__version__}, platform `{_platform()}`, in {minutes:.0f} minutes, by:", "",
        "```", cmd, "```", "",
    ]
    built = report.get("extension_built") or {}
    if built.get("start") != built.get("end"):
        lines += [f"The extension was rebuilt during the run ({built.get('start')} -> "
                  f"{built.get('end')}): results mix the two builds.", ""]
    lines += [
        "Every sample of PyTorch's OpInfo database (`op_db`) and of its foreach databases runs on "
        "CPU (the reference) and on tpu, in every dtype the op supports on CPU among "
        + ", ".join(report["dtypes"]) + "; outputs are compared with `torch.testing.assert_close` "
        "at the dtype's default tolerances (exact for integers and bool). "
        + ("Ops supporting autograd also get a gradient check in "
           + ", ".join(report["grad_dtypes"]) + " (backward of the summed outputs, rtol = atol = "
           "1e-4). " if report["grad_dtypes"] else "")
        + "A sample is **passed on device** only when no CPU fallback "
        "(`torchtpu.metrics.cpu_fallbacks()`) ran while tpu computed it; one that matched only "
        "with a fallback's help is **passed via CPU fallback**. A float sample that does not "
        "match CPU's is run again on CPU with its inputs in float64: it counts as *rounding* when "
        "tpu's largest error against that result is at most twice CPU's, or within the dtype's "
        "tolerance of it (integer outputs must still match, and a NaN or infinity where CPU has "
        "another value must be the float64 result's). *failed* are "
        "wrong values, shapes or dtypes; *errors* are samples where tpu raised and CPU did not (or raised another kind "
        "of exception), and a worker crash counts as one error for that op and dtype. Samples "
        "beyond " f"{args.time_limit:.0f} s per op and dtype are *not run*. Random ops are excluded "
        "(listed at the end): their values cannot match CPU's; so are ops PyTorch implements for "
        "the CPU only.", "",
        "## Summary per dtype", "",
    ]
    if report.get("padded"):
        lines[-2:-2] = _padded_section(report)
    op_db = {n: r for n, r in ops.items() if r["kind"] == "op_db"}
    foreach = {n: r for n, r in ops.items() if r["kind"] != "op_db"}
    lines += _dtype_table(report["per_dtype"], t, ops)
    lines += [
        "",
        f"Ops: {t['ops_total']}, every sample passing on the device in every dtype (*ops clean*): "
        f"{t['ops_all_passed']}. Core ATen ops that fell back to the CPU: {len(core_fallbacks)}"
        + (": " + ", ".join(f"`{o}`" for o in core_fallbacks) if core_fallbacks else "") + ".",
        "", "### `op_db` only", "",
    ]
    lines += _dtype_table(report["op_db"]["per_dtype"], report["op_db"]["all"], op_db)
    lines += ["", "## Foreach ops", "",
              "`foreach_unary_op_db`, `foreach_binary_op_db`, `foreach_pointwise_op_db`, "
              "`foreach_reduce_op_db` and `foreach_other_op_db`, sampled as PyTorch's "
              "`test_foreach.py` parity test does (`allow_higher_dtype_scalars=True`, contiguous "
              "and non-contiguous tensors, lists of 20 and 23 tensors with empty ones interspersed). "
              "`_foreach_x` is the out-of-place function, `_foreach_x_` the in-place one (compared "
              "by the tensors it mutates).", ""]
    lines += _dtype_table(report["foreach"]["per_dtype"], report["foreach"]["all"], foreach)
    lines += [""]
    lines += _op_rows(foreach)
    lines += ["", "## Per op (`op_db`)", "",
              "*dtypes with failures* counts failed + errors + failed gradient checks per dtype "
              "(f64, f32, bf16, f16, c128, c64, i64, i32, i16, i8, u8, b8); *first failure* is the "
              "first one met, in dtype order. The JSON written by `--json` keeps up to three "
              "failures per op and dtype, with the sample's shapes.", ""]
    lines += _op_rows(op_db)
    lines += ["", "Excluded (random): " + ", ".join(report["excluded_random"]), "",
              "Excluded (PyTorch implements them for the CPU only; CUDA raises as tpu does): "
              + ", ".join(report.get("excluded_cpu_only", [])), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
