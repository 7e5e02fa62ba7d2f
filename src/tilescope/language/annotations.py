"""Parameter annotations: ``ts.Tensor[[64, 512], ts.f32]``, ``ts.Out[...]``, ``ts.InOut[...]``,
``ts.Weight[...]``, ``ts.Scalar[ts.f32]``. Subscripting returns a ParamSpec the front-end reads;
the classes are never instantiated.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilescope._tracebacks import api_boundary
from tilescope.errors import AnnotationError
from tilescope.ir.dtypes import DType, from_torch
from tilescope.ir.printer import dtype_str
from tilescope.ir.types import MAX_TENSOR_DIMS, Direction


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """A parameter annotation read: its direction, its shape (None for a scalar) and dtype;
    ``weight`` for ``ts.Weight``."""

    direction: Direction
    shape: tuple[int, ...] | None  # None for scalars
    dtype: DType
    weight: bool = False


def torch_dtype_hint(dtype) -> str:
    """``; write ts.f32`` for a torch dtype that has a tilescope one, else ``''``."""
    if type(dtype).__module__ == "torch":
        try:
            return f"; write {dtype_str(from_torch(dtype))}"
        except ValueError:
            return ""
    return ""


def _tensor_spec(direction: Direction, item, weight: bool = False) -> ParamSpec:
    what = "ts.Weight" if weight else direction.annotation
    if not (isinstance(item, tuple) and len(item) == 2):
        raise AnnotationError(f"{what}[...] takes a shape and a dtype, e.g. {what}[[64, 128], ts.f32]")
    shape, dtype = item
    if not isinstance(dtype, DType):
        raise AnnotationError(
            f"{what}[shape, dtype]: dtype must be a tilescope dtype such as ts.f32, got {dtype!r}"
            + torch_dtype_hint(dtype)
        )
    if (
        not isinstance(shape, list | tuple)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)
    ):
        raise AnnotationError(f"{what}[shape, dtype]: shape must be a list of positive ints ([] for a 0-dim tensor), got {shape!r}")
    if len(shape) > MAX_TENSOR_DIMS:
        raise AnnotationError(f"{what}: at most {MAX_TENSOR_DIMS} dims are supported, got {len(shape)}")
    return ParamSpec(direction, tuple(int(s) for s in shape), dtype, weight)


class Tensor:
    """An input tensor parameter (read only): ``ts.Tensor[[rows, cols], ts.f32]``."""

    @api_boundary
    def __class_getitem__(cls, item) -> ParamSpec:
        return _tensor_spec(Direction.IN, item)


class Out:
    """An output tensor parameter (written, never read): ``ts.Out[[rows, cols], ts.f32]``."""

    @api_boundary
    def __class_getitem__(cls, item) -> ParamSpec:
        return _tensor_spec(Direction.OUT, item)


class InOut:
    """A read-write tensor parameter: ``ts.InOut[[rows, cols], ts.f32]``."""

    @api_boundary
    def __class_getitem__(cls, item) -> ParamSpec:
        return _tensor_spec(Direction.INOUT, item)


class Weight:
    """An input tensor the caller keeps the same from run to run, a layer's weights:
    ``ts.Weight[[rows, cols], ts.i8]``. Read only, as ``ts.Tensor``; an int8 matmul's b operand
    loaded from it is packed once and kept in the kernel library until the weight changes
    (another tensor, or this one changed in place), instead of on every call. A kernel's
    ``ts.Weight`` parameter must be given a ``ts.Weight`` parameter of the orchestration."""

    @api_boundary
    def __class_getitem__(cls, item) -> ParamSpec:
        return _tensor_spec(Direction.IN, item, weight=True)


class Scalar:
    """A scalar parameter: ``ts.Scalar[ts.f32]``."""

    @api_boundary
    def __class_getitem__(cls, item) -> ParamSpec:
        if not isinstance(item, DType):
            raise AnnotationError(
                f"ts.Scalar[dtype]: dtype must be a tilescope dtype such as ts.f32, got {item!r}"
                + torch_dtype_hint(item)
            )
        return ParamSpec(Direction.SCALAR, None, item)
