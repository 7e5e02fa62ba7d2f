"""What a harness run can ask for beyond its comparison: ``--localize``, ``--triage``,
``--poison`` and ``--shuffle N`` (``run_jit(localize=, triage=, poison=, shuffle=)``).

Invariants: each works on the exact data of this run (its inputs before the run, its golden);
the data are saved for it under the build (``data/`` when this run saved them, else
``dfx_outputs/<tool>/data``, replacing that tool's last copy); a check that cannot run is said in
one line and never changes the run's own result.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.audit import audit_run
from tilescope.analysis.data import Second, save_snapshot
from tilescope.analysis.golden_trace import GoldenTrace
from tilescope.analysis.localize.localize_command import internal_error, localize
from tilescope.analysis.poison import Poisoned, poison_run
from tilescope.analysis.progress import Progress
from tilescope.analysis.report import Report
from tilescope.analysis.shuffle import shuffle_lines, shuffle_runs
from tilescope.analysis.triage.triage_command import triage
from tilescope.build.paths import DATA_DIR, LOCALIZE_DATA, dfx_dir, inside, os_problem
from tilescope.build.state import source_hashes
from tilescope.errors import TilescopeError
from tilescope.launch.program import CompiledProgram


@dataclass(frozen=True)
class Checks:
    """The checks a harness run asked for."""

    localize: bool = False  # a failed comparison: name the culprit (tilescope localize)
    triage: bool = False  # any failure: classify it and name the culprit (tilescope triage)
    poison: bool = False  # two poisoned runs: outputs that depend on never-written memory
    shuffle: int = 0  # this many shuffled runs, compared bit for bit
    fix: bool = False  # triage's culprit: propose an edit and verify it on this run's data (triage --fix)
    budget: float | None = None  # triage's budget in CPU seconds (None: TILESCOPE_TRIAGE_BUDGET, else 60)

    def problem(self) -> str | None:
        """Why these options cannot be used as given (None: they can)."""
        if not isinstance(self.shuffle, int) or isinstance(self.shuffle, bool) or not 0 <= self.shuffle <= 1000:
            return f"shuffle={self.shuffle!r}: expected a number of runs in 0..1000 (0: none)"
        if self.shuffle == 1:
            return "shuffle=1: one run compares with nothing; ask for at least 2"
        b = self.budget
        if b is not None and (isinstance(b, bool) or not isinstance(b, int | float) or not 0 < b < float("inf")):
            return f"budget={b!r}: expected a number of seconds > 0 (triage's CPU time), or None for the default"
        if b is not None and not self.triage:
            return f"budget={b!r} is triage's budget: ask for triage (--triage, or --fix) too, or drop it"
        return None


NO_CHECKS = Checks()


@dataclass
class RunData:
    """This run's data, as a check needs them."""

    build: CompiledProgram
    before: dict[str, Any]  # the inputs before the run
    golden: dict[str, torch.Tensor]
    references: dict[str, torch.Tensor]
    data: str | os.PathLike | None  # --golden-data's directory, if the run replayed one
    saved: bool  # this run saved its data into the build's data/
    rtol: float
    atol: float
    trace: GoldenTrace | None = None  # the golden's steps (analysis.golden_trace)
    second: Callable[[], Second] | None = None  # a second input set from the specs and its golden

    def directory(self, tool: str) -> Path:
        """A data directory holding this run's data (saved for ``tool`` when no other holds it)."""
        if self.data is not None:
            return Path(self.data)
        if self.saved:
            return inside(self.build.work_dir, DATA_DIR)
        where = inside(dfx_dir(self.build.work_dir), tool, LOCALIZE_DATA)
        if where.is_dir():
            shutil.rmtree(where)  # the tool's own copy from an earlier run
        meta = {"rtol": self.rtol, "atol": self.atol, "sources": source_hashes(self.build.work_dir, self.build.config)}
        return save_snapshot(where, list(self.build.args), self.before, self.golden, meta, self.references,
                             self.trace, second_set(self.second, lambda line: None))


def second_set(make: Callable[[], Second] | None, say: Callable[[str], None]) -> Second | None:
    """The second input set a run's data are saved with (None when the run has none, or when it
    cannot be drawn: ``say`` says why, and a fix is then verified on the saved data alone)."""
    if make is None:
        return None
    try:
        return make()
    except Exception as e:  # noqa: BLE001 - golden_fn on other inputs: the run's result never depends on it
        say(f"[RUN] no second input set is saved ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
            "triage --fix verifies on the saved inputs alone")  # fmt: skip
        return None


def _guarded(tool: str, say: Callable[[str], None], fn: Callable[[], Any]) -> Any:
    """``fn()``; what stops it is said in one line (a defect of the tool too), and None returned."""
    try:
        return fn()
    except TilescopeError as e:
        say(f"[{tool}] cannot {tool}: {str(e).splitlines()[0]}")
    except OSError as e:
        say(f"[{tool}] cannot {tool}: {os_problem(e)}")
    except Exception as e:  # noqa: BLE001 - the tool's own defect must not take the run's result with it
        say(f"[{tool}] cannot {tool}: {internal_error(e, tool)}")
    return None


def _verdict(tool: str, fn, run: RunData, say: Callable[[str], None], **kw: Any) -> Report | None:
    """``fn`` (localize or triage) on this run's data; prints the verdict."""
    rep = _guarded(tool, say, lambda: fn(run.build.work_dir, run.directory(tool), rtol=run.rtol, atol=run.atol, **kw))
    if rep is not None:
        say(rep.render())
    return rep


def localize_run(run: RunData, say: Callable[[str], None]) -> Report | None:
    """Localize this run's failed comparison; prints the verdict."""
    return _verdict("localize", localize, run, say)


def triage_run(run: RunData, say: Callable[[str], None], fix: bool = False, budget: float | None = None) -> Report | None:
    """Triage this run's failure (with ``fix``, propose a verified edit) within ``budget`` CPU
    seconds (None: the default); prints the verdict."""
    return _verdict("triage", triage, run, say, fix=fix, budget=budget)


def poison_check(run: RunData, say: Callable[[str], None]) -> Poisoned | None:
    """Two poisoned runs of this run's inputs; prints what they show."""
    found = _guarded("poison", say, lambda: poison_run(run.build, run.before))
    if found is None:
        return None
    lines = found.lines()
    say("[poison] " + (lines[0] if lines else "no output depends on memory nothing wrote, and every task stored "
                                              "its whole output"))  # fmt: skip
    for line in lines[1:]:
        say(f"  - {line}")
    return found


def shuffle_check(run: RunData, n: int, say: Callable[[str], None]):
    """``n`` shuffled runs of this run's inputs; prints whether they agreed, and if not, where."""
    rep = _guarded("shuffle", say, lambda: shuffle_runs(run.build, run.before, n, say=Progress("shuffle")))
    if rep is None:
        return None
    lines = shuffle_lines(rep)
    if rep.same_failure is not None:  # NOTE: a failure that does not depend on the schedule says nothing of one
        say("[shuffle] no schedules compared: " + lines[0])
        return rep
    say(("[shuffle] deterministic: " if rep.deterministic else "[shuffle] NOT deterministic: ") + lines[0])
    for line in lines[1:]:
        say(f"  - {line}")
    if not rep.deterministic:  # NOTE: what could make it so: accesses no dependency orders
        for line in _hazard_lines(run, rep):
            say(f"  - {line}")
    return rep


def _hazard_lines(run: RunData, rep) -> list[str]:
    """The access audit's unordered pairs and out-of-region accesses that touch the task the
    shuffled runs named (all of them when none was named), at most five of each."""
    a = _guarded("shuffle", lambda _: None, lambda: audit_run(run.build, run.before))
    if a is None:
        return ["the access audit could not run: see tilescope triage"]
    first = rep.first
    tasks = None if first is None else {first.task, *first.writers}
    strays = [st for st in a.strays if tasks is None or st.access.task in tasks][:5]
    pairs = [h for h in a.hazards if tasks is None or {h.first.task, h.second.task} & tasks][:5]
    if not strays and not pairs:
        return ["the access audit found every access inside its task's regions, and every overlapping pair ordered"]
    return [f"access audit: {a.stray_text(st)}" for st in strays] + [f"access audit: {a.hazard_text(h)}" for h in pairs]


__all__ = ["NO_CHECKS", "Checks", "RunData", "localize_run", "poison_check", "shuffle_check", "triage_run"]
