"""Argument specs of a harness run: ``TensorSpec`` and ``ScalarSpec``, in the order of the
program's parameters, and how inputs are generated from them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.errors import ArgumentError


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

    def make(self) -> torch.Tensor:
        """The tensor the spec describes, contiguous; ArgumentError if ``init_value`` gives another shape."""
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
        if isinstance(v, Callable):
            t = v(shape, dtype=self.dtype)
        elif torch.is_tensor(v):
            t = v.detach().clone().to(self.dtype)
        else:
            t = torch.full(shape, v, dtype=self.dtype)
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

    def make(self) -> int | float | bool:
        """The fixed value."""
        return self.value


Spec = TensorSpec | ScalarSpec


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
