"""vLLM's worker on a tpu device: vLLM's GPU worker, with what it does the CUDA way (device
selection, memory pools, memory profiling, kernel warm-up) done for torchtpu, and the start-up
warm-up of every bucket (buckets.py)."""

import contextlib
import time

import torch
from vllm.logger import init_logger
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .platform import TpuPlatform

logger = init_logger("vllm.torchtpu")  # under "vllm": vLLM configures that logger

CPU_PLUGIN_KV_CACHE_BYTES = 4 << 30


class TpuWorker(Worker):
    def init_device(self):
        # PJRT's layout: each process has its own client and devices, numbered from 0
        self.device = torch.device("tpu", self.local_rank % torch.tpu.device_count())
        torch.tpu.set_device(self.device)
        init_worker_distributed_environment(self.vllm_config, self.rank, self.distributed_init_method,
                                            self.local_rank, TpuPlatform.dist_backend)
        set_random_seed(self.model_config.seed)
        self._init_workspace_and_model_runner()

    def _make_model_runner(self):
        from .model_runner import TpuModelRunner
        return TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag):
        return contextlib.nullcontext()  # CUDA's sleep-mode memory pools: not on tpu

    def _scoped_allocator_max_split(self, max_split_size_mb):
        return contextlib.nullcontext()  # a CUDA caching-allocator setting

    @torch.inference_mode()
    def determine_available_memory(self) -> int:
        """The KV cache's bytes: ``kv_cache_memory_bytes`` if set, else the device memory vLLM may
        use (``gpu_memory_utilization``) less what the weights hold. No profiling run: a forward
        pass at the largest batch would compile programs the warm-up compiles anyway. On the XLA
        CPU plugin the device's memory is the host's, shared with everything else: at most
        ``CPU_PLUGIN_KV_CACHE_BYTES`` there (vLLM's own CPU backend also defaults to 4 GiB)."""
        if self.cache_config.kv_cache_memory_bytes:
            return self.cache_config.kv_cache_memory_bytes
        free, total = torch.tpu.mem_get_info(self.device)
        usable = int(total * self.cache_config.gpu_memory_utilization) - torch.tpu.memory_allocated(self.device)
        available = max(0, min(usable, free))
        if torch.tpu.get_device_properties(self.device).platform == "cpu":
            available = min(available, CPU_PLUGIN_KV_CACHE_BYTES)
        return available

    def compile_or_warm_up_model(self):
        start = time.perf_counter()
        self.model_runner.warm_up_buckets()
        logger.info("torchtpu: warmed up the batch buckets in %.1f s", time.perf_counter() - start)
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=0.0, encoder=0.0)
