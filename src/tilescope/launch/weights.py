"""Which ``ts.Weight`` arguments a build's kernels packed, and when to drop what they packed.

An int8 matmul reading a ``ts.Weight`` keeps its packed tiles in the kernel library from run to
run (``tile_weights.hpp``), keyed by address. Before each sim run, ``WeightWatch.before_run``
compares the weight arguments with the last run's: another tensor, another layout, or the same
tensor changed in place since (torch's version counter) drops every packed tile of the build's
libraries (their ``ts_weights_changed``), and the next matmuls pack again.

Invariants:
- The watch holds the last run's weight tensors, so their memory cannot be freed and handed to
  another tensor at the same address while their packed tiles may be read.
- A run writes its Out/InOut tensors in place behind torch's back; ``written`` bumps their version
  counters afterwards, so a tensor one program writes and another reads as a weight is seen to
  change (and autograd sees the write as it sees any in-place op).
- An inference tensor (made under ``torch.inference_mode``) has no version counter: a change in
  place is not seen. ``CompiledProgram.weights_changed()`` says so by hand; a new tensor is seen.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from tilescope.build.manifest import ArgSpec


def forget_functions(libraries: Sequence[ctypes.CDLL]) -> list[Callable[[], None]]:
    """The ``ts_weights_changed`` of each library that exports one (a kernel with ts.Weight params)."""
    found = []
    for lib in libraries:
        fn = getattr(lib, "ts_weights_changed", None)
        if fn is not None:
            fn.argtypes, fn.restype = [], None
            found.append(fn)
    return found


def _key(t: Any) -> tuple:
    """What tells a weight argument apart from the last run's: where and how it is laid out, and
    its version (None for an inference tensor, which has none)."""
    import torch

    if not isinstance(t, torch.Tensor):
        return (id(t),)
    version = None if t.is_inference() else t._version
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, version)


class WeightWatch:
    """The weight arguments of a build's last run (one watch per set of arguments: the whole
    program, or one kernel run alone) and the libraries' ``ts_weights_changed``."""

    def __init__(self, forget: list[Callable[[], None]]):
        self.forget = forget
        self.key: tuple | None = None
        self.held: tuple = ()  # the last run's weight tensors, kept alive (see the invariants)

    def before_run(self, specs: Sequence[ArgSpec], args: Sequence[Any]) -> None:
        """Drop the packed tiles when the weight arguments are not the last run's."""
        if not self.forget:
            return
        held = tuple(a for spec, a in zip(specs, args) if spec.weight)
        key = tuple(_key(a) for a in held)
        if key != self.key:
            self.changed()
            self.key, self.held = key, held

    def changed(self) -> None:
        """Drop every packed tile of the build's libraries."""
        for fn in self.forget:
            fn()
        self.key = None


def written(specs: Sequence[ArgSpec], args: Sequence[Any]) -> None:
    """Bump the version counter of each Out/InOut tensor a run wrote (see the invariants)."""
    import torch
    from torch.autograd.graph import increment_version

    for spec, a in zip(specs, args):
        if spec.is_output and isinstance(a, torch.Tensor) and not a.is_inference():
            increment_version(a)
