"""What ``tilescope localize`` found: ``dfx_outputs/localize/report.json`` and the verdict it prints.

Format ``tilescope-localize`` version 1 (the triage report reuses it):

- ``tool``: ``localize`` or ``triage`` (which wrote it).
- ``category``: ``codegen`` (the compiled code disagrees with the program's own semantics),
  ``algorithm`` (sim agrees with the program, the program does not compute the golden),
  ``precision`` (the program computes the golden, but its dtypes lose accuracy) or ``pass``;
  triage adds ``compile_error``, ``bad_input``, ``signature``, ``crash``, ``hang``,
  ``deadlock``, ``out_of_bounds``, ``nan``, ``race``, ``uninitialized`` and ``unknown`` (its
  budget was spent before an answer; docs/failures.md).
- ``verdict``: ``guilty`` or ``innocent`` for ``precision`` (is the error more than the dtypes
  justify?), else null.
- ``culprit``: ``task``, ``kernel``, ``op``, ``dsl_line`` (``file:line``), ``cpp_line``
  (``path/in/build.cpp:line``); any of them null when not known.
- ``summary`` (one sentence), ``evidence`` (strings with the numbers), ``next`` (commands),
  ``elapsed_s``, and ``fingerprint`` (each output against the golden, interp, float64),
  ``tolerance`` (``precision``/``innocent``: the tolerance the data justify, and why),
  ``limitations`` (what could not be judged, and why); triage's ``steps`` (each step it ran, with
  its seconds), ``deterministic`` (a passing build: whether shuffled schedules agreed, else null)
  and, with ``--fix``, ``fix``: ``kind`` (``dsl``: an edit of the DSL source; ``build``: of a
  file of the build, its C++ or its IR dump, ``file`` relative to it; ``test``: a change to the
  test, not the kernel; null: none), ``edit`` (``file``, ``line``, ``before``, ``after``,
  ``why``; null when none), ``test_change`` (``rtol``, ``atol``, ``why``, for ``test``),
  ``verified``, ``verified_on`` (absent: the saved data; ``this run's inputs`` for a program that
  did not compile), ``comparison``, ``tried`` (every candidate: its edit, ``target``, ``verified``
  and ``result``), ``notes`` (where the edit applies, e.g. a source changed since the build)
  and ``why_none``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tilescope.build.paths import LOCALIZE_DIR, LOCALIZE_JSON, atomic_write, dfx_dir

FORMAT = "tilescope-localize"
VERSION = 1


@dataclass
class Culprit:
    """Where the wrong answer comes from, as far as it is known."""

    task: int | None = None
    kernel: str | None = None
    op: str | None = None
    dsl_line: str | None = None
    cpp_line: str | None = None

    def text(self) -> str:
        """``task 3, kernel up_silu, op exp at model.py:31 (kernels/vec/up_silu.cpp:24)``."""
        parts = []
        if self.task is not None:
            parts.append(f"task {self.task}")
        if self.kernel:
            parts.append(f"kernel {self.kernel}")
        if self.op:
            parts.append(f"op {self.op}")
        where = " at " + self.dsl_line if self.dsl_line else ""
        cpp = f" ({self.cpp_line})" if self.cpp_line else ""
        if not parts:  # NOTE: only a place is known (a compile error): say it plainly
            return (self.dsl_line or "") + (f" ({self.cpp_line})" if self.dsl_line and self.cpp_line else self.cpp_line or "")
        return ", ".join(parts) + where + cpp


@dataclass
class FingerprintRow:
    """One output compared one way: ``pair`` is ``sim~golden``, ``interp~golden``, ``float64~golden``,
    ``sim~interp``, ``sim~float64``, ``interp~float64`` or ``golden~float64``."""

    output: str
    pair: str
    mismatches: int  # elements outside rtol/atol
    numel: int
    max_abs: float
    max_rel: float
    outside_bound: int | None = None  # against float64: elements beyond the error bound


@dataclass
class LocalizeReport:
    """The report ``tilescope localize`` writes and prints (see the module docstring)."""

    program: str
    build: str
    data: str
    category: str
    summary: str
    verdict: str | None = None
    culprit: Culprit = field(default_factory=Culprit)
    evidence: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    rtol: float = 0.0
    atol: float = 0.0
    fingerprint: list[FingerprintRow] = field(default_factory=list)
    tolerance: dict[str, Any] | None = None
    limitations: list[str] = field(default_factory=list)
    tool: str = "localize"  # who wrote it: localize, or triage
    steps: list[dict[str, Any]] = field(default_factory=list)  # triage: each step it ran, and its seconds
    deterministic: bool | None = None  # triage, a passing build: the same outputs across shuffled schedules
    fix: dict[str, Any] | None = None  # triage --fix: the proposed edit, verified on the saved data (or why none)
    maps: list[dict[str, Any]] = field(default_factory=list, repr=False)  # report.html's heatmaps (not in the JSON)

    def to_json(self) -> dict[str, Any]:
        """The ``report.json`` object."""
        data = asdict(self)
        data.pop("maps")
        return {"format": FORMAT, "version": VERSION, **_finite(data)}

    def render(self) -> str:
        """The verdict as printed: a headline, the culprit, the evidence and what to run next."""
        head = f"[{self.tool}] {self.program}: {self.category}"
        if self.verdict:
            head += f" ({self.verdict})"
        lines = [head, f"  {self.summary}"]
        if any(v is not None for v in asdict(self.culprit).values()):
            lines.append(f"  culprit: {self.culprit.text()}")
        if self.tolerance:
            lines.append(f"  tolerance: {self.tolerance['text']}")
        lines += [f"  - {e}" for e in self.evidence]
        lines += [f"  (limitation) {x}" for x in self.limitations]
        if self.fix is not None:
            lines += _fix_lines(self.fix)
        if self.next:
            lines.append("  next:")
            lines += [f"    {c}" for c in self.next]
        lines.append(f"  ({self.elapsed_s:.1f}s)")
        return "\n".join(lines)


def _fix_lines(fix: dict[str, Any]) -> list[str]:
    """The ``fix`` of a triage report as printed: the edit (or the test-side change) and how it
    was verified, or why there is none and what was tried."""
    state = f"verified on {fix.get('verified_on', 'the saved data')}" if fix.get("verified") else "NOT verified"
    e, change = fix.get("edit"), fix.get("test_change")
    lines = []
    if e:
        where = "the build's " + e["file"] if fix.get("kind") == "build" else e["file"]
        lines += [f"  fix ({state}): {where}:{e['line']}: {e['why']}", f"    - {e['before'].strip()}",
                  f"    + {e['after'].strip()}"]  # fmt: skip
    elif change:
        lines.append(f"  fix ({state}), in the test, not the kernel: rtol={change['rtol']:g}, atol={change['atol']:g}: "
                     f"{change['why']}")  # fmt: skip
    else:
        lines.append(f"  fix: none: {fix.get('why_none')}")
        lines += [f"    tried {t['file']}:{t['line']}: `{t['after'].strip()}`: {t['result']}" for t in fix.get("tried", [])]
    if (e or change) and fix.get("comparison"):
        lines.append(f"    ({fix['comparison']})")
    lines += [f"    (note) {n}" for n in fix.get("notes", []) if n]
    return lines


def _finite(value: Any) -> Any:
    """``value`` with infinite and NaN floats as strings (JSON has no such numbers)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_report(work_dir: Path, report: LocalizeReport, where: str = LOCALIZE_DIR) -> Path:
    """Write ``<build>/dfx_outputs/<where>/report.json`` (localize's, or triage's); returns its path."""
    folder = dfx_dir(work_dir) / where
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCALIZE_JSON
    atomic_write(path, json.dumps(report.to_json(), indent=1) + "\n")
    return path


__all__ = ["Culprit", "FingerprintRow", "LocalizeReport", "write_report"]
