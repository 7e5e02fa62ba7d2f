"""One case of a sweep, run where an engine puts it: the command in its own process group with the
case's own build directory, its output kept, and for a failure the triage of its build.

Invariants:
- A case's files live in ``OUT/cases/<id>/``: ``output.log`` (the command's stdout and stderr),
  ``builds/`` (``TILESCOPE_BUILD_DIR`` for the command), ``triage.json`` (the triage report of a
  failed case's build), ``result.json`` (what the command wrote to ``$TILESCOPE_SWEEP_RESULT``,
  when it did). Nothing else is written.
- A command may write one JSON value to the path ``$TILESCOPE_SWEEP_RESULT`` names: the record
  holds it as ``result`` (``result_error`` says why a file there could not be read), so what a
  case measured travels back with its status from any engine.
- Status: ``pass`` (exit 0), ``fail`` (exit 1: the harness's failed comparison or a failed
  check), ``error`` (any other exit, or the command could not start), ``timeout`` (still running
  after ``timeout`` seconds: its whole process group is killed), ``interrupted`` (the sweep was
  stopped while it ran).
- The record is plain JSON (what ``sweep.json`` holds), so an engine can ship it back from
  another machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tilescope.build.paths import BUILD_STATE, DATA_DIR, inside
from tilescope.errors import TilescopeError
from tilescope.harness.sweep.grid import Case

STATUSES = ("pass", "fail", "error", "timeout", "interrupted")
RESULT_JSON = "result.json"
RESULT_MAX_BYTES = 16 << 20
TRIAGE_TIMEOUT_S = 600.0  # a triage that runs this long is stopped (its budget is CPU time: far less)

_live: set[subprocess.Popen] = set()
_lock = threading.Lock()


def case_dir(out: Path, case: Case) -> Path:
    """The folder of ``case``'s files in the sweep's ``out``."""
    return out / "cases" / case.id


def run_case(case: Case, out: str | os.PathLike, timeout: float | None, triage: bool, cwd: str | None = None) -> dict[str, Any]:
    """Run ``case`` and return its record (see the module docstring)."""
    folder = case_dir(Path(out), case)
    builds = folder / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    log = folder / "output.log"
    result = folder / RESULT_JSON
    result.unlink(missing_ok=True)  # NOTE: an interrupted earlier run's answer is not this run's
    env = dict(os.environ, TILESCOPE_BUILD_DIR=str(builds.resolve()), TILESCOPE_SWEEP_RESULT=str(result.resolve()))
    record: dict[str, Any] = {"id": case.id, "values": case.values, "argv": list(case.argv),
                              "log": str(log.relative_to(out)), "builds": [], "triage": None}  # fmt: skip
    started = time.perf_counter()
    try:
        rc = run_in_group(list(case.argv), log, env, timeout, case.cwd or cwd)
    except OSError as e:
        record.update(status="error", returncode=None, why=f"the command could not start: {e}",
                      seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        log.write_text(f"{record['why']}\n")
        return record
    record["seconds"] = round(time.perf_counter() - started, 3)
    record["returncode"] = rc
    if rc is None:
        record.update(status="timeout", why=f"still running after {timeout:g} s: its process group was killed")
    elif rc == 0:
        record["status"] = "pass"
    elif rc == 1:
        record["status"] = "fail"
    elif rc < 0 and -rc in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL) and _stopping.is_set():
        record.update(status="interrupted", why="the sweep was stopped while it ran")
    else:
        record.update(status="error", why=f"exit status {rc}" + (f" (signal {-rc})" if rc < 0 else ""))
    record["builds"] = [str(p.relative_to(out)) for p in made_builds(builds)]
    _read_result(record, result)
    if triage and record["status"] in ("fail", "error", "timeout") and not _stopping.is_set():
        record["triage"] = _triage(Path(out), folder, record["builds"], cwd)
    return record


_stopping = threading.Event()


def _read_result(record: dict[str, Any], path: Path) -> None:
    """The JSON value the command left at ``path`` as the record's ``result`` (or why it cannot be)."""
    try:
        if not path.exists() and not path.is_symlink():
            return
        if path.is_symlink() or not path.is_file():
            record["result_error"] = f"{RESULT_JSON} is not a plain file: not read"
            return
        if path.stat().st_size > RESULT_MAX_BYTES:
            record["result_error"] = f"{RESULT_JSON} is over {RESULT_MAX_BYTES >> 20} MiB: not read"
            return
        record["result"] = json.loads(path.read_text(), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as e:
        record["result_error"] = f"{RESULT_JSON} cannot be read: {type(e).__name__}: {e}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (write it as a string)")


def stop_all() -> None:
    """Kill every case still running here (the sweep was interrupted), and every case that starts
    from now on, as it starts, until ``resume_all``."""
    _stopping.set()
    with _lock:
        for p in list(_live):
            _kill(p)


def resume_all() -> None:
    """Cases run again (a new batch of the sweep in this process, after an interrupted one)."""
    _stopping.clear()


def run_in_group(argv: list[str], log: Path, env: dict[str, str], timeout: float | None, cwd: str | None) -> int | None:
    """Run ``argv`` in a process group of its own, its output into ``log``; its exit status (None:
    it ran past ``timeout`` and its whole group was killed)."""
    with open(log, "wb") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                             start_new_session=True)  # fmt: skip
        with _lock:
            _live.add(p)
            stopping = _stopping.is_set()
        if stopping:  # NOTE: started while stop_all() ran, after it looked: it would run to its end
            _kill(p)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(p)
            p.wait()
            return None
        finally:
            _kill(p)  # NOTE: what the command left running in its group (a forked child) ends with it
            with _lock:
                _live.discard(p)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _holds(build: Path, name: str) -> bool:
    """Whether ``build`` holds ``name`` (a link leading out of it holds nothing)."""
    try:
        return inside(build, name).exists()
    except TilescopeError:
        return False


def made_builds(base: Path) -> list[Path]:
    """The build directories the case's command made, oldest first."""
    if not base.is_dir():
        return []
    found = [p for p in base.iterdir() if p.is_dir() and _holds(p, BUILD_STATE)]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _triage(out: Path, folder: Path, builds: list[str], cwd: str | None) -> dict[str, Any]:
    """The case's triage (``triage_build``), its report saved as the case's ``triage.json`` and its
    paths relative to the sweep's ``out``."""
    found = triage_build([out / b for b in builds], cwd)
    report = found.pop("report", None)
    if report is not None:
        path = folder / "triage.json"
        path.write_text(json.dumps(report, indent=1) + "\n")
        found["report"] = str(path.relative_to(out))
        found["build"] = str(Path(found["build"]).relative_to(out))
    return found


def triage_build(builds: list[Path], cwd: str | os.PathLike | None) -> dict[str, Any]:
    """``tilescope triage --json`` on the last of ``builds`` with saved data: the report, its
    category and culprit (``ran``); or why there is none."""
    with_data = [b for b in builds if _holds(b, DATA_DIR)]
    if not with_data:
        why = ("the command made no build" if not builds else
               "its build has no saved data: add --save-data (or --triage) to the command")  # fmt: skip
        return {"ran": False, "why": why}
    build = with_data[-1]
    try:
        p = subprocess.run([sys.executable, "-m", "tilescope", "triage", str(build), "--json"], capture_output=True,
                           text=True, timeout=TRIAGE_TIMEOUT_S, cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": f"triage ran past {TRIAGE_TIMEOUT_S:g} s"}
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ran": False, "why": f"triage gave no report (exit {p.returncode}): {last}"}
    c = rep.get("culprit") or {}
    return {"ran": True, "report": rep, "build": str(build), "category": rep.get("category"),
            "summary": rep.get("summary"), "task": c.get("task"), "kernel": c.get("kernel"), "op": c.get("op"),
            "line": c.get("dsl_line")}  # fmt: skip
