"""A run never changes a tensor passed as an input: one that does names the input and its elements.

A program's ``ts.Tensor`` parameters are read only; a kernel that stores through a view of one
(a hand-edited kernel, a wrong destination) changes the caller's tensor, and nothing the outputs
show says so. ``KeptInputs`` copies the input tensors before a run and compares them after it, bit
for bit (a NaN that stays a NaN is unchanged).

Invariants:
- Only ``Direction.IN`` tensors are kept (InOut and Out are the run's to write; scalars are values),
  and not one sharing its storage with an Out or InOut argument (the caller passed one tensor as
  both: the run writes it).
- The copies are made while their total is at most ``KEPT_BYTES`` (the copy and the comparison are
  two passes over memory the run reads anyway); beyond it the check is left out, which
  ``tilescope triage`` does not do: it checks every run it makes on the saved data.
- ``inputs_unchecked()`` turns the check off in its block (the runs of an analysis that watches
  what a run stores, as triage's later steps and localize do: they name the store themselves).
- A changed input is a ``RuntimeFailure`` naming the input, how many elements changed, the first
  one (its index, value before and after) and what to do.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch

from tilescope.debug.failures import Failure
from tilescope.errors import RuntimeFailure
from tilescope.ir.types import Direction

KEPT_BYTES = 256 << 20
SMALL_BYTES = 64 << 10  # inputs up to this size are kept as bytes (``_copy``; past it, malloc maps fresh pages)
_CHECKED: ContextVar[bool] = ContextVar("tilescope_inputs_checked", default=True)
# the integer dtype of each element size: inputs are compared as their bits
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else None
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value) if value.dtype.kind in "biuf" else None
    return None


def _copy(t: torch.Tensor) -> bytes | torch.Tensor:
    """What ``t`` holds now: its bytes when it is small and contiguous (a copy and a comparison
    that cost a memcpy each, where a clone and a tensor comparison cost microseconds of torch
    dispatch), else a clone."""
    nbytes = t.numel() * t.element_size()
    if nbytes <= SMALL_BYTES and t.is_contiguous():
        return ctypes.string_at(t.data_ptr(), nbytes)
    return t.clone()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()]) if t.dtype != torch.bool else t.view(torch.uint8)


@contextlib.contextmanager
def inputs_unchecked() -> Iterator[None]:
    """Runs in this block do not check their inputs (an analysis that names the store itself)."""
    token = _CHECKED.set(False)
    try:
        yield
    finally:
        _CHECKED.reset(token)


class KeptInputs:
    """Copies of a run's input tensors, to say after it whether the run changed one."""

    def __init__(self, specs: list[Any], args: tuple | list, limit: int = KEPT_BYTES):
        self.kept: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        if not _CHECKED.get():
            return
        tensors = [(s, _tensor(a)) for s, a in zip(specs, args)]
        written = {t.untyped_storage().data_ptr() for s, t in tensors if t is not None and s.direction.writes}
        inputs = [(s.name, t) for s, t in tensors if s.direction is Direction.IN and t is not None and t.numel() > 0
                  and t.untyped_storage().data_ptr() not in written]  # fmt: skip
        if sum(t.numel() * t.element_size() for _, t in inputs) <= limit:
            self.kept = [(name, t, _copy(t)) for name, t in inputs]

    def check(self, program: str, work_dir: Any) -> None:
        """Raise RuntimeFailure when the run changed an input tensor."""
        for name, now, copy in self.kept:
            if isinstance(copy, bytes):
                if ctypes.string_at(now.data_ptr(), len(copy)) == copy:
                    continue
                before = torch.frombuffer(bytearray(copy), dtype=now.dtype).view(now.shape)
            else:
                before = copy
            changed = _bits(now) != _bits(before)
            if not bool(changed.any()):
                continue
            count, first = int(changed.sum()), [int(i) for i in changed.nonzero()[0]]
            at = tuple(first)
            message = (
                f"{program}: the run changed input {name!r}, which is a ts.Tensor (read only): {count} of "
                f"{now.numel()} element(s) differ, the first at {list(first)} ({before[at].item()} -> "
                f"{now[at].item()}). A kernel stores through a view of it: `tilescope triage {work_dir}` names "
                "the task and the store (declare it ts.InOut if the program means to write it)"
            )
            err = RuntimeFailure(message)
            err.failure = Failure("input_written", message, tensor=name)  # type: ignore[attr-defined]
            raise err
