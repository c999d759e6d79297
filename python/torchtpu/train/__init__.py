"""A small trainer driven by a config file: ``python -m torchtpu.train CONFIG.yaml`` (or the
``torchtpu-train`` script). See docs/training.md."""

from .config import Config, ConfigError, load_config, parse_config
from .trainer import Trainer

__all__ = ["Config", "ConfigError", "Trainer", "load_config", "parse_config", "main"]


def main(argv=None) -> int:
    from .cli import main as cli_main
    return cli_main(argv)
