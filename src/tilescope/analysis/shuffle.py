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
- Runs that all fail the same way (``same_failure``) say nothing about schedules: the failure is
  reported as it is, never as nondeterminism. The runs' schedule is the analysis's own
  (``RunConfig.for_analysis``): ``TILESCOPE_SERIAL`` does not stop them being shuffled.

Running it:
Is the answer the same on every schedule? ``--shuffle N`` and the ``race`` step of
``tilescope triage``.

``shuffle_runs`` runs the build N times on sim on copies of the same inputs, each run with its
own seed for the core's randomized schedule (``ts_run_config::shuffle_seed``: ready tasks taken
in random order, every successor queued rather than handed to the worker that readied it, random
delays before kernels)
and its own worker count, each recording a level-2 tensor dump and the graph; then
``debug.triage.shuffle.compare`` compares the outputs bit for bit and names the first task, in
dependency order, whose outputs differ. The seeds are printed with the result, so a differing
pair of runs can be run again.
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.audit import arg_bytes
from tilescope.analysis.localize.tasks import CapturedTask, captured_tasks
from tilescope.analysis.poison import bits, box_text, mask_boxes
from tilescope.analysis.recorded import recorded_run
from tilescope.errors import RuntimeFailure
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import Recording


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

    @property
    def same_failure(self) -> str | None:
        """The failure every run ended with, when each ended with the same one: it does not depend on
        the schedule, so it is no evidence of a race (None otherwise)."""
        said = {r.failure for r in self.runs}
        return said.pop() if len(self.runs) > 1 and len(said) == 1 and None not in said else None


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


def worker_counts(n: int, rng: random.Random) -> list[int]:
    """A worker count per run: 2, 3, 4 and twice the CPUs first, then random among them."""
    choices = sorted({2, 3, 4, max(4, 2 * (os.cpu_count() or 1))})
    return [choices[i] if i < len(choices) else rng.choice(choices) for i in range(n)]


def shuffle_runs(
    build: CompiledProgram,
    inputs: dict[str, Any],
    n: int,
    *,
    seed: int | None = None,
    say: Callable[[str], None] | None = None,
    deadline: float | None = None,
) -> ShuffleReport:
    """``n`` shuffled runs of ``build`` on ``inputs``, compared (see the module docstring);
    ``say`` hears one line per run. No run starts after ``deadline`` (``time.perf_counter()``),
    except the first two."""
    rng = random.Random(seed)
    capture = Recording(record_edges=True, dump_level=2)
    runs = []
    for i, workers in enumerate(worker_counts(n, rng)):
        if deadline is not None and i >= 2 and time.perf_counter() > deadline:
            break
        run_seed = rng.randrange(1, 1 << 31)
        try:
            args, report = recorded_run(build, inputs, capture, shuffle=(workers, run_seed))
        except RuntimeFailure as e:
            failure = getattr(e, "failure", None)
            text = failure.message if failure is not None else str(e)
            runs.append(RunOutcome(run_seed, workers, {}, [], getattr(e, "report", None), text))
            if say:
                say(f"run {i + 1}/{n} (seed {run_seed}, {workers} workers): failed: {text.splitlines()[0]}")
            continue
        outputs = {a.name: args[k] for k, a in enumerate(build.args) if a.is_output}
        same = bool(runs) and runs[0].failure is None and all(
            torch.equal(bits(v), bits(runs[0].outputs[k])) for k, v in outputs.items())  # fmt: skip
        # NOTE: a run that agrees with the first keeps no dump: only differing runs are compared task by task
        runs.append(RunOutcome(run_seed, workers, outputs, [] if same else captured_tasks(build, report), report))
        if say:
            say(f"run {i + 1}/{n} (seed {run_seed}, {workers} workers): {report.num_tasks} tasks")
    return compare(runs, lambda f: [p["name"] for p in build.kernels[f].get("params", [])])


def shuffle_lines(rep: ShuffleReport) -> list[str]:
    """What the runs show, one finding a line."""
    if rep.deterministic:
        return [f"all {len(rep.runs)} shuffled runs gave the same outputs, bit for bit"]
    if rep.same_failure is not None:
        return [f"every one of the {len(rep.runs)} shuffled runs failed the same way, whatever its schedule: "
                f"{rep.same_failure}"]  # fmt: skip
    out = list(rep.failures)
    out += [f"output {name} differs between runs at {where} ({n} elements)" for name, (n, where) in rep.differing_outputs.items()]
    if rep.differing_runs:
        base = rep.runs[0]
        others = ", ".join(f"seed {rep.runs[i].seed} on {rep.runs[i].workers} workers" for i in rep.differing_runs)
        out.append(f"the first run (seed {base.seed} on {base.workers} workers) differs from: {others}")
    if rep.first is not None:
        out.append(rep.first.text())
    elif rep.differing_outputs:
        out.append("no task's own outputs differed between the runs: the last writes to those elements came in a "
                   "different order (tasks that write one region with no dependency between them)")  # fmt: skip
    return out
