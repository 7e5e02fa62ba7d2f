"""``tilescope triage BUILD --fix``: the search for a repair, from the catalogue's candidates to
one edit verified twice.

1. Candidates (``candidates``): the build's hand-edited C++ put back, the repair of an unwritten
   region, and every catalogue rule at the culprit's statement (the rules answering its verdict
   first).
2. Screening (``screen``): each DSL candidate run on the interpreter, no g++, scored by the
   elements still outside tolerance; one that matches on the saved data is run on the second
   input set too.
3. When no candidate at the culprit's line matches (or it names no line), the rules apply over
   every statement of the program's kernels and calls (``candidates.wide_candidates``); then
   pairs of the best single candidates on different lines (a two-line repair).
4. Verification (``verify``): the candidates that pass the screening, smallest first, compiled
   and run isolated on sim on the saved data and on the second input set. The first that
   passes both is the fix. When the interpreter does not reproduce the failure, candidates are
   verified in the catalogue's order instead.

Invariants:
- Nothing the user made is written (see ``verify`` and ``screen``); the fix is also a unified
  diff of the user's file (``Fix.diff``) that ``git apply`` takes.
- No fix is an honest answer: the rules that applied, how many candidates were screened and run,
  and the best ones with what still fails (``Fix.search``).
- A defect of the search costs the fix, never the verdict.
"""

from __future__ import annotations

import difflib
import itertools
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.data import Second, load_second
from tilescope.analysis.fix.candidates import (
    Candidate,
    Found,
    candidates,
    ir_line_origins,
    read_source,
    wide_candidates,
)
from tilescope.analysis.fix.copies import NOT_TOP_LEVEL
from tilescope.analysis.fix.edit import Edit, Source, changed_op
from tilescope.analysis.fix.screen import Score, Screen
from tilescope.analysis.fix.verify import tolerance_fix, verify_candidate, work_folder
from tilescope.analysis.localize.localize_command import internal_error
from tilescope.analysis.report import Culprit, Fix, ProposedEdit, Report, Search, TriedEdit
from tilescope.build.build_report import report_problem
from tilescope.build.manifest import Build
from tilescope.build.paths import FIX_DIR, IR_DIR, TRIAGE_DIR, dfx_dir
from tilescope.codegen.cpp_common import display_path
from tilescope.launch.program import CompiledProgram

PAIR_POOL = 8  # the best single candidates whose pairs are screened as two-line repairs
MAX_VERIFIED = 6  # candidates compiled and run on sim at most, once the screening has ranked them
PAIRS = "two-line pairs"  # Search.rules' entry for the pairs of single candidates screened together
MAX_SCREENED = 800  # candidates screened at most (a catalogue's worth over a model's kernels)


@dataclass
class FixData:
    """What a fix is verified on: the saved inputs and golden, and the second input set (None:
    ``why_single`` says why there is none)."""

    inputs: dict[str, Any]
    golden: dict[str, torch.Tensor]
    second: Second | None = None
    why_single: str = ""

    def verified_on(self) -> str:
        """How a verified fix was checked, in words (without a second set, the notes say why)."""
        if self.second is None:
            return "the saved data"
        return f"the saved data and a second input set (seed {self.second.seed})"


def fix_data(data_dir: Path, build: Build, inputs: dict[str, Any], golden: dict[str, torch.Tensor]) -> FixData:
    """What a fix is verified on: ``inputs`` and ``golden`` (the saved data's), and the second
    input set saved beside them in ``data_dir``."""
    second, why = load_second(data_dir, list(build.args))
    return FixData(inputs, golden, second, why)


def propose(build: Build, rep: Report, data: FixData, deadline: float, wide: bool = True,
            parallel: bool = False) -> Fix:  # fmt: skip
    """The ``fix`` of a triage report (``parallel``: screen on worker processes too, see
    ``screen.Screen``). A defect of the search itself is its ``why_none``: it never takes the
    triage's verdict with it."""
    try:
        return _propose(build, rep, data, deadline, wide, parallel)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the verdict stands whatever a fix rule does
        return Fix.none(internal_error(e, "triage --fix"))


def _propose(build: Build, rep: Report, data: FixData, deadline: float, wide: bool, parallel: bool) -> Fix:
    if rep.category == "precision" and rep.verdict == "innocent" and isinstance(build, CompiledProgram):
        return tolerance_fix(build, rep, data.inputs, data.golden)
    if rep.category == "pass":
        return Fix.none("the build passes: there is nothing to fix")
    problem = report_problem(build.work_dir)  # NOTE: without it, edits would be made against the wrong file
    if problem is not None:
        return Fix.none(problem)
    return _Search(build, rep, data, deadline, wide, parallel).run()


class _Search:
    def __init__(self, build: Build, rep: Report, data: FixData, deadline: float, wide: bool, parallel: bool):
        self.build, self.rep, self.data, self.deadline, self.wide = build, rep, data, deadline, wide
        self.parallel = parallel
        self.started = time.perf_counter()
        self.found = Found()
        self.tried: list[TriedEdit] = []
        self.scores: dict[Candidate, Score] = {}
        self.folder: Path | None = None
        self.screen: Screen | None = None
        self.compiled = 0

    def run(self) -> Fix:
        try:
            return self._run()
        finally:
            if self.screen is not None:
                self.screen.close()

    def _run(self) -> Fix:
        if self.data.second is None and self.data.why_single:
            self.found.note(f"verified on the saved data alone: {self.data.why_single}")
        candidates(self.build, self.rep, self.found)
        for c in [c for c in self.found.candidates if c.target == "build"]:
            if (fix := self._verify(c)) is not None:
                return fix
        dsl = [c for c in self.found.candidates if c.target == "dsl"]
        widened = False
        if self.found.source is None and self.wide and self._left() > 0:  # NOTE: no line: the search gives it
            wide_candidates(self.build, self.rep, self.found)
            dsl, widened = [c for c in self.found.candidates if c.target == "dsl"], True
        if self.found.source is not None and self.found.target == "dsl" and self._screen() is not None:
            fix = self._screened(dsl)
            if fix is None and self.wide and not widened and self._left() > 0:
                before = {c.edit for c in self.found.candidates}
                wide_candidates(self.build, self.rep, self.found)
                fix = self._screened([c for c in self.found.candidates if c.edit not in before and c.target == "dsl"])
            if fix is None and self._left() > 0:
                fix = self._pairs()
            if fix is not None:
                return fix
        elif self._built_in_function():
            if (fix := self._ir_search()) is not None:
                return fix
        elif (fix := self._unranked([c for c in dsl if c.culprit])) is not None:  # NOTE: unranked, the wider
            return fix  # search's hundreds of candidates would each cost a compile: only the culprit's are tried
        return self._none()

    def _built_in_function(self) -> bool:
        """Whether the DSL file cannot give the program because it is built inside a function (a
        factory's: ``build(**config)``), so the screening could not import it."""
        return self.screen is not None and NOT_TOP_LEVEL in self.screen.baseline.error and self.wide

    def _ir_search(self) -> Fix | None:
        """The search over the build's IR dump, the program as built (a module with the program at
        its top level): the culprit's statement there, then every statement, screened on the
        interpreter and verified on sim like edits of the user's file."""
        ir = ir_dump(self.build)
        self.found.note(f"the program is built inside a function, so edits of its file cannot be screened: "
                        f"proposing against the build's IR dump {ir}, the program as built")  # fmt: skip
        self.screen.close()
        self.screen = None
        found = Found()
        found.ir_only = True
        candidates(self.build, self.rep, found)
        wide_candidates(self.build, self.rep, found)
        for n in found.notes:
            self.found.note(n)
        todo = [c for c in found.candidates if c.target == "build" and c.edit.file == ir]
        if found.source is None or not todo:
            return None
        self.found.ir_only, self.found.source, self.found.target = True, found.source, "build"
        self.found.candidates, self.found.rules, self.found.why = found.candidates, found.rules, ""
        self.found.notes = [n for n in self.found.notes if NOT_TOP_LEVEL not in n]  # NOTE: the IR dump's screen replaces it
        if self._screen() is None:
            return self._unranked([c for c in todo if c.culprit])
        fix = self._screened(todo)
        if fix is None and self._left() > 0:
            fix = self._pairs()
        return fix

    def _unranked(self, todo: list[Candidate]) -> Fix | None:
        """Verify ``todo`` in the catalogue's order (the interpreter cannot rank them). A DSL file
        that cannot give the program (built inside a function) sends them to the build's IR dump."""
        while todo:
            c = todo.pop(0)
            if self._left() <= 0:
                self.found.why = "the budget was spent before every candidate was tried"
                return None
            if (fix := self._verify(c)) is not None:
                return fix
            if c.target == "dsl" and NOT_TOP_LEVEL in self.tried[-1].result and not self.found.ir_only:
                self.found.ir_only = True
                self.found.note(f"{Path(c.edit.file).name} has no @ts.jit program named {self.build.name} at its top "
                                f"level (it is built inside a function): proposing against the build's IR dump "
                                f"{IR_DIR}/{self.build.name}.py")  # fmt: skip
                redo = Found()
                redo.ir_only = True
                candidates(self.build, self.rep, redo)
                todo = [x for x in redo.candidates if x.target == "build" and x.edit.file.startswith(f"{IR_DIR}/")]
                for n in redo.notes:
                    self.found.note(n)
        return None

    def _left(self) -> float:
        return self.deadline - time.perf_counter()

    def _work(self) -> Path:
        if self.folder is None:
            self.folder = work_folder(dfx_dir(self.build.work_dir, TRIAGE_DIR, FIX_DIR))
        return self.folder

    def _screen(self) -> Screen | None:
        """The interpreter's screen of the culprit's file, when it reproduces the failure."""
        if self.screen is None:
            src = self.found.source
            file = Path(src.file) if self.found.target == "dsl" else self.build.work_dir / src.file
            self.screen = Screen(self.build, src.text, file, self.data.inputs, self.data.golden,
                                 self.data.second, self.rep.rtol, self.rep.atol, self._work() / "screen",
                                 parallel=self.parallel)  # fmt: skip
            if not self.screen.useful:
                why = self.screen.baseline.error or "the unedited program matches the golden there"
                self.found.note(f"the interpreter does not reproduce the failure ({why}): candidates are compiled "
                                "and run in the catalogue's order, unranked")  # fmt: skip
        return self.screen if self.screen.useful else None

    def _screened(self, todo: list[Candidate]) -> Fix | None:
        """Screen ``todo``; verify on sim those that match on both sets, smallest first."""
        room = MAX_SCREENED - len(self.scores)
        if len(todo) > room:
            self.found.note(f"{MAX_SCREENED} candidates were screened, the most one search screens")
            todo = todo[: max(room, 0)]
        for c, score in zip(todo, self.screen.score_all([c.edits for c in todo], self.deadline), strict=True):
            if score is None:
                self.found.note("the budget was spent before every candidate was screened")
                break
            self.scores[c] = score
        passing = sorted((c for c in todo if c in self.scores and self.scores[c].passes),
                         key=lambda c: (not c.culprit, c.rank, c.size))  # fmt: skip
        for c in passing[:MAX_VERIFIED]:
            if self._left() <= 0:
                break
            if (fix := self._verify(c)) is not None:
                return fix
        return None

    def _pairs(self) -> Fix | None:
        """Two-line repairs: pairs of the best single candidates (each removing part of the
        error) on different lines."""
        base = self.screen.baseline.bad
        better = sorted((c for c, s in self.scores.items() if s.bad is not None and s.bad < base and not c.also),
                        key=lambda c: (self.scores[c].bad, c.size))[:PAIR_POOL]  # fmt: skip
        pairs = [Candidate(a.edit, a.target, (b.edit,), f"{a.rule} + {b.rule}", a.culprit or b.culprit)
                 for a, b in itertools.combinations(better, 2) if a.edit.line != b.edit.line]  # fmt: skip
        if pairs:
            self.found.rules[PAIRS] = self.found.rules.get(PAIRS, 0) + len(pairs)
        return self._screened(pairs) if pairs else None

    def _verify(self, c: Candidate) -> Fix | None:
        """Compile and run ``c`` on sim on the saved data and the second set; its Fix if it passes."""
        self.compiled += 1
        ok, comparison = verify_candidate(self.build, c, self.data.inputs, self.data.golden, self.data.second,
                                          self.rep.rtol, self.rep.atol, self._work() / f"c{len(self.tried)}",
                                          self.deadline)  # fmt: skip
        for e in c.edits:
            self.tried.append(TriedEdit(**asdict(e), target=c.target, verified=ok, result=comparison))
        if not ok:
            return None
        first, *also = sorted(c.edits, key=lambda e: e.line != c.edit.line)
        return Fix(c.target, ProposedEdit(**asdict(first)), True, self.tried, self.found.notes, rule=c.rule or None,
                   verified_on=self.data.verified_on(), comparison=comparison,
                   also=[ProposedEdit(**asdict(e)) for e in also], diff=unified_diff(c) if c.target == "dsl" else None,
                   search=self._stats())  # fmt: skip

    def _stats(self, best: list[str] | None = None, check: list[str] | None = None) -> Search:
        return Search(dict(self.found.rules), self.screen.count - 1 if self.screen else 0, self.compiled,
                      round(time.perf_counter() - self.started, 2), best or [], check or [])  # fmt: skip

    def _none(self) -> Fix:
        if self._left() <= 0:
            why = "the budget was spent before every candidate was tried"
        elif self.tried:
            why = "no candidate edit made the outputs match the golden"
        elif self.scores:
            why = f"no candidate edit made the outputs match the golden on the interpreter ({len(self.scores)} screened)"
        else:
            why = self.found.why or f"the evidence for category {self.rep.category!r} points to no edit"
        if self.found.why and self.found.why != why:
            self.found.note(self.found.why)
        ranked = sorted(((c, s) for c, s in self.scores.items() if s.bad is not None), key=lambda x: (x[1].bad, x[0].size))
        total = sum(g.numel() for g in self.data.golden.values())
        best = [f"{Path(c.edit.file).name}:{c.edit.line} `{c.edit.after.strip()}` ({c.rule}): {s.bad} of {total} "
                f"elements still outside tolerance" for c, s in ranked[:3]]  # fmt: skip
        check = [f"the line the culprit names ({self.rep.culprit.dsl_line})"] if self.rep.culprit.dsl_line else []
        check += ["an edit no catalogue rule makes (a missing term, a rewrite of the formula): compare the kernel "
                  "with golden_fn statement by statement (tilescope localize BUILD names the first wrong value)"]  # fmt: skip
        return Fix(tried=self.tried, notes=self.found.notes, why_none=why, search=self._stats(best, check))


def unified_diff(c: Candidate) -> str:
    """The candidate as a unified diff of the user's file, with paths relative to the folder
    ``git apply`` runs in (the repository holding it, else its own folder)."""
    path = Path(c.edit.file)
    root = next((p for p in path.resolve().parents if (p / ".git").exists()), path.resolve().parent)
    rel = os.path.relpath(path.resolve(), root)
    text = read_source(path)
    after = text
    for e in c.edits:
        after = e.apply(after)
    out = []
    for line in difflib.unified_diff(text.splitlines(keepends=True), after.splitlines(keepends=True),
                                     f"a/{rel}", f"b/{rel}", n=3):  # fmt: skip
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def repair_culprit(build: Build, fix: Fix, culprit: Culprit) -> Culprit | None:
    """The culprit a verified repair of the DSL source (or of the build's IR dump, for a program
    built inside a function) names: its line (for the IR dump, the DSL line its statement was
    written on), the op it changes and the kernel holding it (None for the orchestration's own
    code); None when the fix is not one."""
    e = fix.edit
    in_ir = e is not None and fix.kind == "build" and e.file == ir_dump(build)
    if not fix.verified or not (fix.kind == "dsl" or in_ir) or e is None:
        return None
    path = build.work_dir / e.file if in_ir else Path(e.file)
    try:
        src = Source(e.file, read_source(path))
    except (OSError, SyntaxError, ValueError):
        return None
    fn = src.function_at(e.line)
    kernels = {k["name"] for k in build.kernels}
    kernel = fn.name if fn is not None and fn.name in kernels else None
    task = culprit.task if kernel is not None and kernel == culprit.kernel else None
    line = (ir_line_origins(build).get(e.line) if in_ir else None) or f"{display_path(str(path))}:{e.line}"
    return Culprit(task, kernel, changed_op(src, Edit(e.file, e.line, e.before, e.after, e.why)), line)


def ir_dump(build: Build) -> str:
    """The build's IR dump, relative to the build (what edits of it name as their file)."""
    return f"{IR_DIR}/{build.name}.py"
