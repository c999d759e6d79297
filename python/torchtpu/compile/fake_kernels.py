"""Shape functions (meta kernels) for Dynamo's fake tensors where PyTorch's reject what the tpu
device runs.

``torch._grouped_mm`` (mixture-of-experts layers: transformers sends tpu tensors to it in every
dtype, eagerly and under torch.compile) runs on tpu in any floating dtype, but PyTorch's meta
kernel accepts bfloat16 only, the restriction of its CUDA kernel, so tracing a float32 Mixtral
stopped in Dynamo. For tpu tensors the shape function below takes any floating dtype; every
other device keeps PyTorch's.
"""

import torch


def _device_type(t: torch.Tensor) -> str:
    # a fake tensor reports the meta device while its meta kernel runs
    return getattr(t, "fake_device", t.device).type


def grouped_mm_meta(original):
    """The meta kernel of aten._grouped_mm for tpu tensors, PyTorch's `original` for the rest
    (installed by patches.py)."""
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    def grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        if not (_device_type(mat_a) == "tpu" and mat_a.dtype == mat_b.dtype and mat_a.dtype.is_floating_point):
            return original(mat_a, mat_b, offs, bias, out_dtype)
        torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                     lambda: f"Multiplicands must be 2D or 3D but got mat_a.dim()={mat_a.dim()} and mat_b.dim()={mat_b.dim()}")
        if mat_a.dim() == 3 or mat_b.dim() == 3:
            torch._check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction dimension of mat_a and mat_b must match")
        torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
                     lambda: "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
        return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    return grouped_mm
