"""``tilescope trace``: summarising a run's ``dfx_outputs/trace.json`` (written by
``debug/trace_json.py``): per-kernel totals, worker use, the orchestration's reads and the critical path.

Invariants: the viewer only reads; a missing or unreadable trace is a ``TraceError`` that says
how to get one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import DFX_DIR, TRACE_JSON, inside
from tilescope.errors import TilescopeError
from tilescope.tools.roofline import PmuRanking, format_ranking, pmu_ranking

PERFETTO_URL = "https://ui.perfetto.dev"


class TraceError(TilescopeError):
    """A trace file that is missing or cannot be read."""


# -- reading ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KernelTotal:
    """One kernel's time in a trace: its tasks, total and mean microseconds, and share of busy time."""

    name: str
    tasks: int
    total_us: float
    mean_us: float
    share: float  # of all busy time


@dataclass(frozen=True, slots=True)
class WorkerUse:
    """One worker's use in a trace: its tasks, busy microseconds and busy share of the wall time."""

    worker: int
    tasks: int
    busy_us: float
    utilisation: float  # busy / wall


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """What ``tilescope trace`` prints, read back from a ``trace.json``."""

    path: Path
    program: str
    status: int
    error: str
    wall_us: float
    num_tasks: int  # executed (drawn) tasks
    skipped: int
    kernels: tuple[KernelTotal, ...]  # by total time, largest first
    workers: tuple[WorkerUse, ...]
    utilisation: float  # all busy time / (wall * workers)
    num_flows: int
    critical_path_us: float | None  # None without dependency edges
    critical_path: tuple[int, ...]  # task ids, first to last
    num_reads: int = 0  # orchestration reads (n = counts[e])
    read_wait_us: float = 0.0  # their time in all, waits included
    longest_reads: tuple[str, ...] = ()  # the (at most 3) longest, as the trace names them, with line and time
    pmu: PmuRanking | None = None  # enable_pmu: the kernels ranked by time and GB/s

    def to_json(self) -> dict[str, Any]:
        """The summary as plain JSON data (what ``tilescope mcp``'s ``trace`` returns)."""
        data = asdict(self)
        data["path"] = str(self.path)
        data["critical_path"] = list(self.critical_path)
        return data


def find_trace(where: str | Path) -> Path:
    """``where`` itself (a trace file), or the ``trace.json`` in it or in its ``dfx_outputs``."""
    p = Path(where)
    if p.is_dir():
        for cand in (inside(p, TRACE_JSON), inside(p, DFX_DIR, TRACE_JSON)):
            if cand.is_file():
                return cand
            if cand.exists():
                raise TraceError(
                    f"{cand} is a directory, not a trace file: remove it (a run writes the file there) and "
                    "re-run with --trace"
                )
        raise TraceError(
            f"no {TRACE_JSON} in {p} or {p}/{DFX_DIR}: run with runtime_cfg enable_trace=True "
            "(harness flag --trace) to write one"
        )
    if not p.is_file():
        raise TraceError(f"{p} does not exist")
    return p


def _critical_path(dur: dict[int, float], edges: list[tuple[int, int]]) -> tuple[float, tuple[int, ...]]:
    succs: dict[int, list[int]] = defaultdict(list)
    indeg = dict.fromkeys(dur, 0)
    for a, b in edges:
        if a in dur and b in dur:
            succs[a].append(b)
            indeg[b] += 1
    best = dict(dur)  # longest path ending at each task, its duration included
    prev: dict[int, int] = {}
    ready = [t for t, d in indeg.items() if d == 0]
    while ready:
        a = ready.pop()
        for b in succs[a]:
            if best[a] + dur[b] > best[b]:
                best[b], prev[b] = best[a] + dur[b], a
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    if not best:
        return 0.0, ()
    end = max(best, key=best.__getitem__)
    path = [end]
    while path[-1] in prev:
        path.append(prev[path[-1]])
    return best[end], tuple(reversed(path))


def _other_data_problem(other: Any) -> str | None:
    """What is wrong with a trace's ``otherData`` (the run's summary tilescope adds), or None."""
    if not isinstance(other, dict):
        return f"is {json.dumps(other)[:60]}, expected an object"
    expected = {"status": (int, "an integer"), "wall_us": (int | float, "a number"),
                "skipped_tasks": (list, "a list of task ids"), "program": (str, "a string"),
                "error": (str, "a string")}  # fmt: skip
    for key, (kind, what) in expected.items():
        v = other.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kind)):
            return f"{key!r} is {json.dumps(v)[:60]}, expected {what}"
    return None


def summarize_trace(path: str | Path) -> TraceSummary:
    """Read a ``trace.json`` (or the one in a build / ``dfx_outputs`` dir) and total it up.

    Raises:
        TraceError: the file is missing, is not JSON, or is not a Chrome trace.
    """
    p = find_trace(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(
            f"{p} is not a readable trace ({e}); re-run with --trace to write it again"
        ) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{p} is not a Chrome trace: no traceEvents list")
    other = data.get("otherData", {}) if isinstance(data, dict) else {}
    problem = _other_data_problem(other)
    if problem is not None:
        raise TraceError(
            f"{p} is not a trace tilescope wrote: otherData {problem}; re-run with --trace to write it again"
        )
    try:
        tasks = [e for e in events if e.get("ph") == "X" and e.get("cat", "task") == "task"]
        lane_worker = {
            e["tid"]: int(e["args"]["name"].split()[1])
            for e in events
            if e.get("ph") == "M"
            and e.get("name") == "thread_name"
            and e["args"]["name"].startswith("worker ")
        }
        per_kernel: dict[str, list[float]] = defaultdict(list)
        per_worker: dict[int, list[float]] = defaultdict(list)
        dur: dict[int, float] = {}
        end = 0.0
        for e in tasks:
            d = float(e.get("dur", 0.0))
            per_kernel[e["name"]].append(d)
            per_worker[lane_worker.get(e["tid"], e["tid"])].append(d)
            end = max(end, float(e["ts"]) + d)
            if "task_id" in e.get("args", {}):
                dur[int(e["args"]["task_id"])] = d
        flows = [
            (int(e["args"]["pred"]), int(e["args"]["succ"]))
            for e in events
            if e.get("ph") == "s" and e.get("cat", "dependency") == "dependency"
        ]
        reads = sorted(
            (e for e in events if e.get("ph") == "X" and e.get("cat") == "read"),
            key=lambda e: -float(e.get("dur", 0.0)),
        )
        longest = tuple(
            f"{e['name']} at {e.get('args', {}).get('where') or '?'}: {float(e.get('dur', 0.0)):.1f} us"
            for e in reads[:3]
        )
        ranking = pmu_ranking(tasks, other)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
        raise TraceError(f"{p}: malformed trace event ({type(e).__name__}: {e})") from None

    wall = float(other.get("wall_us") or end) or 1.0
    busy = sum(sum(v) for v in per_kernel.values())
    kernels = sorted(
        (
            KernelTotal(name, len(ds), sum(ds), sum(ds) / len(ds), sum(ds) / busy if busy else 0.0)
            for name, ds in per_kernel.items()
        ),
        key=lambda k: (-k.total_us, k.name),
    )
    worker_ids = sorted(set(lane_worker.values()) | set(per_worker))
    workers = tuple(
        WorkerUse(w, len(per_worker[w]), sum(per_worker[w]), sum(per_worker[w]) / wall) for w in worker_ids
    )
    cp_us, cp = _critical_path(dur, flows) if flows else (None, ())
    return TraceSummary(
        path=p,
        program=str(other.get("program", "?")),
        status=int(other.get("status", 0)),
        error=str(other.get("error", "")),
        wall_us=wall,
        num_tasks=len(tasks),
        skipped=len(other.get("skipped_tasks", [])),
        kernels=tuple(kernels),
        workers=workers,
        utilisation=busy / (wall * len(workers)) if workers else 0.0,
        num_flows=len(flows),
        critical_path_us=cp_us,
        critical_path=cp,
        num_reads=len(reads),
        read_wait_us=sum(float(e.get("dur", 0.0)) for e in reads),
        longest_reads=longest,
        pmu=ranking,
    )


# -- the command -----------------------------------------------------------------------------------


def format_summary(s: TraceSummary) -> str:
    """The text ``tilescope trace`` prints."""
    lines = [
        f"trace {s.path}",
        f"program {s.program}: {s.num_tasks} tasks on {len(s.workers)} workers, wall {s.wall_us / 1000:.3f} ms",
    ]
    if s.status or s.skipped:
        lines.append(f"run FAILED (status {s.status}): {s.error or '?'}; {s.skipped} task(s) skipped")
    width = max([len("kernel"), *(len(k.name) for k in s.kernels)])
    lines += ["", f"{'kernel':<{width}}  {'tasks':>6}  {'total ms':>9}  {'mean us':>9}  {'busy %':>6}"]
    for k in s.kernels:
        lines.append(
            f"{k.name:<{width}}  {k.tasks:>6}  {k.total_us / 1000:>9.3f}  {k.mean_us:>9.1f}  {100 * k.share:>6.1f}"
        )
    lines += ["", f"{'worker':<8}  {'tasks':>6}  {'busy ms':>9}  {'util %':>6}"]
    for w in s.workers:
        lines.append(f"{w.worker:<8}  {w.tasks:>6}  {w.busy_us / 1000:>9.3f}  {100 * w.utilisation:>6.1f}")
    lines.append(
        f"{'all':<8}  {s.num_tasks:>6}  {sum(w.busy_us for w in s.workers) / 1000:>9.3f}  "
        f"{100 * s.utilisation:>6.1f}"
    )
    if s.pmu is not None:
        lines += ["", *format_ranking(s.pmu)]
    if s.num_reads:
        lines.append(
            f"orchestration reads: {s.num_reads}, {s.read_wait_us / 1000:.3f} ms in all (waits included); longest:"
        )
        lines += [f"  {r}" for r in s.longest_reads]
    lines.append("")
    if s.critical_path_us is not None:
        lines.append(
            f"critical path: {s.critical_path_us / 1000:.3f} ms over {len(s.critical_path)} task(s) "
            f"({100 * s.critical_path_us / s.wall_us:.1f}% of wall), {s.num_flows} dependency arrow(s)"
        )
        lines.append(f"next: open {s.path} in {PERFETTO_URL} (Open trace file) to see the workers and arrows")
    else:
        lines.append("critical path: unknown (no dependency edges in this trace)")
        lines.append(
            f"next: open {s.path} in {PERFETTO_URL}; re-run with --enable-dep-gen "
            "(runtime_cfg enable_dep_gen=True) for dependency arrows and the critical path"
        )
    return "\n".join(lines)


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope trace DIR``: print the summary; a one-line error and 1 when it cannot."""
    try:
        summary = summarize_trace(args.dir)
    except TraceError as e:
        print(f"tilescope trace: error: {e}", file=sys.stderr)
        return 1
    print(format_summary(summary))
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``trace DIR`` to the ``tilescope`` command's subparsers."""
    p = subparsers.add_parser(
        "trace", help="summarize a run trace: time per kernel, worker utilisation, critical path"
    )
    p.add_argument("dir", metavar="DIR", type=PATH_ARG, help="a build directory, its dfx_outputs directory, or a trace.json")
    p.set_defaults(fn=run_cli)
    return p
