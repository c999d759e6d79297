"""One zoo model on CPU and on tpu in this process (:func:`run_model`): the CPU reference, the tpu
run, their comparison against the model's own float32 noise, and a trace where they differ."""

import copy
import math
import time
import traceback

from ..compare import loss_rel, state_diff, to_double
from .execute import dynamo_counts, error_text, execute, perturbed, zero_dropout
from .record import ModelResult
from .specs import DRIFT_INPUT_TOL, LOSS_RTOL, MODELS, NOISE_FACTOR
from .trace import trace as trace_ops


def run_model(name, steps=3, trace="auto", mode=None, progress=None, compiled=False):
    """Runs one zoo model on CPU and tpu in this process; returns its :class:`ModelResult`.
    ``trace``: auto (trace a model that differs or fails), always or never; ``progress(rec)`` is
    called whenever the record changes phase (the sweep's worker saves it, so a crash keeps it);
    ``compiled``: tpu's forward and backward run as ``torch.compile(model, backend="tpu")``."""
    import torchtpu

    spec = MODELS[name]
    rec = ModelResult(model=name, family=spec.family, steps=steps)
    save = progress or (lambda r: None)
    started = time.perf_counter()
    if mode:
        torchtpu.set_eager_mode(mode)
    rec.mode = mode or torchtpu.metrics.as_dict()["mode"]
    if compiled:
        rec.compiled = True
        trace = "never"  # the op trace records eager dispatch
    model = _build(spec, rec)
    if model is None:
        return rec
    batches = [spec.batch(s) for s in range(steps)]
    cpu = _cpu_reference(spec, model, batches, steps, rec, save)
    if cpu is None:
        return rec
    tpu = _tpu_run(spec, model, batches, steps, compiled, rec, save)
    first_bad_step = _compare_runs(spec, model, batches, steps, cpu, tpu, rec, save)
    if trace == "always" or (trace == "auto" and rec.status in ("mismatch", "error")):
        rec.phase = "trace"
        save(rec)
        _trace_into(rec, spec, model, batches, steps, tpu["error"], first_bad_step)
    rec.total_s = round(time.perf_counter() - started, 2)
    save(rec)
    return rec


def _build(spec, rec):
    """The model with seed 0 and dropout off; None (and the error in ``rec``) if it fails."""
    import torch
    if spec.setup:
        spec.setup()
    torch.manual_seed(0)
    try:
        model = spec.build()
    except Exception as e:  # noqa: BLE001
        rec.status, rec.error, rec.traceback = "error", "build: " + error_text(e), traceback.format_exc()
        return None
    zero_dropout(model)
    rec.params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return model


def _cpu_reference(spec, model, batches, steps, rec, save):
    """The CPU run every comparison is against; None (an error in ``rec``) when it raised or its
    loss is not finite: NaN on both sides would "match", and such a model tests nothing."""
    rec.phase = "cpu"
    save(rec)
    cpu = execute(spec, copy.deepcopy(model), "cpu", batches, steps, True, keep_state=True)
    rec.cpu_s = round(cpu["total_s"], 3)
    if cpu["error"]:
        rec.status, rec.error, rec.traceback = "error", "CPU reference: " + cpu["error"], cpu["traceback"]
        return None
    rec.loss_cpu = cpu["losses"]
    diverged = [i for i, v in enumerate(cpu["losses"]) if not math.isfinite(v)]
    if diverged:
        rec.status = "error"
        rec.error = (f"CPU reference diverged: loss {cpu['losses'][diverged[0]]} at step "
                     f"{diverged[0]}; nothing to compare")
        return None
    return cpu


def _tpu_run(spec, model, batches, steps, compiled, rec, save):
    """The tpu run, with the fallbacks and compiles it caused (counters reset before it)."""
    import torchtpu
    rec.phase = "tpu"
    save(rec)
    torchtpu.metrics.reset()
    if compiled:  # Dynamo's counters are per process: count this model's graphs only
        from torch._dynamo.utils import counters
        counters.clear()
    tpu = execute(spec, copy.deepcopy(model), "tpu", batches, steps, True, keep_state=True, compiled=compiled)
    if compiled:
        rec.graphs, rec.graph_breaks, rec.graph_break_reasons = dynamo_counts()
    rec.tpu_s = round(tpu["total_s"], 3)
    rec.tpu_train_s = round(tpu.get("train_s", 0.0), 3)
    if "generate_s" in tpu:
        rec.tpu_generate_s = round(tpu["generate_s"], 3)
    rec.fallbacks = torchtpu.metrics.cpu_fallbacks()
    counters = torchtpu.metrics.counters()
    rec.compiles = counters.get("compiles")
    rec.executions = counters.get("executions")
    rec.loss_tpu = tpu["losses"]
    return tpu


def _compare_runs(spec, model, batches, steps, cpu, tpu, rec, save):
    """Fills ``rec``'s verdict on the two runs; returns the first step whose loss differs beyond
    the noise (None if none)."""
    rels = [loss_rel(a, b) for a, b in zip(tpu["losses"], cpu["losses"])]
    rec.loss_rel_diff = max(rels) if rels else None
    bad_steps = [i for i, r in enumerate(rels) if r > LOSS_RTOL]
    if bad_steps and not tpu["error"] and len(rels) == steps:
        rec.phase = "noise"
        save(rec)
        bad_steps = _beyond_noise(spec, model, batches, steps, cpu["losses"], tpu["losses"], bad_steps, rec)
    rec.loss_parity = not tpu["error"] and len(rels) == steps and not bad_steps
    if spec.generate is not None:
        rec.generated_cpu = cpu["generated"]
        rec.generated_tpu = tpu["generated"]
        rec.generate_parity = (None if tpu["generated"] is None and tpu["error"]
                               else tpu["generated"] == cpu["generated"])
    if tpu["error"]:
        rec.error = tpu["error"]
        rec.traceback = tpu["traceback"]
    else:
        rec.param_rel_diff, rec.param_worst = state_diff(tpu["state"], cpu["state"])
    rec.status = _status(rec, tpu["error"])
    rec.phase = "done"
    save(rec)
    return bad_steps[0] if bad_steps else None


def _beyond_noise(spec, model, batches, steps, cpu_losses, tpu_losses, bad_steps, rec):
    """The steps whose loss difference is more than float32 rounding makes of this model: the same
    CPU training in float64, and in float32 from weights moved by one rounding error, say how far
    two honest float32 implementations may drift apart (ReLU masks and BatchNorm over few values
    amplify rounding differences). Records the runs and the noise in ``rec``."""
    noise = [0.0] * steps
    rec.loss_noise_runs = {}

    def within(i):
        return abs(tpu_losses[i] - cpu_losses[i]) <= NOISE_FACTOR * noise[i]

    # the perturbed float32 runs first: cheap, and enough for most ill-conditioned models;
    # float64 (slow on CPU for convolutions) only when they do not cover the difference
    for label in ("perturbed 1", "perturbed 2", "float64"):
        if all(within(i) for i in bad_steps):
            break
        if label == "float64":
            run = execute(spec, copy.deepcopy(model).double(), "cpu", to_double(batches), steps, False)
        else:
            run = execute(spec, perturbed(copy.deepcopy(model), int(label[-1])), "cpu", batches, steps, False)
        if run["error"] or len(run["losses"]) != steps:
            rec.loss_noise_runs[label] = run["error"]
            continue
        rec.loss_noise_runs[label] = run["losses"]
        noise = [max(n, abs(c - r)) for n, c, r in zip(noise, cpu_losses, run["losses"])]
    rec.fp32_noise_rel = max(n / max(abs(c), 1e-12) for n, c in zip(noise, cpu_losses))
    bad_steps = [i for i in bad_steps if not within(i)]
    rec.loss_parity_within_noise = not bad_steps
    return bad_steps


def _status(rec, tpu_error):
    if tpu_error:
        return "error"
    # generate_parity is None only for a model that does not generate (tpu_error is handled)
    if not (rec.loss_parity and rec.generate_parity is not False):
        return "mismatch"
    return "fallback" if rec.fallbacks else "pass"


def _trace_into(rec, spec, model, batches, steps, tpu_error, first_bad_step):
    """Traces the run up to where it first went wrong into ``rec.trace``; a mismatch whose
    ops all match CPU on their own inputs becomes ``drift``."""
    if tpu_error:
        t_steps, t_gen = steps, True
    elif first_bad_step is not None:
        t_steps, t_gen = first_bad_step + 1, False
    elif rec.generate_parity is False:
        t_steps, t_gen = steps, True  # generation follows the training steps
    else:
        t_steps, t_gen = steps, spec.generate is not None
    t0 = time.perf_counter()
    try:
        rec.trace = trace_ops(spec, model, batches, t_steps, t_gen)
    except Exception as e:  # noqa: BLE001
        rec.trace = {"error": error_text(e), "traceback": traceback.format_exc()[-3000:]}
    rec.trace["seconds"] = round(time.perf_counter() - t0, 2)
    tr = rec.trace
    fd = tr.get("first_divergence")
    if (rec.status == "mismatch" and not tr.get("error") and not tr.get("tpu_error")
            and not tr.get("replay_mismatches") and fd
            and fd.get("input_rel") is not None and fd["input_rel"] <= DRIFT_INPUT_TOL):
        # every tpu op matches CPU on its own inputs, and where the runs part, the op's inputs
        # were still equal to rounding: float32 rounding amplified, not a wrong op
        rec.status = "drift"
    rec.phase = "done"
