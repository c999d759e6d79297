"""The sweep's command line (``python -m torchtpu.testing.models``): each model runs in its own
subprocess with a timeout, so a crash or a hang is recorded and the sweep goes on."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from .record import ModelResult
from .report import fmt, write_markdown
from .run import run_model
from .specs import MODELS

PROG = "python -m torchtpu.testing.models"  # the module path the worker and the docs name


def run_in_subprocess(name, steps=3, trace="auto", mode=None, timeout=600, log=None, compiled=False):
    """Runs :func:`run_model` for one model in a fresh interpreter; a crash or a timeout becomes the
    record's ``status``."""
    options = ["--steps", str(steps), "--trace", trace]
    if mode:
        options += ["--mode", mode]
    if compiled:
        options.append("--compile")
    with tempfile.TemporaryDirectory(prefix="torchtpu-models-") as tmp:
        data, rc, wall, tail = _run_worker(name, options, tmp, timeout)
    rec = (ModelResult.from_dict(data) if data is not None
           else ModelResult(model=name, family=MODELS[name].family, steps=steps, phase="start"))
    rec.wall_s = round(wall, 2)
    if rc is None:
        rec.status = "timeout"
        rec.error = f"timed out after {timeout} s in phase '{rec.phase}'"
    elif rc != 0:
        _record_crash(rec, rc, tail)
    if log:
        log(rec)
    return rec


def _run_worker(name, options, tmp, timeout):
    """Runs the worker of model ``name``, saving into ``tmp``. -> (its last saved record as a dict
    or None, exit status or None on a timeout, seconds, the tail of its output)."""
    result = os.path.join(tmp, "result.json")
    cmd = [sys.executable, "-m", "torchtpu.testing.models", "--worker", name, "--result", result, *options]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    t0 = time.perf_counter()
    stderr_path = os.path.join(tmp, "stderr")
    with open(stderr_path, "w") as err:
        try:
            rc = subprocess.run(cmd, stdout=err, stderr=subprocess.STDOUT, env=env,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.perf_counter() - t0
    data = None
    if os.path.exists(result):
        with open(result) as f:
            data = json.load(f)
    with open(stderr_path, errors="replace") as f:
        tail = f.read()[-3000:]
    return data, rc, wall, tail


def _record_crash(rec, rc, tail):
    """A worker that died: a result saved before the crash keeps its findings; the crash is the
    error (of the trace, when it died tracing: the comparison itself was complete)."""
    rec.status = "crash" if rec.phase != "trace" else rec.status
    msg = f"worker exited with {rc} in phase '{rec.phase}'"
    if rec.phase == "trace":
        if rec.trace is None:
            rec.trace = {}
        rec.trace["error"] = msg
    else:
        rec.error = msg
    rec.stderr_tail = tail


def _worker_main(args):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings
    warnings.filterwarnings("ignore")

    def save(rec):  # written whole, then renamed: the parent never reads half a record
        tmp = args.result + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rec.to_dict(), f, default=str)
        os.replace(tmp, args.result)

    rec = run_model(args.worker, steps=args.steps, trace=args.trace, mode=args.mode, progress=save,
                    compiled=args.compile)
    save(rec)


def _parser():
    from . import __doc__ as overview
    parser = argparse.ArgumentParser(prog=PROG, description=overview,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every model's record to this file")
    parser.add_argument("--markdown", help="also write the results as a Markdown report")
    parser.add_argument("--models", nargs="+", help="only these models (default: all)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--trace", choices=["auto", "always", "never"], default="auto",
                        help="trace ops for the first divergence: for failing models (auto)")
    parser.add_argument("--mode", choices=["strict", "debug", "fused", "lazy"])
    parser.add_argument("--compile", action="store_true",
                        help='train on tpu through torch.compile(model, backend="tpu")')
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser


def _log_line(rec, t0):
    """One model's line on stdout as the sweep goes."""
    fb = rec.fallbacks or {}
    extra = f" fallbacks={sorted(fb)}" if fb else ""
    if rec.error:
        extra += f" error={rec.error[:200]}"
    fd = (rec.trace or {}).get("first_divergence")
    if fd:
        extra += f" first-divergence={fd['op']} @ {fd['where']} rel={fmt(fd['rel'])}"
    print(f"[{time.perf_counter() - t0:7.1f}s] {rec.model:<34} {rec.status!s:<9} "
          f"loss-rel={fmt(rec.loss_rel_diff)} gen={rec.generate_parity} "
          f"({rec.wall_s} s){extra}", flush=True)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.worker:
        return _worker_main(args)
    if args.list:
        for n, s in MODELS.items():
            print(f"{n}\t{s.family}")
        return 0
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown models: {unknown}; --list shows them")
    if not args.json and not args.markdown:
        parser.error("give --json and/or --markdown")

    records, t0 = [], time.perf_counter()
    for name in names:
        records.append(run_in_subprocess(name, steps=args.steps, trace=args.trace, mode=args.mode,
                                         timeout=args.timeout, log=lambda rec: _log_line(rec, t0),
                                         compiled=args.compile))
        if args.json:  # rewritten after every model: a sweep cut short keeps what it ran
            with open(args.json, "w") as f:
                json.dump({"command": PROG + " " + " ".join(argv),
                           "seconds": round(time.perf_counter() - t0, 1),
                           "models": [r.to_dict() for r in records]}, f, indent=1, default=str)
    seconds = time.perf_counter() - t0
    if args.markdown:
        write_markdown(args.markdown, records, args, seconds)
    passed = sum(r.status == "pass" for r in records)
    print(f"{passed}/{len(records)} models pass ({seconds:.0f} s)")
    return 0
