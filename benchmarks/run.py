"""torchtpu beside its peers on the same work, in one run.

    python benchmarks/run.py --json FILE [--quick] [--only WORKLOAD ...] [--device cpu|gpu]
                             [--markdown docs/benchmarks.md] [--chart docs/benchmarks.png]

Every (workload, runtime) pair runs in its own process from the same initial weights and data.
Before any time is reported, the losses every runtime computed are checked against PyTorch eager's
(the same computation must give the same numbers). Figures: median and spread of step time over the
timed steps after warm-up, warm-up time (compiles included), peak resident memory of the process,
and ratios against PyTorch eager and against JAX.

Runtimes on --device cpu: PyTorch eager, torch.compile (Inductor), torchtpu strict / fused / lazy
(XLA CPU plugin), JAX jax.jit (XLA CPU), and PyTorch/XLA when `.venv-torch-xla` exists
(`bash scripts/setup.sh --with-torch-xla`). On --device gpu: PyTorch CUDA eager and Inductor,
torchtpu on the XLA CUDA plugin, JAX on CUDA.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_XLA_PYTHON = os.path.join(ROOT, ".venv-torch-xla", "bin", "python")

# Sizes: full, quick (both time at least 20 steps) and tiny (CI's parity check, 3 steps, not a timing).
GPT_FULL = dict(layers=4, d_model=256, heads=4, seq=128, batch=8, vocab=1024)
GPT_QUICK = dict(layers=2, d_model=64, heads=4, seq=32, batch=4, vocab=256)
GPT_TINY = dict(layers=1, d_model=16, heads=2, seq=8, batch=2, vocab=32)
WORKLOADS = {
    "add_chain": {"full": dict(n=1000, size=16), "quick": dict(n=1000, size=16), "tiny": dict(n=10, size=4)},
    "matmul_chain": {"full": dict(n=100, size=256), "quick": dict(n=20, size=256), "tiny": dict(n=3, size=8)},
    "mlp_train": {"full": dict(batch=64, d_in=256, hidden=512), "quick": dict(batch=32, d_in=64, hidden=128),
                  "tiny": dict(batch=4, d_in=8, hidden=8)},
    "gpt_train": {"full": GPT_FULL, "quick": GPT_QUICK, "tiny": GPT_TINY},
    "gpt_infer": {"full": GPT_FULL, "quick": GPT_QUICK, "tiny": GPT_TINY},
    "resnet_train": {"full": dict(batch=32, image=32, widths=(16, 32, 64)),
                     "quick": dict(batch=8, image=16, widths=(8, 16)), "tiny": dict(batch=2, image=8, widths=(4, 8))},
}
STEPS = {"full": (5, 20), "quick": (5, 20), "tiny": (1, 2)}  # (warm-up, timed)
# How close each runtime's losses must be to PyTorch eager's (relative, worst step).
PARITY_RTOL = {"add_chain": 1e-5, "matmul_chain": 1e-3, "mlp_train": 1e-3, "gpt_train": 2e-3,
               "gpt_infer": 1e-3, "resnet_train": 5e-3}


def runtimes(device):
    if device == "gpu":
        return ["torch-cuda", "inductor-cuda", "torchtpu-strict", "torchtpu-fused", "torchtpu-lazy",
                "torchtpu-compile", "jax-jit"]
    rts = ["torch-cpu", "inductor-cpu", "torchtpu-strict", "torchtpu-fused", "torchtpu-lazy", "torchtpu-compile",
           "jax-jit"]
    if os.path.exists(TORCH_XLA_PYTHON):
        rts.append("torch-xla")
    return rts


# ---------------------------------------------------------------- child side: one workload, one runtime

def torch_setup(runtime):
    """(device, after_step hook, wrap(model or fn)) for a PyTorch-based runtime."""
    import torch
    if runtime == "torchtpu-compile":  # the whole step compiled (see step_fn)
        import torchtpu  # noqa: F401  (backend="tpu" is its torch_dynamo_backends entry point)
        return "tpu", (lambda: None), lambda m: m
    if runtime.startswith("torchtpu"):
        import torchtpu
        mode = runtime.split("-")[1]
        torchtpu.set_eager_mode(mode)
        after = torchtpu.sync if mode == "lazy" else (lambda: None)
        return "tpu", after, lambda m: m
    if runtime == "torch-xla":
        import torch_xla
        return torch_xla.device(), torch_xla.sync, lambda m: m
    device = "cuda" if runtime.endswith("cuda") else "cpu"
    if device == "cuda":  # float32 math in full precision, as torchtpu's XLA programs (no TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    wrap = torch.compile if runtime.startswith("inductor") else (lambda m: m)
    return device, (lambda: None), wrap


def step_fn(fn, runtime):
    """``fn`` (one step on the device, returning the loss tensor) as the runtime runs it."""
    import torch
    return torch.compile(fn, backend="tpu") if runtime == "torchtpu-compile" else fn


def torch_workload(name, sizes, runtime):
    """A function running one step and returning its loss (a Python float: the step's host read)."""
    import torch
    sys.path.insert(0, HERE)
    import models
    device, after, wrap = torch_setup(runtime)
    torch.manual_seed(0)
    if name in ("add_chain", "matmul_chain"):
        x = (torch.rand(sizes["size"]) if name == "add_chain" else torch.rand(sizes["size"], sizes["size"])).to(device)
        n = sizes["n"]

        def chain(x):
            y = x
            for _ in range(n):
                y = y + x if name == "add_chain" else (y @ x) * (1.0 / sizes["size"])
            return y.sum()
        chain = step_fn(wrap(chain), runtime)

        def step(_):
            loss = chain(x)
            after()
            return loss.item()
        return step
    model, x, y = models.workload(name, sizes)
    model = model.to(device)
    forward = wrap(model)
    x, y = x.to(device), y.to(device)
    loss_of = models.lm_loss if name.startswith("gpt") else torch.nn.functional.cross_entropy
    if name == "gpt_infer":
        def infer():
            with torch.no_grad():
                return loss_of(forward(x), y)
        infer = step_fn(infer, runtime)

        def step(_):
            loss = infer()
            after()
            return loss.item()
        return step
    if name.startswith("gpt"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(forward(x), y)
        loss.backward()
        opt.step()
        return loss
    train = step_fn(train, runtime)

    def step(_):
        loss = train()
        after()
        return loss.item()
    return step


def jax_workload(name, sizes):
    import jax
    import torch
    sys.path.insert(0, HERE)
    import jax_models as jm
    import models
    torch.manual_seed(0)
    if name in ("add_chain", "matmul_chain"):
        x = jm.to_jax(torch.rand(sizes["size"]) if name == "add_chain" else torch.rand(sizes["size"], sizes["size"]))
        n = sizes["n"]

        @jax.jit
        def chain(x):
            y = x
            for _ in range(n):
                y = y + x if name == "add_chain" else (y @ x) * (1.0 / sizes["size"])
            return y.sum()
        return lambda _: float(chain(x))
    module, x, y = models.workload(name, sizes)
    if name == "mlp_train":
        forward, (init, update) = jm.mlp_forward, jm.sgd_momentum(0.01, 0.9)
    elif name.startswith("gpt"):
        forward = lambda p, x: jm.gpt_forward(p, x, sizes["layers"], sizes["heads"])
        init, update = jm.adamw(1e-3)
    else:
        forward = lambda p, x: jm.resnet_forward(p, x, len(sizes["widths"]))
        init, update = jm.sgd_momentum(0.01, 0.9)
    all_params = jm.params_of(module)
    params = jm.trainable(all_params)
    frozen = {k: v for k, v in all_params.items() if k not in params}
    x, y = jm.to_jax(x), jm.to_jax(y)
    if name == "gpt_infer":
        loss = jax.jit(lambda p, x, y: jm.cross_entropy(forward(p, x), y))
        return lambda _: float(loss(all_params, x, y))
    step_fn = jm.train_step(forward, update, frozen)
    state = {"params": params, "opt": init(params)}

    def step(_):
        state["params"], state["opt"], loss = step_fn(state["params"], state["opt"], x, y)
        return float(loss)
    return step


def child(name, runtime, size):
    import resource
    sizes = WORKLOADS[name][size]
    warmup, timed = STEPS[size]
    start = time.perf_counter()
    step = jax_workload(name, sizes) if runtime == "jax-jit" else torch_workload(name, sizes, runtime)
    losses, times = [], []
    for i in range(warmup + timed):
        if i == warmup:
            if runtime == "torchtpu-fused":
                import torchtpu
                t = time.perf_counter()
                torchtpu.cache.wait_for_background_compiles()  # warm-up ends with its windows compiled
                times[-1] += time.perf_counter() - t
            warmup_s = time.perf_counter() - start
        t = time.perf_counter()
        losses.append(step(i))
        times.append(time.perf_counter() - t)
    return {"losses": losses, "step_s": times[warmup:], "warmup_s": warmup_s, "warmup_steps_s": times[:warmup],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ---------------------------------------------------------------- parent side

def run_child(name, runtime, size, device):
    python = TORCH_XLA_PYTHON if runtime == "torch-xla" else sys.executable
    env = dict(os.environ)
    if runtime == "jax-jit":
        env["JAX_PLATFORMS"] = "cuda" if device == "gpu" else "cpu"
        env["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"  # JAX's GPU default is TF32; the others use float32
    if runtime == "torch-xla":
        env["PJRT_DEVICE"] = "CPU"
    cmd = [python, os.path.abspath(__file__), "--child", name, runtime, "--size", size]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_children(names, rts, size, device, jobs, save=lambda pair, r: None):
    """{workload: {runtime: result}}, in the order given (the first runtime is the reference).
    ``save`` gets each result as it comes (a run cut short keeps what it measured)."""
    def run_one(name, rt):
        t = time.perf_counter()
        r = run_child(name, rt, size, device)
        status = r["error"] if "error" in r else f"median {statistics.median(r['step_s']) * 1e3:.2f} ms"
        print(f"{name:14} {rt:16} {status}  ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
        save((name, rt), r)
        return r

    pairs = [(name, rt) for name in names for rt in rts]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda pair: run_one(*pair), pairs))
    results = {name: {} for name in names}
    for (name, rt), r in zip(pairs, done):
        results[name][rt] = r
    return results


def check_parity(results):
    """Raises unless every runtime's losses match the reference runtime's, step by step."""
    problems = []
    for name, by_runtime in results.items():
        ref_name = next(iter(by_runtime))
        ref = by_runtime[ref_name]["losses"]
        for runtime, r in by_runtime.items():
            if "error" in r:
                continue
            worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], ref))
            r["parity_rel_diff"] = worst
            if worst > PARITY_RTOL[name]:
                problems.append(f"{name}: {runtime} losses differ from {ref_name} by {worst:.2e} (allowed "
                                f"{PARITY_RTOL[name]:.0e}): {r['losses'][-1]} vs {ref[-1]}")
    if problems:
        raise SystemExit("parity check failed, no times reported:\n  " + "\n  ".join(problems))


def compile_seconds(r, median_step):
    """What the warm-up steps took beyond as many steady-state steps: tracing and compiling (the
    warm-up time also counts imports and building the model)."""
    return sum(r["warmup_steps_s"]) - len(r["warmup_steps_s"]) * median_step


def summarize(results):
    rows = []
    for name, by_runtime in results.items():
        ref = next(iter(by_runtime))
        medians = {rt: statistics.median(r["step_s"]) for rt, r in by_runtime.items() if "error" not in r}
        for rt, r in by_runtime.items():
            if "error" in r:
                rows.append({"workload": name, "runtime": rt, "error": r["error"]})
                continue
            m = medians[rt]
            rows.append({"workload": name, "runtime": rt, "median_ms": m * 1e3,
                         "min_ms": min(r["step_s"]) * 1e3, "max_ms": max(r["step_s"]) * 1e3,
                         "warmup_s": r["warmup_s"], "compile_s": compile_seconds(r, m), "peak_rss_mb": r["peak_rss_mb"],
                         "vs_reference": m / medians[ref] if ref in medians else None,
                         "vs_jax": m / medians["jax-jit"] if "jax-jit" in medians else None})
    return rows


def markdown(rows, meta):
    warmup, timed = STEPS[meta["size"]]
    out = [f"Generated {meta['date']} on {meta['machine']} by `{meta['command']}` "
           f"(torch {meta['torch']}, jax {meta['jax']}). Step time: median (min–max) over {timed} steps after "
           f"{warmup} warm-up steps; ratios are step time ÷ the reference's (PyTorch eager) and ÷ JAX's "
           "(below 1 is faster). Warm-up: from process start (imports, the model, compiles) to the end of the "
           "warm-up steps; compile: what the warm-up steps took beyond as many steady-state steps.", "",
           "| workload | runtime | median ms | spread ms | warm-up s | compile s | peak RSS MB | vs PyTorch eager "
           "| vs JAX |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['workload']} | {r['runtime']} | failed: {r['error'][:80]} | | | | | | |")
            continue
        fmt = lambda v: "" if v is None else f"{v:.2f}×"
        out.append(f"| {r['workload']} | {r['runtime']} | {r['median_ms']:.2f} | {r['min_ms']:.2f}–{r['max_ms']:.2f} | "
                   f"{r['warmup_s']:.1f} | {r['compile_s']:.1f} | {r['peak_rss_mb']:.0f} | {fmt(r['vs_reference'])} | {fmt(r['vs_jax'])} |")
    return "\n".join(out)


BEGIN, END = "<!-- benchmarks/run.py: begin -->", "<!-- benchmarks/run.py: end -->"


def write_markdown(path, table, device):
    begin, end = BEGIN.replace("begin", f"begin {device}"), END.replace("end", f"end {device}")
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = f"{begin}\n{table}\n{end}"
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## Peers side by side, {device} (`benchmarks/run.py`)\n\n{block}\n"
    with open(path, "w") as f:
        f.write(text)


def write_chart(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "error" not in r]
    workloads = list(dict.fromkeys(r["workload"] for r in ok))
    rts = list(dict.fromkeys(r["runtime"] for r in ok))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(rts)
    for i, rt in enumerate(rts):
        vals = [next((1 / r["vs_reference"] for r in ok if r["workload"] == w and r["runtime"] == rt), 0)
                for w in workloads]
        ax.bar([j + i * width for j in range(len(workloads))], vals, width, label=rt)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))], workloads)
    ax.set_yscale("log")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_ylabel("speed vs PyTorch eager (higher is faster)")
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def partial_saver(path):
    """Appends each child's result to PATH.partial as one JSON line (none without --json)."""
    if not path:
        return lambda pair, r: None
    open(path + ".partial", "w").close()

    def save(pair, r):
        with open(path + ".partial", "a") as f:
            f.write(json.dumps({"workload": pair[0], "runtime": pair[1], **r}) + "\n")
    return save


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all measurements here")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (under 10 minutes on 2 cores)")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes and 3 steps: the parity check only")
    ap.add_argument("--size", choices=list(STEPS), help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), help="these workloads only")
    ap.add_argument("--runtimes", nargs="+", help="these runtimes only (the first is the reference)")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--markdown", help="regenerate this file's table for the device (e.g. docs/benchmarks.md)")
    ap.add_argument("--chart", help="write a PNG chart of the ratios (e.g. docs/benchmarks.png)")
    ap.add_argument("--jobs", type=int, default=1, help="children run side by side (--tiny only)")
    ap.add_argument("--child", nargs=2, metavar=("WORKLOAD", "RUNTIME"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.size)))
        return
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    names = args.only or list(WORKLOADS)
    rts = args.runtimes or runtimes(args.device)
    if args.jobs > 1 and size != "tiny":
        ap.error("--jobs runs children side by side, which skews their times: only with --tiny")
    results = run_children(names, rts, size, args.device, args.jobs, save=partial_saver(args.json))
    check_parity(results)
    rows = summarize(results)
    import jax
    import torch
    meta = {"date": datetime.date.today().isoformat(), "torch": torch.__version__, "jax": jax.__version__, "size": size,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.device}",
            "command": "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    table = markdown(rows, meta)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results, "rows": rows}, f, indent=1)
    if args.markdown:
        write_markdown(args.markdown, table, args.device)
    if args.chart:
        write_chart(args.chart, rows)
    failed = [f"{r['workload']} on {r['runtime']}: {r['error']}" for r in rows if "error" in r]
    if failed:
        raise SystemExit("some runs failed:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()
