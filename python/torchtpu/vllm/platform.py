"""The vLLM platform of the tpu device: what vLLM asks a device (names, memory, seeds, the
distributed backend) answered from ``torch.tpu``, and the configuration torchtpu runs vLLM with."""

import os

import torch
from vllm.platforms.interface import Platform, PlatformEnum

# What vLLM can do that this platform does not (yet): refused by name at start-up.
_UNSUPPORTED = {
    "lora_config": "LoRA adapters",
    "speculative_config": "speculative decoding",
}


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "tpu"
    device_type = "tpu"
    dispatch_key = "PrivateUse1"
    device_control_env_var = "TORCHTPU_VISIBLE_DEVICES"
    simple_compile_backend = "tpu"  # torch.compile(backend="tpu") for vLLM's small compiled helpers
    # gloo for vLLM's host-side groups, torchtpu's c10d backend for tpu tensors (tensor parallelism)
    dist_backend = "cpu:gloo,tpu:tpu_dist"
    supported_quantization: list[str] = []  # none: any quantization method is refused by name

    @property
    def supported_dtypes(self):
        return [torch.bfloat16, torch.float32, torch.float16]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.mem_get_info(device_id)[1]

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's compiled kernels (``vllm._C``) are CUDA's: nothing to import."""

    @classmethod
    def import_ir_kernels(cls) -> None:
        """As import_kernels: vLLM's IR ops run their PyTorch implementations."""

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        pass

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
        refused = [name for name, used in (("multi-head latent attention", attn_selector_config.use_mla),
                                           ("sparse attention", attn_selector_config.use_sparse),
                                           ("attention sinks", attn_selector_config.has_sink))
                   if used]
        if refused:
            raise NotImplementedError(f"torchtpu's vLLM attention does not support {refused[0]} yet")
        path = "torchtpu.vllm.attention.TpuAttentionBackend"
        register_backend(AttentionBackendEnum.CUSTOM, path)
        return path

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from vllm.triton_utils.dispatcher import register_kernels

        from .slot_mapping import compute_slot_mapping
        register_kernels({"vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping})

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode
        for field, feature in _UNSUPPORTED.items():
            if getattr(vllm_config, field, None) is not None:
                raise NotImplementedError(f"vLLM on torchtpu does not support {feature} yet")
        model = vllm_config.model_config
        if model is not None:
            if model.is_multimodal_model:
                raise NotImplementedError("vLLM on torchtpu does not support multimodal models yet")
            model.enforce_eager = True  # torchtpu's eager modes compile per bucket; no CUDA graphs
        compilation = vllm_config.compilation_config
        compilation.mode = CompilationMode.NONE
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        compilation.max_cudagraph_capture_size = 0
        vllm_config.scheduler_config.async_scheduling = False  # it needs CUDA streams
        parallel = vllm_config.parallel_config
        parallel.disable_custom_all_reduce = True
        if torch.tpu.is_initialized() or parallel.world_size > 1:
            # a process forked after the runtime started cannot use the device (as with CUDA)
            os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
        if parallel.worker_cls == "auto":
            parallel.worker_cls = "torchtpu.vllm.worker.TpuWorker"
        cache = vllm_config.cache_config
        if cache.block_size is None:
            cache.block_size = 16
