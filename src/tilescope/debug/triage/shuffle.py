"""Nondeterminism across schedules: the outputs of runs with randomized ready order, worker
counts and injected delays, compared bit for bit, and the first task, in dependency order, whose
outputs differ between runs (``compare``).

Invariants:
- Every run recorded a level-2 tensor dump and the graph; a task's outputs are its Out and InOut
  arguments as they were right after it ran. Tasks are visited in a topological order of the
  recorded edges (ties by id), so the first task found differing is one whose predecessors all
  agreed: either its inputs differed (it read something outside its declared inputs, or written
  concurrently) or its own outputs were written by someone else while or after it ran.
- Runs pair by task id: every run submits the same tasks (the orchestration is deterministic on
  the same data); a run whose task count differs is reported, not compared.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from tilescope.debug.localize.tasks import CapturedTask
from tilescope.debug.triage.audit import arg_bytes
from tilescope.debug.triage.poison import bits, box_text, mask_boxes
from tilescope.runtime.records import RunReport


@dataclass
class RunOutcome:
    """One shuffled run: its seed and workers, its outputs, its tasks as the dump holds them."""

    seed: int
    workers: int
    outputs: dict[str, torch.Tensor]
    tasks: list[CapturedTask]
    report: RunReport
    failure: str | None = None


@dataclass
class FirstDifference:
    """The first task, in dependency order, whose outputs differ between two runs."""

    task: int
    kernel: str
    arg: int
    param: str
    region: str
    where: str  # the differing elements, in the parameter's coordinates
    elements: int
    runs: tuple[int, int]  # the two runs (their index) that differ
    inputs_agree: bool  # its dumped inputs were the same in both runs
    input_where: str = ""  # inputs_agree False: the first input that differed, and where
    writers: list[int] = field(default_factory=list)  # tasks whose declared outputs overlap what differed

    def text(self) -> str:
        """One line: the task, its output, where it differs, and whether its inputs agreed."""
        who = f" (declared there by task(s) {', '.join(map(str, self.writers))})" if self.writers else ""
        why = (
            "its declared inputs were the same in both runs, so it read or was written by something outside them"
            if self.inputs_agree
            else f"its input {self.input_where} already differed{who}: written concurrently with its reads, or "
            "by a store outside its writer's region (tilescope triage's access audit names which)"
        )
        return (
            f"task {self.task} (kernel {self.kernel}) is the first task whose output differs between runs "
            f"{self.runs[0]} and {self.runs[1]}: {self.param} = {self.region} at {self.where} ({self.elements} "
            f"elements); {why}"
        )


@dataclass
class ShuffleReport:
    """N shuffled runs: whether every output agreed bit for bit, and if not, where."""

    runs: list[RunOutcome] = field(default_factory=list)
    differing_outputs: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (elements, where)
    differing_runs: list[int] = field(default_factory=list)  # runs whose outputs differ from the first's
    masks: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> where it differs
    first: FirstDifference | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def deterministic(self) -> bool:
        """Whether every run finished and every output agreed bit for bit with the first run."""
        return not self.differing_outputs and not self.failures


def topological(report: RunReport) -> list[int]:
    """Task ids in an order every recorded edge respects (ties by id)."""
    n = report.num_tasks
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for e in report.edges:
        if 0 <= e.pred < n and 0 <= e.succ < n and e.pred != e.succ:
            succ[e.pred].append(e.succ)
            indeg[e.succ] += 1
    ready = deque(i for i in range(n) if indeg[i] == 0)
    out = []
    while ready:
        v = ready.popleft()
        out.append(v)
        for s in sorted(succ[v]):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    seen = set(out)
    return out + [i for i in range(n) if i not in seen]  # NOTE: tasks on a cycle (a deadlock), last


def writers_of(report: RunReport, task: int, arg: int) -> list[int]:
    """The other tasks whose declared Out/InOut regions overlap task ``task``'s argument ``arg``
    (compared by byte range: a superset)."""
    mine = next((a for a in report.task_args if a.task_id == task and a.arg_index == arg and a.kind == "tensor"), None)
    if mine is None:
        return []
    lo, hi = arg_bytes(mine)
    return sorted({a.task_id for a in report.task_args if a.kind == "tensor" and a.task_id != task
                   and a.direction in ("out", "inout") and a.buffer_id == mine.buffer_id
                   and arg_bytes(a)[0] < hi and lo < arg_bytes(a)[1]})  # fmt: skip


def compare(runs: list[RunOutcome], params_of) -> ShuffleReport:
    """Compare every run with the first (see the module docstring); ``params_of(func_id)`` gives
    a kernel's parameter names."""
    rep = ShuffleReport(runs=runs, failures=[f"run {i}: {r.failure}" for i, r in enumerate(runs) if r.failure])
    good = [i for i, r in enumerate(runs) if r.failure is None]
    if len(good) < 2:
        return rep
    base = runs[good[0]]
    for name, a in base.outputs.items():
        mask = torch.zeros(a.shape, dtype=torch.bool)
        for i in good[1:]:
            d = bits(a) != bits(runs[i].outputs[name])
            if bool(d.any()) and i not in rep.differing_runs:
                rep.differing_runs.append(i)
            mask |= d
        if bool(mask.any()):
            rep.differing_outputs[name] = (int(mask.sum()), box_text(name, mask_boxes(mask), mask.shape))
            rep.masks[name] = mask
    if not rep.differing_outputs:
        return rep
    order = topological(base.report)
    tasks = [{t.task_id: t for t in runs[i].tasks} for i in good]
    for tid in order:
        a = tasks[0].get(tid)
        if a is None or a.lost:
            continue
        for k in range(1, len(good)):
            b = tasks[k].get(tid)
            if b is None or b.lost:
                continue
            for arg, out_a in a.outputs.items():
                out_b = b.outputs.get(arg)
                if out_b is None or out_a.shape != out_b.shape:
                    continue
                mask = bits(out_a) != bits(out_b)
                if not bool(mask.any()):
                    continue
                names = params_of(a.func_id)
                differing_in = next((i for i, v in a.inputs.items() if torch.is_tensor(v) and not (
                    torch.is_tensor(b.inputs.get(i)) and torch.equal(bits(v), bits(b.inputs[i])))), None)  # fmt: skip
                input_where = ""
                if differing_in is not None:
                    d = bits(a.inputs[differing_in]) != bits(b.inputs[differing_in])
                    iname = names[differing_in]
                    input_where = f"{iname} = {a.regions.get(differing_in, '?')} at {box_text(iname, mask_boxes(d), d.shape)}"
                name = names[arg]
                rep.first = FirstDifference(tid, a.kernel, arg, name, a.regions.get(arg, "?"),
                                            box_text(name, mask_boxes(mask), mask.shape), int(mask.sum()),
                                            (good[0], good[k]), differing_in is None, input_where)  # fmt: skip
                if differing_in is not None:
                    rep.first.writers = writers_of(base.report, tid, differing_in)
                return rep
    return rep
