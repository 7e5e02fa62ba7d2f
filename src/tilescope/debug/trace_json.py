"""The run trace, written after a sim run: ``dfx_outputs/trace.json`` (``enable_trace``; read by
``tilescope trace``, ``tools/trace.py``).

Invariants:
- ``trace.json`` is Chrome Trace Event JSON (loads in https://ui.perfetto.dev and
  chrome://tracing): one process, one lane per worker (``tid`` = worker + 1) and an
  ``orchestration`` lane (``tid`` 0). Times are microseconds since the run started.
- Every executed task is exactly one complete (``"X"``) event, category ``task``, on its worker's
  lane; every submitted task is one instant event on the orchestration lane. A skipped task
  (worker -1, after a failure) has no slice: it is listed in ``otherData.skipped_tasks``.
- With dependency recording on, every distinct ``pred -> succ`` pair between two executed tasks
  is one flow (a ``"s"``/``"f"`` pair sharing an id), each end placed inside its task's slice so
  viewers bind the arrow to the slices. The ``"s"`` event's args carry ``pred``/``succ``, so a
  reader rebuilds the graph from the file alone (``tools.trace.summarize_trace`` does).
- Every orchestration read (``n = counts[e]``) is one complete event, category ``read``, on the
  orchestration lane, from when the read began to when it read the element, named
  ``read counts[3] = 17 (waited for task 5)``; its args carry ``where``, ``value``, ``waited_for``
  and ``next_task``. Each task it waited for that ran is a flow (category ``read``) from the task's
  slice to the read's; their ``"s"`` args carry ``pred`` and ``read`` (the read's index), never
  ``succ``, so task-graph readers skip them.
- With ``enable_pmu``, every task slice's args carry ``pmu``: its counters and bytes moved
  (``debug.pmu.slice_counters``), and ``otherData.pmu`` the run's note and copy limit.
- The file is replaced atomically.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tilescope.build.manifest import Build
from tilescope.build.paths import TRACE_JSON, atomic_write, inside
from tilescope.debug.pmu_csv import pmu_summary, slice_counters, task_bytes
from tilescope.runtime.records import RunReport

PID = 1
ORCH_TID = 0


# -- writing ---------------------------------------------------------------------------------------


def _us(ns: int) -> float:
    return ns / 1000.0


def _meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": PID, "tid": tid, "args": args}


def trace_events(program: Build, report: RunReport) -> dict[str, Any]:
    """The Chrome trace of ``report`` (a run of ``program``) as a JSON-ready dict."""
    kernels = [k["name"] for k in program.kernels]

    def kernel(func_id: int) -> str:
        return kernels[func_id] if 0 <= func_id < len(kernels) else f"func_{func_id}"

    executed = {t.task_id: t for t in report.tasks if t.worker >= 0}
    skipped = [t for t in report.tasks if t.worker < 0]
    num_workers = max([report.num_workers, *(t.worker + 1 for t in executed.values())])

    events: list[dict[str, Any]] = [
        _meta("process_name", ORCH_TID, {"name": f"tilescope sim: {program.name}"}),
        _meta("thread_name", ORCH_TID, {"name": "orchestration"}),
        _meta("thread_sort_index", ORCH_TID, {"sort_index": 0}),
    ]
    for w in range(num_workers):
        events.append(_meta("thread_name", w + 1, {"name": f"worker {w}"}))
        events.append(_meta("thread_sort_index", w + 1, {"sort_index": w + 1}))

    for t in report.tasks:
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "submit",
                "name": f"submit {t.name or kernel(t.func_id)}",
                "pid": PID,
                "tid": ORCH_TID,
                "ts": _us(t.submit_ns),
                "args": {"task_id": t.task_id, "kernel": kernel(t.func_id)},
            }
        )
    pmu = {r.task_id: r for r in report.pmu}
    moved = task_bytes(report) if pmu else {}
    for t in executed.values():
        args: dict[str, Any] = {"task_id": t.task_id, "func_id": t.func_id, "task": t.name, "worker": t.worker}
        if t.task_id in pmu:
            args["pmu"] = slice_counters(pmu[t.task_id], moved.get(t.task_id, (0, 0)))
        events.append(
            {
                "ph": "X",
                "cat": "task",
                "name": kernel(t.func_id),
                "pid": PID,
                "tid": t.worker + 1,
                "ts": _us(t.start_ns),
                "dur": _us(max(t.end_ns - t.start_ns, 0)),
                "args": args,
            }
        )

    kinds: dict[tuple[int, int], list[str]] = defaultdict(list)
    for e in report.edges:
        if e.kind not in kinds[(e.pred, e.succ)]:
            kinds[(e.pred, e.succ)].append(e.kind)
    undrawn = 0
    for flow_id, ((pred, succ), ks) in enumerate(sorted(kinds.items())):
        p, s = executed.get(pred), executed.get(succ)
        if p is None or s is None:
            undrawn += 1
            continue
        name = "+".join(ks)
        # NOTE: each end sits mid-slice, so it is unambiguously inside its task's slice even when
        # a neighbouring slice on the lane starts or ends at the same microsecond.
        events.append(
            {
                "ph": "s",
                "cat": "dependency",
                "name": name,
                "id": flow_id,
                "pid": PID,
                "tid": p.worker + 1,
                "ts": _us((p.start_ns + max(p.end_ns, p.start_ns)) // 2),
                "args": {"pred": pred, "succ": succ, "kinds": ks},
            }
        )
        events.append(
            {
                "ph": "f",
                "bp": "e",
                "cat": "dependency",
                "name": name,
                "id": flow_id,
                "pid": PID,
                "tid": s.worker + 1,
                "ts": _us((s.start_ns + max(s.end_ns, s.start_ns)) // 2),
            }
        )

    events += _read_events(report, executed, first_flow=len(kinds))
    other = {"pmu": pmu_summary(report)} if pmu else {}
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "tilescope",
            "program": program.name,
            "build_dir": str(program.work_dir),
            "kernels": kernels,
            "status": report.status,
            "error": report.error,
            "wall_us": report.wall_s * 1e6,
            "num_workers": num_workers,
            "num_tasks": report.num_tasks,
            "num_dependencies": report.num_dependencies,
            "edges_recorded": bool(report.edges),
            "flows_not_drawn": undrawn,
            "num_reads": len(report.reads),
            "skipped_tasks": [
                {"task_id": t.task_id, "func_id": t.func_id, "kernel": kernel(t.func_id), "task": t.name}
                for t in skipped
            ],
            **other,
        },
    }


def read_name(waited_for: tuple[int, ...] | list[int], label: str) -> str:
    """``read counts[3] = 17 (waited for task 5)``: an orchestration read as the trace names it."""
    if not waited_for:
        return f"read {label} (no wait)"
    tasks = "task " if len(waited_for) == 1 else "tasks "
    return f"read {label} (waited for {tasks}{', '.join(map(str, waited_for))})"


def _read_events(report: RunReport, executed: dict, first_flow: int) -> list[dict[str, Any]]:
    """The orchestration's reads: a slice each on the orchestration lane, and a flow (ids from
    ``first_flow`` on) from each task it waited for (that ran) into it."""
    events: list[dict[str, Any]] = []
    flow = first_flow - 1
    for i, r in enumerate(report.reads):
        start, end = r.wait_start_ns, max(r.wait_end_ns, r.wait_start_ns)
        events.append(
            {
                "ph": "X",
                "cat": "read",
                "name": read_name(r.waited_for, r.label),
                "pid": PID,
                "tid": ORCH_TID,
                "ts": _us(start),
                "dur": _us(end - start),
                "args": {
                    "read": i,
                    "tensor": r.name,
                    "index": list(r.index),
                    "value": r.value,
                    "where": r.where,
                    "waited_for": list(r.waited_for),
                    "next_task": r.next_task,
                },
            }
        )
        for pred in r.waited_for:
            p = executed.get(pred)
            if p is None:
                continue
            flow += 1
            events.append(
                {
                    "ph": "s",
                    "cat": "read",
                    "name": "read",
                    "id": flow,
                    "pid": PID,
                    "tid": p.worker + 1,
                    "ts": _us((p.start_ns + max(p.end_ns, p.start_ns)) // 2),
                    "args": {"pred": pred, "read": i},
                }
            )
            events.append(
                {"ph": "f", "bp": "e", "cat": "read", "name": "read", "id": flow, "pid": PID, "tid": ORCH_TID,
                 "ts": _us((start + end) // 2)}
            )  # fmt: skip
    return events


def write_trace(out_dir: Path, program: Build, report: RunReport) -> list[Path]:
    """Write ``out_dir/trace.json`` for ``report``; returns ``[path]``."""
    path = inside(out_dir, TRACE_JSON)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(trace_events(program, report), separators=(",", ":")))
    return [path]
