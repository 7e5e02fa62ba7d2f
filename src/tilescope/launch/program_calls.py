"""Recording the program calls a piece of host code makes: each build it ran and the values of
its arguments before the run.

``tilescope problems`` runs a solution's ``ModelNew.forward`` inside ``recording()``: when the
model's output is wrong, the call that wrote it is known, with the inputs it was given, so its
data can be saved for ``tilescope triage``.

Invariants:
- Outside a ``recording()`` block nothing is recorded and nothing is copied: a run pays one
  context-variable lookup.
- A call is noted when its arguments have been checked and before the program runs (on any
  platform), so ``before`` holds what the program read: every tensor argument cloned, every scalar
  as passed. ``args`` are the objects passed, so after the run its Out and InOut tensors hold
  what the program wrote (until the caller writes them again).
- Recording is per thread (a context variable): a block records only the calls made in it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tilescope.build.manifest import Build

_calls: contextvars.ContextVar[list[ProgramCall] | None] = contextvars.ContextVar(
    "tilescope_program_calls", default=None
)


@dataclass(frozen=True, eq=False)
class ProgramCall:
    """One run of a build: the build, the arguments as passed, and their values before the run."""

    build: Build
    args: tuple[Any, ...]
    before: dict[str, Any]  # argument name -> a clone of the tensor (or the scalar) before the run


@contextlib.contextmanager
def recording() -> Iterator[list[ProgramCall]]:
    """Record every program run started in the block (this thread only), in order, into the list
    it yields."""
    calls: list[ProgramCall] = []
    token = _calls.set(calls)
    try:
        yield calls
    finally:
        _calls.reset(token)


def note(build: Build, args: tuple[Any, ...]) -> None:
    """Record a run of ``build`` on ``args`` about to start, when a ``recording()`` block is open."""
    calls = _calls.get()
    if calls is None:
        return
    import torch

    before = {
        spec.name: (a.detach().clone() if isinstance(a, torch.Tensor) else a)
        for spec, a in zip(build.args, args)
    }
    calls.append(ProgramCall(build, tuple(args), before))


__all__ = ["ProgramCall", "note", "recording"]
