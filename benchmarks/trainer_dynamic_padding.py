"""Hugging Face ``Trainer`` with ``DataCollatorWithPadding``: each batch padded to its own longest.

    python benchmarks/trainer_dynamic_padding.py [--steps 40] [--runtimes ...] [--json FILE]

A small BERT (``BertForSequenceClassification`` from a config: 2 layers, hidden 64, dropout on,
as a classifier is trained) learns a two-class task on sentences of 8..60 random tokens; the
collator pads each batch of 8 to its longest sentence (the default for text classification), so
nearly every batch has a new length. ``Trainer`` runs on the device through accelerate
(``ACCELERATE_TORCH_DEVICE``, docs/porting.md). Each runtime runs in its own process with an empty
compile cache:

- torch-cpu: PyTorch eager;
- torchtpu-strict, torchtpu-fused: eager modes, whose ops run padded to buckets where sizes vary.

Reported per runtime: the whole run, the median step of the second half, XLA compiles in all and
in the second half (``torchtpu.metrics``; of these, how many were tiered-compile promotions, a
quickly compiled program compiled again optimized once it ran often, not a new shape), and the
padded device bytes held at the end.
"""

import json
import os
import statistics
import time

import fresh_process

RUNTIMES = ["torch-cpu", "torchtpu-strict", "torchtpu-fused"]
VOCAB = 200


def sentences(n, seed=0):
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids = [rng.randrange(2, VOCAB) for _ in range(rng.randint(8, 60))]
        out.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": int(sum(ids) % 2)})
    return out


def tokenizer():
    """A word-level tokenizer made here (no hub access): the collator needs only its padding."""
    import tokenizers
    import transformers
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, VOCAB)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")


def child(runtime, steps, out_dir):
    import torch
    import transformers

    if runtime.startswith("torchtpu"):
        import torchtpu
        torchtpu.set_eager_mode("fused" if runtime == "torchtpu-fused" else "strict")
        os.environ["ACCELERATE_TORCH_DEVICE"] = "tpu"
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=64, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    times, compiles, promotions = [], [], []

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.start)
            if runtime.startswith("torchtpu"):
                compiles.append(torchtpu.metrics.counters()["compiles"])
                promotions.append(torchtpu.cache.stats()["promotions"])

    args = transformers.TrainingArguments(output_dir=out_dir, max_steps=steps, per_device_train_batch_size=8,
                                          learning_rate=1e-3, logging_steps=steps, save_strategy="no",
                                          report_to=[], use_cpu=runtime == "torch-cpu", seed=0,
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=sentences(steps * 8),
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer()),
                                   callbacks=[Clock()])
    start = time.perf_counter()
    result = trainer.train()
    total = time.perf_counter() - start
    out = {"total_s": total, "step_s": times, "loss": result.training_loss}
    if runtime.startswith("torchtpu"):
        out["compiles"] = compiles
        out["promotions"] = promotions
        out["unpadded_ops"] = torchtpu.metrics.unpadded_ops()
        out["padded_bytes"] = torchtpu.metrics.counters()["padded_bytes"]
        out["device"] = str(next(model.parameters()).device)
    return out


def table(results, steps):
    rows = ["| runtime | whole run s | median step ms (2nd half) | XLA compiles | compiles in 2nd half "
            "(tiered promotions) | padded bytes | loss |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    half = steps // 2
    for rt, r in results.items():
        if "error" in r:
            rows.append(f"| {rt} | error: {r['error']} | | | | | |")
            continue
        c, p = r.get("compiles"), r.get("promotions")
        late = f"{c[-1] - c[half - 1]} ({p[-1] - p[half - 1]})" if c else "—"
        rows.append(f"| {rt} | {r['total_s']:.1f} | {statistics.median(r['step_s'][half:]) * 1e3:.1f} | "
                    f"{c[-1] if c else '—'} | {late} | "
                    f"{r.get('padded_bytes', '—')} | {r['loss']:.4f} |")
    return "\n".join(rows)


def main():
    def options(ap):
        ap.add_argument("--steps", type=int, default=40)

    args = fresh_process.command_line(__doc__, RUNTIMES, options)
    if args.child:
        import tempfile
        with tempfile.TemporaryDirectory() as out_dir:
            print(json.dumps(child(args.child, args.steps, out_dir)))
        return
    results = fresh_process.run_all(__file__, args.runtimes, ["--steps", str(args.steps)],
                                    lambda r: f"{r['total_s']:.1f} s")
    print(table(results, args.steps))
    for rt, r in results.items():
        if r.get("unpadded_ops"):
            print(f"{rt}: ops run at exact sizes on padded tensors: {r['unpadded_ops']}")
    fresh_process.save(results, args.json)


if __name__ == "__main__":
    main()
