"""``tilescope problems --engine local|ray``: each problem of a suite run as a case of the sweep
engines (``harness.sweep.engines``), in a process of its own, on this machine (``-j`` at once) or
as a Ray task.

A problem's case is ``tilescope problems --problem NAME`` with the same trials, seed, timing,
triage and run and compile flags; it writes its one-problem JSON to ``$TILESCOPE_SWEEP_RESULT``
and the driver turns it back into the problem's row. ``--out`` holds each case's files
(``cases/<id>/``: its output, its builds, a wrong answer's saved data and triage report) and the
sweep's ``sweep.json`` and ``sweep.html``.

Invariants:
- The table, the summary and ``--json`` are the ones a run in this process gives; rows print as
  problems end, the JSON keeps the suite's order.
- A problem whose process crashed, timed out or gave no JSON is a failed row saying so, with the
  end of its output and the path of the whole; the others go on.
- A wrong answer's ``build`` names its folder under ``--out`` (where it came back to), so
  ``tilescope triage BUILD`` runs on it here, whichever engine ran it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from tilescope.build.paths import DFX_DIR, LOCALIZE_JSON, TRIAGE_DIR, inside, os_problem
from tilescope.errors import TilescopeError
from tilescope.harness.flags import knob_argv
from tilescope.harness.problems.pairing import Pair, ProblemsError, Suite
from tilescope.harness.problems.problem_eval import Outcome
from tilescope.harness.problems.problem_table import Table, outcome_from_json
from tilescope.harness.sweep import sweep_report
from tilescope.harness.sweep.engines import Engine, run_cases
from tilescope.harness.sweep.grid import Case
from tilescope.harness.sweep.ray_engine import RayUnavailable

LOG_TAIL = 6  # lines of a failed process's output shown under its row
LOG_TAIL_BYTES = 16 << 10  # read from the end of its output for them
# NOTE: a case's argv is fixed before it runs, and where its result goes is known only where it
# runs where it runs (a Ray worker's folder): the shell puts the path the case runner gives in
# $TILESCOPE_SWEEP_RESULT, and takes it out of the environment the solutions see
_JSON_TO_RESULT = 'r=$TILESCOPE_SWEEP_RESULT; unset TILESCOPE_SWEEP_RESULT; exec "$0" "$@" --json "$r"'


class Interrupted(TilescopeError):
    """Ctrl-C while problems ran: what ended is in the table and in ``--out``."""


def default_out(base: Path) -> Path:
    """A new folder for one run's cases under ``base``, made: ``problems-YYYYmmdd-HHMMSS`` (a count
    added when that name is taken, by another run started the same second too)."""
    stem = base / time.strftime("problems-%Y%m%d-%H%M%S")
    out, n = stem, 1
    while True:
        try:
            out.mkdir(parents=True)
            return out
        except FileExistsError:
            n += 1
            out = stem.with_name(f"{stem.name}_{n}")
        except OSError as e:
            raise ProblemsError(f"cannot make a folder for the problems' cases under {base}: {os_problem(e, out)}; "
                                "pass --out DIR") from None  # fmt: skip


def make_out(out: Path) -> sweep_report.Claimed:
    """``out``, a new or empty folder, made and held for this run; ProblemsError when it holds
    files, another run holds it, or it cannot be made."""
    try:
        if out.is_dir() and any(out.iterdir()):
            raise ProblemsError(f"--out {out} is not empty: choose a new folder (nothing there is overwritten)")
        claimed = sweep_report.Claimed(out)
    except ValueError as e:
        raise ProblemsError(str(e)) from None
    except OSError as e:
        raise ProblemsError(f"cannot make --out {out}: {os_problem(e, out)}") from None
    if any(out.iterdir()):  # NOTE: another run filled it between the look and the lock
        claimed.release()
        raise ProblemsError(f"--out {out} is not empty: choose a new folder (nothing there is overwritten)")
    return claimed


def problem_argv(args: argparse.Namespace, suite: Suite, pair: Pair, options: dict[str, Any]) -> list[str]:
    """The command that runs ``pair`` alone the way ``args`` run the suite, its JSON into
    ``$TILESCOPE_SWEEP_RESULT``."""
    argv = [sys.executable, "-m", "tilescope", "problems", "--refs", str(suite.refs.resolve()),
            "--solutions", str(suite.solutions.resolve()), f"--problem={pair.name}", "--trials", str(args.trials),
            "--perf-trials", str(args.perf_trials), "--seed", str(args.seed)]  # fmt: skip
    if args.triage:
        argv.append("--triage")
    if args.budget is not None:
        argv += ["--budget", str(args.budget)]
    return ["sh", "-c", _JSON_TO_RESULT, *argv, *knob_argv(options)]


def run_on_engine(args: argparse.Namespace, engine: Engine, suite: Suite, options: dict[str, Any],
                  table: Table, out: Path) -> list[Outcome]:  # fmt: skip
    """Every problem of ``suite`` as a case on ``engine`` (its files in ``out``, ``make_out``), each row written to ``table`` as it ends;
    the outcomes in the suite's order.

    Raises:
        ProblemsError: Ray cannot be used.
        Interrupted: Ctrl-C (every row that ended was written).
    """
    pairs = {f"p{i:04d}": pair for i, pair in enumerate(suite.pairs)}
    run = [Case(cid, {"problem": pair.name}, tuple(problem_argv(args, suite, pair, options)))
           for cid, pair in pairs.items()]  # fmt: skip
    meta = {"command": [sys.executable, "-m", "tilescope", *getattr(args, "argv", ["problems"])], "grids": ["problem"],
            "engine": engine.kind, "cwd": os.getcwd()}  # fmt: skip
    records: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, Outcome] = {}

    def ended(case: Case, record: dict[str, Any]) -> None:
        outcome = _outcome(pairs[case.id], record, out, args.trials)
        record["triage"] = _triage_cell(outcome, out)
        if record["status"] == "pass" and not outcome.correct:
            record["status"] = "fail"  # NOTE: the page's status is the problem's, not only its exit status
        records[case.id] = record
        sweep_report.write(out, meta, records, list(pairs))
        outcomes[case.id] = outcome
        table.row(outcome)

    try:
        interrupted, _ = run_cases(engine, run, out, False, os.getcwd(), ended)
    except RayUnavailable as e:
        raise ProblemsError(str(e)) from None
    if interrupted:
        raise Interrupted(f"interrupted: {len(outcomes)} of {len(pairs)} problems ended; their cases are in {out}")
    return [outcomes[cid] for cid in pairs]


def _outcome(pair: Pair, record: dict[str, Any], out: Path, trials: int) -> Outcome:
    """The problem's Outcome from its case's record: its own JSON, or why there is none."""
    result = record.get("result")
    items = result.get("problems") if isinstance(result, dict) else None
    ours = isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict)
    if ours and items[0].get("name") == pair.name and record["status"] in ("pass", "fail"):
        try:
            outcome = outcome_from_json(items[0], pair)
        except (KeyError, TypeError, ValueError) as e:
            return Outcome(pair, trials, error=f"its process's JSON cannot be read ({type(e).__name__}: {e})")
        outcome.saved = _here(outcome.saved, record, out)
        return outcome
    why = {"timeout": "its process ran past --timeout and was killed",
           "interrupted": "it was stopped while it ran",
           "pass": "its process exited 0 without writing its result (a solution that ends the process?)"}.get(
               record["status"])  # fmt: skip
    why = why or record.get("result_error") or f"its process gave no result ({record.get('why') or record['status']})"
    log = out / record["log"] if record.get("log") else None
    return Outcome(pair, trials, error=f"{why}{_tail(log)}")


def _here(saved: str | None, record: dict[str, Any], out: Path) -> str | None:
    """The build a case saved data in, as the folder it came back to under ``out``."""
    if not saved:
        return saved
    name = Path(saved).name
    for b in record.get("builds") or []:
        if Path(b).name == name:
            return str(out / b)
    return saved


def _tail(log: Path | None) -> str:
    if log is None or not log.is_file():
        return ""
    with open(log, "rb") as f:  # NOTE: the end only: a solution may print megabytes
        f.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
        text = f.read().decode(errors="replace")
    lines = [x if len(x) <= 300 else x[:300] + " …" for x in text.rstrip().splitlines()[-LOG_TAIL:]]
    return f"; its output ({log}) ends:\n" + "\n".join(lines) if lines else f"; its output ({log}) is empty"


def _triage_cell(outcome: Outcome, out: Path) -> dict[str, Any] | None:
    """What ``sweep.html`` shows of a problem's triage: its category and culprit, and its report."""
    report = outcome.triage
    if report is None:
        return None
    c = report.culprit
    cell = {"ran": True, "category": report.category, "summary": report.summary, "task": c.task, "kernel": c.kernel,
            "op": c.op, "line": c.dsl_line}  # fmt: skip
    if outcome.saved:
        try:
            found = inside(outcome.saved, DFX_DIR, TRIAGE_DIR, LOCALIZE_JSON)
        except TilescopeError:
            return cell
        if found.is_file():
            cell["report"] = os.path.relpath(found, out)
    return cell


__all__ = ["Interrupted", "make_out", "default_out", "problem_argv", "run_on_engine"]
