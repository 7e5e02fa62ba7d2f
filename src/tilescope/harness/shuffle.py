"""Is the answer the same on every schedule? ``--shuffle N`` and the ``race`` step of
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
from collections.abc import Callable
from typing import Any

import torch

from tilescope.debug.localize.tasks import captured_tasks
from tilescope.debug.observers import Recording
from tilescope.debug.triage.poison import bits
from tilescope.debug.triage.shuffle import RunOutcome, ShuffleReport, compare
from tilescope.errors import RuntimeFailure
from tilescope.harness.recorded import recorded_run
from tilescope.launch.program import CompiledProgram


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
