"""Checkpoints in the safetensors format, streamed one tensor at a time.

``safetensors.torch.load_file(path, device="tpu")`` rejects the device name (safetensors accepts a
fixed list of devices), and ``save_file`` builds the whole file in host memory first. These two
functions read and write the same format (any safetensors reader opens what ``save_safetensors``
writes) while holding at most one tensor's bytes on the host::

    torchtpu.checkpoint.save_safetensors(model.state_dict(), "model.safetensors")
    model.load_state_dict(torchtpu.checkpoint.load_safetensors("model.safetensors", device="tpu"))

``torch.save`` of a tpu state dict already streams (PyTorch copies one storage at a time to the
host as it writes), and ``torch.load(path, map_location="cpu")`` reads it without torchtpu.
"""

import json
import struct
from pathlib import Path

import torch

# The format's dtype names (https://github.com/huggingface/safetensors, "Format").
_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64",
}


def save_safetensors(tensors: dict, path, metadata: dict | None = None) -> None:
    """Writes ``tensors`` (name → tensor on any device) as a safetensors file. Each tensor is
    copied to the host and written before the next one is copied."""
    entries, offset = {}, 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _NAMES:
            raise TypeError(f"save_safetensors: '{name}' has dtype {tensor.dtype}, which safetensors cannot store")
        size = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape),
                         "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        entries["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
    partial = Path(path).with_suffix(Path(path).suffix + ".partial")
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for tensor in tensors.values():
            host = tensor.detach().contiguous().cpu()
            if host.numel():
                f.write(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
            del host
    partial.replace(path)  # a crash mid-write leaves the previous file


def load_safetensors(path, device="tpu") -> dict:
    """The tensors of a safetensors file, each on ``device``. The file is memory-mapped; one
    tensor at a time goes to the device."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="pt", device="cpu") as f:
        for name in f.keys():
            out[name] = f.get_tensor(name).to(device)
    return out
