"""The dependency graph of a sim run, written after it: ``dfx_outputs/deps.json`` and
``deps_graph.html`` (``enable_dep_gen``; read by ``tilescope deps``, ``tools/deps.py``).

Invariants:
- ``deps.json`` is built only from a ``RunReport`` recorded with ``record_edges`` (edges, task
  arguments, buffers) and the build's kernel table; it lists every recorded edge, one row each,
  in the runtime's order (by successor, then predecessor, argument and kind).
- A region is a box ``[[start, stop), ...]`` in its buffer's index space (the full tensor that
  defines the buffer: a program argument or an intermediate); ``null`` when the view does not
  fit that index space (the runtime then compares byte ranges). ``overlap`` is the intersection
  of the two boxes, ``null`` for explicit edges.
- Orchestration reads (``n = counts[e]``) are ``reads`` rows, in program order, never edges:
  ``edges`` stay task -> task. A read row names the tasks it ``waited_for`` (each with the
  argument and region that wrote the element, in ``producers``) and ``next_task``, the first task
  the orchestration submitted after it; the viewer draws a node per read with an edge from each
  producer.
- ``deps_graph.html`` is self-contained: the layout library (vendored ``dagre.min.js``), the
  viewer script, the style and the data are inlined, so it works offline.
- Both files are replaced atomically.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tilescope.build.manifest import Build
from tilescope.build.paths import DEPS_HTML, DEPS_JSON, atomic_write, inside
from tilescope.runtime.records import OrchReadRecord, RunReport, TaskArgRecord

FORMAT = 1
ASSETS = Path(__file__).resolve().parent.parent / "tools"  # deps_graph_template.html, dagre.min.js
_ROLES = {"in": "input", "out": "output", "inout": "inout", "scalar": "scalar"}
_WRITES = ("out", "inout")
_READS = ("in", "inout")

Box = list[list[int]]


# -- deps.json ---------------------------------------------------------------------------------


def write_deps(out_dir: Path, program: Build, report: RunReport) -> list[Path]:
    """Write ``out_dir/deps.json`` and ``out_dir/deps_graph.html`` for ``report``; return both paths."""
    data = deps_data(program, report)
    json_path, html_path = inside(out_dir, DEPS_JSON), inside(out_dir, DEPS_HTML)
    atomic_write(json_path, json.dumps(data, indent=1) + "\n")
    atomic_write(html_path, render_html(data))
    return [json_path, html_path]


def deps_data(program: Build, report: RunReport) -> dict[str, Any]:
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
        (a.task_id, a.arg_index): region_box(a, layouts.get(a.buffer_id))
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
    reads = [_read_row(i, r, args_of, index_of, regions, layouts) for i, r in enumerate(report.reads)]
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
            "reads": len(reads),
        },
        "tasks": tasks,
        "tensors": tensors,
        "edges": edges,
        "reads": reads,
    }


def _read_row(i: int, r: OrchReadRecord, args_of: dict, index_of: dict[int, int], regions: dict, layouts: dict):
    """One orchestration read: where, what, the value, and the producers it waited for (the
    argument of each that wrote the element, and that argument's region)."""
    one = TaskArgRecord(-1, -1, "tensor", "in", r.dtype, r.buffer_id, 1, (1,), (1,), r.element)
    element = region_box(one, layouts.get(r.buffer_id))
    producers = []
    for task in r.waited_for:
        writes = [
            a
            for a in args_of.get(task, [])
            if a.kind == "tensor" and a.buffer_id == r.buffer_id and a.direction in _WRITES
        ]
        best = next((a for a in writes if _intersect(regions[(task, a.arg_index)], element)), None)
        best = best or (writes[0] if writes else None)
        producers.append(
            {
                "task": task,
                "arg": best.arg_index if best is not None else None,
                "region": regions[(task, best.arg_index)] if best is not None else None,
            }
        )
    return {
        "id": i,
        "label": f"read {r.label}",
        "tensor": index_of.get(r.buffer_id),
        "name": r.name,
        "index": list(r.index),
        "element": element,
        "dtype": r.dtype,
        "value": r.value,
        "where": r.where,
        "waited_for": list(r.waited_for),
        "producers": producers,
        "next_task": r.next_task,
        "wait_us": (r.wait_end_ns - r.wait_start_ns) / 1000.0,
    }


def _tensors(program: Build, report: RunReport) -> tuple[list[dict[str, Any]], list[int]]:
    """One row per buffer (program arguments first, then intermediates), and their ids. An
    intermediate is named by its orchestration variable (``h``; ``h#1``, ``h#2`` for the later
    ones a loop creates), or ``tmp<k>`` by its creation index when the build does not say."""
    rows: list[dict[str, Any]] = []
    ids: list[int] = []
    ntmp = 0
    seen: dict[str, int] = {}
    for b in report.buffers:
        if b.buffer_id in ids:  # program arguments aliasing one storage are one buffer
            row = rows[ids.index(b.buffer_id)]
            if b.program_arg >= 0:
                row["aliases"].append(program.args[b.program_arg].name)
            continue
        if b.program_arg >= 0:
            name = program.args[b.program_arg].name
        elif b.name:
            count = seen.get(b.name, 0)
            seen[b.name] = count + 1
            name = b.name if count == 0 else f"{b.name}#{count}"
            ntmp += 1
        else:
            name, ntmp = f"tmp{ntmp}", ntmp + 1
        ids.append(b.buffer_id)
        rows.append(_tensor_row(len(rows), name, b.dtype, list(b.shape), b.strides, b.offset))
    return rows, ids


def buffer_names(program: Build, report: RunReport, program_shapes: bool = False) -> dict[int, tuple[str, tuple]]:
    """Each buffer's display name (its program argument's name, or the intermediate's) and layout
    (shape, strides, offset), by buffer id, as the runtime holds it (a 0-dim argument is one
    element of shape [1]). With ``program_shapes``, a 0-dim program argument has the layout
    ``([], (), offset)``, so its regions read ``loss[]`` and index the program's 0-dim tensor, as
    the analyses that compare with interp and the golden need."""
    rows, ids = _tensors(program, report)
    zero_dim = set()
    if program_shapes:
        zero_dim = {b.buffer_id for b in report.buffers if b.program_arg >= 0 and program.args[b.program_arg].shape == ()}
    return {
        i: (r["name"], ([], (), r["offset"]) if i in zero_dim else (r["shape"], r["strides"], r["offset"]))
        for i, r in zip(ids, rows)
    }


def region_text(a: TaskArgRecord, names: dict[int, tuple[str, tuple]]) -> str:
    """``x[0:64, 128:256]``: the region a task argument covers, in its buffer's index space."""
    name, layout = names.get(a.buffer_id, (f"buffer@{a.buffer_id:#x}", None))
    box = region_box(a, layout)
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


def region_box(a: TaskArgRecord, layout: tuple[list[int], tuple[int, ...], int] | None) -> Box | None:
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
    template = (ASSETS / "deps_graph_template.html").read_text(encoding="utf-8")
    layout_lib = (ASSETS / "dagre.min.js").read_text(encoding="utf-8")
    # NOTE: "</" inside an inline <script> could close it; "<\/" means the same to JS and JSON.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        template.replace("/*@DAGRE@*/", layout_lib.replace("</", "<\\/"))
        .replace("/*@DATA@*/null", payload)
        .replace("@TITLE@", _html_escape(f"{data.get('program', '?')}: dependency graph"))
    )


def _html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
