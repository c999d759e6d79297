"""Serving a batch of prompts: vLLM on tpu (torchtpu's plugin) against Hugging Face generate.

    python benchmarks/vllm_serving.py [--prompts 16] [--new-tokens 32] [--runtimes ...] [--json FILE]

A GPT-2 built from a config (4 layers, d_model 256, 4 heads, vocab 1000, seeded weights), saved
locally, completes N prompts of lengths drawn from 8..64, greedily. Each runtime runs in its own
process with an empty compile cache:

- hf-cpu, hf-tpu: Hugging Face ``generate``, one prompt at a time (PyTorch eager on CPU; torchtpu
  strict mode);
- vllm-tpu: ``vllm.LLM`` on tpu, all prompts submitted together (continuous batching), after its
  start-up (weights, KV cache, the warm-up of every batch bucket: reported apart).

Reported: start-up, time to first token (the same prompts with one new token), the whole batch's
wall time and generated tokens per second, XLA compiles during the batch, and whether the tokens
equal hf-cpu's.
"""

import json
import os
import random
import tempfile
import time

import fresh_process

RUNTIMES = ["hf-cpu", "hf-tpu", "vllm-tpu"]


def _model(directory):
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=256, n_embd=256, n_layer=4, n_head=4,
                                     bos_token_id=2, eos_token_id=1)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(directory)
    return model


def _prompts(n):
    rng = random.Random(1)
    return [[rng.randrange(3, 1000) for _ in range(rng.randrange(8, 65))] for _ in range(n)]


def _hf(model, device, prompts, new_tokens):
    import torch
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
            out.append(tokens.cpu()[0, len(p):].tolist())
    return out


def child(runtime, n, new_tokens):
    import torch
    on_tpu = runtime.endswith("tpu")
    if on_tpu:
        import torchtpu
    prompts = _prompts(n)
    with tempfile.TemporaryDirectory() as directory:
        model = _model(directory)
        start = time.perf_counter()
        if runtime == "vllm-tpu":
            os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_NO_USAGE_STATS="1", VLLM_PLUGINS="torchtpu")
            import vllm
            llm = vllm.LLM(model=directory, skip_tokenizer_init=True, dtype="float32", max_model_len=256,
                           max_num_seqs=16, max_num_batched_tokens=512, kv_cache_memory_bytes=1 << 26)

            def generate(tokens):
                params = vllm.SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True,
                                             detokenize=False)
                outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
                return [list(o.outputs[0].token_ids) for o in outs]
        else:
            model = model.to("tpu" if on_tpu else "cpu")

            def generate(tokens):
                return _hf(model, "tpu" if on_tpu else "cpu", prompts, tokens)
        startup = time.perf_counter() - start
        start = time.perf_counter()
        generate(1)
        first_token = time.perf_counter() - start
        compiles = torchtpu.metrics.counters()["compiles"] if on_tpu else None
        start = time.perf_counter()
        tokens = generate(new_tokens)
        seconds = time.perf_counter() - start
        if on_tpu:
            compiles = torchtpu.metrics.counters()["compiles"] - compiles
    return {"startup": startup, "first_token": first_token, "seconds": seconds, "compiles": compiles,
            "tokens": tokens, "generated": n * new_tokens}


def table(results):
    reference = results.get("hf-cpu", {})
    rows = ["| runtime | start-up s | first token s | batch s | tokens/s | vs hf-cpu | XLA compiles | tokens as hf-cpu |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for runtime, r in results.items():
        if "error" in r:
            rows.append(f"| {runtime} | error: {r['error']} | | | | | | |")
            continue
        ratio = f"{reference['seconds'] / r['seconds']:.2f}×" if "seconds" in reference else "—"
        same = "—" if runtime == "hf-cpu" or "tokens" not in reference else ("yes" if r["tokens"] == reference["tokens"] else "NO")
        compiles = "—" if r["compiles"] is None else r["compiles"]
        rows.append(f"| {runtime} | {r['startup']:.1f} | {r['first_token']:.2f} | {r['seconds']:.2f} | "
                    f"{r['generated'] / r['seconds']:.0f} | {ratio} | {compiles} | {same} |")
    return "\n".join(rows)


def main():
    def options(ap):
        ap.add_argument("--prompts", type=int, default=16)
        ap.add_argument("--new-tokens", type=int, default=32)
    args = fresh_process.command_line(__doc__, RUNTIMES, options)
    if args.child:
        print(json.dumps(child(args.child, args.prompts, args.new_tokens)))
        return
    results = fresh_process.run_all(__file__, args.runtimes, ["--prompts", str(args.prompts), "--new-tokens",
                                                              str(args.new_tokens)], lambda r: f"{r['seconds']:.2f} s")
    print(table(results))
    fresh_process.save(results, args.json)


if __name__ == "__main__":
    main()
