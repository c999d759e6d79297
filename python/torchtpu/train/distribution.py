"""How the trainer spreads over ranks: one process, DDP or FSDP2, chosen by ``train.strategy`` and
launched with torchrun (its environment says the rank and world size)."""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Distribution:
    strategy: str
    rank: int
    world_size: int
    device: torch.device

    @classmethod
    def from_environment(cls, strategy: str, device: str) -> "Distribution":
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if strategy == "single":
            if world_size > 1:
                raise ValueError(f"train.strategy is 'single' but torchrun started {world_size} ranks; "
                                 "use 'ddp' or 'fsdp'")
            return cls(strategy, 0, 1, torch.device(device))
        if not dist.is_initialized():
            dist.init_process_group()  # tpu tensors get tpu_dist, CPU tensors gloo
        local = int(os.environ.get("LOCAL_RANK", "0"))
        module = torch.get_device_module(device) if device != "cpu" else None
        index = local % module.device_count() if module is not None else None
        if module is not None:
            module.set_device(index)
        return cls(strategy, dist.get_rank(), dist.get_world_size(), torch.device(device, index))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model):
        if self.strategy == "ddp":
            return torch.nn.parallel.DistributedDataParallel(model)
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard
            # Each transformer block is its own shard group (Hugging Face names them), then the rest.
            blocks = set(getattr(model, "_no_split_modules", None) or ())
            for module in model.modules():
                if type(module).__name__ in blocks:
                    fully_shard(module)
            fully_shard(model)
        return model

    def unwrap(self, wrapped):
        return wrapped.module if self.strategy == "ddp" else wrapped

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of ``value`` over ranks (itself on one rank)."""
        if self.world_size == 1:
            return value
        value = value.clone()
        dist.all_reduce(value, dist.ReduceOp.AVG)
        return value

    def state_dicts(self, wrapped, optimizer):
        """Full (unsharded) model and optimizer state dicts, identical on every rank."""
        if self.strategy == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
            return get_state_dict(wrapped, optimizer,
                                  options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return self.unwrap(wrapped).state_dict(), optimizer.state_dict()

    def load_state_dicts(self, wrapped, optimizer, model_state, optimizer_state):
        if self.strategy == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
            set_state_dict(wrapped, optimizer, model_state_dict=model_state,
                           optim_state_dict=optimizer_state,
                           options=StateDictOptions(full_state_dict=True))
            return
        self.unwrap(wrapped).load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)
