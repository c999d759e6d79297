"""Instructions per small op in strict mode, step by step, counted by callgrind.

Wall-clock microseconds on a shared VM move by 2x between runs; instruction counts do not. This
runs `y = y + 1.0` on a tpu f32[16] tensor N and 3N times under `valgrind --tool=callgrind`,
collecting only inside PyTorch's Python binding of `+` (so imports, the first compile and the
final sync are not counted), and divides the difference by 2N. The breakdown groups functions
by the step of one op they belong to (inclusive counts, so a step includes what it calls).

    .venv/bin/python benchmarks/op_instructions.py [--ops 500] [--mode strict|fused|lazy]

In fused and lazy modes the op is recorded, not executed (the final sync runs the window, outside
the counted region), so the count is the recording cost.

Needs valgrind (apt install valgrind); takes about 4 minutes (two runs side by side).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHAIN = """
import sys, torch, torchtpu
x = torch.ones(16, device="tpu")
y = x + 1.0
torch.tpu.synchronize()
for _ in range(int(sys.argv[1])):
    y = y + 1.0
torch.tpu.synchronize()
"""

# (step, the function whose inclusive count is that step), outermost first. Only functions that are
# not inlined can be counted (the output-metadata cache look-up is, into the kernel).
STEPS = [
    ("whole op: Python `y + 1.0` to its return", "torch::autograd::THPVariable_add("),
    ("torchtpu's kernel (everything below PyTorch's dispatch)", "LoweredOpKernel"),
    ("  inputs: operands, scalar uploads (cached), op key", "aten::(anonymous namespace)::gather_inputs("),
    ("  result tensors (at::empty_strided)", "aten::(anonymous namespace)::destinations("),
    ("  the user's line (Python frame walk)", "torchtpu::aten::origin_of("),
    ("  executor: record, look up, execute", "torchtpu::exec::run("),
    ("    strict: bind to its loaded program (no node)", "torchtpu::exec::bind_loaded("),
    ("      its compile-cache look-up (memory)", "torchtpu::exec::loaded_executable("),
    ("    fused, lazy, a first run: the op as a node", "torchtpu::exec::record_op("),
    ("    one-op window and its cache key", "torchtpu::graph::Window::Window("),
    ("    compile-cache look-up (hit)", "torchtpu::exec::cached_executable("),
    ("    execute: PJRT call and bookkeeping", "torchtpu::exec::execute_program("),
    ("      PJRT_LoadedExecutable_Execute (the XLA CPU plugin)", "pjrt::PJRT_LoadedExecutable_Execute("),
    ("    the node's destruction (lowering closure, views)", "std::_Sp_counted_ptr_inplace<torchtpu::graph::Node"),
]


def count(python, n, out_dir, mode):
    script = os.path.join(out_dir, "chain.py")
    with open(script, "w") as f:
        f.write(CHAIN)
    out = os.path.join(out_dir, f"callgrind.{n}")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           "--toggle-collect=torch::autograd::THPVariable_add(*", python, script, str(n)]
    env = dict(os.environ, TORCHTPU_EAGER_MODE=mode)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env), out


def inclusive(out):
    """Inclusive instructions per function. callgrind_annotate may list a function more than once
    (once per source file of its inlined code); the largest entry is the function's own."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(?:[^ :]*:)?(.*?)(?: \[[^\]]*\])?$", line)
        if m:
            name = m.group(2)
            costs[name] = max(costs.get(name, 0), int(m.group(1).replace(",", "")))
    return costs


def step_cost(costs, pattern):
    return max((v for k, v in costs.items() if k.startswith(pattern) or pattern in k), default=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=500, help="N: the runs do N and 3N ops")
    parser.add_argument("--mode", default="strict", choices=["strict", "fused", "lazy"])
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [count(sys.executable, n, tmp, args.mode) for n in (args.ops, 3 * args.ops)]
        for proc, _ in runs:
            if proc.wait() != 0:
                sys.exit("a callgrind run failed")
        small, large = (inclusive(out) for _, out in runs)
    per_op = lambda pattern: (step_cost(large, pattern) - step_cost(small, pattern)) / (2 * args.ops)
    print(f"{args.mode} mode: {'step':46s} {'instructions/op':>16s}")
    for step, pattern in STEPS:
        print(f"{step:58s} {per_op(pattern):16,.0f}")


if __name__ == "__main__":
    main()
