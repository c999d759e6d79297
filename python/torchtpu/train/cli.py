"""The command line: ``torchtpu-train CONFIG.yaml [--set KEY=VALUE ...] [--resume]``."""

import argparse
import sys

from .config import ConfigError, load_config
from .trainer import Trainer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="torchtpu-train", description="Train a model from a config file.")
    parser.add_argument("config", help="a YAML file (see docs/training.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one value, e.g. --set train.steps=100 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from run_dir/checkpoint.pt when it exists")
    parser.add_argument("--stop-after", type=int, metavar="STEPS",
                        help="stop (with a checkpoint) after this many steps; --resume continues")
    parser.add_argument("--trainer", metavar="MODULE:CLASS",
                        help="a Trainer subclass to run instead of the default one")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"torchtpu-train: {e}", file=sys.stderr)
        return 2
    trainer_cls = _load_class(args.trainer) if args.trainer else Trainer
    result = trainer_cls(config).fit(resume=args.resume, stop_after=args.stop_after)
    if result.get("plot"):
        print(f"loss plot: {result['plot']}")
    return 0


def _load_class(spec: str):
    import importlib
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)
