"""Where a model's tpu run first parts from CPU's: the training steps run again on CPU float32,
CPU float64 and tpu, recording every ATen op's outputs (and a sample of its inputs), tagged with
the module that issued it (for backward ops, the autograd node and the module whose forward
created it). Two findings come out (see the package docstring): the *first divergence* of the
aligned op sequences, and the *replay* of every tpu op on CPU on copies of its own inputs."""

import copy
import difflib

# torch at module level (the rest of the zoo imports it in functions): the dispatch modes below
# are classes deriving from torch's; torchtpu, imported first, has imported torch anyway
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..compare import to_double
from .execute import execute
from .op_compare import (abs_max, bad_result, compare, describe_shapes, input_rel, input_sample,
                         shape_key, snapshot, tied_indices_ok, unordered_ties)
from .specs import REPLAY_ATOL, REPLAY_TOL, TRACE_ATOL, TRACE_TOL

# ops whose outputs are random or uninitialized: recorded, never compared
_NO_VALUES = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "exponential",
              "cauchy", "geometric", "poisson", "empty")
# ops that only re-describe storage: nothing to replay on copies of their inputs
_NO_REPLAY = ("as_strided", "set_", "resize_", "record_stream")
MAX_DIVERGENCES = 8  # the first divergence and the next ones, for context


def _no_values(op_name):
    base = op_name.split("::")[-1].split(".")[0]
    return any(s in base for s in _NO_VALUES)


def _to_cpu(x):
    """A replay argument: tensors copied to the CPU, a device argument made the CPU."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, torch.device) and x.type != "cpu":
        return torch.device("cpu")
    return x


def _to_f64(x):
    """A replay argument for the float64 reference: floating and complex tensors widened."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    if isinstance(x, torch.Tensor) and x.is_complex():
        return x.to(torch.complex128)
    return x


class _Annotate(TorchFunctionMode):
    """Tags each autograd node with the module whose forward created it."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        stack = self.tracer.stack
        if stack:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    md = t.grad_fn.metadata
                    if "module" not in md:
                        md["module"] = stack[-1]
        return out


class _Record(TorchDispatchMode):
    """Records every ATen op into the tracer; with ``replay``, has the tracer check it on CPU."""

    def __init__(self, tracer, replay, inputs):
        super().__init__()
        self.tracer, self.replay, self.inputs = tracer, replay, inputs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        where = self.tracer.where()
        values = not _no_values(name)
        replay_this = (self.replay and values and not func.is_view
                       and not any(s in name for s in _NO_REPLAY))
        c_args, c_kwargs, in_scale, ins = self._before(args, kwargs, values, replay_this)
        out = func(*args, **kwargs)
        snap = snapshot(out) if values else None
        tied = unordered_ties(name, args, kwargs)
        kept = snap[:1] if (tied and isinstance(snap, list)) else snap
        self.tracer.records.append({"op": name, "key": (name, shape_key(out), where),
                                    "where": where, "out": kept, "scale": in_scale, "ins": ins})
        if replay_this:
            self.tracer.check(func, name, where, c_args, c_kwargs, snap, kept, in_scale, tied, args)
        return out

    def _before(self, args, kwargs, values, replay_this):
        """What must be taken before the op runs (an in-place op overwrites its inputs): CPU
        copies of the arguments to replay, the inputs' scale and sample.
        -> (c_args, c_kwargs, in_scale, ins)."""
        if replay_this:
            c_args, c_kwargs = tree_map(_to_cpu, (args, kwargs))
            in_scale = max(abs_max(c_args), abs_max(c_kwargs))
            return c_args, c_kwargs, in_scale, input_sample(c_args) if self.inputs else None
        in_scale = max(abs_max(args), abs_max(kwargs)) if values and not self.replay else 0.0
        return None, None, in_scale, input_sample(args) if self.inputs else None


class Tracer:
    """Records every ATen op (a TorchDispatchMode) with where it ran: the phase, the module whose
    forward issued it, or for backward ops the autograd node and the module whose forward created
    that node. With ``replay``, also runs each op on CPU (float32 and float64) on copies of its
    inputs and compares."""

    def __init__(self, model, replay, inputs=True):
        """``model``: the very module that will run (its submodules' names tag the ops);
        ``inputs``: also keep a sample of every op's input tensors."""
        self.records, self.replay_bad, self.phase, self.stack = [], [], "", []
        self.replays, self.replay_max = 0, {"op": None, "rel": 0.0}
        self.module_names = {id(m): n or "<model>" for n, m in model.named_modules()}
        self.param_names = {id(p): n for n, p in model.named_parameters()}
        self.modes = [_Annotate(self), _Record(self, replay, inputs)]

    def _enter_module(self, mod, args):
        self.stack.append(self.module_names.get(id(mod), type(mod).__name__))

    def _leave_module(self, mod, args, out):
        if self.stack:
            self.stack.pop()

    def check(self, func, name, where, c_args, c_kwargs, snap, kept, in_scale, tied, args):
        """Replays one tpu op on CPU, in float32 and float64, and records it if tpu's is off."""
        try:
            ref = snapshot(func(*c_args, **c_kwargs))
        except Exception:  # noqa: BLE001 - no CPU kernel for these arguments
            return
        try:
            a64, k64 = tree_map(_to_f64, (c_args, c_kwargs))
            ref64 = snapshot(func(*a64, **k64))
        except Exception:  # noqa: BLE001 - no float64 kernel: compared with float32 only
            ref64 = None
        self.replays += 1
        if tied:
            res = compare(kept, ref[:1], ref64[:1] if ref64 else None, in_scale, REPLAY_ATOL,
                          REPLAY_TOL)
            if not res["bad"] and not tied_indices_ok(name, c_args, c_kwargs, snap, ref):
                res = bad_result("indices select other values than CPU's")
        else:
            res = compare(snap, ref, ref64, in_scale, REPLAY_ATOL, REPLAY_TOL)
        if res["rel"] > self.replay_max["rel"]:
            self.replay_max = {"op": name, "rel": res["rel"], "ratio": res["ratio"]}
        if res["bad"]:
            self.replay_bad.append(dict(res, index=len(self.records) - 1, op=name, where=where,
                                        shapes=describe_shapes(args), f64=ref64 is not None))

    def where(self):
        node = torch._C._current_autograd_node()
        if node is not None:
            var = getattr(node, "variable", None)  # AccumulateGrad: the parameter
            if var is not None:
                return f"{self.phase}: AccumulateGrad of {self.param_names.get(id(var), '?')}"
            mod = node.metadata.get("module", "?") if hasattr(node, "metadata") else "?"
            return f"{self.phase}: {node.name()} of {mod}"
        return f"{self.phase}: {self.stack[-1] if self.stack else '<top>'}"

    def __enter__(self):
        from torch.nn.modules.module import (register_module_forward_hook,
                                             register_module_forward_pre_hook)
        self._handles = [register_module_forward_pre_hook(self._enter_module),
                         register_module_forward_hook(self._leave_module)]
        for m in self.modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self.modes):
            m.__exit__(*exc)
        for h in self._handles:
            h.remove()
        return False


def traced_run(spec, model, device, batches, steps, do_generate, replay, inputs=True):
    tracer = Tracer(model, replay=replay, inputs=inputs)
    with tracer:
        res = execute(spec, model, device, batches, steps, do_generate,
                      phase=lambda label: setattr(tracer, "phase", label))
    return tracer, res


def trace(spec, model, batches, steps, do_generate):
    """Runs ``steps`` training steps (and ``generate``) traced on CPU float32, CPU float64 and tpu
    (with replay); returns the findings (see the package docstring)."""
    cpu_t, cpu_r = traced_run(spec, copy.deepcopy(model), "cpu", batches, steps, do_generate, False)
    tpu_t, tpu_r = traced_run(spec, copy.deepcopy(model), "tpu", batches, steps, do_generate, True)
    f64_t, f64_r = traced_run(spec, copy.deepcopy(model).double(), "cpu", to_double(batches), steps,
                              do_generate, False, inputs=False)
    out = {"steps": steps, "generate": do_generate, "cpu_ops": len(cpu_t.records),
           "tpu_ops": len(tpu_t.records), "tpu_error": tpu_r["error"],
           "tpu_traceback": tpu_r.get("traceback"), "cpu_error": cpu_r["error"],
           "f64_error": f64_r["error"], "replayed_ops": tpu_t.replays,
           "replay_largest": tpu_t.replay_max}

    # CPU float32 <-> float64: the same op sequence; tpu <-> CPU float32: aligned (device-specific
    # paths, e.g. attention kernels, differ)
    sm = _matcher(cpu_t.records, tpu_t.records)
    diverged = _divergences(sm, cpu_t.records, tpu_t.records, f64_t.records,
                            _aligned_index(cpu_t.records, f64_t.records))
    out["first_divergence"] = diverged[0] if diverged else None
    out["next_divergences"] = diverged[1:]
    out["aligned_ops"] = sum(b.size for b in sm.get_matching_blocks())
    out["unaligned"] = _unaligned(sm, cpu_t.records, tpu_t.records)

    bad = tpu_t.replay_bad
    out["replay_first"] = bad[0] if bad else None
    out["replay_mismatches"] = _replay_per_op(bad)
    return out


def _matcher(a, b):
    """Aligns two runs' op records by (op, output shapes, where it ran)."""
    return difflib.SequenceMatcher(None, [repr(r["key"]) for r in a], [repr(r["key"]) for r in b],
                                   autojunk=False)


def _aligned_index(a, b):
    """Index in ``b`` of each record of ``a`` that aligns with one."""
    index = {}
    for blk in _matcher(a, b).get_matching_blocks():
        for k in range(blk.size):
            index[blk.a + k] = blk.b + k
    return index


def _divergences(sm, cpu, tpu, f64, f64_of):
    """The first MAX_DIVERGENCES aligned ops whose tpu output is off, measured on float64's where
    that run aligns; each notes how many tpu ops before it aligned with none."""
    diverged, unmatched, prev_b = [], 0, 0
    for blk in sm.get_matching_blocks():
        unmatched += blk.b - prev_b
        for k in range(blk.size):
            c, t = cpu[blk.a + k], tpu[blk.b + k]
            if c["out"] is None:
                continue
            j = f64_of.get(blk.a + k)
            r64 = f64[j]["out"] if j is not None else None
            res = compare(t["out"], c["out"], r64, c["scale"], TRACE_ATOL, TRACE_TOL)
            if res["bad"]:
                diverged.append(dict(res, index=blk.b + k, op=t["op"], where=t["where"],
                                     f64=r64 is not None, unaligned_ops_before=unmatched,
                                     input_rel=input_rel(t["ins"], c["ins"])))
                if len(diverged) >= MAX_DIVERGENCES:
                    return diverged
        prev_b = blk.b + blk.size
    return diverged


def _unaligned(sm, cpu, tpu):
    """Ops present on one device only (device-specific paths), by side and name."""
    only = {}
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        for side, recs in (("cpu only", cpu[i1:i2]), ("tpu only", tpu[j1:j2])):
            for r in recs:
                only.setdefault(side, {}).setdefault(r["op"], 0)
                only[side][r["op"]] += 1
    return only


def _replay_per_op(bad):
    """The replay's wrong ops, by name: how often, how far off, where first."""
    per_op = {}
    for b in bad:
        p = per_op.setdefault(b["op"], {"count": 0, "max_rel": 0.0, "max_ratio": None,
                                        "first_where": b["where"], "first_shapes": b["shapes"],
                                        "note": b["note"]})
        p["count"] += 1
        p["max_rel"] = max(p["max_rel"], b["rel"])
        if b["ratio"] is not None:
            p["max_ratio"] = max(p["max_ratio"] or 0.0, b["ratio"])
    return per_op
