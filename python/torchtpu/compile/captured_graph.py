"""One FX graph of lowered ATen ops as one XLA program.

The first call runs the graph once in *capture* mode: its ops go through the same boxed kernel and
lowerings as eager mode, but are recorded instead of run, and become one program whose parameters
are the graph's tensor inputs (compiled once, and cached in the memory/disk/shared tiers like every
eager program). Later calls bind the new inputs' buffers to that program and rebuild the outputs
without dispatching an op.

A program assumes what its capture saw: each input's flat size and dtype, which inputs share
contents, the value of every non-tensor input (ints, floats, bools are baked into the
program), and the float32 matmul precision in force. A call that differs captures again, and the recompile is counted with its cause.
"""

import torch
from torch.utils import _pytree as pytree

from .. import _C


class NeedsEager(Exception):
    """An op in the graph cannot be captured (it would run on the CPU, or reads data on the host):
    run that node eagerly."""

    def __init__(self, node):
        super().__init__(f"{node.target} has no tpu lowering")
        self.node = node


class _Recorder(torch.fx.Interpreter):
    """Runs the graph during capture, naming the node that could not join it."""

    def run_node(self, n):
        try:
            return super().run_node(n)
        except (NotImplementedError, RuntimeError) as e:
            if "cannot join a compiled graph" in str(e) or "read a tensor's contents on the host" in str(e):
                raise NeedsEager(n) from e
            raise


def _is_tpu(x):
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _upload(tensors, positions):
    """Moves the CPU tensors at ``positions`` to tpu in one transfer per dtype and shape (an
    optimizer's per-parameter step counts): stacked on the CPU, unbound on tpu as views."""
    groups = {}
    for i in positions:
        groups.setdefault((tensors[i].dtype, tuple(tensors[i].shape)), []).append(i)
    for members in groups.values():
        if len(members) == 1:
            tensors[members[0]] = tensors[members[0]].to("tpu")
            continue
        moved = torch.stack([tensors[i] for i in members]).to("tpu").unbind()
        for i, t in zip(members, moved):
            tensors[i] = t


def _describe_change(old, new):
    """What differs between two program keys, e.g. "input 0: 3 -> 4"."""
    if len(old) != len(new):
        return f"{len(new) - 1} inputs where the graph had {len(old) - 1}"
    changes = []
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            what = "float32 matmul precision" if isinstance(a, tuple) else f"input {i}"
            changes.append(f"{what}: {a[-1] if isinstance(a, tuple) else a} -> {b[-1] if isinstance(b, tuple) else b}")
    return ", ".join(changes)


class _Program:
    def __init__(self, compiled, spec, constants, tensor_slots):
        self.compiled = compiled  # torchtpu._C._CompiledGraph
        self.spec = spec  # the outputs' pytree structure
        self.constants = constants  # flat outputs that are not tensors (sizes), as captured
        self.tensor_slots = tensor_slots  # flat positions of the tensor outputs


class CapturedGraph:
    """A callable running ``gm`` (an FX graph of ATen ops on tpu) as one compiled program."""

    def __init__(self, gm: torch.fx.GraphModule, name: str):
        self.gm = gm
        self.name = name
        self.programs = {}  # non-tensor input values -> _Program

    def __call__(self, *args):
        tensors, key = self._bind(args)
        program = self.programs.get(key)
        if program is not None:
            why = program.compiled.mismatch(tensors)
            if not why:
                flat = list(program.constants)
                for slot, t in zip(program.tensor_slots, program.compiled(tensors)):
                    flat[slot] = t
                return pytree.tree_unflatten(flat, program.spec)
            self._note_recompile(why)
        elif self.programs:
            self._note_recompile(_describe_change(next(reversed(self.programs)), key))
        return self._capture(args, tensors, key)

    def _bind(self, args):
        """The tensor inputs (CPU tensors moved to tpu) and the key of everything else, with where
        each tensor lies in its storage: a program reads its inputs at the captured offsets and
        strides, which Dynamo does not guard (two rows of one tensor reuse the same graph)."""
        tensors, key, on_cpu = [], [], []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.device.type != "tpu":
                    on_cpu.append(len(tensors))
                tensors.append(a)
                plain = a.storage_offset() == 0 and a.is_contiguous()
                key.append(a.device.type if plain else f"{a.device.type} strides {a.stride()} offset {a.storage_offset()}")
            else:
                key.append(a if isinstance(a, (int, float, bool, type(None))) else repr(a))
        if on_cpu:
            _upload(tensors, on_cpu)
        key.append(("matmul precision", _C._matmul_precision()))
        return tensors, tuple(key)

    def _note_recompile(self, why):
        _C._record_recompile(f"{self.name}: captured again ({why})")

    def _capture(self, args, tensors, key):
        it = iter(tensors)
        bound = [next(it) if isinstance(a, torch.Tensor) else a for a in args]
        _C._capture_begin(tensors)
        try:
            out = _Recorder(self.gm).run(*bound)
        except BaseException:
            _C._capture_abort()
            raise
        flat, spec = pytree.tree_flatten(out)
        slots = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
        outs = [flat[i] for i in slots]
        try:
            bad = next((t for t in outs if not _is_tpu(t)), None)
            if bad is not None:
                raise RuntimeError(f"{self.name}: an output of the captured graph is on {bad.device}")
            compiled = _C._capture_end(tensors, outs, self.name, "")
        except BaseException:
            _C._capture_abort()
            raise
        constants = [None if isinstance(x, torch.Tensor) else x for x in flat]
        self.programs[key] = _Program(compiled, spec, constants, slots)
        return out
