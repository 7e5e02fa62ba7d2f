"""``tilescope deps``: reading and summarising a run's ``dfx_outputs/deps.json`` (written by
``debug/deps_json.py``).

Invariants: the viewer only reads; a file that is missing, unreadable or not one tilescope wrote
is a ``DepsError`` that says how to get one.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import DEPS_HTML, DEPS_JSON, DFX_DIR, inside
from tilescope.errors import TilescopeError


class DepsError(TilescopeError):
    """A deps.json that is missing, unreadable or not one tilescope wrote."""


# -- reading and summarising -------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def find_deps_json(path: str | os.PathLike) -> Path:
    """``deps.json`` given a build directory, its ``dfx_outputs`` or the file itself."""
    p = Path(path)
    for candidate in (p, inside(p, DEPS_JSON), inside(p, DFX_DIR, DEPS_JSON)):
        if candidate.is_file():
            return candidate
        if candidate.name == DEPS_JSON and candidate.exists():
            raise DepsError(
                f"{candidate} is a directory, not a deps file: remove it (a run writes the file there) and "
                "re-run with --enable-dep-gen"
            )
    raise DepsError(
        f"no {DEPS_JSON} at {p}: run with --enable-dep-gen (runtime_cfg enable_dep_gen=True) to write "
        f"{DFX_DIR}/{DEPS_JSON}"
    )


def _graph_problem(tasks: list[dict[str, Any]], edges: list[dict[str, Any]]) -> str | None:
    """Why tasks and edges do not form the graph a run records (task ``i`` has id ``i``, every
    edge joins two of them), or None."""
    for i, t in enumerate(tasks):
        if t["id"] != i:
            return f"tasks[{i}] has id {t['id']} (a run lists its tasks by id: 0, 1, 2, ...)"
    for e in edges:
        if not (0 <= e["pred"] < len(tasks) and 0 <= e["succ"] < len(tasks)):
            return f"the edge {e['pred']} -> {e['succ']} names a task that is not in its {len(tasks)} task(s)"
    return None


def load_deps(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a ``deps.json`` (or the one under a build / dfx directory).

    Raises:
        DepsError: missing, not JSON, or lacking the tasks/edges tilescope writes.
    """
    file = find_deps_json(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DepsError(
            f"{file} is not a readable deps.json ({type(e).__name__}: {e}); run again to rewrite it"
        ) from None
    if not (
        isinstance(data, dict) and isinstance(data.get("tasks"), list) and isinstance(data.get("edges"), list)
    ):
        raise DepsError(
            f"{file} is not a tilescope deps.json (no tasks/edges lists); run again to rewrite it"
        )
    bad_task = next((t for t in data["tasks"] if not (isinstance(t, dict) and _is_int(t.get("id")))), None)
    bad_edge = next(
        (
            e
            for e in data["edges"]
            if not (isinstance(e, dict) and _is_int(e.get("pred")) and _is_int(e.get("succ")))
        ),
        None,
    )
    if bad_task is not None or bad_edge is not None:
        what = (
            f"a task {json.dumps(bad_task)[:60]} without an integer 'id'"
            if bad_task is not None
            else f"an edge {json.dumps(bad_edge)[:60]} without integer 'pred' and 'succ'"
        )
        raise DepsError(f"{file} is not a tilescope deps.json: it holds {what}; run again to rewrite it")
    problem = _graph_problem(data["tasks"], data["edges"])
    if problem is not None:
        raise DepsError(f"{file} is not a tilescope deps.json: {problem}; run again to rewrite it")
    data["_path"] = str(file)
    return data


def critical_path(data: dict[str, Any]) -> list[int]:
    """The longest chain of dependent tasks (by task count), earliest first."""
    n = len(data["tasks"])
    preds: dict[int, set[int]] = {}
    for e in data["edges"]:
        if 0 <= e["pred"] < e["succ"] < n:  # a predecessor is always submitted first
            preds.setdefault(e["succ"], set()).add(e["pred"])
    length = [1] * n
    back = [-1] * n
    for t in range(n):
        for p in preds.get(t, ()):
            if length[p] + 1 > length[t]:
                length[t], back[t] = length[p] + 1, p
    if n == 0:
        return []
    t = max(range(n), key=lambda i: (length[i], -i))
    path = []
    while t >= 0:
        path.append(t)
        t = back[t]
    return path[::-1]


def _by(edges: list[dict[str, Any]], key: str) -> dict[str, int]:
    """Edges counted by ``key`` (``kind`` or ``source``), in name order."""
    return dict(sorted(Counter(str(e.get(key)) for e in edges).items()))


def summary(data: dict[str, Any]) -> str:
    """What ``tilescope deps`` prints."""
    edges = data["edges"]
    names = {t["id"]: t.get("name", f"task{t['id']}") for t in data["tasks"]}
    path = critical_path(data)
    lines = [
        f"{data.get('program', '?')}: {len(data['tasks'])} tasks, {len(edges)} edges"
        + (f" (run failed: {data.get('error')})" if data.get("status") == "failed" else ""),
        "  by kind:   " + (", ".join(f"{k} {v}" for k, v in _by(edges, "kind").items()) or "none"),
        "  by source: " + (", ".join(f"{k} {v}" for k, v in _by(edges, "source").items()) or "none"),
        f"  critical path: {len(path)} tasks: " + " -> ".join(f"{t} {names.get(t, '?')}" for t in path),
    ]
    reads = [r for r in data.get("reads") or [] if isinstance(r, dict)]
    if reads:
        waited = [r for r in reads if r.get("waited_for")]
        lines.append(f"  orchestration reads: {len(reads)}, {len(waited)} of them waited for tasks")
        for r in sorted(waited, key=lambda r: -float(r.get("wait_us") or 0))[:3]:
            lines.append(f"    {_read_text(r)}")
    html = _html(data)
    if html is not None:
        lines.append(f"open {html} in a browser (works offline) to explore the graph")
    return "\n".join(lines)


def _read_text(r: dict[str, Any]) -> str:
    """``read counts[3] = 17 at moe.py:41 waited 12.0 us for task 5; task 6 submitted after it``."""
    waited = ", ".join(map(str, r.get("waited_for") or [])) or "nothing"
    return (
        f"{r.get('label', 'read')} at {r.get('where') or '?'} waited {float(r.get('wait_us') or 0):.1f} us "
        f"for task(s) {waited}; task {r.get('next_task')} submitted after it"
    )


def _html(data: dict[str, Any]) -> Path | None:
    html = Path(data["_path"]).with_name(DEPS_HTML) if "_path" in data else None
    return html if html is not None and html.is_file() else None


def summary_json(data: dict[str, Any], limit: int = 100) -> dict[str, Any]:
    """The summary as data: the counts, the roots (tasks that wait for none) and sinks (that none
    waits for), and the critical path, each list cut at ``limit`` tasks (``num_*`` count them all)."""
    edges, tasks = data["edges"], data["tasks"]
    waits = {e["succ"] for e in edges}
    waited_on = {e["pred"] for e in edges}
    roots = [t["id"] for t in tasks if t["id"] not in waits]
    sinks = [t["id"] for t in tasks if t["id"] not in waited_on]
    path = critical_path(data)
    html = _html(data)
    return {
        "deps": data.get("_path"), "program": data.get("program"), "status": data.get("status"),
        "error": data.get("error") or None, "tasks": len(tasks), "tensors": len(data.get("tensors", [])),
        "edges": len(edges), "by_kind": _by(edges, "kind"), "by_source": _by(edges, "source"),
        "num_roots": len(roots), "roots": roots[:limit], "num_sinks": len(sinks), "sinks": sinks[:limit],
        "critical_path_length": len(path),
        "critical_path": [_task_ref(data, t) for t in path[:limit]], "html": str(html) if html else None,
        "reads": len(data.get("reads") or []),
    }  # fmt: skip


def _task_ref(data: dict[str, Any], task_id: int) -> dict[str, Any]:
    t = data["tasks"][task_id] if 0 <= task_id < len(data["tasks"]) else {}
    return {"task": task_id, "name": t.get("name"), "kernel": t.get("kernel")}


def _arg_text(arg: dict[str, Any], tensors: dict[int, dict[str, Any]]) -> str:
    """``x[0:64, 128:256]`` for a tensor argument (its tensor's name alone if its region is
    unknown), ``= 0.5`` for a scalar."""
    if "value" in arg:
        return f"= {arg['value']!r}"
    name = tensors.get(arg.get("tensor"), {}).get("name", f"tensor {arg.get('tensor')}")
    region = arg.get("region")
    if not isinstance(region, list):
        return name
    return name + "[" + ", ".join(f"{lo}:{hi}" for lo, hi in region) + "]"


def _task(data: dict[str, Any], task_id: int) -> dict[str, Any]:
    tasks = {t["id"]: t for t in data["tasks"]}
    if task_id not in tasks:
        raise DepsError(f"no task {task_id} in {data.get('_path', 'deps.json')}: its ids are 0..{len(tasks) - 1}")
    return tasks[task_id]


def task_view(data: dict[str, Any], task_id: int) -> str:
    """Task ``task_id``: its kernel and worker, each argument's role and region, and the tasks
    it waits for (with the edge's kind and tensor) and that wait for it."""
    t = _task(data, task_id)
    tasks = {x["id"]: x for x in data["tasks"]}
    tensors = {x["id"]: x for x in data["tensors"]}
    worker = t.get("worker")
    lines = [f"task {task_id} {t.get('name')} (kernel {t.get('kernel')})" + (
        f" on worker {worker}" if isinstance(worker, int) and worker >= 0 else " (not run)")]  # fmt: skip
    for a in t.get("args", []):
        lines.append(f"  arg {a.get('index')} {a.get('role', '?'):<6} {_arg_text(a, tensors)}")

    def edge_text(e: dict[str, Any], other: int) -> str:
        o = tasks.get(other, {})
        on = tensors.get(e.get("tensor"), {}).get("name")
        return f"task {other} {o.get('name', '?')}: {e.get('kind')}" + (f" on {on}" if on else " (explicit)")

    preds = [edge_text(e, e["pred"]) for e in data["edges"] if e.get("succ") == task_id]
    succs = [edge_text(e, e["succ"]) for e in data["edges"] if e.get("pred") == task_id]
    lines.append("  waits for: " + ("; ".join(preds) or "nothing"))
    lines.append("  waited on by: " + ("; ".join(succs) or "nothing"))
    reads = [r for r in data.get("reads") or [] if isinstance(r, dict) and task_id in (r.get("waited_for") or [])]
    for r in reads:
        lines.append(f"  the orchestration waited for it: {_read_text(r)}")
    return "\n".join(lines)


def task_json(data: dict[str, Any], task_id: int) -> dict[str, Any]:
    """Task ``task_id`` as data: its kernel, worker and arguments (role, tensor, region), and every
    edge into it (``predecessors``) and out of it (``successors``) with the other task, the kind,
    the tensor and the regions each side touches.

    Raises:
        DepsError: no such task (the message gives the range of ids).
    """
    t = _task(data, task_id)
    tensors = {x["id"]: x for x in data["tensors"]}
    args = [{"index": a.get("index"), "role": a.get("role"), "dtype": a.get("dtype"),
             "tensor": tensors.get(a.get("tensor"), {}).get("name") if "tensor" in a else None,
             "region": a.get("region"), "text": _arg_text(a, tensors), "value": a.get("value")}
            for a in t.get("args", [])]  # fmt: skip

    def edge(e: dict[str, Any], other: int) -> dict[str, Any]:
        keys = ("kind", "source", "arg", "pred_arg", "pred_region", "succ_region", "overlap")
        return {**_task_ref(data, other), "tensor": tensors.get(e.get("tensor"), {}).get("name"),
                **{k: e.get(k) for k in keys}}  # fmt: skip

    worker = t.get("worker")
    return {
        "deps": data.get("_path"), "program": data.get("program"), "task": task_id, "name": t.get("name"),
        "kernel": t.get("kernel"), "core": t.get("core"), "worker": worker,
        "ran": isinstance(worker, int) and worker >= 0, "args": args,
        "predecessors": [edge(e, e["pred"]) for e in data["edges"] if e.get("succ") == task_id],
        "successors": [edge(e, e["succ"]) for e in data["edges"] if e.get("pred") == task_id],
    }  # fmt: skip


def tensor_view(data: dict[str, Any], name: str) -> str:
    """Tensor ``name``: every task argument on it, in task order, with its role and region."""
    tensors = {x["id"]: x for x in data["tensors"]}
    match = [x for x in data["tensors"] if x.get("name") == name or name in x.get("aliases", [])]
    if not match:
        known = ", ".join(str(x.get("name")) for x in data["tensors"])
        raise DepsError(f"no tensor {name!r} in {data.get('_path', 'deps.json')}; its tensors: {known}")
    x = match[0]
    shape = x.get("shape")
    lines = [f"tensor {x.get('name')} {x.get('dtype')}{shape if shape is not None else ''}"]
    width = max((len(str(t.get("name"))) for t in data["tasks"]), default=0)
    for t in data["tasks"]:
        for a in t.get("args", []):
            if a.get("tensor") == x["id"]:
                lines.append(
                    f"  task {t['id']:>4} {str(t.get('name')):<{width}}  {a.get('role', '?'):<6} arg {a.get('index')}  "
                    f"{_arg_text(a, tensors)}"
                )
    if len(lines) == 1:
        lines.append("  no task takes it as an argument")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tilescope deps DIR`` to the ``tilescope`` command's subparsers."""
    p = subparsers.add_parser(
        "deps", help="summarise a run's dependency graph (dfx_outputs/deps.json) and point to its viewer"
    )
    p.add_argument("dir", metavar="DIR", type=PATH_ARG, help="a build directory, its dfx_outputs, or a deps.json")
    p.add_argument(
        "--task", type=int, action="append", default=[], metavar="ID",
        help="show this task's arguments (role and region) and its edges; repeatable",
    )  # fmt: skip
    p.add_argument(
        "--tensor", action="append", default=[], metavar="NAME",
        help="show every task argument on this tensor (a program argument or an intermediate's variable); repeatable",
    )  # fmt: skip
    p.set_defaults(fn=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    import sys

    try:
        data = load_deps(args.dir)
        views = [task_view(data, t) for t in args.task] + [tensor_view(data, n) for n in args.tensor]
    except DepsError as e:
        print(f"tilescope deps: {e}", file=sys.stderr)
        return 1
    print("\n\n".join([summary(data), *views]))
    return 0


__all__ = [
    "DepsError",
    "critical_path",
    "load_deps",
    "register",
    "summary",
    "summary_json",
    "task_json",
    "task_view",
    "tensor_view",
]
