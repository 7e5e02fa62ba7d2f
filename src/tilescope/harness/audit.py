"""What a build's tasks actually touched: the access audit run and the race proof over its graph.

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
from typing import Any

from tilescope import knobs
from tilescope.debug.deps import buffer_names
from tilescope.debug.observers import Recording
from tilescope.debug.triage.audit import (
    Stray,
    audited_spans,
    compile_audit_build,
    declared_spans,
    dsl_line,
    strays,
)
from tilescope.debug.triage.hazards import Box, Hazard, Order, Span, contains, hazards
from tilescope.errors import RuntimeFailure
from tilescope.harness.recorded import crash_report_to
from tilescope.launch.program import CompiledProgram
from tilescope.launch.run import Binaries, launch
from tilescope.runtime.guarded import guarded_args
from tilescope.runtime.library import load_entry, probe_sink, sink_installer
from tilescope.runtime.records import RunReport


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
    opts = knobs.runtime_options({"serial": True, "log_level": "error"})
    sink = probe_sink()
    failure = None
    for install in installers:
        if install is not None:
            install(sink)
    try:
        capture = Recording(record_edges=True, record_task_times=True, probes=True)
        report = launch(build, binaries, args, opts, capture=capture, crash_report=crash_report_to.get()).report
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
    return Audit(report, declared, audited, found, hazards(declared + extra, order), buffer_names(build, report),
                 kernels, sources, dsl, failure)  # fmt: skip
