"""Custom kernels (torchtpu.kernels) beside the same computation written in PyTorch ops, on tpu.

    python benchmarks/kernels.py [--repeats 15] [--markdown FILE]

Each case runs forward + backward of one computation repeatedly and waits for the gradients;
the first call (which compiles) is not counted. Reported: median ms per call (min-max), in strict
and fused eager modes, and the kernel's ratio against the PyTorch-ops version.
"""

import argparse
import os
import statistics
import sys
import time

import torch

import torchtpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "kernels"))

import flash_attention_pallas  # noqa: E402
import rms_norm  # noqa: E402
import softmax_pallas  # noqa: E402


def torch_rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def sdpa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


CASES = {  # name: (kernel, PyTorch version, input shapes)
    "rms_norm (JAX) 256x1024": (rms_norm.rms_norm, torch_rms_norm, [(256, 1024), (1024,)]),
    "softmax (Pallas) 256x512": (softmax_pallas.softmax, lambda x: torch.softmax(x, -1), [(256, 512)]),
    "flash attention (Pallas) 8x128x32": (flash_attention_pallas.flash_attention, sdpa, [(8, 128, 32)] * 3),
}


def time_calls(fn, inputs, repeats):
    def call():
        for t in inputs:
            t.grad = None
        fn(*inputs).sum().backward()
        torchtpu.sync()
        torch.tpu.synchronize()

    call()
    torchtpu.cache.wait_for_background_compiles()
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    rows = ["| computation | mode | kernel ms | PyTorch ops ms | kernel / PyTorch |", "| --- | --- | --- | --- | --- |"]
    for name, (kernel, reference, shapes) in CASES.items():
        torch.manual_seed(0)
        inputs = [torch.randn(s, device="tpu", requires_grad=True) for s in shapes]
        for mode in ("strict", "fused"):
            with torchtpu.eager_mode(mode):
                k = time_calls(kernel, inputs, args.repeats)
                r = time_calls(reference, inputs, args.repeats)
            mk, mr = statistics.median(k), statistics.median(r)
            rows.append(f"| {name} | {mode} | {mk:.2f} ({min(k):.2f}–{max(k):.2f}) | "
                        f"{mr:.2f} ({min(r):.2f}–{max(r):.2f}) | {mk / mr:.2f}× |")
            print(rows[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
