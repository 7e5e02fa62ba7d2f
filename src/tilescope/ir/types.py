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

MAX_TENSOR_DIMS = 4
MAX_TILE_DIMS = 2


@dataclass(frozen=True, slots=True)
class TileType:
    shape: tuple[int, ...]
    dtype: DType

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __str__(self) -> str:
        return f"tile{list(self.shape)} {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class ScalarType:
    dtype: DType

    def __str__(self) -> str:
        return f"scalar {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class IndexType:
    def __str__(self) -> str:
        return "index"


@dataclass(frozen=True, slots=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: DType

    def __str__(self) -> str:
        return f"tensor{list(self.shape)} {self.dtype.name}"


@dataclass(frozen=True, slots=True)
class TaskType:
    def __str__(self) -> str:
        return "task"


INDEX = IndexType()
TASK = TaskType()

Type = TileType | ScalarType | IndexType | TensorType | TaskType


class Direction(enum.Enum):
    IN = "in"
    OUT = "out"
    INOUT = "inout"
    SCALAR = "scalar"

    @property
    def reads(self) -> bool:
        return self in (Direction.IN, Direction.INOUT)

    @property
    def writes(self) -> bool:
        return self in (Direction.OUT, Direction.INOUT)

    @property
    def annotation(self) -> str:
        return {"in": "ts.Tensor", "out": "ts.Out", "inout": "ts.InOut", "scalar": "ts.Scalar"}[self.value]
