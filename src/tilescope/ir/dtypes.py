"""Element types of the tile DSL.

Invariants: every DType has one name (the DSL spelling, ``ts.f32``), one ABI code
(``ts_dtype`` in ``abi.h``), one C++ element type in the tile library and one torch dtype.
There is no implicit promotion between float widths; scalars adopt the tile's dtype.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DType:
    """An element type: its DSL name, ABI code, size, C++ element type and kind."""

    name: str
    code: int  # ts_dtype in abi.h
    itemsize: int
    cpp: str  # element type in the tile library
    kind: str  # "float" | "int" | "bool"

    def __repr__(self) -> str:
        return f"ts.{self.name}"

    @property
    def is_float(self) -> bool:
        """Whether this is a floating-point dtype."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """Whether this is an integer dtype (signed or unsigned; not bool)."""
        return self.kind == "int"

    @property
    def torch(self):  # -> torch.dtype
        """The matching ``torch.dtype`` (imports torch)."""
        import torch

        return getattr(torch, _TORCH_NAMES[self.name])


f32 = DType("f32", 0, 4, "float", "float")
f16 = DType("f16", 1, 2, "ts::f16", "float")
bf16 = DType("bf16", 2, 2, "ts::bf16", "float")
i32 = DType("i32", 3, 4, "int32_t", "int")
i8 = DType("i8", 4, 1, "int8_t", "int")
u8 = DType("u8", 5, 1, "uint8_t", "int")
bool_ = DType("bool", 6, 1, "bool", "bool")
f64 = DType("f64", 7, 8, "double", "float")
i64 = DType("i64", 8, 8, "int64_t", "int")

ALL_DTYPES: tuple[DType, ...] = (f32, f16, bf16, i32, i8, u8, bool_, f64, i64)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
BY_CODE: dict[int, DType] = {d.code: d for d in ALL_DTYPES}

_TORCH_NAMES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i32": "int32",
    "i8": "int8",
    "u8": "uint8",
    "bool": "bool",
    "f64": "float64",
    "i64": "int64",
}


def from_torch(dtype) -> DType:
    """The DType for a torch dtype; raises ValueError naming the supported ones."""
    for d in ALL_DTYPES:
        if d.torch == dtype:
            return d
    supported = ", ".join(str(d.torch) for d in ALL_DTYPES)
    raise ValueError(f"torch dtype {dtype} has no tilescope equivalent; supported: {supported}")


def by_name(name: str) -> DType:
    """The DType spelled ``name`` (``f32``, ``bool`` ...); ValueError listing the known names."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(BY_NAME)}") from None


# the largest finite value of each float dtype: a literal beyond it would become inf
_FLOAT_MAX = {
    "f32": 3.4028234663852886e38,
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f64": sys.float_info.max,
}


def value_range(dtype: DType) -> tuple[int | float, int | float]:
    """The inclusive range of the finite values ``dtype`` holds: ``[lo, hi]`` of an integer
    dtype, ``[-max, max]`` of a float dtype (beyond it a value becomes inf), ``[0, 1]`` for bool."""
    if dtype.is_float:
        return -_FLOAT_MAX[dtype.name], _FLOAT_MAX[dtype.name]
    if dtype.kind == "bool":
        return 0, 1
    bits = dtype.itemsize * 8
    return (0, 2**bits - 1) if dtype.name.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


# the next wider dtype of the same kind: what to use when a value does not fit
_WIDER = {"i8": "i32", "u8": "i32", "i32": "i64", "f16": "f32", "bf16": "f32", "f32": "f64"}


def wider(dtype: DType) -> DType | None:
    """The next wider dtype of ``dtype``'s kind (``i32`` -> ``i64``, ``f16`` -> ``f32``), or None."""
    name = _WIDER.get(dtype.name)
    return BY_NAME[name] if name else None


def number_str(v: int | float) -> str:
    """A number as messages show it: ``-3.4028235e+38``, ``65504``, a huge integer shortened."""
    if isinstance(v, float):
        return f"{v:.8g}"
    text = str(v)
    return text if len(text) <= 40 else f"{text[:12]}... ({len(text.lstrip('-'))} digits)"


def range_str(dtype: DType) -> str:
    """``[lo, hi]`` of ``dtype`` as messages show it."""
    lo, hi = value_range(dtype)
    return f"[{number_str(lo)}, {number_str(hi)}]"
