"""torchvision's roi_align (forward and backward) and nms run on tpu, not on the CPU, and agree
with torchvision's CPU kernels (python/torchtpu/integrations/torchvision.py)."""

import pytest
import torch

import torchtpu

torchvision = pytest.importorskip("torchvision")
from torchvision.ops import batched_nms, nms, roi_align  # noqa: E402

from torchtpu.integrations import torchvision as tv_tpu  # noqa: E402

TPU = "tpu"

# (batch index, x1, y1, x2, y2) in input coordinates (spatial_scale 1); scaled per test.
ROIS = [
    [0, 1.0, 1.0, 6.0, 7.0],        # inside
    [1, -3.0, -2.0, 14.0, 9.0],     # overhangs the top-left
    [0, 2.2, 3.1, 2.5, 3.3],        # smaller than a pixel
    [1, 8.0, 8.0, 30.0, 30.0],      # overhangs the bottom-right
    [0, -20.0, -20.0, -15.0, -12.0],  # entirely outside: zeros
    [1, 5.0, 4.0, 5.0, 4.0],        # degenerate (zero size)
    [0, 0.0, 0.0, 11.9, 9.9],       # the whole image
]


@pytest.fixture(autouse=True)
def _no_fallbacks():
    torchtpu.metrics.reset()
    yield
    assert torchtpu.metrics.cpu_fallbacks() == {}


def _roi_align_both(x, rois, scale, out_size, sampling_ratio, aligned):
    torch.manual_seed(1)
    xc = x.clone().requires_grad_()
    xt = x.to(TPU).requires_grad_()
    oc = roi_align(xc, rois, out_size, scale, sampling_ratio, aligned)
    ot = roi_align(xt, rois.to(TPU), out_size, scale, sampling_ratio, aligned)
    g = torch.randn_like(oc)
    oc.backward(g)
    ot.backward(g.to(TPU))
    assert ot.device.type == TPU and xt.grad.device.type == TPU
    torch.testing.assert_close(ot.cpu(), oc, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 1, 2, 3])
def test_roi_align_forward_backward(aligned, sampling_ratio):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 10, 12)
    rois = torch.tensor(ROIS)
    rois[:, 1:] *= 0.6  # feature map at 0.6 of the image: spatial_scale is not a power of 2
    _roi_align_both(x, rois, 1 / 0.6, (4, 3), sampling_ratio, aligned)


def test_roi_align_empty_rois():
    x = torch.randn(2, 3, 8, 8)
    _roi_align_both(x, torch.zeros(0, 5), 1.0, (2, 2), 2, False)
    _roi_align_both(x, torch.zeros(0, 5), 1.0, (2, 2), 0, True)


def test_roi_align_list_of_boxes_and_sliced_grid(monkeypatch):
    # large adaptive grids, processed a few grid rows at a time; boxes given per image as a list
    monkeypatch.setattr(tv_tpu, "_GATHER_BUDGET", 2000)
    torch.manual_seed(0)
    x = torch.randn(2, 2, 24, 20, dtype=torch.float64)
    boxes = [torch.tensor([[0.5, 1.0, 19.0, 23.0], [3.0, 3.0, 9.0, 5.0]], dtype=torch.float64),
             torch.tensor([[-4.0, 2.0, 25.0, 30.0]], dtype=torch.float64)]
    xc = x.clone().requires_grad_()
    xt = x.to(TPU).requires_grad_()
    oc = roi_align(xc, boxes, 3, 1.0, 0, True)
    ot = roi_align(xt, [b.to(TPU) for b in boxes], 3, 1.0, 0, True)
    oc.sum().backward()
    ot.sum().backward()
    torch.testing.assert_close(ot.cpu(), oc)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def _random_boxes(n, gen):
    xy = torch.rand(n, 2, generator=gen) * 50
    wh = torch.rand(n, 2, generator=gen) * 20 + 0.5
    return torch.cat([xy, xy + wh], 1)


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.7])
def test_nms_matches_cpu_with_tied_scores(threshold):
    gen = torch.Generator().manual_seed(int(threshold * 10))
    boxes = _random_boxes(300, gen)
    boxes[100:110] = boxes[0]  # duplicates
    scores = torch.randint(0, 8, (300,), generator=gen).float() / 8  # many equal scores
    keep_cpu = nms(boxes, scores, threshold)
    keep_tpu = nms(boxes.to(TPU), scores.to(TPU), threshold)
    assert keep_tpu.device.type == TPU and keep_tpu.dtype == torch.int64
    assert torch.equal(keep_tpu.cpu(), keep_cpu)


def test_nms_threshold_compares_as_a_double():
    # IoU exactly 1/3 in float32 (0.33333334) is above the double 1/3 but equal to float32(1/3)
    boxes = torch.tensor([[0.0, 0.0, 2.0, 1.0], [1.0, 0.0, 3.0, 1.0], [10.0, 10.0, 11.0, 11.0]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    for thr in (1 / 3, 0.3333333, 0.33333334):
        assert torch.equal(nms(boxes.to(TPU), scores.to(TPU), thr).cpu(), nms(boxes, scores, thr))


def test_nms_empty_float64_and_batched():
    e = nms(torch.zeros(0, 4, device=TPU), torch.zeros(0, device=TPU), 0.5)
    assert e.shape == (0,) and e.dtype == torch.int64 and e.device.type == TPU
    gen = torch.Generator().manual_seed(3)
    boxes = _random_boxes(123, gen).double()
    scores = torch.rand(123, generator=gen).double()
    assert torch.equal(nms(boxes.to(TPU), scores.to(TPU), 0.4).cpu(), nms(boxes, scores, 0.4))
    idxs = torch.randint(0, 4, (123,), generator=gen)
    b, s = boxes.float(), scores.float()
    assert torch.equal(batched_nms(b.to(TPU), s.to(TPU), idxs.to(TPU), 0.5).cpu(),
                       batched_nms(b, s, idxs, 0.5))
