"""The training loop behind ``python -m torchtpu.train CONFIG.yaml``.

Every part a run is made of is a method, so a project changes one part by subclassing::

    class MyTrainer(Trainer):
        def build_model(self):
            return MyModel()
        def loss(self, model, batch):
            return model(batch).loss

Exact resume: batches are a function of the step (corpus.batch_seed), and the checkpoint holds the
model, optimizer, schedule, loss scaler and both RNG states, so N steps equal N/2 steps, a
restart, and N/2 more.
"""

import contextlib
import math
import os
import shutil
import time
from pathlib import Path

import torch

from .. import data as device_data
from ..modes import set_eager_mode, sync
from . import corpus, models
from .config import Config
from .distribution import Distribution
from .logs import RunLog, read_history

CHECKPOINT = "checkpoint.pt"


class Trainer:
    def __init__(self, config: Config):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.dist = Distribution.from_environment(config.train.strategy, config.device)
        self.device = self.dist.device
        self.tokens = None  # (train, eval) token tensors of the default corpus, read on first use

    # -- the parts of a run (override these) ---------------------------------------------------

    def build_model(self) -> torch.nn.Module:
        data = self.config.data
        return models.build_model(self.config.model, corpus.VOCAB_SIZE, data.seq_len)

    def build_optimizer(self, model) -> torch.optim.Optimizer:
        o = self.config.optimizer
        params = [p for p in model.parameters() if p.requires_grad]
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
        cls = torch.optim.AdamW if o.name == "adamw" else torch.optim.Adam
        return cls(params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)

    def build_schedule(self, optimizer):
        """Linear warmup, then constant, cosine or linear decay to ``min_lr_ratio`` of the peak."""
        s, steps = self.config.schedule, self.config.train.steps

        def factor(step):
            if step < s.warmup_steps:
                return (step + 1) / s.warmup_steps
            progress = (step - s.warmup_steps) / max(1, steps - s.warmup_steps)
            decay = {"constant": 1.0, "linear": 1 - progress,
                     "cosine": 0.5 * (1 + math.cos(math.pi * progress))}[s.decay]
            return s.min_lr_ratio + (1 - s.min_lr_ratio) * decay

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def train_batch(self, step: int, micro: int):
        """The host batch of micro-batch ``micro`` of optimizer step ``step`` on this rank."""
        d = self.config.data
        seed = corpus.batch_seed(self.config.seed, step, micro, self.dist.rank)
        return corpus.batch(self._corpus()[0], d.seq_len, d.batch_size, seed)

    def eval_batches(self):
        d = self.config.data
        for i in range(self.config.train.eval_batches):
            seed = corpus.batch_seed(self.config.seed, -1, i, self.dist.rank)
            yield corpus.batch(self._corpus()[1], d.seq_len, d.batch_size, seed)

    def loss(self, model, batch) -> torch.Tensor:
        return models.causal_lm_loss(model, batch)

    def tokens_in(self, batch) -> int:
        return batch.numel() if isinstance(batch, torch.Tensor) else 0

    def sample(self, model) -> str | None:
        """Text the model writes after the configured prompt (None when ``sample.tokens`` is 0)."""
        s = self.config.sample
        if s.tokens == 0:
            return None
        generator = torch.Generator().manual_seed(self.config.seed)
        ids = models.sample(model, corpus.encode(s.prompt), s.tokens, self.config.data.seq_len,
                            s.temperature, s.top_k, generator)
        return s.prompt + corpus.decode(ids)

    # -- the run -------------------------------------------------------------------------------

    def fit(self, resume: bool = False, stop_after: int | None = None) -> dict:
        """Trains for ``train.steps`` optimizer steps (from the checkpoint when ``resume`` and one
        exists); returns the last logged values, and the sample and plot path. ``stop_after``
        ends this process's share after that many steps with a checkpoint (a job time limit),
        and a later ``fit(resume=True)`` continues exactly where it stopped."""
        c = self.config
        set_eager_mode(c.train.mode)
        torch.manual_seed(c.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        wrapped = self.dist.wrap(self.build_model().to(self.device))
        optimizer = self.build_optimizer(wrapped)  # after wrapping: FSDP replaces the parameters
        schedule = self.build_schedule(optimizer)
        scaler = torch.amp.GradScaler(self.device.type, enabled=c.train.precision == "fp16-mixed")
        start = self._resume(wrapped, optimizer, schedule, scaler) if resume else 0
        if start == 0:
            self._clear_logs()
        step_model = torch.compile(wrapped, backend="tpu") if c.train.compile else wrapped
        log = RunLog(self.run_dir, c, c.train.steps, start, active=self.dist.is_main)
        try:
            end = c.train.steps if stop_after is None else min(c.train.steps, start + stop_after)
            last = self._loop(step_model, wrapped, optimizer, schedule, scaler, log, start, end)
            result = {**last, "step": end}
            if end < c.train.steps:
                return result
            log.end_progress()
            if self.dist.is_main or self.dist.strategy == "fsdp":  # FSDP: every rank's shards take part
                result["sample"] = self.sample(self.dist.unwrap(wrapped).eval())
            if self.dist.is_main:
                if result["sample"] is not None:
                    log.write(f"\nsample after {c.train.steps} steps:\n{result['sample']}\n")
                result["plot"] = log.plot(self.run_dir / "loss.png", self._history(log))
            return result
        finally:
            log.close()

    def _loop(self, step_model, wrapped, optimizer, schedule, scaler, log, start, end):
        c = self.config.train
        host_batches = self._host_batches(start, end)
        batches = iter(device_data.DeviceLoader(host_batches, self.device, prefetch=2))
        meter, last = _Throughput(), {}
        for step in range(start, end):
            for micro in range(c.grad_accum):
                batch = next(batches)
                meter.add(self._forward_backward(step_model, wrapped, batch, scaler, micro),
                          self.tokens_in(batch) * self.dist.world_size)
            self._optimizer_step(wrapped, optimizer, scaler)
            schedule.step()
            if c.mode == "lazy":
                sync()
            done = step + 1
            if done % c.log_every == 0 or done == end:
                loss, tokens_per_s = meter.read(self.dist)
                last = {"train/loss": loss, "train/lr": schedule.get_last_lr()[0],
                        "train/tokens_per_s": tokens_per_s}
                log.log(done, last)
            if last:
                log.progress(done, {"loss": last["train/loss"], "tok/s": last["train/tokens_per_s"]})
            with meter.paused():  # evaluation and checkpoints do not count against tokens/s
                if done % c.eval_every == 0 or done == c.steps:
                    last["eval/loss"] = self.evaluate(wrapped)
                    log.log(done, {"eval/loss": last["eval/loss"]})
                if (c.checkpoint_every and done % c.checkpoint_every == 0) or done == end:
                    self.save_checkpoint(wrapped, optimizer, schedule, scaler, done)
        return last

    def _forward_backward(self, step_model, wrapped, batch, scaler, micro):
        c = self.config.train
        # Gradients are reduced across ranks once per optimizer step, at the last micro-batch.
        quiet = micro < c.grad_accum - 1 and hasattr(wrapped, "no_sync")
        with (wrapped.no_sync() if quiet else contextlib.nullcontext()), self._autocast():
            loss = self.loss(step_model, batch)
        scaler.scale(loss / c.grad_accum).backward()
        return loss.detach().float()

    def _optimizer_step(self, wrapped, optimizer, scaler):
        clip = self.config.train.clip_grad_norm
        if clip is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def _autocast(self):
        precision = self.config.train.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    @torch.no_grad()
    def evaluate(self, wrapped) -> float:
        """Mean loss over the held-out batches (the same batches at every evaluation)."""
        model = self.dist.unwrap(wrapped)
        model.eval()
        try:
            batches = (device_data.to_device(b, self.device) for b in self.eval_batches())
            losses = [self.loss(model, b).float() for b in batches]
            return self.dist.mean(torch.stack(losses).mean()).item()
        finally:
            model.train()

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, wrapped, optimizer, schedule, scaler, step: int) -> None:
        """Writes ``run_dir/checkpoint.pt`` atomically (a crash mid-write keeps the previous one).
        Tensors are saved from the device; ``torch.load(..., map_location="cpu")`` reads the file
        on any machine, torchtpu installed or not."""
        model_state, optimizer_state = self.dist.state_dicts(wrapped, optimizer)
        if not self.dist.is_main:
            return
        state = {"step": step, "model": model_state, "optimizer": optimizer_state,
                 "schedule": schedule.state_dict(), "scaler": scaler.state_dict(),
                 "rng": {"cpu": torch.get_rng_state(), "device": _device_rng_state(self.device)},
                 "config": self.config.model_dump()}
        path = self.run_dir / CHECKPOINT
        partial = path.with_suffix(".partial")
        torch.save(state, partial)
        os.replace(partial, path)

    def _resume(self, wrapped, optimizer, schedule, scaler) -> int:
        path = self.run_dir / CHECKPOINT
        if not path.exists():
            return 0
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.dist.load_state_dicts(wrapped, optimizer, state["model"], state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng"]["cpu"])
        _set_device_rng_state(self.device, state["rng"]["device"])
        return state["step"]

    # -- helpers -------------------------------------------------------------------------------

    def _host_batches(self, start, end):
        for step in range(start, end):
            for micro in range(self.config.train.grad_accum):
                yield self.train_batch(step, micro)

    def _corpus(self):
        if self.tokens is None:
            d = self.config.data
            self.tokens = corpus.split(corpus.read_corpus(d.text, d.max_bytes), d.eval_fraction)
        return self.tokens

    def _clear_logs(self):
        # A fresh run must not append to the curves of an earlier one in the same folder.
        if self.dist.is_main:
            for name in ("metrics.csv", "loss.png"):
                (self.run_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.run_dir / "tensorboard", ignore_errors=True)

    def _history(self, log):
        csv_path = self.run_dir / "metrics.csv"
        return read_history(csv_path) if csv_path.exists() else log.history


def _device_rng_state(device):
    return torch.get_device_module(device.type).get_rng_state(device) if device.type != "cpu" else None


def _set_device_rng_state(device, state):
    if state is not None and device.type != "cpu":
        torch.get_device_module(device.type).set_rng_state(state, device)


class _Throughput:
    """The mean loss and tokens per second since the last read. Losses stay on the device until
    read, so steps between logs never wait for the host."""

    def __init__(self):
        self.total, self.count, self.tokens, self.excluded = None, 0, 0, 0.0
        self.clock = time.perf_counter()

    def add(self, loss, tokens):
        self.total = loss if self.total is None else self.total + loss
        self.count, self.tokens = self.count + 1, self.tokens + tokens

    def read(self, dist):
        loss = dist.mean(self.total / self.count).item()  # waits for the steps being timed
        now = time.perf_counter()
        tokens_per_s = self.tokens / max(now - self.clock - self.excluded, 1e-9)
        self.total, self.count, self.tokens, self.excluded, self.clock = None, 0, 0, 0.0, now
        return loss, tokens_per_s

    @contextlib.contextmanager
    def paused(self):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - began
