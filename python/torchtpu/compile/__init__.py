"""``torch.compile(model_or_fn, backend="tpu")``: Dynamo graphs as XLA programs (see docs/compile.md)."""

from torch._dynamo import register_backend

from .backend import backend, route_default_backend

register_backend(backend, name="tpu")
route_default_backend()

__all__ = ["backend"]
