"""What ``tilescope triage --fix`` tries (``harness.fix`` tries it): the candidate edits the
evidence of a triage report points to, and the source each one edits.

Invariants:
- The source is the DSL file the build was compiled from (``report.json``'s ``dsl_sources``: a
  relative path is never looked up from the working directory), read in its declared encoding;
  when it is gone, changed since the build, unreadable, or cannot give the program (built inside
  a function), the candidates edit the build's IR dump instead, and ``Found.notes`` say why.
- Candidates come in the order of the evidence: the culprit's hand-edited C++ first, then the
  rules of ``RULES`` that answer its category and op, in the table's order, each rule's edits
  smallest first. A new kind of repair is one ``Rule`` (its edits in ``fix.rules``).
"""

from __future__ import annotations

import ast
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope.analysis.fix import rules
from tilescope.analysis.fix.catalogue import CATALOGUE
from tilescope.analysis.fix.edit import Edit, Source, loop_bound_edits
from tilescope.analysis.localize.source_map import (
    diff_lines,
    edited_lines,
    kernel_sites,
    orchestration_sites,
    submits,
)
from tilescope.analysis.report import Report
from tilescope.build.build_report import load_report
from tilescope.build.manifest import Build
from tilescope.build.paths import IR_DIR, confined
from tilescope.build.state import hand_edited, sha256_file
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.debug.symbolize import dsl_file
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Const, For, Store
from tilescope.ir.traverse import walk_stmts

# the first line of a kernel's C++ names the DSL line of its def (``codegen.cpp_common.header_comment``)
_ORIGIN = re.compile(r" from (?P<file>.+):(?P<line>\d+)\.$")


@dataclass(frozen=True)
class Candidate:
    """An edit to try, and what it edits: ``dsl`` (the user's DSL file, by copy) or ``build`` (a
    file of the build, ``edit.file`` relative to it, by copy of the build); ``also``: the second
    line of a two-line repair; ``rule``: the catalogue rule that made it; ``culprit``: made at the
    culprit's statement (not in the wider search); ``rank``: how closely its rule answers the verdict."""

    edit: Edit
    target: str
    also: tuple[Edit, ...] = ()
    rule: str = ""
    culprit: bool = True
    rank: int = 0  # how closely its rule answers the verdict (``Rule.rank``: 0 names the culprit's op)

    @property
    def edits(self) -> tuple[Edit, ...]:
        """Every edit of the candidate, in line order."""
        return tuple(sorted((self.edit, *self.also), key=lambda e: e.line))

    @property
    def size(self) -> int:
        """The characters the candidate changes (what "the smallest repair" means)."""
        return sum(e.size for e in self.edits)


class Found:
    """The candidates gathered so far, notes about where they apply, and why there are none."""

    def __init__(self) -> None:
        self.candidates: list[Candidate] = []
        self.notes: list[str] = []
        self.why = ""
        self.ir_only = False  # the DSL file cannot give the program (built inside a function): the IR dump
        self.rules: dict[str, int] = {}  # the rules that made candidates, and how many each
        self.source: Source | None = None  # the DSL file the culprit's line is in, parsed
        self.target = "dsl"

    def add(self, edits: list[Edit], target: str, rule: str = "", culprit: bool = True, rank: int = 0) -> None:
        """Add ``edits`` (of ``target``, made by ``rule``), smallest first, but none already there
        and none that changes nothing (``Edit.changes_nothing``): every candidate is made here."""
        seen = {(c.edit.file, c.edit.line, c.edit.after) for c in self.candidates}
        for e in sorted(edits, key=lambda e: e.size):  # NOTE: stable: the rule's order among equals
            if (e.file, e.line, e.after) not in seen and not e.changes_nothing:
                seen.add((e.file, e.line, e.after))
                self.candidates.append(Candidate(e, target, rule=rule, culprit=culprit, rank=rank))
                self.rules[rule] = self.rules.get(rule, 0) + 1

    def note(self, text: str) -> None:
        """Say ``text`` once."""
        if text not in self.notes:
            self.notes.append(text)


def candidates(build: Build, rep: Report, found: Found) -> None:
    """Every edit the evidence points to: the culprit's hand-edited C++ first, then the rules for
    its category (each rule's edits smallest first)."""
    c = rep.culprit
    found.add(restored_cpp(build, c.cpp_line), "build", "hand edit")
    cat, op = rep.category, c.op or ""
    if cat == "uninitialized":
        _store_loop(build, c.kernel, found)
    else:
        src, line, target = _dsl_at(build, c.kernel, c.dsl_line, found)
        if src is not None and line is not None:
            found.source, found.target = src, target
            where = {"statement": src.statement_lines(line), "feeding": src.feeding(line)}
            if cat not in ("nan", "precision"):
                where["feeding"] = where["statement"]
            ordered = sorted(CATALOGUE, key=lambda r: r.rank(cat, op))  # NOTE: stable: the table's order
            for rule in ordered:
                found.add(rule.edits(src, where[rule.at], op), target, rule.name, rank=rule.rank(cat, op))
    if not found.candidates and not found.why and not c.dsl_line and any("no budget left" in x for x in rep.limitations):
        found.why = "the budget ran out before the culprit's line was known: run again with a larger --budget"
    if not found.candidates and not found.why:
        found.why = (f"no candidate edit for category {rep.category!r}"
                     + (f" at op {op}" if op else "") + (" (the culprit names no DSL line)" if not c.dsl_line else ""))  # fmt: skip


def restored_cpp(build: Build, cpp_line: str | None) -> list[Edit]:
    """Each hand-edited C++ line of the build put back as the generator writes it, the culprit's
    file first."""
    edited = hand_edited(build.work_dir, build.config)
    if not edited:
        return []
    first = (cpp_line or "").rpartition(":")[0]
    out = []
    b = Build(build.work_dir)
    for rel in sorted(edited, key=lambda r: r != first):
        if rel == b.config["ORCHESTRATION"].get("source"):
            try:
                now = (b.work_dir / rel).read_text()
            except OSError:
                continue
            lines = diff_lines(rel, orchestration_cpp(b.program()), now)
        else:
            kernel = next((k for k in b.kernels if k["source"] == rel), None)
            lines = edited_lines(b, b.program().kernel(kernel["name"])) if kernel else []
            now = (b.work_dir / rel).read_text() if kernel else ""
        text = now.splitlines()
        for d in lines:
            if not (d.cpp_line and d.now and 0 < d.cpp_line <= len(text) and d.now in text[d.cpp_line - 1]):
                continue
            before = text[d.cpp_line - 1]
            if d.generated:
                out.append(Edit(rel, d.cpp_line, before, before.replace(d.now, d.generated, 1),
                                "a hand edit of the build's C++: the line as the generator writes it from the program"))  # fmt: skip
            elif not d.now.startswith("//"):  # NOTE: a line added by hand (a comment changes nothing)
                out.append(Edit(rel, d.cpp_line, before, "",
                                "a line added to the build's C++ by hand, which the generator does not write: removed"))  # fmt: skip
    return out


def _dsl_at(build: Build, kernel: str | None, dsl_line: str | None,
            found: Found) -> tuple[Source | None, int | None, str]:  # fmt: skip
    """The DSL source to edit and the culprit's line in it: the user's file as it was built, else
    the build's IR dump (the file is gone, changed since the build, or unreadable: ``found``'s
    notes say so)."""
    path, _, line = (dsl_line or "").rpartition(":")
    if not line.isdigit():
        return None, None, "dsl"
    if found.ir_only:
        return _ir_at(build, kernel, dsl_line, found)
    ir = f"{IR_DIR}/{build.name}.py"
    file, sha = _built_from(build, path)
    if file is None:
        found.note(f"the DSL source {path} is gone: proposing against the build's IR dump {ir} instead")
        return _ir_at(build, kernel, dsl_line, found)
    try:
        text = read_source(file)
        if sha is not None and sha256_file(file) != sha:
            found.note(f"{file} has changed since the build: proposing against the build's IR dump {ir} instead")
            return _ir_at(build, kernel, dsl_line, found)
        return Source(str(file), text), int(line), "dsl"
    except (OSError, SyntaxError, ValueError) as e:
        found.note(f"{file} cannot be read as Python ({e}): proposing against the build's IR dump {ir} instead")
        return _ir_at(build, kernel, dsl_line, found)


def _built_from(build: Build, path: str) -> tuple[Path | None, str | None]:
    """The DSL file a marker's ``path`` names, and its sha256 when the build was compiled (None
    for a build that did not record it). A relative path was relative to the directory of the
    compile: it is matched against the absolute paths the build recorded, never looked up from
    wherever this process runs."""
    recorded = load_report(build.work_dir).get("dsl_sources")
    if isinstance(recorded, dict) and recorded:
        want = Path(path).parts
        match = next((Path(f) for f in recorded if Path(f).parts[-len(want):] == want), None)
        if match is None:
            return None, None
        return (match if match.is_file() else None), recorded[str(match)]
    return dsl_file(path, str(build.work_dir / build.kernels[0]["source"])) if build.kernels else None, None


def read_source(path: Path) -> str:
    """A Python file's text in its declared encoding (``tokenize``: a coding cookie, or UTF-8).

    Raises:
        OSError, SyntaxError (a bad cookie), ValueError (bytes the encoding cannot decode).
    """
    with tokenize.open(path) as f:
        return f.read()


def _ir_at(build: Build, kernel: str | None, dsl_line: str,
           found: Found) -> tuple[Source | None, int | None, str]:  # fmt: skip
    """The build's IR dump and the line in it of the statement the culprit's DSL line names."""
    rel = f"{IR_DIR}/{build.name}.py"
    b = Build(build.work_dir)
    try:
        program = b.program()
        src = Source(rel, read_source(b.work_dir / rel))
    except (OSError, SyntaxError, ValueError, TilescopeError) as e:
        found.note(f"the build's IR dump {rel} cannot be read: {str(e).splitlines()[0]}")
        return None, None, "build"
    want = _same_place(dsl_line)
    stmts = []
    if kernel:
        try:
            sites, _ = kernel_sites(b, program.kernel(kernel))
            stmts = [s.stmt for s in sites.values() if s.dsl_line and _same_place(s.dsl_line) == want]
        except KeyError:
            pass
    if not stmts:
        sites, _ = orchestration_sites(b, program)
        calls = submits(program.body)
        stmts = [calls[s.index] for s in sites.values() if s.dsl_line and _same_place(s.dsl_line) == want]
    line = next((s.loc.line for s in stmts if s.loc is not None), None)
    if line is None:
        found.note(f"no statement of the build's IR dump comes from {dsl_line}")
    return src, line, "build"


def _ir_source(build: Build, found: Found) -> Source | None:
    """The build's IR dump, parsed (None, with a note, when it cannot be read)."""
    rel = f"{IR_DIR}/{build.name}.py"
    try:
        return Source(rel, read_source(confined(build.work_dir, rel, "the IR dump")))
    except (OSError, SyntaxError, ValueError, TilescopeError) as e:
        found.note(f"the build's IR dump {rel} cannot be read: {str(e).splitlines()[0]}")
        return None


def ir_line_origins(build: Build) -> dict[int, str]:
    """Each line of the build's IR dump that holds a kernel statement, and the DSL line (``file:line``)
    the statement was written on (the C++ markers pair them)."""
    b = Build(build.work_dir)
    out: dict[int, str] = {}
    try:
        kernels = b.program().kernels
    except (OSError, TilescopeError):
        return out
    for k in kernels:
        sites, _ = kernel_sites(b, k)
        for s in sites.values():
            if s.dsl_line and s.stmt.loc is not None:
                out.setdefault(s.stmt.loc.line, s.dsl_line)
    return out


def _same_place(loc: str) -> tuple[str, str]:
    path, _, line = loc.rpartition(":")
    return os.path.basename(path), line


def _store_loop(build: Build, kernel: str | None, found: Found) -> None:
    """``uninitialized``: the bound of the loop around the store that leaves part of the Out
    param unwritten (the compile's coverage finding)."""
    u = _finding(build, kernel) if kernel else None
    if u is None or not u.get("at"):
        _orchestration_loops(build, found)
        return
    src, line, target = _dsl_at(build, kernel, u["at"], found)
    if src is None or line is None:
        found.why = f"the DSL source of {u['at']} cannot be read"
        return
    dim, size = _gap_dim(build, u)
    if dim is None:
        found.why = "the unwritten region spans more than one dim of the store"
        return
    loop_line = _enclosing_loop(src, line, dim)
    if loop_line is None:
        found.why = f"no loop around {u['at']} steps the store's offset in dim {dim}"
        return
    found.add(loop_bound_edits(src, loop_line, u["shape"][dim], size, _loop_consts(build, u["kernel"], loop_line)), target,
              "store loop bound")


def _loop_consts(build: Build, kernel: str, loop_line: int) -> tuple[int, int] | None:
    """``(start, step)`` of kernel ``kernel``'s loop on DSL line ``loop_line``, as the IR has them
    folded (a step written as a name), from the C++ line that marks it; None when not constant."""
    b = Build(build.work_dir)
    try:
        sites, _ = kernel_sites(b, b.program().kernel(kernel))
    except (KeyError, OSError, TilescopeError):
        return None
    for site in sites.values():
        stmt = site.stmt
        if isinstance(stmt, For) and site.dsl_line and site.dsl_line.rpartition(":")[2] == str(loop_line):
            if isinstance(stmt.start, Const) and isinstance(stmt.step, Const):
                return int(stmt.start.value), int(stmt.step.value)
    return None


def _orchestration_loops(build: Build, found: Found) -> None:
    """``uninitialized`` with every kernel storing its whole Out region: the orchestration's loops
    may stop before the end of an output, so no task is given its last region."""
    at = build.config.get("SOURCE")
    src, line, target = _dsl_at(build, None, at if isinstance(at, str) else None, found)
    fn = src.function_at(line) if src is not None and line is not None else None
    if fn is None:
        found.why = "every kernel stores its whole Out region, and the orchestration's source cannot be read"
        return
    found.add(rules.orchestration_loop_edits(src, fn), target, "orchestration loop")
    if not found.candidates:
        found.why = "every kernel stores its whole Out region, and no loop of the orchestration has a bound to extend"


def _finding(build: Build, kernel: str) -> dict[str, Any] | None:
    found = load_report(build.work_dir).get("unwritten")
    return next((u for u in found if isinstance(u, dict) and u.get("kernel") == kernel), None) if isinstance(
        found, list) else None  # fmt: skip



def _gap_dim(build: Build, found: dict[str, Any]) -> tuple[int | None, int]:
    """The one dim in which the unwritten boxes are a part of the param, and the store's size there."""
    shape = found["shape"]
    dims = {d for box in found["boxes"] for d, (lo, hi) in enumerate(box) if (lo, hi) != (0, shape[d])}
    if len(dims) != 1:
        return None, 0
    (dim,) = dims
    kernel = build.program().kernel(found["kernel"])
    stores = [s for s in walk_stmts(kernel.body) if isinstance(s, Store) and s.tensor.name == found["param"]]
    if not stores:
        return None, 0
    tile = tuple(stores[-1].value.type.shape)
    sizes = (1,) * (len(shape) - len(tile)) + tile
    return dim, sizes[dim]


def _enclosing_loop(src: Source, store_line: int, dim: int) -> int | None:
    """The line of the innermost ``for`` around the ``ts.store`` on ``store_line`` whose variable
    appears in that store's offset for ``dim``."""
    call = next(iter(src.calls([store_line], "store")), None)
    if call is None or len(call.args) < 2 or not isinstance(call.args[1], ast.List | ast.Tuple):
        return None
    offsets = call.args[1].elts
    if dim >= len(offsets):
        return None
    names = {n.id for n in ast.walk(offsets[dim]) if isinstance(n, ast.Name)}
    node = src.parents.get(call)
    while node is not None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id in names:
            return node.lineno
        node = src.parents.get(node)
    return None


def wide_candidates(build: Build, rep: Report, found: Found) -> None:
    """Every catalogue rule over every statement of the kernels and of the orchestration in the
    program's DSL file (the culprit's kernel first, then the kernels nearest the outputs): the
    search when the culprit's line is unknown, or no edit there makes the outputs match. With
    ``found.ir_only`` (a program built inside a function), over the build's IR dump instead."""
    if found.ir_only:
        src, line, target = _ir_source(build, found), None, "build"
    else:
        at = build.config.get("SOURCE")
        src, line, target = _dsl_at(build, None, at if isinstance(at, str) else None, found)
        if line is None or target != "dsl":
            return
    if src is None:
        return
    found.source, found.target = src, target
    try:
        names = [k.name for k in Build(build.work_dir).program().kernels]
    except (OSError, TilescopeError):
        names = []
    names = sorted(reversed(names), key=lambda n: n != rep.culprit.kernel)
    calls = src.function(build.name) if line is None else src.function_at(line)
    functions = [_kernel_function(build, src, n) for n in names] + [calls]
    for fn in dict.fromkeys(f for f in functions if f is not None):
        for lines in _statements(src, fn):
            for rule in CATALOGUE:
                found.add(rule.edits(src, lines, ""), target, rule.name, culprit=False, rank=2)


def _kernel_function(build: Build, src: Source, name: str) -> ast.FunctionDef | None:
    """Kernel ``name``'s ``def`` in ``src``: the function of that name, else (a kernel named apart
    from its ``def``: a factory's, told apart by its constants, or ``@ts.kernel(name=...)``) the
    function at the DSL line its C++ names as its origin, when that line is in ``src``'s file."""
    fn = src.function(name)
    row = next((k for k in build.kernels if k["name"] == name), None)
    if fn is not None or row is None:
        return fn
    try:
        with open(confined(build.work_dir, row["source"], "kernel_config.py's source"), encoding="utf-8") as f:
            origin = _ORIGIN.search(f.readline())
    except (OSError, TilescopeError, UnicodeDecodeError):
        return None
    file = _built_from(build, origin["file"])[0] if origin else None
    if file is None or file.resolve() != Path(src.file).resolve():
        return None
    fn = src.function_at(int(origin["line"]))
    return fn if fn is not None and fn.lineno == int(origin["line"]) else None


def _statements(src: Source, fn: ast.FunctionDef) -> list[list[int]]:
    """The lines of each simple statement of ``fn`` (and of each ``for`` header), in order."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.For):
            out.append([node.lineno])
        elif isinstance(node, ast.stmt) and not hasattr(node, "body"):
            out.append(list(range(node.lineno, node.end_lineno + 1)))
    return sorted(out)
