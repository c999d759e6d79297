"""vLLM on tpu through torchtpu's platform plugin (python/torchtpu/vllm): greedy outputs equal Hugging
Face's on CPU for the same weights, continuous batching, seeded sampling, refusals by name, and no new
model program for new prompt lengths. Models are built from configs and saved locally."""

import gc
import json
import os
import shutil

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_PLUGINS", "torchtpu")

import pytest  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM, PreTrainedTokenizerFast)

import torchtpu  # noqa: E402

vllm = pytest.importorskip("vllm", reason="vLLM is installed by scripts/setup.sh (requirements-vllm.txt)")

VOCAB = 384
NEW_TOKENS = 12
# prompts of different lengths; the last two share a 20-token prefix (a prefix-cache hit: the second
# one attends to keys it did not compute)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(30, 61)), list(range(100, 120)) + [7, 8],
           list(range(100, 120)) + [9, 10, 11]]


def _save(model, directory):
    model.save_pretrained(directory)
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", eos_token="w1", bos_token="w2",
                            pad_token="w0").save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    torch.manual_seed(0)
    # initializer_range 0.3: a random model whose greedy tokens vary (0.02 repeats one token)
    common = dict(vocab_size=VOCAB, eos_token_id=1, bos_token_id=2, initializer_range=0.3)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_positions=256, n_embd=64, n_layer=2, n_head=4, **common))
    llama = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=256, **common))
    return {"gpt2": _save(gpt2, tmp_path_factory.mktemp("gpt2")),
            "llama": _save(llama, tmp_path_factory.mktemp("llama"))}


def _llm(directory, **options):
    # PROMPTS hold 84 tokens: with 64 a step, a prompt arrives in two chunks (chunked prefill, the
    # second chunk attending to the first's keys in the cache)
    settings = dict(model=directory, dtype="float32", kv_cache_memory_bytes=1 << 24, max_model_len=128,
                    max_num_seqs=8, max_num_batched_tokens=64)
    return vllm.LLM(**(settings | options))


_engine = {}


@pytest.fixture(scope="module", autouse=True)
def _engines_end_with_the_module():
    yield
    _engine.clear()
    gc.collect()


def _shared_llm(directory):
    """One engine per model for the tests that only generate (an engine starts in 10-20 s, most of
    it the warm-up); the previous model's engine goes first, so one is alive at a time."""
    if directory not in _engine:
        _engine.clear()
        gc.collect()
        _engine[directory] = _llm(directory)
    return _engine[directory]


def _hf_greedy(directory, prompt, new_tokens=NEW_TOKENS):
    model = AutoModelForCausalLM.from_pretrained(directory)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False)
    return out[0, len(prompt):].tolist()


def _tokens(outputs):
    return [list(o.outputs[0].token_ids) for o in outputs]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_outputs_equal_hugging_face_on_cpu(model_dirs, name, no_fallbacks):
    llm = _shared_llm(model_dirs[name])
    greedy = vllm.SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
    got = _tokens(llm.generate([{"prompt_token_ids": p} for p in PROMPTS], greedy, use_tqdm=False))
    assert got == [_hf_greedy(model_dirs[name], p) for p in PROMPTS]

    # new prompt lengths, and a new number of prompts, in the buckets seen: the engine's programs
    # (input preparation, the model, paged attention, logits, sampling) are all compiled already
    programs = len(torchtpu.cache.stats()["compiles"])
    prompts = [[40, 41], list(range(200, 213)), [7] * 21, [3, 4, 5, 6]]
    got = _tokens(llm.generate([{"prompt_token_ids": p} for p in prompts], greedy, use_tqdm=False))
    assert got == [_hf_greedy(model_dirs[name], p) for p in prompts]
    assert torchtpu.cache.stats()["compiles"][programs:] == []


def test_requests_that_arrive_while_others_decode_get_the_tokens_they_get_alone(model_dirs):
    engine = _shared_llm(model_dirs["llama"]).llm_engine
    greedy = vllm.SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
    done = {}
    engine.add_request("first", {"prompt_token_ids": PROMPTS[2]}, greedy)
    for step in range(40):
        if step == 3:  # the first request is decoding: two more join it
            engine.add_request("second", {"prompt_token_ids": PROMPTS[0]}, greedy)
            engine.add_request("third", {"prompt_token_ids": PROMPTS[3]}, greedy)
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.outputs[0].token_ids)
        if len(done) == 3:
            break
    assert done == {"first": _hf_greedy(model_dirs["llama"], PROMPTS[2]),
                    "second": _hf_greedy(model_dirs["llama"], PROMPTS[0]),
                    "third": _hf_greedy(model_dirs["llama"], PROMPTS[3])}


def test_sampling_with_seeds_temperature_top_k_and_top_p(model_dirs):
    llm = _shared_llm(model_dirs["gpt2"])
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]

    def sample(**params):
        return _tokens(llm.generate(prompts, vllm.SamplingParams(max_tokens=8, **params), use_tqdm=False))
    seeded = sample(temperature=1.0, top_p=0.9, seed=11)
    assert seeded == sample(temperature=1.0, top_p=0.9, seed=11)  # one generator per seeded request
    assert seeded != sample(temperature=1.0, top_p=0.9, seed=12)
    # top-k 1 keeps the most likely token only: greedy's tokens, at any temperature
    assert sample(temperature=0.8, top_k=1, seed=3) == [_hf_greedy(model_dirs["gpt2"], p, 8) for p in PROMPTS[:3]]
    assert all(0 <= t < VOCAB for row in seeded for t in row)


def test_penalties_masks_and_logits_processors_sample_as_asked(model_dirs):
    """Parameters the sampler pads to the requests' bucket (penalties, allowed tokens, logit bias)
    and min-p, which samples at the exact number of requests."""
    llm = _shared_llm(model_dirs["gpt2"])
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]

    def sample(**params):
        return _tokens(llm.generate(prompts, vllm.SamplingParams(max_tokens=6, **params), use_tqdm=False))
    model = AutoModelForCausalLM.from_pretrained(model_dirs["gpt2"])
    assert sample(temperature=0, repetition_penalty=1.3) == [
        model.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False, repetition_penalty=1.3)[0, len(p):].tolist()
        for p in PROMPTS[:3]]
    assert {t for row in sample(temperature=0, allowed_token_ids=[5, 6, 7]) for t in row} <= {5, 6, 7}
    assert sample(temperature=0, logit_bias={9: 100.0}) == [[9] * 6] * 3
    min_p = dict(temperature=0.7, min_p=0.1, seed=2)
    assert sample(**min_p) == sample(**min_p)
    penalized = dict(temperature=0.7, presence_penalty=0.5, frequency_penalty=0.3, seed=1)
    assert sample(**penalized) == sample(**penalized)


def test_logprobs_equal_hugging_faces(model_dirs):
    """Log-probabilities (vLLM computes them in a helper compiled with the platform's
    simple_compile_backend, torch.compile(backend="tpu")) equal Hugging Face's on CPU."""
    llm = _shared_llm(model_dirs["gpt2"])
    prompt = PROMPTS[2]
    out = llm.generate([{"prompt_token_ids": prompt}],
                       vllm.SamplingParams(max_tokens=4, temperature=0, logprobs=3, ignore_eos=True),
                       use_tqdm=False)[0].outputs[0]
    model = AutoModelForCausalLM.from_pretrained(model_dirs["gpt2"])
    with torch.no_grad():
        logits = model(torch.tensor([prompt + list(out.token_ids)])).logits[0, len(prompt) - 1:-1]
    expected = torch.log_softmax(logits, -1)
    for step, (token, top) in enumerate(zip(out.token_ids, out.logprobs)):
        assert set(top) >= set(expected[step].topk(3).indices.tolist())
        for t, entry in top.items():
            assert abs(entry.logprob - expected[step, t].item()) < 1e-4, (step, t)


def test_tensor_parallel_across_two_devices_gives_hugging_faces_tokens(model_dirs, monkeypatch):
    """tensor_parallel_size=2: vLLM's executor spawns a worker process per device (each sees two
    devices of the XLA CPU plugin and takes its rank's), each worker holds half of the heads and of
    the MLP, and the partial results are all-reduced through torchtpu's c10d backend."""
    monkeypatch.setenv("TORCHTPU_NUM_CPU_DEVICES", "2")
    llm = _llm(model_dirs["llama"], tensor_parallel_size=2)
    try:
        greedy = vllm.SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
        got = _tokens(llm.generate([{"prompt_token_ids": p} for p in PROMPTS[:4]], greedy, use_tqdm=False))
        assert got == [_hf_greedy(model_dirs["llama"], p) for p in PROMPTS[:4]]
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.parametrize("options, feature", [(dict(enable_lora=True), "LoRA"),
                                              (dict(quantization="fp8"), "fp8")])
def test_unsupported_features_are_refused_by_name(model_dirs, options, feature):
    with pytest.raises(Exception, match=feature):
        _llm(model_dirs["gpt2"], **options)


def test_an_unknown_architecture_is_refused_by_name(model_dirs, tmp_path):
    directory = shutil.copytree(model_dirs["gpt2"], tmp_path / "made_up")
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = ["MadeUpForCausalLM"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(Exception, match="MadeUpForCausalLM"):
        _llm(str(directory))


def test_the_platform_is_torchtpus():
    from vllm.platforms import current_platform
    assert type(current_platform).__name__ == "TpuPlatform" and current_platform.device_type == "tpu"


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_serve_answers_an_http_completion_request(model_dirs, tmp_path):
    """`vllm serve DIR`, the OpenAI-compatible server (its engine in a process of its own), asked
    by an HTTP client: the completion's tokens are Hugging Face's greedy ones."""
    import signal
    import subprocess
    import sys
    import time

    import requests

    port = _free_port()
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dirs["gpt2"], "--port", str(port),
         "--dtype", "float32", "--max-model-len", "128", "--max-num-seqs", "8", "--max-num-batched-tokens", "128",
         "--kv-cache-memory-bytes", str(1 << 24)],
        env=env, stdout=open(tmp_path / "serve.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "vllm serve did not start in 300 s"
            time.sleep(1)
        reply = requests.post(f"http://127.0.0.1:{port}/v1/completions", timeout=120, json={
            "model": model_dirs["gpt2"], "prompt": "w5 w6 w7 w8", "max_tokens": NEW_TOKENS, "temperature": 0,
            "ignore_eos": True})
        assert reply.ok, reply.text
        text = reply.json()["choices"][0]["text"]
        assert [int(w[1:]) for w in text.split()] == _hf_greedy(model_dirs["gpt2"], [5, 6, 7, 8])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
