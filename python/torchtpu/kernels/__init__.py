"""Custom kernels as PyTorch ops on tpu: JAX functions and Pallas kernels (:func:`jax_op`), and
hand-written StableHLO (:func:`stablehlo_op`). See docs/kernels.md."""

from .ops import jax_op
from .stablehlo import stablehlo_op

__all__ = ["jax_op", "stablehlo_op"]
