"""Types of IR values.

Invariants: types are immutable and compared structurally. Tiles are at most 2-D (a 1-D tile
of N elements lowers to a 1 x N tile in C++ but keeps its 1-D shape here, which broadcasts
identically). Tensors are 1-D to 4-D. Index values are int64 offsets, loop variables and
compile-time integers.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from tilescope.ir.dtypes import DType

MAX_TENSOR_DIMS = 8  # TS_MAX_DIMS (abi.h)
MAX_TILE_DIMS = 2


@dataclass(frozen=True, slots=True)
class TileType:
    """A tile in a core's local memory: at most 2-D, of one dtype."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def nbytes(self) -> int:
        """Bytes the tile occupies in local memory."""
        return math.prod(self.shape) * self.dtype.itemsize

    def __str__(self) -> str:
        return f"tile{list(self.shape)} {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class ScalarType:
    """A scalar of one dtype (a scalar param, or a value computed from one)."""

    dtype: DType

    def __str__(self) -> str:
        return f"scalar {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class IndexType:
    """An int64 index: an offset, a loop variable or a compile-time integer."""

    def __str__(self) -> str:
        return "index"


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor in global memory, 1-D to 4-D; a slice's dim known only at run time is -1."""

    shape: tuple[int, ...]
    dtype: DType

    def __str__(self) -> str:
        return f"tensor[{shape_str(self.shape)}] {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class TaskType:
    """The handle of a submitted task (what ``Submit`` evaluates to)."""

    def __str__(self) -> str:
        return "task"


def shape_str(shape: tuple[int, ...]) -> str:
    """A shape as messages show it, ``32, ?`` (a dim known only at run time is ``?``)."""
    return ", ".join("?" if d == -1 else str(d) for d in shape)


INDEX = IndexType()
TASK = TaskType()

Type = TileType | ScalarType | IndexType | TensorType | TaskType


class Direction(enum.Enum):
    """How a kernel parameter is passed: read, written, both, or a scalar by value."""

    IN = "in"
    OUT = "out"
    INOUT = "inout"
    SCALAR = "scalar"

    @property
    def reads(self) -> bool:
        """Whether a task reads the parameter (IN, INOUT)."""
        return self in (Direction.IN, Direction.INOUT)

    @property
    def writes(self) -> bool:
        """Whether a task writes the parameter (OUT, INOUT)."""
        return self in (Direction.OUT, Direction.INOUT)

    @property
    def annotation(self) -> str:
        """The DSL annotation that declares the direction (``ts.Out`` ...)."""
        return {"in": "ts.Tensor", "out": "ts.Out", "inout": "ts.InOut", "scalar": "ts.Scalar"}[self.value]
