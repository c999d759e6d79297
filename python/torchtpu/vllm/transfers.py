"""``CpuGpuBuffer.copy_to_gpu`` without a program per batch size."""

import torch
from vllm.v1.utils import CpuGpuBuffer


def copy_whole_buffer_to_device(buffer: CpuGpuBuffer, n: int | None = None) -> torch.Tensor:
    """The whole host buffer (a few KB) copied, where vLLM copies its first ``n`` elements (the
    number of requests or tokens): a copy into a part of a device buffer is a program per part.
    (Reading a part needs no such care: torchtpu downloads a small storage whole.)"""
    if buffer.gpu is not buffer.cpu:  # not a buffer the runner keeps on the host
        buffer.gpu.copy_(buffer.cpu, non_blocking=True)
    return buffer.gpu if n is None else buffer.gpu[:n]
