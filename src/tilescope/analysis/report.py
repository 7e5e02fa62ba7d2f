"""The report of every analysis (``Report``): what ``tilescope localize`` and ``tilescope triage``
found, as ``dfx_outputs/<tool>/report.json`` and the verdict they print. ``Report.from_json``
reads it back (a triage child's answer, ``tilescope localize --json`` for the agent tools).

Format ``tilescope-localize`` version 1:

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
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tilescope.build.paths import (
    DFX_DIR,
    LOCALIZE_DIR,
    LOCALIZE_JSON,
    TENSOR_DUMP_DIR,
    atomic_write,
    dfx_dir,
    inside,
)

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
class Tolerance:
    """The tolerance the data justify (``precision``, ``innocent``), and why."""

    rtol: float
    atol: float
    text: str


@dataclass
class Step:
    """One step triage ran, and its seconds (``task_timeout_s``: the first run's hang budget)."""

    step: str
    seconds: float
    task_timeout_s: float | None = None


@dataclass
class ProposedEdit:
    """One line of a file replaced: ``file`` (the DSL source, or a path inside the build), its
    1-based ``line``, the line ``before`` and ``after``, and ``why``."""

    file: str
    line: int
    before: str
    after: str
    why: str


@dataclass
class TriedEdit(ProposedEdit):
    """A candidate edit that was tried: where it applies (``target``: dsl or build), whether it
    made the outputs match, and the comparison (or why it could not run)."""

    target: str = "dsl"
    verified: bool = False
    result: str = ""


@dataclass
class ToleranceChange:
    """A fix in the test, not the kernel: the tolerance that passes, and why."""

    rtol: float
    atol: float
    why: str


@dataclass
class Search:
    """How ``--fix`` searched: the catalogue rules that made candidates (``rules``: name and count),
    the candidates screened on the interpreter and compiled and run on sim, its seconds, the best
    candidates that did not verify and why (``best``), and what to check when none did."""

    rules: dict[str, int] = field(default_factory=dict)
    screened: int = 0
    compiled: int = 0
    seconds: float = 0.0
    best: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)


@dataclass
class Fix:
    """``--fix``: the proposed change and how it was verified, or why there is none.

    ``kind``: ``dsl`` (``edit`` is of the DSL source), ``build`` (of a file of the build), ``test``
    (``test_change``), or None (no fix: ``why_none``)."""

    kind: str | None = None
    edit: ProposedEdit | None = None
    verified: bool = False
    tried: list[TriedEdit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    why_none: str | None = None
    test_change: ToleranceChange | None = None
    verified_on: str | None = None  # None: the saved data
    comparison: str | None = None
    rule: str | None = None  # the catalogue rule that made the edit
    also: list[ProposedEdit] = field(default_factory=list)  # a two-line repair's second line
    diff: str | None = None  # the edit as a unified diff of the user's file (`git apply` takes it)
    search: Search | None = None

    @classmethod
    def none(cls, why: str, tried: list[TriedEdit] | None = None, notes: list[str] | None = None) -> Fix:
        """No fix, and why."""
        return cls(tried=list(tried or []), notes=list(notes or []), why_none=why)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fix:
        """The Fix ``to_json`` wrote."""
        edit, change, search = data.get("edit"), data.get("test_change"), data.get("search")
        return cls(data.get("kind"), ProposedEdit(**edit) if edit else None, bool(data.get("verified")),
                   [TriedEdit(**t) for t in data.get("tried") or []], list(data.get("notes") or []),
                   data.get("why_none"), ToleranceChange(**change) if change else None, data.get("verified_on"),
                   data.get("comparison"), data.get("rule"), [ProposedEdit(**a) for a in data.get("also") or []],
                   data.get("diff"),
                   Search(**search) if search else None)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """JSON data: every field, the ones that do not apply (None) left out but ``kind`` and ``edit``."""
        data = asdict(self)
        return {k: v for k, v in data.items() if v is not None or k in ("kind", "edit")}


@dataclass
class Report:
    """The report every analysis writes and prints: localize, triage and its fix, the harness's
    checks, the CLI and the agent tools (see the module docstring)."""

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
    tolerance: Tolerance | None = None
    limitations: list[str] = field(default_factory=list)
    tool: str = "localize"  # who wrote it: localize, or triage
    steps: list[Step] = field(default_factory=list)  # triage: each step it ran, and its seconds
    deterministic: bool | None = None  # triage, a passing build: the same outputs across shuffled schedules
    fix: Fix | None = None  # triage --fix: the proposed edit, verified on the saved data (or why none)
    maps: list[dict[str, Any]] = field(default_factory=list, repr=False)  # report.html's heatmaps (not in the JSON)

    def to_json(self) -> dict[str, Any]:
        """The ``report.json`` object."""
        data = asdict(self)
        data.pop("maps")
        data["steps"] = [{k: v for k, v in s.items() if v is not None} for s in data["steps"]]
        data["fix"] = self.fix.to_json() if self.fix is not None else None
        return {"format": FORMAT, "version": VERSION, **_finite(data)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        """The Report ``to_json`` wrote (a child's answer, ``tilescope localize --json``'s output).

        Raises:
            ValueError: not a report of this format and version.
        """
        if data.get("format", FORMAT) != FORMAT or data.get("version", VERSION) != VERSION:
            raise ValueError(f"not a {FORMAT} report of version {VERSION}: format {data.get('format')!r}, "
                             f"version {data.get('version')!r}")  # fmt: skip
        known = {f.name for f in fields(cls)} - {"maps"}
        given = {k: v for k, v in data.items() if k in known}
        given.update({k: _numbers(data[k]) for k in ("elapsed_s", "rtol", "atol") if k in data})
        given["culprit"] = Culprit(**(data.get("culprit") or {}))
        given["fingerprint"] = [FingerprintRow(**_numbers(r)) for r in data.get("fingerprint") or []]
        given["tolerance"] = Tolerance(**_numbers(data["tolerance"])) if data.get("tolerance") else None
        given["steps"] = [Step(**s) for s in data.get("steps") or []]
        given["fix"] = Fix.from_json(data["fix"]) if data.get("fix") else None
        return cls(**given)

    def render(self) -> str:
        """The verdict as printed: a headline, the culprit, the evidence and what to run next."""
        head = f"[{self.tool}] {self.program}: {self.category}"
        if self.verdict:
            head += f" ({self.verdict})"
        lines = [head, f"  {self.summary}"]
        if any(v is not None for v in asdict(self.culprit).values()):
            lines.append(f"  culprit: {self.culprit.text()}")
        if self.tolerance:
            lines.append(f"  tolerance: {self.tolerance.text}")
        lines += [f"  - {e}" for e in self.evidence]
        lines += [f"  (limitation) {x}" for x in self.limitations]
        if self.fix is not None:
            lines += _fix_lines(self.fix)
        if self.next:
            lines.append("  next:")
            lines += [f"    {c}" for c in self.next]
        lines.append(f"  ({self.elapsed_s:.1f}s)")
        return "\n".join(lines)


def _fix_lines(fix: Fix) -> list[str]:
    """The ``fix`` of a triage report as printed: the edit (or the test-side change) and how it
    was verified, or why there is none and what was tried."""
    state = f"verified on {fix.verified_on or 'the saved data'}" if fix.verified else "NOT verified"
    e, change = fix.edit, fix.test_change
    lines = []
    if e:
        where = "the build's " + e.file if fix.kind == "build" else e.file
        lines.append(f"  fix ({state}): {where}:{e.line}: {e.why}")
        for x in sorted([e, *fix.also], key=lambda x: x.line):
            lines += ([f"    {where}:{x.line}: {x.why}"] if fix.also else []) + [f"    - {x.before.strip()}",
                                                                               f"    + {x.after.strip()}"]  # fmt: skip
    elif change:
        lines.append(f"  fix ({state}), in the test, not the kernel: rtol={change.rtol:g}, atol={change.atol:g}: "
                     f"{change.why}")  # fmt: skip
    else:
        lines.append(f"  fix: none: {fix.why_none}")
        lines += [f"    tried {t.file}:{t.line}: `{t.after.strip()}`: {t.result}" for t in fix.tried]
        if fix.search is not None:
            lines += [f"    best on the interpreter: {b}" for b in fix.search.best]
            lines += [f"    check: {c}" for c in fix.search.check]
    if (e or change) and fix.comparison:
        lines.append(f"    ({fix.comparison})")
    if fix.search is not None:
        s = fix.search
        lines.append(f"    (searched: {s.screened} candidates screened on the interpreter, {s.compiled} compiled and "
                     f"run, from {len([r for r in s.rules if r != 'two-line pairs'])} catalogue rules, in {s.seconds:.1f}s"
                     + (f"; the repair is rule '{fix.rule}')" if fix.rule else ")"))  # fmt: skip
    lines += [f"    (note) {n}" for n in fix.notes if n]
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


def _numbers(value: Any) -> Any:
    """``value`` with the strings ``_finite`` wrote for infinite and NaN floats as floats again."""
    if value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    return value


def write_report(work_dir: Path, report: Report, where: str = LOCALIZE_DIR) -> Path:
    """Write ``<build>/dfx_outputs/<where>/report.json`` (localize's, or triage's); returns its path."""
    path = inside(dfx_dir(work_dir, where), LOCALIZE_JSON)
    atomic_write(path, json.dumps(report.to_json(), indent=1) + "\n")
    return path


def localize_dump(work_dir: str | os.PathLike) -> Path:
    """``<build>/dfx_outputs/localize/tensor_dump``: the dump of localize's run, written when a
    next step it prints shows records of it (a probe's values)."""
    return inside(work_dir, DFX_DIR, LOCALIZE_DIR, TENSOR_DUMP_DIR)


__all__ = ["Culprit", "FingerprintRow", "Fix", "ProposedEdit", "Report", "Step", "ToleranceChange", "Tolerance", "TriedEdit",
           "localize_dump", "write_report"]
