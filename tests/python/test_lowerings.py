"""Ops that used to fall back to the CPU (issue "On the device, not on the CPU"), one or more per
lowered family: each runs forward and backward on tpu with no CPU fallback and matches CPU
PyTorch. The full sweep is `python -m torchtpu.testing.opinfo` (docs/conformance.md)."""

import functools
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    return []


def check_like_cpu(fn, *inputs, grad=True, **tolerance):
    """fn on CPU and on tpu: the same outputs and, for float inputs, the same input gradients."""
    results = []
    for device in ["cpu", "tpu"]:
        args = [a.detach().to(device).requires_grad_(grad and a.is_floating_point()) if isinstance(a, torch.Tensor)
                else a for a in inputs]
        out = _tensors(fn(*args))
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        grads = []
        differentiable = [o for o in out if o.requires_grad]
        if leaves and differentiable:
            # made on the CPU: the same weights on both sides (tpu's linspace may differ by an ulp)
            weights = [torch.linspace(-1, 2, o.numel()).reshape(o.shape).to(o.dtype).to(device) for o in differentiable]
            grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(differentiable, weights)), leaves,
                                        allow_unused=True)
        results.append(([o.detach().cpu() for o in out], [g.cpu() if g is not None else None for g in grads]))
    (cpu_out, cpu_grads), (tpu_out, tpu_grads) = results
    assert len(tpu_out) == len(cpu_out) and len(tpu_grads) == len(cpu_grads)
    for actual, expected in zip(tpu_out + tpu_grads, cpu_out + cpu_grads):
        if expected is None:
            assert actual is None
        else:
            torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)


g = torch.Generator().manual_seed(0)
x45 = torch.randn(4, 5, generator=g)
probabilities = torch.rand(4, 5, generator=g).clamp(0.05, 0.95)
_m = torch.randn(2, 4, 4, generator=g)
positive_definite = _m @ _m.mT + 4 * torch.eye(4)
class_weight = torch.rand(5, generator=g)  # not differentiable in binary_cross_entropy
with_nans = torch.tensor([[3.0, float("nan"), 1.0, 2.0], [4.0, 0.5, -1.0, 8.0]])

CASES = {
    # activations and their backwards
    "glu": (lambda x: F.glu(x, 0), x45),
    "prelu": (lambda x, w: F.prelu(x, w), torch.randn(2, 3, 4, generator=g), torch.tensor([0.1, -0.2, 0.3])),
    "celu": (lambda x: F.celu(x, 0.7), x45),
    "elu_inplace": (lambda x: F.elu(x.clone(), inplace=True), x45),
    "softplus": (lambda x: F.softplus(x, beta=2, threshold=1), x45),
    "hardshrink": (lambda x: F.hardshrink(x, 0.6), x45),
    "softshrink": (lambda x: F.softshrink(x, 0.6), x45),
    "logit": (lambda x: torch.logit(x, eps=0.1), probabilities),
    "sinc_entr_xlog1py": (lambda x: (torch.sinc(x), torch.special.entr(x), torch.special.xlog1py(x, x.abs())), x45),
    # losses
    "binary_cross_entropy": (lambda p, t: F.binary_cross_entropy(p, t, class_weight.to(p.device)), probabilities,
                             torch.rand(4, 5, generator=g)),
    # reductions
    "nansum_nanmean": (lambda x: (x.nansum(1), x.nanmean(0)), with_nans),
    "var_mean_std_mean": (lambda x: (torch.var_mean(x, 1, correction=0), torch.std_mean(x, 0)), x45),
    "aminmax_trace_count": (lambda x: (*torch.aminmax(x.detach(), dim=1),  # aminmax has no derivative
                                        torch.trace(x), torch.count_nonzero(x > 0, 0)), x45),
    "norm": (lambda x: (torch.norm(x, 3, dim=1), torch.norm(x), torch.norm(x, float("inf"))), x45),
    # sorting and searching
    "median_kthvalue": (lambda x: (torch.median(x), *torch.median(x, 1), *torch.nanmedian(x, 1), torch.nanmedian(x),
                                   *torch.kthvalue(x, 2, 1)), with_nans),
    # the smallest of the most frequent values, at its last position (CPU's choice up to 16 elements)
    "mode": (lambda x: (*torch.mode(x, 1), *torch.mode(x.T, 1, keepdim=True), *torch.mode(x.float(), 0),
                        *torch.mode(torch.tensor(3.0, device=x.device))),
             torch.tensor([[1, 2, 2, 3, 3, 1], [5, 5, 4, 4, 4, 0], [7, 1, 1, 7, 3, 3]]), False),
    "searchsorted": (lambda s, v, order: (torch.searchsorted(s, v), torch.searchsorted(s, v, right=True),
                                         torch.searchsorted(s.gather(1, order), v,
                                                            sorter=torch.argsort(s.gather(1, order))),
                                         torch.bucketize(v, s[0])),
                     torch.tensor([[1.0, 2, 2, 5, 9], [0, 0, 1, 1, 3]]), torch.tensor([[2.0, 0, 10, 5], [1, -1, 3, 0.5]]),
                     torch.tensor([[3, 0, 4, 1, 2]]).expand(2, 5)),
    # data-dependent sizes
    "repeat_interleave": (lambda x, r: (torch.repeat_interleave(r), torch.repeat_interleave(x, r, dim=0),
                                        torch.repeat_interleave(r.int(), output_size=6)),
                          x45, torch.tensor([2, 0, 3, 1])),
    "unique_by_slices": (lambda x: (*torch.unique(x, dim=1, return_inverse=True, return_counts=True),
                                    *torch.unique_consecutive(x, dim=0, return_inverse=True, return_counts=True)),
                         torch.tensor([[1, 2, 1, 1], [1, 2, 1, 1], [3, 0, 3, 3]])),
    # indexing
    "take_put": (lambda x, i: (torch.take(x, i), x.clone().put_(i, x.new_ones(3), accumulate=True)),
                 x45, torch.tensor([0, -1, 0])),
    "unfold_backward": (lambda x: x.unfold(1, 3, 1), x45),
    # patches and pooling
    "im2col_col2im": (lambda x: F.fold(F.unfold(x, 2, padding=1, stride=(1, 2)), (5, 6), 2, padding=1, stride=(1, 2)),
                      torch.randn(2, 3, 5, 6, generator=g)),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
                     torch.randn(1, 2, 4, 6, generator=g)),
    "cdist": (lambda a, b: (torch.cdist(a, b), torch.cdist(a, b, p=1), torch.cdist(a, b, p=0.5), F.pdist(a[0]),
                            F.pdist(a[1], p=1), F.pdist(a[0], p=float("inf")), F.pdist(a[1], p=3.5)),
              torch.randn(2, 4, 3, generator=g), torch.randn(2, 5, 3, generator=g)),
    "upsampling": (lambda x: (F.interpolate(x, scale_factor=(1.5, 2), mode="bicubic"),
                              F.interpolate(x, size=(7, 3), mode="nearest-exact"),
                              F.interpolate(x.flatten(2), scale_factor=1.7, mode="linear", align_corners=True),
                              F.interpolate(x[:, :, None], size=(2, 5, 9), mode="trilinear")),
                   torch.randn(1, 2, 4, 6, generator=g)),
    "antialiased_resize": (lambda x: (F.interpolate(x, size=(4, 5), mode="bilinear", antialias=True),
                                      F.interpolate(x, size=(12, 4), mode="bicubic", antialias=True, align_corners=True),
                                      F.interpolate(x, scale_factor=0.37, mode="bilinear", antialias=True)),
                           torch.randn(2, 3, 9, 13, generator=g, dtype=torch.float64)),
    # grid sampling forward and backward (input and grid gradients), 2-D and 3-D, every padding
    "grid_sample_2d": (lambda x, grid: tuple(F.grid_sample(x, grid, mode=mode, padding_mode=pad, align_corners=ac)
                                             for mode, pad, ac in [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                                   ("nearest", "border", False), ("bicubic", "reflection", False),
                                                                   ("bicubic", "zeros", True)]),
                       torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64),
                       torch.rand(2, 3, 4, 2, generator=g, dtype=torch.float64) * 2.6 - 1.3),
    "grid_sample_3d": (lambda x, grid: tuple(F.grid_sample(x, grid, mode=mode, padding_mode=pad, align_corners=ac)
                                             for mode, pad, ac in [("bilinear", "zeros", True), ("bilinear", "border", False),
                                                                   ("bilinear", "reflection", False), ("nearest", "zeros", False)]),
                       torch.randn(2, 3, 5, 6, 4, generator=g, dtype=torch.float64),
                       torch.rand(2, 3, 4, 2, 3, generator=g, dtype=torch.float64) * 2.6 - 1.3),
    "padding_backward": (lambda x: (F.pad(x, (2, 1, 1, 3), mode="reflect"), F.pad(x, (3, 0, -1, 2), mode="replicate")),
                         torch.randn(1, 2, 4, 6, generator=g)),
    # products
    "addbmm_cross": (lambda s, a, b: (torch.addbmm(s, a, b, beta=0.5), torch.linalg.cross(a[..., :3], b[:, :3, :3].mT)),
                     torch.randn(3, 3, generator=g), torch.randn(2, 3, 4, generator=g), torch.randn(2, 4, 3, generator=g)),
    # factorizations and solves
    "cholesky_family": (lambda a, b: (torch.linalg.cholesky(a), torch.cholesky_solve(b, torch.linalg.cholesky(a)),
                                      torch.cholesky_inverse(torch.linalg.cholesky(a, upper=True), upper=True),
                                      torch.linalg.solve_triangular(a.triu(), b, upper=True),
                                      torch.linalg.solve_triangular(a.tril(), b.mT, upper=False, left=False)),
                        positive_definite, torch.randn(2, 4, 3, generator=g)),
    "lu_family": (lambda a, b: (*torch.linalg.lu(a), torch.linalg.solve(a, b), torch.linalg.solve(a, b[..., 0]),
                                torch.linalg.inv(a), torch.linalg.det(a), *torch.linalg.slogdet(a),
                                torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False, adjoint=True)),
                  torch.randn(2, 4, 4, generator=g), torch.randn(2, 4, 4, generator=g)),
    "lu_rectangular": (lambda a: torch.linalg.lu(a), torch.randn(3, 5, generator=g)),
    # pooling with indices; margin and sequence losses
    "adaptive_max_pool": (lambda x: (*F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
                                     *F.adaptive_max_pool1d(x[0], 4, return_indices=True),
                                     F.adaptive_max_pool3d(x[None], (1, 2, 2))),
                          torch.randn(2, 5, 7, generator=g)),
    "multi_margin_loss": (lambda x, y: (F.multi_margin_loss(x, y), F.multi_margin_loss(x, y, p=2, margin=0.5,
                                        weight=class_weight.to(x.device), reduction="none"),
                                        F.multi_margin_loss(x[0], y[:1], reduction="sum"),
                                        F.multi_margin_loss(x, y, margin=-3.0)),  # margin is a runtime Scalar
                          x45, torch.tensor([0, 4, 2, 2])),
    "multilabel_margin_loss": (lambda x, y: (F.multilabel_margin_loss(x, y), F.multilabel_margin_loss(x, y, reduction="none"),
                                             F.multilabel_margin_loss(x[1], y[1]),
                                             F.multilabel_margin_loss(x[2], y[0], reduction="none")),  # 0-d
                               x45, torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, 2, -1], [-1, 0, 0, 0, 0], [0, 1, 2, 3, 4]])),
    "ctc_loss": (lambda lp, t: (F.ctc_loss(lp, t, [7, 5, 6], [3, 0, 2], reduction="none"),
                                F.ctc_loss(lp, t[:, :2], [7, 5, 6], [2, 0, 2]),
                                F.ctc_loss(lp, t.flatten()[:5], [7, 5, 6], [3, 0, 2], reduction="sum", zero_infinity=True),
                                F.ctc_loss(lp[:, 0], t[0, :2], [7], [2])),
                 torch.randn(7, 3, 5, generator=g).log_softmax(2), torch.tensor([[1, 1, 2], [3, 4, 4], [2, 2, 1]])),
    # special functions: digamma's gradient is trigamma (polygamma(1)), CPU's formula near the poles
    "polygamma_zeta": (lambda x: (torch.digamma(x), torch.polygamma(1, x), torch.polygamma(3, x),
                                  torch.special.zeta(torch.full_like(x, 3.0).detach(), x)),
                       torch.tensor([-7.9506, -2.5, -2.0, -0.7, 0.0, 0.3, 1.0, 4.5, 30.0])),  # poles too
    "cross_entropy_all_ignored": (lambda x, t: F.cross_entropy(x, t, ignore_index=1), x45, torch.tensor([1, 1, 1, 1])),
    "qr_family": (lambda a, c: (*torch.linalg.qr(a), *torch.linalg.qr(a[..., :3, :], mode="complete"),
                                *torch.geqrf(a.detach()),  # geqrf has no derivative
                                torch.ormqr(*torch.geqrf(a.detach()), c, transpose=True),
                                torch.ormqr(*torch.geqrf(a.detach()), c.mT, left=False),
                                torch.linalg.householder_product(*torch.geqrf(a.detach()))),
                  torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 3, generator=g)),
    "index_reduce": (lambda x, i, s: (x.index_reduce(0, i, s, "mean"), x.index_reduce(0, i, s, "amax", include_self=False),
                                      x.index_reduce(0, i, s, "prod")),
                     x45, torch.tensor([0, 2, 0]), torch.randn(3, 5, generator=g)),
    "histogram": (lambda x, w, e: (*torch.histogram(x, 7), *torch.histogram(x, 4, range=(-1.0, 1.5), weight=w, density=True),
                                   *torch.histogram(x, e), *torch.histogram(x[:0], 3, density=True)),
                  x45, torch.rand(4, 5, generator=g), torch.tensor([-2.0, -0.5, 0.0, 0.25, 3.0]), False),  # no derivative
    "histogramdd": (lambda x, w, e0, e1: (*torch.histogramdd(x, [3, 4]), torch.histogramdd(x, [2, 5], weight=w, density=True)[0],
                                          torch.histogramdd(x, [2, 2], range=[-1.0, 1.0, -2.0, 0.0])[0],
                                          torch.histogramdd(x, [e0, e1], density=True)[0]),
                    torch.randn(20, 2, generator=g), torch.rand(20, generator=g), torch.tensor([-2.0, 0, 2]),
                    torch.tensor([-1.0, 0, 0.5, 3]), False),  # no derivative
    "hash_tensor": (lambda x: (torch.hash_tensor(x), torch.hash_tensor(x, 1), torch.hash_tensor((x * 10).long(), 0, keepdim=True)),
                    x45, False),
    "nonzero_static": (lambda x: (torch.nonzero_static(x > 0, size=4), torch.nonzero_static(x > 0, size=30, fill_value=-7)), x45),
    # singular values and what depends on them only (singular vectors are unique up to sign)
    "svd_invariants": (lambda a: (torch.linalg.svdvals(a), torch.linalg.pinv(a), torch.linalg.matrix_norm(a, "nuc"),
                                  torch.linalg.cond(a), torch.linalg.matrix_rank(a.detach()),
                                  *[u.abs() for u in torch.linalg.svd(a, full_matrices=False)],
                                  torch.linalg.svd(a[0].mT)[0].abs(), torch.linalg.svd(a[1, :2])[2][:2].abs()),
                       torch.randn(2, 5, 4, generator=g, dtype=torch.float64)),  # f32 rounding: cond's gradient ~1e-5 rel
    "eigh": (lambda a: (torch.linalg.eigvalsh(a), torch.linalg.eigh(a)[1].abs(), torch.linalg.eigh(a, UPLO="U")[0],
                        torch.linalg.pinv(a, hermitian=True), torch.linalg.matrix_rank(a.detach(), hermitian=True)),
             torch.randn(2, 5, 5, generator=g, dtype=torch.float64)),  # one triangle is read
    # general eigenproblems: eigenvalues in CPU's (LAPACK's) order, eigenvectors by modulus (unique
    # up to a phase); eigvals without autograd goes through its own op
    "eig": (lambda a: (*(lambda w: (w.real, w.imag))(torch.linalg.eig(a)[0]), torch.linalg.eig(a)[1].abs(),
                       torch.linalg.eigvals(a.detach()).real, torch.linalg.eigvals(a[0].detach().float()).imag),
            torch.randn(2, 5, 5, generator=g, dtype=torch.float64)),
    "eig_complex": (lambda a: (*torch.linalg.eig(a)[0:1], torch.linalg.eig(a)[1].abs(), torch.linalg.eigvals(a.to(torch.complex64))),
                    torch.randn(2, 4, 4, generator=g, dtype=torch.complex128)),
    "matrix_exp": (lambda a: (torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(a * 20), torch.linalg.matrix_exp(a[0] * 0)),
                   torch.randn(3, 4, 4, generator=g, dtype=torch.float64)),  # scaled 0 to 6 times
    # every driver's solution; rank, singular values and residuals where CPU gives them (a
    # rank-deficient matrix has no residuals: a data-dependent size)
    "lstsq": (lambda a, b: (*[torch.linalg.lstsq(a, b, driver=d).solution for d in ["gels", "gelsy", "gelsd", "gelss"]],
                            *torch.linalg.lstsq(a, b, driver="gelsd")[1:], torch.linalg.lstsq(a, b).rank,
                            torch.linalg.lstsq(a, b, driver="gels").residuals, torch.linalg.lstsq(a.mT, b[..., :4, 0]).solution,
                            *torch.linalg.lstsq(torch.cat([a[..., :2], a[..., :2]], -1).detach(), b.detach(), driver="gelsd")[1:]),
              torch.randn(2, 6, 4, generator=g, dtype=torch.float64), torch.randn(2, 6, 3, generator=g, dtype=torch.float64)),
    "segment_reduce": (lambda x: tuple(torch.segment_reduce(x, reduce, **{k: torch.tensor(v, device=x.device) if isinstance(v, list)
                                                                           else v for k, v in kw.items()})
                                       for reduce in ["sum", "mean", "max", "min", "prod"]
                                       for kw in [{"lengths": [2, 0, 3, 1]}, {"offsets": [0, 1, 1, 5], "initial": 2.0},
                                                  {"lengths": [[1, 3, 0], [2, 0, 2], [0, 0, 4], [4, 0, 0], [1, 1, 1], [0, 2, 1]],
                                                   "axis": 1, "unsafe": True}]),
                       # max/min ties only along axis 1 (the last dim): along axis 0, CPU's backward gives
                       # every tied element the whole gradient instead of a share (not followed here)
                       torch.tensor([[5.0, 0.5, 2, 1], [6, 0, 0, 1.5], [2, -0.5, -1, 0.125], [7, 0, 0.5, 0],
                                     [-3, 1, 3, 0.75], [4, 4, 3.5, 0.5]])),
    # orthogonal polynomials: recurrences in a loop up to the largest degree; CPU's closed forms
    # for Chebyshev at |x| < 1 and high degrees; negative and fractional degrees
    "orthogonal_polynomials": (lambda x, n: tuple(getattr(torch.special, f)(x, n) for f in [
        "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
        "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
        "legendre_polynomial_p"]) + (torch.special.legendre_polynomial_p(x, 4), torch.special.hermite_polynomial_he(x, n.long())),
                               torch.tensor([-1.5, -1, -0.7, -0.2, 0, 0.3, 0.6, 0.9, 1, 2.5])[:, None],
                               torch.tensor([-1, 0, 1, 2, 3.7, 5, 7, 8, 9, 12]), False),  # no derivatives
    "normal_tails": (lambda x, p: (torch.special.log_ndtr(x), torch.special.ndtri(p)),
                     torch.tensor([-60.0, -31, -25, -12, -9, -3, -1.5, -1, -0.3, 0, 0.7, 4, 9], dtype=torch.float64),
                     torch.tensor([1e-3, 0.02, 0.3, 0.5, 0.77, 0.999], dtype=torch.float64)),
    "erfcx": (lambda x: torch.special.erfcx(x),
              torch.tensor([-30.0, -26, -10, -6.2, -3, -1.9, -0.5, 0, 1e-3, 0.7, 1.99, 2, 2.01, 3.5, 9, 30, 1e3, 1e9,
                            float("inf"), float("-inf"), float("nan")], dtype=torch.float64)),
    "normal_tails_f32": (lambda x, p: (torch.special.log_ndtr(x), torch.special.ndtri(p)),
                         torch.tensor([-30.0, -12, -9, -3, -1.5, -1, -0.3, 0, 0.7, 4, 9]), torch.tensor([0.02, 0.3, 0.5, 0.77, 0.98]),
                         False),  # the gradient, exp(-(log_ndtr + x^2/2)), turns one ulp of -454 into 3e-5
    "frexp_round_renorm": (lambda x: (*torch.frexp(x), torch.frexp(torch.tensor([1e-40, -3e-42, 0.0, float("inf")],
                                                                                device=x.device))[1],  # subnormals
                                      torch.round(x, decimals=2), torch.round(x * 100, decimals=-1),
                                      torch.renorm(x, 2, 0, 1.5), torch.renorm(x, float("inf"), 1, 0.7)),
                           x45 * 3),
    # power series up to |x| = 20, the asymptotic series above
    "modified_bessel_i": (lambda x: (torch.i0(x), torch.special.i0e(x), torch.special.i1(x), torch.special.i1e(x),
                                     torch.special.modified_bessel_i0(x), torch.special.modified_bessel_i1(x)),
                          torch.tensor([0.0, 1e-3, -0.5, 1, -3, 7.5, -9, 15, 19.9, 20.1, -25, 40, 85, 700], dtype=torch.float64)),
    "modified_bessel_i_f32": (lambda x: (torch.i0(x), torch.special.i0e(x), torch.special.i1(x), torch.special.i1e(x)),
                              torch.tensor([0.0, 1e-3, -0.5, 1, -3, 7.5, -9, 15, 19.9, 20.1, -25, 40, 85]),
                              False),  # float32 gradients cancel (CPU's too are 1e-5 off float64 there)
    # power series below the switch points (J, Y: |x| = 12; K: 9), Hankel's expansions above; in
    # float64 CPU's J and Y are off by up to 4e-5 relative (test_bessel_j_y_airy_in_float64)
    "bessel_j_y_f32": (lambda x: (torch.special.bessel_j0(x), torch.special.bessel_j1(x), torch.special.bessel_y0(x),
                                  torch.special.bessel_y1(x)),
                       torch.linspace(-30, 30, 241), False),  # no derivatives in PyTorch
    "modified_bessel_k": (lambda x: (torch.special.modified_bessel_k0(x), torch.special.modified_bessel_k1(x),
                                     torch.special.scaled_modified_bessel_k0(x), torch.special.scaled_modified_bessel_k1(x)),
                          torch.tensor([0.0, 1e-6, 1e-3, 0.5, 1, 2, 4.5, 8.9, 9.1, 15, 60, 700, 800, -1, float("inf"),
                                        float("nan")], dtype=torch.float64), False),
    "modified_bessel_k_f32": (lambda x: (torch.special.modified_bessel_k0(x), torch.special.modified_bessel_k1(x),
                                         torch.special.scaled_modified_bessel_k0(x),
                                         torch.special.scaled_modified_bessel_k1(x)),
                              torch.linspace(0.05, 40, 241), False),
    # Maclaurin series on [-9, 6], the asymptotic expansions outside
    "airy_ai_f32": (lambda x: torch.special.airy_ai(x), torch.linspace(-30, 30, 241), False),
    "bessel_j_y_airy_edges": (lambda x: (torch.special.bessel_j0(x), torch.special.bessel_j1(x), torch.special.bessel_y0(x),
                                         torch.special.bessel_y1(x), torch.special.airy_ai(x)),
                              torch.tensor([0.0, -1, float("inf"), float("-inf"), float("nan"), 200, -200],
                                           dtype=torch.float64), False),
    "angle_spherical_j0": (lambda x: (torch.angle(x), torch.special.spherical_bessel_j0(x)),
                           torch.tensor([1.0, -2, 0, -0.0, float("nan"), float("-inf"), 0.3, -0.49, 5, 1e-4, float("inf")]), False),
    # series below x = a + 1, continued fraction above, and the edges (0, inf, negative, NaN)
    "incomplete_gamma": (lambda a, x: (torch.igamma(a.detach(), x), torch.igammac(a.detach(), x),  # no d/da
                                       torch.special.gammainc(a[3:].detach(), x[3:])),
                         torch.tensor([0.0, 0, 1, 2.5, 0.5, 10, 100, -1, 3, float("inf"), 1, float("nan"), 5, 1e-3, 8.9, 30],
                                      dtype=torch.float64),
                         torch.tensor([0.0, 1, 0, 1.7, 3, 12, 90, 1, -1, 2, float("inf"), 1, 0.1, 1e-3, 8.5, 25],
                                      dtype=torch.float64)),
    # complex logaddexp in CPU's order (operands by real part, y the lower on a tie), with the
    # infinite, NaN and tied cases
    "logaddexp_complex": (lambda a, b: (torch.logaddexp(a, b), torch.logaddexp(b, a)),
                          torch.tensor([2 + 3j, -4 - 1j, 0.5 + 7j, complex(-math.inf, 1), complex(math.inf, 2),
                                        complex(math.nan, 0), complex(1, math.nan), 3 + 1j]),
                          torch.tensor([2 - 3j, 3 + 2j, -0.5 - 7j, complex(-math.inf, 2), complex(math.inf, -1),
                                        0j, 0j, complex(-math.inf, 5)])),
    # complex matrices: Householder QR with CPU's phases (R's diagonal real), and the Jacobi SVD
    # and eigh with complex rotations (singular vectors and eigenvectors compared by modulus,
    # unique only up to a phase)
    "qr_family_complex": (lambda a, c: (*torch.linalg.qr(a), *torch.linalg.qr(a[..., :3, :], mode="complete"),
                                        *torch.geqrf(a), torch.ormqr(*torch.geqrf(a), c, transpose=True),
                                        torch.ormqr(*torch.geqrf(a), c.mT, left=False),
                                        torch.linalg.householder_product(*torch.geqrf(a)),
                                        *torch.linalg.qr(a[0].to(torch.complex64))),
                          torch.randn(2, 5, 4, generator=g, dtype=torch.complex128),
                          torch.randn(2, 5, 3, generator=g, dtype=torch.complex128)),
    "svd_invariants_complex": (lambda a: (torch.linalg.svdvals(a), torch.linalg.pinv(a), torch.linalg.matrix_norm(a, "nuc"),
                                          torch.linalg.cond(a), torch.linalg.matrix_rank(a), torch.linalg.matrix_norm(a, 2),
                                          *[u.abs() for u in torch.linalg.svd(a, full_matrices=False)],
                                          torch.linalg.svd(a[0].mH)[0].abs(), torch.linalg.svd(a[1, :2])[2][:2].abs(),
                                          torch.linalg.svdvals(a.to(torch.complex64))),
                               torch.randn(2, 5, 4, generator=g, dtype=torch.complex128)),
    "eigh_complex": (lambda a: (torch.linalg.eigvalsh(a), torch.linalg.eigh(a)[1].abs(), torch.linalg.eigh(a, UPLO="U")[0],
                                torch.linalg.pinv(a, hermitian=True), torch.linalg.matrix_rank(a, hermitian=True),
                                torch.linalg.eigvalsh(a.to(torch.complex64))),
                     torch.randn(2, 5, 5, generator=g, dtype=torch.complex128)),  # one triangle, real diagonal read
    "lstsq_complex": (lambda a, b: (torch.linalg.lstsq(a, b).solution, torch.linalg.lstsq(a, b, driver="gelsd").solution,
                                    torch.linalg.pinv(a) @ b),
                      torch.randn(6, 4, generator=g, dtype=torch.complex128), torch.randn(6, 2, generator=g, dtype=torch.complex128)),
    # Bunch-Kaufman LDL^T with LAPACK's pivots (1x1 and 2x2 blocks, interchanges; a zero column
    # sets info), real, complex symmetric and complex Hermitian, and the solves with it
    "ldl": (lambda a, z, c, b, cb: (*torch.linalg.ldl_factor_ex(a), *torch.linalg.ldl_factor_ex(z),
                                    torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b),
                                    *torch.linalg.ldl_factor_ex(c), torch.linalg.ldl_solve(*torch.linalg.ldl_factor(c), cb),
                                    *torch.linalg.ldl_factor_ex(c + c.mH, hermitian=True),
                                    torch.linalg.ldl_solve(*torch.linalg.ldl_factor(c + c.mH, hermitian=True), cb, hermitian=True)),
            (lambda a: a + a.mT)(torch.randn(3, 6, 6, generator=g, dtype=torch.float64)),
            torch.tensor([[0.0, 0, 0], [0, 2, 1], [0, 1, 3]], dtype=torch.float64),
            (lambda a: a + a.mT)(torch.randn(2, 5, 5, generator=g, dtype=torch.complex128)),
            torch.randn(3, 6, 2, generator=g, dtype=torch.float64), torch.randn(2, 5, 3, generator=g, dtype=torch.complex128), False),
    "logcumsumexp_complex": (lambda x: (torch.logcumsumexp(x, 0), torch.logcumsumexp(x, 1)),
                             torch.tensor([[2 + 3j, -4 - 1j, complex(-math.inf, 1)], [0.5 + 7j, 3 + 2j, 1 - 1j],
                                           [complex(-math.inf, 2), 0j, -0.5 - 7j]])),
    # binary functions where PyTorch routes through an alias (max.other): gradients must flow
    "max_min_binary": (lambda a, b: (torch.max(a, b), torch.min(a, b)), x45, x45.flip(0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_op_matches_cpu_on_device(name, no_fallbacks):
    fn, *inputs = CASES[name]
    grad = inputs.pop() if isinstance(inputs[-1], bool) else True
    check_like_cpu(fn, *inputs, grad=grad)


def test_bessel_j_y_airy_in_float64(no_fallbacks):
    """In float64, CPU's own J0, J1, Y0, Y1 and Ai are off by up to 4e-5 relative (e.g. J0(5.04):
    -0.1644078954 for -0.1644075387), so tpu's are compared with mpmath's, to 30 digits."""
    import mpmath
    mpmath.mp.dps = 30
    x = torch.cat([torch.linspace(-40, 40, 321, dtype=torch.float64),
                   torch.tensor([1e-6, 1e-3, -5.04, 5.99, 6.01, -8.99, -9.01, 11.99, 12.01, -300, 1e4], dtype=torch.float64)])
    exact = {torch.special.bessel_j0: lambda v: mpmath.besselj(0, v), torch.special.bessel_j1: lambda v: mpmath.besselj(1, v),
             torch.special.bessel_y0: lambda v: mpmath.bessely(0, v), torch.special.bessel_y1: lambda v: mpmath.bessely(1, v),
             torch.special.airy_ai: mpmath.airyai}
    for fn, reference in exact.items():
        xs = x[x > 0] if fn in (torch.special.bessel_y0, torch.special.bessel_y1) else x
        expected = torch.tensor([float(reference(mpmath.mpf(v))) for v in xs.tolist()], dtype=torch.float64)
        torch.testing.assert_close(fn(xs.to("tpu")).cpu(), expected, rtol=1e-7, atol=1e-12, msg=fn.__name__)


EXTREMES = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e38, -1e38, 2.0, 2.01, -3.0, 9.5, 30.0, 1e4]


@pytest.mark.parametrize("fn", [torch.sign, torch.sgn, torch.erf, torch.special.ndtr, torch.special.erfcx, torch.i0,
                                torch.special.i0e, torch.special.i1e, torch.special.bessel_j0],
                         ids=lambda f: f.__name__)
def test_unary_functions_at_extremes_and_alone_match_cpu(fn, no_fallbacks):
    """Found at extreme arguments: sign(NaN) was NaN (CPU: 0) and sign(-0.0) -0.0; float32 erf
    stopped 3 ulps short of 1, so ndtr(-inf) was 9e-8; I0(1e38) was NaN and I0e(1e38) 0 (2 pi x
    overflowed). Iterated functions stepped converged elements on while others converged, each
    step adding rounding (erfcx(9.5) 2e-5 off beside 2.0), and stopped an element whose partial
    sum passed through 0 (J0(2.0) alone was 0). Each value is compared alone and in the batch."""
    x = torch.tensor([v for v in EXTREMES if fn is not torch.special.bessel_j0 or abs(v) < 1e4])  # CPU's J0(1e4) is 1e-4 off
    expected = fn(x)
    expected = torch.where(expected.abs() < torch.finfo(x.dtype).tiny, 0 * expected, expected)  # XLA flushes subnormals
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), expected, rtol=2e-6, atol=0, equal_nan=True)
    for i in range(len(x)):
        torch.testing.assert_close(fn(x[i:i + 1].to("tpu")).cpu(), expected[i:i + 1], rtol=2e-6, atol=0, equal_nan=True)
    if fn in (torch.sign, torch.sgn):
        assert not fn(torch.tensor([-0.0], device="tpu")).cpu().signbit().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_hypot_of_infinities_large_values_and_nan_as_cpu(dtype, no_fallbacks):
    """hypot was sqrt(a^2 + b^2) in the input's dtype: inf from 1.8e19 on in float32 (CPU: 1.4e38
    for 1e38, 1e38), and NaN beside an infinity (C's hypot: inf)."""
    a = torch.tensor([float("nan"), float("inf"), 1e38, 3e19, 3.0, 0.0, -0.0, 1e-30, 5.0, float("nan")], dtype=dtype)
    b = torch.tensor([float("inf"), float("nan"), 1e38, 4e19, 4.0, 0.0, 0.0, 1e-30, float("nan"), 2.0], dtype=dtype)
    torch.testing.assert_close(torch.hypot(a.to("tpu"), b.to("tpu")).cpu(), torch.hypot(a, b), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac, torch.special.zeta], ids=lambda f: f.__name__)
def test_igamma_and_zeta_at_their_edges_as_cpu(fn, dtype, no_fallbacks):
    """CPU checks the edges in an order that decides a NaN beside a deciding argument
    (igamma(NaN, inf) = 1, igamma(NaN, 0) = 0, zeta(NaN, -1) = inf, zeta(0.5, -2) = NaN): tpu gave
    NaN for every NaN, inf for zeta(s < 1, pole). XLA's zeta was NaN for s from ~1e4 on in float32
    (zeta(1e5, 1) = 1)."""
    grid = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.0, -3.5, 100.0]
    if fn is torch.special.zeta:
        grid += [1e5, 2000.0, 0.999, 1.001]
    v = torch.tensor(grid, dtype=dtype)
    a, b = v.repeat_interleave(len(v)), v.repeat(len(v))
    if fn is torch.special.zeta:  # not CPU's overflowing tails for large s beside q < 0 or q = inf
        keep = ~((a.isinf() | (a >= 2000)) & ((b < 0) | b.isinf()))
        a, b = a[keep], b[keep]
    torch.testing.assert_close(fn(a.to("tpu"), b.to("tpu")).cpu(), fn(a, b), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_running_extremes_of_any_length_as_cpu(op, dtype, no_fallbacks):
    """cummax/cummin of lengths that are not a power of two failed to compile (XLA's CPU compiler
    rejected the value-and-index running reduction); ties and NaNs take the later index."""
    x = torch.randint(-3, 4, (7, 45), generator=torch.Generator().manual_seed(0)).to(dtype)
    if dtype.is_floating_point:
        x[2, 5] = x[2, 30] = x[4, 0] = float("nan")
    for dim in (0, 1):
        values, indices = op(x.to("tpu"), dim)
        expected = op(x, dim)
        torch.testing.assert_close(values.cpu(), expected.values, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(indices.cpu(), expected.indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_logcumsumexp_carries_nan_as_cpu(dtype, no_fallbacks):
    """A NaN did not carry on: logcumsumexp([1, NaN, 3, -inf]) gave [1, 1.69, 3.24, 3.24] (CPU: NaN
    from the NaN on); XLA's max and min in a window's body dropped it."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, -inf], [nan, 1.0, 2.0, 3.0], [-inf, -inf, nan, inf], [1.0, inf, nan, 2.0]]).to(dtype)
    for dim in (0, 1):
        torch.testing.assert_close(torch.logcumsumexp(x.to("tpu"), dim).cpu(), torch.logcumsumexp(x, dim), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64])
def test_ldexp_with_integer_exponents_as_cpu(dtype, no_fallbacks):
    """ldexp(x, int tensor) failed with "DispatchStub: missing kernel for tpu" (PyTorch 2.11 scales a
    float x by an integer exponent in a CPU/CUDA-only kernel). Exact, as std::ldexp: huge exponents
    saturate to inf or 0 without overflowing early."""
    x = torch.tensor([1.5, -2.25, 3e38, 1e-30, 0.0, float("inf"), float("nan"), 1.0, 1.0, 3.0, 7.0, -5.0])
    e = torch.tensor([2, -3, 1, 5, 7, 1, 2, 200, -200, 2**31 - 1, -140, 56])
    x = x.to(dtype)
    # (a float exponent: 2 ** e in float32, whose subnormals XLA flushes even for a float64 x)
    for exponent in (e, e.to(torch.int32), e.to(torch.int8), e.to(torch.uint8), e.float().clamp(-100, 100)):
        expected = torch.ldexp(x, exponent)
        actual = torch.ldexp(x.to("tpu"), exponent.to("tpu")).cpu()
        assert actual.dtype == expected.dtype
        tiny = torch.finfo(expected.dtype).tiny if expected.dtype.is_floating_point else 0
        expected = torch.where(expected.abs() < tiny, 0.0, expected).to(expected.dtype)  # XLA flushes subnormals
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)
    y = x.to("tpu")
    if dtype.is_floating_point:
        torch.testing.assert_close(y.clone().ldexp_(e.to("tpu")).cpu(), x.clone().ldexp_(e), equal_nan=True, rtol=0, atol=1e-37)
        with pytest.raises(NotImplementedError, match="ldexp_cpu_exp"):
            torch.ldexp(y, (e > 0).to("tpu"))
    else:
        with pytest.raises(RuntimeError, match="ldexp can't be cast to the desired output type Long"):
            y.ldexp_(e.to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_kaiser_window_as_cpu(dtype, no_fallbacks):
    """torch.kaiser_window(..., device="tpu") failed with "DispatchStub: missing kernel for tpu"
    (torchaudio's resampling windows use it)."""
    tolerance = dict(rtol=2e-6, atol=1e-7) if dtype in (torch.float32, torch.float64) else dict(rtol=1e-2, atol=1e-4)
    for args in ((6,), (6, False), (7, False, 5.0), (1,), (0,), (300, True, 8.0)):
        expected = torch.kaiser_window(*args, dtype=dtype)
        actual = torch.kaiser_window(*args, dtype=dtype, device="tpu")
        assert actual.device.type == "tpu"
        torch.testing.assert_close(actual.cpu(), expected, **tolerance)
    with pytest.raises(RuntimeError, match="requires non-negative window_length, got window_length=-1"):
        torch.kaiser_window(-1, device="tpu")
    with pytest.raises(RuntimeError, match="kaiser_window expects floating point dtypes"):
        torch.kaiser_window(3, dtype=torch.int64, device="tpu")


def test_index_fill_counts_negative_indices_from_the_end_as_cpu(no_fallbacks):
    """index_fill(1, [-1], v) raised "index out of range" on tpu; CPU (alone among the index_*
    ops) counts a negative index from the end."""
    a = torch.arange(24.0).reshape(4, 6)
    for fn in (lambda x, d: x.index_fill(1, torch.tensor([-1, -6, 2], device=d), -3.0),
               lambda x, d: x[0].index_fill_(0, torch.tensor(-2, device=d), torch.tensor(9.0, device=d)),
               lambda x, d: x.index_fill(0, torch.tensor([-4, 3], device=d), 1.0)):
        torch.testing.assert_close(fn(a.to("tpu"), "tpu").cpu(), fn(a.clone(), "cpu"))
    with pytest.raises(RuntimeError, match="index out of range"):
        a.to("tpu").index_fill(1, torch.tensor([-7], device="tpu"), 0.0).cpu()


def test_layer_norm_statistics_have_cpus_dtypes():
    # mean and rstd in bfloat16 for bfloat16 input (float only with float affine parameters), as on CPU
    x = torch.randn(2, 3, 4, dtype=torch.bfloat16)
    for w in [None, torch.ones(4, dtype=torch.bfloat16), torch.ones(4)]:
        cpu = torch.ops.aten.native_layer_norm(x, [4], w, None, 1e-5)
        tpu = torch.ops.aten.native_layer_norm(x.to("tpu"), [4], None if w is None else w.to("tpu"), None, 1e-5)
        assert [t.dtype for t in tpu] == [t.dtype for t in cpu]
        for a, e in zip(tpu, cpu):
            torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("make", [
    lambda device: torch.logspace(-2, 3, 7, base=2, device=device),
    lambda device: torch.logspace(0, 2, 5, dtype=torch.int64, device=device),
    lambda device: torch.eye(3, 5, device=device),
])
def test_factories_on_device(make, no_fallbacks):
    torch.testing.assert_close(make("tpu").cpu(), make("cpu"))


def test_vdot_conjugates_and_equal_compares_on_device(no_fallbacks):
    a = torch.tensor([1 + 2j, 3 - 1j])
    b = torch.tensor([2 - 1j, 1j])
    assert torch.vdot(a.to("tpu"), b.to("tpu")).cpu() == torch.vdot(a, b)
    x = torch.tensor([1.0, math.nan])
    assert torch.equal(x45.to("tpu"), x45.to("tpu").clone())
    assert not torch.equal(x.to("tpu"), x.to("tpu"))  # NaN is never equal, as on CPU
    assert not torch.equal(x45.to("tpu"), x45.to("tpu")[:2])


@pytest.mark.parametrize("bad", [
    lambda: F.binary_cross_entropy(torch.tensor([1.5], device="tpu"), torch.tensor([1.0], device="tpu")),
    lambda: torch.take(torch.zeros(3, device="tpu"), torch.tensor([3], device="tpu")),
    lambda: F.max_unpool1d(torch.ones(1, 1, 2, device="tpu"), torch.tensor([[[0, 9]]], device="tpu"), 2),
    lambda: torch.linalg.cholesky(-torch.eye(3, device="tpu")),
    lambda: F.multi_margin_loss(torch.zeros(2, 3, device="tpu"), torch.tensor([0, 3], device="tpu")),
    lambda: F.multilabel_margin_loss(torch.zeros(1, 3, device="tpu"), torch.tensor([[0, 5, -1]], device="tpu")),
])
def test_bad_values_raise_like_cpu(bad):
    with pytest.raises((RuntimeError, IndexError)):
        bad().cpu()


def test_integer_means_round_down_like_cpu(no_fallbacks):
    x, i, s = torch.tensor([-5, 3, -7, 4]), torch.tensor([0, 0, 2]), torch.tensor([-2, 4, 1])
    for reduce in (lambda x, i, s: x.index_reduce(0, i, s, "mean"), lambda x, i, s: x.scatter_reduce(0, i, s, "mean")):
        assert torch.equal(reduce(x.to("tpu"), i.to("tpu"), s.to("tpu")).cpu(), reduce(x, i, s))


def test_transformer_fast_path_mask_check_on_device(no_fallbacks):
    """nn.TransformerEncoder in eval mode asks whether the padding mask is left aligned
    (aten::_nested_tensor_from_mask_left_aligned): answered on the device, one host read."""
    kept = torch.tensor([[True, True, False], [True, False, False]])
    assert torch._nested_tensor_from_mask_left_aligned(x45.to("tpu"), kept.to("tpu"))
    assert not torch._nested_tensor_from_mask_left_aligned(x45.to("tpu"), kept.flip(1).to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.float32, torch.complex64])
def test_eig_eigenvalues_in_cpu_order(dtype, no_fallbacks):
    """linalg.eig follows LAPACK's geev step by step (balancing, Hessenberg form, lahqr's shifts and
    deflations), so eigenvalues come in CPU's order, badly scaled matrices (D A D^-1) and conjugate
    pairs included; eigenvectors are unit columns with the largest component real."""
    gen = torch.Generator().manual_seed(1)
    for n in (3, 6):
        a = torch.randn(8, n, n, generator=gen, dtype=dtype)
        scale = torch.logspace(-4, 4, n, dtype=torch.float64).to(dtype)
        a[4:] = scale[:, None] * a[4:] / scale  # needs balancing
        w, v = torch.linalg.eig(a.to("tpu"))
        w_cpu, v_cpu = torch.linalg.eig(a)
        tol = {"rtol": 1e-4, "atol": 1e-4} if dtype in (torch.float32, torch.complex64) else {"rtol": 1e-9, "atol": 1e-9}
        torch.testing.assert_close(w.cpu(), w_cpu, **tol)
        torch.testing.assert_close(v.cpu().abs()[:4], v_cpu.abs()[:4], **tol)
        v = v.cpu()
        torch.testing.assert_close(torch.linalg.vector_norm(v, dim=-2), torch.ones(8, n, dtype=w.real.dtype))
        largest = v.gather(-2, v.abs().argmax(-2, keepdim=True))
        assert (largest.imag.abs() <= 1e-6 * largest.real).all() and (largest.real > 0).all()


def test_eig_special_matrices(no_fallbacks):
    """Repeated, zero, defective and unit-circle eigenvalues: CPU's eigenvalues in CPU's order, and
    A V = V diag(w) where the eigenvectors are well defined."""
    n = 5
    cases = {"identity": torch.eye(n), "zeros": torch.zeros(n, n), "diagonal": torch.diag(torch.tensor([3.0, -1, 2, 2, 0.5])),
             "upper": torch.triu(torch.arange(1.0, n * n + 1).reshape(n, n)), "cyclic": torch.roll(torch.eye(n), 1, 0),
             "jordan": 2 * torch.eye(n) + torch.diag(torch.ones(n - 1), 1),
             "skew": (lambda a: a - a.T)(torch.arange(n * n, dtype=torch.float32).reshape(n, n).sin())}
    for name, a in cases.items():
        a = a.double()
        w, v = (x.cpu() for x in torch.linalg.eig(a.to("tpu")))
        torch.testing.assert_close(w, torch.linalg.eigvals(a), atol=1e-7, rtol=1e-7, msg=name)
        if name != "jordan":
            torch.testing.assert_close(a.to(v.dtype) @ v, v * w, atol=1e-12, rtol=0, msg=name)


def test_eig_of_non_finite_input_raises_as_cpu():
    bad = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        torch.linalg.eig(bad)
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        torch.linalg.eigvals(bad.to("tpu")).cpu()


def test_cholesky_ex_reports_failure_in_info(no_fallbacks):
    """info is nonzero exactly when CPU's is; XLA leaves no partial factor, so on tpu it is 1 rather
    than the order of the failing minor (docs/conformance.md)."""
    singular = torch.tensor([[4.0, 2, 0], [2, 1, 0], [0, 0, 1]])  # the leading minor of order 2
    assert torch.linalg.cholesky_ex(singular).info.item() == 2
    assert torch.linalg.cholesky_ex(singular.to("tpu")).info.item() == 1
    assert torch.linalg.cholesky_ex(positive_definite.to("tpu")).info.cpu().tolist() == [0, 0]


def test_no_tpu_kernel_hides_a_decomposition_autograd_needs():
    """A tpu kernel for an op PyTorch implements by decomposition (CompositeImplicitAutograd) takes
    the op's gradient away on tpu (max.other did): only the listed exceptions may exist."""
    deliberate = {"aten::_has_compatible_shallow_copy_type",  # keeps tied weights on .to("tpu")
                  "aten::silu_backward"}  # has its own derivative formula
    hiding = {name for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
              if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")}
    assert hiding <= deliberate, sorted(hiding - deliberate)


def test_batch_norm_statistics_as_accurate_as_cpu(no_fallbacks):
    """A BatchNorm's mean over N*H*W = 4096 values: a plain f32 reduction was 2.5e-6 off (CPU's
    cascade sum 5e-8), enough for the model zoo's replay to flag ResNet-18; sums of means are
    compensated now."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, 32, 32, generator=g) * 3 + 5
    exact = x.double().mean((0, 2, 3))
    errors = {}
    for device in ["cpu", "tpu"]:
        stats = torch.native_batch_norm(x.to(device), None, None, torch.zeros(64, device=device),
                                        torch.ones(64, device=device), True, 0.1, 1e-5)
        errors[device] = ((stats[1].cpu().double() - exact).abs().max() / exact.abs().max()).item()
    assert errors["tpu"] <= 2 * errors["cpu"] + 1e-8, errors


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_interpolation_rounds_as_cpu(dtype, no_fallbacks):
    """bfloat16/float16 resizing computed in bfloat16 (linear, trilinear) or with float64 weights
    differed from CPU by an ulp in up to half the pixels. CPU computes in float32 and rounds once,
    with its 1-D/3-D linear and its bicubic weights first rounded to the input's dtype: now equal."""
    g = torch.Generator().manual_seed(0)
    cases = [("linear", (2, 3, 5), (9,)), ("linear", (2, 3, 9), (4,)), ("bilinear", (1, 2, 8, 9), (3, 5)),
             ("bilinear", (1, 2, 4, 5), (7, 3)), ("bicubic", (2, 3, 6, 6), (9, 11)), ("trilinear", (1, 2, 3, 4, 5), (4, 2, 6))]
    for mode, shape, size in cases:
        for align_corners in (False, True):
            x = torch.randn(*shape, generator=g).to(dtype)
            expected = F.interpolate(x, size=size, mode=mode, align_corners=align_corners)
            actual = F.interpolate(x.to("tpu"), size=size, mode=mode, align_corners=align_corners)
            # one float16 bicubic pixel in 594 differs by an ulp (CPU sums its taps in another order)
            ulp = dtype == torch.float16 and mode == "bicubic"
            torch.testing.assert_close(actual.cpu(), expected, rtol=1e-3 if ulp else 0, atol=0, msg=f"{mode} {align_corners}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_grid_sampling_rounds_as_cpu(dtype, no_fallbacks):
    """CPU's bfloat16/float16 grid sampling rounds every step (coordinates, weights, each product
    and sum; bicubic row by row) to the dtype; computed in float32 and rounded once, up to 70 % of
    the outputs were an ulp or more off. float16 also needs its roundings to survive XLA's CPU
    compiler, which fused a product and a sum into one FMA."""
    g = torch.Generator().manual_seed(0)
    modes = [("bilinear", 4), ("nearest", 4), ("bicubic", 4), ("bilinear", 5), ("nearest", 5)]
    for (mode, rank), padding, align in itertools.product(modes, ["zeros", "border", "reflection"], [False, True]):
        x = torch.randn(2, 3, *(7, 9, 6)[: rank - 2], generator=g).to(dtype)
        grid = (torch.rand(2, *(5, 4, 3)[: rank - 2], rank - 2, generator=g) * 2.4 - 1.2).to(dtype)
        expected = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
        actual = F.grid_sample(x.to("tpu"), grid.to("tpu"), mode=mode, padding_mode=padding, align_corners=align)
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, msg=f"{mode} {rank}-d {padding} {align}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_cross_and_linspace_round_each_step_as_cpu(dtype, no_fallbacks):
    """CPU's float16 cross product and linspace round each product and sum to float16; computed in
    float16 by XLA's CPU code, a product and a sum became one FMA on CPUs with AVX512-FP16 (one
    rounding): 1 in 15 cross products and 6 of 50 linspace points were an ulp off."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 3, generator=g).to(dtype) for _ in range(2))
    torch.testing.assert_close(torch.linalg.cross(a.to("tpu"), b.to("tpu")).cpu(), torch.linalg.cross(a, b), rtol=0, atol=0)
    # products and differences that overflow, underflow into subnormals, or meet inf and NaN
    scale = torch.tensor([1e-4, 1e-3, 1.0, 300.0, 6e4, float("inf"), float("nan")])
    a, b = ((torch.randn(512, 3, generator=g) * scale[torch.randint(7, (512, 1), generator=g)]).to(dtype) for _ in range(2))
    torch.testing.assert_close(torch.linalg.cross(a.to("tpu"), b.to("tpu")).cpu(), torch.linalg.cross(a, b),
                               rtol=0, atol=0, equal_nan=True)
    for start, end, steps in [(-2.0, 1, 50), (4.3, -3, 50), (0.1, 1000, 3000)]:
        expected = torch.linspace(start, end, steps, dtype=dtype)
        torch.testing.assert_close(torch.linspace(start, end, steps, dtype=dtype, device="tpu").cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_logit_rounds_each_step_as_cpu(dtype, no_fallbacks):
    """CPU's bfloat16/float16 logit rounds eps, 1 - z and z / (1 - z) to the dtype; computed in
    float32 and rounded once, a quarter to half of the outputs were an ulp off."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2000, generator=g).to(dtype)
    for eps in [None, 0.2, 1e-6]:
        torch.testing.assert_close(torch.logit(x.to("tpu"), eps).cpu(), torch.logit(x, eps), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_histc_bins_as_cpu(dtype, no_fallbacks):
    """CPU computes a bfloat16/float16 element's bin in that dtype, rounding each step; in float32,
    elements within rounding of a bin edge were counted in the neighbouring bin (16 of 96 OpInfo
    samples). Counts stay below 256: CPU's bfloat16 counts stop growing there (per thread)."""
    g = torch.Generator().manual_seed(0)
    for bins, lo, hi in [(100, 0, 0), (37, -2.5, 3.1), (7, 0, 0), (300, -1, 1)]:
        x = (torch.randn(20, 20, generator=g) * 2).to(dtype)
        torch.testing.assert_close(torch.histc(x.to("tpu"), bins, lo, hi).cpu(), torch.histc(x, bins, lo, hi), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_convolution_adds_bias_before_rounding(dtype, no_fallbacks):
    """A bfloat16 convolution was rounded before its bias was added (an ulp off in a quarter of
    the outputs); CPU adds the bias in float32 and rounds once. Transposed ones included."""
    # float16: CPU's oneDNN sums in an order that depends on the host's ISA; where a float32 sum
    # order tips a tie, one output is an ulp apart
    rtol = 0 if dtype == torch.bfloat16 else 1e-3
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((2, 4, 6, 6), (5, 4, 3, 3), (5,)))
    wt = torch.randn(4, 3, 3, 3, generator=g).to(dtype)
    convs = [lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: F.conv1d(x[..., 0], w[..., 0], b),
             lambda x, w, b: F.conv_transpose2d(x, wt.to(x.device, x.dtype), b[:3], stride=2)]
    # oneDNN takes float16 only on a host with native float16 (AVX512-FP16, AMX-FP16); elsewhere
    # (in PyTorch 2.11 as in 2.14) CPU's float16 transposed convolution is its slow kernel, which
    # rounds each partial product to float16, sums them in float16 and adds the bias last (an ulp
    # off in 40% of these outputs, farther from float64). There the reference is what oneDNN
    # computes: the float32 convolution of the same values, rounded once.
    slow = torch._C._select_conv_backend(x, wt, b[:3], [2, 2], [0, 0], [1, 1], True, [0, 0], 1, None)
    sums_in_float16 = [False, False, slow == torch._C._ConvBackend.SlowTranspose2d]
    for conv, in_float16 in zip(convs, sums_in_float16):
        expected = conv(x.float(), w.float(), b.float()).to(dtype) if in_float16 else conv(x, w, b)
        torch.testing.assert_close(conv(x.to("tpu"), w.to("tpu"), b.to("tpu")).cpu(), expected, rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_addbmm_rounds_each_batch_as_cpu(dtype, no_fallbacks):
    """CPU's addbmm adds one batch product at a time and rounds the running sum each time (one
    contraction rounded once was an ulp off in a third of a bfloat16 result)."""
    g = torch.Generator().manual_seed(0)
    s, a, b = torch.randn(5, 6, generator=g), torch.randn(4, 5, 7, generator=g), torch.randn(4, 7, 6, generator=g)
    for beta, alpha in [(1, 1), (0.5, 0.3), (0, 2)]:
        args = [t.to(dtype) for t in (s, a, b)]
        expected = torch.addbmm(*args, beta=beta, alpha=alpha)
        actual = torch.addbmm(*[t.to("tpu") for t in args], beta=beta, alpha=alpha)
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_scalars_keep_their_value_as_on_cpu(dtype, no_fallbacks):
    """x * 6.28, x / 6.28, leaky_relu's and rrelu's slopes: CPU (and CUDA) use the Scalar at its
    float32 value and round the result once; rounding the Scalar to the tensor's dtype first put
    up to 45% of a float16 product an ulp off. Division with a rounding mode as CPU's: floor in
    float32, trunc of the quotient rounded to the dtype unless the divisor is one element."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4000, generator=g) * 3).to(dtype)
    ops = {"mul": lambda a: a * 6.283185307, "rmul": lambda a: 6.283185307 * a, "div": lambda a: a / 6.283185307,
           "div_": lambda a: a.clone().div_(0.3331), "0-d tensor": lambda a: a * torch.tensor(0.3331),
           "floor": lambda a: torch.div(a, 0.3331, rounding_mode="floor"),
           "trunc": lambda a: torch.div(a, 0.3331, rounding_mode="trunc"),
           "trunc by a tensor": lambda a: torch.div(a, a.flip(0).abs() + 0.2, rounding_mode="trunc"),
           "floor by a tensor": lambda a: torch.div(a, a.flip(0).abs() + 0.2, rounding_mode="floor"),
           "leaky_relu": lambda a: F.leaky_relu(a, 0.3331), "rrelu": lambda a: F.rrelu(a, 0.1, 0.3, training=False)}
    for name, op in ops.items():
        torch.testing.assert_close(op(x.to("tpu")).cpu(), op(x), rtol=0, atol=0, msg=name)
    xg, tg = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    F.leaky_relu(xg, 0.3331).sum().backward()
    F.leaky_relu(tg, 0.3331).sum().backward()
    torch.testing.assert_close(tg.grad.cpu(), xg.grad, rtol=0, atol=0)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_accurate_in_the_negative_tail(approximate, no_fallbacks):
    """GELU's CDF as erfc(-x / sqrt 2) / 2 (tanh form: sigmoid(2u)), not 1 + erf(...), which
    cancels below x = -3 (float32 GELU(-6.3) was -6e-7 for -7e-10). Against the same formulas in
    float64 written without cancellation; in bfloat16/float16 at least as close to them as CPU."""
    x = torch.cat([torch.linspace(-12, 4, 2001), torch.tensor([-6.34375, -3.376953125])])

    def exact(x):
        x = x.double()
        if approximate == "tanh":
            u = 0.7978845608028654 * (x + 0.044715 * x ** 3)
            return x * torch.sigmoid(2 * u)
        return x * 0.5 * torch.special.erfc(-x / 2 ** 0.5)

    got = F.gelu(x.to("tpu"), approximate=approximate).cpu().double()
    # relative to the value down to where results go subnormal (XLA flushes those to 0)
    torch.testing.assert_close(got, exact(x), rtol=5e-5, atol=1e-36)
    xt = x.to("tpu").requires_grad_()
    F.gelu(xt, approximate=approximate).sum().backward()
    xd = x.double().requires_grad_()
    exact(xd).sum().backward()
    # the derivative crosses 0 near x = -0.75, where its terms of size ~0.2 cancel
    torch.testing.assert_close(xt.grad.cpu().double(), xd.grad, rtol=5e-5, atol=1e-7)
    for dtype in (torch.bfloat16, torch.float16):
        low = x.to(dtype)
        ours, cpus = F.gelu(low.to("tpu"), approximate=approximate).cpu(), F.gelu(low, approximate=approximate)
        truth = exact(low)
        assert ((ours.double() - truth).abs() <= (cpus.double() - truth).abs()).all(), dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_nll_loss_sums_in_float32(dtype, no_fallbacks):
    """A bfloat16/float16 nll_loss's sum and total weight accumulate in float32 and round once,
    as CUDA's kernel does (summed in the input's dtype, a weighted bfloat16 mean was 3% off; CPU
    folds in bfloat16 too, less far off)."""
    g = torch.Generator().manual_seed(0)
    for shape, target_shape in [((37, 5), (37,)), ((2, 5, 3, 3), (2, 3, 3)), ((5,), ())]:
        x = torch.randn(*shape, generator=g).mul(4).to(dtype)
        t = torch.randint(0, 5, target_shape, generator=g)
        w = torch.rand(5, generator=g).mul(9).to(dtype)
        for kwargs in [dict(weight=w), dict(weight=w, ignore_index=2), {}]:
            for reduction in ["sum", "mean"]:
                run = lambda x, t, **kw: F.nll_loss(x, t, reduction=reduction, **kw)
                once = run(x.float(), t, **{k: v.float() if k == "weight" else v for k, v in kwargs.items()})
                actual = run(x.to("tpu"), t.to("tpu"), **{k: v.to("tpu") if k == "weight" else v for k, v in kwargs.items()})
                torch.testing.assert_close(actual.cpu().float(), once.to(dtype).float(), rtol=torch.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_log_softmax_rounds_as_cpu(dtype, no_fallbacks):
    """CPU's last-dimension log_softmax keeps the sum of exponentials and its log in the input's
    dtype; computing both in float32 was an ulp off in one output in seven."""
    g = torch.Generator().manual_seed(0)
    for shape, dim in [((5, 7), 1), ((5, 7), 0), ((20,), 0), ((8, 33), 1)]:
        x = torch.randn(*shape, generator=g).to(dtype)
        torch.testing.assert_close(torch.log_softmax(x.to("tpu"), dim).cpu(), torch.log_softmax(x, dim), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_segment_sums_fold_as_cpu(dtype, no_fallbacks):
    """CPU folds a bfloat16 segment's sum or product one element at a time in bfloat16; summed in
    float32 and rounded once, a quarter of the sums differed."""
    g = torch.Generator().manual_seed(0)
    data = torch.randn(12, 3, generator=g).to(dtype)
    lengths = torch.tensor([3, 0, 4, 5])
    for reduce in ["sum", "mean", "prod"]:
        for initial in [None, 0.5]:
            expected = torch.segment_reduce(data, reduce, lengths=lengths, initial=initial)
            actual = torch.segment_reduce(data.to("tpu"), reduce, lengths=lengths.to("tpu"), initial=initial)
            torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True, msg=f"{reduce} {initial}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_adaptive_avg_pool3d_folds_as_cpu(dtype, no_fallbacks):
    """CPU's 3-D adaptive average of bfloat16 sums each window in bfloat16 one element at a time and
    divides by depth, height and width in turn; averaged in float32 half the outputs differed."""
    g = torch.Generator().manual_seed(0)
    for shape, size in [((1, 2, 4, 5, 6), (3, 3, 2)), ((2, 3, 7, 5, 9), (3, 4, 5)), ((3, 4, 5, 6), (2, 3, 4))]:
        x = torch.randn(*shape, generator=g).to(dtype)
        expected = F.adaptive_avg_pool3d(x, size)
        torch.testing.assert_close(F.adaptive_avg_pool3d(x.to("tpu"), size).cpu(), expected, rtol=0, atol=0)


def test_adaptive_avg_pool3d_backward_out_form_runs_on_the_device(no_fallbacks):
    """Its registration misspelled the out= form's name (a leading underscore), so it ran on the
    CPU; install now rejects a registered name that is no ATen op."""
    assert "adaptive_avg_pool3d_backward.grad_input" in torchtpu._C._lowered_ops()
    g = torch.Generator().manual_seed(0)
    grad, x = torch.randn(2, 3, 2, 3, 2, generator=g), torch.randn(2, 3, 4, 5, 6, generator=g)
    expected = torch.ops.aten.adaptive_avg_pool3d_backward.grad_input(grad, x, grad_input=torch.empty(0))
    out = torch.empty(0, device="tpu")
    actual = torch.ops.aten.adaptive_avg_pool3d_backward.grad_input(grad.to("tpu"), x.to("tpu"), grad_input=out)
    assert actual is out
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-6, atol=1e-6)


def test_logit_with_crossed_bounds_clamps_in_cpus_order(no_fallbacks):
    """eps > 0.5 makes [eps, 1 - eps] empty: CPU gives eps below eps and 1 - eps above it, where a
    clamp gave 1 - eps everywhere (found by the padded OpInfo run)."""
    x = torch.rand(5, 5, 5, generator=torch.Generator().manual_seed(0))
    for eps in [0.6, 0.2, None]:
        torch.testing.assert_close(torch.logit(x.to("tpu"), eps).cpu(), torch.logit(x, eps))


def test_a_lowered_op_has_one_record_with_its_padding_rule_and_cpu_refusals():
    """Issue 48, item 3: what the registry knows of an op is one record, the same for its in-place
    and out= forms: the dtypes CPU refuses are declared next to the lowering (refuse_on_cpu)."""
    for form in ["abs", "abs_", "abs.out"]:
        refusals = torchtpu._C._lowering_record(form)["cpu_refusals"]
        assert {"dtypes": "bool", "error": "abs_cpu", "overload": None} in refusals
    with pytest.raises(NotImplementedError, match="abs_cpu"):
        torch.tensor([True, False], device="tpu").abs()
    max_all = torchtpu._C._lowering_record("max")["cpu_refusals"]
    assert {"dtypes": "complex", "error": "max_all", "overload": ""} in max_all
    assert torchtpu._C._lowering_record("add.Tensor")["padding"]["fill"] == "zero"
    cat = torchtpu._C._lowering_record("cat")["padding"]
    assert cat["seeds"] and cat["needs_sizes"] and cat["results_in_buckets"]
    assert torchtpu._C._lowering_record("mm")["matmul"]
    assert torchtpu._C._lowering_record("mm")["padding"]["by_rows"] and not cat["by_rows"]
    assert torchtpu._C._lowering_record("gelu")["padding"]["by_rows"]
    with pytest.raises(KeyError, match="no_such_op"):
        torchtpu._C._lowering_record("no_such_op")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rrelu_draws_a_slope_per_negative_element_and_trains(dtype, no_fallbacks):
    """nn.RReLU: in training, each negative x is scaled by its own slope in [lower, upper), the
    gradient is that slope; in eval it is CPU's leaky_relu with the mean slope."""
    lower, upper = 0.1, 0.3
    x = torch.linspace(-3, 3, 4096, dtype=torch.float64).to(dtype)
    x_dev = x.to("tpu").requires_grad_()
    torch.manual_seed(0)
    y = F.rrelu(x_dev, lower, upper, training=True)
    y.sum().backward()
    y, grad = y.detach().cpu(), x_dev.grad.cpu()
    negative = x < 0
    slope = (y[negative].double() / x[negative].double())
    assert slope.min() >= lower - 1e-2 and slope.max() <= upper + 1e-2
    assert abs(slope.mean().item() - (lower + upper) / 2) < 0.01  # uniform: the mean slope
    assert slope.std() > 0.05  # one draw per element, not one slope for all
    torch.testing.assert_close(y[~negative], x[~negative])
    torch.testing.assert_close(grad[negative].double(), slope, atol=1e-2, rtol=1e-2)
    assert (grad[~negative] == 1).all()
    torch.manual_seed(0)
    torch.testing.assert_close(F.rrelu(x.to("tpu"), lower, upper, training=True).cpu(), y, atol=0, rtol=0)

    eval_dev = F.rrelu(x.to("tpu"), lower, upper, training=False).cpu()
    torch.testing.assert_close(eval_dev, F.rrelu(x, lower, upper, training=False))
    in_place = x.to("tpu")
    F.rrelu(in_place, lower, upper, training=True, inplace=True)
    assert ((in_place.cpu()[negative] / x[negative]) <= upper + 1e-2).all()


def test_int8_matmul_sums_exactly_in_int32(no_fallbacks):
    """torch._int_mm (int8 x int8 -> int32, what int8 weight quantization calls): exact, as on CPU."""
    g = torch.Generator().manual_seed(0)
    for m, k, n in [(17, 32, 8), (32, 64, 48)]:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
        got = torch._int_mm(a.to("tpu"), b.to("tpu")).cpu()
        assert got.dtype == torch.int32
        assert torch.equal(got, torch._int_mm(a, b))
    with pytest.raises(RuntimeError):
        torch._int_mm(a.to("tpu"), a.to("tpu"))  # [32, 64] @ [32, 64]: CPU's shape error


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_int8_weight_only_matmul_matches_cpu(dtype, no_fallbacks):
    """torch._weight_int8pack_mm (int8 weight-only quantized linear layers): x @ w.T * scales."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=g).to(dtype)
    w = torch.randint(-128, 128, (24, 64), dtype=torch.int8, generator=g)
    scales = (torch.rand(24, generator=g) / 64).to(dtype)
    want = torch._weight_int8pack_mm(x, w, scales)
    got = torch._weight_int8pack_mm(x.to("tpu"), w.to("tpu"), scales.to("tpu")).cpu()
    assert got.dtype == dtype
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dims", [2, 3])
def test_fractional_max_pool_matches_cpu_for_the_same_samples(dims, dtype, no_fallbacks):
    """nn.FractionalMaxPool2d/3d: given the same random samples, CPU's windows (its scalar_t
    arithmetic), values, indices (first of tied maxima) and gradients."""
    pool = {2: F.fractional_max_pool2d, 3: F.fractional_max_pool3d}[dims]
    cases = {2: [((2, 3, 9, 11), (2, 3), (4, 5)), ((3, 10, 10), 2, (5, 5)), ((2, 1, 13, 7), 2, (1, 6))],
             3: [((2, 3, 6, 7, 8), (2, 2, 3), (3, 4, 5)), ((2, 5, 5, 5), 2, (2, 3, 3))]}[dims]
    g = torch.Generator().manual_seed(0)
    for shape, kernel, out in cases:
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        x.view(-1)[::7] = x.view(-1)[1::7]  # ties: the first maximum's index
        batch = 1 if x.dim() == dims + 1 else x.size(0)
        samples = torch.rand(batch, x.size(-dims - 1), dims, generator=g, dtype=dtype)
        x_cpu, x_dev = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        want, want_index = pool(x_cpu, kernel, output_size=out, return_indices=True, _random_samples=samples)
        got, got_index = pool(x_dev, kernel, output_size=out, return_indices=True, _random_samples=samples.to("tpu"))
        assert torch.equal(got_index.cpu(), want_index)
        assert torch.equal(got.detach().cpu(), want)
        grad = torch.randn(want.shape, generator=g, dtype=torch.float64).to(dtype)
        want.backward(grad)
        got.backward(grad.to("tpu"))
        torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
    module = torch.nn.FractionalMaxPool2d(2, output_ratio=0.5) if dims == 2 else torch.nn.FractionalMaxPool3d(2, output_ratio=0.5)
    assert module(torch.randn((2, 3) + (8,) * dims, device="tpu", dtype=dtype)).shape == (2, 3) + (4,) * dims


def test_fused_rnn_cells_reject_mismatched_sizes_by_name():
    """PyTorch calls _thnn_fused_{lstm,gru}_cell on tpu (nn.LSTMCell, nn.GRUCell); sizes that do not
    fit are an error naming the op and the sizes (as CUDA's), not a failed program."""
    x = torch.randn(4, 4, device="tpu")
    with pytest.raises(RuntimeError, match=r"_thnn_fused_gru_cell: expected input_gates .* got \[4, 4\]"):
        torch.ops.aten._thnn_fused_gru_cell(x, x, x)
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell: expected biases of size \[8\], got \[5\]"):
        gates = torch.randn(4, 8, device="tpu")
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(4, 2, device="tpu"), torch.randn(5, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_fake_quantization_matches_cpu_bit_for_bit(dtype, no_fallbacks):
    """Quantization-aware training: per-tensor (scale as a number or as tensors, as FakeQuantize
    passes them) and per-channel fake quantization (integer and floating-point zero points), forward
    and the masked gradient, exactly as CPU (halves round to even; values beyond the range clamp and
    get no gradient)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 5, 7, generator=g, dtype=torch.float64) * 3).to(dtype)
    x.view(-1)[:8] = torch.tensor([0.05, 0.15, -0.25, 0.35, 12.7, -13.0, 0.0, 0.45], dtype=dtype)
    scales = torch.rand(5, generator=g) / 5 + 0.01
    zero_points = torch.randint(-5, 5, (5,), generator=g, dtype=torch.int32)
    float_zero_points = torch.rand(5, generator=g) * 9 + 0.5  # in range for both cases below
    cases = [
        lambda t, d: torch.fake_quantize_per_tensor_affine(t, 0.1, 3, 0, 255),
        lambda t, d: torch.fake_quantize_per_tensor_affine(
            t, torch.tensor(0.1, device=d), torch.tensor(3, dtype=torch.int32, device=d), -128, 127),
        lambda t, d: torch.fake_quantize_per_channel_affine(t, scales.to(d), zero_points.to(d), 1, -128, 127),
        # floating-point zero points (torch.ao's float-qparams observers): another formula
        lambda t, d: torch.fake_quantize_per_channel_affine(t, scales.to(d), float_zero_points.to(d), 1, -128, 127),
        lambda t, d: torch.fake_quantize_per_channel_affine(t, scales.to(d), float_zero_points.half().to(d), 1, 0, 15),
    ]
    for quantize in cases:
        x_cpu, x_dev = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        want, got = quantize(x_cpu, "cpu"), quantize(x_dev, "tpu")
        grad = torch.randn(want.shape, generator=g, dtype=torch.float64).to(dtype)
        want.backward(grad)
        got.backward(grad.to("tpu"))
        assert torch.equal(got.detach().cpu(), want.detach())
        assert torch.equal(x_dev.grad.cpu(), x_cpu.grad)
    with pytest.raises(RuntimeError, match="axis"):
        torch.fake_quantize_per_channel_affine(x.to("tpu"), scales.to("tpu"), zero_points.to("tpu"), -2, 0, 255)
    fake_quantize = torch.ao.quantization.FakeQuantize()  # observes, then quantizes with tensor qparams
    data = torch.randn(4, 8, generator=g)
    assert torch.equal(fake_quantize.to("tpu")(data.to("tpu")).cpu(), torch.ao.quantization.FakeQuantize()(data))


def test_fake_quantization_checks_per_channel_zero_points_on_the_device(no_fallbacks):
    """CPU reads integer per-channel zero points to the host to check their range; tpu checks them
    in the program and raises CPU's RuntimeError at the next host sync. Floating-point zero points
    out of range are not an error on CPU, nor on tpu."""
    x, scales = torch.randn(3, 4), torch.full((4,), 0.1)
    zero_points = torch.tensor([0, 3, 300, 2], dtype=torch.int32)  # 300 > quant_max
    message = "`zero_point` must be between `quant_min` and `quant_max`."
    with pytest.raises(RuntimeError, match=message):
        torch.fake_quantize_per_channel_affine(x, scales, zero_points, 1, 0, 255)
    out = torch.fake_quantize_per_channel_affine(x.to("tpu"), scales.to("tpu"), zero_points.to("tpu"), 1, 0, 255)
    with pytest.raises(RuntimeError, match=message):
        out.cpu()
    float_zero_points = zero_points.float()
    want = torch.fake_quantize_per_channel_affine(x, scales, float_zero_points, 1, 0, 255)
    got = torch.fake_quantize_per_channel_affine(x.to("tpu"), scales.to("tpu"), float_zero_points.to("tpu"), 1, 0, 255)
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool, torch.complex64])
def test_compute_linear_combination(dtype, no_fallbacks):
    """_compute_linear_combination (CPU's matrix_exp combines its powers with it) ran on the CPU.
    Complex values are checked against the sum itself: CPU's complex kernel keeps only the first
    term (coefficients [[1, 10]] and inputs [1+1j, 2] give 1+1j)."""
    x, coefficients = (torch.randn(4, 3, 5) * 3).to(dtype), (torch.randn(2, 4) * 3).to(dtype)
    got = torch._compute_linear_combination(x.to("tpu"), coefficients.to("tpu")).cpu()
    if dtype.is_complex:
        expected = torch.einsum("ij,j...->i...", coefficients, x)
    else:
        expected = torch._compute_linear_combination(x, coefficients)
    low = dtype == torch.bfloat16
    torch.testing.assert_close(got, expected, atol=0.1 if low else 1e-5, rtol=0.02 if low else 1e-5)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch._compute_linear_combination(x.to("tpu"), coefficients.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), got, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="do not combine"):
        torch._compute_linear_combination(x.to("tpu"), coefficients[:, :3].to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_weight_norm_trains_as_cpu(dtype, no_fallbacks):
    """nn.utils.parametrizations.weight_norm (wav2vec2's positional convolution, HiFi-GAN) ran
    _weight_norm_interface and its backward on the CPU fallback."""
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    for dim in (0, 2):  # the first and the last dimension take the fused interface
        results = {}
        for device in ("cpu", "tpu"):
            torch.manual_seed(0)
            conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=dim).to(dtype).to(device)
            y = conv(torch.randn(2, 4, 7).to(dtype).to(device))
            y.pow(2).sum().backward()
            weight = conv.parametrizations.weight
            results[device] = [y.detach().cpu(), weight.original0.grad.cpu(), weight.original1.grad.cpu()]
        for actual, expected in zip(results["tpu"], results["cpu"]):
            torch.testing.assert_close(actual, expected, **tol)


def test_every_out_form_of_an_op_with_a_tpu_kernel_runs_on_the_device():
    """An out= form with a CPU kernel whose functional form has a tpu kernel, or is composed of
    other ops, must have a tpu kernel too (they ran on the CPU fallback: div(..., rounding_mode=...,
    out=), xlogy(out=), nonzero(out=), adaptive_avg_pool2d(out=), ...)."""
    def name(s):
        return s.name + ("." + s.overload_name if s.overload_name else "")

    def has_kernel(s, keys=("PrivateUse1",)):
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(name(s), k) for k in keys)

    composite = ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
    not_device_tensors = {"aten::_to_sparse.out", "aten::_to_sparse.sparse_dim_out",  # sparse outs
                          "aten::sspaddmm.out",
                          "aten::_nested_tensor_from_mask.out",  # a nested out
                          "aten::_foreach_max.out",  # a list of outs (_foreach_max has no out= user)
                          "aten::_copy_from.out", "aten::_copy_from_and_resize.out"}  # copy_'s internals
    by_name = {}
    for s in torch._C._jit_get_all_schemas():
        if s.name.startswith("aten::"):
            by_name.setdefault(s.name, []).append(s)
    missing = []
    for schemas in by_name.values():
        functional = {tuple((a.name, str(a.type)) for a in s.arguments): s
                      for s in schemas if not any(a.is_out for a in s.arguments)}
        for s in schemas:
            if not any(a.is_out for a in s.arguments) or name(s) in not_device_tensors:
                continue
            if has_kernel(s) or has_kernel(s, composite) or not has_kernel(s, ("CPU",)):
                continue
            f = functional.get(tuple((a.name, str(a.type)) for a in s.arguments if not a.is_out))
            if f is not None and (has_kernel(f) or has_kernel(f, composite)):
                missing.append(name(s))
    assert missing == []


def test_out_forms_match_cpu(no_fallbacks):
    x = torch.tensor([[0.5, -2.0, 0.0], [3.0, 0.0, -1.5]])
    y = torch.tensor([[2.0, 0.75, -3.0], [-1.0, 4.0, 2.5]])
    cases = [
        lambda a, b, o: torch.div(a, b, rounding_mode="floor", out=o),
        lambda a, b, o: torch.div(a, b, rounding_mode="trunc", out=o),
        lambda a, b, o: torch.xlogy(a, b.abs(), out=o),
        lambda a, b, o: torch.xlogy(a, 2.0, out=o),
        lambda a, b, o: torch.ops.aten.remainder.Scalar_Tensor_out(5.0, b, out=o),
        lambda a, b, o: torch.masked_select(a, a > 0, out=o),
    ]
    for case in cases:
        expected = case(x, y, torch.empty(0))
        got = case(x.to("tpu"), y.to("tpu"), torch.empty(0, device="tpu"))
        torch.testing.assert_close(got.cpu(), expected)
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.nonzero(x.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.nonzero(x))
    counts = torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.bincount.out(torch.tensor([1, 1, 4], device="tpu"), out=counts)
    torch.testing.assert_close(counts.cpu(), torch.tensor([0, 2, 0, 0, 1]))
    image = torch.randn(1, 2, 5, 7)
    pooled = torch.empty(0, device="tpu")
    torch._C._nn.adaptive_avg_pool2d(image.to("tpu"), (2, 3), out=pooled)
    torch.testing.assert_close(pooled.cpu(), torch.nn.functional.adaptive_avg_pool2d(image, (2, 3)))
    gammas = torch.empty(0, device="tpu")
    torch.mvlgamma(x.abs().to("tpu") + 2, 2, out=gammas)
    torch.testing.assert_close(gammas.cpu(), torch.mvlgamma(x.abs() + 2, 2))


@pytest.mark.parametrize("args, dtype", [(a, d) for a in [(0, 5), (0, 5, 0.5), (1.0, 2.0, 0.3), (-3, 7, 2), (5, 0, -1)]
                                          for d in [None, torch.float64, torch.int32]
                                          if d is not torch.int32 or all(isinstance(v, int) for v in a)])
def test_deprecated_range_runs_on_the_device(args, dtype, no_fallbacks):
    """torch.range (the end included) ran on the CPU fallback."""
    got = torch.range(*args, dtype=dtype, device="tpu")
    expected = torch.range(*args, dtype=dtype)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("size", [3, 10, 12])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_randperm_into_out_resizes_as_cpu(size, dtype, no_fallbacks):
    """randperm(out=) raised (no meta kernel for the out= form)."""
    out = torch.empty(size, dtype=dtype, device="tpu")
    assert torch.randperm(10, out=out) is out
    torch.randperm(10, out=torch.empty(size, dtype=dtype))  # CPU accepts the same call
    assert out.shape == (10,) and out.dtype == dtype
    assert sorted(out.cpu().tolist()) == list(range(10))
    generated = torch.empty(0, dtype=dtype, device="tpu")
    torch.randperm(7, generator=torch.Generator("tpu").manual_seed(1), out=generated)
    assert sorted(generated.cpu().tolist()) == list(range(7))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_forward_mode_glu_as_cpu(dtype, no_fallbacks):
    """torch.func.jvp through F.glu ran glu_jvp on the CPU fallback. CPU's kernel refuses bfloat16
    (CUDA's takes it, computing in float32 from the forward's rounded result, as tpu's does): there
    the reference is that formula on the CPU in float32, rounded once."""
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    for dim in (-1, 0):
        glu = functools.partial(F.glu, dim=dim)
        value, tangent = torch.func.jvp(glu, (x.to(dtype).to("tpu"),), (t.to(dtype).to("tpu"),))
        if dtype == torch.bfloat16:
            (a, b), (da, db) = x.to(dtype).float().chunk(2, dim), t.to(dtype).float().chunk(2, dim)
            gate = torch.sigmoid(b)
            forward = (a * gate).to(dtype)
            expected = forward, (da * gate + forward.float() * (1 - gate) * db).to(dtype)
        else:
            expected = torch.func.jvp(glu, (x.to(dtype),), (t.to(dtype),))
        torch.testing.assert_close(value.cpu(), expected[0])
        torch.testing.assert_close(tangent.cpu(), expected[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_fused_add_relu_runs_on_the_device(dtype, no_fallbacks):
    """torch._VF._add_relu (what fusing passes make of add + relu) ran on the CPU fallback."""
    a, b = (torch.randn(4, 5) * 10).to(dtype), (torch.randn(4, 5) * 10).to(dtype)
    a[0, 0] = b[0, 0] = float("nan") if dtype.is_floating_point else 0
    expected = torch._VF._add_relu(a, b, alpha=2)
    torch.testing.assert_close(torch._VF._add_relu(a.to("tpu"), b.to("tpu"), alpha=2).cpu(), expected, equal_nan=True)
    torch.testing.assert_close(torch._VF._add_relu(a.to("tpu"), 3).cpu(), torch._VF._add_relu(a, 3), equal_nan=True)
    in_place = a.to("tpu")
    torch._VF._add_relu_(in_place, b.to("tpu"), alpha=2)
    torch.testing.assert_close(in_place.cpu(), expected, equal_nan=True)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch._VF._add_relu(a.to("tpu"), b.to("tpu"), alpha=2, out=out)
    torch.testing.assert_close(out.cpu(), expected, equal_nan=True)

