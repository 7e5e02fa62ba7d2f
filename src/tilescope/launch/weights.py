"""Which ``ts.Weight`` arguments a build's kernels packed, and when to drop what they packed.

An int8 matmul reading a ``ts.Weight`` keeps its packed tiles in the kernel library from run to
run (``tile_weights.hpp``), keyed by address. Before each sim run, ``WeightWatch.before_run``
compares the weight arguments with the last run's: another tensor, another layout, or the same
tensor changed in place since (torch's version counter) drops every packed tile of the build's
libraries (their ``ts_weights_changed``), and the next matmuls pack again.

Invariants:
- The watch holds the last run's weight tensors, so their memory cannot be freed and handed to
  another tensor at the same address while their packed tiles may be read.
- A run writes its Out/InOut tensors in place behind torch's back; ``WeightWatch.written`` bumps their version
  counters afterwards, so a tensor one program writes and another reads as a weight is seen to
  change (and autograd sees the write as it sees any in-place op).
- An inference tensor (made under ``torch.inference_mode``) has no version counter: a change in
  place is not seen. ``CompiledProgram.weights_changed()`` says so by hand; a new tensor is seen.
"""

from __future__ import annotations

import ctypes
import functools
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
    """For one set of arguments of a build (the whole program, or one kernel run alone): the weight
    arguments of its last run, the libraries' ``ts_weights_changed``, and which arguments a run
    writes."""

    def __init__(self, specs: Sequence[ArgSpec], forget: list[Callable[[], None]]):
        self.forget = forget
        self.weights = tuple(i for i, spec in enumerate(specs) if spec.weight) if forget else ()
        self.outputs = tuple(i for i, spec in enumerate(specs) if spec.is_output)
        self.key: tuple | None = None
        self.held: tuple = ()  # the last run's weight tensors, kept alive (see the invariants)

    def before_run(self, args: Sequence[Any]) -> None:
        """Drop the packed tiles when the weight arguments are not the last run's."""
        if not self.weights:
            return
        held = tuple(args[i] for i in self.weights)
        key = tuple(_key(a) for a in held)
        if key != self.key:
            self.changed()
            self.key, self.held = key, held

    def changed(self) -> None:
        """Drop every packed tile of the build's libraries."""
        for fn in self.forget:
            fn()
        self.key = None

    def written(self, args: Sequence[Any]) -> None:
        """Bump the version counter of each Out/InOut tensor a run wrote (see the invariants)."""
        if not self.outputs:
            return
        tensor, bump = _torch_version_bump()
        for i in self.outputs:
            a = args[i]
            if isinstance(a, tensor) and not a.is_inference():
                bump(a)


@functools.cache
def _torch_version_bump() -> tuple[type, Callable[[Any], None]]:
    """torch.Tensor and torch's increment_version, imported once (on a run's path)."""
    import torch
    from torch.autograd.graph import increment_version

    return torch.Tensor, increment_version
