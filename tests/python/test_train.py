"""The config-driven trainer (torchtpu.train): config errors, parity with CPU, exact resume, logs,
the command line, and checkpoints that load without torchtpu."""

import subprocess
import sys

import pytest
import torch
import yaml

import torchtpu
from torchtpu.train import ConfigError, Trainer, load_config, parse_config

TINY = {
    # No dropout: the device's random stream differs from the CPU's, so masks would differ.
    "model": {"type": "gpt2", "config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "resid_pdrop": 0.0,
                                         "embd_pdrop": 0.0, "attn_pdrop": 0.0}},
    "data": {"seq_len": 32, "batch_size": 4, "max_bytes": 200_000},
    "optimizer": {"name": "adamw", "lr": 3e-3},
    "schedule": {"warmup_steps": 2},
    "train": {"steps": 6, "mode": "strict", "log_every": 1, "eval_every": 3, "eval_batches": 2,
              "clip_grad_norm": 1.0},
    "sample": {"tokens": 8},
    "logging": {"progress_bar": False},
}


def tiny(tmp_path, name="run", **sections):
    raw = yaml.safe_load(yaml.safe_dump(TINY))  # a deep copy
    raw["run_dir"] = str(tmp_path / name)
    for section, values in sections.items():
        raw.setdefault(section, {})
        if isinstance(values, dict):
            raw[section].update(values)
        else:
            raw[section] = values
    return parse_config(raw)


def losses(run_dir, name="train/loss"):
    from torchtpu.train.logs import read_history
    return [v for _, v in read_history(run_dir / "metrics.csv")[name]]


# -- configuration errors name the key ---------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"train": {"stpes": 3}}, "unknown key 'train.stpes'"),
    ({"train": {"steps": "ten"}}, "'train.steps': Input should be a valid integer"),
    ({"optimizer": {"name": "lamb"}}, "'optimizer.name'"),
    ({"modle": {}}, "unknown key 'modle'"),
    ({"data": {"seq_len": 1}}, "'data.seq_len'"),
])
def test_config_errors_name_the_key(change, message):
    raw = yaml.safe_load(yaml.safe_dump(TINY))
    for section, values in change.items():
        raw.setdefault(section, {}).update(values)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_config(raw)


def test_config_missing_steps_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="missing key 'train.steps'"):
        parse_config({"train": {}})
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"train": {"steps": 3}}))
    assert load_config(good, ["train.steps=7", "optimizer.lr=0.5"]).train.steps == 7
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(good, ["train.steps"])


def test_unknown_key_is_listed_with_the_known_ones():
    with pytest.raises(ConfigError) as e:
        parse_config({"train": {"steps": 1, "lr": 0.1}})
    assert "unknown key 'train.lr'" in str(e.value) and "grad_accum" in str(e.value)


# -- training matches CPU PyTorch --------------------------------------------------------------

def test_trains_like_cpu_with_no_fallbacks(tmp_path):
    before = torchtpu.metrics.cpu_fallbacks()
    tpu = Trainer(tiny(tmp_path, "tpu")).fit()
    assert torchtpu.metrics.cpu_fallbacks() == before
    cpu = Trainer(tiny(tmp_path, "cpu", device="cpu")).fit()
    torch.testing.assert_close(losses(tmp_path / "tpu"), losses(tmp_path / "cpu"), rtol=1e-4, atol=1e-5)
    assert tpu["eval/loss"] == pytest.approx(cpu["eval/loss"], rel=1e-4)
    assert losses(tmp_path / "tpu")[-1] < losses(tmp_path / "tpu")[0]
    assert isinstance(tpu["sample"], str) and tpu["sample"].startswith("The ")


@pytest.mark.parametrize("mode", ["fused", "lazy"])
def test_modes_and_gradient_accumulation_match_cpu(tmp_path, mode):
    train = {"mode": mode, "grad_accum": 2, "steps": 4}
    Trainer(tiny(tmp_path, mode, train=train, sample={"tokens": 0})).fit()
    Trainer(tiny(tmp_path, "cpu", device="cpu", train=train, sample={"tokens": 0})).fit()
    torch.testing.assert_close(losses(tmp_path / mode), losses(tmp_path / "cpu"), rtol=1e-4, atol=1e-5)


def test_bf16_autocast_trains(tmp_path):
    result = Trainer(tiny(tmp_path, train={"precision": "bf16-mixed"}, sample={"tokens": 0})).fit()
    history = losses(tmp_path / "run")
    assert all(torch.isfinite(torch.tensor(history))) and history[-1] < history[0]
    assert result["train/loss"] == history[-1]


# -- exact resume ------------------------------------------------------------------------------

def test_resume_is_exact(tmp_path):
    """N steps equal N/2 steps, a new process's worth of state, and N/2 more: same parameters,
    optimizer state and losses, bit for bit (dropout on, so the device RNG state matters)."""
    dropout = {"config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "resid_pdrop": 0.1}}
    Trainer(tiny(tmp_path, "whole", model=dropout)).fit()
    first = Trainer(tiny(tmp_path, "split", model=dropout)).fit(stop_after=3)
    assert first["step"] == 3 and "sample" not in first
    torch.manual_seed(1234)  # a different process would start from other RNG states
    Trainer(tiny(tmp_path, "split", model=dropout)).fit(resume=True)
    whole = torch.load(tmp_path / "whole" / "checkpoint.pt", map_location="cpu")
    split = torch.load(tmp_path / "split" / "checkpoint.pt", map_location="cpu")
    assert whole["step"] == split["step"] == 6
    for name, value in whole["model"].items():
        assert torch.equal(value, split["model"][name]), name
    for index, state in whole["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, split["optimizer"]["state"][index][key]), (index, key)
    assert losses(tmp_path / "whole") == losses(tmp_path / "split")


# -- logs, plot, command line, checkpoints -----------------------------------------------------

def test_logs_and_plot(tmp_path):
    result = Trainer(tiny(tmp_path, logging={"progress_bar": False, "tensorboard": True})).fit()
    run = tmp_path / "run"
    assert len(losses(run)) == 6 and len(losses(run, "eval/loss")) == 2
    assert result["plot"] == run / "loss.png" and run.joinpath("loss.png").stat().st_size > 1000
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_subclass_replaces_the_model_and_data(tmp_path):
    class Regression(Trainer):
        def build_model(self):
            return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def train_batch(self, step, micro):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(8, 4, generator=g)
            return x, x.sum(1, keepdim=True)

        def eval_batches(self):
            return [self.train_batch(10_000, 0)]

        def loss(self, model, batch):
            x, y = (t.to(self.device) for t in batch)
            return torch.nn.functional.mse_loss(model(x), y)

        def tokens_in(self, batch):
            return len(batch[0])

        def sample(self, model):
            return None

    config = dict(train={"steps": 12, "eval_every": 12}, optimizer={"name": "sgd", "lr": 0.05})
    Regression(tiny(tmp_path, "tpu", **config)).fit()
    Regression(tiny(tmp_path, "cpu", device="cpu", **config)).fit()
    history = losses(tmp_path / "tpu")
    torch.testing.assert_close(history, losses(tmp_path / "cpu"), rtol=1e-5, atol=1e-6)
    assert history[-1] < history[0] / 2


def run_cli(*args, env_extra=None):
    import os
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "torchtpu.train", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_command_line_and_a_checkpoint_that_loads_without_torchtpu(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "cli")}))
    done = run_cli(str(config), "--set", "train.steps=2", "--set", "train.eval_every=2")
    assert done.returncode == 0, done.stderr
    assert f"loss plot: {tmp_path / 'cli' / 'loss.png'}" in done.stdout
    assert "sample after 2 steps" in done.stdout + done.stderr
    check = ("import sys, torch; s = torch.load(sys.argv[1], map_location='cpu', weights_only=True); "
             "assert 'torchtpu' not in sys.modules; "
             "assert all(t.device.type == 'cpu' for t in s['model'].values()); print(s['step'])")
    loaded = subprocess.run([sys.executable, "-c", check, str(tmp_path / "cli" / "checkpoint.pt")],
                            capture_output=True, text=True, timeout=120,
                            env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": "/usr/bin:/bin"})
    assert loaded.returncode == 0 and loaded.stdout.strip() == "2", loaded.stderr


def test_command_line_config_error_exits_2(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(yaml.safe_dump({"train": {"steps": 2, "evel_every": 1}}))
    done = run_cli(str(config))
    assert done.returncode == 2
    assert "unknown key 'train.evel_every'" in done.stderr and "Traceback" not in done.stderr


def test_ddp_and_fsdp_under_torchrun_match_cpu(tmp_path):
    """Two ranks under torchrun: DDP on tpu (tpu_dist) gives the losses DDP on CPU (gloo) gives,
    and FSDP2 on tpu the same again; gradient accumulation uses no_sync."""
    import os
    config = tmp_path / "tiny.yaml"
    raw = {**TINY, "train": {**TINY["train"], "steps": 3, "grad_accum": 2, "eval_every": 3},
           "sample": {"tokens": 2}}
    config.write_text(yaml.safe_dump(raw))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    runs = {"ddp": ("ddp", "tpu"), "ddp_cpu": ("ddp", "cpu"), "fsdp": ("fsdp", "tpu")}
    for name, (strategy, device) in runs.items():
        done = subprocess.run(
            [torchrun, "--standalone", "--nproc_per_node=2", "-m", "torchtpu.train", str(config),
             "--set", f"train.strategy={strategy}", "--set", f"device={device}",
             "--set", f"run_dir={tmp_path / name}"],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("ddp", "fsdp"):
        torch.testing.assert_close(losses(tmp_path / name), losses(tmp_path / "ddp_cpu"), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(losses(tmp_path / name, "eval/loss"),
                                   losses(tmp_path / "ddp_cpu", "eval/loss"), rtol=1e-4, atol=1e-5)


def test_example_configs_are_valid():
    from pathlib import Path
    configs = sorted((Path(__file__).resolve().parents[2] / "examples" / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        assert load_config(path).train.steps > 0


def test_local_config_folder_and_torch_compile_match_cpu(tmp_path):
    """model.path (a folder with config.json, as a downloaded model has) and train.compile
    (torch.compile(model, backend="tpu")) give the losses of the eager CPU run."""
    from transformers import GPT2Config
    folder = tmp_path / "tiny-gpt2"
    GPT2Config(vocab_size=256, n_positions=32, **TINY["model"]["config"]).save_pretrained(folder)
    model = {"type": "gpt2", "config": {}, "path": str(folder)}
    train = {"steps": 3, "eval_every": 3}
    runs_before = torchtpu.metrics.as_dict()["compiled_graph_runs"]
    Trainer(tiny(tmp_path, "compiled", model=model, train={**train, "compile": True}, sample={"tokens": 0})).fit()
    assert torchtpu.metrics.as_dict()["compiled_graph_runs"] > runs_before  # the steps ran as graphs
    Trainer(tiny(tmp_path, "cpu", device="cpu", model=model, train=train, sample={"tokens": 0})).fit()
    torch.testing.assert_close(losses(tmp_path / "compiled"), losses(tmp_path / "cpu"), rtol=1e-4, atol=1e-5)


def test_fp16_autocast_trains_with_a_device_grad_scaler(tmp_path):
    Trainer(tiny(tmp_path, train={"precision": "fp16-mixed"}, sample={"tokens": 0})).fit()
    history = losses(tmp_path / "run")
    assert all(torch.isfinite(torch.tensor(history))) and history[-1] < history[0]
    scaler = torch.load(tmp_path / "run" / "checkpoint.pt", map_location="cpu")["scaler"]
    assert scaler["scale"] > 0  # the scaler ran (an fp32 run saves an empty state)
