"""Hypotheses about a wrong answer, each tested by running the program (or one task) again with
one thing changed and comparing with the golden: a verdict that a re-run confirms, not a guess.

**The wrong argument, not the innocent kernel** (``wrong_argument``): whether a wrong task's
outputs become the golden's when one of its input arguments is given another region of the
same tensor. A kernel that computes the right function of the regions it was given writes wrong values when
the orchestration gave it the wrong region (``beta[n * CPG : ...]`` where ``beta[c0 : ...]``
belonged). The hypothesis is tested directly: the task is run again alone (bounded float64
interpreter, ``bound.py``) with one input argument moved to another region of its tensor, and
its outputs compared with the golden at their destinations. The regions tried, per argument,
are those of the orchestration's own lattice — every region another task was given of that
tensor, and every position on the grid of the region's own extents — at most ``_MAX_TRIES``.

Only program inputs are moved (an intermediate's values are what the run made of them), and
only tasks whose outputs are program outputs are judged (the golden says what those hold).

**Swapped offsets** (``swapped_offsets``): whether the program's outputs become the golden's
when two offsets of one load or store are exchanged (``ts.load(xp, [kw, kh, 0], ...)`` for
``[kh, kw, 0]``): the whole program run again on the bounded interpreter with that one access
changed. It is how a data-movement kernel (an im2col, a transpose, a gather) that copies the
right values to the wrong place is told from one that copies the wrong values.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded, _BoundKernel, _BoundOrch, run_kernel_bound
from tilescope.analysis.localize.golden_match import tile_close
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.ir.nodes import Kernel, Program, Store

_MAX_TRIES = 256  # regions tried per argument

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class WrongArgument:
    """A task whose outputs match the golden when argument ``arg`` is given ``wanted`` instead of ``given``."""

    task: int
    kernel: str
    arg: int
    param: str
    tensor: str
    given: Box
    wanted: Box
    tried: int

    def text(self) -> str:
        """The evidence line."""
        return (
            f"task {self.task} (kernel {self.kernel}) computes what its kernel says, and was given {self.param} = "
            f"{self.tensor}{_text(self.given)}; given {self.tensor}{_text(self.wanted)} instead, all its outputs "
            f"match the golden ({self.tried} region{'s' if self.tried > 1 else ''} of {self.tensor} tried): the call passes the wrong region of "
            f"{self.tensor}"
        )


@dataclass(frozen=True)
class SwappedOffsets:
    """An access of ``kernel`` whose offsets ``i`` and ``j``, exchanged, make the outputs the golden's."""

    kernel: str
    access: Any  # the Load expression or the Store statement
    i: int
    j: int

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        op = "store" if isinstance(self.access, Store) else "load"
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with offsets {self.i} and {self.j} of the {op} of {self.access.tensor.name} in kernel {self.kernel}{at} "
            "exchanged, the program's outputs match the golden (run again on the interpreter): the offsets are swapped"
        )


class _Swapping(_BoundKernel):
    """A kernel on Bounded tiles with the offsets of one access exchanged."""

    def __init__(self, kernel: Kernel, access: Any, i: int, j: int):
        super().__init__(kernel)
        self.access, self.i, self.j = access, i, j

    def _swapped(self, node: Any) -> Any:
        offs = list(node.offsets)
        offs[self.i], offs[self.j] = offs[self.j], offs[self.i]
        return dataclasses.replace(node, offsets=tuple(offs))

    def expr(self, e, env):
        return super().expr(self._swapped(e) if e is self.access else e, env)

    def stmt(self, s, env) -> None:
        super().stmt(self._swapped(s) if s is self.access else s, env)


def swapped_offsets(program: Program, kernel: Kernel, accesses: list[Any], args: list[Any],
                    golden: dict[str, torch.Tensor], outputs: list[tuple[int, str]], rtol: float,
                    atol: float) -> SwappedOffsets | None:  # fmt: skip
    """The first of ``accesses`` (Loads and Stores of ``kernel``) with two offsets that, exchanged,
    make every output the golden's; ``args`` are the program's (not changed), ``outputs`` its
    (index, name) pairs."""
    for access in accesses:
        offs = access.offsets
        for i, j in itertools.combinations(range(len(offs)), 2):
            if offs[i] == offs[j]:
                continue
            orch = _BoundOrch(program, False)
            orch.kernels[kernel.name] = _Swapping(kernel, access, i, j)
            run = [Bounded.exact(a) if torch.is_tensor(a) else a for a in args]
            try:
                with torch.no_grad():
                    orch.run(run)
            except (IndexError, ValueError, RuntimeError):
                continue  # the exchange reads outside a tensor: not the program meant
            if all(tile_close(run[k].v, run[k].e, golden[name], rtol, atol) for k, name in outputs):
                return SwappedOffsets(kernel.name, access, i, j)
    return None


def _text(box: Box) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


def _outputs_match(kernel: Kernel, args: list[Any], task: CapturedTask, golden: dict[str, torch.Tensor],
                   outs: list[int], rtol: float, atol: float) -> bool:  # fmt: skip
    run_kernel_bound(kernel, args)
    for i in outs:
        name, box = task.boxes[i]
        want = golden[name][tuple(slice(lo, hi) for lo, hi in box)]
        mine = args[i]
        # NOTE: only the elements the kernel wrote are judged: an Out's others keep sim's value, as given
        if not tile_close(mine.v, mine.e, want.reshape(mine.v.shape), rtol, atol):
            return False
    return True


def _lattice(box: Box, shape: tuple[int, ...], seen: list[Box]) -> list[Box]:
    """Other regions of a ``shape`` tensor with ``box``'s extents: the ones other tasks were given
    first, then the grid of the extents."""
    ext = [hi - lo for lo, hi in box]
    out: list[Box] = []
    for b in seen:
        if b != box and [hi - lo for lo, hi in b] == ext and b not in out:
            out.append(b)
    grids = [[lo, *(s for s in range(0, n - e + 1, max(e, 1)) if s != lo)] for (lo, _), e, n in zip(box, ext, shape)]
    for combo in itertools.product(*grids):
        b = tuple((s, s + e) for s, e in zip(combo, ext))
        if b != box and b not in out:
            out.append(b)
        if len(out) >= _MAX_TRIES:
            break
    return out[:_MAX_TRIES]


def wrong_argument(build: Build, kernel: Kernel, task: CapturedTask, tasks: list[CapturedTask],
                   inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
                   atol: float) -> WrongArgument | None:  # fmt: skip
    """The argument of ``task`` whose region, moved, makes all its outputs the golden's (None:
    no single argument does, or the task cannot be judged)."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    for i, p in enumerate(params):
        if p.shape is None or p.is_output or i not in task.boxes:
            continue
        name, box = task.boxes[i]
        whole = inputs.get(name)
        if not torch.is_tensor(whole) or tuple((0, n) for n in whole.shape) == box:
            continue
        seen = [t.boxes[j][1] for t in tasks for j in t.boxes if t.boxes[j][0] == name]
        tries = _lattice(box, tuple(whole.shape), seen)
        for n, b in enumerate(tries, 1):
            region = whole[tuple(slice(lo, hi) for lo, hi in b)].reshape(task.inputs[i].shape)
            args = task.arguments(params, Bounded.exact)
            args[i] = Bounded.exact(region)
            if _outputs_match(kernel, args, task, golden, outs, rtol, atol):
                return WrongArgument(task.task_id, task.kernel, i, p.name, name, box, b, n)
    return None


__all__ = ["SwappedOffsets", "WrongArgument", "swapped_offsets", "wrong_argument"]
