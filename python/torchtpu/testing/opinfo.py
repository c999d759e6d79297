"""Runs PyTorch's OpInfo samples on tpu against the CPU reference.

    python -m torchtpu.testing.opinfo --json FILE [--ops NAME ...] [--dtypes float32 ...]
                                      [--markdown FILE]

For every entry of ``torch.testing._internal.common_methods_invocations.op_db`` (or the named ones),
for each dtype the op supports on CPU (among those given), every sample input runs on CPU and on
tpu; outputs are compared with ``torch.testing.assert_close`` at the dtype's default tolerances.
Ops that support autograd also get a gradient check in float32: backward of the summed outputs on
tpu vs CPU. The JSON has per-op counts and the ops that fell back to the CPU.

Ops are run in worker subprocesses, so a crash in one op is recorded as such and the run goes on.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

DTYPES = ["float32", "bfloat16", "float16", "float64", "int64", "int32", "int8", "uint8", "bool",
          "complex64"]

# Ops whose results are random by design: comparing them with CPU values is meaningless.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "normal_in_place", "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.multi_head_attention_forward", "empty", "empty_like", "empty_strided",
    "new_empty", "new_empty_strided", "empty_permuted", "torch.ops.aten._efficientzerotensor",
    "randperm", "bernoulli_", "nn.functional.gumbel_softmax", "sparse.sampled_addmm",
}


def _worker(op_names, dtypes, out_path, grad, time_limit):
    import torch

    import torchtpu
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._pytree import tree_flatten, tree_map

    by_name = {}
    for op in op_db:
        by_name.setdefault(op.name + ("." + op.variant_test_name if op.variant_test_name else ""), op)

    def to_tpu(x):
        return x.detach().to("tpu").requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x

    def compare(actual, expected):
        a_leaves, _ = tree_flatten(actual)
        e_leaves, _ = tree_flatten(expected)
        if len(a_leaves) != len(e_leaves):
            raise AssertionError(f"{len(a_leaves)} outputs, expected {len(e_leaves)}")
        for a, e in zip(a_leaves, e_leaves):
            if isinstance(e, torch.Tensor):
                if not isinstance(a, torch.Tensor):
                    raise AssertionError(f"got {type(a).__name__}, expected a tensor")
                if a.device.type != "tpu" and e.device.type == "cpu" and a.numel() > 0:
                    pass  # ops returning host tensors (e.g. size-like) compare by value
                torch.testing.assert_close(a.detach().cpu(), e.detach(), equal_nan=True,
                                           check_stride=False, check_layout=False)
            elif isinstance(e, float) and isinstance(a, float):
                torch.testing.assert_close(a, e, equal_nan=True)
            elif a != e:
                raise AssertionError(f"{a!r} != {e!r}")

    def run_sample(op, sample, want_grad):
        args = (sample.input, *sample.args)
        try:
            expected = op(*args, **sample.kwargs)
        except Exception:
            expected = None
        t_args = tree_map(to_tpu, args)
        t_kwargs = tree_map(to_tpu, sample.kwargs)
        if expected is None:
            try:
                op(*t_args, **t_kwargs)
            except Exception:
                return "passed", None  # both reject the input
            return "failed", "CPU raised, tpu did not"
        try:
            actual = op(*t_args, **t_kwargs)
        except Exception as e:
            return "errors", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        try:
            compare(actual, expected)
        except Exception as e:
            return "failed", str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        if not want_grad:
            return "passed", None
        return grad_check(expected, actual, args, t_args)

    def grad_check(expected, actual, args, t_args):
        def total(out):
            leaves = [o for o in tree_flatten(out)[0]
                      if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
            return sum(o.sum() for o in leaves) if leaves else None

        e_total, a_total = total(expected), total(actual)
        if e_total is None:
            return "passed", None
        inputs = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
        t_inputs = [a for a in tree_flatten(t_args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
        try:
            e_grads = torch.autograd.grad(e_total, inputs, allow_unused=True)
        except Exception:
            return "passed", None
        try:
            a_grads = torch.autograd.grad(a_total, t_inputs, allow_unused=True)
            for a, e in zip(a_grads, e_grads):
                if e is None:
                    continue
                torch.testing.assert_close(a.cpu(), e, equal_nan=True, rtol=1e-4, atol=1e-4)
        except Exception as e:
            return "grad_failed", str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        return "passed", None

    with open(out_path, "a") as out:
        for name in op_names:
            op = by_name[name]
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            rec = {"op": name, "samples": 0, "passed": 0, "failed": 0, "errors": 0,
                   "grad_samples": 0, "grad_failed": 0, "first_failure": None}
            torchtpu.metrics.reset()
            started = time.time()
            supported = {str(d).replace("torch.", "") for d in op.supported_dtypes("cpu")}
            for dtype_name in dtypes:
                if dtype_name not in supported:
                    continue
                dtype = getattr(torch, dtype_name)
                want_grad = grad and dtype_name == "float32" and op.supports_autograd
                try:
                    samples = list(op.sample_inputs("cpu", dtype, requires_grad=want_grad))
                except Exception:
                    continue
                for sample in samples:
                    if time.time() - started > time_limit:
                        break
                    if sample.kwargs.get("dropout_p", 0) or (sample.kwargs.get("training") and "dropout" in name):
                        rec["random_samples_excluded"] = rec.get("random_samples_excluded", 0) + 1
                        continue  # draws random numbers: values cannot match CPU
                    result, why = run_sample(op, sample, want_grad)
                    rec["samples"] += 1
                    if want_grad:
                        rec["grad_samples"] += 1
                    if result == "grad_failed":
                        rec["grad_failed"] += 1
                        result = "passed"  # the forward passed
                    rec[result] += 1
                    if why and rec["first_failure"] is None:
                        rec["first_failure"] = f"{dtype_name}: {why}"
            rec["fallback_ops"] = sorted(torchtpu.metrics.cpu_fallbacks())
            out.write(json.dumps(rec) + "\n")
            out.flush()


def _all_op_names():
    from torch.testing._internal.common_methods_invocations import op_db
    names = []
    for op in op_db:
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if name not in names:
            names.append(name)
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--ops", nargs="*", help="OpInfo names (default: all of op_db)")
    parser.add_argument("--dtypes", nargs="*", default=DTYPES, choices=DTYPES)
    parser.add_argument("--no-grad", action="store_true", help="skip the gradient checks")
    parser.add_argument("--chunk", type=int, default=20, help="ops per worker process")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    parser.add_argument("--time-limit", type=float, default=60,
                        help="seconds per op; samples beyond it are not run (nor counted)")
    parser.add_argument("--markdown", help="also write the results as a Markdown report")
    parser.add_argument("--_worker", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._worker is not None:
        _worker(args._worker, args.dtypes, args._out, not args.no_grad, args.time_limit)
        return 0

    known = _all_op_names()
    names = args.ops or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"not in PyTorch's op_db: {', '.join(unknown)}")
    excluded = sorted(n for n in names if n.split(".")[0] in RANDOM_OPS or n in RANDOM_OPS)
    todo = [n for n in names if n not in excluded]
    results = {}
    lock = threading.Lock()
    queue = [todo[i:i + args.chunk] for i in range(0, len(todo), args.chunk)]

    def run_chunks(log):
        while True:
            with lock:
                if not queue:
                    return
                chunk = queue.pop(0)
            cmd = [sys.executable, "-m", "torchtpu.testing.opinfo", "--json", args.json,
                   "--dtypes", *args.dtypes, "--time-limit", str(args.time_limit), "--_out", log,
                   "--_worker", *chunk]
            if args.no_grad:
                cmd.append("--no-grad")
            open(log, "w").close()
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started, done = None, {}
            with open(log) as f:
                for line in f:
                    rec = json.loads(line)
                    if "start" in rec:
                        started = rec["start"]
                    else:
                        done[rec["op"]] = rec
            if proc.returncode != 0 and started and started not in done:
                # a crash: record the op it died in, and resume after it
                done[started] = {"op": started, "samples": 1, "passed": 0, "failed": 0, "errors": 1,
                                 "grad_samples": 0, "grad_failed": 0,
                                 "first_failure": f"worker crashed (exit {proc.returncode})",
                                 "fallback_ops": []}
            with lock:
                results.update(done)
                rest = [n for n in chunk if n not in done]
                if rest and not done and proc.returncode == 0:  # the worker made no progress
                    raise RuntimeError(f"opinfo worker reported nothing for {rest}")
                if rest:
                    queue.insert(0, rest)
                print(f"{len(results)}/{len(todo)} ops done", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        threads = [threading.Thread(target=run_chunks, args=(os.path.join(tmp, f"worker{i}.jsonl"),))
                   for i in range(args.jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    ops = {name: {k: v for k, v in rec.items() if k != "op"} for name, rec in sorted(results.items())}
    totals = {
        "samples": sum(r["samples"] for r in ops.values()),
        "passed": sum(r["passed"] for r in ops.values()),
        "failed": sum(r["failed"] for r in ops.values()),
        "errors": sum(r["errors"] for r in ops.values()),
        "grad_samples": sum(r["grad_samples"] for r in ops.values()),
        "grad_failed": sum(r["grad_failed"] for r in ops.values()),
        "ops_total": len(ops),
        "ops_all_passed": sum(1 for r in ops.values()
                              if r["samples"] and r["passed"] == r["samples"] and not r["grad_failed"]),
    }
    with open(args.json, "w") as f:
        json.dump({"ops": ops, "totals": totals, "excluded_random": excluded,
                   "dtypes": args.dtypes}, f, indent=1, sort_keys=True)
    if args.markdown:
        write_markdown(args.markdown, ops, totals, excluded, args)
    print(json.dumps(totals))
    return 0


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


def write_markdown(path, ops, totals, excluded, args):
    import datetime
    import platform

    import torch
    core = _core_ops()
    core_fallbacks = sorted({f for r in ops.values() for f in r["fallback_ops"] if f in core})
    pct = 100.0 * totals["passed"] / max(totals["samples"], 1)
    lines = [
        "# Conformance against PyTorch's OpInfo database", "",
        f"Generated {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), "
        f"torch {torch.__version__}, platform `{_platform()}`, by:", "",
        "```", f"python -m torchtpu.testing.opinfo --json conformance.json --dtypes {' '.join(args.dtypes)} "
        f"--jobs {args.jobs} --markdown {path}", "```", "",
        "Each OpInfo sample runs on CPU (the reference) and on tpu; outputs are compared with "
        "`torch.testing.assert_close` at default tolerances. Ops supporting autograd also get a "
        "float32 gradient check (backward of the summed outputs). *errors* are samples where tpu "
        "raised and CPU did not; a worker crash counts as one error for the op. Random ops are "
        "excluded (listed at the end): their values cannot match CPU's.", "",
        "| | |", "| --- | --- |",
        f"| samples | {totals['samples']} |",
        f"| passed | {totals['passed']} ({pct:.1f}%) |",
        f"| failed (wrong values) | {totals['failed']} |",
        f"| errors | {totals['errors']} |",
        f"| gradient checks | {totals['grad_samples']} ({totals['grad_failed']} failed) |",
        f"| ops | {totals['ops_total']}, all samples passing: {totals['ops_all_passed']} |",
        f"| core ATen ops that fell back to the CPU | {len(core_fallbacks)}: "
        + (", ".join(f"`{o}`" for o in core_fallbacks) or "none") + " |", "",
        "## Per op", "",
        "| op | samples | passed | failed | errors | grad checks (failed) | CPU fallbacks | first failure |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in ops.items():
        fb = ", ".join(f"`{f.replace('aten::', '')}`" for f in r["fallback_ops"])
        why = (r["first_failure"] or "").replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(f"| {name} | {r['samples']} | {r['passed']} | {r['failed']} | {r['errors']} | "
                     f"{r['grad_samples']} ({r['grad_failed']}) | {fb} | {why} |")
    lines += ["", "Excluded (random): " + ", ".join(excluded), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def _platform():
    try:
        import torchtpu
        return torchtpu.platform()
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
