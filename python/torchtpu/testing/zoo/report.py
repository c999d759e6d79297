"""The sweep's Markdown report (docs/models.md, docs/models_compiled.md) from its records."""

import datetime
import math
import os
import platform

from .specs import ACCURACY_FACTOR, LOSS_RTOL, MODELS, NOISE_FACTOR, REPLAY_ATOL, TRACE_ATOL

_STATUS = {"pass": "pass", "fallback": "pass, CPU fallbacks", "drift": "drift (no wrong op)",
           "mismatch": "**mismatch**", "error": "**error**", "timeout": "**timeout**",
           "crash": "**crash**"}

COMPILED_NOTE = '; the tpu run through `torch.compile(model, backend="tpu")`'


def fmt(x, digits=1):
    """A number for a table cell: floats in exponent notation, a missing one as a dash."""
    if x is None:
        return "—"
    if isinstance(x, float):
        if math.isinf(x):
            return "inf"
        return f"{x:.{digits}e}"
    return str(x)


def _fmt_where(w):
    return w.replace("|", "\\|")


def _replay_text(tr):
    rm = tr.get("replay_mismatches") or {}
    if rm:
        ops = sorted(rm.items(), key=lambda kv: -kv[1]["max_rel"])
        return ("replay: " + ", ".join(
            f"`{op}` ×{v['count']} ({v['note'] or 'off by ' + fmt(v['max_rel'])}; "
            f"{_fmt_where(v['first_shapes'])})" for op, v in ops[:4])
            + (f", +{len(ops) - 4} more" if len(ops) > 4 else ""))
    if tr.get("replayed_ops"):
        return f"replay: all {tr['replayed_ops']} ops match CPU"
    return ""


def _divergence_text(r):
    tr = r.trace
    if not tr:
        return "—"
    if tr.get("error") and not tr.get("first_divergence") and not tr.get("replay_first"):
        return "trace failed: " + tr["error"][:150]
    parts = []
    fd = tr.get("first_divergence")
    if fd:
        text = f"`{fd['op']}` in {_fmt_where(fd['where'])}: "
        text += fd["note"] if fd.get("note") else f"off by {fmt(fd['rel'])} (normalized)"
        if fd.get("input_rel") is not None:
            text += f"; its inputs differed by {fmt(fd['input_rel'])}"
        parts.append(text)
    else:
        parts.append("no aligned op beyond tolerance")
    if _replay_text(tr):
        parts.append(_replay_text(tr))
    if tr.get("tpu_error") and not r.error:
        parts.append("traced tpu run raised: " + tr["tpu_error"][:150])
    return "; ".join(parts).replace("\n", " ")


def _status_text(r):
    s = r.status or "?"
    return _STATUS.get(s, s)


def write_markdown(path, records, args, seconds):
    """``records``: the sweep's :class:`~torchtpu.testing.zoo.record.ModelResult` list; ``args``:
    its parsed command line (``argv``, ``steps``, ``mode``, ``compile``)."""
    counts = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines = _preamble(args, seconds)
    lines += ["| status | models |", "| --- | ---: |"]
    for k in _STATUS:
        if counts.get(k):
            lines.append(f"| {_STATUS[k]} | {counts[k]} |")
    lines += ["", "| model | family | params | steps | status | loss parity | generate parity | "
              f"fallback ops | {'Dynamo graphs' if args.compile else 'first divergence'} | time (s) |",
              "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- | ---: |"]
    lines += [_model_row(r) for r in records]
    notes = [f"- {n}: {MODELS[n].note}" for n in (r.model for r in records)
             if n in MODELS and MODELS[n].note]
    if notes:
        lines += ["", "Model notes:", ""] + notes
    lines += ["", "Losses per step, CPU / tpu:", ""]
    lines += [_loss_line(r) for r in records if r.loss_cpu]
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def _preamble(args, seconds):
    """The report's title, provenance and the legend of its columns."""
    import torch
    import torchvision
    import transformers

    import torchtpu
    cmd = "python -m torchtpu.testing.models " + " ".join(args.argv)
    return [
        "# Model zoo on tpu against CPU PyTorch" + (", compiled" if args.compile else ""), "",
        f"Generated {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), "
        f"platform `{torchtpu.platform()}`, eager mode `{args.mode or 'strict'}`"
        f"{COMPILED_NOTE if args.compile else ''}; torch "
        f"{torch.__version__}, transformers {transformers.__version__}, torchvision "
        f"{torchvision.__version__}; the sweep took {seconds / 60:.1f} minutes. Command:", "",
        "```", cmd, "```", "",
        "Each model is built from a small config (nothing downloaded: 2 layers, hidden 32, vocab "
        "100, images 32-64 px) with `torch.manual_seed(0)`. The same initial weights train for "
        f"{args.steps} steps on CPU and on tpu, on the same batches, dropout off (AdamW for "
        "transformers, SGD with momentum for torchvision, `foreach=True` on both devices, Adagrad "
        "for the recommender's sparse gradients; "
        "detection models with frozen BatchNorm, as torchvision fine-tunes them). Text batches are 2 "
        "sequences of 16 tokens, the second right-padded by 4 (8 target tokens for "
        "encoder-decoders). Language models then `generate` 6 tokens greedily.", "",
        f"- *loss parity*: the largest relative difference of a step's loss; equal at ≤ {LOSS_RTOL:g}, "
        f"or within {NOISE_FACTOR}× the model's own float32 noise (shown in parentheses when "
        "measured: how far CPU float32 runs from weights moved by one rounding error end up, "
        "and a float64 run when those do not cover the difference).",
        "- *fallback ops*: ops that ran on the CPU during the tpu run "
        "(`torchtpu.metrics.cpu_fallbacks()`).",
        "- *first divergence* (models that differ or fail): the training steps run again on CPU "
        "float32, CPU float64 and tpu recording every ATen op's outputs (a `TorchDispatchMode`); "
        "the op sequences are aligned and the first op whose tpu output is off from float64 by "
        f"more than {ACCURACY_FACTOR}× CPU float32's error (plus {TRACE_ATOL:g} of its magnitude) "
        "is named, with where it ran (module, or autograd node and the module that created it) "
        "and how much its inputs already differed. *replay*: every tpu op is also run on CPU on "
        "copies of its own tpu inputs; ops off by more than "
        f"{ACCURACY_FACTOR}× CPU's error (plus {REPLAY_ATOL:g}) are wrong lowerings whatever the "
        "drift.",
        "- *drift (no wrong op)*: the losses differ beyond the noise, but every op matches CPU on "
        "its own inputs and where the runs part the op's inputs were equal to rounding (e.g. a "
        "ReLU mask flipping on a value within rounding of 0): float32 rounding amplified.",
        "- *time (s)*: the tpu run (training and generation; compiles included, except those "
        "the compile cache already held) / the CPU run / the model's whole subprocess (imports, "
        "both runs, noise runs and trace).", "",
    ]


def _model_row(r):
    """One model's row of the results table."""
    gen = r.generate_parity
    gen = "—" if gen is None else ("equal" if gen else "**differs**")
    fb = r.fallbacks or {}
    # an empty dict is a tpu run without fallbacks; None, a model that never got to tpu
    fb_text = ", ".join(f"`{k}` ×{v}" for k, v in sorted(fb.items())) if fb else \
        ("none" if r.fallbacks is not None else "—")
    lp = "—" if r.loss_rel_diff is None else fmt(r.loss_rel_diff)
    if r.fp32_noise_rel is not None:
        lp += f" (noise {fmt(r.fp32_noise_rel)})"
    div = _divergence_text(r)
    if r.compiled:  # no op trace: how Dynamo split the model instead
        div = f"{fmt(r.graphs)} graphs, {fmt(r.graph_breaks)} graph breaks" + "".join(
            f"; `{k}` ×{v}" for k, v in (r.graph_break_reasons or {}).items())
    if r.error:
        # where tpu raised, the exception is the finding (the op sequences usually part
        # because the device takes another path); the replay verdict still helps
        verdict = _replay_text(r.trace or {})
        div = ("**" + r.error[:400].replace("|", "\\|").replace("\n", " ") + "**"
               + (f"; until then {verdict}" if verdict else ""))
    time_text = " / ".join("—" if t is None else f"{t:.1f}" for t in (r.tpu_s, r.cpu_s, r.wall_s))
    params = r.params if r.params is not None else "—"
    return (f"| {r.model} | {r.family} | {params} | {r.steps} | {_status_text(r)} | {lp} | {gen} | "
            f"{fb_text} | {div} | {time_text} |")


def _loss_line(r):
    tpu = r.loss_tpu or []
    pairs = ", ".join(f"{c:.6f} / {tpu[i]:.6f}" if i < len(tpu) else f"{c:.6f} / —"
                      for i, c in enumerate(r.loss_cpu))
    return f"- {r.model}: {pairs}"
