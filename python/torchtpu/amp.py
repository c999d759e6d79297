"""``torch.tpu.amp``: the tpu twin of ``torch.cuda.amp`` (autocast, GradScaler, custom_fwd/bwd).

Autocast itself is ``torch.autocast("tpu", dtype=...)``: PyTorch's CUDA policy, registered in C++
on the AutocastPrivateUse1 key (aten/autocast.cpp). The default dtype is PyTorch's for the device
(float16, as on CUDA; ``torch.set_autocast_dtype("tpu", torch.bfloat16)`` or ``dtype=`` to change).
"""

import functools

import torch


class autocast(torch.amp.autocast):
    """``torch.tpu.amp.autocast(...)`` is ``torch.autocast("tpu", ...)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.tpu.amp.GradScaler(...)`` is ``torch.amp.GradScaler("tpu", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="tpu")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="tpu")
