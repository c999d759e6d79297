"""torchtpu in ten lines: tensors on the tpu device, computed by XLA, checked against the CPU."""

import torch

import torchtpu

x = torch.ones(2, 3, device="tpu")
y = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("tpu")
z = (x + y) + 1  # two XLA executions, dispatched asynchronously

print("result on", z.device, "\n", z.cpu())
info = torchtpu.platform_info()
print(f"platform: {info['platform']} ({torch.tpu.get_device_name()}), "
      f"{torch.tpu.device_count()} device(s), XLA PJRT plugin {info['plugin_path']}")
print(f"PJRT C API {info['pjrt_api_version']}, StableHLO {info['stablehlo_current_version']}")

expected = torch.ones(2, 3) + torch.arange(6.0).reshape(2, 3) + 1
assert torch.equal(z.cpu(), expected), "tpu result differs from CPU PyTorch"
print("matches CPU PyTorch:", torch.equal(z.cpu(), expected))
