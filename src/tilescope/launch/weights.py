"""Which ``ts.Weight`` arguments a build's kernels may have packed, and when to drop what they packed.

An int8 matmul reading a ``ts.Weight`` keeps its packed tiles in the kernel library from run to
run (``tile_weights.hpp``), keyed by address. Before each sim run, ``WeightWatch.before_run``
looks at each weight argument: one it has not seen before in its present state (another tensor,
another layout, or a tensor changed in place since: torch's version counter) has the packed tiles
that read its bytes dropped (the libraries' ``ts_weights_changed_in``), and the next matmuls pack
them again. One program called with each layer's weights in turn keeps every layer's tiles.

Invariants:
- A weight is known by its data pointer, shape, strides, dtype, version and the identity of its
  base tensor (the tensor a view was taken of, else itself), which the watch references weakly.
  When a base is freed, the tiles that read the bytes of its weights are dropped, before that
  memory can hold another tensor's; a base's identity cannot name another tensor while it lives.
- A run writes its Out/InOut tensors in place behind torch's back; ``WeightWatch.written`` bumps
  their version counters afterwards (on success and failure alike), so a tensor one program writes
  and another reads as a weight is seen to change (and autograd sees the write as any in-place op).
- What torch does not count is not seen: a write through another tensor object over the same
  memory (``w.data.copy_(...)``, a NumPy array behind ``torch.from_numpy``), or into an inference
  tensor (made under ``torch.inference_mode``; it has no version counter).
  ``CompiledProgram.weights_changed()`` drops every packed tile by hand.
- A weight that shares memory with an Out/InOut argument of the same call is refused: the run
  would write what its matmuls read packed.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from tilescope.build.manifest import ArgSpec
from tilescope.errors import ArgumentError

Ranges = list[tuple[int, int]]


def forget_functions(libraries: Sequence[ctypes.CDLL], symbol: str = "ts_weights_changed") -> list:
    """The ``symbol`` of each library that exports one (a kernel with ts.Weight params):
    ``ts_weights_changed`` (drop every packed tile) or ``ts_weights_changed_in`` (those that read
    the given byte ranges)."""
    found = []
    for lib in libraries:
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.argtypes = [] if symbol == "ts_weights_changed" else [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
            fn.restype = None
            found.append(fn)
    return found


def byte_range(t: Any) -> tuple[int, int]:
    """The bytes [lo, hi) tensor ``t`` spans (strides of either sign)."""
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return (0, 0)
        span = (size - 1) * stride
        if span < 0:
            lo += span
        else:
            hi += span
    base, item = t.data_ptr(), t.element_size()
    return (base + lo * item, base + (hi + 1) * item)


def _base(t: Any) -> Any:
    return t if t._base is None else t._base


def _key(t: Any) -> tuple:
    """What tells a weight argument apart (see the invariants)."""
    version = None if t.is_inference() else t._version
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, version, id(_base(t)))


class WeightWatch:
    """For one set of arguments of a build (the whole program, or one kernel run alone): the weights
    it has seen (see the invariants), the libraries' ``ts_weights_changed_in``, and which arguments a
    run writes."""

    def __init__(self, specs: Sequence[ArgSpec], drop: list[Callable]):
        self.drop = drop
        self.names = [spec.name for spec in specs]
        self.weights = tuple(i for i, spec in enumerate(specs) if spec.weight) if drop else ()
        self.outputs = tuple(i for i, spec in enumerate(specs) if spec.is_output)
        self.seen: dict[tuple, tuple[int, int]] = {}  # a weight's key -> its bytes
        self.bases: dict[int, tuple[weakref.ref, list[tuple]]] = {}  # id(base) -> (ref, its weights' keys)

    def before_run(self, args: Sequence[Any]) -> None:
        """Drop the packed tiles of each weight argument not seen in its present state.

        Raises:
            ArgumentError: a weight shares memory with an Out/InOut argument of the call.
        """
        if not self.weights:
            return
        self._refuse_written(args)
        new = [(k, args[i]) for i in self.weights if (k := _key(args[i])) not in self.seen]
        if not new:
            return
        ranges = [byte_range(a) for _, a in new]
        self._drop(ranges)
        for (k, a), r in zip(new, ranges):
            self.seen[k] = r
            base = _base(a)
            entry = self.bases.get(id(base))
            if entry is None:
                entry = self.bases[id(base)] = (weakref.ref(base, functools.partial(self._freed, id(base))), [])
            entry[1].append(k)

    def forget(self) -> None:
        """Forget every weight seen (every packed tile was dropped)."""
        self.seen.clear()
        self.bases.clear()

    def written(self, args: Sequence[Any]) -> None:
        """Bump the version counter of each Out/InOut tensor a run wrote (see the invariants)."""
        if not self.outputs:
            return
        tensor, bump = _torch_version_bump()
        for i in self.outputs:
            a = args[i]
            if isinstance(a, tensor) and not a.is_inference():
                bump(a)

    def _freed(self, base_id: int, _ref: weakref.ref) -> None:
        """A base tensor was freed: drop the tiles of its weights, and forget them."""
        entry = self.bases.pop(base_id, None)
        if entry is None:
            return
        ranges = [r for k in entry[1] if (r := self.seen.pop(k, None)) is not None]
        if ranges:
            self._drop(ranges)

    def _drop(self, ranges: Ranges) -> None:
        flat = (ctypes.c_uint64 * (2 * len(ranges)))(*(x for r in ranges for x in r))
        for fn in self.drop:
            fn(flat, len(ranges))

    def _refuse_written(self, args: Sequence[Any]) -> None:
        tensor = _torch_version_bump()[0]
        written = [(j, byte_range(args[j])) for j in self.outputs if isinstance(args[j], tensor)]
        for i in self.weights if written else ():
            lo, hi = byte_range(args[i])
            for j, (olo, ohi) in written:
                if olo < hi and lo < ohi:
                    raise ArgumentError(
                        f"argument {self.names[i]!r} (a ts.Weight) shares memory with argument {self.names[j]!r}, "
                        "which the run writes: a weight is read only; pass a copy (.clone()) of one of them"
                    )


@functools.cache
def _torch_version_bump() -> tuple[type, Callable[[Any], None]]:
    """torch.Tensor and torch's increment_version, imported once (on a run's path)."""
    import torch
    from torch.autograd.graph import increment_version

    return torch.Tensor, increment_version
