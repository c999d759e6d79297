"""Iterative linear algebra on tpu beside LAPACK (PyTorch CPU) at larger sizes.

    python benchmarks/linalg.py [--sizes 256 512] [--repeats 3] [--eigvals-up-to 256]

float64 matrices from a fixed seed; each tpu time is a call after the first (which compiles),
ending with torch.tpu.synchronize(). The SVD and the symmetric eigendecomposition are Jacobi loops,
the general eigendecomposition LAPACK's QR algorithm step by step (docs/design.md, "Sequential
algorithms"); their results are checked against CPU before they are timed.
"""

import argparse
import statistics
import time

import torch

import torchtpu  # noqa: F401  (the tpu device)

OPS = {
    "svdvals": (torch.linalg.svdvals, lambda a: a),
    "eigvalsh": (torch.linalg.eigvalsh, lambda a: a @ a.T),
    "eigvals": (lambda a: torch.linalg.eigvals(a).abs().sort().values, lambda a: a),
}


def seconds(fn, x, repeats, sync):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--eigvals-up-to", type=int, default=256, help="eigvals takes minutes above this size")
    args = p.parse_args()
    print("| op | n | tpu s/call | CPU s/call | ratio | largest difference / largest entry |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for n in args.sizes:
        a = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
        for name, (fn, make) in OPS.items():
            if name == "eigvals" and n > args.eigvals_up_to:
                continue
            x = make(a)
            on_tpu = x.to("tpu")
            expected, got = fn(x), fn(on_tpu).cpu()  # the first call compiles
            error = ((got - expected).abs().max() / expected.abs().max()).item()
            tpu = seconds(fn, on_tpu, args.repeats, torch.tpu.synchronize)
            cpu = seconds(fn, x, args.repeats, lambda: None)
            print(f"| {name} | {n} | {tpu:.3f} | {cpu:.4f} | {tpu / cpu:.0f}x | {error:.1e} |", flush=True)


if __name__ == "__main__":
    main()
