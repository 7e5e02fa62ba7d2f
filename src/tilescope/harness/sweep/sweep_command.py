"""``tilescope sweep``: run a command over a grid of values and collect one report, each failure
triaged where it ran.

    tilescope sweep --grid platform=sim,interp --grid seed=0:8 --out sweeps/rms \\
        -- python models/rms_norm.py -p {platform} --seed {seed} --save-data

Each case is the command with its grid values in place of ``{NAME}`` (``grid``), run by an engine
(``local``: ``-j N`` cases at once, the CPUs by default; ``ray``: one Ray task per case, on a local
Ray bound to the loopback or the cluster ``--ray-address`` names; ``engines``) in its own
process group with its own build directory (``case_run``); a failed case's build is triaged (``--triage``, on by default) so
the report names culprits, not just failures. ``--out`` receives ``sweep.json`` and an offline
``sweep.html`` (``sweep_report``), rewritten as each case ends; ``--resume`` runs again only the
cases with no result (never run, interrupted, or an error of the command itself) and keeps the
others. A terminal shows one line per case as it ends.

Exit status: 0 every case passed, 1 some did not, 2 bad arguments, 130 interrupted (what ended is
kept; ``--resume`` finishes the rest).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import os_problem
from tilescope.harness.sweep import sweep_report
from tilescope.harness.sweep.engines import Engine, add_engine_args, engine_from_args, run_cases
from tilescope.harness.sweep.grid import Case, GridError, cases
from tilescope.harness.sweep.ray_engine import RayUnavailable

KEPT = ("pass", "fail", "timeout")  # the results --resume keeps; the others run again


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """``tilescope sweep``'s flags and the command after ``--``."""
    p.add_argument("--grid", action="append", default=[], metavar="NAME=VALUES",
                   help="a dimension of the grid: NAME=a,b,c or NAME=START:STOP[:STEP] (integers); {NAME} in the "
                        "command takes each value; repeat for more dimensions (the cases are their product)")  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR", type=PATH_ARG, help="where sweep.json, sweep.html and each case's files go")
    add_engine_args(p)
    p.add_argument("--triage", action=argparse.BooleanOptionalAction, default=True,
                   help="triage each failed case's build where it ran (default: on; the command must save its data, "
                        "--save-data)")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="finish the sweep already in --out: run only the cases with no result, keep the others")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, with {NAME} placeholders")


def run_cli(args: argparse.Namespace) -> int:
    """Run the sweep ``args`` describe; its exit status (see the module docstring)."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        todo = cases(args.grid, command)
        engine = engine_from_args(args)
    except (GridError, ValueError) as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    meta = {"command": command, "grids": args.grid, "engine": args.engine, "cwd": os.getcwd()}
    try:
        claimed = sweep_report.Claimed(out)
    except ValueError as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tilescope sweep: error: cannot write --out {out}: {os_problem(e, out)}", file=sys.stderr)
        return 2
    try:
        return _sweep(args, todo, engine, out, meta)
    finally:
        claimed.release()


def _sweep(args: argparse.Namespace, todo: list[Case], engine: Engine, out: Path, meta: dict[str, Any]) -> int:
    """The sweep, its ``--out`` held (``sweep_report.Claimed``)."""
    order = [c.id for c in todo]
    try:
        kept = _previous(out, meta, args.resume)
        records = {i: r for i, r in kept.items() if r.get("status") in KEPT}
        sweep_report.write(out, meta, records, order)
    except (ValueError, KeyError, TypeError) as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tilescope sweep: error: cannot write --out {out}: {os_problem(e, out)}", file=sys.stderr)
        return 2
    run = [c for c in todo if c.id not in records]
    say = _Say(len(todo), len(records))
    if records:
        say.line(f"{len(records)} of {len(todo)} cases kept from the last run; running {len(run)}")

    def ended(case: Case, record: dict[str, Any]) -> None:
        records[case.id] = record
        sweep_report.write(out, meta, records, order)
        say.case(record)

    try:
        interrupted, nodes = run_cases(engine, run, out, args.triage, os.getcwd(), ended)
    except RayUnavailable as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    if engine.kind == "ray":
        meta["ray_nodes"] = nodes
    sweep_report.write(out, meta, records, order)
    counts = sweep_report.summary([records[i] for i in order if i in records], len(order))
    say.line(", ".join(f"{n} {k}" for k, n in counts.items() if n) + f": {out / sweep_report.SWEEP_HTML}")
    if interrupted:
        say.line(f"interrupted: finish it with tilescope sweep --resume --out {shlex.quote(str(out))} ...")
        return 130
    return 0 if all(records.get(i, {}).get("status") == "pass" for i in order) else 1


def _previous(out: Path, meta: dict[str, Any], resume: bool) -> dict[str, dict[str, Any]]:
    """The records of the sweep already in ``out`` (for ``--resume``); ValueError when ``out``
    holds a sweep that is not to be resumed, or another sweep's records."""
    try:
        data = sweep_report.load(out)
    except (OSError, ValueError) as e:
        raise ValueError(f"{out / sweep_report.SWEEP_JSON} cannot be read ({e}): choose another --out") from None
    if data is None:
        if resume:
            raise ValueError(f"--resume: {out} holds no sweep.json to resume: run the sweep without --resume")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            what = "is not a folder" if not out.is_dir() else "is not empty and holds no sweep"
            raise ValueError(f"--out {out} {what}: choose a new folder (nothing there is overwritten)")
        return {}
    if not resume:
        raise ValueError(f"{out} already holds a sweep: add --resume to finish it, or choose another --out "
                         "(nothing there is overwritten)")  # fmt: skip
    if (data.get("command"), data.get("grids")) != (meta["command"], meta["grids"]):
        raise ValueError(f"--resume: {out} holds the sweep of another command or grid "
                         f"({shlex.join(data.get('command') or [])}): give the same command and --grid, or another --out")  # fmt: skip
    return {r["id"]: r for r in data["cases"] if isinstance(r, dict) and "id" in r}


class _Say:
    """One line per ended case on stderr (``[3/8] fail  seed=2  4.1 s  algorithm ...``)."""

    def __init__(self, total: int, done: int):
        self.total, self.done, self.started = total, done, time.perf_counter()

    def case(self, r: dict[str, Any]) -> None:
        self.done += 1
        t = r.get("triage") or {}
        culprit = " ".join(str(x) for x in (t.get("category"), t.get("kernel"), t.get("op"), t.get("line")) if x)
        why = culprit or r.get("why") or t.get("why") or ""
        label = " ".join(f"{k}={v}" for k, v in r["values"].items())
        self.line(f"[{self.done}/{self.total}] {r['status']:<7} {label}  {r.get('seconds', 0):.1f} s" + (f"  {why}" if why else ""))

    @staticmethod
    def line(text: str) -> None:
        print(f"[sweep] {text}", file=sys.stderr, flush=True)
