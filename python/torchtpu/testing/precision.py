"""Which side is nearer the truth where tpu and CPU differ in bfloat16/float16, element by element.

    python -m torchtpu.testing.precision [--elements 4000] [--all]

OpInfo samples have a few elements each and the low-precision tolerances (bfloat16 rtol 1.6e-2,
float16 1e-3) hide an ulp, so a systematic one-ulp difference passes them. This runs PyTorch's
unary and binary ufuncs (``unary_ufuncs``, ``binary_ufuncs``; ``--elements``-sized inputs) and
common network ops (a [64, 256] batch, [4, 8, 16, 16] images) in bfloat16 and float16 on CPU and
on tpu, with float64 as the truth, and prints, per op and dtype, how many elements differ and on
how many each side is nearer float64. Only rows where CPU is nearer somewhere are printed, unless
``--all``.
"""

import argparse

def _network_ops():
    """name: f(x [64, 256], w [256, 128], images [4, 8, 16, 16], kernels [8, 8, 3, 3])."""
    import torch
    import torch.nn.functional as F
    return {
        "sum": lambda x, w, i, k: x.sum(-1), "mean": lambda x, w, i, k: x.mean(-1),
        "var": lambda x, w, i, k: x.var(-1), "softmax": lambda x, w, i, k: x.softmax(-1),
        "log_softmax": lambda x, w, i, k: x.log_softmax(-1), "logsumexp": lambda x, w, i, k: x.logsumexp(-1),
        "cumsum": lambda x, w, i, k: x.cumsum(-1), "matmul": lambda x, w, i, k: x @ w,
        "addmm": lambda x, w, i, k: torch.addmm(x[:, :128], x, w, beta=0.5, alpha=0.3),
        "layer_norm": lambda x, w, i, k: F.layer_norm(x, (256,)), "rms_norm": lambda x, w, i, k: F.rms_norm(x, (256,)),
        "conv2d": lambda x, w, i, k: F.conv2d(i, k, padding=1),
        "batch_norm": lambda x, w, i, k: F.batch_norm(i, None, None, training=True),
        "group_norm": lambda x, w, i, k: F.group_norm(i, 4), "avg_pool2d": lambda x, w, i, k: F.avg_pool2d(i, 3, 1, 1),
        "interpolate": lambda x, w, i, k: F.interpolate(i, scale_factor=2, mode="bilinear"),
        "gelu": lambda x, w, i, k: F.gelu(x), "gelu_tanh": lambda x, w, i, k: F.gelu(x, approximate="tanh"),
        "silu": lambda x, w, i, k: F.silu(x), "leaky_relu": lambda x, w, i, k: F.leaky_relu(x, 0.3331),
        "mul_scalar": lambda x, w, i, k: x * 6.283185307, "div_scalar": lambda x, w, i, k: x / 6.283185307,
        "mse_loss": lambda x, w, i, k: F.mse_loss(x, x.flip(0)),
        "sdpa": lambda x, w, i, k: F.scaled_dot_product_attention(
            *(x[:, 64 * j:64 * j + 64].reshape(4, 4, -1, 16) for j in range(3))),
    }


def _compare(fn, args):
    """(differing, tpu nearer, CPU nearer) over the elements of fn(*args); None for a result that
    is not a float tensor of the operands' dtype (comparisons, integer results)."""
    cpu = fn(*args)
    if not (cpu.is_floating_point() and cpu.dtype == args[0].dtype):
        return None
    tpu = fn(*[a.to("tpu") for a in args]).cpu()
    truth = fn(*[a.double() for a in args])
    differ = ~((cpu == tpu) | (cpu.isnan() & tpu.isnan()))
    err_cpu = (cpu.double() - truth).abs().nan_to_num(float("inf"))
    err_tpu = (tpu.double() - truth).abs().nan_to_num(float("inf"))
    return int(differ.sum()), int((err_tpu < err_cpu)[differ].sum()), int((err_cpu < err_tpu)[differ].sum())


def _ufunc_inputs(op, dtype, n, generator):
    import torch
    domain = getattr(op, "domain", None)  # unary ufuncs have one
    if domain and (domain[0] is not None or domain[1] is not None):
        lo = -6 if domain[0] is None else domain[0] + 1e-3
        hi = lo + 12 if domain[1] is None else min(domain[1] - 1e-3, lo + 12)
        return (torch.rand(n, generator=generator, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    return (torch.randn(n, generator=generator, dtype=torch.float64) * 3).to(dtype)


def main(argv=None):
    import torch
    from torch.testing._internal.common_methods_invocations import binary_ufuncs, unary_ufuncs

    import torchtpu  # noqa: F401
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=4000)
    ap.add_argument("--all", action="store_true", help="also rows where tpu is never the farther side")
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        for op in unary_ufuncs + binary_ufuncs:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            operands = [_ufunc_inputs(op, dtype, args.elements, g) for _ in range(1 if op in unary_ufuncs else 2)]
            try:
                counts = _compare(op, operands)
            except Exception:  # not defined for these operands (integer-only ops, ...)
                continue
            if counts is not None:
                rows.append((op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""), dtype, *counts))
        tensors = [torch.randn(64, 256, generator=g, dtype=torch.float64) * 2,
                   torch.randn(256, 128, generator=g, dtype=torch.float64) / 16,
                   torch.randn(4, 8, 16, 16, generator=g, dtype=torch.float64),
                   torch.randn(8, 8, 3, 3, generator=g, dtype=torch.float64) / 8]
        for name, fn in _network_ops().items():
            rows.append((name, dtype, *_compare(fn, [t.to(dtype) for t in tensors])))
    print("| op | dtype | elements differing | tpu nearer float64 | CPU nearer |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, dtype, differ, tpu_nearer, cpu_nearer in sorted(rows, key=lambda r: -r[4]):
        if cpu_nearer or (args.all and differ):
            print(f"| {name} | {str(dtype).split('.')[1]} | {differ} | {tpu_nearer} | {cpu_nearer} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
