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

Running it:
What a build's tasks actually touched: the access audit run and the race proof over its graph.

``audit_run`` compiles every kernel as the build holds it with the access audit on
(``debug.triage.audit``), runs the program once on sim, serially, on copies of the given inputs,
recording the graph, and returns an ``Audit``: the regions each task declared, what its kernel
loaded and stored, the accesses outside the declared regions (``strays``) and every pair of tasks
that overlap with a write but are not ordered by a path of edges (``hazards``).

Invariants: the build's files are only read (the audit build is compiled from copies, under
``dfx_outputs/triage/audit/``); the given inputs are never written (the run has copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope.analysis.hazards import Box, Hazard, Order, Span, contains, hazards, layout_box, layout_of
from tilescope.analysis.recorded import crash_report_to
from tilescope.build.manifest import Build
from tilescope.build.paths import AUDIT_DIR, TRIAGE_DIR, atomic_write, confined, dfx_dir
from tilescope.debug.deps_json import buffer_names, region_box
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.symbolize import dsl_marker
from tilescope.errors import RuntimeFailure, TilescopeError
from tilescope.ir import dtypes
from tilescope.launch.program import CompiledProgram
from tilescope.launch.run import Binaries, launch
from tilescope.runtime.guarded import guarded_args
from tilescope.runtime.library import load_entry, probe_sink, sink_installer
from tilescope.runtime.records import RunReport, TaskArgRecord
from tilescope.runtime.run_config import Recording, RunConfig
from tilescope.toolchain import BuildJob
from tilescope.toolchain import build as build_objects

AUDIT_PROBE = -1  # audit.hpp's kAuditProbe
AUDIT_FLAG = "-DTS_AUDIT_ACCESSES"
_OPS = {0: "load", 1: "store"}


class AuditBuildError(TilescopeError):
    """The audit build of a kernel does not compile (the compiler's message says why)."""


def compile_audit_build(build: Build) -> list[Path]:
    """Compile every kernel of ``build`` as the build holds it with the access audit on; the
    shared objects, by func_id."""
    folder = dfx_dir(build.work_dir, TRIAGE_DIR, AUDIT_DIR)
    jobs = []
    for k in build.kernels:
        source = confined(build.work_dir, k["source"], f"kernel {k['name']}'s source")
        copy = folder / f"{k['name']}.cpp"
        # NOTE: compiled from a copy (written whole, so two triages at once never see half of it): the
        # build's own file is never touched
        atomic_write(copy, source.read_text())
        # NOTE: the kernel's own directory stays on the include path: a hand edit may include a header beside it
        jobs.append(
            BuildJob(copy, copy.with_suffix(".so"), include_dirs=(source.parent,), extra_flags=(AUDIT_FLAG,))
        )
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
    names = buffer_names(build, report, program_shapes=True)
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
    names = buffer_names(build, report, program_shapes=True)
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


@dataclass
class Audit:
    """What one audited run of a build found (see the module docstring)."""

    report: RunReport
    declared: list[Span]
    audited: list[Span]
    strays: list[Stray]
    hazards: list[Hazard]
    names: dict[int, tuple[str, tuple]] = field(default_factory=dict)
    kernels: dict[int, str] = field(default_factory=dict)  # task id -> kernel name
    sources: dict[int, str] = field(default_factory=dict)  # task id -> its kernel's C++ in the build
    dsl: dict[tuple[int, int], str | None] = field(default_factory=dict)  # (task, C++ line) -> DSL file:line
    failure: str | None = None  # the run failed part way (what it recorded is still checked)

    def region(self, s: Span, box: Box | None = None) -> str:
        """``y[64:128, 0:64]``: a span's region (or ``box``) in its buffer's shape."""
        name = self.names.get(s.buffer, (f"memory@{s.buffer:#x}", None))[0]
        box = box if box is not None else s.shown
        if box is None:
            return f"{name} (bytes {s.lo:#x}..{s.hi:#x})"
        return name + "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"

    def who(self, s: Span) -> str:
        """``task 4 (kernel consume)``."""
        return f"task {s.task} (kernel {self.kernels.get(s.task, '?')})"

    def access(self, s: Span) -> str:
        """``load of y[32:96, 0:64] at kernels/vec/consume.cpp:18 (model.py:25)``, or a declared region."""
        if not s.audited:
            return f"{s.op} {self.region(s)}"
        at = f" at {self.sources.get(s.task, 'C++ line ')}:{s.line}" if s.line else ""
        dsl = self.dsl.get((s.task, s.line or 0))
        return f"{s.op} of {self.region(s)}{at}" + (f" ({dsl})" if dsl else "")

    def stray_text(self, st: Stray) -> str:
        """One line per stray access: who, what, and the region it left."""
        where = f"outside its declared {st.declared.op} {self.region(st.declared)}" if st.declared else (
            "through a pointer it was not given")  # fmt: skip
        if st.declared is not None and st.access.write and not st.declared.write and contains(st.declared.box,
                                                                                                st.access.box):  # fmt: skip
            where = f"into its declared input {self.region(st.declared)} (declared In, written)"
        return f"{self.who(st.access)}: {self.access(st.access)} {where}"

    def hazard_text(self, h: Hazard) -> str:
        """One line per unordered pair: both tasks, both accesses, the overlap."""
        overlap = f"; they overlap at {self.region(h.first, h.overlap)}" if h.overlap is not None else ""
        return (
            f"{self.who(h.first)} {self.access(h.first)} and {self.who(h.second)} {self.access(h.second)} "
            f"are not ordered by any path of dependencies ({h.kind}){overlap}"
        )


def audit_run(build: CompiledProgram, inputs: dict[str, Any]) -> Audit:
    """Run ``build`` once with the access audit on (see the module docstring).

    Raises:
        AuditBuildError: a kernel's C++ does not compile with the audit on.
    """
    libraries = [load_entry(so, "kernel_entry") for so in compile_audit_build(build)]
    normal = build.binaries()
    binaries = Binaries(normal.orchestration, [e.address for e in libraries],
                        [*normal.libraries, *(e.library for e in libraries)],
                        [sink_installer(e.library) for e in libraries])  # fmt: skip
    installers = [sink_installer(e.library, "ts_audit_install") for e in libraries]
    args = guarded_args([inputs[a.name] for a in build.args])  # aliasing inputs stay aliased
    config = RunConfig.for_analysis(serial=True, log_level="error", crash_report=crash_report_to.get())
    sink = probe_sink()
    failure = None
    for install in installers:
        if install is not None:
            install(sink)
    try:
        capture = Recording(record_edges=True, record_task_times=True, probes=True)
        report = launch(build, binaries, args, config, capture=capture).report
    except RuntimeFailure as e:
        report, failure = getattr(e, "report", None), str(e)
        if report is None:
            raise
    finally:
        for install in installers:
            if install is not None:
                install(None)
    return audit_of(build, report, failure)


def audit_of(build: CompiledProgram, report: RunReport, failure: str | None = None) -> Audit:
    """The audit of one recorded run: strays and hazards over declared and audited accesses."""
    declared = declared_spans(build, report)
    audited = audited_spans(build, report)
    found = strays(declared, audited)
    order = Order(report.num_tasks, [(e.pred, e.succ) for e in report.edges])
    # NOTE: what a task did inside its declared regions is what it declared; only the strays add accesses
    extra = [st.access for st in found]
    func_ids = {t.task_id: t.func_id for t in report.tasks}
    kernels = {t: build.kernels[f]["name"] for t, f in func_ids.items()}
    sources = {t: build.kernels[f]["source"] for t, f in func_ids.items()}
    dsl = {(s.task, s.line or 0): dsl_line(build, func_ids[s.task], s.line) for s in extra if s.task in func_ids}
    return Audit(report, declared, audited, found, hazards(declared + extra, order), buffer_names(build, report, program_shapes=True),
                 kernels, sources, dsl, failure)  # fmt: skip
