"""What a kernel computes in one loop (fused expressions), which loaded tiles it reads in place
(tile views), which tiles it computes again where they are read (recomputed tiles) and which
outputs it stores past the caches (streamed outputs): the kernel generator's choices that change
no result, only the memory traffic.

## Fused expressions

An assignment whose value is a tree of two or more elementwise arithmetic ops (+ - * /,
maximum, minimum, the unary math ops) of one shape, and a plain store whose value is such a tree
of one op or more, is emitted fused: one tile leaf of each op that has no fused operand is
wrapped in ``fuse(...)``, so the tile library computes the tree element by element in one loop,
straight into the target, with the same per-op roundings (``store(y, {0, 0}, fuse(t) * inv * g)``;
a store of one op writes the tensor without a tile in between: ``store(y, {0, 0}, fuse(e) * inv)``).
Operands of another shape (a row's statistics) and every other op stay tiles; so does the value
of a ragged store (``store_valid``). A row reduction's operand is fused from one op up
(``row_sum(fuse(t) * t)``): the reduction reads it element by element, in its documented order.

## Tile views

A loaded tile is read in place (a ``TileView``, tile_view.hpp), not copied, when it can be.
``t = ts.load(x, [0, 0], [4, 4096])`` is emitted as ``TileView<float, 4, 4096> t = view<4,
4096>(x, {0, 0}, {extent(y)})`` when the tile library can read every use of ``t`` where ``x``
holds it, so a row block is read from memory by its reduction and its store instead of being
copied to the stack first. A loaded tile is a view when:

- it is assigned once, from a plain load (no ``valid=``, ``pad=``, ``dims=`` or ``strides=``)
  of a tensor the kernel does not store into;
- every read of it is one the library takes a view at: an operand of a chain of elementwise
  arithmetic ops (the fusable ones) that ends in a row reduction (row_sum/row_max/row_min/
  row_mean), in a plain store's value or in an assignment's value (where the chain becomes a
  tile), the reduction's or the store's operand itself, or an operand of an int8 matmul that
  does not transpose it (the matmul packs its operands from where they are); any other use (a
  float matmul, a cast, a comparison, a slice, a ragged store, a probe, a copy ``u = t``) needs
  the tile;
- the chain of elementwise ops it is read in has at most ``MAX_FUSED_OPS`` ops: an op on a view
  is a fused expression in C++, so the whole chain above it becomes one expression type.

A load that is not assigned to a name and is an operand of an int8 matmul that does not transpose
it is a view too (``matmul_acc(g, q, view<256, 352>(wg, {c, 0}, {extent(h)}))``): the weights come
from their tensor into the matmul's packed copy, with no copy of their own first. A load that is
not assigned to a name, read by an op of a fused expression or by a row reduction (``store(y, {0, 0}, fuse(d) * inv * load(gamma))``: a row of weights broadcast over
the block), is a view too when it is a plain load of a tensor the kernel does not store into:
``view<1, 4096>(gamma, {0, 0}, {extent(y)})`` stands where ``load<1, 4096>(gamma, {0, 0})``
would, a temporary that lives as long as the statement, which is as long as the fused
expression reading it (a recomputed tile computes its loads into parts first).

The view reads what the load would have copied: view() copies the box after all when its
columns are strided or its bytes may overlap a tensor the kernel writes (``writes``, the
extents of the tensors it stores into), so a tensor passed as both input and output stays
correct.

## Recomputed tiles

A tile assigned once, at the kernel's top level or in a loop's body and read only in that body
(the scope its C++ declaration has), from at most ``MAX_RECOMPUTED_OPS`` cheap elementwise ops
of its shape (``RECOMPUTED_OPS``: + - *, neg, abs, maximum, minimum) is not stored into a tile
when every read of it is one that takes a fused expression (the same reads a view is read in, at
most ``MAX_RECOMPUTED_READS`` of them): it is declared as the fused expression itself, ``auto d
= fuse(t) - d_0;``, computed again, element by element, by each expression that reads it. Its
operands that are not such ops nor names (a row reduction, a load, another shape's ops, a scalar
expression) are its parts, each distinct one computed once, into a tile or a scalar, first on the
same line (``Tile<float, 16, 1> d_0 = row_mean(t);``; in a loop's body on every pass, where the
tile would have been). The names it reads are assigned once in the whole kernel (so before it:
in its body or outside the loop) or are scalar parameters, so they hold one value wherever it is
read; it reads no other recomputed tile. Ops and reads are counted where they are written (a
read inside a loop computes it again on every pass). Each element is computed by the same ops in
the same order as the stored tile's, so the bits are the same; the tile's store to the stack
and its loads back are what it saves.

## Prefetched rows

A loop that reads a view per pass at offsets that move with the loop variable (``t =
ts.load(x, [s, 0], [4, 1024])`` in ``for s in ts.range(0, block, 4)``) reads those rows from
memory in its first pass over them; while a later statement computes a costly elementwise
expression (``PREFETCH_OPS``: exp, log, tanh, ...) into a tile, it asks memory for nothing. The
first such statement after the view, in the loop's own body, whose tile is at least as large as
the view's box, asks for the view's rows of the loop's next pass while it computes: ``Tile<float, 4, 1024> e = prefetching(exp(fuse(t) -
row_max(t)), {next_rows<4, 1024>(x, {s + 4, 0})});`` (tile_prefetch.hpp). The tile is computed
by the same ops in the same order, so the bits are the same; a box past the tensor is not asked
for. The view's offsets may read the loop variable and names the loop's body does not assign.
A smaller tile (a row's statistics, ``[rows, 1]``) would ask for all the lines at once, which
costs more than it saves: the next costly statement is taken instead. At most
``MAX_PREFETCHED_VIEWS`` views are asked for by one statement.

## Streamed outputs

A kernel's out parameter is stored into past the caches (non-temporal stores: ``y.stream =
true;`` after its ``TensorView``) when nothing would read the written lines back from a cache:
every task of the kernel is given, for that parameter, the whole or a slice of one of the
program's ``ts.Out`` tensors of at least ``STREAM_MIN_BYTES``, that tensor is given to no
kernel's In or InOut parameter and used in no other way by the orchestration (no kernel loads
from an Out parameter: the verifier refuses it). A plain store then writes its rows without
fetching their lines first, the way a large copy does; the values are the same. An edit of the
IR dump re-lowers the kernels whose IR changed and rewrites only the stream lines of the others
(``with_streamed``), since the choice depends on the whole program.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from tilescope.ir import dtypes as dt
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Const,
    Expr,
    For,
    Kernel,
    Load,
    MatMul,
    Program,
    Reduce,
    Slice,
    Stmt,
    Store,
    Submit,
    UnOp,
    Var,
)
from tilescope.ir.op_registry import fusable_ops
from tilescope.ir.printer import expr_str
from tilescope.ir.traverse import child_exprs, children, is_expr, map_exprs, walk_exprs, walk_stmts
from tilescope.ir.types import Direction, TensorType, TileType

_FUSED = fusable_ops()  # the elementwise ops of the tile library's fused expressions
FUSED_REDUCTIONS = ("row_sum", "row_max", "row_min", "row_mean")  # the tile library reads a fused row


MAX_FUSED_OPS = 24  # ops of one fused expression (fused_tree)
# a tile computed again where it is read: at most this many cheap ops, read at most this often
RECOMPUTED_OPS = frozenset({"add", "sub", "mul", "neg", "abs", "maximum", "minimum"})
MAX_RECOMPUTED_OPS = 3
MAX_RECOMPUTED_READS = 4
STREAM_MIN_BYTES = 32 << 20  # a program output at least this large is stored past the caches
MAX_PREFETCHED_VIEWS = 8  # views one statement asks for (g++ takes minutes over a list of ~30)
# elementwise ops of tens of instructions per vector: a loop's next rows are asked for while they run
PREFETCH_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "erf",
    "elu", "selu", "mish", "softplus", "logsigmoid",
})  # fmt: skip


def streamed_outputs(program: Program) -> dict[str, frozenset[str]]:
    """The out parameters each kernel of ``program`` stores into past the caches, by kernel name
    (see the module docstring: a large program output that nothing reads)."""
    large = {
        p.name
        for p in program.params
        if p.direction is Direction.OUT and isinstance(p.type, TensorType)
        and all(d > 0 for d in p.type.shape)
        and math.prod(p.type.shape) * p.type.dtype.itemsize >= STREAM_MIN_BYTES
    }  # fmt: skip
    if not large:
        return {}
    kernels = {k.name: k for k in program.kernels}
    uses = {name: 0 for name in large}  # every Var of each in the orchestration
    for e in walk_exprs(program.body):
        if isinstance(e, Var) and e.name in uses:
            uses[e.name] += 1
    streamed: dict[tuple[str, int], bool] = {}  # (kernel, param index) -> every task gives it a large output
    as_out = {name: 0 for name in large}  # the uses that are a task's out argument
    for submit in (e for e in walk_exprs(program.body) if isinstance(e, Submit)):
        params = kernels[submit.kernel].params
        for i, (param, arg) in enumerate(zip(params, submit.args)):
            if param.direction is Direction.SCALAR:
                continue
            tensor = arg.tensor if isinstance(arg, Slice) else arg
            name = tensor.name if isinstance(tensor, Var) and tensor.name in large else None
            ok = name is not None and param.direction is Direction.OUT
            if ok:
                as_out[name] += 1
            streamed[(submit.kernel, i)] = streamed.get((submit.kernel, i), True) and ok
    written_only = {name for name in large if uses[name] == as_out[name]}
    for submit in (e for e in walk_exprs(program.body) if isinstance(e, Submit)):
        for i, arg in enumerate(submit.args):
            tensor = arg.tensor if isinstance(arg, Slice) else arg
            if isinstance(tensor, Var) and tensor.name in large and tensor.name not in written_only:
                streamed[(submit.kernel, i)] = False
    out: dict[str, frozenset[str]] = {}
    for (kernel, i), ok in streamed.items():
        if ok:
            out[kernel] = out.get(kernel, frozenset()) | {kernels[kernel].params[i].name}
    return out


def fusable(e: Expr) -> bool:
    """An elementwise arithmetic op on tiles (what the tile library's fused expressions compute)."""
    if not isinstance(e.type, TileType) or e.type.dtype == dt.bool_:
        return False
    return isinstance(e, BinOp | UnOp) and e.op in _FUSED


@dataclass(frozen=True)
class FusedTree:
    """A tree of fusable ops computed in one loop: its ops and the operands wrapped in ``fuse()``."""

    ops: frozenset[int]  # ids of the ops in the tree
    wrap: frozenset[tuple[int, int]]  # (id of an op, id of its operand) for each fuse() leaf


NO_TREE = FusedTree(frozenset(), frozenset())


def fused_tree(root: Expr, min_ops: int = 2) -> FusedTree:
    """``root``'s tree of fusable ops of its shape, to be computed in one loop, with one tile
    operand of each op that has no fused operand to wrap in ``fuse()``; empty when that tree has
    fewer than ``min_ops`` ops. Positions, not nodes: a node shared with a use outside the tree (``t`` in
    ``exp(t - row_max(t))``) is wrapped only where the tree reads it. The tree is cut after
    MAX_FUSED_OPS ops (an expression type nested deeper costs g++ more than the loop saves): the
    ops below the cut are computed tile by tile and read by the tree as a tile."""
    shape = root.type.shape if isinstance(root.type, TileType) else None
    ops: dict[int, Expr] = {}

    def in_tree(e: Expr) -> bool:
        return fusable(e) and e.type.shape == shape

    def visit(e: Expr) -> None:
        ops[id(e)] = e
        for x in _operands(e):
            if in_tree(x) and len(ops) < MAX_FUSED_OPS:
                visit(x)

    if not in_tree(root):
        return NO_TREE
    visit(root)
    if len(ops) < min_ops:
        return NO_TREE
    wrap = set()
    for e in ops.values():
        operands = _operands(e)
        if not any(id(x) in ops for x in operands):
            wrap.add((id(e), id(next(x for x in operands if isinstance(x.type, TileType)))))
    return FusedTree(frozenset(ops), frozenset(wrap))


def _operands(e: Expr) -> tuple[Expr, ...]:
    return (e.lhs, e.rhs) if isinstance(e, BinOp) else (e.operand,)


def stored_tensors(k: Kernel) -> list[str]:
    """The tensor parameters ``k`` stores into, in the order of its parameters."""
    stored = {s.tensor.name for s in walk_stmts(k.body) if isinstance(s, Store)}
    return [p.name for p in k.params if p.name in stored]


def plain_load(e: Expr, stored: set[str]) -> bool:
    """A load of a box (no ``valid=``, ``pad=``, ``dims=`` or ``strides=``) of a tensor that is
    not in ``stored`` (the tensors the kernel stores into): one a view can read."""
    return (
        isinstance(e, Load)
        and not e.valid
        and e.pad is None
        and not e.dims
        and not e.strides
        and e.tensor.name not in stored
    )


def _assigned(k: Kernel) -> dict[str, list[Expr]]:
    """The values assigned to each name of ``k``, in order."""
    assigned: dict[str, list[Expr]] = {}
    for s in walk_stmts(k.body):
        if isinstance(s, Assign):
            assigned.setdefault(s.target, []).append(s.value)
    return assigned


def views(k: Kernel) -> set[str]:
    """Names of the tiles of ``k`` to emit as views (see the module's docstring)."""
    stored = set(stored_tensors(k))
    assigned = _assigned(k)
    candidates = {n for n, values in assigned.items() if len(values) == 1 and plain_load(values[0], stored)}
    if not candidates:
        return set()
    refused, chains = _fused_reads(k, candidates, i8_matmuls=True)
    for ops, names in chains.values():
        if ops > MAX_FUSED_OPS:
            refused |= set(names)
    return candidates - refused


def i8_view_side(m: MatMul, rhs: bool) -> bool:
    """Whether ``m``'s ``rhs`` (else ``lhs``) operand may be read as a view: ``m`` is an int8
    matmul that does not transpose that side (tile_matmul_i8.hpp). By side, not by node: both sides
    may be the same node (``ts.matmul(q, q, transpose_b=True)``)."""
    return m.lhs.type.dtype.name == "i8" and not (m.transpose_b if rhs else m.transpose_a)


def recomputed(k: Kernel) -> dict[str, tuple[Expr, ...]]:
    """The tiles of ``k`` to emit as fused expressions computed again where they are read, by
    name, each with its parts: the distinct operands of its ops that are computed once first,
    into tiles or scalars (see the module's docstring). Ops and parts are counted by position in
    the expression (a node the front-end shares, an inlined helper's argument, counts where it is
    read), so a build and its IR dump read back give the same answer."""
    assigned = _assigned(k)
    single = {n for n, values in assigned.items() if len(values) == 1}
    scalars = {p.name for p in k.params if p.direction is Direction.SCALAR}
    candidates: dict[str, tuple[tuple[Expr, ...], int]] = {}
    reads = _read_counts(k.body)
    for body, s in _scoped_assignments(k.body):
        if s.target not in single or not fusable(s.value):
            continue
        ops = _tree_ops(s.value)
        if len(ops) > MAX_RECOMPUTED_OPS or any(e.op not in RECOMPUTED_OPS for e in ops):
            continue
        # read only in its own body: the scope of its C++ declaration
        if body is not k.body and _read_counts(body)[s.target] != reads[s.target]:
            continue
        shape = s.value.type.shape
        leaves = [x for e in ops for x in _operands(e) if not _in_tree(x, shape)]
        # a name it reads must hold the same value wherever the expression is computed again
        if any(isinstance(x, Var) and x.name not in single and x.name not in scalars for x in leaves):
            continue
        parts: dict[str, Expr] = {}
        for x in leaves:
            if not isinstance(x, Var | Const):
                parts.setdefault(part_key(x), x)
        candidates[s.target] = (tuple(parts.values()), len(ops))
    if not candidates:
        return {}
    refused, chains = _fused_reads(k, set(candidates))
    for ops_in_chain, names in chains.values():
        if ops_in_chain + sum(candidates[n][1] for n in names if n in candidates) > MAX_FUSED_OPS:
            refused |= {n for n in names if n in candidates}
    refused |= {n for n in candidates if reads[n] > MAX_RECOMPUTED_READS}
    # one read inside another's expression would nest two deferred expressions: kept simple
    for n in candidates:
        if {x.name for x in walk_exprs(assigned[n][0]) if isinstance(x, Var)} & set(candidates):
            refused.add(n)
    return {n: parts for n, (parts, _) in candidates.items() if n not in refused}


def _scoped_assignments(body: tuple[Stmt, ...]) -> Iterator[tuple[tuple[Stmt, ...], Assign]]:
    """Each assignment of ``body``, its loops' bodies included, with the body it stands in."""
    for s in body:
        if isinstance(s, Assign):
            yield body, s
        elif isinstance(s, For):
            yield from _scoped_assignments(s.body)


def _read_counts(body: tuple[Stmt, ...]) -> Counter[str]:
    """How often the expressions of ``body`` (its loops' included) read each name."""
    return Counter(e.name for e in walk_exprs(body) if isinstance(e, Var))


def prefetches(
    k: Kernel, in_place: set[str], again: dict[str, tuple[Expr, ...]]
) -> dict[int, tuple[tuple[Load, tuple[Expr, ...]], ...]]:
    """The statements of ``k`` that ask for their loop's next rows while they compute (see the
    module's docstring), by id: for each, the loads of the loop's views (``in_place``) with their
    offsets at the loop's next pass. ``again``: the recomputed tiles (never a tile of their own)."""
    out: dict[int, tuple[tuple[Load, tuple[Expr, ...]], ...]] = {}
    for loop in (s for s in walk_stmts(k.body) if isinstance(s, For)):
        assigned = {s.target for s in walk_stmts(loop.body) if isinstance(s, Assign)}
        ahead: list[tuple[Load, tuple[Expr, ...]]] = []
        for s in loop.body:
            if not isinstance(s, Assign):
                continue
            if s.target in in_place and isinstance(s.value, Load):
                names = {x.name for o in s.value.offsets for x in walk_exprs(o) if isinstance(x, Var)}
                if loop.var in names and not names & assigned:
                    ahead.append((s.value, tuple(_at_next_pass(o, loop) for o in s.value.offsets)))
            elif ahead and s.target not in in_place and s.target not in again and _costly(s.value):
                # a small tile (a row's statistics) would ask for all its lines at once: the next one
                size = math.prod(s.value.type.shape)
                asked = tuple((load, offs) for load, offs in ahead if math.prod(load.type.shape) <= size)
                if asked:
                    out[id(s)] = asked[:MAX_PREFETCHED_VIEWS]
                    break
    return out


def _at_next_pass(offset: Expr, loop: For) -> Expr:
    """``offset`` with ``loop``'s variable advanced by its step."""

    def advance(e: Expr) -> Expr:
        return BinOp("add", e, loop.step, e.type, e.loc) if isinstance(e, Var) and e.name == loop.var else e

    return map_exprs(offset, advance)


def _costly(e: Expr) -> bool:
    """A fused expression (one op or more) with a ``PREFETCH_OPS`` op in its tree."""
    if not fusable(e):
        return False
    ops = fused_tree(e, min_ops=1).ops
    return any(id(x) in ops and isinstance(x, UnOp) and x.op in PREFETCH_OPS for x in walk_exprs(e))


def part_key(e: Expr) -> str:
    """What identifies a recomputed tile's part: its DSL text and type (equal parts are one)."""
    return f"{expr_str(e)}: {e.type}"


def _in_tree(e: Expr, shape: tuple[int, ...]) -> bool:
    return fusable(e) and e.type.shape == shape


def _tree_ops(root: Expr) -> list[Expr]:
    """The ops of ``root``'s tree of fusable ops of its shape, by position, left operand first;
    cut short once there are more than MAX_RECOMPUTED_OPS (enough to refuse it)."""
    shape = root.type.shape
    ops: list[Expr] = []
    stack = [root]
    while stack and len(ops) <= MAX_RECOMPUTED_OPS:
        e = stack.pop()
        ops.append(e)
        stack += [x for x in reversed(_operands(e)) if _in_tree(x, shape)]
    return ops


def _fused_reads(
    k: Kernel, candidates: set[str], i8_matmuls: bool = False
) -> tuple[set[str], dict[int, tuple[int, list[str]]]]:
    """Which of the tile names ``candidates`` are read somewhere a fused expression (or a view)
    cannot be read (refused), and, per chain of elementwise ops that reads some, its op count and
    the candidates it reads (once per read). With ``i8_matmuls`` (views, not fused expressions),
    an operand of an int8 matmul it does not transpose is a read a view takes."""
    refused: set[str] = set()
    chain_ops: dict[int, int] = {}  # id of a chain's top op -> ops in the chain
    chain_reads: dict[int, list[str]] = {}
    for s in walk_stmts(k.body):
        for root in child_exprs(s):
            # the statement's own consumer: an assignment's and a plain store's value take a
            # fused expression (a store also a view); everything else (bounds, offsets, a probe,
            # a ragged store's value) takes a tile or a scalar
            takes_fused = (isinstance(s, Assign) and root is s.value) or (
                isinstance(s, Store) and root is s.value and not s.valid
            )
            takes_view = isinstance(s, Store) and root is s.value and not s.valid
            stack: list[tuple[Expr, bool, bool, int | None]] = [(root, takes_fused, takes_view, None)]
            while stack:
                e, fused_ok, view_ok, chain = stack.pop()
                if isinstance(e, Var):
                    if e.name in candidates:
                        if not view_ok:
                            refused.add(e.name)
                        elif chain is not None:
                            chain_reads.setdefault(chain, []).append(e.name)
                    continue
                if fusable(e) and fused_ok:
                    top = chain if chain is not None else id(e)
                    chain_ops[top] = chain_ops.get(top, 0) + 1
                    kids = [(x, True, True, top) for x in children(e) if is_expr(x)]
                elif isinstance(e, Reduce) and e.op in FUSED_REDUCTIONS:
                    kids = [(x, True, True, None) for x in children(e) if is_expr(x)]
                elif i8_matmuls and isinstance(e, MatMul):
                    kids = [(e.lhs, False, i8_view_side(e, False), None), (e.rhs, False, i8_view_side(e, True), None)]
                    kids += [(e.acc, False, False, None)] if e.acc is not None else []
                else:
                    kids = [(x, False, False, None) for x in children(e) if is_expr(x)]
                stack.extend(reversed(kids))
    return refused, {top: (chain_ops[top], names) for top, names in chain_reads.items()}

