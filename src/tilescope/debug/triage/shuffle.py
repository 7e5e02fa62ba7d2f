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

    def text(self) -> str:
        """One line: the task, its output, where it differs, and whether its inputs agreed."""
        why = (
            "its declared inputs were the same in both runs, so it read or was written by something outside them"
            if self.inputs_agree
            else "its declared inputs already differed, written concurrently with its reads"
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
            mask |= bits(a) != bits(runs[i].outputs[name])
        if bool(mask.any()):
            rep.differing_outputs[name] = (int(mask.sum()), box_text(name, mask_boxes(mask), mask.shape))
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
                same_in = all(
                    not torch.is_tensor(v) or (torch.is_tensor(b.inputs.get(i)) and torch.equal(bits(v), bits(b.inputs[i])))
                    for i, v in a.inputs.items()
                )
                name = params_of(a.func_id)[arg]
                rep.first = FirstDifference(tid, a.kernel, arg, name, a.regions.get(arg, "?"),
                                            box_text(name, mask_boxes(mask), mask.shape), int(mask.sum()),
                                            (good[0], good[k]), same_in)  # fmt: skip
                return rep
    return rep
