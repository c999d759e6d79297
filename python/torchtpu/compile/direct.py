"""Graphs that build no autograd history, captured from Dynamo's FX graph as it is.

AOT autograd traces every graph twice through fake tensors (once to collect metadata, once to
functionalize it): half the compile time of an optimizer step or an inference forward. A graph
that records nothing for autograd needs neither pass: torchtpu's capture records the graph's torch
calls through the same kernels as eager mode, in-place updates of inputs included (they become
the program's writebacks), so Dynamo's graph runs once in capture mode as it is.

Work on CPU tensors (an optimizer's step counts and bias corrections) runs eagerly before the
program on every call (the *prologue*); the CPU values the program reads become its inputs. A
graph this cannot take as it is (symbolic sizes, an autograd history, CPU work that must wait for
the program's) goes through AOT autograd, as does one whose capture meets an op without a lowering
or a host read.
"""

import torch
from torch.utils import _pytree as pytree

from .captured_graph import CapturedGraph, NeedsEager

# Nodes that change state the program's ops depend on: they stay in order with those ops. Besides
# grad mode, functorch's transform levels: Dynamo (PyTorch 2.14 on) inlines vmap, leaving calls
# that enter and leave its levels around the batched ops (FlexAttention's create_block_mask).
_SIDE_EFFECTS = {torch._C._set_grad_enabled}
_SIDE_EFFECT_MODULES = {"torch._functorch.predispatch"}
_NOT_CAPTURED = {torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast}


def _tensors(value):
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _symbolic(value) -> bool:
    for x in pytree.tree_leaves(value):
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())):
            return True
    return False


def _mutates(node) -> bool:
    """Whether ``node`` writes its arguments (an in-place torch function or method, or out=)."""
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or "out" in node.kwargs


class Plan:
    """Which nodes of a Dynamo graph run eagerly on the CPU (``prologue``), or why the graph cannot
    be taken as it is (``refused``)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.prologue = set()
        self.refused = None
        program_read_cpu = False  # a program op before this point read a CPU value
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "output"):
                if _symbolic(n.meta.get("example_value")):
                    return self._refuse("symbolic sizes")
                continue
            value = self.value(n)
            if n.op == "call_module" or n.target in _NOT_CAPTURED:
                return self._refuse(f"{n.format_node()} is not captured as it is")
            if _symbolic(value):
                return self._refuse("symbolic sizes")
            if any(t.requires_grad and not t.is_leaf for t in _tensors(value)):
                return self._refuse("it builds an autograd history")
            devices = {t.device.type for t in _tensors(value)}
            devices |= {t.device.type for a in n.all_input_nodes for t in _tensors(self.value(a))}
            if devices - {"cpu", "tpu"}:
                return self._refuse(f"tensors on {devices}")
            if "tpu" not in devices and self._joins_prologue(n, devices):
                if _mutates(n) and program_read_cpu:
                    return self._refuse("CPU work after program ops that read CPU values")
                self.prologue.add(n)
            elif n.op != "get_attr":
                if "cpu" in {t.device.type for t in _tensors(value)}:
                    return self._refuse(f"{n.format_node()} makes a CPU tensor from tpu ones")
                for a in n.all_input_nodes:
                    if a in self.prologue and not isinstance(self.value(a), (torch.Tensor, int, float, bool)):
                        return self._refuse(f"{n.format_node()} reads a CPU list")
                    program_read_cpu |= a in self.prologue or "cpu" in {t.device.type for t in _tensors(self.value(a))}

    def value(self, node):
        return getattr(self.gm, node.target) if node.op == "get_attr" else node.meta.get("example_value")

    def _joins_prologue(self, n, devices) -> bool:
        if devices:  # CPU tensors only
            return True
        # No tensors: Python work on what the prologue computes (not state the program needs).
        side_effect = n.target in _SIDE_EFFECTS or getattr(n.target, "__module__", None) in _SIDE_EFFECT_MODULES
        return not side_effect and all(
            a.op in ("placeholder", "get_attr") or a in self.prologue for a in n.all_input_nodes)

    def _refuse(self, reason):
        self.refused = reason


def _subgraph(gm, nodes, inputs, outputs) -> torch.fx.GraphModule:
    """A graph module of ``nodes`` (in graph order) reading ``inputs`` as placeholders and returning
    the values of ``outputs`` as a tuple."""
    graph = torch.fx.Graph()
    env = {i: graph.placeholder(f"in_{k}") for k, i in enumerate(inputs)}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] for o in outputs))
    return torch.fx.GraphModule(gm, graph)


class DirectGraph:
    """Dynamo's graph ``gm`` as an eager CPU prologue and one program captured from the graph as
    it is. ``fallback(args)`` compiles the graph through AOT autograd instead: the first call
    uses it when the capture meets an op it cannot record."""

    def __init__(self, plan: Plan, name: str, fallback):
        gm = plan.gm
        nodes = [n for n in gm.graph.nodes if n.op != "output"]
        self.output = nodes[-1].next
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        prologue = [n for n in nodes if n in plan.prologue]
        program = [n for n in nodes if n.op not in ("placeholder", "get_attr") and n not in plan.prologue]
        in_program = set(program)
        reads = {a for n in program for a in n.all_input_nodes if a not in in_program}
        returned = set(self.output.all_input_nodes)
        # The program reads the graph's inputs, the tensors the graph reads as attributes (an
        # optimizer's state: captured as inputs, so that writes to them are written back) and
        # what the prologue hands over.
        self.attributes = [n for n in nodes if n.op == "get_attr" and n in reads and n not in plan.prologue]
        self.handed = [n for n in prologue if n in reads or n in returned]
        self.results = [n for n in program if n in returned]
        self.prologue = _subgraph(gm, prologue, self.placeholders, self.handed) if prologue else None
        self.program = CapturedGraph(
            _subgraph(gm, program, self.placeholders + self.attributes + self.handed, self.results), name)
        self.gm = gm
        self.fallback = fallback
        self.compiled = None  # the fallback's callable, once a capture could not take the graph
        self.captured_once = False

    def __call__(self, *args):
        if self.compiled is not None:
            return self.compiled(*args)
        saved = None if self.captured_once else self._cpu_inputs(args)
        handed = self.prologue(*args) if self.prologue is not None else ()
        attributes = [getattr(self.gm, n.target) for n in self.attributes]
        grad_mode = torch.is_grad_enabled()
        try:
            results = self.program(*args, *attributes, *handed)
        except NeedsEager:
            torch.set_grad_enabled(grad_mode)
            if self.captured_once:
                raise
            for t, old in saved:  # undo the prologue's writes: the fallback repeats them
                t.copy_(old)
            self.compiled = self.fallback(args)
            return self.compiled(*args)
        finally:
            torch.set_grad_enabled(grad_mode)
        self.captured_once = True
        values = dict(zip(self.placeholders, args))
        values.update((n, getattr(self.gm, n.target)) for n in self.attributes)
        values.update(zip(self.handed, handed))
        values.update(zip(self.results, results))
        return torch.fx.node.map_arg(self.output.args[0], lambda n: values[n])

    def _cpu_inputs(self, args):
        """Copies of the CPU tensors the prologue could write (the graph's CPU inputs)."""
        inputs = list(args) + [getattr(self.gm, n.target) for n in self.gm.graph.nodes if n.op == "get_attr"]
        return [(t, t.clone()) for t in _tensors(inputs) if t.device.type == "cpu"]
