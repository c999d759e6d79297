"""Model-zoo sweep: small Hugging Face transformers and torchvision models trained on tpu against
CPU PyTorch.

    python -m torchtpu.testing.models --json FILE [--markdown docs/models.md] [--models NAME ...]
                                      [--steps N] [--timeout S] [--trace auto|always|never]
                                      [--mode strict|debug|fused|lazy] [--list]

Every model is built from a config (nothing is downloaded; tiny sizes: 2 layers, hidden 32, vocab
100, images 32-64 px) with ``torch.manual_seed(0)``. The same initial weights then train for a few
steps on CPU (the reference) and on tpu, on the same deterministic batches, dropout off (configs
with dropout 0, and every ``nn.Dropout`` set to ``p=0``). Language models also ``generate`` a few
tokens greedily. Per model the record has the loss of every step on both devices and their largest
relative difference, whether the generated ids are equal, the ops that fell back to the CPU
(:func:`torchtpu.metrics.cpu_fallbacks`, reset before the tpu run), wall times and any error.

Losses that differ by more than ``LOSS_RTOL`` are held against the model's own float32 noise: how
far CPU float32 runs from weights moved by one rounding error (and, when those do not cover the
difference, a float64 run) end up from CPU float32. Within ``NOISE_FACTOR`` times that, they count
as equal.

When the results still differ (or tpu raised) the model is traced: the training steps up to the
first differing one (or ``generate``) run again on CPU float32, CPU float64 and tpu under a
``TorchDispatchMode`` that records every ATen op's outputs (and a sample of its inputs), tagged
with the module that issued it (for backward ops, the autograd node and the module whose forward
created it). Two findings come out:

* *first divergence*: the op sequences are aligned (they differ where PyTorch picks a
  device-specific path, e.g. attention kernels) and the first op whose tpu output is further from
  float64 than ``ACCURACY_FACTOR`` times CPU float32's is reported, with how much its inputs
  already differed between the runs.
* *replay*: during the tpu run every op is also run on CPU, in float32 and float64, on copies of
  its own tpu inputs; ops whose tpu results are off by more than ``ACCURACY_FACTOR`` times CPU's
  error are wrong lowerings, independent of any drift.

A model whose replay is clean and whose first divergence had inputs equal to rounding is marked
``drift``: float32 rounding amplified (a ReLU mask flipping on a value within rounding of 0), not a
wrong op. Otherwise it is a ``mismatch``.

Each model runs in its own subprocess with a timeout: a crash or a hang is recorded and the sweep
goes on. :func:`run_model` runs one model in-process (used by the tests).

The package: ``specs`` (the registry, tolerances, shared batches); the models in ``hf_text``,
``hf_media``, ``vision`` and ``handwritten`` (importing the package registers them, in the
sweep's order); ``execute`` (one training run), ``run`` (CPU against tpu), ``record`` (the
result), ``trace`` and ``op_compare`` (the op trace), ``report`` (Markdown) and ``sweep`` (the
command line, at ``torchtpu.testing.models``).
"""

# importing the families registers their models, in this order: the sweep's and the report's
from . import hf_text, hf_media, vision, handwritten  # noqa: I001
from .record import ModelResult
from .run import run_model
from .specs import LOSS_RTOL, MODELS, Spec, register

__all__ = ["LOSS_RTOL", "MODELS", "ModelResult", "Spec", "register", "run_model",
           "hf_text", "hf_media", "vision", "handwritten"]
