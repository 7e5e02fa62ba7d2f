"""IR nodes shared by kernels and orchestrations.

Invariants:
- Nodes are frozen, slotted dataclasses; ``dataclasses.replace`` makes a changed copy.
  Equality and hashing are structural and ignore source locations.
- Every expression carries its type, computed once by ``ir.type_rules`` when it is built.
- Variables are named and may be reassigned (a loop-carried value is a variable assigned
  before a ``For`` and reassigned in its body); a reassignment keeps the variable's type.
- Kernels contain Assign/Store/For/Evaluate; orchestrations contain Assign/For/If/Evaluate
  with CreateTensor/Slice/TensorRead/Submit/DumpTag. The verifier enforces the split.
- Nodes hold no traversal code: ``ir.traverse`` derives every node's children from these
  field annotations, so a field that holds nodes must name their classes (``Expr``,
  ``tuple[Stmt, ...]``, ``SliceRange``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilescope.errors import SourceLoc
from tilescope.ir.types import Direction, IndexType, ScalarType, TaskType, TensorType, TileType, Type

_LOC = field(default=None, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True, slots=True)
class Const:
    """A literal. ``type`` is IndexType for integers used as indices, else a ScalarType."""

    value: int | float | bool
    type: ScalarType | IndexType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Var:
    """A reference to a named value: a param, a loop variable or an assigned name."""

    name: str
    type: Type
    loc: SourceLoc | None = _LOC


CAST_MODES = ("rint", "round", "floor", "ceil", "trunc")


@dataclass(frozen=True, slots=True)
class BinOp:
    """``lhs <op> rhs``: arithmetic, a comparison (a bool result) or a logical op on bool tiles."""

    op: str  # an op of ir.op_registry: binary_ops(), compare_ops() or logical_ops()
    lhs: Expr
    rhs: Expr
    type: Type
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class UnOp:
    """An elementwise function of a tile, or the negation of a scalar or index."""

    op: str  # an op of ir.op_registry.unary_ops()
    operand: Expr
    type: Type
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Load:
    """Read a tile from a tensor param: ``ts.load(tensor, offsets, sizes, valid=, fill=, pad=,
    dims=, strides=)``.

    ``valid`` (empty: the whole tile) gives one run-time count per tile dim: only the elements
    below them are read, the others take ``fill`` and touch no memory. With ``pad`` every
    element whose index lies outside the tensor reads as ``pad`` and touches no memory.
    ``dims`` names the tensor dim of each tile dim (empty: the last ones; None: a size-1 tile
    dim with no tensor dim); ``strides`` the step between consecutive elements in each tensor
    dim (empty: all 1). ``sizes`` has one count per tensor dim: the tile's dims take theirs,
    every other dim 1."""

    tensor: Var
    offsets: tuple[Expr, ...]
    sizes: tuple[int, ...]
    valid: tuple[Expr, ...]
    fill: Expr | None
    type: TileType
    loc: SourceLoc | None = _LOC
    pad: Expr | None = None
    dims: tuple[int | None, ...] = ()
    strides: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class LoadRows:
    """``ts.load_rows(tensor, rows, cols, valid=, fill=)``: a gather of a 2-D tensor param's rows
    named by the integer tile ``rows`` (``[N]``, ``[N, 1]`` or ``[1, N]``), columns
    ``[col, col + type.shape[1])``; rows at or past ``valid`` (None: all) take ``fill``."""

    tensor: Var
    rows: Expr
    col: Expr
    valid: Expr | None
    fill: Expr | None
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Iota:
    """``ts.iota(shape, dtype, dim)``: each element's index along ``dim`` (0 or 1 of a 2-D tile)."""

    dim: int
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Rand:
    """``ts.rand(shape, seed, offset)``: uniform [0, 1) f32 elements, element i (row-major) a
    function of ``(seed, offset + i)`` only (Philox4x32-10; runtime/philox.py)."""

    seed: Expr
    offset: Expr
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class TileSlice:
    """``t[r0:r1, c0:c1]``: the static sub-tile of ``value`` starting at ``starts`` (one per
    dim of ``value``) with ``type.shape``; an integer index drops its dim (numpy)."""

    value: Expr
    starts: tuple[int, ...]
    sizes: tuple[int, ...]
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Full:
    """``ts.zeros(shape, dtype)`` (value 0) or ``ts.full(shape, value, dtype)``."""

    value: Expr
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Cast:
    """``ts.cast(value, dtype, mode)``: a tile converted to ``type.dtype``; ``mode`` rounds float -> int."""

    value: Expr
    mode: str  # one of CAST_MODES
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Reduce:
    """A row reduction (``[R, C] -> [R, 1]``) or a column reduction (``[R, C] -> [1, C]``) of a 2-D tile."""

    op: str  # an op of ir.op_registry.reduce_ops()
    value: Expr
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Scan:
    """``ts.cumsum(value, dim, reverse, exclusive)`` (``op`` "cumsum") or ``ts.cumprod`` ("cumprod"):
    the running sum (product) along ``dim`` of a number tile, from its end when ``reverse``,
    without the element itself when ``exclusive`` (the first one is then 0, or 1)."""

    op: str  # "cumsum" or "cumprod"
    value: Expr
    dim: int  # 0 or 1 (of a 2-D tile; 0 of a 1-D one), normalized
    reverse: bool
    exclusive: bool
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class MatMul:
    """``ts.matmul(lhs, rhs, acc=None, transpose_a=False, transpose_b=False)``: ``lhs @ rhs``
    (either operand transposed first) + ``acc``, accumulated in f32 (i32 for int8 inputs)."""

    lhs: Expr
    rhs: Expr
    acc: Expr | None
    transpose_a: bool
    transpose_b: bool
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Transpose:
    """``ts.transpose(value)``: a 2-D tile ``[R, C]`` as ``[C, R]``."""

    value: Expr
    type: TileType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Where:
    """``ts.where(cond, lhs, rhs)``: elementwise ``lhs`` where the bool tile ``cond`` holds, else ``rhs``."""

    cond: Expr
    lhs: Expr
    rhs: Expr
    type: TileType
    loc: SourceLoc | None = _LOC


# Orchestration expressions


@dataclass(frozen=True, slots=True)
class CreateTensor:
    """``ts.create_tensor(shape, dtype)``: an intermediate tensor allocated for one run."""

    type: TensorType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class SliceRange:
    """``start:stop`` of one dim; ``squeeze`` marks an integer index (the dim is dropped)."""

    start: Expr
    stop: Expr
    squeeze: bool = False


@dataclass(frozen=True, slots=True)
class Slice:
    """A region of a tensor: ``x[r:r + 64, :]``. ``type.shape`` is the static region shape;
    a dim whose extent is only known at run time is -1 (checked when the task is submitted)."""

    tensor: Var
    ranges: tuple[SliceRange, ...]
    type: TensorType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class TensorRead:
    """``counts[e]``: one element of an integer tensor, read by the orchestration at run time.
    The read waits for the tasks submitted before it that write the element. It is only ever the
    value of an ``Assign`` (the front-end gives a read inside a larger expression a variable of
    its own), so it runs once, in program order."""

    tensor: Var
    indices: tuple[Expr, ...]
    type: ScalarType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Submit:
    """One task: a kernel applied to regions and scalars. Its value is the task handle."""

    kernel: str
    args: tuple[Expr, ...]
    name: str | None
    deps: tuple[Expr, ...]
    dumps: tuple[Expr, ...]
    type: TaskType
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class DumpTag:
    """``ts.dump_tag(tensor)``: tags the tensor for level-1 dumps in every later task that touches it."""

    tensor: Expr
    type: TensorType
    loc: SourceLoc | None = _LOC


Expr = (
    Const
    | Var
    | BinOp
    | UnOp
    | Load
    | LoadRows
    | Iota
    | Rand
    | TileSlice
    | Full
    | Cast
    | Reduce
    | MatMul
    | Transpose
    | Scan
    | Where
    | CreateTensor
    | Slice
    | TensorRead
    | Submit
    | DumpTag
)


# ---------------------------------------------------------------------------------------------
# Statements


@dataclass(frozen=True, slots=True)
class Assign:
    """``target = value``; a reassignment keeps the variable's type."""

    target: str
    value: Expr
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Store:
    """``ts.store(tensor, offsets, value, valid=, dims=, strides=)``: write a tile into an
    Out/InOut tensor param (only the elements below the run-time counts ``valid``, one per tile
    dim, when given), along ``dims`` every ``strides`` elements (as ``Load``'s)."""

    tensor: Var
    offsets: tuple[Expr, ...]
    value: Expr
    valid: tuple[Expr, ...]
    loc: SourceLoc | None = _LOC
    dims: tuple[int | None, ...] = ()
    strides: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Probe:
    """``ts.probe(tile, "name")``: capture the tile's value, with its task and line, when a run has
    probes on (``runtime_cfg`` ``probes``); nothing otherwise."""

    value: Expr
    name: str
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Evaluate:
    """An expression evaluated for its effect (a task submission, a dump tag)."""

    value: Expr
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class For:
    """``for var in ts.range(start, stop, step)``: a real loop (``var < stop``), not unrolled."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class If:
    """A run-time branch on an index condition (orchestration only)."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    loc: SourceLoc | None = _LOC


Stmt = Assign | Store | Probe | Evaluate | For | If


# ---------------------------------------------------------------------------------------------
# Functions


@dataclass(frozen=True, slots=True)
class Param:
    """A function parameter: a tensor with its direction (in, out, inout) or a scalar.
    ``weight``: an In tensor declared ``ts.Weight``, which the caller keeps the same from run to run."""

    name: str
    direction: Direction
    type: TensorType | ScalarType
    loc: SourceLoc | None = _LOC
    weight: bool = False


@dataclass(frozen=True, slots=True)
class Kernel:
    """A ``@ts.kernel`` function: the code one task runs on one core."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    loc: SourceLoc | None = _LOC


@dataclass(frozen=True, slots=True)
class Program:
    """An orchestration function and every kernel it submits (in first-use order)."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    kernels: tuple[Kernel, ...]
    loc: SourceLoc | None = _LOC

    def kernel(self, name: str) -> Kernel:
        """The kernel named ``name``; KeyError if the program has none."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def func_id(self, name: str) -> int:
        """The kernel's index in ``kernels``, its ``func_id`` in the runtime; ValueError if absent."""
        return [k.name for k in self.kernels].index(name)
