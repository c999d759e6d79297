"""Training under torch.distributed on tpu, checked against one process training on CPU.

Every rank builds the same GPT-style model from the same seed, trains its shard of each global
batch under a stock parallelism (DDP, FSDP2, tensor parallel, FSDP x TP), and compares its
parameters after a few steps with the reference: the same model trained on the whole batch on CPU.
"""

import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, SEQ, STEPS = 64, 32, 4, 8, 3
_RNG = threading.Lock()  # thread ranks share the CPU generator: seed and draw under the lock


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HEADS, DIM // HEADS).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, DIM))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied, as in GPT-2

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def seeded_gpt():
    with _RNG:
        torch.manual_seed(0)
        return GPT()


def batch(step, world, per_rank=2):
    g = torch.Generator().manual_seed(step)
    return torch.randint(0, VOCAB, (per_rank * world, SEQ + 1), generator=g)


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def reference(world):
    """The model trained on whole batches on CPU, one process."""
    model = seeded_gpt()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(STEPS):
        opt.zero_grad()
        loss_of(model, batch(step, world)).backward()
        opt.step()
    return model


def shard(tokens, rank, world):
    return tokens.chunk(world)[rank]


def compare(name, trained, rank, world, full=lambda p: p, atol=2e-4):
    want = reference(world).state_dict()
    for key, value in trained.state_dict().items():
        got = full(value).detach().cpu()
        torch.testing.assert_close(got, want[key.replace("module.", "")], atol=atol, rtol=1e-3,
                                   msg=lambda m: f"{name}: {key} on rank {rank}: {m}")


def ddp(rank, world, hook=None):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(seeded_gpt().to("tpu"))
    if hook:  # a communication hook chains on the all-reduce's future
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, getattr(default_hooks, hook))
    assert model.module.head.weight is model.module.embed.weight  # ties survive .to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(STEPS):
        opt.zero_grad()
        tokens = shard(batch(step, world), rank, world).to("tpu")
        first, second = tokens.chunk(2)
        with model.no_sync():  # gradient accumulation: the all-reduce happens on the last micro-batch
            (loss_of(model, first) / 2).backward()
        (loss_of(model, second) / 2).backward()
        opt.step()
    compare(f"DDP (hook {hook})", model, rank, world, atol=1e-3 if hook else 2e-4)  # fp16 gradients


def fsdp(rank, world):
    from torch.distributed.fsdp import fully_shard
    model = seeded_gpt().to("tpu")
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return _train(model, rank, world, "FSDP2", lambda tokens: shard(tokens, rank, world))


def fsdp_checkpoint(rank, world, directory):
    """FSDP2 training saved with torch.distributed.checkpoint (each rank writes its shards)."""
    import torch.distributed.checkpoint as dcp
    model = fsdp(rank, world)
    dcp.save({"model": model.state_dict()}, checkpoint_id=directory)


def _tp_plan():
    # The MLP's matrices split Megatron-style: up by output features, down by input features.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"up": ColwiseParallel(), "down": RowwiseParallel()}


def _train(model, rank, world, name, shard_of=lambda tokens: tokens, foreach=None):
    """Trains ``model`` (already parallelized) on this rank's shards; checks it against CPU."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5, foreach=foreach)
    for step in range(STEPS):
        opt.zero_grad()
        loss_of(model, shard_of(batch(step, world)).to("tpu")).backward()
        opt.step()
    compare(name, model, rank, world, full=lambda p: p.full_tensor() if hasattr(p, "full_tensor") else p)
    return model


def tp(rank, world):
    """Tensor parallel: every rank sees the whole batch; the MLP matrices are split across ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh("tpu", (world,))
    model = seeded_gpt().to("tpu")
    for block in model.blocks:
        parallelize_module(block, mesh, _tp_plan())
    # Plain and DTensor parameters mixed: PyTorch's foreach kernels refuse that (on CUDA too).
    _train(model, rank, world, "TP", foreach=False)


def fsdp_tp(rank, world):
    """2-D: FSDP2 over the "dp" mesh dimension, tensor parallel over "tp" (world = 2 x 2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh("tpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model = seeded_gpt().to("tpu")
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], _tp_plan())
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    dp_rank = mesh["dp"].get_local_rank()
    _train(model, rank, world, "FSDP x TP", lambda tokens: tokens.chunk(world // 2)[dp_rank])


SCENARIOS = {"ddp": ddp, "fsdp": fsdp, "tp": tp, "fsdp_tp": fsdp_tp, "fsdp_checkpoint": fsdp_checkpoint}
