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

``program_loop_bound`` asks the same of every loop of the program, the orchestration's
included, with the whole program run again: a loop that stops a block short leaves part of an
output unwritten, which no single task can show.

**A rounding mode** (``cast_mode``): whether every output becomes the golden's when one cast
rounds with another mode (``ts.cast(x, ts.i8, mode="trunc")`` where the golden rounds to
nearest), the program run again in its own dtypes.

**A load reading the wrong place** (``wrong_offset``): whether a wrong task's outputs become
the golden's when one load of its kernel reads elsewhere: two of its offsets exchanged, or a loop
variable in scope added to one (``ts.load(res, [0, 0], ..)`` inside a loop over ``c`` where
``[0, c]`` was meant), the task run again alone.

**A comparison off by its equality** (``strictness``): whether they become the golden's with
one comparison strict where it is not, or the reverse (``src < dst`` where ``src <= dst`` was
meant: a causal mask, a threshold, a triangle).

**Swapped arguments** (``swapped_arguments``): whether they become the golden's with two input
arguments of one shape exchanged (``layernorm(x, bias, weight, ...)``).

**Swapped offsets** (``swapped_offsets``): whether the program's outputs become the golden's
when two offsets of one load or store are exchanged (``ts.load(xp, [kw, kh, 0], ...)`` for
``[kh, kw, 0]``): the whole program run again on the bounded interpreter with that one access
changed. It is how a data-movement kernel (an im2col, a transpose, a gather) that copies the
right values to the wrong place is told from one that copies the wrong values.

**A loop one step off** (``loop_bound``): whether a wrong task's outputs become the golden's
when one loop of its kernel runs one step longer or shorter (``ts.range(0, COLS - CHUNK, CHUNK)``
for ``ts.range(0, COLS, CHUNK)``): the task run again alone with that loop's stop moved by one
step.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded, _BoundKernel, _BoundOrch, run_kernel_bound
from tilescope.analysis.localize.golden_match import tile_close
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.localize.source_map import loops, statements
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import CAST_MODES, BinOp, Cast, Const, For, Kernel, Load, LoadRows, Program, Store
from tilescope.ir.traverse import child_exprs, walk_exprs
from tilescope.ir.types import TileType
from tilescope.runtime.interp import _KernelInterp, _OrchInterp

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
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # the exchange reads outside a tensor: not the program meant
            if all(tile_close(run[k].v, run[k].e, golden[name], rtol, atol) for k, name in outputs):
                return SwappedOffsets(kernel.name, access, i, j)
    return None


@dataclass(frozen=True)
class LoopBound:
    """A loop of ``kernel`` that, ``steps`` steps longer (negative: shorter), makes a task's outputs the golden's."""

    task: int
    kernel: str
    loop: Any  # the For statement
    steps: int

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        more = "one step longer" if self.steps > 0 else "one step shorter"
        return (
            f"with the loop over {self.loop.var} of kernel {self.kernel}{at} {more}, task {self.task}'s outputs match "
            "the golden (run again alone): the loop's bound is off by one step"
        )


class _Stretched(_BoundKernel):
    """A kernel on Bounded tiles with one loop's stop moved by ``steps`` of its step."""

    def __init__(self, kernel: Kernel, loop: For, steps: int):
        super().__init__(kernel)
        self.loop, self.steps = loop, steps

    def expr(self, e, env):
        value = super().expr(e, env)
        if e is self.loop.stop:
            return value + self.steps * super().expr(self.loop.step, env)
        return value


def loop_bound(build: Build, kernel: Kernel, task: CapturedTask, golden: dict[str, torch.Tensor], rtol: float,
               atol: float) -> LoopBound | None:  # fmt: skip
    """The first loop of ``kernel`` (in source order) that, one step longer or shorter, makes
    all of ``task``'s outputs the golden's."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    for loop in (x for x in statements(kernel.body) if isinstance(x, For)):
        for steps in (1, -1):
            args = task.arguments(params, Bounded.exact)
            k = _Stretched(kernel, loop, steps)
            try:
                with torch.no_grad():
                    k.run(args)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # one step more reads outside a tensor
            if _judged(args, task, golden, outs, rtol, atol):
                return LoopBound(task.task_id, kernel.name, loop, steps)
    return None


class _StretchedOrch(_BoundOrch):
    """The whole program on Bounded tensors with one loop (the orchestration's or a kernel's) moved."""

    def __init__(self, program: Program, loop: For, steps: int, kernel: Kernel | None):
        super().__init__(program, False)
        self.loop, self.steps = loop, steps
        if kernel is not None:
            self.kernels[kernel.name] = _Stretched(kernel, loop, steps)

    def expr(self, e, env):
        value = super().expr(e, env)
        if e is self.loop.stop:
            return value + self.steps * super().expr(self.loop.step, env)
        return value


@dataclass(frozen=True)
class ProgramLoop:
    """A loop of the program (``kernel`` None: the orchestration's) one step off."""

    kernel: str | None
    loop: Any
    steps: int

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        where = f"kernel {self.kernel}" if self.kernel else "the orchestration"
        at = f" at {dsl_line}" if dsl_line else ""
        more = "one step longer" if self.steps > 0 else "one step shorter"
        return (
            f"with the loop over {self.loop.var} of {where}{at} {more}, every output matches the golden "
            "(the program run again on the interpreter): the loop's bound is off by one step"
        )


def program_loop_bound(program: Program, args: list[Any], golden: dict[str, torch.Tensor],
                       outputs: list[tuple[int, str]], rtol: float, atol: float, limit: int = 16) -> ProgramLoop | None:  # fmt: skip
    """The first loop of the program (the orchestration's, then each kernel's, in source order; at
    most ``limit``) that, one step longer or shorter, makes every output the golden's."""
    found = [(None, x) for x in loops(program.body)]
    found += [(k, x) for k in program.kernels for x in statements(k.body) if isinstance(x, For)]
    for kernel, loop in found[:limit]:
        for steps in (1, -1):
            run = [Bounded.exact(a) if torch.is_tensor(a) else a for a in args]
            try:
                with torch.no_grad():
                    _StretchedOrch(program, loop, steps, kernel).run(run)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # one step more leaves a tensor: not what the program meant
            if all(tile_close(run[k].v, run[k].e, golden[name], rtol, atol) for k, name in outputs):
                return ProgramLoop(kernel.name if kernel else None, loop, steps)
    return None


@dataclass(frozen=True)
class CastMode:
    """A cast of ``kernel`` that, with ``mode``, makes every output the golden's."""

    kernel: str
    stmt: Any  # the statement holding the cast
    cast: Any
    mode: str

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with mode={self.mode!r} instead of mode={self.cast.mode!r}, the cast to {self.cast.type.dtype.name} in "
            f"kernel {self.kernel}{at} makes every output match the golden (the program run again in its dtypes): "
            "it rounds otherwise than the golden"
        )


class _Recast(_KernelInterp):
    """A kernel in its dtypes with one cast's mode changed."""

    def __init__(self, kernel: Kernel, cast: Cast, mode: str):
        super().__init__(kernel, float64=False)
        self.target, self.mode = cast, mode

    def expr(self, e, env):
        return super().expr(dataclasses.replace(e, mode=self.mode) if e is self.target else e, env)


def cast_mode(program: Program, args: list[Any], golden: dict[str, torch.Tensor], outputs: list[tuple[int, str]],
              rtol: float, atol: float, limit: int = 8) -> CastMode | None:  # fmt: skip
    """The first rounding cast of the program (a float to an integer or a narrower float; at most
    ``limit``) whose other mode makes every output the golden's, run in the program's dtypes."""
    casts = []
    for k in program.kernels:
        for stmt in statements(k.body):
            for e in walk_exprs(child_exprs(stmt)):
                if isinstance(e, Cast) and isinstance(e.value.type, TileType) and e.value.type.dtype.is_float and (
                        not e.type.dtype.is_float or e.type.dtype.itemsize < e.value.type.dtype.itemsize):  # fmt: skip
                    casts.append((k, stmt, e))
    for k, stmt, c in casts[:limit]:
        for mode in (m for m in CAST_MODES if m != c.mode):
            orch = _OrchInterp(program, False)
            orch.kernels[k.name] = _Recast(k, c, mode)
            run = [a.clone() if torch.is_tensor(a) else a for a in args]
            try:
                with torch.no_grad():
                    orch.run(run)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue
            if all(bool(close(run[i], golden[name], rtol, atol).all()) for i, name in outputs):
                return CastMode(k.name, stmt, c, mode)
    return None


@dataclass(frozen=True)
class WrongOffset:
    """A load of ``kernel`` whose offsets, changed as ``change`` says, make a task's outputs the golden's."""

    task: int
    kernel: str
    stmt: Any  # the statement holding the load
    load: Any
    change: str  # ``offset 1 + c``, ``offsets 0 and 1 exchanged``

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with the load of {self.load.tensor.name} in kernel {self.kernel}{at} reading at its {self.change}, "
            f"task {self.task}'s outputs match the golden (run again alone): the load reads the wrong place"
        )


class _Moved(_BoundKernel):
    """A kernel on Bounded tiles with one load's offsets computed otherwise (``change(offsets, env)``)."""

    def __init__(self, kernel: Kernel, load: Load, change):
        super().__init__(kernel)
        self.load, self.change = load, change

    def expr(self, e, env):
        if e is self.load:
            given = _offsets(e)
            offs = self.change([int(super(_Moved, self).expr(o, env)) for o in given], env)
            moved = tuple(Const(v, o.type) for v, o in zip(offs, given))
            e = dataclasses.replace(e, col=moved[0]) if isinstance(e, LoadRows) else dataclasses.replace(e, offsets=moved)
        return super().expr(e, env)


def _offsets(load: Load | LoadRows) -> tuple[Any, ...]:
    """A load's offsets; a gather's (``load_rows``) column offset."""
    return (load.col,) if isinstance(load, LoadRows) else tuple(load.offsets)


def _offset_changes(load: Load, loop_vars: list[str]):
    """Each way a load's offsets could have been meant: two exchanged, a loop variable added to one
    or standing for one."""
    offsets = _offsets(load)
    n = len(offsets)
    for i, j in itertools.combinations(range(n), 2):
        if offsets[i] != offsets[j]:
            yield f"offsets {i} and {j} exchanged", lambda o, env, i=i, j=j: [
                o[j] if k == i else o[i] if k == j else x for k, x in enumerate(o)]  # fmt: skip
    for v in loop_vars:
        for d in range(n):
            yield f"offset {d} + {v}", lambda o, env, d=d, v=v: [x + env[v] if k == d else x for k, x in enumerate(o)]
            yield f"offset {d} = {v}", lambda o, env, d=d, v=v: [env[v] if k == d else x for k, x in enumerate(o)]


def _loads_in_loops(body, outer: tuple[str, ...] = ()) -> list[tuple[Any, Load, tuple[str, ...]]]:
    """Every (statement, load, loop variables in scope) of a kernel body, in source order."""
    out = []
    for s in body:
        if isinstance(s, For):
            out += _loads_in_loops(s.body, (*outer, s.var))
            continue
        out += [(s, e, outer) for e in walk_exprs(child_exprs(s)) if isinstance(e, Load | LoadRows)]
    return out


def wrong_offset(build: Build, kernel: Kernel, task: CapturedTask, golden: dict[str, torch.Tensor], rtol: float,
                 atol: float, limit: int = 64) -> WrongOffset | None:  # fmt: skip
    """The first load of ``kernel`` whose offsets, exchanged or with a loop variable added (at most
    ``limit`` tries), make all of ``task``'s outputs the golden's."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    tries = 0
    for stmt, load, scope in _loads_in_loops(kernel.body):
        for what, change in _offset_changes(load, list(scope)):
            tries += 1
            if tries > limit:
                return None
            args = task.arguments(params, Bounded.exact)
            try:
                with torch.no_grad():
                    _Moved(kernel, load, change).run(args)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # it reads outside the tensor
            if _judged(args, task, golden, outs, rtol, atol):
                return WrongOffset(task.task_id, kernel.name, stmt, load, what)
    return None


_STRICTNESS = {"lt": "le", "le": "lt", "gt": "ge", "ge": "gt"}


@dataclass(frozen=True)
class Strictness:
    """A comparison of ``kernel`` that, strict where it is not (or the reverse), makes a task's outputs the golden's."""

    task: int
    kernel: str
    stmt: Any
    compare: Any  # the BinOp
    meant: str

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}
        return (
            f"with `{sym[self.meant]}` for `{sym[self.compare.op]}` in the comparison of kernel {self.kernel}{at}, "
            f"task {self.task}'s outputs match the golden (run again alone): the bound is off by its equality"
        )


class _Flipped(_BoundKernel):
    """A kernel on Bounded tiles with one comparison's strictness changed."""

    def __init__(self, kernel: Kernel, compare: BinOp):
        super().__init__(kernel)
        self.compare = compare

    def expr(self, e, env):
        return super().expr(dataclasses.replace(e, op=_STRICTNESS[e.op]) if e is self.compare else e, env)


def strictness(build: Build, kernel: Kernel, task: CapturedTask, golden: dict[str, torch.Tensor], rtol: float,
               atol: float) -> Strictness | None:  # fmt: skip
    """The first comparison of ``kernel`` (``<``, ``<=``, ``>``, ``>=``) that, with the other
    strictness, makes all of ``task``'s outputs the golden's."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    for stmt in statements(kernel.body):
        for e in walk_exprs(child_exprs(stmt)):
            if not (isinstance(e, BinOp) and e.op in _STRICTNESS and isinstance(e.type, TileType)):
                continue
            args = task.arguments(params, Bounded.exact)
            try:
                with torch.no_grad():
                    _Flipped(kernel, e).run(args)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue
            if _judged(args, task, golden, outs, rtol, atol):
                return Strictness(task.task_id, kernel.name, stmt, e, _STRICTNESS[e.op])
    return None


def _text(box: Box) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


def _outputs_match(kernel: Kernel, args: list[Any], task: CapturedTask, golden: dict[str, torch.Tensor],
                   outs: list[int], rtol: float, atol: float) -> bool:  # fmt: skip
    run_kernel_bound(kernel, args)
    return _judged(args, task, golden, outs, rtol, atol)


def _judged(args: list[Any], task: CapturedTask, golden: dict[str, torch.Tensor], outs: list[int], rtol: float,
            atol: float) -> bool:  # fmt: skip
    """Whether the task's outputs ``args[i]`` (Bounded) hold the golden at their regions."""
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


@dataclass(frozen=True)
class SwappedArguments:
    """A task whose outputs match the golden with its arguments ``a`` and ``b`` exchanged."""

    task: int
    kernel: str
    a: str  # the params, as the kernel names them
    b: str
    given_a: str  # the regions, as the task was given them
    given_b: str

    def text(self) -> str:
        """The evidence line."""
        return (
            f"task {self.task} (kernel {self.kernel}) computes what its kernel says, and was given {self.a} = "
            f"{self.given_a} and {self.b} = {self.given_b}; with the two exchanged, all its outputs match the golden: "
            "the call passes them in the wrong order"
        )


def swapped_arguments(build: Build, kernel: Kernel, task: CapturedTask, golden: dict[str, torch.Tensor], rtol: float,
                      atol: float) -> SwappedArguments | None:  # fmt: skip
    """Two input arguments of ``task`` of one shape that, exchanged, make all its outputs the golden's."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    ins = [i for i, p in enumerate(params) if p.shape is not None and not p.is_output and i in task.inputs]
    for i, j in itertools.combinations(ins, 2):
        x, y = task.inputs[i], task.inputs[j]
        if x.shape != y.shape or x.dtype != y.dtype or torch.equal(x, y):
            continue
        if all(task.boxes.get(k, ("",))[0] == params[k].name for k in (i, j)):
            continue  # each param given the tensor of its own name: the kernel's use of them is what to look at
        args = task.arguments(params, Bounded.exact)
        args[i], args[j] = args[j], args[i]
        if _outputs_match(kernel, args, task, golden, outs, rtol, atol):
            return SwappedArguments(task.task_id, task.kernel, params[i].name, params[j].name,
                                    task.regions.get(i, params[i].name), task.regions.get(j, params[j].name))  # fmt: skip
    return None


__all__ = [
    "CastMode", "LoopBound", "ProgramLoop", "Strictness", "WrongOffset", "strictness", "wrong_offset", "SwappedArguments", "SwappedOffsets", "WrongArgument", "loop_bound",
    "cast_mode", "program_loop_bound", "swapped_arguments",
    "swapped_offsets", "wrong_argument",
]  # fmt: skip
