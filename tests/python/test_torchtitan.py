"""TorchTitan (from PyPI, unmodified) trains Llama 3's debug model on the tpu device.

``torchrun -m torchtitan.train --module llama3 --config llama3_debugmodel`` runs in one process,
with FSDP2 over two, with tensor parallelism over two, with ``--compile.enable``, with selective
(its default) and full activation checkpointing, and resumes its DCP checkpoint exactly. Every run
starts from one seed checkpoint (TorchTitan's own ``--checkpoint.create_seed_checkpoint``), in
float32, so that the first step's loss can be checked against the same TorchTitan model, weights
and data on CPU PyTorch, and later steps against each other. The tokenizer and dataset are made
locally (examples/torchtitan/make_assets.py): TorchTitan's wheel does not ship its test assets.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchtpu

ROOT = Path(__file__).resolve().parents[2]
SEQ_LEN, BATCH = 128, 4
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _torchrun(nproc, dump, assets, *args, steps=2, local_batch=BATCH):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel",
           "--hf_assets_path", str(assets / "tokenizer"), "--dataloader.dataset_path", str(assets / "dataset"),
           "--training.seq_len", str(SEQ_LEN), "--training.local_batch_size", str(local_batch),
           "--training.steps", str(steps),
           "--training.mixed_precision_param", "float32", "--dump_folder", str(dump), *args]
    env = {**os.environ, "TORCHTPU_METRICS_ON_EXIT": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=dump.parent)
    log = _ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, log[-6000:]
    return log


def _losses(log) -> dict:
    """{step: loss} as rank 0 logged them (every rank logs the same global loss)."""
    losses = {}
    for step, loss in re.findall(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)", log):
        losses.setdefault(int(step), float(loss))
    return losses


def _compiled_graph_runs(log) -> int:
    return int(re.search(r"torch.compile graphs: (\d+) runs", log).group(1))


def _assert_no_fallbacks(log, ranks=1):
    """Every process's metrics (ranks, and torchrun's own) report no CPU fallback."""
    reports = re.findall(r"CPU fallbacks: (.*)", log)
    assert len(reports) >= ranks and set(reports) == {"none"}, reports


@pytest.fixture(scope="module")
def titan(tmp_path_factory):
    """Assets, a seed checkpoint and a run from it: (assets, seed, log of 4 steps with
    checkpoints every 2)."""
    root = tmp_path_factory.mktemp("torchtitan")
    subprocess.run([sys.executable, str(ROOT / "examples/torchtitan/make_assets.py"), str(root / "assets")],
                   check=True, capture_output=True, timeout=300)
    assets = root / "assets"
    _torchrun(1, root / "seed", assets, "--checkpoint.enable", "--checkpoint.create_seed_checkpoint", steps=1)
    seed = root / "seed" / "checkpoint" / "step-0"
    assert (seed / ".metadata").exists()
    log = _torchrun(1, root / "base", assets, "--checkpoint.enable", "--checkpoint.initial_load_path", str(seed),
                    "--checkpoint.interval", "2", steps=4)
    return root, assets, seed, log


def _cpu_reference_loss(assets, seed, dp_world_size=1, local_batch_size=BATCH) -> float:
    """The first step's loss on CPU: TorchTitan's model classes with the seed checkpoint's weights
    and the batches its dataloader gives each data-parallel rank (summed cross entropy over all
    ranks' tokens, as TorchTitan's loss)."""
    import torch.distributed.checkpoint as dcp
    from torch.nn.attention.flex_attention import flex_attention
    from torchtitan.models.common import attention
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    cfg = llama3_debugmodel()
    cfg.training.seq_len = SEQ_LEN
    model_config = cfg.model_spec.model
    model_config.update_from_config(config=cfg)
    compiled = attention.FlexAttention._compiled_flex_attn
    attention.FlexAttention._compiled_flex_attn = flex_attention  # CPU: eager, not Inductor
    try:
        model = model_config.build()
        model.init_weights(buffer_device=None)
        state = model.state_dict()
        dcp.load(state, checkpoint_id=str(seed))
        model.load_state_dict(state)
        tokenizer = cfg.tokenizer.build(tokenizer_path=str(assets / "tokenizer"))
        cfg.dataloader.dataset_path = str(assets / "dataset")
        total, tokens = 0.0, 0
        with torch.no_grad():  # (CPU's flex_attention has no backward)
            for rank in range(dp_world_size):
                loader = cfg.dataloader.build(dp_world_size=dp_world_size, dp_rank=rank, tokenizer=tokenizer,
                                              seq_len=SEQ_LEN, local_batch_size=local_batch_size)
                inputs, labels = next(iter(loader))
                masks = model.get_attention_masks(positions=inputs["positions"])
                logits = model(inputs["input"], positions=inputs["positions"], attention_masks=masks)
                total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1),
                                                           reduction="sum", ignore_index=-100).item()
                tokens += int((labels != -100).sum())
    finally:
        attention.FlexAttention._compiled_flex_attn = compiled
    return total / tokens


def _close(a, b, rel=2e-5):
    # TorchTitan logs losses with 5 decimals
    return abs(a - b) <= max(rel * abs(b), 1.5e-5)


def test_one_process_matches_cpu_and_trains(titan):
    root, assets, seed, log = titan
    losses = _losses(log)
    assert sorted(losses) == [1, 2, 3, 4]
    assert _close(losses[1], _cpu_reference_loss(assets, seed)), (losses, "CPU reference")
    assert losses[4] < losses[1]
    _assert_no_fallbacks(log)


def test_a_dcp_checkpoint_resumes_exactly(titan):
    """Two steps, a checkpoint, then a new process resuming from it: steps 3 and 4 log the same
    losses as the run that never stopped."""
    root, assets, seed, log = titan
    args = ("--checkpoint.enable", "--checkpoint.initial_load_path", str(seed), "--checkpoint.interval", "2")
    _torchrun(1, root / "resumed", assets, *args, steps=2)
    assert (root / "resumed" / "checkpoint" / "step-2").is_dir()
    resumed = _torchrun(1, root / "resumed", assets, *args, steps=4)
    assert "Loading the checkpoint from" in resumed and "step-2" in resumed
    got, expected = _losses(resumed), _losses(log)
    assert sorted(got) == [3, 4]
    assert got[3] == expected[3] and got[4] == expected[4]


VARIANTS = {"compile": "--compile.enable", "full_activation_checkpointing": "activation-checkpoint:full"}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_compile_and_activation_checkpointing_train_as_eager(titan, variant):
    """--compile.enable (TorchTitan's default backend name, "inductor", on tpu tensors) and full
    activation checkpointing train as the eager run with selective checkpointing did."""
    root, assets, seed, log = titan
    run = _torchrun(1, root / variant, assets, "--checkpoint.enable", "--checkpoint.initial_load_path", str(seed),
                    VARIANTS[variant])
    got, eager = _losses(run), _losses(log)
    assert _close(got[1], eager[1]) and _close(got[2], eager[2], rel=1e-4), (got, eager)
    _assert_no_fallbacks(run)
    if variant == "compile":
        # each of the 6 blocks runs as compiled programs (forward and backward) at every step
        assert "Compiling each TransformerBlock with torch.compile" in run
        # (the eager run compiles only FlexAttention, which TorchTitan always compiles)
        eager_per_step = _compiled_graph_runs(log) / 4
        assert _compiled_graph_runs(run) / 2 >= eager_per_step + 2 * 6, (_compiled_graph_runs(run), eager_per_step)


@pytest.mark.parametrize("parallelism", ["fsdp", "tensor_parallel"])
def test_two_processes_match_cpu(titan, parallelism):
    """FSDP2 over two processes (each rank its own half of the batch) and tensor parallelism over
    two (both ranks the whole batch): the first loss as CPU's for the same data, the second as one
    process's for tensor parallelism."""
    root, assets, seed, log = titan
    if parallelism == "fsdp":
        args, local_batch = ["--parallelism.data_parallel_shard_degree", "2"], BATCH // 2
        expected_first = _cpu_reference_loss(assets, seed, dp_world_size=2, local_batch_size=BATCH // 2)
    else:
        args, local_batch = ["--parallelism.tensor_parallel_degree", "2"], BATCH
        expected_first = _losses(log)[1]
    run = _torchrun(2, root / parallelism, assets, "--checkpoint.enable", "--checkpoint.initial_load_path",
                    str(seed), *args, local_batch=local_batch)
    got = _losses(run)
    assert _close(got[1], expected_first, rel=5e-5), (got, expected_first)
    if parallelism == "tensor_parallel":
        assert _close(got[2], _losses(log)[2], rel=1e-4), (got, _losses(log))
    _assert_no_fallbacks(run, ranks=2)
