"""Running triage on a blind bug and scoring what it named: category, kernel, op and DSL line
against where the mistake is. Used by tests/analysis/test_blind_bugs.py and
benchmarks/blind_bugs.py."""

from __future__ import annotations

import inspect
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from blind_bugs import BlindBug
from tilescope.analysis.triage.triage_command import triage
from tilescope.harness import run_jit


def expected_line(bug: BlindBug) -> tuple[str, int]:
    """(file name, line) of the bug's culprit line."""
    fn, text = bug.line
    fn = getattr(fn, "fn", fn)
    lines, start = inspect.getsourcelines(fn)
    hits = [i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, f"{bug.name}: {text!r} is on {len(hits)} lines of {fn.__name__}"
    return Path(sys.modules[fn.__module__].__file__).name, start + hits[0]


@dataclass
class Named:
    """What triage named for one bug, and how long the triage took."""

    name: str
    category: str
    verdict: str | None
    kernel: str | None
    op: str | None
    line: str | None
    seconds: float

    def hits(self, bug: BlindBug) -> dict[str, bool]:
        """Which of category, kernel, op and line are the bug's."""
        file, no = expected_line(bug)
        at = None
        if self.line:
            f, _, n = self.line.rpartition(":")
            at = (Path(f).name, int(n)) if n.isdigit() else None
        category = self.category == bug.category and (bug.verdict is None or self.verdict == bug.verdict)
        return {"category": category, "kernel": self.kernel == bug.kernel, "op": self.op == bug.op,
                "line": at == (file, no)}  # fmt: skip

    def named(self, bug: BlindBug) -> bool:
        """All four right."""
        return all(self.hits(bug).values())

    def to_json(self) -> dict:
        """The row, as JSON."""
        return asdict(self)


def build(bug: BlindBug) -> Path:
    """The bug's build, run once on its inputs with its data saved."""
    result = run_jit(bug.program, bug.specs, golden_fn=bug.golden, rtol=bug.rtol, atol=bug.atol, save_data=True)
    assert not result.passed and result.work_dir is not None, f"{bug.name}: the run passed or did not build"
    return Path(result.work_dir)


def triage_named(bug: BlindBug, work: Path | None = None) -> Named:
    """Triage the bug's build (made here unless given) and what it named."""
    work = work or build(bug)
    t0 = time.perf_counter()
    rep = triage(work, progress=lambda _: None)
    took = time.perf_counter() - t0
    c = rep.culprit
    return Named(bug.name, rep.category, rep.verdict, c.kernel, c.op, c.dsl_line, round(took, 2))
