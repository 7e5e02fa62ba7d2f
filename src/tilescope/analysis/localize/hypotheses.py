"""Hypotheses about one wrong task, each tested by running the task again alone (the bounded
float64 interpreter, ``bound.py``) with one thing changed, and comparing its outputs with the
golden at their destinations: a verdict that a re-run confirms, not a guess. Only tasks whose
outputs are program outputs are judged (the golden says what those hold); the whole program's
hypotheses are ``program_hypotheses``.

- **Swapped arguments** (``swapped_arguments``): two input arguments of one shape exchanged
  (``layernorm(x, bias, weight, ...)``), unless the call already gives each param the tensor of
  its own name (then the kernel's use of them is what to look at).
- **The wrong argument, not the innocent kernel** (``wrong_argument``): one input argument
  given another region of its tensor (``beta[n * CPG : ...]`` where ``beta[c0 : ...]``
  belonged). The regions tried are the orchestration's own lattice — every region another task
  was given of that tensor, the region shifted by one element along each dim, then every position
  on the grid of the region's extents — at most ``_MAX_TRIES``. Only program inputs are moved (an intermediate's values are what the run made
  of them).
- **The wrong comparison** (``comparison``): one comparison strict where it is not or the
  reverse (``src < dst`` where ``src <= dst`` was meant: a causal mask, a triangle, a
  threshold), facing the other way, or negated (a branch flipped).
- **A loop one step off** (``loop_bound``): one loop of the kernel one step longer or shorter
  (``ts.range(0, COLS - CHUNK, CHUNK)`` for ``ts.range(0, COLS, CHUNK)``).
- **A load reading the wrong place** (``wrong_offset``): one load reading at two offsets
  exchanged, or with a loop variable in scope added to one offset (``[0, 0]`` inside a loop over
  ``c`` where ``[0, c]`` was meant), or with its masked elements filled otherwise (``fill=0``
  where a max needed ``-inf``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded, _BoundKernel, run_kernel_bound
from tilescope.analysis.localize.golden_match import tile_close
from tilescope.analysis.localize.source_map import statements
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import BinOp, Const, For, Kernel, Load, LoadRows, Scan
from tilescope.ir.traverse import child_exprs, walk_exprs
from tilescope.ir.types import ScalarType, TileType

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


class Stretched(_BoundKernel):
    """A kernel on Bounded tiles with one loop's stop moved by ``steps`` of its step."""

    def __init__(self, kernel: Kernel, loop: For, steps: int):
        super().__init__(kernel)
        self.loop, self.steps = loop, steps

    def expr(self, e, env):
        """The expression's value; the loop's stop moved by ``steps`` of its step."""
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
            k = Stretched(kernel, loop, steps)
            try:
                with torch.no_grad():
                    k.run(args)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # one step more reads outside a tensor
            if _judged(args, task, golden, outs, rtol, atol):
                return LoopBound(task.task_id, kernel.name, loop, steps)
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
        if self.change.startswith("other axis"):
            return (
                f"with the load of {self.load.tensor.name} in kernel {self.kernel}{at} reading along its {self.change}, "
                f"task {self.task}'s outputs match the golden (run again alone): the load's tile runs along the wrong axis"
            )
        if self.change.startswith(("padded", "masked")):
            what = "pad" if self.change.startswith("padded") else "fill"
            return (
                f"with the load of {self.load.tensor.name} in kernel {self.kernel}{at} reading its {self.change}, "
                f"task {self.task}'s outputs match the golden (run again alone): the load's {what} is the wrong value"
            )
        return (
            f"with the load of {self.load.tensor.name} in kernel {self.kernel}{at} reading at its {self.change}, "
            f"task {self.task}'s outputs match the golden (run again alone): the load reads the wrong place"
        )


class _Moved(_BoundKernel):
    """A kernel on Bounded tiles with one load read otherwise: its offsets computed by
    ``change(offsets, env)``, (``fill``) the value of its masked or padded elements replaced, or
    (``flip``) its one tensor dim read as the tile's other axis (a row for a column)."""

    def __init__(self, kernel: Kernel, load: Load, change, fill: float | None = None, flip: bool = False):
        super().__init__(kernel)
        self.load, self.change, self.fill, self.flip = load, change, fill, flip

    def expr(self, e, env):
        if e is self.load and self.flip:
            e = dataclasses.replace(e, dims=_flipped(e), type=TileType(_flipped_shape(e), e.type.dtype))
        elif e is self.load and self.fill is not None and e.pad is not None:
            e = dataclasses.replace(e, pad=Const(self.fill, ScalarType(e.type.dtype)))
        elif e is self.load and self.fill is not None:
            e = dataclasses.replace(e, fill=Const(self.fill, e.fill.type))
        elif e is self.load:
            given = _offsets(e)
            offs = self.change([int(super(_Moved, self).expr(o, env)) for o in given], env)
            moved = tuple(Const(v, o.type) for v, o in zip(offs, given))
            e = dataclasses.replace(e, col=moved[0]) if isinstance(e, LoadRows) else dataclasses.replace(e, offsets=moved)
        return super().expr(e, env)


def _offsets(load: Load | LoadRows) -> tuple[Any, ...]:
    """A load's offsets; a gather's (``load_rows``) column offset."""
    return (load.col,) if isinstance(load, LoadRows) else tuple(load.offsets)


def _offset_changes(load: Load, loop_vars: list[str]):
    """Each way a load's offsets could have been meant: two exchanged, one off by one (a window
    or a padding shifted, an index counted from 1), a loop variable added to one or standing for
    one."""
    offsets = _offsets(load)
    n = len(offsets)
    for i, j in itertools.combinations(range(n), 2):
        if offsets[i] != offsets[j]:
            yield f"offsets {i} and {j} exchanged", lambda o, env, i=i, j=j: [
                o[j] if k == i else o[i] if k == j else x for k, x in enumerate(o)]  # fmt: skip
    for d in range(n):
        if not isinstance(offsets[d], Const):  # NOTE: a constant one off is the catalogue's "offset" repair
            for step in (1, -1):
                yield f"offset {d} {'+' if step > 0 else '-'} 1", lambda o, env, d=d, step=step: [
                    x + step if k == d else x for k, x in enumerate(o)]  # fmt: skip
    for v in loop_vars:
        for d in range(n):
            yield f"offset {d} + {v}", lambda o, env, d=d, v=v: [x + env[v] if k == d else x for k, x in enumerate(o)]
            yield f"offset {d} = {v}", lambda o, env, d=d, v=v: [env[v] if k == d else x for k, x in enumerate(o)]


def _fills(load: Load | LoadRows) -> list[float]:
    """The fills a masked load of floats, or the pads a padded one, could have been meant to have
    (its own left out): the identities of a max, a min and a sum."""
    if not (isinstance(load, Load) and load.type.dtype.is_float):
        return []
    f = load.pad if load.pad is not None else load.fill if load.valid else None
    if not isinstance(f, Const):
        return []
    return [v for v in (float("-inf"), float("inf"), 0.0) if float(f.value) != v]


def _flippable(load: Load | LoadRows) -> bool:
    """Whether the load reads one tensor dim as a row or a column (a 1-D tensor's, or ``dims=``
    with None), so the tile's other axis is another reading of it."""
    return isinstance(load, Load) and (None in load.dims or (len(load.tensor.type.shape) == 1 and not load.dims))


def _flipped(load: Load) -> tuple[int | None, ...]:
    """The dims of ``load`` read along the tile's other axis (a 1-D tensor's default row: a column)."""
    return load.dims[::-1] if load.dims else (0, None)


def _flipped_shape(load: Load) -> tuple[int, ...]:
    shape = load.type.shape
    return shape[::-1] if len(shape) == 2 else (shape[0], 1)


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
        changes = [(what, change, None, False) for what, change in _offset_changes(load, list(scope))]
        padded = isinstance(load, Load) and load.pad is not None
        word = "padded elements as {v} (pad={v})" if padded else "masked elements as {v} (fill={v})"
        changes += [(word.format(v=v), None, v, False) for v in _fills(load)]
        if _flippable(load):  # NOTE: a 1-D tensor read as a row where a column was meant, or the reverse
            flipped = ", ".join(map(str, _flipped(load)))
            changes.append((f"other axis (dims=[{flipped}])", None, None, True))
        for what, change, fill, flip in changes:
            tries += 1
            if tries > limit:
                return None
            args = task.arguments(params, Bounded.exact)
            try:
                with torch.no_grad():
                    _Moved(kernel, load, change, fill, flip).run(args)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # it reads outside the tensor
            if _judged(args, task, golden, outs, rtol, atol):
                return WrongOffset(task.task_id, kernel.name, stmt, load, what)
    return None


# each comparison's alternatives, the smallest change first: its strictness, its direction, its negation
_COMPARISONS = {"lt": ("le", "gt", "ge"), "le": ("lt", "ge", "gt"), "gt": ("ge", "lt", "le"), "ge": ("gt", "le", "lt")}


@dataclass(frozen=True)
class Comparison:
    """A comparison of ``kernel`` that, as ``meant``, makes a task's outputs the golden's."""

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
            f"task {self.task}'s outputs match the golden (run again alone): the comparison is the wrong one"
        )


    op = property(lambda self: self.compare.op)
    summary = "a comparison of kernel {k} is the wrong one"


@dataclass(frozen=True)
class ScanFlags:
    """A scan of ``kernel`` (cumsum, cumprod) that, with ``meant`` flags, makes a task's outputs the golden's."""

    task: int
    kernel: str
    stmt: Any
    compare: Any  # the Scan
    meant: str  # ``exclusive=True``, ``reverse=False``

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with {self.meant} in the {self.compare.op} of kernel {self.kernel}{at}, task {self.task}'s outputs "
            f"match the golden (run again alone): the scan's flags are the wrong ones"
        )

    op = property(lambda self: self.compare.op)
    summary = "a scan of kernel {k} has the wrong flags"


class _Flipped(_BoundKernel):
    """A kernel on Bounded tiles with one node (a comparison, a scan) changed as ``fields`` say."""

    def __init__(self, kernel: Kernel, node: Any, **fields: Any):
        super().__init__(kernel)
        self.node, self.fields = node, fields

    def expr(self, e, env):
        return super().expr(dataclasses.replace(e, **self.fields) if e is self.node else e, env)


def _variants(e: Any):
    """Each way a comparison or a scan could have been meant: (fields to replace, what, the result's class)."""
    if isinstance(e, BinOp) and e.op in _COMPARISONS and isinstance(e.type, TileType):
        for op in _COMPARISONS[e.op]:
            yield {"op": op}, op, Comparison
    elif isinstance(e, Scan):
        for flag in ("exclusive", "reverse"):
            yield {flag: not getattr(e, flag)}, f"{flag}={not getattr(e, flag)}", ScanFlags


def comparison(build: Build, kernel: Kernel, task: CapturedTask, golden: dict[str, torch.Tensor], rtol: float,
               atol: float) -> Comparison | ScanFlags | None:  # fmt: skip
    """The first comparison of ``kernel`` (``<``, ``<=``, ``>``, ``>=``) that, with its other
    strictness, its other direction or negated (in that order), or scan that, exclusive where it
    is inclusive (or the reverse) or running the other way, makes all of ``task``'s outputs the
    golden's."""
    params = build.kernel_params(task.func_id)
    outs = [i for i, p in enumerate(params) if p.shape is not None and p.is_output]
    if task.lost or not outs or any(task.boxes.get(i, ("",))[0] not in golden for i in outs):
        return None
    for stmt in statements(kernel.body):
        for e in walk_exprs(child_exprs(stmt)):
            for fields, meant, result in _variants(e):
                args = task.arguments(params, Bounded.exact)
                try:
                    with torch.no_grad():
                        _Flipped(kernel, e, **fields).run(args)
                except (IndexError, ValueError, RuntimeError, TilescopeError):
                    continue
                if _judged(args, task, golden, outs, rtol, atol):
                    return result(task.task_id, kernel.name, stmt, e, meant)
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
    first, then the region one element over along each dim (a shift by one: ``tokens[r + 1 :]``),
    then the grid of the extents."""
    ext = [hi - lo for lo, hi in box]
    out: list[Box] = []
    for b in seen:
        if b != box and [hi - lo for lo, hi in b] == ext and b not in out:
            out.append(b)
    for d, n in enumerate(shape):
        for step in (1, -1):
            lo = box[d][0] + step
            if 0 <= lo and lo + ext[d] <= n:
                b = tuple((lo, lo + ext[d]) if k == d else x for k, x in enumerate(box))
                if b not in out:
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
    return _wrong_destination(task, tasks, params, outs, golden, rtol, atol)


def _wrong_destination(task: CapturedTask, tasks: list[CapturedTask], params: list[Any], outs: list[int],
                       golden: dict[str, torch.Tensor], rtol: float, atol: float) -> WrongArgument | None:  # fmt: skip
    """An output written to the wrong region: what the task wrote is the golden at another region of
    its tensor (one element over, or another task's), and every other output holds the golden where
    it is (or, moved the same way, where it should be): the first moved output."""
    moved: list[tuple[int, Box, Box, int]] = []
    for i in outs:
        name, box = task.boxes[i]
        wrote = task.outputs.get(i)
        if wrote is None:
            return None
        want = golden[name]
        zero = torch.zeros((), dtype=torch.float64)
        if tile_close(wrote.to(torch.float64), zero, want[tuple(slice(lo, hi) for lo, hi in box)], rtol, atol):
            continue
        seen = [t.boxes[j][1] for t in tasks for j in t.boxes if t.boxes[j][0] == name]
        tries = _lattice(box, tuple(want.shape), seen)
        hit = next(((n, b) for n, b in enumerate(tries, 1)
                    if tile_close(wrote.to(torch.float64), zero, want[tuple(slice(lo, hi) for lo, hi in b)], rtol, atol)),
                   None)  # fmt: skip
        if hit is None:
            return None
        moved.append((i, box, hit[1], hit[0]))
    if not moved:
        return None
    i, given, wanted, tried = moved[0]
    return WrongArgument(task.task_id, task.kernel, i, params[i].name, task.boxes[i][0], given, wanted, tried)


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
    "Comparison", "LoopBound", "Stretched", "SwappedArguments", "WrongArgument", "WrongOffset", "comparison",
    "loop_bound", "swapped_arguments", "wrong_argument", "wrong_offset",
]  # fmt: skip
