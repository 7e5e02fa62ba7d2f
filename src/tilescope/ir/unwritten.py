"""Where a kernel cannot write its Out parameters: the union of its stores' regions over its
loops, against each Out parameter's shape (``unwritten``).

A kernel has no run-time branches, so every store of a loop body runs in every iteration: the
union is exact when each store offset is a function of loop variables with constant bounds
(and of indices assigned once from them). An offset that depends on anything else — a scalar
parameter, a loop whose bounds are not constants, an index assigned twice — may reach anywhere
in its dim, so that store is taken to cover the whole dim: a region is reported only when no
execution can write it. An InOut parameter is not checked (what a kernel does not write keeps
its input value). A parameter whose stores are too many to enumerate (more than
``_MAX_COMBOS`` iterations for one group of dims, or more than ``_MAX_BOXES`` boxes) is not
reported on.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tilescope.errors import SourceLoc
from tilescope.ir.affine import INDEX_OPS
from tilescope.ir.nodes import Assign, BinOp, Const, Expr, For, Kernel, Program, Stmt, Store, UnOp, Var
from tilescope.ir.traverse import walk_stmts
from tilescope.ir.type_rules import access_sizes
from tilescope.ir.types import Direction, IndexType, ScalarType, TileType

_MAX_COMBOS = 1 << 16
_MAX_BOXES = 1 << 10
_OPS = INDEX_OPS

Interval = tuple[int, int]  # [lo, hi)
Box = tuple[Interval, ...]  # one interval per dim

# An index expression with its variables resolved where the store runs: ("const", v),
# ("loop", key) for one loop's variable, ("unknown",), or (op, *operands).
Form = tuple


@dataclass(frozen=True)
class Unwritten:
    """An Out parameter of ``kernel`` that no store can write whole: ``boxes`` (disjoint) are
    never written; ``loc`` is the last store to it (the parameter when it has none)."""

    kernel: str
    param: str
    shape: tuple[int, ...]
    boxes: tuple[Box, ...]
    stores: tuple[SourceLoc | None, ...]
    loc: SourceLoc | None

    @property
    def elements(self) -> int:
        """How many elements of the parameter are never written."""
        return sum(math.prod(hi - lo for lo, hi in b) for b in self.boxes)

    def region(self, box: Box) -> str:
        """``box`` as a slice of the parameter: ``y[:, 448:512]`` (``:`` for a whole dim)."""
        return slice_text(self.param, box, self.shape)

    def message(self) -> str:
        """What is wrong, in one sentence naming the kernel, the parameter and the region."""
        total = math.prod(self.shape)
        head = f"kernel {self.kernel}: Out param {self.param}{list(self.shape)}"
        if not self.stores:
            return f"{head} is never written: the kernel has no ts.store to {self.param}"
        shown = ", ".join(self.region(b) for b in self.boxes[:3])
        more = f" and {len(self.boxes) - 3} more region(s)" if len(self.boxes) > 3 else ""
        lines = ", ".join(str(loc.line) for loc in self.stores if loc is not None)
        where = f" (line {lines})" if lines else ""
        return (
            f"{head} is never written at {shown}{more} ({self.elements} of {total} elements): "
            f"no iteration of its stores{where} reaches there"
        )

    def hint(self) -> str:
        """What to do about it."""
        if not self.stores:
            return f"store the kernel's result into {self.param} (ts.store), or drop the param"
        return (
            f"check the store loop's bounds and offsets; a task's Out region must be written whole "
            f"(declare {self.param} as ts.InOut[...] if the kernel updates only part of it)"
        )

    def as_dict(self) -> dict:
        """JSON-ready: kernel, param, shape, regions (slices and boxes), elements, line."""
        return {
            "kernel": self.kernel,
            "param": self.param,
            "shape": list(self.shape),
            "regions": [self.region(b) for b in self.boxes],
            "boxes": [[list(iv) for iv in b] for b in self.boxes],
            "elements": self.elements,
            "at": str(self.loc) if self.loc else None,
            "message": self.message(),
        }


def slice_text(name: str, box: Box, shape) -> str:
    """``box`` of a tensor ``name`` of ``shape`` as a slice: ``y[:, 448:512]`` (``:`` for a whole dim)."""
    dims = [":" if (lo, hi) == (0, n) else f"{lo}:{hi}" for (lo, hi), n in zip(box, shape)]
    return f"{name}[{', '.join(dims)}]" if dims else name  # NOTE: a 0-dim tensor's one element


def unwritten(program: Program) -> list[Unwritten]:
    """Every Out parameter of ``program``'s kernels that some region of is never written."""
    return [u for k in program.kernels for u in kernel_unwritten(k)]


def kernel_unwritten(k: Kernel) -> list[Unwritten]:
    """The Out parameters of ``k`` that its stores cannot write whole (see the module docstring)."""
    walk = _Walk(k)
    walk.body(k.body)
    out = []
    for p in k.params:
        if p.direction is not Direction.OUT:
            continue
        shape = tuple(p.type.shape)
        stores = walk.stores.get(p.name, [])
        boxes: list[Box] = []
        for s, forms in stores:
            got = walk.boxes(s, forms, shape)
            if got is None or len(boxes) + len(got) > _MAX_BOXES:
                break
            boxes.extend(got)
        else:
            gaps = _uncovered(boxes, shape)
            if gaps:
                locs = tuple(s.loc for s, _ in stores)
                out.append(Unwritten(k.name, p.name, shape, tuple(gaps), locs, locs[-1] if locs else p.loc))
    return out


class _Walk:
    """One pass over a kernel body: each store's offsets as forms over the loops around it."""

    def __init__(self, k: Kernel):
        counts: dict[str, int] = {}
        for s in walk_stmts(k.body):
            if isinstance(s, Assign):
                counts[s.target] = counts.get(s.target, 0) + 1
        self.once = {n for n, c in counts.items() if c == 1}
        self.roots = _tensor_roots(k)
        self.visible: dict[str, Form] = {}  # name -> its form where the walk is now
        self.values: dict[int, range | None] = {}  # loop key -> its values (None: not constant)
        self.stores: dict[str, list[tuple[Store, tuple[Form, ...]]]] = {}

    def body(self, body: tuple[Stmt, ...]) -> None:
        for s in body:
            match s:
                case For(var=var, start=a, stop=b, step=c, body=inner):
                    key = len(self.values)
                    ends = [self.form(x) for x in (a, b, c)]
                    const = all(f[0] == "const" for f in ends)
                    self.values[key] = range(ends[0][1], ends[1][1], ends[2][1]) if const else None
                    saved = dict(self.visible)
                    self.visible[var] = ("loop", key)
                    self.body(inner)
                    self.visible = saved
                case Assign(target=t, value=v):
                    is_index = isinstance(v.type, IndexType) or (
                        isinstance(v.type, ScalarType) and v.type.dtype.is_int
                    )
                    self.visible[t] = self.form(v) if is_index and t in self.once else ("unknown",)
                case Store(tensor=Var(name=n)) as st:
                    forms = tuple(self.form(o) for o in st.offsets)
                    for root in self.roots.get(n, {n}):
                        self.stores.setdefault(root, []).append((st, forms))

    def form(self, e: Expr) -> Form:
        match e:
            case Const(value=v) if isinstance(v, int) and not isinstance(v, bool):
                return ("const", v)
            case Var(name=n):
                return self.visible.get(n, ("unknown",))
            case UnOp(op="neg", operand=a):
                return ("sub", ("const", 0), self.form(a))
            case BinOp(op=op, lhs=a, rhs=b) if op in _OPS:
                fa, fb = self.form(a), self.form(b)
                if fa[0] == "const" and fb[0] == "const" and not (op in ("floordiv", "mod") and fb[1] == 0):
                    return ("const", _OPS[op](fa[1], fb[1]))
                return (op, fa, fb)
        return ("unknown",)

    def boxes(self, s: Store, forms: tuple[Form, ...], shape: tuple[int, ...]) -> list[Box] | None:
        """The boxes one store writes over all its iterations (clipped to ``shape``); None when
        there are too many to enumerate."""
        sizes, steps = _extents(s, shape)
        loops = [_loops(f) for f in forms]
        whole = [any(self.values.get(k) is None for k in ks) or _has_unknown(f) for ks, f in zip(loops, forms)]
        # dims that share a loop variable are enumerated together; the others independently
        groups: list[tuple[list[int], set[int]]] = []
        for d in range(len(shape)):
            if whole[d]:
                groups.append(([d], set()))
                continue
            mine = [g for g in groups if g[1] & loops[d]]
            dims, keys = [d], set(loops[d])
            for g in mine:
                groups.remove(g)
                dims, keys = g[0] + dims, g[1] | keys
            groups.append((sorted(dims), keys))
        parts: list[tuple[list[int], list[Box]]] = []
        for dims, keys in groups:
            if whole[dims[0]]:
                parts.append((dims, [((0, shape[dims[0]]),)]))
                continue
            order = sorted(keys)
            ranges = [self.values[k] for k in order]
            # NOTE: len() overflows past sys.maxsize; a strided dim writes one interval per element
            pieces = math.prod(sizes[d] for d in dims if steps[d] > 1)
            if math.prod(_count(r) for r in ranges) * pieces > _MAX_COMBOS:
                return None
            got: set[Box] = set()
            for combo in itertools.product(*ranges):
                env = dict(zip(order, combo))
                per_dim = [_intervals(_eval(forms[d], env), sizes[d], steps[d], shape[d]) for d in dims]
                got.update(itertools.product(*per_dim))
            parts.append((dims, _merged(got) if len(dims) == 1 else sorted(got)))
        if math.prod(len(p[1]) for p in parts) > _MAX_BOXES:
            return None
        out = []
        for pick in itertools.product(*(p[1] for p in parts)):
            box: list[Interval] = [(0, 0)] * len(shape)
            for (dims, _), sub in zip(parts, pick):
                for d, iv in zip(dims, sub):
                    box[d] = iv
            out.append(tuple(box))
        return out


def _extents(s: Store, shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The elements a store writes along each tensor dim from its offset, and the step between
    them: the tile's dims (``dims``, the last ones by default) take the tile's sizes and
    ``strides``, the others 1."""
    t = s.value.type
    tile = tuple(t.shape) if isinstance(t, TileType) else ()
    return list(access_sizes(len(shape), tile, s.dims)), list(s.strides) or [1] * len(shape)


def _intervals(lo: int, size: int, step: int, extent: int) -> list[Interval]:
    """The intervals of ``[0, extent)`` that ``size`` elements from ``lo``, ``step`` apart, cover."""
    if step == 1 or size == 1:
        got = [(max(lo, 0), min(lo + size, extent))]
    else:
        got = [(i, i + 1) for i in range(lo, lo + size * step, step)]
    return [(a, b) for a, b in got if max(a, 0) < min(b, extent)]


def _count(r: range) -> int:
    """How many values ``r`` holds (``len`` raises past ``sys.maxsize``)."""
    return max(0, (r.stop - r.start + r.step - 1) // r.step)


def _tensor_roots(k: Kernel) -> dict[str, set[str]]:
    """The parameters each tensor variable of ``k`` may hold (a fixed point over its assignments)."""
    params = {p.name for p in k.params}
    assigns = [s for s in walk_stmts(k.body) if isinstance(s, Assign) and isinstance(s.value, Var)]
    roots: dict[str, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for s in assigns:
            src = {s.value.name} if s.value.name in params else roots.get(s.value.name, set())
            new = src - roots.get(s.target, set())
            if new:
                roots.setdefault(s.target, set()).update(new)
                changed = True
    return roots


def _loops(f: Form) -> set[int]:
    if f[0] == "loop":
        return {f[1]}
    if f[0] in ("const", "unknown"):
        return set()
    return set().union(*(_loops(x) for x in f[1:]))


def _has_unknown(f: Form) -> bool:
    if f[0] == "unknown":
        return True
    return f[0] not in ("const", "loop") and any(_has_unknown(x) for x in f[1:])


def _eval(f: Form, env: dict[int, int]) -> int:
    match f[0]:
        case "const":
            return f[1]
        case "loop":
            return env[f[1]]
    a, b = _eval(f[1], env), _eval(f[2], env)
    if f[0] in ("floordiv", "mod") and b == 0:
        return 0  # NOTE: a division by zero fails at run time; it writes nothing to cover
    return _OPS[f[0]](a, b)


def _merged(boxes: set[Box]) -> list[Box]:
    """One-dim boxes merged into disjoint, non-touching intervals."""
    out: list[list[int]] = []
    for ((lo, hi),) in sorted(boxes):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [((lo, hi),) for lo, hi in out]


def _uncovered(boxes: list[Box], shape: tuple[int, ...]) -> list[Box]:
    """Disjoint boxes covering exactly the part of ``[0, shape)`` that no box of ``boxes`` covers;
    slabs of the first dim with the same uncovered rest are merged."""
    if not shape:
        return [] if boxes else [()]
    extent = shape[0]
    cuts = sorted({0, extent, *(b[0][0] for b in boxes), *(b[0][1] for b in boxes)})
    slabs: list[tuple[int, int, tuple[Box, ...]]] = []
    for lo, hi in zip(cuts, cuts[1:]):
        if hi > extent:
            break
        rest = tuple(_uncovered([b[1:] for b in boxes if b[0][0] <= lo and hi <= b[0][1]], shape[1:]))
        if slabs and slabs[-1][1] == lo and slabs[-1][2] == rest:
            slabs[-1] = (slabs[-1][0], hi, rest)
        else:
            slabs.append((lo, hi, rest))
    return [((lo, hi), *r) for lo, hi, rest in slabs for r in rest]
