"""The results of a problem suite as a table and as JSON, and KernelBench's ``fast_p``.

Invariants:
- ``fast_p`` is KernelBench's: the share of all the problems run that are correct *and* whose
  speedup (eager time / solution time) is above ``p``; a problem that was not timed is not fast.
  ``fast_0`` is the share of correct problems (every correct one is timed). With timing off
  (``--perf-trials 0``) there is no fast_p.
- The table and the JSON hold the same values; JSON numbers that are not finite (a NaN or Inf
  error) are the strings ``"nan"``, ``"inf"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tilescope.analysis.report import Report
from tilescope.harness.problems.pairing import Pair
from tilescope.harness.problems.problem_eval import Outcome

FORMAT = "tilescope-problems"
VERSION = 1
COLUMNS = ("problem", "correct", "max abs err", "solution ms", "eager ms", "speedup")


@dataclass(frozen=True)
class RunInfo:
    """How the suite ran: what the summary line and the JSON say besides the problems."""

    platform: str
    trials: int
    perf_trials: int
    seed: int
    refs: str
    solutions: str
    unsolved: int


def fast_p(outcomes: list[Outcome], p: float) -> float:
    """KernelBench's fast_p over ``outcomes``: the share that are correct with a speedup above ``p``."""
    if not outcomes:
        return 0.0
    return sum(1 for o in outcomes if o.correct and o.speedup is not None and o.speedup > p) / len(outcomes)


def _number(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return "0" if value == 0 and spec == ".3g" else format(value, spec)


def cells(o: Outcome) -> tuple[str, ...]:
    """One problem's row, in the order of ``COLUMNS``."""
    speedup = o.speedup
    return (o.pair.name, f"{o.passed}/{o.trials}", _number(o.max_abs_error, ".3g"), _number(o.solution_ms, ".3f"),
            _number(o.eager_ms, ".3f"), "-" if speedup is None else f"{speedup:.2f}x")  # fmt: skip


class Table:
    """Prints the header, then each problem's row (and why it failed) as it is done."""

    def __init__(self, names: list[str], write: Any):
        self.widths = [max(len(COLUMNS[0]), *(len(n) for n in names)), 7, 11, 11, 9, 7]
        self.write = write

    def _line(self, values: tuple[str, ...]) -> str:
        first = values[0].ljust(self.widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:], self.widths[1:])]
        return "  ".join([first, *rest]).rstrip()

    def header(self) -> None:
        """The column names."""
        self.write(self._line(COLUMNS))

    def row(self, o: Outcome) -> None:
        """A problem's row; below it, why it failed and where its data are."""
        self.write(self._line(cells(o)))
        for text in notes(o):
            self.write("  " + text.replace("\n", "\n  "))


def notes(o: Outcome) -> list[str]:
    """The lines under a problem's row: why it failed, and what was saved for triage."""
    out = []
    if o.error:
        out.append(o.error)
    if o.saved:
        out.append(f"data saved; find the culprit with: tilescope triage {o.saved}")
    if o.saved_note:
        out.append(o.saved_note)
    if o.triage is not None:
        out.append(o.triage.render())
    return out


def summary(outcomes: list[Outcome], info: RunInfo) -> str:
    """The last line: correct/total and fast_0, fast_1."""
    correct = sum(o.correct for o in outcomes)
    timed = f"times: median of {info.perf_trials} runs" if info.perf_trials else "not timed: no fast_p"
    fast = (
        f", fast_0 {fast_p(outcomes, 0.0):.3f}, fast_1 {fast_p(outcomes, 1.0):.3f}"
        if info.perf_trials
        else ""
    )
    line = (f"{correct}/{len(outcomes)} correct{fast} ({len(outcomes)} problems on {info.platform}, "
            f"{info.trials} trials each, seed {info.seed}; {timed})")  # fmt: skip
    if info.unsolved:
        line += f"\n{info.unsolved} reference(s) under {info.refs} have no solution under {info.solutions}: not run"
    return line


def _finite(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return str(value)


def _number_back(value: Any) -> float | None:
    return float(value) if isinstance(value, str) else value


def outcome_from_json(item: dict[str, Any], pair: Pair) -> Outcome:
    """The Outcome of ``pair`` that one entry of ``to_json``'s ``problems`` describes (a problem
    run in a process of its own, ``problem_cases``)."""
    triage = item.get("triage")
    return Outcome(pair, int(item["trials"]), int(item["trials_correct"]), _number_back(item.get("max_abs_error")),
                   item.get("atol"), item.get("solution_ms"), item.get("eager_ms"), item.get("error"),
                   item.get("build"), item.get("note"),
                   Report.from_json(triage) if isinstance(triage, dict) else None)  # fmt: skip


def to_json(outcomes: list[Outcome], info: RunInfo) -> dict[str, Any]:
    """The suite's results as one JSON object."""
    problems = []
    for o in outcomes:
        problems.append({
            "name": o.pair.name,
            "reference": str(o.pair.reference or o.pair.expected_reference),
            "solution": str(o.pair.solution),
            "correct": o.correct,
            "trials_correct": o.passed,
            "trials": o.trials,
            "max_abs_error": _finite(o.max_abs_error),
            "atol": o.tol,
            "rtol": o.tol,
            "solution_ms": o.solution_ms,
            "eager_ms": o.eager_ms,
            "speedup": o.speedup,
            "error": o.error,
            "build": o.saved,
            "triage_command": f"tilescope triage {o.saved}" if o.saved else None,
            "note": o.saved_note,
            "triage": o.triage.to_json() if o.triage is not None else None,
        })  # fmt: skip
    return {
        "format": FORMAT,
        "version": VERSION,
        "platform": info.platform,
        "trials": info.trials,
        "perf_trials": info.perf_trials,
        "seed": info.seed,
        "refs": info.refs,
        "solutions": info.solutions,
        "problems": problems,
        "summary": {
            "total": len(outcomes),
            "correct": sum(o.correct for o in outcomes),
            "fast_0": fast_p(outcomes, 0.0) if info.perf_trials else None,
            "fast_1": fast_p(outcomes, 1.0) if info.perf_trials else None,
            "unsolved": info.unsolved,
        },
    }


__all__ = ["COLUMNS", "FORMAT", "RunInfo", "Table", "cells", "fast_p", "notes", "outcome_from_json", "summary",
           "to_json"]
