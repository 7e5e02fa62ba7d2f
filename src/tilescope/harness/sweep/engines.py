"""Where cases run: the engines ``tilescope sweep`` and ``tilescope problems --engine`` share.

``local`` runs ``-j`` cases at once as processes on this machine (the CPUs by default); ``ray``
runs each case as a Ray task (``ray_engine``). Both call ``ended(case, record)`` on the calling
thread as each case ends, in the order they end.

Invariants:
- A defect of the runner itself (an exception while running one case) is that case's ``error``
  record, never the end of the others.
- Ctrl-C kills every case still running; each is recorded ``interrupted`` and ``run_cases``
  reports the interruption instead of raising it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope.analysis.progress import seconds_arg
from tilescope.harness.sweep.case_run import resume_all, run_case, stop_all
from tilescope.harness.sweep.grid import Case
from tilescope.harness.sweep.ray_engine import ray_session, run_in_session

Ended = Callable[[Case, dict[str, Any]], None]


@dataclass(frozen=True)
class Engine:
    """An engine and its settings: ``kind`` local or ray, ``jobs`` (local; None: the CPUs), the
    per-case ``timeout``, and Ray's cluster address, shared-filesystem mode and CPUs per case."""

    kind: str = "local"
    jobs: int | None = None
    timeout: float | None = None
    ray_address: str | None = None
    ray_shared: bool = False
    case_cpus: float = 1.0


def add_engine_args(p: argparse.ArgumentParser | Any, engine_default: str | None = "local", what: str = "case") -> None:
    """The engine flags (``--engine``, ``-j``, ``--ray-address``, ``--ray-shared``, ``--case-cpus``,
    ``--timeout``) on ``p``; ``what`` is what one Ray task or one process runs (a case, a problem)."""
    default = f" (default: {engine_default})" if engine_default else ""
    p.add_argument("--engine", choices=["local", "ray"], default=engine_default,
                   help=f"where each {what} runs: local (processes on this machine, -j at once) or ray (Ray tasks on a "
                        f"local Ray bound to 127.0.0.1, or on the cluster --ray-address names){default}")  # fmt: skip
    p.add_argument("-j", "--jobs", type=positive_int, default=None, metavar="N",
                   help=f"{what}s run at once by the local engine (default: the CPUs)")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --engine ray: the cluster to use (auto: the one `ray start` made here; ray://host:port); "
                        "default: a local Ray started for the run on 127.0.0.1")  # fmt: skip
    p.add_argument("--ray-shared", action="store_true",
                   help=f"with --engine ray: the workers see --out at the same path (a shared filesystem), so each "
                        f"{what} writes there; by default their files come back through Ray's object store")  # fmt: skip
    p.add_argument("--case-cpus", type=positive_float, default=1.0, metavar="N",
                   help=f"with --engine ray: the CPUs Ray reserves for each {what} (default: 1)")
    p.add_argument("--timeout", type=seconds_arg, default=None, metavar="SECONDS",
                   help=f"a {what} still running after this long is killed and reported as a timeout (default: none)")


def engine_from_args(args: argparse.Namespace) -> Engine:
    """The Engine the flags of ``add_engine_args`` give; ValueError naming a flag that does not
    apply to the engine chosen."""
    kind = args.engine
    if kind != "local" and args.jobs is not None:
        raise ValueError(f"-j is the local engine's number of processes: it does not apply to --engine {kind}")
    if kind != "ray":
        given = [f for f, v in (("--ray-address", args.ray_address), ("--ray-shared", args.ray_shared),
                                ("--case-cpus", args.case_cpus != 1.0)) if v]  # fmt: skip
        if given:
            raise ValueError(f"{given[0]} is for --engine ray (the engine is {kind or 'none'})")
    return Engine(kind, args.jobs, args.timeout, args.ray_address, args.ray_shared, args.case_cpus)


class Runner:
    """An engine held open for several batches of cases (a local Ray started once, not per batch):
    ``with Runner(engine) as r: r.run(cases, ...)``; ``nodes`` are the Ray cluster's addresses.

    Raises (on entering):
        RayUnavailable: ``ray`` without Ray installed, or a cluster that cannot be reached.
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self.nodes: list[str] = []
        self._stack = contextlib.ExitStack()
        self._ray: Any = None

    def __enter__(self) -> Runner:
        if threading.current_thread() is threading.main_thread():
            # NOTE: SIGTERM (kill, a CI job's timeout) ends the cases and records them as Ctrl-C does
            before = signal.signal(signal.SIGTERM, _terminated)
            self._stack.callback(signal.signal, signal.SIGTERM, before)
        try:
            if self.engine.kind == "ray":
                self._ray, self.nodes = self._stack.enter_context(ray_session(self.engine.ray_address))
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def run(self, run: list[Case], out: Path, triage: bool, cwd: str, ended: Ended) -> bool:
        """Run ``run``, each case's files under ``out``, ``ended(case, record)`` as each ends;
        whether it was interrupted."""
        e = self.engine
        if self._ray is not None:
            return run_in_session(self._ray, run, out, e.timeout, triage, e.ray_shared, e.case_cpus, cwd, ended)
        return _local(run, out, e, triage, cwd, ended)


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_cases(engine: Engine, run: list[Case], out: Path, triage: bool, cwd: str, ended: Ended) -> tuple[bool, list[str]]:
    """Run ``run`` on ``engine`` (``Runner``, for one batch); whether it was interrupted, and the
    Ray cluster's node addresses (none for the local engine)."""
    with Runner(engine) as runner:
        return runner.run(run, out, triage, cwd, ended), runner.nodes


def _local(run: list[Case], out: Path, engine: Engine, triage: bool, cwd: str, ended: Ended) -> bool:
    resume_all()
    jobs = engine.jobs or os.cpu_count() or 1
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="sweep")
    pending: dict[Future, Case] = {}
    queue = list(run)
    try:
        while queue or pending:
            while queue and len(pending) < jobs:
                c = queue.pop(0)
                pending[pool.submit(run_case, c, str(out), engine.timeout, triage, cwd)] = c
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


def positive_float(text: str) -> float:
    """A number of CPUs > 0, else an argparse error saying so."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: expected a number of CPUs > 0")
    return v


def positive_int(text: str) -> int:
    """A whole number >= 1, else an argparse error saying so."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected at least 1")
    return n


__all__ = ["Engine", "Runner", "add_engine_args", "engine_from_args", "positive_float", "positive_int", "run_cases"]
