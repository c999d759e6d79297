"""Where a run's numbers go: a progress bar, CSV files, TensorBoard, W&B (offline) and a plot."""

import csv
import importlib.util
from pathlib import Path

from tqdm.auto import tqdm


class RunLog:
    """Records (step, name, value) points to every enabled sink. Only rank 0 of a distributed run
    writes; the others keep quiet."""

    def __init__(self, run_dir: Path, config, total_steps: int, first_step: int, active=True):
        self.run_dir, self.config, self.active = run_dir, config, active
        self.history: dict[str, list[tuple[int, float]]] = {}
        self._csv = self._tensorboard = self._wandb = self._bar = None
        if not active:
            return
        if config.logging.csv:
            self._csv = _CsvSink(run_dir / "metrics.csv")
        if config.logging.tensorboard and importlib.util.find_spec("tensorboard"):
            from torch.utils.tensorboard import SummaryWriter
            self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"))
        if config.logging.wandb and importlib.util.find_spec("wandb"):
            import wandb
            self._wandb = wandb.init(mode="offline", dir=str(run_dir), config=config.model_dump())
        if config.logging.progress_bar:
            self._bar = tqdm(total=total_steps, initial=first_step, unit="step", dynamic_ncols=True)

    def log(self, step: int, values: dict) -> None:
        for name, value in values.items():
            self.history.setdefault(name, []).append((step, value))
        if not self.active:
            return
        if self._csv:
            self._csv.write(step, values)
        if self._tensorboard:
            for name, value in values.items():
                self._tensorboard.add_scalar(name, value, step)
        if self._wandb:
            self._wandb.log(values, step=step)

    def progress(self, step: int, postfix: dict) -> None:
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)

    def end_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write(self, message: str) -> None:
        if not self.active:
            return
        (self._bar.write if self._bar is not None else print)(message)

    def close(self) -> None:
        self.end_progress()
        for sink in (self._csv, self._tensorboard):
            if sink is not None:
                sink.close()
        if self._wandb is not None:
            self._wandb.finish()

    def plot(self, path: Path, history: dict) -> Path | None:
        """Training and evaluation loss against the step, as a PNG."""
        if not (self.active and self.config.logging.plot):
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        for name, style in (("train/loss", "-"), ("eval/loss", "o-")):
            points = history.get(name, [])
            if points:
                ax.plot(*zip(*points), style, label=name, markersize=4)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per byte)")
        ax.set_title(f"{self.config.model.type} on {self.config.data.text}, {self.config.train.mode} mode")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


class _CsvSink:
    """One row per logged point (step, name, value): new metrics need no new columns, and a
    resumed run appends to the same file."""

    def __init__(self, path: Path):
        new = not path.exists()
        self._file = open(path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(["step", "name", "value"])

    def write(self, step, values):
        for name, value in values.items():
            self._writer.writerow([step, name, value])
        self._file.flush()

    def close(self):
        self._file.close()


def read_history(path: Path) -> dict[str, list[tuple[int, float]]]:
    """The points of a metrics.csv, by name: a resumed run plots its whole history."""
    history: dict[str, list[tuple[int, float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            history.setdefault(row["name"], []).append((int(row["step"]), float(row["value"])))
    return history
