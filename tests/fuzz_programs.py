"""Random tilescope programs for the fuzz net (tests/system/test_fuzz.py).

``programs()`` is a hypothesis strategy of ``FuzzProgram``s (tests/fuzz_model.py): a DSL module
(one ``@ts.jit`` orchestration and the ``@ts.kernel``s it submits) built from many small draws,
so that hypothesis can shrink a failing program, together with a model of what it computes and
how far sim may be from interp. ``load_program`` writes the source to a file and imports it (the
front-end reads the functions' source with ``inspect``), returning the jit function and the
argument specs; ``make_inputs`` makes the torch arguments.

Every program the generator makes is valid DSL (shapes, dtypes, directions, regions in bounds,
values finite and inside each op's domain): a compile error is a finding, never filtered out.

Every tilescope-internal import of the fuzz net is in the block below; when a module moves,
this is the one place to update.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from fuzz_model import (  # noqa: F401  (some are re-exported for test_fuzz)
    _TORCH_UNARY,
    BF16,
    CAP,
    CMP,
    F16,
    F32,
    FLOAT_REDUCE,
    FLOATS,
    I32,
    IN_MAG,
    INT_CAP,
    INT_IN,
    MODES,
    REDUCE,
    SCALAR_MAG,
    TORCH,
    TORCH_ULPS,
    ZERO_SIGN,
    AccMatMul,
    Assign,
    Binary,
    Call,
    Cast,
    Clamp,
    Cmp,
    Create,
    Expr,
    Full,
    FuzzProgram,
    IndexDrop,
    Iota,
    Kernel,
    Lit,
    Load,
    Logical,
    Loop,
    MatMul,
    OIf,
    OLoop,
    Param,
    Pow,
    Rand,
    Rebind,
    Reduce,
    Rng,
    SArg,
    ScalarParam,
    Scan,
    Store,
    TArg,
    TileSlice,
    Transpose,
    Unary,
    Var,
    Where,
    broadcast,
    stores,
    ulp,
)
from hypothesis import strategies as st

# --- tilescope internals used by the fuzz tests (keep them all here) ---------------------------
from tilescope.ir.printer import program_str  # noqa: F401  (re-exported for test_fuzz)
from tilescope.language.frontend import load_source
from tilescope.passes.manager import PassManager  # noqa: F401
from tilescope.passes.pipeline import DEFAULT_PIPELINE  # noqa: F401


def parse_dsl(text: str, filename: str):
    """The front-end IR (a Program) of DSL source text, such as printed IR."""
    parsed = load_source(text, filename)
    return parsed.program() if hasattr(parsed, "program") else parsed  # older load_source: a jit


# ------------------------------------------------------------------------------------------------

KNOWN_BUGS = {
    "zero_sign_minmax": "maximum/minimum (and the max/min reductions) of -0.0 and +0.0: sim returns "
    "the second operand (a > b ? a : b), interp whatever torch's code path does (its scalar loop, "
    "e.g. for a [1, 4] tile, returns the first: maximum(-0.0, 0.0) = -0.0); outputs of programs using "
    "them may differ in the sign of a zero",
}


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # in | out | inout | scalar
    shape: tuple[int, ...] | None
    dtype: torch.dtype


def arg_specs(prog: FuzzProgram) -> list[ArgSpec]:
    return [
        ArgSpec(p.name, p.kind, None if p.shape is None else tuple(p.shape), TORCH[p.dtype])
        for p in prog.params
    ]


def make_inputs(prog: FuzzProgram) -> list[Any]:
    """Arguments for a run: In/InOut tensors from the program's data seed (floats uniform in
    [-IN_MAG, IN_MAG] rounded to their dtype, i32 in [-INT_IN, INT_IN]), Out tensors zeros."""
    gen = torch.Generator().manual_seed(prog.data_seed)
    out: list[Any] = []
    for p in prog.params:
        if p.kind == "scalar":
            out.append(prog.count_value if p.dtype == I32 else prog.scalar_value)
        elif p.kind == "out":
            out.append(torch.zeros(p.shape, dtype=TORCH[p.dtype]))
        elif p.dtype == I32:
            out.append(torch.randint(-INT_IN, INT_IN + 1, p.shape, generator=gen, dtype=torch.int32))
        else:
            x = (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * IN_MAG
            out.append(x.to(TORCH[p.dtype]))
    return out


def load_module_source(source: str, name: str, directory: str | Path, stem: str | None = None) -> tuple[Any, Path]:
    """Write DSL ``source`` to a file under ``directory`` (a new one, or ``<stem>.py``: a file of
    that name is reused as it is), import it as a module and return (the module's attribute
    ``name``, the file). The front-end reads the functions' source with ``inspect``, so they must
    live in a real file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = stem or f"fuzz_{name}_{uuid.uuid4().hex[:12]}"
    path = directory / f"{stem}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module  # inspect.getsource finds the file through the module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(stem, None)
    return getattr(module, name), path


def load_program(prog: FuzzProgram, directory: str | Path) -> tuple[Any, list[ArgSpec], Path]:
    """Write the program's source to a file under ``directory``, import it and return (its
    @ts.jit function, the argument specs, the file)."""
    jit, path = load_module_source(prog.source(), prog.name, directory)
    return jit, arg_specs(prog), path


# ------------------------------------------------------------------------------------------------
# Generation


@dataclass
class GenOptions:
    max_stages: int = 3
    max_ops: int = 5


NICE_LITERALS = (0.5, 1.0, 2.0, 0.25, -1.5, 3.0, 0.1, -0.75, 1e-3, 1.25)


@st.composite
def float_literals(draw, opts: GenOptions):
    kind = draw(st.sampled_from(["nice", "f32", "double", "midpoint"]))
    if kind == "nice":
        return draw(st.sampled_from(NICE_LITERALS))
    if kind == "f32":
        return draw(st.floats(-4, 4, width=32, allow_subnormal=False))
    if kind == "double":
        return draw(st.floats(-4, 4, allow_subnormal=False))
    # a double exactly halfway between two neighbouring f32 values
    f = draw(st.floats(0.125, 4, width=32))
    return f + _f32_spacing(f) / 2


def _f32_spacing(f: float) -> float:
    return 2.0 ** (math.frexp(abs(f))[1] - 1 - 23)


OP_KINDS = (
    "unary",
    "unary",
    "binary",
    "binary",
    "binary",
    "muladd",
    "reduce",
    "cast",
    "where",
    "matmul",
    "transpose",
    "pow",
    "clamp",
    "iota",
    "slice",
    "scan",
    "rand",
)


class KernelGen:
    """Builds one kernel body from hypothesis draws."""

    def __init__(self, draw, opts: GenOptions, name: str, params: list[Param], ranges: dict[str, tuple]):
        self.draw, self.opts, self.name = draw, opts, name
        self.params = params
        self.ranges = ranges  # param name -> (lo, hi) of the tensor's values
        self.pool: list[Var] = []
        self.body: list = []
        self.n = 0
        self.scalar = next((p for p in params if p.kind == "scalar" and p.dtype == F32), None)
        self.count_param = next((p for p in params if p.kind == "scalar" and p.dtype == I32), None)
        self.uses_count = False

    def fresh(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def define(self, value: Expr, body: list | None = None, pool: list | None = None) -> Var:
        name = self.fresh()
        (self.body if body is None else body).append(Assign(name, value))
        var = Var(name, value.shape, value.dtype, value.lo, value.hi, value)
        (self.pool if pool is None else pool).append(var)
        return var

    def pick(self, cands: list, prefer_last: bool = False):
        i = self.draw(st.integers(0, len(cands) - 1))
        return cands[len(cands) - 1 - i] if prefer_last else cands[i]

    def literal(self, dtype: str) -> Lit:
        if dtype == I32:
            return Lit(self.draw(st.integers(-5, 5)), I32)
        return Lit(self.draw(float_literals(self.opts)), dtype)

    # -- ops ----------------------------------------------------------------------------------

    def operand(self, pool: list, like: Expr) -> Expr:
        """A second operand for ``like``: a pool value of its dtype that broadcasts with it (or
        another dtype, cast), a literal, or the scalar param."""
        kind = self.draw(st.sampled_from(["tile", "tile", "literal", "scalar", "drop"]))
        if kind == "scalar" and self.scalar is not None and like.dtype != I32:
            return ScalarParam(self.scalar.name)
        if kind == "drop" and like.shape is not None:  # x[i] or x[:, j]: a 1-D row of like's width
            w = like.shape[1]
            drops = [(v, 0) for v in pool if v.dtype == like.dtype and v.shape[1] == w and v.shape[0] > 1]
            drops += [(v, 1) for v in pool if v.dtype == like.dtype and v.shape[0] == w and v.shape[1] > 1]
            drops = [(v, ax) for v, ax in drops if isinstance(v, Var)]
            if drops:
                v, ax = self.pick(drops, prefer_last=True)
                return IndexDrop(v, ax, self.draw(st.integers(0, v.shape[ax] - 1)))
        cands = [v for v in pool if v is not like and v.dtype != "bool" and broadcast(v.shape, like.shape)]
        if kind == "literal" or not cands:
            return self.literal(like.dtype)
        other = self.pick(cands, prefer_last=True)
        if other.dtype != like.dtype:
            return self.cast_to(other, like.dtype)
        return other

    def cast_to(self, x: Expr, dtype: str) -> Expr:
        if x.dtype == dtype:
            return x
        mode = self.draw(st.sampled_from(MODES)) if dtype == I32 else None
        return Cast(x, dtype, mode)

    def ok(self, e: Expr) -> bool:
        cap = INT_CAP if e.dtype == I32 else CAP
        return e.mag <= cap

    def unary(self, x: Expr) -> Expr:
        if x.dtype == I32:
            return Unary(self.draw(st.sampled_from(["neg", "abs"])), x)
        choices = ["neg", "abs", "tanh", "sqrt", "log", "log2", "log1p", "reciprocal", "erf", "softplus", "softsign",
                   "hardsigmoid"]  # fmt: skip
        if -30 <= x.lo and x.hi <= 7:
            choices += ["exp", "expm1"]
        if -40 <= x.lo and x.hi <= 10:
            choices.append("exp2")
        if x.mag <= 60:
            choices += ["sigmoid", "silu", "gelu", "gelu_tanh", "elu", "selu", "hardswish", "mish", "logsigmoid"]
        op = self.draw(st.sampled_from(choices))
        if op in ("sqrt", "log", "log2", "log1p", "reciprocal"):
            if (op == "sqrt" and x.lo >= 0) or (op == "log1p" and x.lo >= -0.25) or (op != "sqrt" and x.lo >= 0.5):
                return Unary(op, x)
            if op == "reciprocal" and x.hi <= -0.5:
                return Unary(op, x)
            return Unary(op, Binary("add", Unary("abs", x), Lit(1.0, x.dtype)))
        return Unary(op, x)

    def pow(self, pool: list, a: Expr) -> Expr | None:
        """ts.pow with a positive base: tile^tile, tile^literal or literal^tile."""
        if a.dtype not in FLOATS:
            return None
        kind = self.draw(st.sampled_from(["tile", "literal", "base"]))
        if kind == "base":  # literal ^ tile
            x = a if a.mag <= 8 else Unary("tanh", a)
            e = Pow(Lit(self.draw(st.sampled_from([2.0, 0.5, 1.5, 3.0, 0.75])), a.dtype), x)
            return e if self.ok(e) else None
        base = a if a.lo >= 0.25 else Binary("add", Unary("abs", a), Lit(self.draw(st.sampled_from([0.5, 1.0])), a.dtype))
        if kind == "literal":
            y: Expr = Lit(self.draw(st.sampled_from([2.0, 0.5, 3.0, -1.0, 2.5, -1.5, 1.5, -0.5, 0.0, 1.0])), a.dtype)
        else:
            y = self.operand(pool, a)
            if y.shape is None:
                y = Lit(self.draw(st.sampled_from([2.0, -1.0, 0.5])), a.dtype)
            elif y.mag > 3:
                y = Unary("tanh", y)
        e = Pow(base, y)
        if not self.ok(e) and y.shape is not None:
            e = Pow(base, Unary("tanh", y) if not isinstance(y, Unary) or y.op != "tanh" else Lit(0.5, a.dtype))
        return e if self.ok(e) else None

    def clamp_op(self, pool: list, a: Expr) -> Expr:
        """ts.clamp(a, min=, max=) with literal bounds (or one of them a tile)."""
        which = self.draw(st.sampled_from(["both", "min", "max", "tile"]))
        lo_b, hi_b = sorted((self.literal(a.dtype) for _ in range(2)), key=lambda lit: lit.value)
        if which == "tile":
            t = self.operand(pool, a)
            return Clamp(a, t, None) if self.draw(st.booleans()) else Clamp(a, None, t)
        return Clamp(a, lo_b if which != "max" else None, hi_b if which != "min" else None)

    def slice_or_iota(self, kind: str, pool: list, a: Expr) -> Expr | None:
        r, c = a.shape
        if kind == "rand" and a.dtype == F32:  # random numbers with a
            shape = (r, c) if self.draw(st.booleans()) else (1, c)
            return Binary(self.draw(st.sampled_from(["add", "mul"])), a,
                          Rand(shape, self.draw(st.integers(0, 2**40)), self.draw(st.integers(-(2**40), 2**40))))  # fmt: skip
        if kind == "iota":  # an index tile combined with a
            it = Iota((r, c) if self.draw(st.booleans()) else ((r, 1) if self.draw(st.booleans()) else (1, c)), a.dtype, 0)
            it.dim = self.draw(st.integers(0, 1))
            it.lo, it.hi = 0.0, float(it.shape[it.dim] - 1)
            return Binary(self.draw(st.sampled_from(["add", "sub", "mul", "maximum"])), a, it)
        if not isinstance(a, Var) or r * c == 1:
            return None
        r0 = self.draw(st.integers(0, r - 1))
        r1 = self.draw(st.integers(r0 + 1, r))
        c0 = self.draw(st.integers(0, c - 1))
        c1 = self.draw(st.integers(c0 + 1, c))
        return TileSlice(a, r0, r1, c0, c1)

    def binary(self, pool: list, a: Expr) -> Expr:
        ops = ["add", "sub", "mul", "maximum", "minimum"] + (["div"] if a.dtype != I32 else [])
        op = self.draw(st.sampled_from(ops))
        b = self.operand(pool, a)
        if op == "div" and not (min(abs(b.lo), abs(b.hi)) >= 0.5 and (b.lo > 0 or b.hi < 0)):
            if b.shape is None:  # a scalar: divide by a literal away from zero instead
                b = Lit(self.draw(st.sampled_from([2.0, 0.5, -1.5, 3.0, 1.25])), a.dtype)
            else:
                b = Binary("add", Unary("abs", b), Lit(1.0, a.dtype))
        swap = b.shape is not None and self.draw(st.booleans()) and op != "div"
        e = Binary(op, b, a) if swap else Binary(op, a, b)
        if not self.ok(e):
            e = Binary("maximum" if self.draw(st.booleans()) else "minimum", a, b)
        return e

    def condition(self, pool: list, a: Expr) -> Expr:
        b = self.operand(pool, a)
        cond: Expr = Cmp(self.draw(st.sampled_from(sorted(CMP))), a, b)
        extra = self.draw(st.sampled_from(["none", "none", "and", "or", "not"]))
        if extra == "not":
            cond = Logical("logical_not", cond, None)
        elif extra in ("and", "or"):
            c2 = Cmp(self.draw(st.sampled_from(sorted(CMP))), a, self.literal(a.dtype))
            cond = Logical(f"logical_{extra}", cond, c2)
        return cond

    def where(self, pool: list, a: Expr) -> Expr:
        cond = self.condition(pool, self.pick([v for v in pool if v.dtype != "bool"], prefer_last=True))
        if self.draw(st.integers(0, 2)) == 0:  # an index mask: iota compared with a literal
            dim = self.draw(st.integers(0, 1))
            it = Iota(a.shape, I32, dim)
            cond = Cmp(self.draw(st.sampled_from(sorted(CMP))), it, Lit(self.draw(st.integers(0, a.shape[dim])), I32))
        x = a
        y = self.operand(pool, a)
        shape_xy = broadcast(x.shape, y.shape) if y.shape else x.shape
        if broadcast(cond.shape, shape_xy) is None:  # compare ``a`` itself with a literal instead
            cond = Cmp(self.draw(st.sampled_from(sorted(CMP))), a, self.literal(a.dtype))
        return Where(cond, x, y)

    def reduce(self, a: Expr) -> Expr | None:
        r, c = a.shape
        ops = [o for o in REDUCE if (o.startswith("row") and c > 1) or (o.startswith("col") and r > 1)]
        ops = [o for o in ops if a.dtype in FLOATS or not o.endswith(FLOAT_REDUCE)]
        if not ops:
            return None
        e = Reduce(self.draw(st.sampled_from(ops)), a)
        return e if self.ok(e) else Reduce(e.op.split("_")[0] + "_max", a)

    def scan(self, a: Expr) -> Expr:
        """ts.cumsum, or ts.cumprod of values squashed into [-1, 1] (tanh, or a clamp for i32), along a
        dim of a 2-D tile, maybe reversed and exclusive."""
        dim = self.draw(st.integers(0, 1))
        rev, exc = self.draw(st.booleans()), self.draw(st.booleans())
        if self.draw(st.booleans()):
            return Scan("cumsum", a, dim, rev, exc)
        x = a if max(abs(a.lo), abs(a.hi)) <= 1.0 else (
            Unary("tanh", a) if a.dtype in FLOATS else Clamp(a, Lit(-1, I32), Lit(1, I32)))  # fmt: skip
        return Scan("cumprod", x, dim, rev, exc)

    def matmul(self, pool: list, a: Expr) -> Expr | None:
        if a.dtype not in FLOATS:
            return None
        ta = self.draw(st.integers(0, 3)) == 0  # a's transpose by transpose_a=True
        m, k = a.shape[::-1] if ta else a.shape
        cands: list[tuple[Expr, bool]] = [(v, False) for v in pool if v.dtype == a.dtype and v.shape[0] == k]
        cands += [(Transpose(v), False) for v in pool if v.dtype == a.dtype and v.shape[1] == k]
        cands += [(v, True) for v in pool if v.dtype == a.dtype and v.shape[1] == k]  # transpose_b=True
        if not cands:
            return None
        b, tb = self.pick(cands)
        n = b.shape[0] if tb else b.shape[1]
        acc = None
        if self.draw(st.booleans()):
            accs = [v for v in pool if v.dtype == F32 and v.shape == (m, n)]
            acc = self.pick(accs) if accs else None
        e = MatMul(a, b, acc, ta, tb)
        if not self.ok(e):
            e = MatMul(Unary("tanh", a), Unary("tanh", b), None, ta, tb)
            if not self.ok(e):
                return None
        return e

    def cast(self, a: Expr) -> Expr:
        if a.dtype == I32:
            return Cast(a, self.draw(st.sampled_from(FLOATS)))
        targets = [d for d in FLOATS if d != a.dtype] + [I32]
        return self.cast_to(a, self.draw(st.sampled_from(targets)))

    def op(self, pool: list, shape_ok=None) -> Expr:
        """One random expression over ``pool``."""
        cands = [v for v in pool if v.dtype != "bool" and (shape_ok is None or shape_ok(v.shape))]
        a = self.pick(cands, prefer_last=True)
        kind = self.draw(st.sampled_from(OP_KINDS))
        e: Expr | None = None
        if kind == "muladd" and a.dtype != "bool":  # a * b + c, as in most real kernels
            m = Binary("mul", a, self.operand(pool, a))
            e = Binary(self.draw(st.sampled_from(["add", "sub"])), m, self.operand(pool, m))
            if self.draw(st.booleans()) and e.b.shape is not None:
                e = Binary(e.op, e.b, m)
        elif kind == "unary":
            e = self.unary(a)
        elif kind == "binary":
            e = self.binary(pool, a)
        elif kind == "reduce":
            e = self.reduce(a)
        elif kind == "cast":
            e = self.cast(a)
        elif kind == "where":
            e = self.where(pool, a)
        elif kind == "matmul":
            e = self.matmul(pool, a)
        elif kind == "transpose" and a.shape[0] != a.shape[1]:
            e = Transpose(a)
        elif kind == "pow":
            e = self.pow(pool, a)
        elif kind == "clamp":
            e = self.clamp_op(pool, a)
        elif kind in ("iota", "slice", "rand"):
            e = self.slice_or_iota(kind, pool, a)
        elif kind == "scan":
            e = self.scan(a)
        if e is None or not self.ok(e):
            e = Unary("neg", a)
        if self.draw(st.integers(0, 3)) == 0 and e.dtype != "bool":  # a deeper expression
            e2 = self.binary(pool, e) if self.draw(st.booleans()) else self.unary(e)
            if self.ok(e2):
                e = e2
        return e

    # -- structure ----------------------------------------------------------------------------

    def count(self, size: int):
        """A ``valid=`` count for a dim of ``size``: a literal in [0, size] or, when the kernel
        has the i32 scalar, ``ts.minimum(n, size)`` (n >= 0)."""
        if self.count_param is not None and self.draw(st.booleans()):
            self.uses_count = True
            return (self.count_param.name, size)
        return self.draw(st.integers(0, size))

    def loads(self) -> None:
        for p in self.params:
            if p.kind in ("in", "inout"):
                lo, hi = self.ranges[p.name]
                form = self.draw(st.integers(0, 5))
                if form == 0:  # a ragged load: the rest is the fill
                    valid = (self.count(p.shape[0]), self.count(p.shape[1]))
                    fill = self.draw(st.sampled_from([0, -3, 7] if p.dtype == I32 else [0.0, -1.0, 1.5, -0.0]))
                    self.define(Load(p.name, (0, 0), p.shape, p.dtype, lo, hi, valid, fill))
                elif form == 1:  # a padded (and maybe strided) load: what lies outside is the pad
                    offs = (self.draw(st.integers(-2, 2)), self.draw(st.integers(-2, 2)))
                    steps = (self.draw(st.integers(1, 2)), self.draw(st.integers(1, 2)))
                    pad = self.draw(st.sampled_from([0, -3, 7] if p.dtype == I32 else [0.0, -1.0, 1.5, -0.0]))
                    self.define(Load(p.name, offs, p.shape, p.dtype, lo, hi, pad=pad, strides=steps))
                elif form == 2:  # one column, its tile dim with no tensor dim (dims=[0, None])
                    c = self.draw(st.integers(0, p.shape[1] - 1))
                    self.define(Load(p.name, (0, c), (p.shape[0], 1), p.dtype, lo, hi, dims=(0, None)))
                else:
                    self.define(Load(p.name, (0, 0), p.shape, p.dtype, lo, hi))

    def chunk(self, src: Param, w: int, h: str = "h") -> Expr:
        """``src``'s column chunk at loop variable ``h`` and up to two ops on it (with values
        of the enclosing scope that broadcast to it)."""
        r, c = src.shape
        lo, hi = self.ranges[src.name]
        g: Expr = Load(src.name, (0, h), (r, w), src.dtype, lo, hi)
        outer = [v for v in self.pool if v.shape in ((r, 1), (1, 1)) and v.dtype == src.dtype]
        for _ in range(self.draw(st.integers(0, 2))):
            g2 = self.binary([g, *outer], g) if self.draw(st.booleans()) else self.unary(g)
            if self.ok(g2) and g2.shape == (r, w):
                g = g2
        return g

    def carried_loop(self, src: Param) -> None:
        """A value carried across a ts.range loop over column chunks of ``src``."""
        r, c = src.shape
        widths = [w for w in (1, 2, 4, 8, 16) if c % w == 0 and w < c]
        if not widths:
            return
        w = self.draw(st.sampled_from(widths))
        weight = next((p for p in self.params if p.name == "wt"), None)
        kinds = ["rowred", "elem"]
        if weight is not None and weight.shape[0] == c and src.dtype in FLOATS:
            kinds.append("matmul")
        kind = self.draw(st.sampled_from(kinds))
        h = "h"
        body: list = []
        g = self.chunk(src, w, h)
        if kind == "matmul":
            wl = Load("wt", (h, 0), (w, weight.shape[1]), weight.dtype, *self.ranges["wt"])
            a = self.cast_to(g, weight.dtype) if g.dtype != weight.dtype else g
            bound = c * a.mag * wl.mag
            if bound > CAP:
                a, wl = Unary("tanh", a), Unary("tanh", wl) if weight.dtype in FLOATS else wl
            init = Full((r, weight.shape[1]), 0.0, F32)
            acc = self.define(init)
            step = AccMatMul(a, wl, acc, self.draw(st.sampled_from(["acc+mm", "mm+acc", "kw"])))
            acc.lo, acc.hi = -(c * a.mag * wl.mag), c * a.mag * wl.mag
            body.append(Assign(acc.name, step))
            self.body.append(Loop(h, 0, c, w, body))
            return
        n = c // w
        if kind == "rowred":
            op = self.draw(st.sampled_from(["row_sum", "row_max", "row_min"]))
            part = Reduce(op, g)
            if op == "row_sum":
                if n * part.mag > CAP:
                    part = Reduce("row_max", g)
                    op = "row_max"
        else:
            part = g
            op = self.draw(st.sampled_from(["add", "maximum", "minimum"]))
            if n * part.mag > CAP:
                op = "maximum"
        combine = (
            "add" if op in ("add", "row_sum") else ("maximum" if op in ("maximum", "row_max") else "minimum")
        )
        init_val = 0.0 if combine == "add" else (-CAP if combine == "maximum" else CAP)
        if src.dtype == I32:
            init_val = int(init_val)
        init = Full(part.shape, init_val, part.dtype)
        acc = self.define(init)
        if combine == "add":
            acc.lo, acc.hi = n * min(part.lo, 0.0), n * max(part.hi, 0.0)
        else:
            acc.lo, acc.hi = min(part.lo, init_val), max(part.hi, init_val)
        step = Binary(combine, acc, part)
        body.append(Assign(acc.name, step))
        self.body.append(Loop(h, 0, c, w, body))

    def storable(self, v: Expr, shape: tuple[int, int]) -> Expr:
        """``v`` brought to a shape that broadcasts to ``shape`` (transposed or reduced)."""
        r, c = shape
        if broadcast(v.shape, shape) == shape:
            return v
        if v.shape == (c, r):
            return Transpose(v)
        e = v if v.shape[0] in (1, r) else Reduce("col_max", v)
        if e.shape[1] not in (1, c):
            e = Reduce("row_max", e)
        return e if broadcast(e.shape, shape) == shape else Reduce("row_max", Reduce("col_max", v))

    def unused(self) -> list[Var]:
        """Pool values no statement reads (they would be dead code)."""
        used: set[str] = set()

        def walk(e: Expr):
            if isinstance(e, Var):
                used.add(e.name)
            for ch in e.children():
                walk(ch)

        def stmts(body):
            for st_ in body:
                if isinstance(st_, Loop):
                    stmts(st_.body)
                else:
                    walk(st_.value)

        stmts(self.body)
        return [
            v for v in self.pool if v.name not in used and v.dtype != "bool" and not isinstance(v.defn, Load)
        ]

    def fold_unused(self, v: Expr, shape: tuple[int, int]) -> Expr:
        """``v`` combined with every value nothing reads (brought to ``shape``), so that no op
        of the kernel is dead code."""
        for u in self.unused():
            if u is v:
                continue
            t = self.cast_to(self.storable(u, shape), v.dtype)
            e = Binary(self.draw(st.sampled_from(["add", "sub", "maximum", "minimum", "mul"])), v, t)
            v = e if self.ok(e) else Binary("maximum", v, t)
        return v

    def store_all(self, outs: list[Param]) -> None:
        for p in outs:
            r, c = p.shape
            srcs = [
                q for q in self.params if q.kind in ("in", "inout") and q.shape == p.shape and q.name != "wt"
            ]
            widths = [w for w in (1, 2, 4, 8, 16) if c % w == 0 and w < c]
            if srcs and widths and self.draw(st.integers(0, 3)) == 0:
                # store column chunks in a loop: ts.store(o, [0, h], f(ts.load(src, [0, h], ...)))
                w = self.draw(st.sampled_from(widths))
                g = self.fold_unused(self.chunk(self.pick(srcs), w), (r, w))
                if g.shape != (r, w):
                    g = Binary("add", g, Full((r, w), 0 if g.dtype == I32 else 0.0, g.dtype))
                self.body.append(Loop("h", 0, c, w, [Store(p.name, (0, "h"), self.cast_to(g, p.dtype))]))
                continue
            cands = [v for v in self.pool if v.dtype != "bool" and broadcast(v.shape, p.shape) == p.shape]
            v = self.fold_unused(self.pick(cands, prefer_last=True), p.shape)
            if v.shape != p.shape:
                v = Binary("add", v, Full(p.shape, 0 if v.dtype == I32 else 0.0, v.dtype))
            valid = None
            if p.kind == "inout" and self.draw(st.integers(0, 3)) == 0:  # the rest keeps its input
                valid = (self.count(r), self.count(c))
            self.body.append(Store(p.name, (0, 0), self.cast_to(v, p.dtype), valid))

    def build(self) -> Kernel:
        ins = [p for p in self.params if p.kind in ("in", "inout")]
        outs = [p for p in self.params if p.kind in ("out", "inout")]
        self.loads()
        main = [p for p in ins if p.name != "wt"]
        if main and self.draw(st.integers(0, 2)) > 0:
            self.carried_loop(self.pick(main))
        for _ in range(self.draw(st.integers(0, self.opts.max_ops))):
            self.define(self.op(self.pool))
        self.store_all(outs)
        return Kernel(self.name, self.params, self.body)


def clamp(e: Expr, bound: float) -> Expr:
    """``e`` limited to [-bound, bound] (exact ops; ties are never between zeros)."""
    if -bound <= e.lo and e.hi <= bound:
        return e
    b = int(bound) if e.dtype == I32 else float(bound)
    return Binary("minimum", Binary("maximum", e, Lit(-b, e.dtype)), Lit(b, e.dtype))


def _clamp_stores(body: list, param: str, bound: float) -> None:
    for i, s in enumerate(body):
        if isinstance(s, Loop):
            _clamp_stores(s.body, param, bound)
        elif isinstance(s, Store) and s.param == param:
            body[i] = Store(s.param, s.offsets, clamp(s.value, bound), s.valid)


def _pow2_at_least(x: float) -> float:
    return 2.0 ** math.ceil(math.log2(max(x, 1.0)))


@dataclass
class TensorInfo:
    """What the generator knows of a 2-D tensor (or one plane ``base[lead]`` of a 3-D one)."""

    name: str
    shape: tuple[int, int]
    dtype: str
    lo: float
    hi: float
    readable: bool
    kind: str  # in | out | inout | tmp
    base: str = ""
    lead: int | None = None

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def arg(self, rows: Rng | None = None, cols: Rng | None = None) -> TArg:
        return TArg(self.base or self.name, rows, cols, self.lead)


class ProgramGen:
    """Builds an orchestration (and its kernels) from hypothesis draws."""

    def __init__(self, draw, opts: GenOptions):
        self.draw, self.opts = draw, opts
        self.nr = draw(st.sampled_from([4, 8, 2, 16, 1]))
        self.nc = draw(st.sampled_from([8, 4, 16, 32]))
        self.tensors: dict[str, TensorInfo] = {}
        self.kernels: list[Kernel] = []
        self.body: list = []
        self.features: set[str] = set()
        self.handles: list[str] = []
        self.n_tmp = 0
        self.n_pingpong = 0

    def dtype(self) -> str:
        return self.draw(st.sampled_from([F32, F32, BF16, F16, I32]))

    def add(self, name: str, kind: str, shape, dtype: str, readable: bool) -> TensorInfo:
        if kind in ("in", "inout"):
            m = float(INT_IN) if dtype == I32 else IN_MAG
            lo, hi = -m, m
        else:
            lo = hi = 0.0
        t = TensorInfo(name, shape, dtype, lo, hi, readable, kind)
        self.tensors[name] = t
        return t

    def new_tmp(self, dtype: str, plain: bool = False) -> TensorInfo:
        name = f"t{self.n_tmp}"
        self.n_tmp += 1
        if plain or self.draw(st.integers(0, 3)) > 0:
            t = self.add(name, "tmp", (self.nr, self.nc), dtype, True)
            self.body.append(Create(name, t.shape, dtype))
            return t
        # a [2, rows, cols] stack: each plane is a tensor of its own to the generator, passed
        # as name[j, ...] (an integer index drops the leading dim)
        self.body.append(Create(name, (2, self.nr, self.nc), dtype))
        self.features.add("stack")
        planes = []
        for j in range(2):
            t = self.add(f"{name}[{j}]", "tmp", (self.nr, self.nc), dtype, j == 0)
            t.base, t.lead = name, j
            planes.append(t)
        return planes[self.draw(st.integers(0, 1))]

    def readable(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.readable and t.name != "w"]

    def kernel(self, ins, dest, dest_kind, shape, use_w, use_s, feedback_src=None):
        """A kernel reading ``ins`` (+ the weight, the scalar) and writing ``dest`` through its
        param ``o``. When the kernel can read what it (or an earlier task of it) wrote — ``o``
        is InOut, or ping-pong buffers — its stores are clamped to the range it was generated
        for, so repeated passes cannot leave it."""
        draw = self.draw
        name = f"k{len(self.kernels)}"
        params = [Param(f"a{i}", "in", shape, t.dtype) for i, t in enumerate(ins)]
        ranges = {f"a{i}": (t.lo, t.hi) for i, t in enumerate(ins)}
        if use_w:
            w = self.tensors["w"]
            params.append(Param("wt", "in", w.shape, w.dtype))
            ranges["wt"] = (w.lo, w.hi)
        params.append(Param("o", dest_kind, shape, dest.dtype))
        bound = None
        if dest_kind == "inout" or feedback_src is not None:
            floor = 64.0 if dest.dtype == I32 else 4.0
            mags = [dest.mag, floor] + ([feedback_src.mag] if feedback_src is not None else [])
            bound = _pow2_at_least(max(mags))
            ranges["o"] = (-bound, bound)
            if feedback_src is not None:
                ranges[f"a{len(ins) - 1}"] = (-bound, bound)
        else:
            ranges["o"] = (dest.lo, dest.hi)
        if use_s:
            params.append(Param("s", "scalar", None, F32))
        use_n = "n" in self.tensors_scalar and draw(st.booleans())
        if use_n:
            params.append(Param("n", "scalar", None, I32))
        gen = KernelGen(draw, self.opts, name, params, ranges)
        k = gen.build()
        # g++ warns about unused params
        if use_s and not any(isinstance(e, ScalarParam) for e in k.exprs()):
            k.params = [p for p in k.params if p.name != "s"]
        if use_n and not gen.uses_count:
            k.params = [p for p in k.params if p.name != "n"]
        if bound is not None:
            _clamp_stores(k.body, "o", bound)
        self.kernels.append(k)
        written = list(stores(k.body))
        lo = min([float(s.value.lo) for s in written] + ([-bound] if bound and dest_kind == "inout" else []))
        hi = max([float(s.value.hi) for s in written] + ([bound] if bound and dest_kind == "inout" else []))
        return k, lo, hi

    def stage(self, force_dest: TensorInfo | None = None) -> None:
        draw, nr, nc = self.draw, self.nr, self.nc
        pattern = draw(st.sampled_from(["full", "rows", "cols", "window", "chain", "pingpong"]))
        srcs = self.readable()
        ins: list[TensorInfo] = []
        for _ in range(draw(st.integers(1, min(2, len(srcs))))):
            t = srcs[len(srcs) - 1 - draw(st.integers(0, len(srcs) - 1))]
            if t not in ins:
                ins.append(t)
        if force_dest is not None:
            dest = force_dest
        else:
            choice = draw(st.sampled_from(["tmp", "tmp", "out", "z"]))
            if choice == "out":
                outs = [n for n, t in self.tensors.items() if t.kind == "out"]
                dest = self.tensors[draw(st.sampled_from(outs))]
            elif choice == "z" and "z" in self.tensors:
                dest = self.tensors["z"]
            else:
                dest = self.new_tmp(self.dtype())
        if dest in ins:
            ins.remove(dest)
            if not ins:  # nothing else to read: update the destination in place
                pattern = "chain"
        if pattern == "pingpong" and (dest.kind != "tmp" or dest.lead is not None):
            pattern = "full"
        dest_kind = "inout" if (dest.kind == "inout" or pattern == "chain") else "out"
        use_s = "s" in self.tensors_scalar and draw(st.booleans())
        rows_b = [b for b in (1, 2, 4, 8) if nr % b == 0 and b < nr] or [nr]
        cols_b = [w for w in (4, 8, 16) if nc % w == 0 and w < nc] or [nc]
        has_w = "w" in self.tensors
        lo = hi = 0.0
        if pattern == "full":
            use_w = has_w and draw(st.booleans())
            k, lo, hi = self.kernel(ins, dest, dest_kind, (nr, nc), use_w, use_s)
            s_arg = _s(k)
            w_arg = [TArg("w")] if use_w else []
            self.body.append(Call(k, [t.arg() for t in ins] + w_arg + [dest.arg()] + s_arg))
        elif pattern == "rows":
            b = draw(st.sampled_from(rows_b))
            use_w = has_w and draw(st.booleans())
            k, lo, hi = self.kernel(ins, dest, dest_kind, (b, nc), use_w, use_s)
            s_arg = _s(k)
            rr = Rng("r", 0, b)
            w_arg = [TArg("w")] if use_w else []
            call = Call(k, [t.arg(rr) for t in ins] + w_arg + [dest.arg(rr)] + s_arg)
            self.body.append(OLoop("r", 0, nr, b, [call]))
        elif pattern == "cols":
            w = draw(st.sampled_from(cols_b))
            k, lo, hi = self.kernel(ins, dest, dest_kind, (nr, w), False, use_s)
            s_arg = _s(k)
            cc = Rng("c", 0, w)
            call = Call(k, [t.arg(None, cc) for t in ins] + [dest.arg(None, cc)] + s_arg)
            self.body.append(OLoop("c", 0, nc, w, [call]))
        elif pattern == "window":
            b = draw(st.sampled_from(rows_b))
            k, lo, hi = self.kernel(ins, dest, dest_kind, (b, nc), False, use_s)
            s_arg = _s(k)
            for _ in range(draw(st.integers(1, 3))):
                args = [t.arg(Rng(None, draw(st.integers(0, nr - b)), b)) for t in ins]
                args.append(dest.arg(Rng(None, draw(st.integers(0, nr - b)), b)))
                call = Call(k, args + s_arg)
                if self.handles and draw(st.integers(0, 2)) == 0:
                    call.deps = [draw(st.sampled_from(self.handles))]
                    self.features.add("explicit_deps")
                if draw(st.integers(0, 2)) == 0:
                    call.handle = f"h{len(self.handles)}"
                    call.name = f"win{len(self.handles)}"
                    self.handles.append(call.handle)
                self.body.append(call)
        elif pattern == "chain":
            b = draw(st.sampled_from(rows_b))
            k, lo, hi = self.kernel(ins, dest, "inout", (b, nc), False, use_s)
            s_arg = _s(k)
            n = draw(st.integers(1, 3))
            first = draw(st.integers(0, nr - b))
            h = f"h{len(self.handles)}"
            self.handles.append(h)
            args0 = [t.arg(Rng(None, first, b)) for t in ins] + [dest.arg(Rng(None, first, b))]
            self.body.append(Call(k, args0 + s_arg, handle=h))
            if draw(st.booleans()) and nr > b:  # the updated window moves with the loop
                n = min(n, nr - b + 1)
                rng = Rng("i", 0, b)
            else:
                rng = Rng(None, first, b)
            explicit = draw(st.booleans())
            args = [t.arg(rng) for t in ins] + [dest.arg(rng)] + s_arg
            step = Call(k, args, handle=h if explicit else None, deps=[h] if explicit else [])
            if explicit:
                self.features.add("explicit_deps")
            loop_body: list = [step]
            if n > 1 and draw(st.integers(0, 2)) == 0:  # odd iterations read another window
                alt = draw(st.integers(0, nr - b))
                other = Call(k, [t.arg(Rng(None, alt, b)) for t in ins] + [dest.arg(rng)] + s_arg)
                loop_body = [OIf("i", [step], [other])]
                self.features.add("branch")
            self.body.append(OLoop("i", 0, n, 1, loop_body))
        else:  # pingpong: src and dst alternate between two intermediates
            other = self.new_tmp(dest.dtype, plain=True)
            j = self.n_pingpong
            self.n_pingpong += 1
            src, dst = f"src{j}", f"dst{j}"
            k, lo, hi = self.kernel(ins + [other], dest, "out", (nr, nc), False, use_s, feedback_src=other)
            s_arg = _s(k)
            n = draw(st.integers(2, 3))
            self.body.append(Rebind((src, dst), (other.name, dest.name)))
            loop = [
                Call(k, [t.arg() for t in ins] + [TArg(src), TArg(dst)] + s_arg),
                Rebind((src, dst), (dst, src)),
            ]
            self.body.append(OLoop("p", 0, n, 1, loop))
            other.lo, other.hi = min(other.lo, lo), max(other.hi, hi)
        dest.lo, dest.hi = min(dest.lo, lo), max(dest.hi, hi)
        dest.readable = True
        self.features.add(pattern)

    def build(self) -> FuzzProgram:
        draw, nr, nc = self.draw, self.nr, self.nc
        for i in range(draw(st.integers(1, 2))):
            self.add(f"x{i}", "in", (nr, nc), self.dtype(), True)
        if draw(st.integers(0, 2)) == 0:
            self.add("w", "in", (nc, draw(st.sampled_from([4, 8]))), draw(st.sampled_from(FLOATS)), True)
        for i in range(draw(st.integers(1, 2))):
            self.add(f"y{i}", "out", (nr, nc), self.dtype(), False)
        if draw(st.booleans()):
            self.add("z", "inout", (nr, nc), self.dtype(), True)
        params = [Param(t.name, t.kind, t.shape, t.dtype) for t in self.tensors.values()]
        self.tensors_scalar = {"s"} if draw(st.booleans()) else set()
        if self.tensors_scalar:
            params.append(Param("s", "scalar", None, F32))
        if draw(st.integers(0, 2)) == 0:  # an i32 scalar: run-time valid= counts
            self.tensors_scalar.add("n")
            params.append(Param("n", "scalar", None, I32))
        count = draw(st.integers(0, 2 * max(nr, nc)))
        scalar = float(torch.tensor(draw(st.floats(-SCALAR_MAG, SCALAR_MAG)), dtype=torch.float32).item())
        for _ in range(draw(st.integers(1, self.opts.max_stages))):
            self.stage()
        for t in list(self.tensors.values()):
            if t.kind == "out" and not _written(self.body, t.name):
                self.stage(force_dest=t)
        used = {p.name for k in self.kernels for p in k.params if p.kind == "scalar"}
        params = [p for p in params if p.kind != "scalar" or p.name in used]
        if "n" in used:
            self.features.add("runtime_valid")
        seed = draw(st.integers(0, 2**31 - 1))
        return FuzzProgram("prog", params, self.kernels, self.body, seed, scalar, self.features, count)


@st.composite
def programs(draw, opts: GenOptions | None = None) -> FuzzProgram:
    """A random valid program (see the module docstring)."""
    return ProgramGen(draw, opts or GenOptions()).build()


def _written(body, name: str) -> bool:
    for s in body:
        if isinstance(s, Loop) and _written(s.body, name):
            return True
        if isinstance(s, OIf) and (_written(s.then, name) or _written(s.orelse, name)):
            return True
        if isinstance(s, Call):
            for a, p in zip(s.args, s.kernel.params):
                if isinstance(a, TArg) and a.tensor == name and p.kind in ("out", "inout"):
                    return True
    return False


def _s(k: Kernel) -> list:
    return [SArg(p.name) for p in k.params if p.kind == "scalar"]
