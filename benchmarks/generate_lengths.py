"""Greedy generation with a growing KV cache: what a first run and a new prompt length cost.

    python benchmarks/generate_lengths.py [--new-tokens 64] [--runtimes ...] [--json FILE]

Hugging Face GPT-2 built from a config (4 layers, d_model 256, 4 heads, vocab 1000, seeded
weights) generates greedily with its default dynamic cache: a prompt of 7 tokens, then a prompt
of 11 (a new length), then another of 11 (a repeated length: what the new length is compared
with). Each runtime runs in its own process with an empty compile cache:

- torch-cpu: PyTorch eager;
- torchtpu-strict, torchtpu-fused: eager modes (every op's program is compiled for its exact
  shapes, so each new cache length compiles programs);
- torchtpu-compiled: the model's ``forward`` under ``torch.compile(backend="tpu")``, whose graphs
  run padded to buckets of the cache length (docs/compile.md, "Dynamic sizes: buckets").

Reported per runtime and prompt: wall time of ``generate``, XLA compiles during it
(``torchtpu.metrics``), and whether the tokens equal PyTorch CPU's.
"""

import json
import time

import fresh_process

RUNTIMES = ["torch-cpu", "torchtpu-strict", "torchtpu-fused", "torchtpu-compiled"]
PROMPTS = [7, 11, 11]


def child(runtime, new_tokens):
    import torch
    import transformers

    device = "cpu"
    if runtime.startswith("torchtpu"):
        import torchtpu
        torchtpu.set_eager_mode("fused" if runtime == "torchtpu-fused" else "strict")
        device = "tpu"
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=256, n_embd=256, n_layer=4, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval().to(device)
    if runtime == "torchtpu-compiled":
        model.forward = torch.compile(model.forward, backend="tpu")
    g = torch.Generator().manual_seed(1)
    results = []
    for length in PROMPTS:
        ids = torch.randint(0, config.vocab_size, (1, length), generator=g)
        compiles = torchtpu.metrics.counters()["compiles"] if device == "tpu" else None
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=0)
        tokens = out.cpu()[0].tolist()
        seconds = time.perf_counter() - start
        if device == "tpu":
            compiles = torchtpu.metrics.counters()["compiles"] - compiles
        memory = None
        if device == "tpu":
            memory = {"peak_padded": torchtpu.metrics.counters()["peak_padded_bytes"],
                      "peak": torch.tpu.max_memory_allocated()}
            torchtpu.metrics.reset()  # the peaks: per prompt
            torch.tpu.reset_peak_memory_stats()
        results.append({"prompt": length, "seconds": seconds, "compiles": compiles, "tokens": tokens,
                        "memory": memory})
    return {"prompts": results}


def table(results):
    reference = results.get("torch-cpu", {}).get("prompts", [])
    rows = ["| runtime | prompt | generate s | vs CPU | XLA compiles | tokens as CPU | peak device MiB "
            "| of it padding, peak MiB |",
            "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for runtime, result in results.items():
        if "error" in result:
            rows.append(f"| {runtime} | error: {result['error']} | | | | | | |")
            continue
        for i, r in enumerate(result["prompts"]):
            ref = reference[i] if i < len(reference) else None
            ratio = f"{r['seconds'] / ref['seconds']:.1f}×" if ref else "—"
            same = "—" if ref is None or runtime == "torch-cpu" else ("yes" if r["tokens"] == ref["tokens"] else "NO")
            compiles = "—" if r["compiles"] is None else r["compiles"]
            memory = r.get("memory")
            peaks = (" — | — |" if not memory else
                     f" {memory['peak'] / 2**20:.2f} | {memory['peak_padded'] / 2**20:.2f} |")
            prompt = f"{r['prompt']} (again)" if r["prompt"] in PROMPTS[:i] else r["prompt"]
            rows.append(f"| {runtime} | {prompt} | {r['seconds']:.2f} | {ratio} | {compiles} | {same} |{peaks}")
    return "\n".join(rows)


def main():
    args = fresh_process.command_line(__doc__, RUNTIMES,
                                      lambda ap: ap.add_argument("--new-tokens", type=int, default=64))
    if args.child:
        print(json.dumps(child(args.child, args.new_tokens)))
        return
    results = fresh_process.run_all(__file__, args.runtimes, ["--new-tokens", str(args.new_tokens)],
                                    lambda r: "done")
    print(table(results))
    fresh_process.save(results, args.json)


if __name__ == "__main__":
    main()
