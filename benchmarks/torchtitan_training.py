"""TorchTitan's Llama 3 debug model: tokens/s of TorchTitan training on tpu (unmodified, from PyPI)
beside a plain PyTorch training loop of the same model on the CPU, on the same data.

    .venv/bin/python benchmarks/torchtitan_training.py [--steps 12] [--seq-len 256] [--markdown FILE]

The tpu side is ``torchrun -m torchtitan.train --module llama3 --config llama3_debugmodel`` (eager,
and with ``--compile.enable``), its tokens/s read from TorchTitan's own log. The CPU side builds the
model from TorchTitan's classes, takes batches from TorchTitan's dataloader and runs forward,
backward and AdamW in a loop; its attention is FlexAttention's math with the block mask made dense
(PyTorch's FlexAttention refuses gradients on CPU, compiled or not), through
``scaled_dot_product_attention``. Both run float32 with batch 8. Medians over the steps after the
first two (compiles).
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def titan_on_tpu(assets: Path, dump: Path, steps: int, seq_len: int, *extra) -> list:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "-m", "torchtitan.train",
           "--module", "llama3", "--config", "llama3_debugmodel", "--hf_assets_path", str(assets / "tokenizer"),
           "--dataloader.dataset_path", str(assets / "dataset"), "--training.seq_len", str(seq_len),
           "--training.steps", str(steps), "--training.mixed_precision_param", "float32",
           "--dump_folder", str(dump), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=dump.parent)
    log = _ANSI.sub("", done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(log[-4000:])
    return [float(t) for t in re.findall(r"step:\s+\d+\s+loss:.*?tps:\s+([0-9,]+)", log.replace(",", ""))]


def dense_attention(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """TorchTitan's FlexAttention call on CPU: its mask made dense, then SDPA (no score_mod in the
    debug model)."""
    import torch
    from torch.nn.attention.flex_attention import create_mask

    mask = create_mask(block_mask.mask_mod, q.shape[0], 1, q.shape[2], k.shape[2], device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                                           enable_gqa=enable_gqa)
    return out, None


def plain_cpu_loop(assets: Path, steps: int, seq_len: int) -> list:
    import torch
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    FlexAttention._compiled_flex_attn = dense_attention

    cfg = llama3_debugmodel()
    cfg.training.seq_len = seq_len
    model_config = cfg.model_spec.model
    model_config.update_from_config(config=cfg)
    torch.manual_seed(0)
    model = model_config.build()
    model.init_weights(buffer_device=None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1)
    tokenizer = cfg.tokenizer.build(tokenizer_path=str(assets / "tokenizer"))
    cfg.dataloader.dataset_path = str(assets / "dataset")
    loader = iter(cfg.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tokenizer, seq_len=seq_len,
                                       local_batch_size=cfg.training.local_batch_size))
    rates = []
    for _ in range(steps):
        inputs, labels = next(loader)
        start = time.perf_counter()
        masks = model.get_attention_masks(positions=inputs["positions"])
        logits = model(inputs["input"], positions=inputs["positions"], attention_masks=masks)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        rates.append(labels.numel() / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="torchtitan-bench-"))
    subprocess.run([sys.executable, str(ROOT / "examples/torchtitan/make_assets.py"), str(work / "assets")],
                   check=True, capture_output=True)
    assets = work / "assets"
    runs = {
        "PyTorch CPU eager loop (attention by SDPA, dense mask)": plain_cpu_loop(assets, args.steps, args.seq_len),
        "TorchTitan on tpu, eager (strict)": titan_on_tpu(assets, work / "eager", args.steps, args.seq_len),
        "TorchTitan on tpu, --compile.enable": titan_on_tpu(assets, work / "compiled", args.steps, args.seq_len,
                                                           "--compile.enable"),
    }
    base = statistics.median(next(iter(runs.values()))[2:])
    lines = [f"| run | tokens/s (median of steps 3..{args.steps}) | vs CPU loop |", "| --- | ---: | ---: |"]
    for name, rates in runs.items():
        median = statistics.median(rates[2:])
        lines.append(f"| {name} | {median:,.0f} | {median / base:.2f}× |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")


if __name__ == "__main__":
    main()
