"""Optimizer steps in compiled code run as one recorded program, not as a Dynamo graph.

A ``torch.compile``d training step reaches ``optimizer.step()``, which Dynamo would trace into a
graph of its own: the optimizer's Python (state initialization, foreach lists, bias corrections)
symbolically, with a guard on every parameter, state and hyperparameter. For an optimizer of tpu
parameters the step runs instead as the eager code it is, its ops recorded (lazy mode) and run as
one program when it returns, compiled once and cached like any window (docs/compile.md,
"Optimizer steps", has the measurements). So no step pays for Dynamo's tracing or guards, and a
learning rate that a scheduler changes is a runtime value of the program, where Dynamo guards on a
float ``lr`` and recompiles. The in-place updates donate their old buffers as the compiled graph's
did (exec/executor.cpp).

Installed (patches.py) on ``Optimizer.profile_hook_step``, the wrapper PyTorch puts around each
optimizer class's ``step`` when its first instance is made (classes instantiated before torchtpu
was imported keep Dynamo's way).
"""

import functools

import torch

from .. import modes


def _on_tpu(optimizer) -> bool:
    groups = optimizer.param_groups
    return bool(groups and groups[0]["params"]) and groups[0]["params"][0].device.type == "tpu"


def _in_compiled_code() -> bool:
    """Dynamo is tracing, or running a frame it gave up on (whose callees it would compile)."""
    return torch.compiler.is_compiling() or torch._C._dynamo.eval_frame.get_eval_frame_callback() is not None


# torch._disable_dynamo: Dynamo breaks the graph at the call and compiles nothing below it, and
# Dynamo is imported when the function is first called (only ever from compiled code), not here.
@torch._disable_dynamo
def _recorded_step(step, optimizer, *args, **kwargs):
    with modes.one_program():
        return step(optimizer, *args, **kwargs)


def _route(step):
    @functools.wraps(step)
    def routed(optimizer, *args, **kwargs):
        if _on_tpu(optimizer) and _in_compiled_code():
            return _recorded_step(step, optimizer, *args, **kwargs)
        return step(optimizer, *args, **kwargs)

    _never_compiled(routed.__code__)
    return routed


def _never_compiled(code) -> None:
    """Dynamo's frame callback runs this code as it is (its callees as usual): compiling it would
    only make an empty graph up to the step, guarded on the optimizer, recompiled for every new
    one. Dynamo's C-level switch (``torch._dynamo.eval_frame.skip_code`` without importing
    Dynamo), of the pinned torch; without it the frame compiles to that empty graph."""
    frames = torch._C._dynamo.eval_frame
    if hasattr(frames, "set_code_exec_strategy") and hasattr(frames, "_FrameExecStrategy"):
        skip = frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.DEFAULT)
        frames.set_code_exec_strategy(code, skip)


def routed_profile_hook_step(profile_hook_step):
    """``Optimizer.profile_hook_step`` routing the steps it wraps (installed by patches.py)."""
    def routing_profile_hook_step(func):
        return _route(profile_hook_step(func))
    return routing_profile_hook_step
