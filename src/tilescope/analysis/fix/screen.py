"""Screening candidate edits on the interpreter: each edit made in a copy of the user's DSL file,
its program taken from the copy by the front-end and run by the reference interpreter on the
saved inputs (no g++, no C++ run), and scored by the elements still outside tolerance.

Invariants:
- Nothing the user made is written: each copy is a file of the proposal's folder, removed once
  it is scored.
- A candidate whose copy does not import, whose program does not type-check or take the build's
  arguments, or whose run fails, is screened out with the reason (the first line of the error).
- The score is counted on the saved data; a candidate that matches there is run on the second
  input set too, and ``passes`` only when it matches on both (``Score.second``).
- ``baseline`` is the unedited program's score: when the interpreter does not reproduce the
  failure (a race, memory nothing wrote, a hand-edited build), screening cannot rank edits and
  says so (``Screen.useful``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.data import Second
from tilescope.analysis.fix.copies import load_program
from tilescope.analysis.fix.edit import Edit
from tilescope.analysis.localize.metrics import close
from tilescope.build.manifest import Build
from tilescope.runtime.interp import run_program


@dataclass(frozen=True)
class Score:
    """A screened candidate: the elements outside tolerance on the saved data (``bad``, None when
    it could not run: ``error`` says why) and on the second input set (``second``, None when not
    run there)."""

    bad: int | None
    second: int | None = None
    error: str = ""
    ran: bool = True  # the program was built from the copy (an error, if any, is its run's)

    @property
    def passes(self) -> bool:
        """Every output within tolerance on the saved data, and on the second set when it ran."""
        return self.bad == 0 and self.second in (0, None)


class Screen:
    """Scores edits of one DSL file on the interpreter, against the build's saved data."""

    def __init__(self, build: Build, text: str, file: Path, inputs: dict[str, Any],
                 golden: dict[str, torch.Tensor], second: Second | None, rtol: float, atol: float,
                 folder: Path):  # fmt: skip
        self.build, self.text, self.file = build, text, file
        self.inputs, self.golden, self.second = inputs, golden, second
        self.rtol, self.atol = rtol, atol
        self.folder = folder
        self.count = 0
        self.baseline = self.score(())

    @property
    def useful(self) -> bool:
        """Whether the interpreter reproduces the failure: the unedited program's outputs are wrong
        there too, or its run fails there (an index past its table)."""
        b = self.baseline
        return (b.bad is not None and b.bad > 0) or (b.bad is None and b.ran)

    def score(self, edits: tuple[Edit, ...]) -> Score:
        """The score of ``edits`` (on different lines of the file) made together."""
        self.count += 1
        copy = self.folder / f"s{self.count}_{self.file.name}"
        try:
            text = self.text
            for e in edits:
                text = e.apply(text)
            self.folder.mkdir(parents=True, exist_ok=True)
            copy.write_text(text, encoding="utf-8")
            try:
                program = load_program(copy, self.file.parent, self.build.name, f"screen{self.count}").program()
            except (Exception, SystemExit) as e:  # noqa: BLE001 - an edit that breaks the program screens it out
                return Score(None, error=_first(e), ran=False)
            names = [p.name for p in program.params]
            if names != [a.name for a in self.build.args]:
                return Score(None, error="the edited program takes other arguments", ran=False)
            bad = self._bad(program, self.inputs, self.golden)
            if bad == 0 and self.second is not None and edits:
                return Score(0, self._bad(program, self.second.inputs, self.second.golden))
            return Score(bad)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever an edit breaks screens it out alone
            return Score(None, error=_first(e))
        finally:
            copy.unlink(missing_ok=True)

    def _bad(self, program: Any, inputs: dict[str, Any], golden: dict[str, torch.Tensor]) -> int:
        args = [v.clone() if torch.is_tensor(v) else v for v in (inputs[a.name] for a in self.build.args)]
        run_program(program, args)
        got = {a.name: args[i] for i, a in enumerate(self.build.args) if a.is_output}
        return sum(int((~close(got[n], g, self.rtol, self.atol)).sum()) for n, g in golden.items() if n in got)


def _first(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
