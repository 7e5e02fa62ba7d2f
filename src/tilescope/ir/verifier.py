"""The IR verifier, run after the front-end and after every pass.

It re-derives every type with ``ir.type_rules`` and checks what types alone cannot: variables
defined before use and never retyped, loop variables never assigned, tensor directions (no
writes to In params, also through tensor variables that may hold one; no reads of Out params),
statically known load/store/slice regions inside their tensors, kernel-vs-orchestration node
placement, and local memory against the per-core capacity. Errors name the op, the
shapes/dtypes and the user's source line.

Static bounds use the inclusive range of each loop variable (scoped like the variable: a
nested loop of the same name hides the outer range only inside it) and, in kernels, of index
variables assigned once from an affine expression of known ranges.
"""

from __future__ import annotations

import re
from collections import Counter

from tilescope.errors import SourceLoc, VerifyError
from tilescope.ir import type_rules as rules
from tilescope.ir.affine import affine, bounds
from tilescope.ir.analysis import local_memory_peak
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Const,
    CreateTensor,
    DumpTag,
    Evaluate,
    Expr,
    For,
    Full,
    If,
    Iota,
    Kernel,
    Load,
    LoadRows,
    MatMul,
    Param,
    Probe,
    Program,
    Rand,
    Reduce,
    Scan,
    Slice,
    Stmt,
    Store,
    Submit,
    TensorRead,
    TileSlice,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.traverse import child_exprs, walk_stmts
from tilescope.ir.types import Direction, IndexType, ScalarType, TaskType, TensorType, TileType

_KERNEL_ONLY = (Load, LoadRows, Iota, Rand, TileSlice, Full, Cast, Reduce, MatMul, Transpose, Scan, Where)
_ORCH_ONLY = (CreateTensor, Slice, TensorRead, Submit, DumpTag)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


class _Verifier:
    def __init__(self, where: str, kind: str, params, loc: SourceLoc | None, kernels=()):
        self.kernels = {k.name: k for k in kernels}
        self.where = where  # "kernel rms_rows" / "orchestration rms_norm"
        self.kind = kind
        self.params = {p.name: p for p in params}
        self.scopes: list[dict[str, object]] = [{p.name: p.type for p in params}]
        self.loop_vars: list[str | None] = [None]  # the loop variable each scope introduces
        self.ranges: dict[str, tuple[int, int]] = {}
        self.loc = loc
        self.assign_counts: Counter[str] = Counter()
        self.roots: dict[str, set[str]] = {}
        self.made: set[str] = set()  # tensor variables that may hold a tensor the orchestration creates

    def prepare(self, body: tuple[Stmt, ...]) -> None:
        """Facts about the whole body: how often each name is assigned, and the parameters
        each tensor variable may hold (a fixed point over its assignments)."""
        assigns = [s for s in walk_stmts(body) if isinstance(s, Assign)]
        self.assign_counts = Counter(s.target for s in assigns)
        self.made = {s.target for s in assigns if isinstance(s.value, CreateTensor)}
        changed = True
        while changed:
            changed = False
            for s in assigns:
                if isinstance(s.value, Var) and isinstance(s.value.type, TensorType):
                    new = self.tensor_roots(s.value.name) - self.roots.get(s.target, set())
                    if new:
                        self.roots.setdefault(s.target, set()).update(new)
                        changed = True
                    if s.value.name in self.made and s.target not in self.made:
                        self.made.add(s.target)
                        changed = True

    def tensor_roots(self, name: str) -> set[str]:
        """Parameters the tensor variable ``name`` may hold."""
        return {name} if name in self.params else self.roots.get(name, set())

    def fail(self, msg: str, loc: SourceLoc | None, hint: str | None = None) -> VerifyError:
        return VerifyError(f"{self.where}: {msg}", loc or self.loc, hint)

    def lookup(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def is_loop_var(self, name: str) -> bool:
        """Whether ``name`` is, where it is visible now, the variable of an enclosing loop."""
        for scope, var in zip(reversed(self.scopes), reversed(self.loop_vars)):
            if name in scope:
                return var == name
        return False

    def nested(self, body: tuple[Stmt, ...], loop_var: str | None = None, var_type=None) -> None:
        """Verify a nested body in its own scope; ranges learnt inside it end with it."""
        saved = dict(self.ranges)
        self.scopes.append({} if loop_var is None else {loop_var: var_type})
        self.loop_vars.append(loop_var)
        try:
            self.body(body)
        finally:
            self.scopes.pop()
            self.loop_vars.pop()
            self.ranges = saved

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: Expr, whole_value: bool = False) -> None:
        """Verify ``e``; ``whole_value``: it is the whole value of an Assign (where a TensorRead may be)."""
        for c in child_exprs(e):
            self.expr(c)
        loc = e.loc
        if isinstance(e, TensorRead) and not whole_value:
            raise self.fail(
                f"the read of {e.tensor.name} is part of a larger expression; a TensorRead is only the "
                "value of an assignment",
                loc,
                f"assign it first: v = {e.tensor.name}[...]",
            )
        if self.kind == "kernel" and isinstance(e, _ORCH_ONLY):
            raise self.fail(f"{type(e).__name__} is an orchestration op and cannot appear in a kernel", loc)
        if self.kind == "orch" and isinstance(e, _KERNEL_ONLY):
            raise self.fail(f"{type(e).__name__} is a kernel op and cannot appear in an orchestration", loc)
        expected = self.derive(e)
        if expected is not None and expected != e.type:
            raise self.fail(f"{type(e).__name__} is typed {e.type} but its operands give {expected}", loc)

    def derive(self, e: Expr):
        loc = e.loc
        match e:
            case Var(name=n):
                t = self.lookup(n)
                if t is None:
                    raise self.fail(f"{n!r} is used before it is defined", loc)
                return t
            case Const():
                return None
            case BinOp(op=op, lhs=a, rhs=b):
                return rules.binop_type(op, a, b, loc)
            case UnOp(op=op, operand=a):
                return rules.unop_type(op, a, loc)
            case Reduce(op=op, value=a):
                return rules.reduce_type(op, a, loc)
            case MatMul(lhs=a, rhs=b, acc=c, transpose_a=ta, transpose_b=tb):
                return rules.matmul_type(a, b, c, loc, ta, tb)
            case Cast(value=a, mode=mode, type=t):
                return rules.cast_type(a, t.dtype, mode, loc)
            case Where(cond=c, lhs=a, rhs=b):
                return rules.where_type(c, a, b, loc)
            case Transpose(value=a):
                r, c = a.type.shape
                return TileType((c, r), a.type.dtype)
            case Scan(value=a, dim=d):
                t = a.type
                if not isinstance(t, TileType) or t.dtype.name == "bool" or not 0 <= d < len(t.shape):
                    raise self.fail(f"ts.{e.op} dim {d} of a {t}", loc)
                return t
            case Load():
                self.load(e)
                return None
            case LoadRows():
                self.load_rows(e)
                return None
            case Iota(dim=d, type=t):
                if not 0 <= d < len(t.shape):
                    raise self.fail(f"ts.iota dim {d} of a {t}", loc)
                return None
            case Rand(seed=seed, offset=offset, type=t):
                for what, v in (("seed", seed), ("offset", offset)):
                    if not (isinstance(v.type, IndexType) or (isinstance(v.type, ScalarType) and v.type.dtype.is_int)):
                        raise self.fail(f"ts.rand {what} is a {v.type}, not an integer", loc)
                if t.dtype.name != "f32":
                    raise self.fail(f"ts.rand makes f32 tiles, typed {t}", loc)
                return None
            case TileSlice(value=a, starts=starts, sizes=sizes, type=t):
                shape = a.type.shape
                inside = len(starts) == len(sizes) == len(shape) and all(
                    0 <= o and 0 < n and o + n <= d for o, n, d in zip(starts, sizes, shape)
                )
                if not inside:
                    raise self.fail(f"tile slice at {list(starts)} of size {list(sizes)} is outside the {a.type}", loc)
                shapes = {tuple(sizes)} | {tuple(n for d, n in enumerate(sizes) if d != k) for k in range(len(sizes)) if sizes[k] == 1}
                if t.dtype != a.type.dtype or t.shape not in shapes:
                    raise self.fail(f"tile slice of size {list(sizes)} is typed {t}", loc)
                return None
            case Full(value=Const(value=v), type=t):
                rules.check_literal(v, t.dtype, "ts.full", loc)
                return None
            case TensorRead():
                return self.tensor_read(e)
            case Full() | CreateTensor() | Slice() | Submit() | DumpTag():
                if isinstance(e, Submit):
                    self.submit(e)
                if isinstance(e, Slice):
                    self.slice(e)
                return None
        raise self.fail(f"unknown expression {type(e).__name__}", loc)

    def param_of(self, v: Var, op: str, loc):
        p = self.params.get(v.name)
        if p is None or p.direction is Direction.SCALAR:
            raise self.fail(f"{op}: {v.name!r} is not a tensor parameter of this kernel", loc)
        return p

    def region_bounds(self, op: str, name: str, shape, offsets, sizes, loc) -> None:
        for dim, (off, size, extent) in enumerate(zip(offsets, sizes, shape)):
            form = affine(off)
            rng = bounds(form, self.ranges) if form is not None else None
            if rng is None:
                continue
            lo, hi = rng
            offset = f"offset {lo}" if lo == hi else f"offset in [{lo}, {hi}]"
            if lo < 0:  # the start itself is before the tensor: say so, whatever the end
                raise self.fail(
                    f"{op}: region out of bounds of {name}{list(shape)} in dim {dim}: {offset} starts at {lo}, "
                    "before the tensor's first element (0)",
                    loc,
                    "keep offsets >= 0" + (", or read what lies outside as a constant with pad=" if op == "ts.load" else ""),
                )
            if hi + size > extent:
                raise self.fail(
                    f"{op}: region out of bounds of {name}{list(shape)} in dim {dim}: "
                    f"{offset} + size {size} reaches {hi + size} (dim size {extent})",
                    loc,
                    "keep offset + size within the tensor's shape"
                    + (", or read what lies outside as a constant with pad=" if op == "ts.load" else ""),
                )

    def read_param(self, v: Var, op: str, loc):
        """The tensor parameter ``op`` reads; a VerifyError for an Out one (declare it InOut)."""
        p = self.param_of(v, op, loc)
        if p.direction is Direction.OUT:
            e = self.fail(
                f"{op} reads the Out param {p.name!r}", loc, f"declare {p.name} as ts.InOut[...] if the kernel reads it"
            )
            if self.where.startswith("kernel "):
                e.out_read = (self.where.removeprefix("kernel "), p.name)
            raise e
        return p

    def load(self, e: Load) -> None:
        p = self.read_param(e.tensor, "ts.load", e.loc)
        if e.pad is None:  # a padded load reads only what lies inside: never out of bounds
            extents = rules.access_extents(self.checked_sizes(e.sizes, e.valid, e.dims, e.type.shape), e.strides)
            self.region_bounds("ts.load", p.name, p.type.shape, e.offsets, extents, e.loc)
        self.valid_counts("ts.load", e.valid, e.type.shape, e.loc)

    def load_rows(self, e: LoadRows) -> None:
        p = self.read_param(e.tensor, "ts.load_rows", e.loc)
        if len(p.type.shape) != 2 or not (isinstance(e.rows.type, TileType) and e.rows.type.dtype.is_int):
            raise self.fail(f"ts.load_rows of {p.name}: {p.type} by a {e.rows.type}", e.loc)
        self.region_bounds("ts.load_rows", p.name, p.type.shape[1:], (e.col,), (e.type.shape[1],), e.loc)
        if e.valid is not None:
            self.valid_counts("ts.load_rows", (e.valid,), e.type.shape[:1], e.loc)

    @staticmethod
    def checked_sizes(sizes, valid, dims, tile) -> tuple[int, ...]:
        """The counts per tensor dim a region check can rely on: a tile dim with a run-time valid
        count reads at least nothing (0), one with a constant count that many elements."""
        if not valid:
            return tuple(sizes)
        out = list(sizes)
        for d, v in zip(rules.access_dims(len(sizes), len(tile), dims), valid):
            if d is not None:
                out[d] = v.value if isinstance(v, Const) else 0
        return tuple(out)

    def valid_counts(self, op: str, valid, shape, loc) -> None:
        for dim, (v, size) in enumerate(zip(valid, shape)):
            form = affine(v)
            rng = bounds(form, self.ranges) if form is not None else None
            if rng is not None and (rng[0] < 0 or rng[1] > size):
                raise self.fail(
                    f"{op}: valid count of dim {dim} in [{rng[0]}, {rng[1]}] is outside [0, {size}] "
                    f"(the [{', '.join(map(str, shape))}] tile)",
                    loc,
                    "valid counts how many leading rows/columns of the tile are real",
                )

    def store(self, s: Store) -> None:
        p = self.param_of(s.tensor, "ts.store", s.loc)
        if p.direction is Direction.IN:
            raise self.fail(
                f"ts.store writes the In param {p.name!r}",
                s.loc,
                f"declare {p.name} as ts.Out[...] or ts.InOut[...]",
            )
        t = s.value.type
        if not isinstance(t, TileType) or t.dtype != p.type.dtype:
            raise self.fail(f"ts.store: storing a {t} into {p.name}: {p.type}", s.loc)
        shape = p.type.shape
        sizes = rules.access_sizes(len(shape), t.shape, s.dims)
        extents = rules.access_extents(self.checked_sizes(sizes, s.valid, s.dims, t.shape), s.strides)
        self.region_bounds("ts.store", p.name, shape, s.offsets, extents, s.loc)
        self.valid_counts("ts.store", s.valid, t.shape, s.loc)

    def slice(self, e: Slice) -> None:
        base = e.tensor.type
        for dim, r in enumerate(e.ranges):
            fa, fb = affine(r.start), affine(r.stop)
            if fa is None or fb is None:
                continue
            ra, rb = bounds(fa, self.ranges), bounds(fb, self.ranges)
            if ra is None or rb is None:
                continue
            if ra[0] < 0 or rb[1] > base.shape[dim]:
                raise self.fail(
                    f"slice of {e.tensor.name}{list(base.shape)} dim {dim} reaches [{ra[0]}, {rb[1]}), "
                    "outside the tensor",
                    e.loc,
                )

    def tensor_read(self, e: TensorRead) -> ScalarType:
        t = e.tensor.type
        if not isinstance(t, TensorType) or not t.dtype.is_int:
            raise self.fail(f"reads an element of {e.tensor.name} ({t}): only integer tensors can be read", e.loc)
        if len(e.indices) != len(t.shape):
            raise self.fail(f"reads {e.tensor.name}{list(t.shape)} with {len(e.indices)} indices", e.loc)
        for dim, i in enumerate(e.indices):
            if not (isinstance(i.type, IndexType) or (isinstance(i.type, ScalarType) and i.type.dtype.is_int)):
                raise self.fail(f"index {dim} of {e.tensor.name} is a {i.type}, not an integer", e.loc)
            form = affine(i)
            rng = bounds(form, self.ranges) if form is not None else None
            if rng is not None and (rng[0] < 0 or rng[1] >= t.shape[dim]):
                raise self.fail(
                    f"index {dim} of {e.tensor.name}{list(t.shape)} reaches [{rng[0]}, {rng[1]}], "
                    "outside the tensor",
                    e.loc,
                )
        return ScalarType(t.dtype)

    def submit(self, e: Submit) -> None:
        kernel = self.kernels.get(e.kernel)
        if kernel is None:
            raise self.fail(f"submits unknown kernel {e.kernel!r}", e.loc)
        if len(e.args) != len(kernel.params):
            raise self.fail(
                f"kernel {e.kernel} takes {len(kernel.params)} arguments, got {len(e.args)}", e.loc
            )
        for p, a in zip(kernel.params, e.args):
            if p.direction is Direction.SCALAR:
                continue
            if not isinstance(a.type, TensorType):
                raise self.fail(f"kernel {e.kernel} parameter {p.name!r} needs a tensor, got {a.type}", e.loc)
            root = a.tensor if isinstance(a, Slice) else a
            held = sorted(self.tensor_roots(root.name)) if isinstance(root, Var) else []
            for name in held:
                if p.direction.writes and self.params[name].direction is Direction.IN:
                    through = "" if name == root.name else f" (through the tensor variable {root.name!r})"
                    raise self.fail(
                        f"kernel {e.kernel} writes its {p.direction.value} param {p.name!r}, "
                        f"but it is given the In param {name!r}{through}",
                        e.loc,
                        f"declare {name} as ts.Out[...] or ts.InOut[...] in the orchestration",
                    )
            if p.weight:
                self.weight_arg(e, p, root, held)
            shape_ok = len(a.type.shape) == len(p.type.shape) and all(
                s in (-1, x) for s, x in zip(a.type.shape, p.type.shape)
            )
            if a.type.dtype != p.type.dtype or not shape_ok:
                raise self.fail(
                    f"kernel {e.kernel} parameter {p.name!r} expects {p.type}, got a region {a.type}", e.loc
                )
        for d in e.deps:
            if not isinstance(d.type, TaskType):
                raise self.fail(f"deps= takes tasks, got {d.type}", e.loc)

    def weight_arg(self, e: Submit, p: Param, root: Expr, held: list[str]) -> None:
        """A kernel's ts.Weight param must be given a ts.Weight param of the orchestration: only
        those does the run path watch for changes (a packed copy of anything else could go stale)."""
        others = [n for n in held if not self.params[n].weight]
        made = isinstance(root, Var) and root.name in self.made
        if held and not others and not made:
            return
        if others:
            other = self.params[others[0]]
            what = f"the {other.direction.annotation} param {other.name!r}"
            hint = (f"declare {p.name} as ts.Tensor[...] in kernel {e.kernel} ({other.name} is written)"
                    if other.direction.writes else f"declare {other.name} as ts.Weight[...] in the orchestration")
        else:
            what = (f"{root.name!r}, which may hold a tensor the orchestration creates" if isinstance(root, Var)
                    else "a tensor expression")
            hint = f"declare {p.name} as ts.Tensor[...] in kernel {e.kernel}"
        raise self.fail(
            f"kernel {e.kernel}'s ts.Weight param {p.name!r} is given {what}: a weight must be a ts.Weight "
            "param of the orchestration, which the caller keeps the same from run to run",
            e.loc,
            hint,
        )

    # -- statements ----------------------------------------------------------------------------

    def body(self, body: tuple[Stmt, ...]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        match s:
            case Assign(target=t, value=v):
                self.expr(v, whole_value=True)
                if t in self.params:
                    raise self.fail(f"assigns to parameter {t!r}", s.loc)
                if self.is_loop_var(t):
                    raise self.fail(
                        f"assigns to the loop variable {t!r} inside its loop",
                        s.loc,
                        f"the loop owns its counter; assign to a new name (e.g. {t}_next = {t} + 1)",
                    )
                prev = self.lookup(t)
                if prev is not None and prev != v.type:
                    raise self.fail(f"{t!r} changes type from {prev} to {v.type}", s.loc)
                if prev is None:
                    self.scopes[-1][t] = v.type
                self.learn_range(t, v)
            case Probe(value=v, name=name):
                if self.kind != "kernel":
                    raise self.fail("ts.probe is a kernel op", s.loc)
                self.expr(v)
                if not isinstance(v.type, TileType):
                    raise self.fail(f"ts.probe({name!r}) needs a tile, got a {v.type}", s.loc)
                if not PROBE_NAME.fullmatch(name):
                    raise self.fail(
                        f"ts.probe name {name!r} is not a name",
                        s.loc,
                        "name a probe like a variable (letters, digits, '_'): it names the captured value and its golden",
                    )
            case Store():
                if self.kind != "kernel":
                    raise self.fail("ts.store is a kernel op", s.loc)
                for e in (*s.offsets, s.value, *s.valid):
                    self.expr(e)
                self.store(s)
            case Evaluate(value=v):
                self.expr(v)
            case For(var=var, start=a, stop=b, step=c, body=inner):
                for e in (a, b, c):
                    self.expr(e)
                if not (isinstance(c, Const) and isinstance(c.value, int) and c.value > 0):
                    raise self.fail("a loop step must be a positive constant", s.loc)
                outer = self.ranges.pop(var, None)
                if isinstance(a, Const) and isinstance(b, Const) and b.value > a.value:
                    last = a.value + (b.value - 1 - a.value) // c.value * c.value
                    self.ranges[var] = (a.value, last)
                self.nested(inner, var, IndexType())  # a loop variable is an index, whatever its start
                self.ranges.pop(var, None)
                if outer is not None:
                    self.ranges[var] = outer
            case If(cond=c, then=a, orelse=b):
                if self.kind != "orch":
                    raise self.fail("run-time 'if' is only allowed in orchestrations", s.loc)
                self.expr(c)
                for branch in (a, b):
                    self.nested(branch)
            case _:
                raise self.fail(f"unknown statement {type(s).__name__}", s.loc)

    def learn_range(self, target: str, value: Expr) -> None:
        """In a kernel (no run-time branches: every statement of a loop body runs in every
        iteration), an index assigned once from an affine expression of known ranges has a
        known range wherever it is used."""
        self.ranges.pop(target, None)
        if self.kind != "kernel" or self.assign_counts[target] != 1:
            return
        t = value.type
        if not (isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int)):
            return
        form = affine(value)
        rng = bounds(form, self.ranges) if form is not None else None
        if rng is not None:
            self.ranges[target] = rng


PROBE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _unique_probes(k: Kernel) -> None:
    """VerifyError for a probe name used twice in one kernel (each names one captured value)."""
    first: dict[str, Probe] = {}
    for s in walk_stmts(k.body):
        if not isinstance(s, Probe):
            continue
        if s.name in first:
            raise VerifyError(
                f"kernel {k.name}: probe name {s.name!r} is used twice (first at {first[s.name].loc})",
                s.loc,
                "give each ts.probe of a kernel its own name",
            )
        first[s.name] = s


def verify_kernel(k: Kernel, local_memory_bytes: int) -> None:
    """Raise VerifyError for the first problem in ``k``, its local-memory peak over
    ``local_memory_bytes`` included (naming the tiles live there).
    """
    v = _Verifier(f"kernel {k.name}", "kernel", k.params, k.loc)
    v.prepare(k.body)
    v.body(k.body)
    _unique_probes(k)
    peak = local_memory_peak(k)
    if peak.bytes > local_memory_bytes:
        tiles = ", ".join(
            f"{n} {t} ({_kib(t.nbytes)})" for n, t in sorted(peak.live, key=lambda x: -x[1].nbytes)
        )
        temps = f" + {_kib(peak.temporaries)} of temporaries" if peak.temporaries else ""
        raise VerifyError(
            f"kernel {k.name}: local memory {_kib(peak.bytes)} exceeds the per-core capacity of "
            f"{_kib(local_memory_bytes)}; live tiles here: {tiles or 'none'}{temps}",
            peak.loc or k.loc,
            "use smaller tiles (load/process in chunks), or raise compile_cfg local_memory_bytes",
        )


def verify_program(p: Program, local_memory_bytes: int = 256 * 1024) -> None:
    """Raise VerifyError for the first problem in ``p`` (its kernels first)."""
    names = [k.name for k in p.kernels]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise VerifyError(
            f"program {p.name}: kernel names must be unique, repeated: {', '.join(sorted(dup))}", p.loc
        )
    for k in p.kernels:
        verify_kernel(k, local_memory_bytes)
    v = _Verifier(f"orchestration {p.name}", "orch", p.params, p.loc, p.kernels)
    v.prepare(p.body)
    v.body(p.body)
