"""vLLM on tpu: torchtpu's vLLM platform plugin (docs/vllm.md).

vLLM finds it through the ``vllm.platform_plugins`` entry point ``torchtpu`` (pyproject.toml);
``register`` names the platform class when a tpu device is there. Nothing here imports vLLM's
configuration at import time: vLLM resolves its platform while it is itself being imported.
"""


def register():
    """The platform class for vLLM, or None without a tpu device."""
    import torch
    try:
        import torchtpu  # noqa: F401  (registers the device and torch.tpu)
        if torch.tpu.device_count() == 0:
            return None
    except Exception:
        return None
    return "torchtpu.vllm.platform.TpuPlatform"
