"""Which reference goes with which solution: the one pairing rule of ``tilescope problems``.

The rule: the solution of the reference ``REFS/REL.py`` is ``SOLUTIONS/REL.py`` (the same
relative path). ``tilescope problems DIR`` is ``--refs DIR --solutions DIR/solutions``; a
KernelBench checkout and a folder of one's own solutions pair the same way
(``--refs KernelBench/KernelBench --solutions mine`` with ``mine/level1/19_ReLU.py``).

Invariants:
- The solutions decide what runs: every ``.py`` file under SOLUTIONS (sorted by relative path)
  is one problem; a solution without its reference is a problem that fails, saying where the
  reference was looked for. References without a solution are only counted.
- Files and folders whose name starts with ``_`` or ``.`` are no problems (``__init__.py``,
  ``_common.py``, ``__pycache__``), and neither is anything under SOLUTIONS when it lies inside REFS.
- A folder that does not exist, a file where a folder is expected, and a suite with no problem
  (or none that ``--filter`` selects) are one ProblemsError each, saying what to pass instead.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

from tilescope.errors import TilescopeError, clipped

FORMAT_HINT = (
    "a reference REL.py defines class Model(nn.Module), get_inputs() and get_init_inputs() (KernelBench's "
    "format); its solution SOLUTIONS/REL.py defines class ModelNew"
)


class ProblemsError(TilescopeError):
    """``tilescope problems`` cannot start: a folder that is not there, no problem to run."""


@dataclass(frozen=True)
class Pair:
    """One problem: its name (the relative path without ``.py``), its reference (None when the
    solution has none) and its solution."""

    name: str
    reference: Path | None
    solution: Path
    expected_reference: Path  # where the reference is (or was looked for)


@dataclass(frozen=True)
class Suite:
    """The problems found under ``refs`` and ``solutions``."""

    refs: Path
    solutions: Path
    pairs: list[Pair] = field(default_factory=list)
    unsolved: int = 0  # references with no solution: not run


def _python_files(root: Path, skip: Path | None = None) -> list[Path]:
    """Every ``.py`` file under ``root`` (relative paths, sorted), hidden names and ``skip`` left out."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = [d for d in dirnames if not d.startswith(("_", "."))]
        dirnames[:] = sorted(d for d in keep if skip is None or not _same(here / d, skip))
        files = [f for f in filenames if f.endswith(".py") and not f.startswith(("_", "."))]
        found += [(here / f).relative_to(root) for f in files]
    return sorted(found, key=lambda p: p.as_posix())


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _folder(path: Path, what: str, fix: str) -> None:
    if path.is_file():
        raise ProblemsError(f"{what} {clipped(path)} is a file, not a folder; {fix}")
    if not path.is_dir():
        raise ProblemsError(f"{what} {clipped(path)} does not exist; {fix}")


def find_pairs(refs: str | os.PathLike, solutions: str | os.PathLike | None = None,
               filters: list[str] | None = None, names: list[str] | None = None) -> Suite:  # fmt: skip
    """The problems under ``refs`` with their solutions under ``solutions`` (default
    ``refs/solutions``), those whose name contains one of ``filters`` (any case) when given, and
    those named exactly in ``names`` when given.

    Raises:
        ProblemsError: a folder that does not exist (or is a file), or no problem to run.
    """
    refs = Path(refs)
    default = solutions is None
    sols = refs / "solutions" if solutions is None else Path(solutions)
    _folder(refs, "problem folder", f"pass a folder of references with their solutions ({FORMAT_HINT})")
    if default:
        _folder(sols, "solutions folder", f"the solution of {clipped(refs)}/REL.py is {clipped(sols)}/REL.py: put "
                "your solutions there, or pass --solutions DIR")  # fmt: skip
    else:
        _folder(sols, "solutions folder (--solutions)", "pass the folder that holds your ModelNew files")
    solved = _python_files(sols)
    if not solved:
        raise ProblemsError(f"no problems found: {clipped(sols)} holds no solution (.py file); {FORMAT_HINT}")
    references = {p.as_posix() for p in _python_files(refs, skip=sols)}
    pairs = []
    for rel in solved:
        ref = refs / rel
        name = rel.with_suffix("").as_posix()
        pairs.append(Pair(name, ref if rel.as_posix() in references else None, sols / rel, ref))
    unsolved = len(references - {p.as_posix() for p in solved})
    if filters:
        wanted = [f.lower() for f in filters]
        chosen = [p for p in pairs if any(w in p.name.lower() for w in wanted)]
        if not chosen:
            names = ", ".join(p.name for p in pairs[:8]) + (", ..." if len(pairs) > 8 else "")
            raise ProblemsError(f"--filter {' '.join(repr(f) for f in filters)} matches none of the {len(pairs)} "
                                f"problems ({names})")  # fmt: skip
        pairs = chosen
    if names:
        known = {p.name for p in pairs}
        missing = [n for n in names if n not in known]
        if missing:
            close = difflib.get_close_matches(missing[0], sorted(known), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ProblemsError(f"--problem {missing[0]!r} is not one of the {len(known)} problems{hint}: a problem's "
                                "name is its path under the solutions without .py")  # fmt: skip
        pairs = [p for p in pairs if p.name in names]
    return Suite(refs, sols, pairs, unsolved)


__all__ = ["FORMAT_HINT", "Pair", "ProblemsError", "Suite", "find_pairs"]
