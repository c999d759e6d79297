"""torchvision models: classification, detection, video, optical flow and segmentation, with
their batches and losses.

Importing this module registers them in ``MODELS``."""

from .specs import BATCH, Spec, gen, image_batch, register


def _frozen_bn(build):
    """``build``'s model with its BatchNorm frozen, as fine-tuning does (torchvision uses
    FrozenBatchNorm2d whenever a backbone is pretrained): a few images normalized over 1x1 maps
    are where rounding differences flip signs and no two implementations agree."""
    def frozen():
        import torch
        from torchvision.ops.misc import FrozenBatchNorm2d
        model = build()
        for parent in list(model.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.BatchNorm2d):
                    f = FrozenBatchNorm2d(child.num_features, eps=child.eps)
                    for k in ("weight", "bias", "running_mean", "running_var"):
                        getattr(f, k).copy_(getattr(child, k).detach())
                    setattr(parent, child_name, f)
        return model
    return frozen


def tv_cls_loss(model, batch):
    import torch
    return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def _tv_cls(name, build, size=64, batch=4, note=""):
    # CNNs train with BatchNorm: at 32 px and batch 2 their last stages normalize over 2 values
    # (1x1 maps), where float rounding flips signs and no two implementations agree
    register(Spec(name, "torchvision classification", build,
                  lambda s: image_batch(s, size=size, batch=batch), tv_cls_loss, optimizer="sgd",
                  note=note or f"{batch} images of {size} px"))


def _tvm(fn, **kw):
    def build():
        import importlib
        mod, _, attr = ("torchvision.models." + fn).rpartition(".")
        return getattr(importlib.import_module(mod), attr)(weights=None, **kw)
    return build


def _vit_tiny():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32,
                             mlp_dim=64, num_classes=10)


def _convnext_small_cfg():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 2)], stochastic_depth_prob=0.0,
                    num_classes=10)


def _swin_small_cfg():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


_tv_cls("resnet18", _tvm("resnet18", num_classes=10))
_tv_cls("mobilenet_v3_small", _tvm("mobilenet_v3_small", num_classes=10, dropout=0.0))
_tv_cls("efficientnet_b0", _tvm("efficientnet_b0", num_classes=10, dropout=0.0,
                                stochastic_depth_prob=0.0))
_tv_cls("shufflenet_v2_x0_5", _tvm("shufflenet_v2_x0_5", num_classes=10))
_tv_cls("vit_mini", _vit_tiny, size=32, batch=BATCH,
        note="torchvision VisionTransformer (vit_b_16's class): 2 layers, 32 wide, 8 px patches")
_tv_cls("convnext_mini", _convnext_small_cfg, size=32, batch=BATCH,
        note="torchvision ConvNeXt: 2 stages of 2 blocks, 16 and 32 channels")
_tv_cls("swin_mini", _swin_small_cfg, size=32, batch=BATCH,
        note="torchvision SwinTransformer: 2 stages of 2 blocks, 16 wide, 4x4 windows")


def _maxvit_mini():
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


_tv_cls("maxvit_mini", _maxvit_mini, note="torchvision MaxVit: 2 blocks of 16 and 32 channels, 2x2 partitions")
_tv_cls("squeezenet1_1", _tvm("squeezenet1_1", num_classes=10, dropout=0.0))
# Deeper CNNs with BatchNorm over 4 images of 64 px are chaotic (CPU's own float32 runs from
# weights one rounding apart differ by up to 100% in loss): they train with it frozen, as fine-tuning does.
for _name, _kw, _size in [("densenet121", {}, 64), ("googlenet", dict(aux_logits=False, init_weights=True), 64),
                          ("mnasnet0_5", {}, 64), ("regnet_y_400mf", {}, 64), ("vgg11_bn", {}, 64),
                          ("mobilenet_v2", {}, 64), ("efficientnet_v2_s", dict(stochastic_depth_prob=0.0), 64)]:
    _dropout = {} if _name in ("densenet121", "regnet_y_400mf") else dict(dropout=0.0)
    _tv_cls(_name, _frozen_bn(_tvm(_name, num_classes=10, **_dropout, **_kw)), size=_size,
            note=f"4 images of {_size} px, BatchNorm frozen")


def _det_batch(step, size=64, classes=3):
    import torch
    g = gen(step)
    images = [torch.rand(3, size, size, generator=g) for _ in range(BATCH)]
    targets = []
    for i in range(BATCH):
        xy = torch.rand(2, 2, generator=g) * size * 0.5
        wh = 8 + torch.rand(2, 2, generator=g) * size * 0.4
        boxes = torch.cat([xy, (xy + wh).clamp(max=size - 1)], dim=1)
        targets.append({"boxes": boxes, "labels": torch.randint(1, classes, (2,), generator=g)})
    return {"images": images, "targets": targets}


def _det_loss(model, batch):
    losses = model(batch["images"], batch["targets"])
    return sum(losses.values())


def _cpu_randperm():
    """Detection samplers draw ``torch.randperm`` on the model's device; values from two devices'
    generators cannot match, so it is drawn from the CPU generator and moved (both runs seed it)."""
    import torch
    orig = torch.randperm

    def randperm(n, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type != "cpu":
            return orig(n, *args, **kwargs).to(device)
        return orig(n, *args, device=device, **kwargs)
    torch.randperm = randperm


def _tv_det(name, fn, **kw):
    build = _frozen_bn(_tvm(fn, weights_backbone=None, num_classes=3, **kw))
    register(Spec(name, "torchvision detection", build, _det_batch, _det_loss, optimizer="sgd",
                  setup=_cpu_randperm, note="2 images of 64 px, 2 boxes each, 3 classes, "
                  "BatchNorm frozen; samplers' randperm drawn on CPU"))


_tv_det("fasterrcnn_mobilenet_v3_large_fpn", "detection.fasterrcnn_mobilenet_v3_large_fpn", min_size=64,
        max_size=64)
_tv_det("ssdlite320_mobilenet_v3_large", "detection.ssdlite320_mobilenet_v3_large")
_tv_det("retinanet_resnet50_fpn", "detection.retinanet_resnet50_fpn", min_size=64, max_size=64)
_tv_det("fcos_resnet50_fpn", "detection.fcos_resnet50_fpn", min_size=64, max_size=64)


def _mask_batch(step, size=64):
    """Detection targets with an instance mask per box (the box's area)."""
    import torch
    batch = _det_batch(step, size)
    for target in batch["targets"]:
        masks = torch.zeros(len(target["boxes"]), size, size, dtype=torch.uint8)
        for k, box in enumerate(target["boxes"].long().tolist()):
            masks[k, box[1]:box[3], box[0]:box[2]] = 1
        target["masks"] = masks
    return batch


# at SGD's learning rate the CPU run itself diverges (loss NaN in step 2)
register(Spec("maskrcnn_resnet50_fpn", "torchvision detection",
              _frozen_bn(_tvm("detection.maskrcnn_resnet50_fpn", weights_backbone=None, num_classes=3,
                              min_size=64, max_size=64)),
              _mask_batch, _det_loss, setup=_cpu_randperm,
              note="2 images of 64 px, 2 boxes with masks each, 3 classes, BatchNorm frozen, AdamW"))


def _video_batch(step):
    import torch
    g = gen(step)
    return {"pixel_values": torch.randn(BATCH, 3, 4, 32, 32, generator=g),
            "labels": torch.randint(0, 10, (BATCH,), generator=g)}


register(Spec("r3d_18", "torchvision video", _tvm("video.r3d_18", num_classes=10), _video_batch,
              tv_cls_loss, optimizer="sgd", note="2 clips of 4 frames of 32 px"))


def _raft():
    from torchvision.models.optical_flow import raft_small
    return raft_small(weights=None)


def _flow_batch(step, size=128):  # RAFT's correlation pyramid needs 128 px
    import torch
    g = gen(step)
    return {"first": torch.rand(1, 3, size, size, generator=g), "second": torch.rand(1, 3, size, size, generator=g),
            "flow": torch.randn(1, 2, size, size, generator=g)}


def _flow_loss(model, batch):
    flows = model(batch["first"], batch["second"], num_flow_updates=2)
    return sum((f - batch["flow"]).abs().mean() for f in flows)


register(Spec("raft_small", "torchvision optical flow", _raft, _flow_batch, _flow_loss, optimizer="sgd",
              note="one pair of 128 px images, 2 flow updates (grid_sample, correlation volumes)"))


def _seg_batch(step, size=64, classes=3, batch=4):
    import torch
    g = gen(step)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=g),
            "labels": torch.randint(0, classes, (batch, size, size), generator=g)}


def _seg_loss(model, batch):
    import torch.nn.functional as F
    out = model(batch["pixel_values"])
    loss = F.cross_entropy(out["out"], batch["labels"])
    if "aux" in out:
        loss = loss + 0.5 * F.cross_entropy(out["aux"], batch["labels"])
    return loss


def _tv_seg(name, fn, **kw):
    register(Spec(name, "torchvision segmentation", _tvm(fn, weights_backbone=None, num_classes=3, **kw),
                  _seg_batch, _seg_loss, optimizer="sgd", note="4 images of 64 px, 3 classes"))


_tv_seg("lraspp_mobilenet_v3_large", "segmentation.lraspp_mobilenet_v3_large")
_tv_seg("deeplabv3_mobilenet_v3_large", "segmentation.deeplabv3_mobilenet_v3_large", aux_loss=True)
_tv_seg("fcn_resnet50", "segmentation.fcn_resnet50", aux_loss=True)
