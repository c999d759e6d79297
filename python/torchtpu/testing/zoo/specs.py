"""The zoo's registry (:class:`Spec`, ``MODELS``), the sweep's tolerances, and the batch pieces
every family shares (token ids, images)."""

from dataclasses import dataclass
from typing import Callable, Optional

LOSS_RTOL = 1e-5    # largest relative loss difference (any step) counted as parity
ACCURACY_FACTOR = 10  # traces: an op's tpu output is off when its error against CPU float64 is
                      # more than this many times CPU float32's error, plus:
TRACE_ATOL = 1e-5   #   two-run trace: this fraction of the output's magnitude
REPLAY_ATOL = 1e-6  #   replay (same inputs on both devices): this fraction of the output's magnitude
TRACE_TOL = 1e-3    # without a float64 reference: normalized difference at which the runs diverged
REPLAY_TOL = 1e-4   # without a float64 reference: normalized difference of a wrong tpu op
NOISE_FACTOR = 10   # beyond LOSS_RTOL, a loss still counts as equal when it is within this many
                    # times the model's own float32 noise (how far CPU runs in float64, or from
                    # weights moved by one rounding error, end up from CPU float32)
DRIFT_INPUT_TOL = 1e-4  # a divergence is amplified rounding (drift) when the op's inputs differed
                        # by less than this (normalized) between the runs
SNAPSHOT_NUMEL = 1 << 22  # larger outputs are recorded as an even subsample

VOCAB, SEQ, BATCH = 100, 16, 2
PAD, BOS, EOS = 0, 1, 2


@dataclass(eq=False)  # compared by identity, as the registry's entries are
class Spec:
    """One model: how to build it, its batches, its loss and (optionally) how it generates.

    ``build()`` -> the model; ``batch(step)`` -> that step's inputs (the same on both devices);
    ``loss(model, batch)`` -> a scalar; ``generate(model, batch)`` -> token ids; ``setup()`` runs
    once before the model is built (a patch both runs need)."""

    name: str
    family: str
    build: Callable
    batch: Callable
    loss: Callable
    optimizer: str = "adamw"
    generate: Optional[Callable] = None
    setup: Optional[Callable] = None
    note: str = ""


# name -> Spec, in the order the sweep runs them and the report lists them. The family modules
# fill it when the package is imported.
MODELS = {}


def register(spec):
    MODELS[spec.name] = spec
    return spec


def gen(step):
    """The random generator of step ``step``'s batch: batches do not depend on the global seed."""
    import torch
    return torch.Generator().manual_seed(1000 + step)


def tokens(g, batch=BATCH, seq=SEQ, low=3):
    """Random token ids from ``low`` up (the ids below are PAD, BOS, EOS and a mask token)."""
    import torch
    return torch.randint(low, VOCAB, (batch, seq), generator=g)


def image_batch(step, size=32, classes=10, batch=BATCH):
    """Images and class labels, for Hugging Face and torchvision classifiers alike."""
    import torch
    g = gen(step)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=g),
            "labels": torch.randint(0, classes, (batch,), generator=g)}
