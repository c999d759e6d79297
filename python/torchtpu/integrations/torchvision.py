"""torchvision's custom ops on the tpu device, in Python, from ATen ops that have tpu lowerings.

``torchvision::roi_align``, ``torchvision::_roi_align_backward`` and ``torchvision::nms`` get
``PrivateUse1`` kernels (the dispatch key of the tpu device) through ``torch.library``. torchvision
registers its own ``Autograd`` kernel for ``roi_align``, which redispatches the forward below
autograd (to the kernel here) and calls ``_roi_align_backward`` for the gradient (the kernel here
too), so only the two device kernels are needed and autograd works as on CPU and CUDA.

The kernels are registered without importing torchvision (that costs a second or more): the
dispatcher accepts an implementation for an operator whose schema is not defined yet and attaches
it when torchvision's C++ library defines ``torchvision::*``. Without torchvision installed the
registrations are never used.

Semantics are those of torchvision's CPU kernels:

- ``roi_align``: bilinear sampling on a ``sampling_ratio`` x ``sampling_ratio`` grid per bin, or,
  when ``sampling_ratio <= 0``, on an adaptive ``ceil(roi_size / pooled_size)`` grid per roi; the
  largest adaptive grid is read back to the host once (one small sync) and smaller grids are masked.
  Sample points are computed exactly as on CPU; gathers replace the CPU's pointer arithmetic and
  only the order of the final sums differs.
- ``_roi_align_backward``: the same sample points and weights, scattered with
  ``index_put_(accumulate=True)``.
- ``nms``: the IoU suppression matrix (computed as the CPU kernel does, with the float threshold
  that makes ``iou > threshold`` decide exactly as the CPU's double compare) runs on the device and
  comes back bit-packed (``K * K / 8`` bytes), with the scores (``K`` values); the scores are
  sorted on the host with the CPU kernel's own (stable) sort, so equal scores keep the CPU's order,
  and the greedy scan runs on the host as in torchvision's CUDA kernel. The kept indices go back
  to the device.
"""

import numpy as np
import torch

_lib = None

# Elements of one gathered (rois, pooled_h, grid_h, pooled_w, grid_w, channels) block; larger
# sampling grids are processed in slices of grid rows.
_GATHER_BUDGET = 1 << 25


def _sample_axis(start, bin_size, grid, grid_max, pooled, size, dtype):
    """Sample coordinates along one axis, as the CPU kernel computes them.

    start, bin_size: (R,); grid: (R,) int64 grid size per roi (or a Python int).
    Returns valid (R, pooled, G) bool, low/high (R, pooled, G) int64, l/h weights (R, pooled, G).
    """
    dev = start.device
    p = torch.arange(pooled, device=dev, dtype=dtype).view(1, -1, 1)
    i = torch.arange(grid_max, device=dev, dtype=dtype).view(1, 1, -1)
    if isinstance(grid, int):
        g = torch.tensor(float(grid), device=dev, dtype=dtype)
        in_grid = None
    else:
        g = grid.to(dtype).view(-1, 1, 1)
        in_grid = torch.arange(grid_max, device=dev).view(1, 1, -1) < grid.view(-1, 1, 1)
    b = bin_size.view(-1, 1, 1)
    # yy = roi_start + p * bin_size + (iy + .5) * bin_size / grid
    c = start.view(-1, 1, 1) + p * b + (i + 0.5) * b / g
    valid = (c >= -1.0) & (c <= size)
    if in_grid is not None:
        valid = valid & in_grid
    c = c.clamp(0, size)  # c <= 0 -> 0 as on CPU; the upper clamp keeps invalid points in range
    low = c.to(torch.int64)  # truncation, c >= 0
    edge = low >= size - 1
    low = torch.where(edge, torch.full_like(low, size - 1), low)
    high = torch.where(edge, low, low + 1)
    c = torch.where(edge, low.to(dtype), c)
    lw = c - low.to(dtype)
    hw = 1.0 - lw
    zero = torch.zeros((), device=dev, dtype=dtype)
    return valid, low, high, torch.where(valid, lw, zero), torch.where(valid, hw, zero)


def _geometry(rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned, height, width,
              dtype):
    """Per-roi sample indices and weights shared by the forward and the backward."""
    r = rois.to(dtype)
    offset = 0.5 if aligned else 0.0
    x1 = r[:, 1] * spatial_scale - offset
    y1 = r[:, 2] * spatial_scale - offset
    x2 = r[:, 3] * spatial_scale - offset
    y2 = r[:, 4] * spatial_scale - offset
    roi_w = x2 - x1
    roi_h = y2 - y1
    if not aligned:
        roi_w = roi_w.clamp_min(1.0)
        roi_h = roi_h.clamp_min(1.0)
    bin_h = roi_h / pooled_h
    bin_w = roi_w / pooled_w
    if sampling_ratio > 0:
        grid_h = grid_w = gmax_h = gmax_w = int(sampling_ratio)
        count = torch.tensor(float(max(grid_h * grid_w, 1)), device=rois.device, dtype=dtype)
    else:
        grid_h = torch.ceil(roi_h / pooled_h).to(torch.int64)
        grid_w = torch.ceil(roi_w / pooled_w).to(torch.int64)
        # The one data-dependent size: the largest grid, read back once.
        gmax_h, gmax_w = torch.stack([grid_h.max(), grid_w.max()]).clamp_min(0).tolist()
        count = (grid_h * grid_w).clamp_min(1).to(dtype)
    ys = _sample_axis(y1, bin_h, grid_h, gmax_h, pooled_h, height, dtype)
    xs = _sample_axis(x1, bin_w, grid_w, gmax_w, pooled_w, width, dtype)
    batch = r[:, 0].to(torch.int64) * (height * width)
    return ys, xs, batch, count, gmax_h


def _corners(ys, xs, batch, width, rows):
    """(index, weight) of the four bilinear corners for the grid rows ``rows`` (a slice):
    index (R, ph, g, pw, Gw) into the flattened (N*H*W) positions, weight of the same shape."""
    _, y_low, y_high, ly, hy = (t[:, :, rows] for t in ys)
    _, x_low, x_high, lx, hx = xs
    out = []
    for yi, wy in ((y_low, hy), (y_high, ly)):
        for xi, wx in ((x_low, hx), (x_high, lx)):
            idx = (batch.view(-1, 1, 1, 1, 1) + (yi * width).unsqueeze(-1).unsqueeze(-1)
                   + xi.unsqueeze(1).unsqueeze(1))
            w = wy.unsqueeze(-1).unsqueeze(-1) * wx.unsqueeze(1).unsqueeze(1)  # hy*hx, hy*lx, ...
            out.append((idx, w))
    return out


def _row_slices(n_rois, channels, pooled_h, pooled_w, gmax_h, gmax_w):
    per_row = max(1, n_rois * channels * pooled_h * pooled_w * gmax_w)
    step = max(1, min(gmax_h, _GATHER_BUDGET // per_row))
    return [slice(s, min(s + step, gmax_h)) for s in range(0, gmax_h, step)]


def roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    n, c, h, w = input.shape
    k = rois.shape[0]
    if k == 0 or input.numel() == 0:
        return input.new_zeros((k, c, pooled_height, pooled_width))
    dtype = input.dtype
    ys, xs, batch, count, gmax_h = _geometry(rois, spatial_scale, pooled_height, pooled_width,
                                             sampling_ratio, aligned, h, w, dtype)
    gmax_w = xs[1].shape[-1]
    if gmax_h == 0 or gmax_w == 0:
        return input.new_zeros((k, c, pooled_height, pooled_width))
    flat = input.permute(0, 2, 3, 1).reshape(n * h * w, c)  # NHWC rows: one gather per sample
    total = None
    for rows in _row_slices(k, c, pooled_height, pooled_width, gmax_h, gmax_w):
        acc = None
        for idx, wt in _corners(ys, xs, batch, w, rows):
            v = torch.index_select(flat, 0, idx.reshape(-1)).view(*idx.shape, c)
            term = wt.unsqueeze(-1) * v
            acc = term if acc is None else acc + term
        part = acc.sum(dim=(2, 4))  # (R, ph, pw, C)
        total = part if total is None else total + part
    if count.dim() > 0:
        count = count.view(-1, 1, 1, 1)
    out = total / count
    return out.permute(0, 3, 1, 2).contiguous()


def _roi_align_backward(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size,
                        channels, height, width, sampling_ratio, aligned):
    dtype = grad.dtype
    grad_in = grad.new_zeros((batch_size * height * width, channels))
    k = rois.shape[0]
    if k > 0 and grad_in.numel() > 0:
        ys, xs, batch, count, gmax_h = _geometry(rois, spatial_scale, pooled_height, pooled_width,
                                                 sampling_ratio, aligned, height, width, dtype)
        gmax_w = xs[1].shape[-1]
        if count.dim() > 0:
            count = count.view(-1, 1, 1, 1)
        g = (grad.permute(0, 2, 3, 1) / count).unsqueeze(2).unsqueeze(4)  # (R, ph, 1, pw, 1, C)
        for rows in _row_slices(k, channels, pooled_height, pooled_width, gmax_h, gmax_w):
            for idx, wt in _corners(ys, xs, batch, width, rows):
                contrib = wt.unsqueeze(-1) * g
                grad_in.index_put_((idx.reshape(-1),), contrib.reshape(-1, channels),
                                   accumulate=True)
    return grad_in.view(batch_size, height, width, channels).permute(0, 3, 1, 2).contiguous()


def _float_threshold(threshold, dtype):
    """A threshold t in ``dtype`` such that ``iou > t`` (in ``dtype``) decides as the CPU kernel's
    ``iou > threshold`` with ``threshold`` a double."""
    if dtype == torch.float64:
        return float(threshold)
    np_dtype = {torch.float32: np.float32, torch.float16: np.float16}.get(dtype)
    if np_dtype is None:
        return float(threshold)
    t = np_dtype(threshold)
    if float(t) > threshold:  # rounded up: values equal to t are above threshold
        t = np.nextafter(t, np_dtype(-np.inf))
    return float(t)


def nms(dets, scores, iou_threshold):
    torch._check(dets.dim() == 2 and dets.size(1) == 4, lambda: "boxes should be a (N, 4) tensor")
    torch._check(scores.dim() == 1 and scores.size(0) == dets.size(0),
                 lambda: "scores should be a 1d tensor with as many entries as boxes")
    torch._check(dets.dtype == scores.dtype, lambda: "boxes and scores should have the same type")
    k = dets.size(0)
    if k == 0:
        return torch.empty(0, dtype=torch.int64, device=dets.device)
    x1, y1, x2, y2 = dets.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    xx1 = torch.maximum(x1.view(-1, 1), x1.view(1, -1))
    yy1 = torch.maximum(y1.view(-1, 1), y1.view(1, -1))
    xx2 = torch.minimum(x2.view(-1, 1), x2.view(1, -1))
    yy2 = torch.minimum(y2.view(-1, 1), y2.view(1, -1))
    inter = (xx2 - xx1).clamp_min(0) * (yy2 - yy1).clamp_min(0)
    iou = inter / (area.view(-1, 1) + area.view(1, -1) - inter)  # symmetric, as the CPU's i/j
    over = iou > _float_threshold(iou_threshold, iou.dtype)
    # Bit-pack the rows (8 columns a byte, most significant first) for the copy to the host.
    kp = (k + 7) // 8 * 8
    if kp != k:
        over = torch.nn.functional.pad(over, (0, kp - k))
    bits = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.int32, device=dets.device)
    packed = (over.view(k, kp // 8, 8).to(torch.int32) * bits).sum(-1).to(torch.uint8)
    host_scores = scores.cpu()
    suppress = np.unpackbits(packed.cpu().numpy(), axis=1)[:, :k].astype(bool)
    order = host_scores.sort(stable=True, dim=0, descending=True)[1].numpy()  # the CPU kernel's
    removed = np.zeros(k, dtype=bool)
    keep = []
    for i in order:
        if not removed[i]:
            keep.append(i)
            # Rows are symmetric: boxes earlier in the order that overlap i are kept ones (then i
            # would have been removed) or already removed, so or-ing the whole row is exact.
            removed |= suppress[i]
    return torch.tensor(keep, dtype=torch.int64).to(dets.device)


def register() -> None:
    """Registers the tpu kernels; idempotent. torchvision need not be imported (or installed)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("torchvision", "IMPL")
    lib.impl("roi_align", roi_align, "PrivateUse1")
    lib.impl("_roi_align_backward", _roi_align_backward, "PrivateUse1")
    lib.impl("nms", nms, "PrivateUse1")
    _lib = lib
