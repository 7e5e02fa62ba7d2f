"""The access audit of a build: what each task's kernel actually loaded and stored, against the
regions the task declared.

Invariants:
- The audit build of a kernel is its C++ exactly as the build holds it (hand edits included),
  compiled with ``-DTS_AUDIT_ACCESSES`` into ``dfx_outputs/triage/audit/`` (through the object
  cache); its line numbers are the build's. Every load and store then hands the core one record
  (``runtime/include/tilescope/audit.hpp``), kept with its task as a probe record of id
  ``AUDIT_PROBE``.
- ``declared_spans`` reads a run recorded with ``record_edges``; ``audited_spans`` its probe
  records. An audited access goes through the view of the task argument whose first element is
  at the record's address (None: a pointer the task was not given); its box is taken in that
  argument's buffer's index space, or, for a pointer no argument holds, in the buffer whose
  bytes hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tilescope.build.manifest import Build
from tilescope.build.paths import TRIAGE_DIR, atomic_write, confined, dfx_dir
from tilescope.debug.deps import buffer_names, region_box
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.symbolize import dsl_marker
from tilescope.debug.triage.hazards import Span, contains, layout_box, layout_of
from tilescope.errors import TilescopeError
from tilescope.ir import dtypes
from tilescope.runtime.records import RunReport, TaskArgRecord
from tilescope.toolchain import BuildJob
from tilescope.toolchain import build as build_objects

AUDIT_DIR = "audit"  # dfx_outputs/triage/audit/<kernel>.so
AUDIT_PROBE = -1  # audit.hpp's kAuditProbe
AUDIT_FLAG = "-DTS_AUDIT_ACCESSES"
_OPS = {0: "load", 1: "store"}


class AuditBuildError(TilescopeError):
    """The audit build of a kernel does not compile (the compiler's message says why)."""


def compile_audit_build(build: Build) -> list[Path]:
    """Compile every kernel of ``build`` as the build holds it with the access audit on; the
    shared objects, by func_id."""
    folder = dfx_dir(build.work_dir) / TRIAGE_DIR / AUDIT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    jobs = []
    for k in build.kernels:
        source = confined(build.work_dir, k["source"], f"kernel {k['name']}'s source")
        copy = folder / f"{k['name']}.cpp"
        # NOTE: compiled from a copy (written whole, so two triages at once never see half of it): the
        # build's own file is never touched
        atomic_write(copy, source.read_text())
        # NOTE: the kernel's own directory stays on the include path: a hand edit may include a header beside it
        jobs.append(BuildJob(copy, copy.with_suffix(".so"), extra_flags=(AUDIT_FLAG, f"-I{source.parent}")))
    try:
        build_objects(jobs)
    except Exception as e:  # noqa: BLE001 - whatever the compiler says is the reason
        raise AuditBuildError(f"the access audit build in {folder} does not compile: {e}") from None
    return [j.output for j in jobs]


@dataclass(frozen=True)
class Stray:
    """An audited access outside every region its task declared for that buffer (or a store
    through a view the task declared as read-only), and the declared region it left."""

    access: Span
    declared: Span | None


def _itemsize(dtype: str) -> int:
    return dtypes.by_name(dtype).itemsize


def _extent_bytes(shape, strides, itemsize: int) -> tuple[int, int]:
    """The byte offsets [lo, hi) a strided box spans from its first element."""
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
    return lo * itemsize, (hi + 1) * itemsize


def arg_bytes(a: TaskArgRecord) -> tuple[int, int]:
    """The absolute byte range [lo, hi) a task argument's view spans (negative strides too)."""
    size = _itemsize(a.dtype)
    start = a.buffer_id + a.offset * size
    lo, hi = _extent_bytes(a.shape, a.strides, size)
    return start + lo, start + hi


def _layouts(report: RunReport) -> dict[int, tuple[tuple[int, ...] | None, int]]:
    """Each buffer's layout (``hazards.layout_of`` of its full tensor) and element size."""
    return {b.buffer_id: (layout_of(b.shape, b.strides), _itemsize(b.dtype)) for b in report.buffers}


def declared_spans(build: Build, report: RunReport) -> list[Span]:
    """Every tensor argument of every task, as the access it declares."""
    names = buffer_names(build, report)
    layouts = _layouts(report)
    out = []
    for a in report.task_args:
        if a.kind != "tensor":
            continue
        lo, hi = arg_bytes(a)
        shown = region_box(a, names.get(a.buffer_id, (None, None))[1])
        layout, item = layouts.get(a.buffer_id, (None, 0))
        box = layout_box(a.shape, a.strides, a.offset, layout) if item == _itemsize(a.dtype) else None
        out.append(
            Span(a.task_id, a.buffer_id, a.direction, a.direction in ("out", "inout"), box, lo, hi, a.arg_index,
                 None, _tuple(shown))  # fmt: skip
        )
    return out


def _tuple(box) -> tuple[tuple[int, int], ...] | None:
    return None if box is None else tuple((lo, hi) for lo, hi in box)


def audited_spans(build: Build, report: RunReport) -> list[Span]:
    """Every load and store the audit recorded, as accesses of their tasks."""
    dump = report.dump
    if dump is None:
        return []
    names = buffer_names(build, report)
    args: dict[int, list[TaskArgRecord]] = {}
    for a in report.task_args:
        if a.kind == "tensor":
            args.setdefault(a.task_id, []).append(a)
    extents = _buffer_extents(report)
    layouts = _layouts(report)
    out = []
    for r in dump.records:
        if r.stage != "probe" or r.value != AUDIT_PROBE:
            continue
        row = record_tensor(dump.payload, r)
        if row is None:
            continue
        v = [int(x) for x in row.reshape(-1).tolist()]
        op, line, address, size, n, rows, cols = v[:7]
        offsets, strides = v[7 : 7 + n], v[7 + n : 7 + 2 * n]
        shape = [1] * n
        if n >= 1:
            shape[-1] = cols
        if n >= 2:
            shape[-2] = rows
        first = address + sum(o * s for o, s in zip(offsets, strides)) * size
        lo, hi = _extent_bytes(shape, strides, size)
        arg = next((a for a in args.get(r.task_id, []) if a.buffer_id + a.offset * _itemsize(a.dtype) == address), None)
        buffer = arg.buffer_id if arg is not None else _holder(extents, first + lo)
        box = shown = None
        if buffer is not None and arg is not None:
            view = TaskArgRecord(r.task_id, -1, "tensor", "in", arg.dtype, buffer, n, tuple(shape), tuple(strides),
                                 (first - buffer) // size)  # fmt: skip
            shown = _tuple(region_box(view, names.get(buffer, (None, None))[1]))
            layout, item = layouts.get(buffer, (None, 0))
            box = layout_box(view.shape, view.strides, view.offset, layout) if item == size else None
        out.append(
            Span(r.task_id, buffer if buffer is not None else first, _OPS.get(op, "load"), op == 1, box,
                 first + lo, first + hi, arg.arg_index if arg is not None else None, line, shown)  # fmt: skip
        )
    return out


def _buffer_extents(report: RunReport) -> list[tuple[int, int, int]]:
    """Each buffer's byte range (lo, hi, id)."""
    out = []
    for b in report.buffers:
        size = _itemsize(b.dtype)
        lo, hi = _extent_bytes(b.shape, b.strides, size)
        start = b.buffer_id + b.offset * size
        out.append((start + lo, start + hi, b.buffer_id))
    return out


def _holder(extents: list[tuple[int, int, int]], address: int) -> int | None:
    return next((b for lo, hi, b in extents if lo <= address < hi), None)


def strays(declared: list[Span], audited: list[Span]) -> list[Stray]:
    """The audited accesses that leave their task's declared regions of that buffer, or store
    through a region the task declared read-only (one per task, argument, op and line)."""
    mine: dict[tuple[int, int], list[Span]] = {}
    for d in declared:
        mine.setdefault((d.task, d.buffer), []).append(d)
    seen: set[tuple] = set()
    out = []
    for s in audited:
        regions = mine.get((s.task, s.buffer), [])
        inside = [d for d in regions if (contains(d.box, s.box) if s.box is not None else d.lo <= s.lo and s.hi <= d.hi)]
        if inside and (not s.write or any(d.write for d in inside)):
            continue
        key = (s.task, s.arg, s.op, s.line)
        if key in seen:
            continue
        seen.add(key)
        own = next((d for d in regions if d.arg == s.arg), regions[0] if regions else None)
        out.append(Stray(s, own))
    return out


def dsl_line(build: Build, func_id: int, cpp_line: int | None) -> str | None:
    """The DSL ``file:line`` the build's kernel C++ names on ``cpp_line`` (its ``// @`` marker, or
    the nearest one above it: ``symbolize.dsl_marker``)."""
    if cpp_line is None:
        return None
    try:
        source = confined(build.work_dir, build.kernels[func_id]["source"], "kernel source")
    except (TilescopeError, ValueError):
        return None
    return dsl_marker(str(source), cpp_line) or None
