"""The benchmark harness computes the same thing on every runtime: its parity check, on tiny sizes,
so a broken workload or runtime fails CI. No timing is asserted."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One of each kind (a dispatch-bound chain, two training steps); the matmul chain and GPT
# inference run the same code paths, and every pair is a process of its own: left out to keep CI short.
# resnet_train (convolutions) is left to the real runs too: it doubled this test's time, and the
# model zoo (test_models.py) trains convolutional networks against CPU.
WORKLOADS = ["add_chain", "mlp_train", "gpt_train"]
# Inductor runs the same PyTorch model code as eager and takes minutes to compile: left to the real runs.
RUNTIMES = ["torch-cpu", "torchtpu-strict", "torchtpu-fused", "torchtpu-lazy", "torchtpu-compile", "jax-jit"]


def test_every_runtime_computes_the_same_losses_on_each_kind_of_workload(tmp_path):
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--tiny", "--json", str(out),
                        "--only", *WORKLOADS, "--runtimes", *RUNTIMES, "--jobs", "2"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {r["workload"] for r in rows} == set(WORKLOADS)
    assert [r for r in rows if "error" in r] == []
    for workload, by_runtime in data["results"].items():
        assert set(by_runtime) == set(RUNTIMES)
        for runtime, r in by_runtime.items():
            assert len(r["losses"]) == 3 and r["parity_rel_diff"] <= 5e-3, (workload, runtime)
