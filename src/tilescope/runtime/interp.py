"""The ``interp`` platform: a reference interpreter of the IR in Python/torch.

Invariants:
- It runs the same IR the C++ is generated from (the final IR of a build), one task at a
  time in submission order — a valid schedule of every dependency.
- Tiles are torch tensors of their dtype, so each op rounds like torch eager; scalars adopt
  the tile's dtype as in the tile library. bf16/f16 scalars (and their literals) are rounded
  after every op, as the generated C++ converts them.
- ``float64=True`` computes every float tile in float64 and casts only when storing, giving
  a reference free of intermediate rounding for precision work.
- Variables live in one environment per function; a loop variable is scoped to its loop as
  in the C++ (``for (int64_t i = ...)``): a variable of the same name outside is restored.
- float -> integer casts round and saturate in float64 like the tile library: exact at .5
  and clamped to the integer range (NaN -> 0) instead of torch's undefined overflow.
- Region shape mismatches and out-of-bounds regions raise RuntimeFailure naming the task,
  kernel and argument, as the sim runtime does.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from tilescope.codegen.cpp_common import display_path
from tilescope.errors import RuntimeFailure
from tilescope.ir import dtypes as dt
from tilescope.ir.analysis import (
    CHECKED_OPS,
    bound_text,
    checked_int,
    int_type_name,
    range_text,
    runtime_bounds,
)
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
from tilescope.ir.op_registry import binary_ops, compare_ops, logical_ops, torch_reference, unary_ops
from tilescope.ir.printer import expr_str
from tilescope.ir.traverse import recursion_room, walk_exprs
from tilescope.ir.type_rules import access_sizes
from tilescope.ir.types import Direction, ScalarType, TileType
from tilescope.runtime.casts import float_to_int, narrow_float
from tilescope.runtime.philox import philox_uniform
from tilescope.runtime.tile_access import counted_sizes, padded_window, region
from tilescope.runtime.unary_ops import logsumexp, scan, unary_fn

_SCALAR_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "maximum": max,
    "minimum": min,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
_TILE_OPS = {op: torch_reference(op) for op in (*binary_ops(), *compare_ops(), *logical_ops())}


_UNARY = {op: unary_fn(op) for op in unary_ops()}


def _round_scalar(v: Any, dtype: dt.DType, float64: bool) -> Any:
    """A Python scalar rounded to ``dtype`` (as the C++ scalar of that type holds it)."""
    if isinstance(v, bool) or dtype == dt.bool_:
        return bool(v)
    if dtype.is_int:
        return int(v)
    if float64:
        return float(v)
    return torch.tensor(float(v), dtype=dtype.torch).item()


class _Interp:
    """What kernels and orchestrations share: arguments, assignments, loops and scalar/index
    arithmetic. Subclasses handle their own statements and expressions."""

    def __init__(self, float64: bool):
        self.float64 = float64
        self.now: Stmt | None = None  # the statement being run (what a subclass's records name)
        self.loop_vars: set[str] = set()  # the variables of the loops being run

    def run_error(self, message: str) -> None:
        """A run-time loop bound below 0, a division by zero or an integer overflow: an IndexError
        in a kernel (reported with its task)."""
        raise IndexError(message)

    def loop_starts(self, loop: For, start: int, stop: int, step: int) -> None:
        """Called before ``loop`` runs from ``start`` to ``stop`` by ``step``."""

    def int_op(self, e: BinOp, x: int, y: int) -> int:
        """``x <op> y`` of a checked integer op (``ir.analysis.checked_int``), exact, or the error
        ``ts::arith`` raises on sim, worded the same."""
        sym = CHECKED_OPS[e.op][1]
        loc = self.now.loc if self.now is not None else None
        what = f"{expr_str(e)} at {loc}" if loc is not None else expr_str(e)
        if e.op in ("floordiv", "mod") and y == 0:
            self.run_error(f"integer division by zero: {what} ({x} {sym} 0)")
        r = _SCALAR_OPS[e.op](x, y)
        name = int_type_name(e.type)
        info = torch.iinfo(dt.by_name(name).torch)
        if not info.min <= r <= info.max:
            self.run_error(
                f"{name} overflow: {what} ({x} {sym} {y} = {r}) is outside {name}'s range [{info.min}, {info.max}]"
            )
        return r

    def bind(self, params, args: list[Any]) -> dict[str, Any]:
        return {
            p.name: _round_scalar(a, p.type.dtype, self.float64) if p.direction is Direction.SCALAR else a
            for p, a in zip(params, args)
        }

    def body(self, body: tuple[Stmt, ...], env: dict[str, Any]) -> None:
        for s in body:
            self.now = s
            match s:
                case Assign(target=t, value=v):
                    env[t] = self.expr(v, env)
                    self.assigned(s, env[t])
                case For(var=var, start=a, stop=b, step=c, body=inner):
                    missing = object()
                    outer = env.get(var, missing)
                    start, stop = self.expr(a, env), self.expr(b, env)
                    for which, e in runtime_bounds(s, self.loop_vars):
                        value = start if which == "start" else stop
                        if value < 0:
                            label = bound_text(s, which, e)
                            self.run_error(f"{label} is {value} at run time; a run-time loop bound must be >= 0")
                    step = self.expr(c, env)
                    self.loop_starts(s, start, stop, step)
                    self.loop_vars.add(var)
                    for i in range(start, stop, step):
                        env[var] = i
                        self.body(inner, env)
                    self.loop_vars.discard(var)
                    if outer is missing:
                        env.pop(var, None)
                    else:
                        env[var] = outer
                case _:
                    self.stmt(s, env)

    def assigned(self, s: Assign, value: Any) -> None:
        """Called after each assignment with the value it gave (a hook for subclasses)."""

    def stmt(self, s: Stmt, env: dict[str, Any]) -> None:
        raise TypeError(f"interp: unexpected statement {type(s).__name__}")

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        match e:
            case Const(value=v, type=ScalarType(dtype=d)) if d in (dt.bf16, dt.f16):
                return _round_scalar(v, d, self.float64)  # as the C++ converts the literal
            case Const(value=v):
                return v
            case Var(name=n):
                return env[n]
            case BinOp(lhs=a, rhs=b) if checked_int(e):
                return self.int_op(e, self.expr(a, env), self.expr(b, env))
            case BinOp(op=op, lhs=a, rhs=b) if not isinstance(e.type, TileType):
                r = _SCALAR_OPS[op](self.expr(a, env), self.expr(b, env))
                return _round_scalar(r, e.type.dtype, self.float64) if isinstance(e.type, ScalarType) else r
            case UnOp(op="neg", operand=a) if not isinstance(e.type, TileType):
                return -self.expr(a, env)
        raise TypeError(f"interp: unexpected expression {type(e).__name__}")


SUM_ORDERS = ("torch", "sequential", "reversed")


class _KernelInterp(_Interp):
    def __init__(self, kernel: Kernel, float64: bool, sum_order: str = "torch"):
        super().__init__(float64)
        self.k = kernel
        self.sum_order = sum_order  # torch's own order, or one add at a time from either end

    def tile_dtype(self, d: dt.DType) -> torch.dtype:
        return torch.float64 if self.float64 and d.is_float else d.torch

    def run(self, args: list[Any]) -> None:
        self.body(self.k.body, self.bind(self.k.params, args))

    def probed(self, s: Probe, value: Any) -> None:
        """Called with a ``ts.probe``'s tile (a hook for subclasses; interp keeps nothing)."""

    def stored(self, s: Store, region: torch.Tensor) -> None:
        """Called with the region a store just wrote (a hook for subclasses)."""

    def stmt(self, s: Stmt, env: dict[str, Any]) -> None:
        if isinstance(s, Probe):
            self.probed(s, self.expr(s.value, env))
            return
        if not isinstance(s, Store):
            raise TypeError(f"interp: unexpected statement {type(s).__name__} in a kernel")
        tile = self.expr(s.value, env)
        view = env[s.tensor.name]
        offsets = [self.expr(o, env) for o in s.offsets]
        sizes = access_sizes(view.dim(), tuple(tile.shape), s.dims)
        if s.valid:
            counts = self.valid_counts(s.valid, tile.shape, env, "store", s)
            sizes = counted_sizes(sizes, s.dims, tuple(tile.shape), counts)
            tile = tile[tuple(slice(0, n) for n in counts)]
        part = region(view, offsets, sizes, self.site("store", s), s.tensor.name, s.strides)
        part.copy_(tile.reshape(part.shape).to(view.dtype))
        self.stored(s, part)

    def site(self, op: str, node: Any) -> str:
        """``kernel k: load of x at m.py:12: ``, how an error names a load or store (as sim's do)."""
        where = f" at {display_path(node.loc.file)}:{node.loc.line}" if node.loc is not None else ""
        return f"kernel {self.k.name}: {op} of {node.tensor.name}{where}: "

    def valid_counts(self, valid, shape, env: dict[str, Any], op: str, node: Any, first: int | None = None) -> list[int]:
        """The run-time ``valid=`` counts of ``node`` (a load/store of a ``shape`` tile), for its
        dims from ``first`` (default: its trailing dims; ``load_rows``'s one count is of rows, dim 0);
        IndexError outside ``[0, size]`` (as the tile library raises)."""
        counts = [int(self.expr(v, env)) for v in valid]
        first = len(shape) - len(counts) if first is None else first
        for dim, n in enumerate(counts, start=first):
            size = shape[dim]
            if not 0 <= n <= size:
                what = "rows" if len(shape) == 2 and dim == 0 else "cols"
                given = f"valid rows {n}" if op == "load_rows" else f"valid {counts}"  # NOTE: as the tile library words it
                raise IndexError(
                    f"{self.site(op, node)}{op} of a [{', '.join(map(str, shape))}] tile with {given}: "
                    f"valid {what} must be within [0, {size}]"
                )
        return counts

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        match e:
            case BinOp(op=op, lhs=a, rhs=b) if isinstance(e.type, TileType):
                x, y = self.expr(a, env), self.expr(b, env)
                # NOTE: a scalar operand adopts the tile's dtype before the op (as in the tile
                # library), so it is rounded to bf16/f16 first; torch eager keeps it in float.
                d = self.tile_dtype(a.type.dtype if isinstance(a.type, TileType) else b.type.dtype)
                x, y = (v if torch.is_tensor(v) else torch.tensor(v, dtype=d) for v in (x, y))
                return _TILE_OPS[op](x, y)
            case UnOp(op=op, operand=a) if isinstance(e.type, TileType):
                return _UNARY[op](self.expr(a, env))
            case Load(tensor=t, offsets=offs, sizes=sizes, valid=(), pad=None, type=tt):
                at = [self.expr(o, env) for o in offs]
                part = region(env[t.name], at, sizes, self.site("load", e), t.name, e.strides)
                return part.reshape(tt.shape).to(self.tile_dtype(tt.dtype), copy=True)
            case Load(tensor=t, offsets=offs, valid=(), pad=pad, type=tt):
                out = torch.full(tt.shape, self.expr(pad, env), dtype=self.tile_dtype(tt.dtype))
                inside, part = padded_window(env[t.name], e, [self.expr(o, env) for o in offs])
                if part is not None:
                    out[inside] = part.reshape(out[inside].shape).to(out.dtype)
                return out
            case Load(tensor=t, offsets=offs, sizes=sizes, valid=valid, fill=fill, type=tt):
                counts = self.valid_counts(valid, tt.shape, env, "load", e)
                out = torch.full(tt.shape, self.expr(fill, env), dtype=self.tile_dtype(tt.dtype))
                if all(counts):
                    at = [self.expr(o, env) for o in offs]
                    part = region(env[t.name], at, counted_sizes(sizes, e.dims, tt.shape, counts),
                                  self.site("load", e), t.name, e.strides)  # fmt: skip
                    out[tuple(slice(0, n) for n in counts)] = part.reshape(counts).to(out.dtype)
                return out
            case LoadRows(tensor=t, rows=rows, col=col, fill=fill):
                value = 0 if fill is None else self.expr(fill, env)
                return self.load_rows(env[t.name], e, self.expr(rows, env).reshape(-1), self.expr(col, env), value, env)
            case Rand(seed=seed, offset=offset, type=tt):
                return philox_uniform(int(self.expr(seed, env)), int(self.expr(offset, env)), tt.shape).to(
                    self.tile_dtype(tt.dtype)
                )
            case Iota(dim=d, type=tt):
                n = tt.shape[d]
                index = torch.arange(n, dtype=torch.int64).reshape([n if i == d else 1 for i in range(len(tt.shape))])
                return index.expand(tt.shape).to(self.tile_dtype(tt.dtype)).contiguous()
            case TileSlice(value=v, starts=starts, sizes=sizes, type=tt):
                part = self.expr(v, env)[tuple(slice(a, a + n) for a, n in zip(starts, sizes))]
                return part.reshape(tt.shape).contiguous()
            case Full(value=v, type=tt):
                return torch.full(tt.shape, self.expr(v, env), dtype=self.tile_dtype(tt.dtype))
            case Cast(value=v, mode=mode, type=tt):
                return self.cast(self.expr(v, env), tt.dtype, mode)
            case Reduce(op=op, value=v):
                x = self.expr(v, env)
                dim = -1 if op.startswith("row") else 0
                kind = op.split("_")[1]
                if kind == "sum":
                    return _sum(x, dim, self.sum_order)
                if kind == "mean":
                    return _mean(x, dim, self.sum_order)
                if kind in ("argmax", "argmin"):  # the first extreme, a NaN counting as one (torch's)
                    return getattr(torch, kind)(x, dim=dim, keepdim=True).to(torch.int32)
                if kind == "logsumexp":
                    return logsumexp(x, dim)
                fn = torch.amax if kind == "max" else torch.amin
                return fn(x, dim=dim, keepdim=True)
            case MatMul(lhs=a, rhs=b, acc=c, transpose_a=ta, transpose_b=tb, type=tt):
                x, y = self.expr(a, env), self.expr(b, env)
                x, y = (x.transpose(0, 1) if ta else x), (y.transpose(0, 1) if tb else y)
                if tt.dtype == dt.i32:  # int8 inputs: exact in int64, then wrapped to int32 as the C++
                    out = (x.to(torch.int64) @ y.to(torch.int64)).to(torch.int32)
                    return out if c is None else self.expr(c, env) + out
                acc_dtype = torch.float64 if self.float64 else torch.float32
                out = x.to(acc_dtype) @ y.to(acc_dtype)
                return out if c is None else self.expr(c, env) + out
            case Scan(op=op, value=v, dim=d, reverse=rev, exclusive=exc):
                return scan(self.expr(v, env), op, d, rev, exc)
            case Transpose(value=v):
                return self.expr(v, env).transpose(0, 1).contiguous()
            case Where(cond=c, lhs=a, rhs=b, type=tt):
                d = self.tile_dtype(tt.dtype)
                x, y = (
                    v if torch.is_tensor(v) else torch.tensor(v, dtype=d)
                    for v in (self.expr(a, env), self.expr(b, env))
                )
                return torch.where(self.expr(c, env), x, y)
        return super().expr(e, env)

    def load_rows(
        self, view: torch.Tensor, e: LoadRows, rows: torch.Tensor, col: int, fill: Any, env: dict[str, Any]
    ) -> torch.Tensor:
        """``ts.load_rows``: row i is ``view[rows[i], col:col + C]``; rows at or past ``valid`` are
        ``fill``. IndexError for an index or column range outside the tensor."""
        n, width = e.type.shape
        valid = n if e.valid is None else self.valid_counts((e.valid,), (n, width), env, "load_rows", e, first=0)[0]
        if col < 0 or col + width > view.shape[1]:
            raise IndexError(
                f"{self.site('load_rows', e)}columns [{col}, {col + width}) are outside {e.tensor.name}'s shape "
                f"{list(view.shape)}"
            )
        for i, r in enumerate(rows[:valid].tolist()):
            if not 0 <= r < view.shape[0]:
                raise IndexError(
                    f"{self.site('load_rows', e)}index {i} of the row tile is {r}, outside "
                    f"{e.tensor.name}'s {view.shape[0]} rows (shape {list(view.shape)})"
                )
        dtype = view.dtype if view.dtype == torch.float64 else self.tile_dtype(e.type.dtype)
        out = torch.full(e.type.shape, fill, dtype=dtype)
        out[:valid] = view[rows[:valid].to(torch.int64), col : col + width].to(dtype)
        return out

    def cast(self, x: torch.Tensor, to: dt.DType, mode: str) -> torch.Tensor:
        if to.is_float:
            if self.float64 or mode == "rint" or not x.is_floating_point():
                return x.to(self.tile_dtype(to))
            return narrow_float(x, to.torch, mode)
        if x.is_floating_point() and to != dt.bool_:
            return float_to_int(x, to, mode)
        return x.to(to.torch)


def _sum(x: torch.Tensor, dim: int, order: str) -> torch.Tensor:
    """The sum of ``x`` along ``dim`` (kept), rounded to x's dtype after each add in ``order``:
    torch's own (blocked and vectorized), or one element at a time from the first or the last."""
    if order == "torch":
        return x.sum(dim=dim, keepdim=True, dtype=x.dtype)
    parts = x.unbind(dim)
    if order == "reversed":
        parts = parts[::-1]
    acc = parts[0].clone()
    for p in parts[1:]:
        acc = acc + p
    return acc.unsqueeze(dim)


def _mean(x: torch.Tensor, dim: int, order: str) -> torch.Tensor:
    """The mean of ``x`` along ``dim`` (kept): the sum in ``order``, in float for bf16/f16 as the
    tile library computes it, divided by the count and rounded to x's dtype once."""
    if order == "torch":
        return x.mean(dim=dim, keepdim=True)
    wide = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    return (_sum(wide, dim, order) / x.shape[dim]).to(x.dtype)


class _OrchInterp(_Interp):
    def __init__(self, program: Program, float64: bool, sum_order: str = "torch", max_tasks: int = 0):
        super().__init__(float64)
        self.p = program
        self.max_tasks = max_tasks  # 0: no cap
        self.submitting: dict[int, bool] = {}  # id of a loop -> whether its body submits tasks
        self.kernels = {k.name: _KernelInterp(k, float64, sum_order) for k in program.kernels}
        self.by_name = {k.name: k for k in program.kernels}
        self.tasks = 0
        # Out params: the tensor and which of its elements some task submitted so far writes (kept
        # only for a program that reads tensors: the check costs every task a little)
        self.written: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.reads = any(isinstance(e, TensorRead) for e in walk_exprs(program.body))

    def run(self, args: list[Any]) -> int:
        env = self.bind(self.p.params, args)
        for p in self.p.params:
            t = env[p.name]
            if self.reads and p.direction is Direction.OUT and isinstance(t, torch.Tensor):  # not a Bounded
                span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
                self.written[p.name] = (t, torch.zeros(span, dtype=torch.bool).as_strided(t.shape, t.stride()))
        self.body(self.p.body, env)
        return self.tasks

    def run_error(self, message: str) -> None:
        raise RuntimeFailure(f"orchestration {self.p.name}: {message} (task {self.tasks})")

    def loop_starts(self, loop: For, start: int, stop: int, step: int) -> None:
        """A loop that submits tasks and would pass ``max_tasks`` is refused before it starts (as sim's
        ``loop_fits``)."""
        if self.max_tasks <= 0 or step <= 0 or stop <= start:
            return
        if id(loop) not in self.submitting:
            self.submitting[id(loop)] = any(isinstance(e, Submit) for e in walk_exprs(loop.body))
        trips = (stop - start - 1) // step + 1
        if self.submitting[id(loop)] and trips > self.max_tasks:
            self.run_error(
                f"{range_text(loop)} (start {start}, stop {stop}, step {step}) runs {trips} times, each submitting "
                f"tasks: more than max_tasks = {self.max_tasks} (TILESCOPE_MAX_TASKS), the most a run may hold; a "
                "bound read as a huge value? (raise max_tasks if the program means it)"
            )

    def stmt(self, s: Stmt, env: dict[str, Any]) -> None:
        match s:
            case Evaluate(value=v):
                self.expr(v, env)
            case If(cond=c, then=a, orelse=b):
                self.body(a if self.expr(c, env) else b, env)
            case _:
                raise TypeError(f"interp: unexpected statement {type(s).__name__} in an orchestration")

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        match e:
            case CreateTensor():
                return self.create_tensor(e)
            case Slice(tensor=t, ranges=ranges):
                return self.slice(t, ranges, env)
            case DumpTag():
                return None
            case TensorRead():
                return self.read(e, env)
            case Submit():
                return self.submit(e, env)
        return super().expr(e, env)

    def read(self, e: TensorRead, env: dict[str, Any]) -> int:
        """The element ``e`` reads: every task submitted before it has run. An index outside the
        tensor, or an element of an Out param no earlier task wrote, is a RuntimeFailure."""
        base = env[e.tensor.name]
        index = tuple(int(self.expr(i, env)) for i in e.indices)
        name = e.tensor.name
        at = f"{name}[{', '.join(map(str, index))}] at {_site(e)}"
        so_far = f" ({self.tasks} task(s) submitted before the read)"  # NOTE: worded as the sim runtime's
        if not all(0 <= i < n for i, n in zip(index, base.shape)):
            raise RuntimeFailure(f"orchestration reads {at}, outside the tensor's shape {list(base.shape)}{so_far}")
        for param, (tensor, mask) in self.written.items():
            view = _same_elements(mask, tensor, base)
            if view is not None and not bool(view[index]):
                owner = name if param == name else f"{name} ({param})"
                raise RuntimeFailure(
                    f"orchestration reads {at}, but {owner} is an Out of the program and no task submitted "
                    f"before the read writes it{so_far}; write it in a task first, or declare it ts.InOut if "
                    "the caller provides its value"
                )
        return self.element(base, index)

    def element(self, base: Any, index: tuple[int, ...]) -> int:
        """The value of ``base[index]`` (a subclass holding tensors of its own kind reads them here)."""
        return int(base[index].item())

    def create_tensor(self, e: CreateTensor) -> torch.Tensor:
        tt = e.type
        dtype = torch.float64 if self.float64 and tt.dtype.is_float else tt.dtype.torch
        try:
            return torch.zeros(tt.shape, dtype=dtype)
        except (RuntimeError, MemoryError):  # torch's allocator refusing: "can't allocate memory"
            nbytes = math.prod(tt.shape) * dtype.itemsize
            where = f" at {e.loc}" if e.loc is not None else ""
            raise RuntimeFailure(
                f"orchestration {self.p.name}: create_tensor{where} of {list(tt.shape)} "
                f"{str(dtype).removeprefix('torch.')} needs {nbytes} bytes, which cannot be allocated "
                f"(task {self.tasks}); use a smaller intermediate tensor"
            ) from None

    def slice(self, t: Var, ranges, env: dict[str, Any]) -> torch.Tensor:
        base = env[t.name]
        index: list[Any] = []
        for dim, r in enumerate(ranges):
            a, b = self.expr(r.start, env), self.expr(r.stop, env)
            if not 0 <= a < b <= base.shape[dim]:
                at = f" at {_site(self.now)}" if self.now is not None else ""
                raise RuntimeFailure(
                    f"orchestration {self.p.name}: slice {t.name}[{a}:{b}] of dim {dim}{at} is outside "
                    f"the tensor's shape {list(base.shape)} (task {self.tasks})"
                )
            index.append(a if r.squeeze else slice(a, b))
        return base[tuple(index)]

    def submit(self, e: Submit, env: dict[str, Any]) -> int:
        kernel = self.by_name[e.kernel]
        if 0 < self.max_tasks <= self.tasks:
            raise RuntimeFailure(
                f"orchestration {self.p.name}: the orchestration submitted {self.tasks} tasks, the most a run may hold "
                f"(max_tasks = {self.max_tasks}, TILESCOPE_MAX_TASKS), and submits more ({e.kernel}): a loop runs far "
                "longer than meant (a bound read as a huge value?); raise max_tasks if the program means it"
            )
        args = [self.expr(a, env) for a in e.args]
        task = self.tasks
        for i, (p, a) in enumerate(zip(kernel.params, args)):
            if p.direction is not Direction.SCALAR and tuple(a.shape) != p.type.shape:
                raise RuntimeFailure(
                    f"task {task} ({e.name or e.kernel}): argument {i} ({p.name!r}) has shape {list(a.shape)}, "
                    f"but kernel {kernel.name} expects {list(p.type.shape)}"
                )
        try:
            self.kernels[e.kernel].run(args)
        except IndexError as err:
            raise RuntimeFailure(f"task {task} ({e.name or e.kernel}): {err}") from None
        for p, a in zip(kernel.params, args):
            if p.direction.writes:
                for tensor, mask in self.written.values():
                    view = _same_elements(mask, tensor, a)
                    if view is not None:
                        view.fill_(True)
        self.tasks += 1
        return task


def _site(e: Expr) -> str:
    """``moe.py:41``: where an orchestration statement is, as run-time errors name it."""
    return f"{e.loc.file.rsplit('/', 1)[-1]}:{e.loc.line}" if e.loc is not None else "?"


def _same_elements(mask: torch.Tensor, tensor: torch.Tensor, view: torch.Tensor) -> torch.Tensor | None:
    """The part of ``mask`` (laid out like ``tensor``) that ``view`` covers, when ``view`` is a view
    of ``tensor``'s storage; None otherwise."""
    if not isinstance(view, torch.Tensor) or view.dtype != tensor.dtype:
        return None
    if view.untyped_storage().data_ptr() != tensor.untyped_storage().data_ptr():
        return None
    offset = view.storage_offset() - tensor.storage_offset()
    if offset < 0:
        return None
    try:
        return mask.as_strided(view.shape, view.stride(), mask.storage_offset() + offset)
    except RuntimeError:  # a view of the same storage reaching past the tensor: not its elements
        return None


@recursion_room()
def run_program(program: Program, args: list[Any], *, float64: bool = False, sum_order: str = "torch",
                max_tasks: int = 0) -> int:  # fmt: skip
    """Run ``program`` on ``args`` (torch tensors written in place, Python scalars); returns
    the number of tasks run. Like a sim run, it is invisible to autograd: outputs get no graph.
    ``sum_order`` (``SUM_ORDERS``) is the order row and column sums add their elements in;
    ``max_tasks`` the most tasks it may submit (0: no cap), as on sim."""
    with torch.no_grad():
        return _OrchInterp(program, float64, sum_order, max_tasks).run(args)
