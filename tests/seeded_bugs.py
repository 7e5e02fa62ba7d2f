"""The seeded-bug programs as one collection: each a program with one known defect, the data it
fails on, and what every analysis must say of it — localize's verdict, triage's, and the fix
``triage --fix`` must verify. tests/analysis/test_seeded_bugs.py runs each analysis over every
entry; a new seeded bug is one ``SeededBug`` here (its program in a *_programs module).

A verdict names its culprit's line by the DSL function holding it and a text on that line, so
the programs can move without the expectations changing.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import localize_programs as P
from helpers import line_of

from tilescope.analysis.report import Fix, Report

ANY = object()  # a culprit field the entry does not pin


def dsl(fn: Any, text: str) -> str:
    """``file:line`` of ``text`` in ``fn``, the file as the generated C++ names it (relative to the
    working directory when that is shorter)."""
    file = sys.modules[getattr(fn, "fn", fn).__module__].__file__
    path = os.path.relpath(file)
    return f"{path if len(path) < len(file) else file}:{line_of(fn, text)}"


@dataclass(frozen=True)
class Verdict:
    """What a report must say: category and verdict, the culprit (``line``: the DSL function and
    a text on the culprit's line; ``cpp``: a pattern of its C++ line), words of the summary and
    of the evidence, and a check of anything else (``more(report)``)."""

    category: str
    verdict: str | None = None
    task: Any = ANY
    kernel: Any = ANY
    op: Any = ANY
    line: tuple[Any, str] | None = None
    cpp: str | None = None
    summary_has: tuple[str, ...] = ()
    evidence_has: tuple[str, ...] = ()
    more: Callable[[Report], None] | None = None

    def check(self, rep: Report) -> None:
        """Assert ``rep`` says all of it."""
        assert (rep.category, rep.verdict) == (self.category, self.verdict), rep.render()
        c = rep.culprit
        for name in ("task", "kernel", "op"):
            want = getattr(self, name)
            assert want is ANY or getattr(c, name) == want, (name, c, rep.render())
        if self.line is not None:
            assert c.dsl_line == dsl(*self.line), rep.render()
        if self.cpp is not None:
            assert c.cpp_line is not None and re.fullmatch(self.cpp, c.cpp_line), rep.render()
        for words in self.summary_has:
            assert words in rep.summary, rep.render()
        for words in self.evidence_has:
            assert any(words in e for e in rep.evidence), (words, rep.render())
        if self.more is not None:
            self.more(rep)


@dataclass(frozen=True)
class FixWanted:
    """The fix ``triage --fix`` must verify: an edit of the line (``line``: DSL function and
    text) to ``after``, its ``why`` holding ``why_has``; or a change of the test (``kind`` test);
    and a check of anything else (``more(fix)``)."""

    kind: str = "dsl"
    line: tuple[Any, str] | None = None
    after: str = ""
    why_has: str = ""
    more: Callable[[Fix], None] | None = None

    def check(self, fix: Fix | None) -> None:
        """Assert ``fix`` is this fix, verified."""
        assert fix is not None and fix.verified is True and fix.kind == self.kind, fix
        if self.line is not None:
            fn, text = self.line
            e = fix.edit
            assert e is not None and e.line == line_of(fn, text), fix
            assert Path(e.file).name == Path(sys.modules[getattr(fn, "fn", fn).__module__].__file__).name
            assert e.after.strip() == self.after and self.why_has in e.why, fix
            assert fix.comparison.startswith("every output within rtol="), fix
        if self.more is not None:
            self.more(fix)


@dataclass(frozen=True)
class SeededBug:
    """A program with one defect (``program`` on inputs made from ``specs``, against ``golden``
    at ``rtol``/``atol``) and what localize, triage and its fix must say of it (``localize``
    None: not a wrong value localize explains on its own)."""

    name: str  # the test id
    what: str  # the defect, in words
    program: Any
    specs: list
    golden: Callable
    rtol: float
    atol: float
    triage: Verdict
    localize: Verdict | None = None
    fix: FixWanted | None = None


def _innocent_tolerance(rep: Report) -> None:
    assert all(v is None for v in vars(rep.culprit).values())
    worst = max(r.max_rel for r in rep.fingerprint if r.pair == "sim~golden")
    assert worst <= rep.tolerance.rtol <= 1.1 * worst and rep.tolerance.atol == 0.0


def _test_change(fix: Fix) -> None:
    change = fix.test_change
    assert fix.edit is None and 1e-7 < change.rtol < 1e-4 and change.atol == 0 and "no kernel patch" in change.why
    assert fix.comparison.startswith(f"every output within rtol={change.rtol:g}, atol=0 of the golden")


def _screened_before_compiled(fix: Fix) -> None:
    # the smaller sibling (row_min) failed on the interpreter: only the one that matched there was compiled
    assert [t.after.strip().split(" ")[2] for t in fix.tried] == ["ts.row_sum(t)"]
    assert fix.search.screened > 2 and fix.search.compiled == 1 and fix.search.rules["sibling op"] >= 2


_CAST = Verdict("precision", "guilty", kernel="to_bf16", op="cast", line=(P.to_bf16, 'mode="trunc"'),
                cpp=r"kernels/vec/to_bf16\.cpp:\d+", evidence_has=("exactly 1 ulp of bf16", "mode='trunc'"))  # fmt: skip
_BLOCKS = Verdict("algorithm", None, task=1, kernel="double_block", op="call", line=(P.blocks, "double_block(x["),
                  cpp=r"orchestration/blocks\.cpp:\d+",
                  evidence_has=("12 task(s) wrote blocks of y", "a slice with the wrong index",
                                "task 1 (x = x[0:16, 0:16], y = y[0:16, 16:32]) wrote the golden's y[0:16, 0:16]"))  # fmt: skip
_SOFTMAX_AT = (P.softmax_nomax_rows, "e = ts.exp(t)")

BUGS: tuple[SeededBug, ...] = (
    SeededBug(
        "cast_mode", "a bf16 cast with the wrong rounding mode", P.scale_bf16, P.SCALE_BF16, P.scale_bf16_golden, 1e-3, 0.0,
        triage=_CAST, localize=_CAST,
        fix=FixWanted(line=(P.to_bf16, 'mode="trunc"'), why_has="mode='trunc'",
                      after='h = ts.cast(t * 3.0, ts.bf16, mode="rint")  # the defect: the golden rounds to nearest'),
    ),
    SeededBug(
        "loop_variable", "a slice indexed with the wrong loop variable", P.blocks, P.BLOCKS, P.blocks_golden, 1e-5, 1e-6,
        triage=_BLOCKS, localize=_BLOCKS,
        fix=FixWanted(line=(P.blocks, "double_block(x["),
                      after="double_block(x[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16], "
                            "y[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16])",
                      why_has="dim 1 of the slice of x steps with loop variable i: the block it names belongs to j"),
    ),
    SeededBug(
        "softmax_without_max", "softmax without the row max", P.softmax_nomax, P.SOFTMAX_NOMAX, P.softmax_golden, 1e-5, 1e-6,
        triage=Verdict("nan", None, kernel="softmax_nomax_rows"),
        localize=Verdict("precision", "guilty", task=0, kernel="softmax_nomax_rows", op="exp", line=_SOFTMAX_AT,
                         summary_has=("overflows f32",),
                         evidence_has=("NaN/Inf first appear in the outputs of task 0",)),
        fix=FixWanted(line=_SOFTMAX_AT,
                      after="e = ts.exp(t - ts.row_max(t))  # the defect: exp(t - row_max(t)) keeps it in range"),
    ),
    SeededBug(
        "sibling_reduction", "row_max where row_sum was meant", P.normalize, P.NORMALIZE, P.normalize_golden, 1e-5, 1e-6,
        triage=Verdict("algorithm", None, kernel="normalize_rows"),
        fix=FixWanted(line=(P.normalize_rows, "total = ts.row_max(t)"),
                      after="total = ts.row_sum(t)  # the defect: the rows are to be divided by their sums",
                      more=_screened_before_compiled),
    ),
    SeededBug(
        "innocent_f32_sum", "a long f32 sum at a tolerance tighter than f32 allows", P.long_sum, P.LONG_SUM, P.long_sum_golden, 1e-7, 0.0,
        triage=Verdict("precision", "innocent"),
        localize=Verdict("precision", "innocent", evidence_has=("one element at a time",), more=_innocent_tolerance),
        fix=FixWanted(kind="test", more=_test_change),
    ),
)  # fmt: skip
