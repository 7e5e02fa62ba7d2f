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

import multiprocessing
import os
import time
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
    """Scores edits of one DSL file on the interpreter, against the build's saved data; many at
    once on two worker processes (``score_all``) when ``parallel``: only where this process's
    ``__main__`` may be imported again by a spawned worker (triage's contained child, started with
    ``python -c``), never in a user's script."""

    def __init__(self, build: Build, text: str, file: Path, inputs: dict[str, Any],
                 golden: dict[str, torch.Tensor], second: Second | None, rtol: float, atol: float,
                 folder: Path, baseline: bool = True, parallel: bool = False):  # fmt: skip
        self.build, self.text, self.file = build, text, file
        self.parallel = parallel  # may start worker processes (the caller's __main__ is safe to spawn from)
        self.inputs, self.golden, self.second = inputs, golden, second
        self.rtol, self.atol = rtol, atol
        self.folder = folder
        self.count = 0
        self.pool: Any = None
        self.baseline = self.score(()) if baseline else Score(None)

    def score_all(self, todo: list[tuple[Edit, ...]], deadline: float) -> list[Score | None]:
        """The scores of ``todo``, in order; None for those the ``deadline`` left unscreened. Many
        candidates are screened on two worker processes (both CPUs), a few here."""
        if not self.parallel or len(todo) < PARALLEL_FROM or (os.cpu_count() or 1) < 2:
            return [self.score(edits) if time.perf_counter() < deadline else None for edits in todo]
        if self.pool is None:
            state = (str(self.build.work_dir), self.text, str(self.file), self.inputs, self.golden, self.second,
                     self.rtol, self.atol, str(self.folder))  # fmt: skip
            self.pool = multiprocessing.get_context("spawn").Pool(WORKERS, _worker_start, (state,))
        pending = [self.pool.apply_async(_worker_score, (edits,)) for edits in todo]
        out: list[Score | None] = []
        for job in pending:
            try:
                out.append(job.get(timeout=max(deadline - time.perf_counter(), 0.01)))
            except multiprocessing.TimeoutError:
                out.append(None)
        self.count += sum(s is not None for s in out)
        if any(s is None for s in out):
            self.close()  # NOTE: a candidate still running past the deadline must not outlive the search
        return out

    def close(self) -> None:
        """Stop the worker processes (a candidate still running on one with them)."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    @property
    def useful(self) -> bool:
        """Whether the interpreter reproduces the failure: the unedited program's outputs are wrong
        there too, or its run fails there (an index past its table)."""
        b = self.baseline
        return (b.bad is not None and b.bad > 0) or (b.bad is None and b.ran)

    def score(self, edits: tuple[Edit, ...]) -> Score:
        """The score of ``edits`` (on different lines of the file) made together."""
        self.count += 1
        copy = self.folder / f"s{os.getpid()}_{self.count}_{self.file.name}"
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


PARALLEL_FROM = 100  # candidates from which screening runs on worker processes (starting them costs ~2 s)
WORKERS = 2
_worker: Screen | None = None


def _worker_start(state: tuple) -> None:
    """A worker process's own screen of the file, on the data the search sent it."""
    global _worker
    work, text, file, inputs, golden, second, rtol, atol, folder = state
    _worker = Screen(Build(work), text, Path(file), inputs, golden, second, rtol, atol, Path(folder), baseline=False)


def _worker_score(edits: tuple[Edit, ...]) -> Score:
    assert _worker is not None
    return _worker.score(edits)
