"""Element types of the tile DSL.

Invariants: every DType has one name (the DSL spelling, ``ts.f32``), one ABI code
(``ts_dtype`` in ``abi.h``), one C++ element type in the tile library and one torch dtype.
There is no implicit promotion between float widths; scalars adopt the tile's dtype.
"""

from __future__ import annotations

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
