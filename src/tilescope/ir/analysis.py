"""Analyses over kernel bodies: variable uses, liveness, local-memory peak and core kind.

Invariant: liveness is computed on the structured body (no CFG): a loop's body is iterated to
a fixed point so values carried across iterations stay live through the whole loop.

A name may be reused for unrelated variables in sibling scopes (two loops each assigning
``t``), with different types: the type of a live name at a statement is that of the binding
visible there, never one global type per name.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilescope.errors import SourceLoc
from tilescope.ir.nodes import Assign, BinOp, Const, Expr, For, Kernel, MatMul, Stmt, Var
from tilescope.ir.printer import expr_str
from tilescope.ir.traverse import Roots, child_exprs, stmt_bodies, walk_exprs
from tilescope.ir.types import IndexType, ScalarType, TileType, Type


def uses(root: Roots) -> set[str]:
    """Names of the variables read anywhere under ``root`` (an expression, a body...)."""
    return {x.name for x in walk_exprs(root) if isinstance(x, Var)}


def stmt_uses(s: Stmt) -> set[str]:
    """Names read by the expressions of ``s`` itself (not by its nested bodies)."""
    return uses(child_exprs(s))


def kernel_core(k: Kernel) -> str:
    """``cube`` if the kernel uses the matrix unit (matmul), else ``vec``."""
    return "cube" if any(isinstance(e, MatMul) for e in walk_exprs(k.body)) else "vec"


def live_before(body: tuple[Stmt, ...], live_after: set[str], visit=None) -> set[str]:
    """Variables live before ``body`` given those live after it. ``visit(stmt, live_after_stmt)``
    is called for every statement (innermost loops possibly several times)."""
    live = set(live_after)
    for s in reversed(body):
        if visit is not None:
            visit(s, live)
        match s:
            case Assign(target=t, value=v):
                live = (live - {t}) | uses(v)
            case For(var=var, body=inner):
                carried = set(live)
                while True:
                    entry = live_before(inner, carried, visit) - {var}
                    if entry <= carried:
                        break
                    carried |= entry
                live = carried | stmt_uses(s)
            case _:
                # Any other statement: its nested bodies (an If's branches) are alternatives.
                branches = [live_before(b, live, visit) for b in stmt_bodies(s)]
                live = set().union(*branches) if branches else live
                live = live | stmt_uses(s)
    return live


def expr_peak(e: Expr) -> int:
    """Peak bytes of tile temporaries while evaluating ``e`` (its own result included; variables
    it reads are already counted as live)."""
    if isinstance(e, Var) or not isinstance(e.type, TileType):
        return 0
    held = peak = 0
    for c in child_exprs(e):
        peak = max(peak, held + expr_peak(c))
        if not isinstance(c, Var) and isinstance(c.type, TileType):
            held += c.type.nbytes
    return max(peak, held + e.type.nbytes)


@dataclass(frozen=True)
class MemoryPeak:
    """The largest local-memory footprint of a kernel, where it happens and what is live there."""

    bytes: int
    loc: SourceLoc | None
    live: tuple[tuple[str, TileType], ...]  # named tiles live at the peak
    temporaries: int  # bytes of unnamed temporaries at the peak


def visible_tile_types(body: tuple[Stmt, ...]) -> dict[int, dict[str, TileType]]:
    """For every statement (keyed by ``id``), the tile type of each name visible at it, the
    statement's own assignment included."""
    out: dict[int, dict[str, TileType]] = {}

    def walk(stmts: tuple[Stmt, ...], outer: dict[str, TileType]) -> None:
        scope = dict(outer)
        for s in stmts:
            if isinstance(s, Assign) and isinstance(s.value.type, TileType):
                scope[s.target] = s.value.type
            elif isinstance(s, Assign):
                scope.pop(s.target, None)
            out[id(s)] = dict(scope)
            inner = {n: t for n, t in scope.items() if n != s.var} if isinstance(s, For) else scope
            for b in stmt_bodies(s):
                walk(b, inner)

    walk(body, {})
    return out


def local_memory_peak(kernel: Kernel) -> MemoryPeak:
    """The largest local-memory footprint of ``kernel``: live named tiles plus the temporaries
    of the statement being evaluated, over every program point."""
    types_at = visible_tile_types(kernel.body)
    best = MemoryPeak(0, kernel.loc, (), 0)

    def visit(s: Stmt, live_after: set[str]) -> None:
        nonlocal best
        if stmt_bodies(s):
            return
        named = set(live_after)
        if isinstance(s, Assign):
            named.discard(s.target)
        named |= stmt_uses(s)
        types = types_at[id(s)]
        tiles = tuple(sorted((n, types[n]) for n in named if n in types))
        temps = max((expr_peak(e) for e in child_exprs(s)), default=0)
        total = sum(t.nbytes for _, t in tiles) + temps
        if total > best.bytes:
            best = MemoryPeak(total, s.loc, tiles, temps)

    live_before(kernel.body, set(), visit)
    return best


def runtime_bounds(loop: For, loop_vars: set[str]) -> list[tuple[str, Expr]]:
    """The bounds of ``loop`` known only at run time, which generated code and the interpreter
    check are not negative: ``("start", e)`` / ``("stop", e)`` for each one that reads a variable
    other than an enclosing loop's (``loop_vars``): a scalar parameter, a value computed or read
    at run time."""
    out = []
    for which, e in (("start", loop.start), ("stop", loop.stop)):
        if not isinstance(e, Const) and not uses(e) <= loop_vars:
            out.append((which, e))
    return out


# the integer ops checked at run time: the C++ operator ``ts::arith`` takes, and how a message writes it
CHECKED_OPS = {"add": ("+", "+"), "sub": ("-", "-"), "mul": ("*", "*"), "floordiv": ("/", "//"), "mod": ("%", "%")}


def checked_int(e: BinOp) -> bool:
    """Whether ``e`` is integer arithmetic checked at run time, on sim and interp alike: ``+ - *``
    of integer scalars (the exact result must fit their dtype), and ``//``/``%`` of integers
    (scalars or indices) by anything but a constant other than 0 and -1 (no division by zero,
    no ``-2**63 // -1``). Index ``+ - *`` is 64-bit, as the interpreter's, and not checked."""
    t = e.type
    integer = isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int)
    if not integer or e.op not in CHECKED_OPS:
        return False
    if e.op in ("floordiv", "mod"):
        return not (isinstance(e.rhs, Const) and e.rhs.value not in (0, -1))
    return isinstance(t, ScalarType)


def int_type_name(t: Type) -> str:
    """The dtype integer arithmetic of ``t`` is checked against: an index is an ``i64``."""
    return t.dtype.name if isinstance(t, ScalarType) else "i64"


def range_text(loop: For) -> str:
    """How errors name a loop: ``ts.range(0, n, 64) at m.py:12``."""
    where = f" at {loop.loc}" if loop.loc else ""
    return f"ts.range({expr_str(loop.start)}, {expr_str(loop.stop)}, {expr_str(loop.step)}){where}"


def bound_text(loop: For, which: str, e: Expr) -> str:
    """What a negative-bound error names: ``ts.range(0, n, 64) at m.py:12: stop n``."""
    return f"{range_text(loop)}: {which} {expr_str(e)}"
