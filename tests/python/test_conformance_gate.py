"""A regression gate over PyTorch's OpInfo samples: ops that fully pass today must keep passing.

The op list (conformance_gate.txt beside this file) is a fast subset of the ops that pass every
float32 sample and gradient check with no CPU fallback in docs/conformance.md. Regenerate both with
the command in that file.
"""

import json
import os
import subprocess
import sys

GATE = os.path.join(os.path.dirname(__file__), "conformance_gate.txt")


def gate_ops():
    with open(GATE) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_gated_ops_pass_every_opinfo_sample(tmp_path):
    ops = gate_ops()
    assert len(ops) >= 50
    out = tmp_path / "gate.json"
    subprocess.run([sys.executable, "-m", "torchtpu.testing.opinfo", "--json", str(out),
                    "--dtypes", "float32", "--jobs", "2", "--ops", *ops],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = json.load(open(out))["ops"]
    regressions = {name: r for name, r in results.items()
                   if r["samples"] == 0 or r["passed"] != r["samples"] or r["grad_failed"]
                   or r["fallback_ops"]}
    assert set(results) == set(ops)
    assert regressions == {}


def test_strides_flag_fails_results_laid_out_unlike_cpu(tmp_path):
    """`--strides` also compares layouts: lstsq's solution is row-major on tpu, column-major on CPU
    (values equal), svd's factors are laid out as CPU's."""
    def run(*flags):
        out = tmp_path / "strides.json"
        subprocess.run([sys.executable, "-m", "torchtpu.testing.opinfo", "--json", str(out), "--dtypes", "float32",
                        "--no-grad", "--ops", "linalg.lstsq", "linalg.svd", *flags],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out))["ops"]
    values_only, with_strides = run(), run("--strides")
    assert all(r["samples"] > 0 and r["passed"] == r["samples"] for r in values_only.values())
    assert with_strides["linalg.svd"]["passed"] == with_strides["linalg.svd"]["samples"]
    lstsq = with_strides["linalg.lstsq"]
    assert lstsq["failed"] > 0 and "strides" in lstsq["first_failure"]
