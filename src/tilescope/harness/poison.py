"""Never-written memory, found by running twice with it poisoned (``--poison``, and the
``uninitialized`` step of ``tilescope triage``).

``poison_run`` runs the build twice on sim, serially, on copies of the same inputs, with every
intermediate (``create_tensor``) and every Out argument starting as byte pattern 0xA5 in one run
and 0x5A in the other, each run recording a level-2 tensor dump and the graph; then
``debug.triage.poison.analyze`` compares them task by task. The compile-time finding for a
kernel that cannot write part of an Out param (``report/report.json``'s ``unwritten``) is joined
to the task that did not store there, so the DSL line comes with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilescope.build.report import load_report
from tilescope.debug.localize.tasks import captured_tasks
from tilescope.debug.observers import Recording
from tilescope.debug.triage.poison import PATTERNS, PoisonReport, analyze
from tilescope.harness.recorded import recorded_run
from tilescope.launch.program import CompiledProgram


@dataclass
class Poisoned:
    """The two poisoned runs' comparison, and the compile's coverage findings by kernel."""

    report: PoisonReport
    static: dict[str, list[dict[str, Any]]]  # kernel -> report.json's ``unwritten`` entries

    def static_for(self, kernel: str, param: str) -> dict[str, Any] | None:
        """The compile-time finding for ``kernel``'s Out param ``param``, if the compile made one."""
        return next((u for u in self.static.get(kernel, []) if u.get("param") == param), None)

    def lines(self) -> list[str]:
        """What the runs show, one finding a line (outputs first, then unstored regions, then reads)."""
        rep = self.report
        out = [
            f"{n} of {total} elements of output {name} depend on memory nothing wrote: {where}"
            for name, (n, total, where) in rep.outputs.items()
        ]
        groups: dict[tuple[str, str, str], list] = {}
        for u in rep.unstored:  # NOTE: one line for the tasks of one kernel that miss the same part
            groups.setdefault((u.kernel, u.param, u.where), []).append(u)
        for (kernel, param, _), same in groups.items():
            found = self.static_for(kernel, param)
            at = f"; the compile saw it: {found['message']} (at {found['at']})" if found else ""
            also = f"; the same in task(s) {', '.join(str(u.task) for u in same[1:])}" if len(same) > 1 else ""
            out.append(same[0].text() + also + at)
        out += [r.text() for r in rep.reads]
        return out


def poison_run(build: CompiledProgram, inputs: dict[str, Any]) -> Poisoned:
    """Run ``build`` twice poisoned and compare (see the module docstring).

    Raises:
        RuntimeFailure: a poisoned run failed (poison can turn into a bad index, or an Inf).
    """
    capture = Recording(record_edges=True, dump_level=2)
    runs = [recorded_run(build, inputs, capture, poison=p) for p in PATTERNS]
    (args_a, rep_a), (args_b, rep_b) = runs
    outs = [{a.name: args[i] for i, a in enumerate(build.args) if a.is_output} for args in (args_a, args_b)]
    report = analyze(build, rep_a, captured_tasks(build, rep_a), captured_tasks(build, rep_b), *outs)
    return Poisoned(report, _static(build))


def _static(build: CompiledProgram) -> dict[str, list[dict[str, Any]]]:
    """report.json's ``unwritten`` entries by kernel (none when the report is missing or older)."""
    found = load_report(build.work_dir).get("unwritten")
    out: dict[str, list[dict[str, Any]]] = {}
    for u in found if isinstance(found, list) else []:
        if isinstance(u, dict) and isinstance(u.get("kernel"), str):
            out.setdefault(u["kernel"], []).append(u)
    return out
