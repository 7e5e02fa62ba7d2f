"""What a run hands the core for one set of arguments, made once per set: a program run in a
loop on the same tensors pays for its descriptors and its input-check selection once.

A ``LaunchPlan`` is the C array of argument descriptors (``graph.tensor_arg``/``scalar_arg``)
and the positions of the inputs the run keeps to check (``inputs_kept.kept_indices``). Both are
functions of the arguments' ``args_key``: per tensor its address, storage offset, shape,
strides, dtype, device and grad flag; per scalar its type and bits (``-0.0`` is not ``0.0``).

Invariants:
- A plan is reused only for arguments with an equal key, and the key holds everything the
  descriptors and the selection are computed from: a tensor freed and another made at the same
  address with the same layout gets the same descriptors, which describe it exactly.
- Arguments whose key cannot be told cheaply (a tensor subclass, a sparse tensor, a tensor where
  a scalar is expected, a NumPy array) get a fresh plan on every run, as before there was a cache.
- The input check itself stays per run: whether it is on (``inputs_unchecked``) is looked at
  when the run starts, and the copies are made then.
- ``LaunchPlans`` keeps at most ``MAX_PLANS`` per build and forgets the oldest beyond that. A plan is
  never changed once made (the core only reads the array), so concurrent runs may share one.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass
from typing import Any

from tilescope.ir.types import Direction
from tilescope.launch.inputs_kept import kept_indices
from tilescope.runtime.abi import TsArg
from tilescope.runtime.graph import scalar_arg, tensor_arg

MAX_PLANS = 64  # per build: a program run on a few sets of tensors in turn keeps each one's


def args_key(specs: list, args: tuple | list) -> tuple[tuple, tuple] | None:
    """Every property of ``args`` that a run's descriptors, its input-check selection and the
    program's argument check (``Build.check_args``) look at, as ``(layout, where)``: ``layout``
    all the argument check needs (per tensor its shape, strides, dtype, device and grad flag; per
    scalar its type and bits), ``where`` each tensor's address and storage offset. None when that
    cannot be told cheaply (a tensor subclass, a sparse tensor, anything but a Python number where
    a scalar is expected)."""
    import torch

    grad = torch.is_grad_enabled()
    layout, where = [], []
    for spec, a in zip(specs, args):
        kind = type(a)
        if kind is torch.Tensor and spec.shape is not None and a.layout is torch.strided:
            layout.append((a.shape, a.stride(), a.dtype, a.is_cpu, a.requires_grad and grad))
            where.append((a.data_ptr(), a.storage_offset()))
        elif kind is float:
            layout.append((kind, _DOUBLE.pack(a)))  # NOTE: its bits: 0.0 == -0.0, and a NaN equals nothing
        elif kind in (int, bool):
            layout.append((kind, a))
        else:
            return None
    return (len(args), *layout), tuple(where)


_DOUBLE = struct.Struct("=d")


@dataclass(frozen=True)
class LaunchPlan:
    """The core's argument array of one set of arguments, and which inputs its runs keep."""

    args: ctypes.Array  # TsArg * len(args)
    kept: tuple[int, ...]  # positions of the inputs a run copies and checks (inputs_kept.KeptInputs)


def make_plan(specs: list, args: tuple | list, *, confined: bool) -> LaunchPlan:
    """The plan of ``args`` for a program with parameters ``specs``.

    Raises:
        ArgumentError: an argument the core cannot take (``tensor_arg``/``scalar_arg`` say which).
    """
    described = [
        scalar_arg(a, spec.dtype) if spec.direction is Direction.SCALAR else tensor_arg(a, spec.direction)
        for spec, a in zip(specs, args)
    ]
    return LaunchPlan((TsArg * len(described))(*described), kept_indices(specs, args, confined=confined))


class LaunchPlans:
    """One build's plans by argument key (at most ``MAX_PLANS``, the oldest forgotten first)."""

    def __init__(self) -> None:
        self._plans: dict[Any, LaunchPlan] = {}
        self._lock = threading.Lock()  # a miss's insertion (and the eviction) only; a hit takes no lock

    def plan(
        self, specs: list, args: tuple | list, key: tuple | None, *, confined: bool, view: int | None = None
    ) -> LaunchPlan:
        """The plan of ``args`` (with key ``key``, from ``args_key``; None: made afresh, not kept)
        for parameters ``specs``; ``view`` tells apart the plans of a kernel run alone (its index)."""
        if key is None:
            return make_plan(specs, args, confined=confined)
        full = (view, confined, key)
        found = self._plans.get(full)
        if found is None:
            found = make_plan(specs, args, confined=confined)
            with self._lock:
                while len(self._plans) >= MAX_PLANS:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[full] = found
        return found

    def __len__(self) -> int:
        return len(self._plans)


__all__ = ["MAX_PLANS", "LaunchPlan", "LaunchPlans", "args_key", "make_plan"]
