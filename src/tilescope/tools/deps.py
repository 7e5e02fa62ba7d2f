"""The dependency graph of a sim run: ``dfx_outputs/deps.json``, ``deps_graph.html`` and
``tilescope deps``.

Invariants:
- ``deps.json`` is built only from a ``RunReport`` recorded with ``record_edges`` (edges, task
  arguments, buffers) and the build's kernel table; it lists every recorded edge, one row each,
  in the runtime's order (by successor, then predecessor, argument and kind).
- A region is a box ``[[start, stop), ...]`` in its buffer's index space (the full tensor that
  defines the buffer: a program argument or an intermediate); ``null`` when the view does not
  fit that index space (the runtime then compares byte ranges). ``overlap`` is the intersection
  of the two boxes, ``null`` for explicit edges.
- ``deps_graph.html`` is self-contained: the layout library (vendored ``dagre.min.js``), the
  viewer script, the style and the data are inlined, so it works offline.
- Both files are replaced atomically.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilescope.errors import TilescopeError

if TYPE_CHECKING:
    from tilescope.program import CompiledProgram
    from tilescope.runtime.core import RunReport, TaskArgRecord

DEPS_JSON = "deps.json"
DEPS_HTML = "deps_graph.html"
DFX_DIR = "dfx_outputs"
FORMAT = 1
_ASSETS = Path(__file__).resolve().parent
_ROLES = {"in": "input", "out": "output", "inout": "inout", "scalar": "scalar"}
_WRITES = ("out", "inout")
_READS = ("in", "inout")

Box = list[list[int]]


class DepsError(TilescopeError):
    """A deps.json that is missing, unreadable or not one tilescope wrote."""


# -- deps.json ---------------------------------------------------------------------------------


def write_deps(out_dir: Path, program: CompiledProgram, report: RunReport) -> list[Path]:
    """Write ``out_dir/deps.json`` and ``out_dir/deps_graph.html`` for ``report``; return both paths."""
    data = deps_data(program, report)
    json_path, html_path = Path(out_dir) / DEPS_JSON, Path(out_dir) / DEPS_HTML
    _write_atomic(json_path, json.dumps(data, indent=1) + "\n")
    _write_atomic(html_path, render_html(data))
    return [json_path, html_path]


def deps_data(program: CompiledProgram, report: RunReport) -> dict[str, Any]:
    """The ``deps.json`` document for one run of ``program``."""
    tensors, buffer_ids = _tensors(program, report)
    layouts = {b: (t["shape"], t["strides"], t["offset"]) for b, t in zip(buffer_ids, tensors)}
    index_of = {b: i for i, b in enumerate(buffer_ids)}

    args_of: dict[int, list[TaskArgRecord]] = {}
    for a in report.task_args:
        args_of.setdefault(a.task_id, []).append(a)
        if a.kind == "tensor" and a.buffer_id not in index_of:  # a buffer the run never registered
            index_of[a.buffer_id] = len(tensors)
            buffer_ids.append(a.buffer_id)
            tensors.append(_tensor_row(len(tensors), f"buf{len(tensors)}", a.dtype, None, (), 0))
    regions = {
        (a.task_id, a.arg_index): _region(a, layouts.get(a.buffer_id))
        for a in report.task_args
        if a.kind == "tensor"
    }
    for t in tensors:
        t.pop("strides")
        t.pop("offset")

    info = {t.task_id: t for t in report.tasks}
    tasks = []
    for tid in range(report.num_tasks):
        rec = info.get(tid)
        kernel = program.kernels[rec.func_id] if rec is not None else None
        tasks.append(
            {
                "id": tid,
                "name": rec.name if rec is not None else f"task{tid}",
                "kernel": kernel["name"] if kernel else None,
                "func_id": rec.func_id if rec is not None else None,
                "core": kernel.get("core") if kernel else None,
                "worker": rec.worker if rec is not None else None,
                "args": [_arg_row(a, index_of, regions) for a in args_of.get(tid, [])],
            }
        )

    edges = [_edge_row(e, args_of, index_of, regions) for e in report.edges]
    return {
        "format": FORMAT,
        "program": program.name,
        "status": "ok" if report.status == 0 else "failed",
        "error": report.error,
        "counts": {
            "tasks": len(tasks),
            "tensors": len(tensors),
            "edges": len(edges),
            "by_kind": dict(sorted(Counter(str(e["kind"]) for e in edges).items())),
            "by_source": dict(sorted(Counter(e["source"] for e in edges).items())),
        },
        "tasks": tasks,
        "tensors": tensors,
        "edges": edges,
    }


def _tensors(program: CompiledProgram, report: RunReport) -> tuple[list[dict[str, Any]], list[int]]:
    """One row per buffer (program arguments first, then intermediates ``tmp<k>``), and their ids."""
    rows: list[dict[str, Any]] = []
    ids: list[int] = []
    ntmp = 0
    for b in report.buffers:
        if b.buffer_id in ids:  # program arguments aliasing one storage are one buffer
            row = rows[ids.index(b.buffer_id)]
            if b.program_arg >= 0:
                row["aliases"].append(program.args[b.program_arg].name)
            continue
        if b.program_arg >= 0:
            name = program.args[b.program_arg].name
        else:
            name, ntmp = f"tmp{ntmp}", ntmp + 1
        ids.append(b.buffer_id)
        rows.append(_tensor_row(len(rows), name, b.dtype, list(b.shape), b.strides, b.offset))
    return rows, ids


def buffer_names(program: CompiledProgram, report: RunReport) -> dict[int, tuple[str, tuple]]:
    """Each buffer's display name (its program argument's name, or ``tmp<k>``) and layout
    (shape, strides, offset), by buffer id."""
    rows, ids = _tensors(program, report)
    return {i: (r["name"], (r["shape"], r["strides"], r["offset"])) for i, r in zip(ids, rows)}


def region_text(a: TaskArgRecord, names: dict[int, tuple[str, tuple]]) -> str:
    """``x[0:64, 128:256]``: the region a task argument covers, in its buffer's index space."""
    name, layout = names.get(a.buffer_id, (f"buffer@{a.buffer_id:#x}", None))
    box = _region(a, layout)
    if box is None:
        return f"{name}(offset {a.offset}, shape {list(a.shape)})"
    return name + "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


def _tensor_row(tid: int, name: str, dtype: str, shape: list[int] | None, strides, offset: int):
    return {
        "id": tid,
        "name": name,
        "shape": shape,
        "dtype": dtype,
        "aliases": [],
        "strides": strides,
        "offset": offset,
    }


def _region(a: TaskArgRecord, layout: tuple[list[int], tuple[int, ...], int] | None) -> Box | None:
    """The box view ``a`` covers in its buffer's index space, or None if it does not fit it."""
    if layout is None:
        return None
    shape, strides, base = layout
    rest = a.offset - base
    if rest < 0 or any(n == 0 for n in a.shape):
        return None
    start = [0] * len(shape)
    for k in sorted(range(len(shape)), key=lambda k: -strides[k]):
        start[k], rest = divmod(rest, strides[k]) if strides[k] > 0 else (0, rest)
    if rest:
        return None
    extent = [1] * len(shape)
    used: set[int] = set()
    for n, s in zip(a.shape, a.strides):
        if n <= 1:
            continue
        k = next((k for k in range(len(shape)) if k not in used and shape[k] > 1 and strides[k] == s), None)
        if k is None:
            return None
        used.add(k)
        extent[k] = n
    if any(s + e > n for s, e, n in zip(start, extent, shape)):
        return None
    return [[s, s + e] for s, e in zip(start, extent)]


def _intersect(a: Box | None, b: Box | None) -> Box | None:
    if a is None or b is None or len(a) != len(b):
        return None
    box = [[max(x[0], y[0]), min(x[1], y[1])] for x, y in zip(a, b)]
    return None if any(lo >= hi for lo, hi in box) else box


def _arg_row(a: TaskArgRecord, index_of: dict[int, int], regions: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"index": a.arg_index, "role": _ROLES[a.direction], "dtype": a.dtype}
    if a.kind == "scalar":
        row["value"] = a.value
        return row
    row.update(
        tensor=index_of[a.buffer_id],
        region=regions[(a.task_id, a.arg_index)],
        shape=list(a.shape),
        strides=list(a.strides),
        offset=a.offset,
    )
    return row


def _edge_row(e, args_of: dict[int, list[TaskArgRecord]], index_of: dict[int, int], regions: dict):
    row: dict[str, Any] = {
        "pred": e.pred,
        "succ": e.succ,
        "arg": e.arg,
        "source": e.source,
        "kind": e.kind,
        "tensor": None,
        "pred_arg": None,
        "pred_region": None,
        "succ_region": None,
        "overlap": None,
    }
    if e.source == "explicit" or e.arg < 0:
        return row
    succ_arg = next((a for a in args_of.get(e.succ, []) if a.arg_index == e.arg), None)
    if succ_arg is None or succ_arg.kind != "tensor":
        return row
    succ_region = regions[(e.succ, e.arg)]
    row.update(tensor=index_of[succ_arg.buffer_id], succ_region=succ_region)
    wanted = _READS if e.kind == "WAR" else _WRITES
    candidates = [
        a
        for a in args_of.get(e.pred, [])
        if a.kind == "tensor" and a.buffer_id == succ_arg.buffer_id and a.direction in wanted
    ]
    # NOTE: prefer the predecessor argument whose box meets succ's; a view outside the index
    # space (region None) was matched by byte range, so it is the fallback.
    best = next((a for a in candidates if _intersect(regions[(e.pred, a.arg_index)], succ_region)), None)
    best = best or (candidates[0] if candidates else None)
    if best is not None:
        pred_region = regions[(e.pred, best.arg_index)]
        row.update(
            pred_arg=best.arg_index, pred_region=pred_region, overlap=_intersect(pred_region, succ_region)
        )
    return row


# -- deps_graph.html ---------------------------------------------------------------------------


def render_html(data: dict[str, Any]) -> str:
    """The self-contained viewer for ``data`` (no network access at view time)."""
    template = (_ASSETS / "deps_graph_template.html").read_text(encoding="utf-8")
    layout_lib = (_ASSETS / "dagre.min.js").read_text(encoding="utf-8")
    # NOTE: "</" inside an inline <script> could close it; "<\/" means the same to JS and JSON.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        template.replace("/*@DAGRE@*/", layout_lib.replace("</", "<\\/"))
        .replace("/*@DATA@*/null", payload)
        .replace("@TITLE@", _html_escape(f"{data.get('program', '?')}: dependency graph"))
    )


def _html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# -- reading and summarising -------------------------------------------------------------------


def find_deps_json(path: str | os.PathLike) -> Path:
    """``deps.json`` given a build directory, its ``dfx_outputs`` or the file itself."""
    p = Path(path)
    for candidate in (p, p / DEPS_JSON, p / DFX_DIR / DEPS_JSON):
        if candidate.is_file():
            return candidate
    raise DepsError(
        f"no {DEPS_JSON} at {p}: run with --enable-dep-gen (runtime_cfg enable_dep_gen=True) to write "
        f"{DFX_DIR}/{DEPS_JSON}"
    )


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
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("tasks"), list)
        and isinstance(data.get("edges"), list)
        and all(
            isinstance(e, dict) and isinstance(e.get("pred"), int) and isinstance(e.get("succ"), int)
            for e in data["edges"]
        )
    )
    if not ok:
        raise DepsError(
            f"{file} is not a tilescope deps.json (no tasks/edges lists); run again to rewrite it"
        )
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


def summary(data: dict[str, Any]) -> str:
    """What ``tilescope deps`` prints."""
    edges = data["edges"]
    by_kind = Counter(str(e.get("kind")) for e in edges)
    by_source = Counter(str(e.get("source")) for e in edges)
    names = {t["id"]: t.get("name", f"task{t['id']}") for t in data["tasks"]}
    path = critical_path(data)
    lines = [
        f"{data.get('program', '?')}: {len(data['tasks'])} tasks, {len(edges)} edges"
        + (f" (run failed: {data.get('error')})" if data.get("status") == "failed" else ""),
        "  by kind:   " + (", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())) or "none"),
        "  by source: " + (", ".join(f"{k} {v}" for k, v in sorted(by_source.items())) or "none"),
        f"  critical path: {len(path)} tasks: " + " -> ".join(f"{t} {names.get(t, '?')}" for t in path),
    ]
    html = Path(data["_path"]).with_name(DEPS_HTML) if "_path" in data else None
    if html is not None and html.is_file():
        lines.append(f"open {html} in a browser (works offline) to explore the graph")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tilescope deps DIR`` to the ``tilescope`` command's subparsers."""
    p = subparsers.add_parser(
        "deps", help="summarise a run's dependency graph (dfx_outputs/deps.json) and point to its viewer"
    )
    p.add_argument("dir", metavar="DIR", help="a build directory, its dfx_outputs, or a deps.json")
    p.set_defaults(fn=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    import sys

    try:
        data = load_deps(args.dir)
    except DepsError as e:
        print(f"tilescope deps: {e}", file=sys.stderr)
        return 1
    print(summary(data))
    return 0


__all__ = [
    "DepsError",
    "critical_path",
    "deps_data",
    "load_deps",
    "register",
    "render_html",
    "summary",
    "write_deps",
]
