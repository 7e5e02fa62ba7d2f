"""Kernel IR -> one readable C++ file against the tile library (``tilescope/kernel.hpp``).

``acc = ts.matmul(a, b, acc=acc)`` is emitted in place (``matmul_acc(acc, a, b)``) only when
``a`` and ``b`` do not read ``acc``: the in-place form writes ``acc`` while it is being read.
With ``bf16_dot`` (compile option ``bf16_matmul="dot"``) a matmul of bf16 tiles calls
``matmul_dot``/``matmul_acc_dot`` (tile_matmul_dot.hpp) instead.

A checked build (``check_bounds=True``) also includes ``tilescope/check.hpp``, defines a
``check_sites`` table (kernel, op, tensor, argument index, DSL line of every load/store, in
evaluation order) and passes each load/store its entry as one more argument, which selects
the checked overload: ``load<8, 128>(x, {row, 0}, ::check_sites[0])``. Without
``check_bounds`` nothing of this is emitted for plain loads and stores: the text, and so the
``source`` part of the build cache key, is the same as before checked builds existed, and no
compile flag differs. Ragged loads and stores (``valid=``) and gathers (``ts.load_rows``) are
checked in every build: their counts and row indices come from data, and a gather's index
outside its tensor would read anywhere, so they always get their table entry.
The table is named with ``::`` so that no kernel variable can shadow it.

Elementwise trees are emitted fused and plain loads only read are emitted as tile views: see
kernel_fusion.py.
"""

from __future__ import annotations

import dataclasses
import math

from tilescope._version import __version__
from tilescope.codegen.cpp_common import (
    CppNames,
    ExprEmitter,
    context_dtype,
    display_path,
    function_names,
    header_comment,
    marker,
    string_literal,
    tile_dims,
    value_type,
)
from tilescope.codegen.kernel_fusion import (
    FUSED_REDUCTIONS,
    NO_TREE,
    FusedTree,
    fusable,
    fused_tree,
    i8_view_side,
    part_key,
    plain_load,
    prefetches,
    recomputed,
    stored_tensors,
    views,
)
from tilescope.errors import SourceLoc
from tilescope.ir.analysis import bound_text, kernel_core, runtime_bounds, uses
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Const,
    Expr,
    For,
    Full,
    Iota,
    Kernel,
    Load,
    LoadRows,
    MatMul,
    Probe,
    Rand,
    Reduce,
    Scan,
    Stmt,
    Store,
    TileSlice,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.op_registry import OPS, binary_ops, compare_ops, logical_ops
from tilescope.ir.printer import dropped_dim
from tilescope.ir.traverse import walk_exprs, walk_stmts
from tilescope.ir.type_rules import access_dims
from tilescope.ir.types import Direction, TensorType, TileType

# BinOps on tiles emitted as a call of the tile library (maximum(a, b), eq(a, b), pow(a, b)...);
# + - * / are operators (cpp_common)
_TILE_FN = {n: OPS[n].cpp for n in (*binary_ops(), *compare_ops(), *logical_ops()) if OPS[n].cpp and OPS[n].functor}
class _CheckSites:
    """The ``check_sites`` table of a checked kernel, filled as its loads and stores are emitted."""

    def __init__(self, k: Kernel):
        self.kernel = k.name
        self.arg_index = {p.name: i for i, p in enumerate(k.params)}
        self.rows: list[str] = []

    def add(self, op: str, tensor: str, loc: SourceLoc | None) -> str:
        """Record one load/store; returns the C++ expression naming its entry."""
        where = f"{display_path(loc.file)}:{loc.line}" if loc else "an unknown line"
        fields = [string_literal(self.kernel), string_literal(op), string_literal(tensor)]
        fields += [str(self.arg_index[tensor]), string_literal(where)]
        self.rows.append(f"    {{{', '.join(fields)}}},  // {len(self.rows)}")
        return f"::check_sites[{len(self.rows) - 1}]"

    def table(self) -> list[str]:
        if not self.rows:  # a kernel without loads or stores has nothing to check
            return []
        return [
            "// Checked build: what a bounds violation names (kernel, op, tensor, arg, DSL line).",
            "static const CheckSite check_sites[] = {",
            *self.rows,
            "};",
            "",
        ]


class _KernelEmitter(ExprEmitter):
    def __init__(
        self,
        names: CppNames,
        sites: _CheckSites | None,
        checked: bool,
        bf16_dot: bool = False,
        stored: frozenset[str] = frozenset(),
        writes: tuple[str, ...] = (),
        weights: frozenset[str] = frozenset(),
    ):
        super().__init__(names)
        self.sites = sites
        self.checked = checked
        self.bf16_dot = bf16_dot
        self.stored = stored  # the tensors the kernel stores into: no view of them
        self.writes = writes  # their C++ names, whose extents a view must not overlap
        self.weights = weights  # the kernel's ts.Weight params, and the views of them it names
        self.tree: FusedTree = NO_TREE  # the fused tree being emitted
        self.wrapped: set[tuple[int, int]] = set()  # its (op, operand) pairs already wrapped in fuse()
        self.parents: list[Expr] = []  # the expressions being emitted, innermost last

    def emit_fused(self, e: Expr, ctx=None, min_ops: int = 2) -> str:
        """emit(), with ``e``'s elementwise tree fused where fused_tree() finds one of at least
        ``min_ops`` ops."""
        self.tree = fused_tree(e, min_ops)
        try:
            return self.emit(e, ctx)
        finally:
            self.tree, self.wrapped = NO_TREE, set()

    def _emit(self, e: Expr, ctx) -> tuple[str, int]:
        if not self.tree.ops:
            return super()._emit(e, ctx)
        pair = (id(self.parents[-1]), id(e)) if self.parents else None
        wrap = pair in self.tree.wrap and pair not in self.wrapped
        if wrap:  # one fused operand per op is enough: `fuse(t) * t`
            self.wrapped.add(pair)
        self.parents.append(e)
        try:
            text, prec = super()._emit(e, ctx)
        finally:
            self.parents.pop()
        return (f"fuse({text})", 16) if wrap else (text, prec)

    def emit_other(self, e: Expr, ctx) -> str:
        match e:
            case BinOp(op=op, lhs=a, rhs=b) if op in _TILE_FN:
                sub = self.operand_ctx(e)
                return f"{_TILE_FN[op]}({self.emit(a, sub)}, {self.emit(b, sub)})"
            case UnOp(op=op, operand=a):
                return f"{OPS[op].cpp}({self.emit(a)})"
            case Load() if self.read_in_place(e):
                return self.view(None, e)
            case Load(tensor=t, offsets=offs, valid=valid, fill=fill, pad=pad, type=tt):
                r, c = tile_dims(tt)
                args = f"{self.name(t.name)}, {self.offsets(offs)}"
                fn = "load"
                if valid:
                    fn = "load_valid"
                    args += f", {self.valid(valid)}, {self.emit(fill, tt.dtype)}"
                elif pad is not None:
                    fn = "load_pad"
                    args += f", {self.emit(pad, tt.dtype)}"
                axes = axes_arg(t.type, tt, e.dims, e.strides)
                return f"{fn}<{r}, {c}{', ' + axes if axes else ''}>({args}{self.site('load', t.name, e.loc, bool(valid))})"
            case LoadRows(tensor=t, rows=rows, col=col, valid=valid, fill=fill, type=tt):
                args = f"{self.name(t.name)}, {self.emit(rows)}, {self.emit(col)}"
                if valid is not None:
                    args += f", {self.emit(valid)}, {self.emit(fill, tt.dtype)}"
                return f"load_rows<{tt.shape[1]}>({args}{self.site('load_rows', t.name, e.loc, True)})"
            case Rand(seed=seed, offset=offset, type=tt):
                r, c = tile_dims(tt)
                return f"rand<{r}, {c}>({self.emit(seed)}, {self.emit(offset)})"
            case Iota(dim=d, type=tt):
                r, c = tile_dims(tt)
                return f"iota<{tt.dtype.cpp}, {r}, {c}, {1 if len(tt.shape) == 1 else d}>()"
            case TileSlice(value=v, starts=starts, sizes=sizes, type=tt):
                (r0, c0), (r, c) = ((0, *starts), (1, *sizes)) if len(starts) == 1 else (starts, sizes)
                text = f"slice<{r0}, {c0}, {r}, {c}>({self.emit(v)})"
                # a column taken as a 1-D tile is a row in C++ (1-D tiles are 1 x N)
                return f"transpose({text})" if dropped_dim(sizes, tt.shape) == 1 else text
            case Full(value=v, type=tt):
                r, c = tile_dims(tt)
                return f"full<{tt.dtype.cpp}, {r}, {c}>({self.emit(v, tt.dtype)})"
            case Cast(value=v, mode=mode, type=tt):
                m = "" if mode == "rint" else f", RoundMode::{mode}"
                return f"cast<{tt.dtype.cpp}>({self.emit(v)}{m})"
            case Reduce(op=op, value=v) if op in FUSED_REDUCTIONS:
                # a row reduction reads a fused operand element by element: no tile for even one op
                if isinstance(v, Load) and plain_load(v, self.stored):
                    return f"{op}({self.view(None, v)})"
                outer, outer_wrapped = self.tree, self.wrapped
                inner = fused_tree(v, min_ops=1)
                # the operand's tree wraps its own leaves, also one an outer tree wrapped where
                # it reads the same node; back out, the outer tree goes on as it was
                self.tree = FusedTree(outer.ops | inner.ops, outer.wrap | inner.wrap)
                self.wrapped = outer_wrapped - inner.wrap
                try:
                    return f"{op}({self.emit(v)})"
                finally:
                    self.tree, self.wrapped = outer, outer_wrapped
            case Reduce(op=op, value=v):
                return f"{op}({self.emit(v)})"
            case MatMul(lhs=a, rhs=b, acc=c):
                extra = "" if c is None else f", {self.emit(c)}"
                return f"{self.matmul_name(e)}({self.matmul_operands(e)}{extra})"
            case Transpose(value=v):
                return f"transpose({self.emit(v)})"
            case Scan(op=op, value=v, dim=d, reverse=rev, exclusive=exc, type=tt):
                axis = 1 if len(tt.shape) == 1 else d  # a 1-D tile is 1 x N in C++
                return f"{op}<{axis}, {str(rev).lower()}, {str(exc).lower()}>({self.emit(v)})"
            case Where(cond=c, lhs=a, rhs=b):
                d = e.type.dtype
                return f"where({self.emit(c)}, {self.emit(a, d)}, {self.emit(b, d)})"
        raise TypeError(f"cannot emit {type(e).__name__} in a kernel")

    def read_in_place(self, e: Load) -> bool:
        """Whether load ``e``, not assigned to a name, is read as a view: a plain load of a tensor
        the kernel does not store into, read where it stands by an op of the fused tree being
        emitted (kernel_fusion.py). Where, not which: a node the front-end shares (an inlined
        helper's argument) may sit in the tree and also under an op that takes tiles
        (``col_mean``, ``cast``), so every expression between the load and the tree's root, or
        the row reduction the tree is the operand of, must be an op of the tree."""
        if not plain_load(e, self.stored):
            return False
        above = self.parents[:-1]  # parents[-1] is the load itself (_emit pushed it)
        if not above or id(above[-1]) not in self.tree.ops:
            return False
        for x in reversed(above):
            if id(x) not in self.tree.ops:
                return isinstance(x, Reduce) and x.op in FUSED_REDUCTIONS
        return True

    def view(self, name: str | None, e: Load) -> str:
        """A view of what load ``e`` reads (kernel_fusion.py): the declaration of tile ``name``,
        ``TileView<float, 4, 4096> t = view<4, 4096>(x, {0, 0}, {extent(y)})``, or with no name
        the expression ``view<4, 4096>(x, {0, 0}, {extent(y)})``."""
        r, c = tile_dims(e.type)
        extents = f", {{{', '.join(f'extent({w})' for w in self.writes)}}}" if self.writes else ""
        args = f"{self.name(e.tensor.name)}, {self.offsets(e.offsets)}{extents}"
        value = f"view<{r}, {c}>({args}{self.site('load', e.tensor.name, e.loc)})"
        return value if name is None else f"TileView<{e.type.dtype.cpp}, {r}, {c}> {name} = {value}"

    def next_rows(self, e: Load, offsets: tuple[Expr, ...]) -> str:
        """The box view() reads for load ``e``, at ``offsets`` instead of its own, as rows to
        prefetch (tile_prefetch.hpp): ``next_rows<4, 4096>(x, {s + 4, 0})``."""
        r, c = tile_dims(e.type)
        return f"next_rows<{r}, {c}>({self.name(e.tensor.name)}, {self.offsets(offsets)})"

    def matmul_name(self, e: MatMul, in_place: bool = False) -> str:
        """The tile library function of matmul ``e``: ``matmul``/``matmul_acc``, or with ``bf16_dot`` and
        bf16 operands ``matmul_dot``/``matmul_acc_dot``."""
        dot = self.bf16_dot and e.lhs.type.dtype.name == "bf16"
        return ("matmul_acc" if in_place else "matmul") + ("_dot" if dot else "")

    def matmul_operands(self, e: MatMul) -> str:
        """``a, b`` of a matmul, each wrapped in ``transpose()`` when the op transposes it. An
        int8 matmul packs both operands anyway, so an operand that is a plain load it does not
        transpose is read where its tensor holds it: ``view<256, 352>(w, {c, 0}, ...)``, not
        copied first (kernel_fusion.py); a b read so from a ts.Weight is packed once and kept:
        ``weight(view<256, 352>(w, ...))`` (tile_weights.hpp)."""

        def operand(x: Expr, rhs: bool) -> str:
            if i8_view_side(e, rhs) and plain_load(x, self.stored):
                view = self.view(None, x)
                return f"weight({view})" if rhs and x.tensor.name in self.weights else view
            if rhs and i8_view_side(e, rhs) and isinstance(x, Var) and x.name in self.weights:
                return f"weight({self.emit(x)})"
            return f"transpose({self.emit(x)})" if (e.transpose_b if rhs else e.transpose_a) else self.emit(x)

        return f"{operand(e.lhs, False)}, {operand(e.rhs, True)}"

    def offsets(self, offs: tuple[Expr, ...]) -> str:
        """The ``{o0, o1, ...}`` offsets of a load/store (a 0-dim tensor is one element: ``{0}``)."""
        return f"{{{', '.join(self.emit(o) for o in offs) or '0'}}}"

    def valid(self, valid: tuple[Expr, ...]) -> str:
        """The ``{rows, cols}`` valid counts of a load/store (a 1-D tile's one row: ``{1, n}``)."""
        counts = [self.emit(v) for v in valid]
        return f"{{{', '.join(['1', *counts] if len(counts) == 1 else counts)}}}"

    def site(self, op: str, tensor: str, loc: SourceLoc | None, always: bool = False) -> str:
        """``, ::check_sites[i]`` (the op's entry) in a checked build, or for an op checked in
        every build (``always``); else nothing."""
        if self.sites is None or not (self.checked or always):
            return ""
        return f", {self.sites.add(op, tensor, loc)}"


def axes_arg(tensor: TensorType, tile: TileType, dims: tuple[int | None, ...], strides: tuple[int, ...]) -> str:
    """``Axes<RowDim, ColDim, RowStep, ColStep>`` of an access along ``dims`` every ``strides``
    elements (tile_core.hpp; -1 for a tile dim with no tensor dim); "" for the default (the last
    dims, unit steps)."""
    if not dims and not strides:
        return ""
    nd = len(tensor.shape)
    along = access_dims(nd, len(tile.shape), dims)
    row, col = (-1 if d is None else d for d in ((None, along[0]) if len(along) == 1 else along))
    steps = strides or (1,) * nd
    return f"Axes<{row}, {col}, {1 if row < 0 else steps[row]}, {1 if col < 0 else steps[col]}>"


def _zeros(e: Full) -> bool:
    """A fill with +0 (``-0.0`` keeps its sign: ``1 / -0.0`` is ``-inf``)."""
    v = e.value
    return (
        isinstance(v, Const)
        and not isinstance(v.value, bool)
        and v.value == 0
        and math.copysign(1.0, v.value) > 0
    )


def _assigned_loads(k: Kernel) -> dict[str, Load]:
    """The tiles of ``k`` assigned a load, by name (the last load, for a name assigned more than once)."""
    return {s.target: s.value for s in walk_stmts(k.body) if isinstance(s, Assign) and isinstance(s.value, Load)}


def _accumulates_in_place(target: str, v: Expr) -> bool:
    return (
        isinstance(v, MatMul)
        and isinstance(v.acc, Var)
        and v.acc.name == target
        and target not in uses(v.lhs) | uses(v.rhs)
    )


_STREAM_NOTE = "// a large program output nothing reads: stored past the caches"


def _stream_line(cpp_name: str) -> str:
    line = f"{cpp_name}.stream = true;"
    return f"    {line:<44}{_STREAM_NOTE}"


def with_streamed(text: str, k: Kernel, streamed: frozenset[str]) -> str:
    """The generated C++ ``text`` of kernel ``k`` with its streamed outputs set to ``streamed``
    (the lines kernel_cpp writes after the parameters' declarations), the rest as it is."""
    name_of = CppNames(function_names(k.params, k.body))
    lines = [line for line in text.splitlines() if not line.endswith(_STREAM_NOTE)]
    # the parameters' declarations (each reads its `args[i]`) follow the entry's opening line
    last = max(i for i, line in enumerate(lines) if "(args[" in line or line.startswith('extern "C" void kernel_entry'))
    lines[last + 1 : last + 1] = [_stream_line(name_of(p.name)) for p in k.params if p.name in streamed]
    return "\n".join(lines) + "\n"


def _part_names(again: dict[str, tuple[Expr, ...]], taken: set[str]) -> dict[tuple[str, str], tuple[str, Var]]:
    """A fresh name (``<tile>_<i>``, not a name of the kernel) and a Var of it for each part of
    each recomputed tile, by (the tile, the part's key)."""
    out: dict[tuple[str, str], tuple[str, Var]] = {}
    for tile, parts in again.items():
        for i, part in enumerate(parts):
            name = f"{tile}_{i}"
            while name in taken:
                name += "_"
            taken = taken | {name}
            out[(tile, part_key(part))] = (name, Var(name, part.type, part.loc))
    return out


def _with_parts(e: Expr, shape: tuple[int, ...], parts: dict[str, Var]) -> Expr:
    """``e`` (a tree of fusable ops of ``shape``) with each of its parts (by key) read from the
    name it was computed into."""
    if isinstance(e, Var | Const):
        return e
    if not (fusable(e) and e.type.shape == shape):
        return parts[part_key(e)]
    if isinstance(e, BinOp):
        return dataclasses.replace(e, lhs=_with_parts(e.lhs, shape, parts), rhs=_with_parts(e.rhs, shape, parts))
    return dataclasses.replace(e, operand=_with_parts(e.operand, shape, parts))


def kernel_cpp(
    k: Kernel, check_bounds: bool = False, streamed: frozenset[str] = frozenset(), bf16_dot: bool = False
) -> str:
    """The C++ source of one kernel: ``extern "C" void kernel_entry(const ts_arg *args)``.

    Args:
        k: the kernel.
        check_bounds: emit a checked kernel, whose loads and stores throw ``ts::BoundsError``
            (naming the kernel, op, tensor, DSL line, offsets and shape) instead of reading or
            writing outside their tensor.
        streamed: the out parameters its stores write past the caches (``streamed_outputs`` of
            the program, kernel_fusion.py).
        bf16_dot: bf16 matmuls through the CPU's bf16 dot-product instruction (compile option
            ``bf16_matmul="dot"``; the same bits except for subnormals, tile_matmul_dot.hpp).
    """
    again = recomputed(k)
    names = function_names(k.params, k.body)
    part_names = _part_names(again, names)
    name_of = CppNames(names | {n for n, _ in part_names.values()})
    always = any(isinstance(e, LoadRows) or (isinstance(e, Load) and e.valid) for e in walk_exprs(k.body))
    always |= any(isinstance(s, Store) and s.valid for s in walk_stmts(k.body))
    sites = _CheckSites(k) if check_bounds or always else None
    writes = tuple(name_of(n) for n in stored_tensors(k))
    weights = {p.name for p in k.params if p.weight}
    in_place = views(k)
    weights |= {n for n, v in _assigned_loads(k).items() if n in in_place and v.tensor.name in weights}
    em = _KernelEmitter(name_of, sites, check_bounds, bf16_dot, frozenset(stored_tensors(k)), writes, frozenset(weights))
    lines = header_comment(f"kernel {k.name} ({kernel_core(k)})", k.loc, __version__)
    lines.append("#include <tilescope/kernel.hpp>")
    if sites is not None:
        lines.append("#include <tilescope/check.hpp>")
    probe_ids = {id(s): i for i, s in enumerate(x for x in walk_stmts(k.body) if isinstance(x, Probe))}
    if probe_ids:
        lines.append("#include <tilescope/probe.hpp>")
    lines += ["", "using namespace ts;", ""]
    if probe_ids:
        lines += [
            "// ts.probe: the runtime points probe_sink at its recorder for a run with probes on (else null).",
            "static ProbeSink probe_sink = nullptr;",
            'extern "C" void ts_probe_install(ProbeSink sink) { probe_sink = sink; }',
            "",
        ]
    if any(p.weight for p in k.params):
        lines += [
            "// ts.Weight: the run path calls these before a run whose weights changed (tile_weights.hpp).",
            'extern "C" void ts_weights_changed() { weights_changed(); }',
            'extern "C" void ts_weights_changed_in(const uint64_t *ranges, int n) { weights_changed_in(ranges, n); }',
            "",
        ]
    entry = len(lines)
    lines.append('extern "C" void kernel_entry(const ts_arg *args) {')
    for i, p in enumerate(k.params):
        name = name_of(p.name)
        if p.direction is Direction.SCALAR:
            lines.append(
                f"    const {p.type.dtype.cpp} {name} = scalar_arg<{p.type.dtype.cpp}>(args[{i}]);{marker(p.loc)}"
            )
        else:
            view = f"TensorView<{p.type.dtype.cpp}> {name}(args[{i}]);"
            where = marker(p.loc).replace("  // @", " @")
            lines.append(f"    {view:<44}// {p.direction.value} {list(p.type.shape)}{where}")
    lines += [_stream_line(name_of(p.name)) for p in k.params if p.name in streamed]
    ahead = prefetches(k, in_place, again)
    declared: list[set[str]] = [set()]
    loop_vars: set[str] = set()

    def stmt(s: Stmt, ind: str) -> None:
        m = marker(s.loc)
        em.at = s.loc
        match s:
            case Assign(target=t, value=v):
                name = name_of(t)
                if _accumulates_in_place(t, v):
                    lines.append(f"{ind}{em.matmul_name(v, in_place=True)}({name}, {em.matmul_operands(v)});{m}")
                    return
                if t in in_place:
                    lines.append(f"{ind}{em.view(name, v)};{m}")
                    declared[-1].add(t)
                    return
                if t in again:  # computed where it is read; its parts once, here (one line: one statement)
                    decls, parts = [], {}
                    for part in again[t]:
                        part_name, var = part_names[(t, part_key(part))]
                        rhs = em.emit_fused(part, context_dtype(part))
                        decls.append(f"{value_type(part.type)} {name_of(part_name)} = {rhs}; ")
                        parts[part_key(part)] = var
                    value = _with_parts(v, v.type.shape, parts)
                    fused = em.emit_fused(value, context_dtype(v), min_ops=1)
                    lines.append(f"{ind}{''.join(decls)}auto {name} = {fused};{m}")
                    declared[-1].add(t)
                    return
                if isinstance(v, Full) and _zeros(v):
                    r, c = tile_dims(v.type)
                    rhs = f"zeros<{v.type.dtype.cpp}, {r}, {c}>()"
                elif id(s) in ahead:  # computed asking for the loop's next rows (kernel_fusion.py)
                    rows = ", ".join(em.next_rows(load, offs) for load, offs in ahead[id(s)])
                    rhs = f"prefetching({em.emit_fused(v, context_dtype(v), min_ops=1)}, {{{rows}}})"
                else:
                    rhs = em.emit_fused(v, context_dtype(v))
                if any(t in d for d in declared):
                    lines.append(f"{ind}{name} = {rhs};{m}")
                else:
                    declared[-1].add(t)
                    lines.append(f"{ind}{value_type(v.type)} {name} = {rhs};{m}")
            case Store(tensor=t, offsets=offs, value=v, valid=valid, dims=dims, strides=strides):
                fn = "store_valid" if valid else "store"
                axes = axes_arg(t.type, v.type, dims, strides)
                fn += f"<{axes}>" if axes else ""
                # NOTE: fused from one op up: the op is computed straight into the tensor, with no
                # tile written and read back first (store_valid takes tiles)
                value = em.emit(v) if valid else em.emit_fused(v, min_ops=1)
                args = f"{name_of(t.name)}, {em.offsets(offs)}, {value}"
                if valid:
                    args += f", {em.valid(valid)}"
                lines.append(f"{ind}{fn}({args}{em.site('store', t.name, s.loc, bool(valid))});{m}")
            case Probe(value=v, name=n):
                lines.append(f"{ind}probe(probe_sink, {probe_ids[id(s)]} /* {n} */, {em.emit(v)});{m}")
            case For(var=v, start=a, stop=b, step=c, body=body):
                var = name_of(v)
                for which, e in runtime_bounds(s, loop_vars):
                    lines.append(f"{ind}check_bound({em.emit(e)}, {string_literal(bound_text(s, which, e))});{m}")
                lines.append(
                    f"{ind}for (int64_t {var} = {em.emit(a)}; {var} < {em.emit(b)}; {var} += {em.emit(c)}) {{{m}"
                )
                declared.append({v})
                loop_vars.add(v)
                for x in body:
                    stmt(x, ind + "    ")
                loop_vars.discard(v)
                declared.pop()
                lines.append(f"{ind}}}")
            case _:
                raise TypeError(f"cannot emit {type(s).__name__} in a kernel")

    for s in k.body:
        stmt(s, "    ")
    lines.append("}")
    if sites is not None:
        lines[entry:entry] = sites.table()
    return "\n".join(lines) + "\n"
