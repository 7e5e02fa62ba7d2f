"""``tilescope sweep``: run a command over a grid of values and collect one report, each failure
triaged where it ran.

    tilescope sweep --grid platform=sim,interp --grid seed=0:8 --out sweeps/rms \\
        -- python models/rms_norm.py -p {platform} --seed {seed} --save-data

Each case is the command with its grid values in place of ``{NAME}`` (``grid``), run by an engine
(``local``: ``-j N`` cases at once, the CPUs by default; ``ray``: one Ray task per case, on a local
Ray bound to the loopback or the cluster ``--ray-address`` names, ``ray_engine``) in its own
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
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from tilescope.analysis.progress import seconds_arg
from tilescope.build.path_args import PATH_ARG
from tilescope.harness.sweep import sweep_report
from tilescope.harness.sweep.case_run import run_case, stop_all
from tilescope.harness.sweep.grid import Case, GridError, cases
from tilescope.harness.sweep.ray_engine import RayUnavailable, run_on_ray

KEPT = ("pass", "fail", "timeout")  # the results --resume keeps; the others run again


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """``tilescope sweep``'s flags and the command after ``--``."""
    p.add_argument("--grid", action="append", default=[], metavar="NAME=VALUES",
                   help="a dimension of the grid: NAME=a,b,c or NAME=START:STOP[:STEP] (integers); {NAME} in the "
                        "command takes each value; repeat for more dimensions (the cases are their product)")  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR", type=PATH_ARG, help="where sweep.json, sweep.html and each case's files go")
    p.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="where cases run: local (processes on this machine, -j at once) or ray (Ray tasks on a "
                        "local Ray bound to 127.0.0.1, or on the cluster --ray-address names)")  # fmt: skip
    p.add_argument("-j", "--jobs", type=_positive_int, default=None, metavar="N",
                   help="cases run at once by the local engine (default: the CPUs)")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --engine ray: the cluster to use (auto: the one `ray start` made here; ray://host:port); "
                        "default: a local Ray started for the sweep on 127.0.0.1")  # fmt: skip
    p.add_argument("--ray-shared", action="store_true",
                   help="with --engine ray: the workers see --out at the same path (a shared filesystem), so cases "
                        "write there; by default their files come back through Ray's object store")  # fmt: skip
    p.add_argument("--case-cpus", type=_positive_float, default=1.0, metavar="N",
                   help="with --engine ray: the CPUs Ray reserves for each case (default: 1)")
    p.add_argument("--timeout", type=seconds_arg, default=None, metavar="SECONDS",
                   help="a case still running after this long is killed and reported as a timeout (default: none)")
    p.add_argument("--triage", action=argparse.BooleanOptionalAction, default=True,
                   help="triage each failed case's build where it ran (default: on; the command must save its data, "
                        "--save-data)")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="finish the sweep already in --out: run only the cases with no result, keep the others")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, with {NAME} placeholders")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: expected a number of CPUs > 0")
    return v


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected at least 1")
    return n


def run_cli(args: argparse.Namespace) -> int:
    """Run the sweep ``args`` describe; its exit status (see the module docstring)."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        todo = cases(args.grid, command)
    except GridError as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    meta = {"command": command, "grids": args.grid, "engine": args.engine, "cwd": os.getcwd()}
    try:
        kept = _previous(out, meta, args.resume)
    except ValueError as e:
        print(f"tilescope sweep: error: {e}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    records = {i: r for i, r in kept.items() if r.get("status") in KEPT}
    run = [c for c in todo if c.id not in records]
    order = [c.id for c in todo]
    sweep_report.write(out, meta, records, order)
    say = _Say(len(todo), len(records))
    if records:
        say.line(f"{len(records)} of {len(todo)} cases kept from the last run; running {len(run)}")

    def ended(case: Case, record: dict[str, Any]) -> None:
        records[case.id] = record
        sweep_report.write(out, meta, records, order)
        say.case(record)

    if args.engine == "ray":
        try:
            interrupted, meta["ray_nodes"] = run_on_ray(run, out, args.timeout, args.triage, args.ray_address,
                                                        args.ray_shared, args.case_cpus, os.getcwd(), ended)  # fmt: skip
        except RayUnavailable as e:
            print(f"tilescope sweep: error: {e}", file=sys.stderr)
            return 2
    else:
        interrupted = _local(run, out, args, ended)
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
        return {}
    if not resume:
        raise ValueError(f"{out} already holds a sweep: add --resume to finish it, or choose another --out "
                         "(nothing there is overwritten)")  # fmt: skip
    if (data.get("command"), data.get("grids")) != (meta["command"], meta["grids"]):
        raise ValueError(f"--resume: {out} holds the sweep of another command or grid "
                         f"({shlex.join(data.get('command') or [])}): give the same command and --grid, or another --out")  # fmt: skip
    return {r["id"]: r for r in data["cases"] if isinstance(r, dict) and "id" in r}


def _local(run: list[Case], out: Path, args: argparse.Namespace, ended: Callable[[Case, dict[str, Any]], None]) -> bool:
    """Run ``run`` on this machine, ``-j`` at once, calling ``ended(case, record)`` as each ends;
    whether the sweep was interrupted."""
    jobs = args.jobs or os.cpu_count() or 1
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="sweep")
    pending: dict[Future, Case] = {}
    queue = list(run)
    try:
        while queue or pending:
            while queue and len(pending) < jobs:
                c = queue.pop(0)
                pending[pool.submit(run_case, c, str(out), args.timeout, args.triage)] = c
            done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in done:
                c = pending.pop(f)
                ended(c, _record(f, c))
        return False
    except KeyboardInterrupt:
        stop_all()
        for f, c in pending.items():
            ended(c, _record(f, c))
        return True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _record(f: Future, c: Case) -> dict[str, Any]:
    """The case's record; a defect of the runner itself is the case's ``error``, never the sweep's end."""
    try:
        return f.result()
    except Exception as e:  # noqa: BLE001 - one case's runner failing must not stop the sweep
        return {"id": c.id, "values": c.values, "argv": list(c.argv), "status": "error", "log": "",
                "why": f"the case could not be run: {type(e).__name__}: {e}", "builds": [], "triage": None}  # fmt: skip


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
