"""Argument specs of a harness run: ``TensorSpec`` and ``ScalarSpec``, in the order of the
program's parameters, and how inputs are generated from them.

Invariants: a spec is checked when it is made (a name, 0 to 8 positive int dims, a dtype tilescope
has, a number for a scalar), so a bad one is an ArgumentError at the user's line before
anything runs; a tilescope dtype (``ts.f32``) is accepted and stored as its torch dtype. An
``init_value`` function that raises is a UserCodeError naming the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.user_code import call_user
from tilescope.build.manifest import ArgSpec
from tilescope.errors import ArgumentError, ConfigError, HarnessError
from tilescope.ir import dtypes as dt


def _torch_dtype(kind: str, name: str, dtype: Any) -> torch.dtype:
    """``dtype`` as a torch dtype tilescope supports (a ``ts.f32`` is converted); ArgumentError otherwise."""
    if isinstance(dtype, dt.DType):
        return dtype.torch
    supported = ", ".join(str(d.torch) for d in dt.ALL_DTYPES)
    if isinstance(dtype, torch.dtype):
        try:
            dt.from_torch(dtype)
        except ValueError:
            raise ArgumentError(
                f"{kind} {name!r}: dtype {dtype} has no tilescope equivalent; supported: {supported}"
            ) from None
        return dtype
    hint = (
        f"; did you mean torch.{dtype}?"
        if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype)
        else ""
    )
    raise ArgumentError(
        f"{kind} {name!r}: dtype must be a torch dtype (such as torch.float32) or a tilescope dtype "
        f"(ts.f32), got {dtype!r} ({type(dtype).__name__}){hint}"
    )


def _check_name(kind: str, name: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"{kind} name must be the program parameter's name (a str), got {name!r}")


@dataclass
class TensorSpec:
    """A tensor argument. ``init_value`` is a number, a tensor, or a callable called as
    ``fn(shape, dtype=dtype)`` (so ``torch.randn`` works). An output with an ``init_value`` is
    an inout; an output without one starts as zeros; an input without one is ``torch.randn``
    (floats) or ``torch.randint(-8, 8)`` (integers)."""

    name: str
    shape: list[int] | tuple[int, ...]
    dtype: torch.dtype
    init_value: Any = None
    is_output: bool = False

    def __post_init__(self) -> None:
        _check_name("TensorSpec", self.name)
        shape = self.shape
        if (
            not isinstance(shape, list | tuple | torch.Size)
            or len(shape) > 8
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        ):
            raise ArgumentError(
                f"TensorSpec {self.name!r}: shape must be a list of 0 to 8 positive ints (the program "
                f"parameter's shape; [] for a 0-dim tensor), got {shape!r}"
            )
        self.dtype = _torch_dtype("TensorSpec", self.name, self.dtype)
        v = self.init_value
        if not (v is None or callable(v) or torch.is_tensor(v) or isinstance(v, int | float | bool)):
            raise ArgumentError(
                f"TensorSpec {self.name!r}: init_value must be a number, a tensor or a function called as "
                f"fn(shape, dtype=dtype), got {v!r} ({type(v).__name__})"
            )

    def make(self) -> torch.Tensor:
        """The tensor the spec describes, contiguous; ArgumentError if ``init_value`` gives another shape
        or a number the dtype cannot hold, UserCodeError if an ``init_value`` function raises."""
        shape = tuple(self.shape)
        v = self.init_value
        if v is None:
            if self.is_output:
                return torch.zeros(shape, dtype=self.dtype)
            if self.dtype.is_floating_point:
                return torch.randn(shape, dtype=self.dtype)
            if self.dtype == torch.bool:
                return torch.rand(shape) < 0.5
            return torch.randint(-8, 8, shape).to(self.dtype)
        if callable(v):
            t = call_user(
                f"TensorSpec {self.name!r}: init_value",
                v,
                shape,
                dtype=self.dtype,
                context=f" (called with shape {list(shape)}, dtype={self.dtype})",
            )
        elif torch.is_tensor(v):
            t = v.detach().clone().to(self.dtype)
        else:
            try:
                t = torch.full(shape, v, dtype=self.dtype)
            except RuntimeError as e:
                raise ArgumentError(
                    f"TensorSpec {self.name!r}: init_value {v!r} does not fit {self.dtype}: {e}"
                ) from None
        if not torch.is_tensor(t) or tuple(t.shape) != shape:
            got = tuple(t.shape) if torch.is_tensor(t) else type(t).__name__
            raise ArgumentError(
                f"TensorSpec {self.name!r}: init_value produced {got}, expected shape {list(shape)}"
            )
        return t.to(self.dtype).contiguous()


@dataclass
class ScalarSpec:
    """A scalar argument with a fixed value."""

    name: str
    dtype: torch.dtype
    value: int | float | bool

    def __post_init__(self) -> None:
        _check_name("ScalarSpec", self.name)
        self.dtype = _torch_dtype("ScalarSpec", self.name, self.dtype)
        if not isinstance(self.value, int | float | bool):
            raise ArgumentError(
                f"ScalarSpec {self.name!r}: value must be a Python number, got {self.value!r} "
                f"({type(self.value).__name__})"
            )

    def make(self) -> int | float | bool:
        """The fixed value."""
        return self.value


Spec = TensorSpec | ScalarSpec


def check_specs(specs: Any) -> None:
    """HarnessError unless ``specs`` is a list (or tuple) of TensorSpec / ScalarSpec."""
    if not isinstance(specs, list | tuple):
        raise HarnessError(
            f"specs must be a list of TensorSpec / ScalarSpec in the program's parameter order, got "
            f"{type(specs).__name__}"
        )
    for i, s in enumerate(specs):
        if not isinstance(s, TensorSpec | ScalarSpec):
            raise HarnessError(
                f"specs[{i}] is {s!r} ({type(s).__name__}); expected TensorSpec(name, shape, dtype, ...) "
                "or ScalarSpec(name, dtype, value)"
            )


def check_specs_match(specs: list[Spec], program: str, params: list[ArgSpec]) -> None:
    """ConfigError unless ``specs`` name the program's ``params`` in order and a TensorSpec's
    ``is_output`` says what its parameter's direction does (an Out/InOut parameter is compared
    with the golden; an In one is never written)."""
    names, expected = [s.name for s in specs], [p.name for p in params]
    if names != expected:
        raise ConfigError(
            f"specs must follow the program's parameters in order: expected {expected}, got {names}"
        )
    problems = []
    for s, p in zip(specs, params):
        if not isinstance(s, TensorSpec) or p.shape is None or s.is_output == p.is_output:
            continue
        if p.is_output:
            problems.append(
                f"TensorSpec {s.name!r} has is_output=False, but {s.name!r} is an {p.direction.value} parameter "
                f"of {program}, which the run writes: set is_output=True so it is compared with the golden"
            )
        else:
            problems.append(
                f"TensorSpec {s.name!r} has is_output=True, but {s.name!r} is an in parameter of {program} "
                "(read only, never written or compared): drop is_output, or declare the parameter "
                "ts.Out[...] / ts.InOut[...]"
            )
    if problems:
        raise ConfigError("; ".join(problems))


SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed takes


def seed_problem(seed: Any) -> str | None:
    """Why ``seed`` cannot seed the generated inputs; None when it can."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        return f"seed {seed!r}: expected a whole number from {SEED_RANGE[0]} to {SEED_RANGE[1]}"
    return None


def generate(specs: list[Spec], seed: int) -> dict[str, Any]:
    """Inputs for every spec, reproducibly from ``seed`` (see ``seed_problem``)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return {s.name: s.make() for s in specs}
    finally:
        torch.random.set_rng_state(gen_state)


def outputs(specs: list[Spec]) -> list[TensorSpec]:
    """The specs of output tensors (``is_output``), in order."""
    return [s for s in specs if isinstance(s, TensorSpec) and s.is_output]
