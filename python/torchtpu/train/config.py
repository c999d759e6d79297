"""The trainer's configuration: a YAML file checked against this schema before anything runs.

An unknown key or a value of the wrong type is a :class:`ConfigError` that names the key, its file
and what was expected, so a typo never silently falls back to a default.
"""

from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ConfigError(ValueError):
    """A configuration that does not match the schema; the message names each bad key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelConfig(_Section):
    # A Hugging Face architecture built from a config, never downloaded: either a model type and
    # its config values (`type: gpt2`, `config: {n_layer: 4}`), or a local folder with config.json.
    type: str = "gpt2"
    config: dict[str, Any] = Field(default_factory=dict)
    path: Optional[str] = None


class DataConfig(_Section):
    # "python-docstrings" or "python-stdlib": the Python standard library's docstrings or source
    # on this machine; otherwise a text file, or a glob of them. Text is tokenized as bytes.
    text: str = "python-docstrings"
    max_bytes: int = Field(4_000_000, gt=0)
    seq_len: int = Field(128, gt=1)
    batch_size: int = Field(16, gt=0)
    eval_fraction: float = Field(0.05, gt=0, lt=1)


class OptimizerConfig(_Section):
    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = Field(0.0, ge=0)


class ScheduleConfig(_Section):
    warmup_steps: int = Field(0, ge=0)
    decay: Literal["constant", "cosine", "linear"] = "cosine"
    min_lr_ratio: float = Field(0.1, ge=0, le=1)


class TrainConfig(_Section):
    steps: int = Field(gt=0)
    grad_accum: int = Field(1, gt=0)
    clip_grad_norm: Optional[float] = Field(None, gt=0)
    mode: Literal["strict", "fused", "lazy", "debug"] = "fused"
    compile: bool = False  # torch.compile(model, backend="tpu") on top of the eager mode
    precision: Literal["fp32", "bf16-mixed", "fp16-mixed"] = "fp32"
    strategy: Literal["single", "ddp", "fsdp"] = "single"
    eval_every: int = Field(100, gt=0)
    eval_batches: int = Field(4, gt=0)
    log_every: int = Field(10, gt=0)
    checkpoint_every: Optional[int] = Field(None, gt=0)


class SampleConfig(_Section):
    prompt: str = "The "
    tokens: int = Field(200, ge=0)
    temperature: float = Field(0.8, gt=0)
    top_k: Optional[int] = Field(None, gt=0)


class LoggingConfig(_Section):
    csv: bool = True
    tensorboard: bool = True
    wandb: bool = False  # offline runs in run_dir, when wandb is installed
    progress_bar: bool = True
    plot: bool = True


class Config(_Section):
    run_dir: str = "runs/default"
    device: str = "tpu"
    seed: int = 0
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    train: TrainConfig
    sample: SampleConfig = Field(default_factory=SampleConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)


def load_config(path, overrides=()) -> Config:
    """The configuration in the YAML file ``path``, with ``overrides`` ("train.steps=10", values
    parsed as YAML) applied on top."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top, got {type(raw).__name__}")
    for override in overrides:
        _apply_override(raw, override)
    return parse_config(raw, source=str(path))


def parse_config(raw: dict, source="config") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{source}: " + "; ".join(_describe(err) for err in e.errors())) from None


def _describe(error) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        section = _section_at(error["loc"][:-1])
        known = ", ".join(section.model_fields) if section else ""
        return f"unknown key '{key}'" + (f" (known here: {known})" if known else "")
    if error["type"] == "missing":
        return f"missing key '{key}'"
    return f"'{key}': {error['msg']} (got {error['input']!r})"


def _section_at(loc):
    section = Config
    for part in loc:
        field = section.model_fields.get(part) if isinstance(part, str) else None
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        section = annotation
    return section


def _apply_override(raw: dict, override: str) -> None:
    key, sep, value = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override '{override}': expected KEY=VALUE, e.g. train.steps=100")
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{override}': '{part}' is not a section")
    node[leaf] = yaml.safe_load(value)
