"""A run never changes a tensor passed as an input: one that does names the input and its elements.

A program's ``ts.Tensor`` parameters are read only; a kernel that stores through a view of one
(a hand-edited kernel, a wrong destination) changes the caller's tensor, and nothing the outputs
show says so. ``KeptInputs`` copies the input tensors before a run and compares them after it, bit
for bit (a NaN that stays a NaN is unchanged).

Invariants:
- Only ``Direction.IN`` tensors are kept (InOut and Out are the run's to write; scalars are values),
  and not one sharing its storage with an Out or InOut argument (the caller passed one tensor as
  both: the run writes it).
- The copies are made while their total is at most ``KEPT_BYTES``; beyond it the check is left
  out, which ``tilescope triage`` does not do: it checks every run it makes on the saved data.
- A contiguous input is copied with one memcpy into this thread's scratch buffer and compared
  with one memcmp: no torch op, and no fresh pages once the buffer has grown to the run's inputs
  (it is kept for the thread's next run while at most ``SCRATCH_KEPT_BYTES``). That is still a copy and a
  comparison of every input byte: on a bandwidth-bound program the check costs about as much as
  the run (docs/performance.md). A strided input is cloned and compared with torch.
- A run of a checked build whose libraries are all built from the C++ codegen wrote
  (``Binaries.stores_confined``) keeps only the inputs whose bytes overlap a written tensor's:
  the verifier refuses a store into an In parameter and an In tensor given to an out parameter,
  the orchestration checks every slice and the kernels every store, so a store cannot reach any
  other input. An unchecked build (``--no-check-bounds``), a hand-edited source, or a binary not
  the one recorded keeps every input.
- ``inputs_unchecked()`` turns the check off in its block (the runs of an analysis that watches
  what a run stores, as triage's later steps and localize do: they name the store themselves).
- A changed input is a ``RuntimeFailure`` naming the input, how many elements changed, the first
  one (its index, value before and after) and what to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch

from tilescope.debug.failures import Failure
from tilescope.errors import RuntimeFailure
from tilescope.ir.types import Direction

KEPT_BYTES = 256 << 20
SCRATCH_KEPT_BYTES = 64 << 20  # a thread's scratch buffer up to this size is kept for its next run
_CHECKED: ContextVar[bool] = ContextVar("tilescope_inputs_checked", default=True)
# the integer dtype of each element size: inputs are compared as their bits
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_libc = ctypes.CDLL(None)
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_scratch = threading.local()


def _tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else None
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value) if value.dtype.kind in "biuf" else None
    return None


def _take_scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch bytes, at least ``nbytes`` of them, taken until the KeptInputs holding
    them is gone: one made meanwhile gets a buffer of its own."""
    buf = _scratch.__dict__.pop("buf", None)
    return buf if buf is not None and buf.nbytes >= nbytes else np.empty(nbytes, dtype=np.uint8)


def _give_back(buf: np.ndarray) -> None:
    if buf.nbytes <= SCRATCH_KEPT_BYTES:
        _scratch.buf = buf


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The first byte and one past the last byte ``t`` can reach (its strides are not negative)."""
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


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


def kept_indices(specs: list[Any], args: tuple | list, limit: int = KEPT_BYTES, *, confined: bool = False) -> tuple[int, ...]:
    """The positions in ``args`` of the inputs a run keeps (the module's invariants): none when
    their total passes ``limit``.

    ``confined``: the run's stores cannot leave the tensors they were given (a checked build of
    generated C++), so only an input whose bytes overlap a written tensor's is kept."""
    tensors = [(i, s, _tensor(a)) for i, (s, a) in enumerate(zip(specs, args))]
    writes = [t for _, s, t in tensors if t is not None and s.direction.writes]
    written = {t.untyped_storage().data_ptr() for t in writes}
    inputs = [(i, t) for i, s, t in tensors if s.direction is Direction.IN and t is not None and t.numel() > 0
              and t.untyped_storage().data_ptr() not in written]  # fmt: skip
    if confined:
        spans = [_span(t) for t in writes if t.numel() > 0]
        inputs = [(i, t) for i, t in inputs if any(_overlap(_span(t), w) for w in spans)]
    if sum(_nbytes(t) for _, t in inputs) > limit:
        return ()
    return tuple(i for i, _ in inputs)


class KeptInputs:
    """Copies of a run's input tensors, to say after it whether the run changed one."""

    def __init__(
        self,
        specs: list[Any],
        args: tuple | list,
        limit: int = KEPT_BYTES,
        *,
        confined: bool = False,
        indices: tuple[int, ...] | None = None,
    ):
        """Keep the inputs ``kept_indices(specs, args, limit, confined=confined)`` names, or those at
        ``indices`` when given (the selection made already for the same arguments)."""
        # (name, tensor, offset of its copy in self.buf) or (name, tensor, its clone) when strided
        self.kept: list[tuple[str, torch.Tensor, int | torch.Tensor]] = []
        self.buf: np.ndarray | None = None
        if not _CHECKED.get():
            return
        if indices is None:
            indices = kept_indices(specs, args, limit, confined=confined)
        if not indices:
            return
        inputs = [(specs[i].name, _tensor(args[i])) for i in indices]
        flat = sum(_nbytes(t) for _, t in inputs if t.is_contiguous())
        if flat:
            self.buf = _take_scratch(flat)
        at = 0
        for name, t in inputs:
            if not t.is_contiguous():
                self.kept.append((name, t, t.clone()))
                continue
            ctypes.memmove(self.buf.ctypes.data + at, t.data_ptr(), _nbytes(t))
            self.kept.append((name, t, at))
            at += _nbytes(t)

    def __del__(self) -> None:
        if self.buf is not None:  # the copies are no longer needed: the next run on this thread reuses the bytes
            _give_back(self.buf)

    def _before(self, now: torch.Tensor, copy: int | torch.Tensor) -> torch.Tensor | None:
        """The input as it was when it changed since, else None."""
        if not isinstance(copy, int):
            return copy if bool((_bits(now) != _bits(copy)).any()) else None
        n = _nbytes(now)
        if _libc.memcmp(now.data_ptr(), self.buf.ctypes.data + copy, n) == 0:
            return None
        raw = torch.from_numpy(self.buf[copy : copy + n].copy())
        return raw.view(now.dtype).view(now.shape)

    def check(self, program: str, work_dir: Any) -> None:
        """Raise RuntimeFailure when the run changed an input tensor."""
        for name, now, copy in self.kept:
            before = self._before(now, copy)
            if before is None:
                continue
            differ = _bits(now) != _bits(before)
            count, first = int(differ.sum()), [int(i) for i in differ.nonzero()[0]]
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
