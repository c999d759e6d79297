"""Random short tensor programs for the differential fuzz test (test_fuzz.py).

A program is Python source over a pool of tensors t0, t1, ...: `make_input` lines, then steps that
each pick an op and operands from the pool and either assign a new tensor (`t5 = torch.add(t1, t3)`,
`t6 = t2.transpose(0, 1)`) or write into one (`t6.mul_(t4)`, `torch.sub(t1, 2, out=t3)`,
`t2[t7] = 0.5`). Being source, a failing example prints as its own repro. `programs()` draws them,
`run_program` runs one on a device. Operands are mostly valid — shapes that broadcast, indices in
range — and sometimes not, so that errors are compared too. A third of the inputs are stored
padded on tpu (`padded=True`), as tensors whose sizes vary are, so that every op also meets padded
operands: those with a padding rule run on boxes, the others read the exact sizes.

Exactness. Each backend rounds transcendental functions, reductions and matmuls its own way, so
their results differ from CPU's in the last bits; a discontinuous op (floor, comparisons, argmax,
sort indices, float to int, division by a value near 0) would turn that into a different answer.
The generator therefore tracks which float tensors are bit-identical on every backend — inputs
(multiples of 1/4), and results of correctly rounded or arithmetic-free ops on such tensors — and
gives discontinuous ops only those. Integer and bool tensors are always exact.

Steps that would run into a known torchtpu bug are left out; each place is marked `# known bug:`
so that it can be re-enabled once the bug is fixed.
"""

import dataclasses
import functools
import math
import re
import warnings

import torch
from hypothesis import strategies as st

import torchtpu

DTYPES = (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.int32, torch.float16)
LOW_PRECISION = (torch.bfloat16, torch.float16)
SHAPES = st.lists(st.sampled_from([2, 3, 1, 0, 4]), max_size=3).map(tuple)
SCALARS = (2, -1, 0.5, 0, -1.5, 3, True)
SPECIAL_VALUES = (float("nan"), float("inf"), float("-inf"), -0.0)
WILD = st.sampled_from([False] * 9 + [True])  # shrinks to False: a valid operand

# Element-wise ops: name -> (arity, needs_exact, keeps_exact). needs_exact: discontinuous, so only
# given exact operands. keeps_exact: correctly rounded or arithmetic-free, so exact operands give
# bit-identical results.
ELEMENTWISE = {
    "neg": (1, False, True), "abs": (1, False, True), "relu": (1, False, True),
    "square": (1, False, True), "sqrt": (1, True, True), "reciprocal": (1, True, True),
    "floor": (1, True, True), "ceil": (1, True, True), "round": (1, True, True),
    "trunc": (1, True, True), "frac": (1, True, True), "sign": (1, True, True),
    "isnan": (1, True, True), "isinf": (1, True, True), "logical_not": (1, True, True),
    "bitwise_not": (1, True, True),
    "exp": (1, False, False), "sin": (1, False, False), "tanh": (1, False, False),
    "sigmoid": (1, False, False), "atan": (1, False, False), "erf": (1, False, False),
    "log": (1, True, False), "rsqrt": (1, True, False),
    "add": (2, False, True), "sub": (2, False, True), "mul": (2, False, True),
    "maximum": (2, False, True), "minimum": (2, False, True), "div": (2, True, True),
    "remainder": (2, True, True), "fmod": (2, True, True), "floor_divide": (2, True, True),
    "copysign": (2, True, True),
    "eq": (2, True, True), "ne": (2, True, True), "lt": (2, True, True), "le": (2, True, True),
    "gt": (2, True, True), "ge": (2, True, True),
    "logical_and": (2, True, True), "logical_or": (2, True, True), "logical_xor": (2, True, True),
    "bitwise_and": (2, True, True), "bitwise_or": (2, True, True), "bitwise_xor": (2, True, True),
    "pow": (2, True, False), "atan2": (2, True, False),
}

# Ops that take only some dtypes: given others only when wild (to compare the errors).
INTEGRAL_ONLY = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}
FLOAT_ONLY = {"std", "var", "mean", "logsumexp", "linalg.vector_norm"}
NO_BOOL = {"neg", "abs", "relu", "sub", "floor", "ceil", "round", "trunc", "frac", "sign", "argmax", "argmin"}
NO_SCALAR = {"atan2", "logical_and", "logical_or", "logical_xor"}  # tensor arguments only
# known bug: no lowering of masked_select.out and nonzero.out: these run on the CPU.
NO_OUT_LOWERING = {"masked_select", "nonzero"}


def takes(name, dtype):
    if name in INTEGRAL_ONLY:
        return not dtype.is_floating_point
    if name in FLOAT_ONLY:
        return dtype.is_floating_point
    return dtype != torch.bool or name not in NO_BOOL


# Reductions: name -> (dim argument, needs_exact, keeps_exact). "dims": optional int or tuple with
# keepdim; "dim": optional int with keepdim; "scan": required int, no keepdim.
REDUCTIONS = {
    "sum": ("dims", False, False), "mean": ("dims", False, False), "prod": ("dim", False, False),
    "amax": ("dims", False, True), "amin": ("dims", False, True), "all": ("dims", True, True),
    "any": ("dims", True, True), "std": ("dims", False, False), "var": ("dims", False, False),
    "logsumexp": ("dims", False, False), "linalg.vector_norm": ("dims", False, False),
    "argmax": ("dim", True, True), "argmin": ("dim", True, True),
    "cumsum": ("scan", False, False), "cumprod": ("scan", False, False),
}


def make_input(shape, dtype, seed, special=False, padded=False, device="cpu"):
    """Multiples of 1/4 in [-4, 4] for floats, exact in every float dtype (with `special`, some
    NaN, ±inf and -0.0 too); [-5, 5] for integers. Made on CPU, then moved; with `padded`, stored
    on tpu as eager mode stores a tensor whose sizes vary (in a box of bucket sizes, every size of
    at least 2 varying), so that the ops reading it run padded."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=g).bool()
    elif dtype.is_floating_point:
        t = torch.randint(-16, 17, shape, generator=g) / 4
        if special:
            at = torch.randint(0, 4, shape, generator=g) == 0
            t[at] = torch.tensor(SPECIAL_VALUES)[torch.randint(0, 4, shape, generator=g)][at]
        t = t.to(dtype)
    else:
        t = torch.randint(-5, 6, shape, generator=g, dtype=dtype)
    if padded and device == "tpu":
        return torchtpu._C._to_tpu_padded(t, list(shape))
    return t.to(device)


def make_index(shape, low, high, seed, unique=False, device="cpu"):
    """int64 indices in [low, high); `unique` ones where duplicate writes would race."""
    g = torch.Generator().manual_seed(seed)
    if unique:
        t = (torch.randperm(high - low, generator=g)[: math.prod(shape)] + low).reshape(shape)
    elif high > low:
        t = torch.randint(low, high, shape, generator=g)
    else:
        t = torch.full(shape, low)
    return t.to(device)


@dataclasses.dataclass(frozen=True)
class Program:
    lines: tuple

    def __repr__(self):  # hypothesis prints the falsifying example as runnable source
        return "\n" + "\n".join(self.lines) + "\n"


@dataclasses.dataclass
class Outcome:
    tensors: dict = None  # every pool tensor at the end, on CPU
    error: Exception = None


def new_scope(device):
    return {"torch": torch, "make_input": functools.partial(make_input, device=device),
            "make_index": functools.partial(make_index, device=device)}


def pool(scope):
    return {name: v for name, v in scope.items() if isinstance(v, torch.Tensor)}


def execute(line, scope):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out= resizing a non-empty tensor warns
        exec(line, scope)


def run_program(program, device):
    """The program's outcome on `device`: every pool tensor, or the first error raised (an error
    detected on the device may surface only when the tensors are read)."""
    scope = new_scope(device)
    try:
        for line in program.lines:
            execute(line, scope)
        return Outcome(tensors={name: t.cpu() for name, t in pool(scope).items()})
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        return Outcome(error=e)


def same_values(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | ((a != a) & (b != b))).all())


class Builder:
    """Draws a program step by step, running each step on CPU to know the pool's shapes, dtypes
    and exactness. The program ends at the first step CPU raises on: that error is its outcome."""

    def __init__(self, draw):
        self.draw = draw
        self.lines = []
        self.scope = new_scope("cpu")
        self.exact = {}  # pool tensor name -> bit-identical on every backend (module docstring)
        self.failed = False

    def wild(self):
        return self.draw(WILD)

    def shape(self, name):
        return tuple(self.scope[name].shape)

    def dtype(self, name):
        return self.scope[name].dtype

    def step(self, line, keeps_exact):
        """Runs `line` and appends it. What it creates or overwrites is exact if the op keeps
        exactness and every pool tensor the line names is exact."""
        exact = keeps_exact and all(self.exact.get(n, True) for n in re.findall(r"\bt\d+\b", line))
        before = {name: t.clone() for name, t in pool(self.scope).items()}
        self.lines.append(line)
        try:
            execute(line, self.scope)
        except Exception:  # noqa: BLE001 - CPU's error ends the program; the test compares it
            self.failed = True
            return
        for name, t in pool(self.scope).items():
            if name not in before:
                self.exact[name] = exact or not t.is_floating_point()
            elif not same_values(before[name], t):
                self.exact[name] = self.exact[name] and (exact or not t.is_floating_point())

    def assign(self, expr, keeps_exact):
        name = f"t{len(self.exact)}"
        self.step(f"{name} = {expr}", keeps_exact)
        return name

    def emit(self, fn, args, keeps_exact, kwargs="", inplace=False, out_aliases=True):
        """`tN = torch.fn(args)`, or the same written with out= into a pool tensor of the
        result's shape and dtype (any tensor when wild; one that shares no memory with the
        arguments unless `out_aliases`), or (`inplace`: there is a `fn_` method) into its first
        argument when that has them."""
        params = ", ".join(args + ([kwargs] if kwargs else []))
        call = f"torch.{fn}({params})"
        result = self.evaluate(call)
        if isinstance(result, NotImplementedError):
            return  # known bug: where CPU has no kernel for a dtype, tpu raises RuntimeError (often a failed compile)
        if isinstance(result, RuntimeError) and "ZeroDivisionError" in str(result):
            # integer division by zero: CPU raises at the op, tpu at the next host sync (a device
            # check, docs/reliability.md), so the programs' steps would not line up
            return
        if isinstance(result, Exception):
            result = None
        fits = lambda t: result is not None and t.dtype == result.dtype and t.shape == result.shape
        form = self.draw(st.sampled_from(["assign"] + (["out"] if fn not in NO_OUT_LOWERING else [])
                                         + (["inplace"] if inplace else [])))
        if form == "inplace" and (fits(self.scope[args[0]]) or self.wild()):
            self.step(f"{args[0]}.{fn}_({', '.join(args[1:] + ([kwargs] if kwargs else []))})", keeps_exact)
        elif form == "out" and (target := self.pick(fits)) and self.can_write_out(fn, target, result, call, out_aliases):
            self.step(f"torch.{fn}({params}, out={target})", keeps_exact)
        else:
            self.assign(call, keeps_exact)

    def can_write_out(self, fn, target, result, call, aliases):
        t = self.scope[target]
        if (fn in REDUCTIONS or fn in ("cat", "stack", "index_select", "clamp")) and (result is None or t.dtype != result.dtype):
            # known bug: amax, all, any, index_select and clamp into an out= of another dtype and
            # cumsum into a bool one do not raise; cat/stack's unsafe cast raises RuntimeError, not TypeError
            return False
        operands = re.findall(r"\bt\d+\b", call)
        return aliases or not any(self.shares_memory(target, n) for n in operands)

    def shares_memory(self, a, b):
        return self.scope[a].untyped_storage().data_ptr() == self.scope[b].untyped_storage().data_ptr()

    def evaluate(self, expr):
        """`expr`'s value on CPU, or the exception it raises."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return eval(expr, dict(self.scope))
        except Exception as e:  # noqa: BLE001
            return e

    def new_input(self, shape=None, dtype=None):
        shape = self.draw(SHAPES) if shape is None else shape
        dtype = self.draw(st.sampled_from(DTYPES)) if dtype is None else dtype
        special = dtype.is_floating_point and self.draw(st.sampled_from([False] * 4 + [True]))
        padded = self.draw(st.sampled_from([False] * 2 + [True]))
        seed = len(self.exact)
        flags = (", special=True" if special else "") + (", padded=True" if padded else "")
        return self.assign(f"make_input({shape!r}, {dtype}, seed={seed}{flags})", True)

    def index(self, shape, size, unique=False, in_range=False):
        """A new int64 index tensor for a dimension of `size`: in range, or mostly so and
        sometimes negative (Python style) or one past the end."""
        if size == 0:  # every index is out of range: CPU raises, and so must tpu
            low, high = 0, 1
        elif unique or in_range:
            low, high = 0, size
        else:
            low, high = self.draw(st.sampled_from([(0, size)] * 4 + [(-size, size), (0, size + 1)]))
        unique = ", unique=True" if unique else ""
        return self.assign(f"make_index({shape!r}, {low}, {high}, seed={len(self.exact)}{unique})", True)

    def mask(self, shape):
        """A bool tensor of `shape` (another pool tensor when wild)."""
        return self.pick(lambda t: tuple(t.shape) == shape and t.dtype == torch.bool) or self.new_input(shape, torch.bool)

    def pick(self, accept=lambda t: True, needs_exact=False, rounds=False):
        """A pool tensor `accept` takes (any, when wild). Only exact ones for a discontinuous op
        (`needs_exact`); no inexact low-precision ones for an op that rounds its own way
        (`rounds`), whose error would compound past the tolerance."""
        usable = [n for n, exact in self.exact.items()
                  if exact or not (needs_exact or (rounds and self.dtype(n) in LOW_PRECISION))]
        accepted = [n for n in usable if accept(self.scope[n])]
        names = usable if self.wild() else accepted
        return self.draw(st.sampled_from(names)) if names else None

    def operand(self, shape, dtype=None, needs_exact=False, rounds=False, scalar=True, hint=None):
        """A tensor that broadcasts to `shape` — from the pool or a new input (of `dtype`, else
        mostly of `hint`'s) — or a scalar."""
        kind = self.draw(st.sampled_from(["pool", "new"] + (["scalar"] if scalar else [])))
        if kind == "scalar":
            return repr(self.draw(st.sampled_from(SCALARS)))
        if kind == "pool":
            name = self.pick(lambda t: broadcasts_to(t.shape, shape) and dtype in (None, t.dtype),
                             needs_exact, rounds)
            if name:
                return name
        if dtype is None:
            dtype = self.draw(st.sampled_from(([hint] * 3 if hint else []) + list(DTYPES)))
        return self.new_input(self.broadcastable(shape), dtype)

    def broadcastable(self, shape):
        """A shape that broadcasts to `shape`: some dimensions 1, some leading ones dropped."""
        if self.wild():
            return self.draw(SHAPES)
        dims = [self.draw(st.sampled_from([d, 1])) for d in shape]
        return tuple(dims[self.draw(st.integers(0, len(dims))):])


def broadcasts_to(shape, target):
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


class Params:
    """Parameters for an op on pool tensor `x`, drawn from its shape: mostly valid, sometimes
    (wild) not."""

    def __init__(self, b, x):
        self.b, self.x, self.shape = b, x, b.shape(x)
        self.rank = len(self.shape)
        self.size = max(self.shape, default=1)  # of the dimension drawn last: what bound() indexes

    def draw(self, strategy):
        return self.b.draw(strategy)

    def dim(self, extra=0):
        n = max(self.rank + extra, 1)
        d = self.draw(st.integers(-n - 1, n) if self.b.wild() else st.integers(-n, n - 1))
        if -self.rank <= d < self.rank:
            self.size = self.shape[d]
        return d

    def dim_pair(self):
        first = self.dim()
        second = self.dim()
        if self.rank >= 2 and first % self.rank == second % self.rank and not self.b.wild():
            second = (first + 1) % self.rank
        return f"{first}, {second}"

    def dims(self):
        """Some distinct dimensions, each given as i or i - rank."""
        n = max(self.rank, 1)
        chosen = self.draw(st.permutations(range(n)))[: self.draw(st.integers(1, n))]
        return tuple(d - n if self.draw(st.booleans()) else d for d in chosen)

    def bound(self):
        """An index into the dimension drawn last (one past either end when wild)."""
        n = max(self.size, 1)
        return self.draw(st.integers(-n - 1, n) if self.b.wild() else st.integers(-n, n - 1))

    def maybe_bound(self):
        return self.draw(st.sampled_from(["", str(self.bound())]))

    def length(self, low=0):
        return self.draw(st.integers(low, max(self.size, low)))

    def step(self):
        return self.draw(st.sampled_from([0, -1] if self.b.wild() else [1, 2, 3]))

    def offset(self):
        return self.draw(st.integers(-2, 2))

    def prefix(self):
        """`:, ` before an index into dimension i (which becomes the dimension drawn last)."""
        i = self.draw(st.integers(0, max(self.rank - 1, 0)))
        self.size = self.shape[i] if self.rank else 1
        return ":, " * i

    def permutation(self):
        return list(self.draw(st.permutations(range(self.rank))))

    def reshaped(self):
        """A shape of the same number of elements: flattened, two dimensions merged, a 1
        added, or two factors."""
        s, n = list(self.shape), math.prod(self.shape)
        options = [(-1,), tuple(s + [1])]
        if self.rank >= 2:
            i = self.draw(st.integers(0, self.rank - 2))
            options.append(tuple(s[:i] + [s[i] * s[i + 1]] + s[i + 2:]))
        options += [(d, n // d) for d in range(1, n + 1) if n % d == 0]
        return self.draw(SHAPES) if self.b.wild() else self.draw(st.sampled_from(options))

    def expanded(self):
        """Sizes for expand: each size-1 dimension to 0..3, others kept (or -1), maybe a new
        leading dimension."""
        sizes = [self.draw(st.sampled_from([1, 2, 3, 0, -1] if d == 1 else [d, -1])) for d in self.shape]
        return tuple(self.draw(st.lists(st.sampled_from([2, 1, 0]), max_size=1)) + sizes)


def flip(p):
    return f"{p.x}.flip({p.dim()})"


def roll(p):
    return f"{p.x}.roll({p.bound()}, {p.dim()})"


# Views and copies that move elements without arithmetic (exact, continuous), with the rank they
# need (given lower ranks only when wild).
REARRANGEMENTS = (
    (1, lambda p: f"{p.x}[{p.prefix()}{p.maybe_bound()}:{p.maybe_bound()}:{p.step()}]"),
    (1, lambda p: f"{p.x}[{p.prefix()}{p.bound()}]"),
    (0, lambda p: f"{p.x}[..., None]"),
    (2, lambda p: f"{p.x}.transpose({p.dim_pair()})"),
    (0, lambda p: f"{p.x}.permute({p.permutation()})"),
    (0, lambda p: f"{p.x}.view({p.reshaped()})"),
    (0, lambda p: f"{p.x}.reshape({p.reshaped()})"),
    (0, lambda p: f"{p.x}.expand({p.expanded()})"),
    (1, lambda p: f"{p.x}.narrow({p.dim()}, {p.bound()}, {p.length()})"),
    (2, lambda p: f"{p.x}.diagonal({p.offset()}, {p.dim_pair()})"),
    (0, lambda p: f"{p.x}.unsqueeze({p.dim(extra=1)})"),
    (0, lambda p: f"{p.x}.squeeze({p.dim()})"),
    (1, lambda p: f"{p.x}.movedim({p.dim_pair()})"),
    (0, lambda p: f"{p.x}.flatten({p.dim()})"),
    (2, lambda p: f"{p.x}.mT"),
    (1, lambda p: f"{p.x}.unbind({p.dim()})[{p.bound()}]"),
    (1, lambda p: f"{p.x}.split(dim={p.dim()}, split_size={p.length(low=1)})[{p.bound()}]"),
    (1, lambda p: f"{p.x}.unfold({p.dim()}, {p.length()}, {p.step()})"),
    (0, lambda p: f"{p.x}.detach()"),
    (0, lambda p: f"{p.x}.clone()"),
    (0, lambda p: f"{p.x}.contiguous()"),
    (1, flip),
    (1, roll),
    (2, lambda p: f"{p.x}.tril({p.offset()})"),
    (2, lambda p: f"{p.x}.triu({p.offset()})"),
)


def rearrange(b):
    rank, template = b.draw(st.sampled_from(REARRANGEMENTS))
    x = b.pick(lambda t: t.dim() >= rank)
    if x is None:
        return
    if template is roll and b.scope[x].numel() == 0:
        return  # CPU's roll returns an empty tensor before checking the dim
    b.assign(template(Params(b, x)), True)


def elementwise(b):
    name = b.draw(st.sampled_from(sorted(ELEMENTWISE)))
    arity, needs_exact, keeps_exact = ELEMENTWISE[name]
    x = b.pick(lambda t: takes(name, t.dtype), needs_exact, rounds=not keeps_exact)
    if x is None:
        return
    args = [x] + [b.operand(b.shape(x), None, needs_exact, not keeps_exact, name not in NO_SCALAR, b.dtype(x))
                  for _ in range(arity - 1)]
    if name == "div" and args[0] in b.exact and b.dtype(args[0]) == torch.bool:
        return  # known bug: XLA simplifies convert(bool) / 0 to 0 where IEEE (and CPU) give NaN for 0 / 0
    b.emit(name, args, keeps_exact, inplace=hasattr(torch.Tensor, name + "_"))


def where(b):
    x = b.pick()
    cond = b.operand(b.shape(x), torch.bool, scalar=False)
    b.emit("where", [cond, x, b.operand(b.shape(x), hint=b.dtype(x))], True)


def clamp(b):
    x = b.pick()
    bound = (lambda: repr(b.draw(st.sampled_from(SCALARS)))) if b.draw(st.booleans()) else (
        lambda: b.operand(b.shape(x), scalar=False, hint=b.dtype(x)))
    low, high = [b.draw(st.sampled_from(["None", "bound", "bound"])) for _ in range(2)]
    low, high = [bound() if choice == "bound" else "None" for choice in (low, high)]
    kwargs = f"min={low}, max={high}"
    b.emit("clamp", [x], True, kwargs, inplace=True)


def convert(b):
    dtype = b.draw(st.sampled_from(DTYPES))
    x = b.pick(needs_exact=not dtype.is_floating_point)  # float to int truncates: discontinuous
    if x is not None and converts(b.scope[x], dtype):
        b.assign(f"{x}.to({dtype})", True)


def converts(t, dtype):
    """Whether PyTorch defines converting `t` to `dtype`: not NaN, ±inf or an out-of-range
    float to an integer."""
    if not t.is_floating_point() or dtype.is_floating_point or dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    return bool(((t >= info.min) & (t <= info.max)).all())


def reduction(b):
    name = b.draw(st.sampled_from(sorted(REDUCTIONS)))
    style, needs_exact, keeps_exact = REDUCTIONS[name]
    x = b.pick(lambda t: takes(name, t.dtype), needs_exact, rounds=not keeps_exact)
    if x is None:
        return
    p = Params(b, x)
    dim = None
    if style == "scan":
        dim = p.dim()
        kwargs = f"dim={dim}"
    elif b.draw(st.booleans()) and name != "logsumexp":
        kwargs = ""
    else:
        dim = p.dims() if style == "dims" and b.draw(st.booleans()) else p.dim()
        kwargs = f"dim={dim}, keepdim={b.draw(st.booleans())}"
    if name in ("argmax", "argmin") and b.dtype(x) == torch.bool:
        return  # known bug: argmax/argmin take bools (CPU raises)
    if name in ("prod", "cumprod") and may_overflow(b.scope[x]):
        return  # which of inf * 0 and 0 * inf comes first depends on the order of the products
    # PyTorch leaves an out= that aliases the input of a reduction undefined (CPU writes the
    # identity into it first)
    b.emit(name, [x], keeps_exact, kwargs, out_aliases=False)


def may_overflow(t):
    return t.is_floating_point() and t.double().abs().clamp(min=1).prod().item() > torch.finfo(t.dtype).max


def valid_dim(dim, rank):
    return -max(rank, 1) <= dim < max(rank, 1)


def sort_or_select(b):
    """Ops with a values and an indices output. Indices are discontinuous, and topk's are left
    out: the order of equal values is unspecified."""
    op, field = b.draw(st.sampled_from([("sort", "values"), ("sort", "indices"), ("topk", "values"),
                                        ("max", "values"), ("max", "indices"), ("min", "values"),
                                        ("min", "indices")]))
    x = b.pick(needs_exact=field == "indices")
    if x is None:
        return
    p = Params(b, x)
    flag, dim = b.draw(st.booleans()), p.dim()
    if op == "topk" and b.dtype(x) == torch.bool:
        return  # known bug: topk takes bools (CPU raises)
    call = {"sort": lambda: f"torch.sort({x}, dim={dim}, descending={flag}, stable=True)",
            "topk": lambda: f"torch.topk({x}, dim={dim}, k={p.length()}, largest={flag})",
            "max": lambda: f"torch.max({x}, dim={dim}, keepdim={flag})",
            "min": lambda: f"torch.min({x}, dim={dim}, keepdim={flag})"}[op]()
    b.assign(f"{call}.{field}", True)


def matmul(b):
    name, rank = b.draw(st.sampled_from([("matmul", 3), ("mm", 2), ("bmm", 3), ("mv", 2), ("dot", 1), ("matmul", 2)]))
    x = b.pick(lambda t: t.dim() == rank and t.dtype != torch.bool, rounds=True)
    if x is None:
        return
    shape = b.shape(x)
    k, n = (shape[-1] if shape else 1), b.draw(st.sampled_from([2, 1, 0, 3]))
    other = {"matmul": b.draw(st.sampled_from([(k, n), (k,), shape[:-2] + (k, n)])),
             "mm": (k, n), "bmm": shape[:1] + (k, n), "mv": (k,), "dot": (k,)}[name]
    y = b.pick(lambda t: tuple(t.shape) == other, rounds=True)
    if y is None or b.draw(st.booleans()):
        y = b.new_input(other, b.dtype(x))
    if name == "mv" and () in (b.shape(x), b.shape(y)):
        return  # known bug: mv of a 0-d tensor raises RuntimeError, not IndexError
    if b.dtype(x) != b.dtype(y) and 0 in (b.scope[x].numel(), b.scope[y].numel()):
        return  # CPU is inconsistent here: some paths raise, others return the promoted dtype
    b.emit(name, [x, y], False, out_aliases=False)  # undefined, as for reductions


def concatenate(b):
    x = b.pick()
    p = Params(b, x)
    name = b.draw(st.sampled_from(["cat", "stack"]))
    dim = p.dim(extra=1 if name == "stack" else 0)
    parts = [x]
    for _ in range(b.draw(st.integers(1, 2))):
        shape = list(b.shape(x))
        if name == "cat" and shape and b.draw(st.booleans()):
            shape[dim % len(shape)] = b.draw(st.sampled_from([1, 0, 2]))
        shape = tuple(shape)
        y = b.pick(lambda t: tuple(t.shape) == shape)
        parts.append(y if y is not None and b.draw(st.booleans()) else b.new_input(shape))
    if name == "cat" and not valid_dim(dim, p.rank) and len({len(b.shape(t)) for t in parts}) > 1:
        return  # known bug: cat checks the ranks before the dim (RuntimeError, not IndexError)
    b.emit(name, [f"[{', '.join(parts)}]"], True, f"dim={dim}")


def index_read(b):
    x = b.pick()
    p = Params(b, x)
    kind = b.draw(st.sampled_from(["advanced", "mask", "index_select", "gather", "masked_select", "nonzero"]))
    dim = p.dim()
    size = p.shape[dim] if -p.rank <= dim < p.rank else 1
    if kind == "advanced":
        i = b.draw(st.integers(0, max(p.rank - 1, 0)))
        idx = b.index(b.draw(SHAPES), p.shape[i] if p.rank else 1)
        b.assign(f"{x}[{':, ' * i}{idx}]", True)
    elif kind == "mask":
        mask = b.mask(p.shape[: b.draw(st.integers(0, p.rank))])
        b.assign(f"{x}[{mask}]", True)
    elif kind == "index_select":
        # CPU reports an out-of-range index_select index as IndexError or RuntimeError depending
        # on the dimension and layout (two kernels): indices in range (or into a size-0 dimension)
        idx = b.index((b.draw(st.integers(0, 4)),), size, in_range=True)
        b.emit("index_select", [x, str(dim), idx], True)
    elif kind == "gather":
        if not valid_dim(dim, p.rank):
            return  # known bug: an out-of-range dim raises AssertionError where CPU raises IndexError
        idx_shape = tuple(b.draw(st.integers(0, s)) for s in p.shape)
        b.emit("gather", [x, str(dim), b.index(idx_shape, size)], True)
    elif kind == "masked_select":
        mask = b.operand(p.shape, torch.bool, scalar=False)
        b.emit("masked_select", [x, mask], True)
    elif b.exact[x]:  # nonzero of a float tests it against 0: discontinuous
        b.emit("nonzero", [x], True)


def index_write(b):
    """Writes into a pool tensor (often a view): a float value written into an integer tensor is
    truncated, so it must be exact then."""
    x = b.pick()
    p = Params(b, x)
    exact_values = not b.dtype(x).is_floating_point
    kind = b.draw(st.sampled_from(["setitem", "accumulate", "mask", "masked_fill", "scatter",
                                   "scatter_add", "copy", "fill", "zero"]))
    if kind in ("setitem", "accumulate", "scatter", "scatter_add") and b.scope[x].numel() == 0:
        return  # CPU checks indices into an empty tensor in some kernels, not others: no rule to match
    dim = p.dim()
    size = p.shape[dim] if -p.rank <= dim < p.rank else 1
    if kind == "setitem":
        scalar = b.draw(st.booleans())
        i = b.draw(st.integers(0, max(p.rank - 1, 0)))
        rows = p.shape[i] if p.rank else 1
        # a tensor value written twice through duplicate indices races: unique indices then
        idx = b.index((b.draw(st.integers(0, rows)),), rows, unique=not scalar)
        target = p.shape[:i] + b.shape(idx) + p.shape[i + 1:]
        if scalar:
            value = repr(b.draw(st.sampled_from(SCALARS)))
        else:
            value = b.operand(target, b.dtype(x), exact_values, scalar=False)
        if b.scope[idx].numel() == 0 and (b.shares_memory(x, value) if not scalar else True):
            return  # CPU skips its overlap checks for some empty writes, not others: no rule to match
        b.step(f"{x}[{':, ' * i}{idx}] = {value}", True)
    elif kind == "accumulate":
        idx = b.index((b.draw(st.integers(0, 4)),), p.shape[0] if p.rank else 1)
        value = b.operand(b.shape(idx) + p.shape[1:], b.dtype(x), exact_values, scalar=False)
        if b.scope[idx].numel() == 0 and b.shares_memory(x, value):
            return  # as for setitem: CPU's overlap checks for empty writes follow no rule to match
        b.step(f"{x}.index_put_(({idx},), {value}, accumulate=True)", False)
    elif kind == "mask":
        mask = b.mask(p.shape[: b.draw(st.integers(0, p.rank))])
        if b.shares_memory(x, mask):
            return  # known bug: a mask that overlaps the tensor does not raise (masks become indices first)
        b.step(f"{x}[{mask}] = {b.draw(st.sampled_from(SCALARS))!r}", True)
    elif kind == "masked_fill":
        mask = b.operand(p.shape, torch.bool, scalar=False)
        b.step(f"{x}.masked_fill_({mask}, {b.draw(st.sampled_from(SCALARS))!r})", True)
    elif kind in ("scatter", "scatter_add"):
        if not valid_dim(dim, p.rank):
            return  # known bug: as for gather
        idx_shape = tuple(b.draw(st.integers(0, s)) for s in p.shape)
        idx = b.index(idx_shape, size)
        if kind == "scatter":  # one value for every index: duplicates do not race
            b.step(f"{x}.scatter_({dim}, {idx}, {b.draw(st.sampled_from(SCALARS))!r})", True)
        else:
            src = b.pick(lambda t: tuple(t.shape) == idx_shape) or b.new_input(idx_shape, b.dtype(x))
            b.step(f"{x}.scatter_add_({dim}, {idx}, {src})", False)
    elif kind == "copy":
        value = b.operand(p.shape, None, exact_values, scalar=False, hint=b.dtype(x))
        if converts(b.scope[value], b.dtype(x)):
            b.step(f"{x}.copy_({value})", True)
    elif kind == "fill":
        b.step(f"{x}.fill_({b.draw(st.sampled_from(SCALARS))!r})", True)
    else:
        b.step(f"{x}.zero_()", True)


STEPS = (elementwise, elementwise, elementwise, rearrange, rearrange, rearrange, reduction,
         reduction, index_write, index_write, index_read, matmul, where, clamp, convert,
         sort_or_select, concatenate, Builder.new_input)


@st.composite
def programs(draw, min_steps=3, max_steps=12):
    b = Builder(draw)
    for _ in range(draw(st.integers(1, 2))):
        b.new_input()
    for _ in range(draw(st.integers(min_steps, max_steps))):
        draw(st.sampled_from(STEPS))(b)
        if b.failed:
            break
    return Program(tuple(b.lines))
