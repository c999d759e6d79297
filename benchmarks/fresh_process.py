"""Side-by-side benchmarks whose runtimes each run in a process of their own, with an empty
compile cache, so that compiles count from nothing (a user's first run)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def command_line(doc, runtimes, add_options):
    """The arguments: the benchmark's own (``add_options(parser)``), ``--runtimes``, ``--json``,
    and ``--child RUNTIME`` (how run_all starts a runtime's process)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_options(ap)
    ap.add_argument("--runtimes", nargs="+", default=runtimes)
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap.parse_args()


def run_all(script, runtimes, child_args, summary):
    """Each runtime's result: the JSON its ``script --child RUNTIME *child_args`` printed last, or
    {"error": its last line of stderr}. ``summary(result)`` is printed as each finishes."""
    results = {}
    for runtime in runtimes:
        env = dict(os.environ)
        with tempfile.TemporaryDirectory() as cache:
            env["TORCHTPU_CACHE_DIR"] = cache
            p = subprocess.run([sys.executable, os.path.abspath(script), "--child", runtime, *child_args],
                               capture_output=True, text=True, env=env)
        if p.returncode != 0:
            results[runtime] = {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
        else:
            results[runtime] = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{runtime}: {results[runtime].get('error') or summary(results[runtime])}", file=sys.stderr, flush=True)
    return results


def save(results, path):
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
