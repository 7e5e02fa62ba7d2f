"""Task by task: each task of a sim run re-executed alone from the inputs sim gave it, and what
the orchestration submitted compared with what the program says it submits.

Invariants:
- A task's inputs and outputs come from a level-2 tensor dump of the sim run (``capture``):
  Out parameters start from sim's own result, so only the elements the kernel writes are
  compared; a task whose payloads the dump lost is listed, never judged.
- A task disagrees when one of its output elements lies outside ``[v - e, v + e]``, the float64
  result and its error bound in the program's dtypes (``bound.py``) from the same inputs: no
  correct implementation of the kernel could have produced it. Tasks are scanned in task id
  order, the order the orchestration submitted them, which every dependency follows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded, Overflow, _BoundOrch, run_kernel_bound
from tilescope.analysis.localize.metrics import coords
from tilescope.build.manifest import Build
from tilescope.debug.deps_json import buffer_names, region_box, region_text
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.tensor_dump import view_of
from tilescope.ir.nodes import Assign, Program
from tilescope.runtime.records import RunReport, TaskArgRecord


@dataclass
class CapturedTask:
    """One task of the sim run as the dump holds it."""

    task_id: int
    kernel: str
    func_id: int
    inputs: dict[int, Any] = field(default_factory=dict)  # arg index -> tensor (before) or scalar
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)  # arg index -> tensor (after)
    regions: dict[int, str] = field(default_factory=dict)  # arg index -> ``h[0:64, 0:128]``
    boxes: dict[int, tuple[str, tuple[tuple[int, int], ...]]] = field(default_factory=dict)  # arg index -> (tensor, box)
    roles: dict[int, str] = field(default_factory=dict)  # arg index -> input | output | inout | scalar
    probes: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (probe id, tile), in the order they ran
    lost: bool = False  # a payload the dump could not keep

    def arguments(self, params: list[Any], wrap: Callable[[torch.Tensor], Any] = torch.clone) -> list[Any]:
        """The task's arguments for running its kernel again: scalars as given, tensors through
        ``wrap`` as sim gave them, an Out parameter as sim left it (so the elements the kernel does
        not write agree)."""
        return [
            self.inputs.get(i) if p.shape is None else wrap(self.inputs[i] if i in self.inputs else self.outputs[i])
            for i, p in enumerate(params)
        ]


def captured_tasks(build: Build, report: RunReport) -> list[CapturedTask]:
    """The tasks of ``report``'s level-2 dump, in task id order."""
    assert report.dump is not None
    kernels = [k["name"] for k in build.kernels]
    buffers = buffer_names(build, report, program_shapes=True)
    tasks: dict[int, CapturedTask] = {}
    for r in report.dump.records:
        t = tasks.get(r.task_id)
        if t is None:
            t = tasks[r.task_id] = CapturedTask(r.task_id, kernels[r.func_id], r.func_id)
        if r.stage == "probe":
            tile = record_tensor(report.dump.payload, r)
            if tile is not None:
                t.probes.append((int(r.value), tile.clone()))
            continue
        t.roles[r.arg_index] = r.role
        if r.kind == "scalar":
            t.inputs[r.arg_index] = r.value
            continue
        t.regions[r.arg_index] = region_text(view_of(r), buffers)
        name, layout = buffers.get(r.buffer_id, (None, None))
        box = region_box(view_of(r), layout)
        if name is not None and box is not None:
            t.boxes[r.arg_index] = (name, tuple((lo, hi) for lo, hi in box))
        value = record_tensor(report.dump.payload, r)
        if value is None:
            t.lost = True
            continue
        (t.inputs if r.stage == "before_dispatch" else t.outputs)[r.arg_index] = value.clone()
    out = [tasks[k] for k in sorted(tasks)]
    for t in out:  # a record the dump dropped (its record buffer full) leaves a task incomplete
        params = build.kernels[t.func_id].get("params", [])
        for i, p in enumerate(params):
            if p.get("shape") is None:
                t.lost = t.lost or i not in t.inputs
            elif p["direction"] in ("out", "inout"):
                t.lost = t.lost or i not in t.outputs or (p["direction"] == "inout" and i not in t.inputs)
            else:
                t.lost = t.lost or i not in t.inputs
    return out


@dataclass
class TaskDivergence:
    """A task whose output leaves its bound: the worst element of its first such output."""

    task_id: int
    kernel: str
    param: str
    region: str
    bad: int  # elements outside the bound
    numel: int
    index: tuple[int, ...]  # the worst element, in the argument's region
    got: float
    expected: float  # the float64 result
    bound: float

    def text(self) -> str:
        """The evidence line."""
        return (
            f"task {self.task_id} (kernel {self.kernel}): {self.bad} of {self.numel} elements of "
            f"{self.param} = {self.region} leave the error bound; at {list(self.index)} sim gave {self.got:.9g}, "
            f"float64 from the same inputs {self.expected:.9g} (bound +-{self.bound:.3g})"
        )


@dataclass
class TaskScan:
    """What re-executing every task alone found."""

    checked: int = 0
    divergent: list[TaskDivergence] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # tasks whose payloads were not kept
    unjudged: list[int] = field(default_factory=list)  # outputs with an infinite bound (overflow)


def outside(got: torch.Tensor, v: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Where ``got`` lies outside ``[v - e, v + e]`` (NaN against NaN and equal infinities inside;
    an infinite bound holds anything)."""
    g, vv = got.to(torch.float64), v.to(torch.float64)
    same = (g == vv) | (torch.isnan(g) & torch.isnan(vv))
    far = (g - vv).abs() > e * (1 + 1e-9)
    far = far | (torch.isnan(g) != torch.isnan(vv))
    return ~same & far & ~torch.isinf(e)


def scan_tasks(build: Build, program: Program, tasks: list[CapturedTask], nearest: bool = False) -> TaskScan:
    """Re-execute every task alone from sim's inputs and compare its outputs with their bounds
    (with ``nearest``, every cast bounded as round-to-nearest: what the dtypes allow)."""
    kernels = {k.name: k for k in program.kernels}
    scan = TaskScan()
    for t in tasks:
        if t.lost:
            scan.lost.append(t.task_id)
            continue
        params = build.kernel_params(t.func_id)
        args = t.arguments(params, Bounded.exact)
        run_kernel_bound(kernels[t.kernel], args, nearest=nearest, task=t.task_id)
        scan.checked += 1
        for i, p in enumerate(params):
            if i not in t.outputs:
                continue
            got, ref = t.outputs[i], args[i]
            if bool(torch.isinf(ref.e).any()):
                scan.unjudged.append(t.task_id)
            bad = outside(got, ref.v, ref.e)
            n = int(bad.sum())
            if not n:
                continue
            excess = torch.where(bad, (got.double() - ref.v.double()).abs().nan_to_num(nan=float("inf")) - ref.e, 0)
            flat = int(excess.reshape(-1).argmax())
            index = coords(flat, got.shape)
            scan.divergent.append(
                TaskDivergence(
                    t.task_id, t.kernel, p.name, t.regions.get(i, p.name), n, got.numel(), index,
                    float(got.reshape(-1)[flat]), float(ref.v.reshape(-1)[flat]), float(ref.e.reshape(-1)[flat]),
                )
            )  # fmt: skip
            break
    return scan


@dataclass(frozen=True)
class Submitted:
    """One task as the program's IR submits it: its kernel and every argument (a region's text
    or a scalar's value), and the DSL call that submitted it."""

    kernel: str
    args: tuple[str, ...]
    loc: str | None
    call: Any = field(default=None, compare=False)  # the IR's Submit node


class _RecordingOrch(_BoundOrch):
    """The bound run of the whole program, also recording what each task is given."""

    def __init__(self, program: Program, nearest: bool):
        super().__init__(program, nearest)
        self.bases: dict[int, tuple[str, tuple]] = {}  # storage address -> (name, layout)
        self.submitted: list[Submitted] = []
        self._named: dict[str, int] = {}

    def bind(self, params, args):
        env = super().bind(params, args)
        for p, a in zip(params, args):
            if isinstance(a, Bounded):
                self._base(a, p.name)
        return env

    def _base(self, t: Bounded, name: str) -> None:
        n = self._named.get(name, 0)
        self._named[name] = n + 1
        shape = list(t.v.shape)
        strides = tuple(t.v.stride())
        self.bases[t.v.untyped_storage().data_ptr()] = (name if n == 0 else f"{name}#{n}", (shape, strides, 0))

    def create_tensor(self, e):
        t = super().create_tensor(e)
        now = self.now
        self._base(t, now.target if isinstance(now, Assign) else f"tmp{len(self.bases)}")
        return t

    def submit(self, e, env) -> int:
        args = []
        for a in e.args:
            value = self.expr(a, env)
            if isinstance(value, Bounded):
                key = value.v.untyped_storage().data_ptr()
                rec = TaskArgRecord(0, 0, "tensor", "", "", key, value.v.dim(), tuple(value.v.shape),
                                    tuple(value.v.stride()), value.v.storage_offset())  # fmt: skip
                args.append(region_text(rec, self.bases))
            else:
                args.append(repr(value))
        self.submitted.append(Submitted(e.kernel, tuple(args), str(e.loc) if e.loc is not None else None, e))
        return super().submit(e, env)


def run_program_recorded(program: Program, args: list[Any], nearest: bool = False) -> tuple[list[Overflow], list[Submitted]]:
    """Run ``program`` on ``args`` (Bounded tensors, updated in place, and Python scalars) with
    its error bounds; returns the overflows it met (in task order) and what every task was
    submitted with, in task order."""
    orch = _RecordingOrch(program, nearest)
    with torch.no_grad():
        orch.run(args)
    return orch.overflows(), orch.submitted


@dataclass(frozen=True)
class SubmitMismatch:
    """A task the orchestration submitted otherwise than the program says."""

    task_id: int
    kernel: str
    sim: tuple[str, ...]
    program: tuple[str, ...]
    call: Any = None  # the IR's Submit node

    def differing(self) -> list[int]:
        """The argument indices whose region or value differ."""
        n = max(len(self.sim), len(self.program))
        return [i for i in range(n) if not _same_args(self.sim[i : i + 1], self.program[i : i + 1])]


def sim_submissions(build: Build, report: RunReport) -> list[tuple[str, tuple[str, ...]]]:
    """Every task of ``report`` (recorded with edges) as (kernel, argument texts), in task order."""
    kernels = [k["name"] for k in build.kernels]
    names = buffer_names(build, report, program_shapes=True)
    by_task: dict[int, list[TaskArgRecord]] = {}
    for a in report.task_args:
        by_task.setdefault(a.task_id, []).append(a)
    func = {t.task_id: t.func_id for t in report.tasks}
    out = []
    for tid in sorted(by_task):
        args = sorted(by_task[tid], key=lambda a: a.arg_index)
        texts = tuple(repr(a.value) if a.kind == "scalar" else region_text(a, names) for a in args)
        out.append((kernels[func[tid]] if tid in func else "?", texts))
    return out


def compare_submissions(sim: list[tuple[str, tuple[str, ...]]], program: list[Submitted]) -> list[SubmitMismatch]:
    """Tasks whose kernel or arguments differ between sim's orchestration and the program's."""
    out = []
    for tid, ((kernel, args), want) in enumerate(zip(sim, program)):
        if kernel != want.kernel or not _same_args(args, want.args):
            out.append(SubmitMismatch(tid, kernel, args, want.args, want.call))
    if len(sim) != len(program):
        tid = min(len(sim), len(program))
        extra = sim[tid] if len(sim) > tid else ("-", ())
        want = program[tid] if len(program) > tid else Submitted("-", (), None)
        out.append(SubmitMismatch(tid, extra[0], extra[1], want.args, want.call))
    return out


def _same_args(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:  # scalars: the same number, up to its rounding to a bf16/f16/f32 scalar
            if math.isclose(float(x), float(y), rel_tol=2.0**-8):
                continue
        except ValueError:
            pass
        return False
    return True


__all__ = [
    "CapturedTask", "Submitted", "SubmitMismatch", "TaskDivergence", "TaskScan", "captured_tasks",
    "compare_submissions", "outside", "run_program_recorded", "scan_tasks", "sim_submissions",
]  # fmt: skip
