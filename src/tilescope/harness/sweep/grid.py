"""The cases of a sweep: each ``--grid NAME=VALUES`` a dimension, the cases their product in the
order the grids are given, and a case's command the template with ``{NAME}`` replaced by its
values.

Invariants:
- VALUES is ``a,b,c`` (the words as they are) or ``START:STOP[:STEP]`` (the integers of Python's
  ``range``); an empty list, a name given twice, a name that is not an identifier, a placeholder
  no grid names and a grid no placeholder uses are each an error naming it (``GridError``).
- ``{{`` and ``}}`` are literal braces in the template (``str.format``'s rule).
- A case's id (``c0003``) is its place in the product: the same grids give the same ids, which
  is what ``--resume`` matches a sweep's records by.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

from tilescope.errors import TilescopeError


class GridError(TilescopeError):
    """A grid or a command template that cannot give cases."""


@dataclass(frozen=True)
class Case:
    """One point of the grid: its id, its values by name, the command it runs (argv), and the
    folder it runs in when it has one of its own (a bisect's worktree)."""

    id: str
    values: dict[str, str]
    argv: tuple[str, ...]
    cwd: str | None = None  # where it runs (None: where the engine runs cases)

    @property
    def label(self) -> str:
        """``platform=sim seed=3``."""
        return " ".join(f"{k}={v}" for k, v in self.values.items())


def parse_grid(text: str) -> tuple[str, list[str]]:
    """``NAME=VALUES`` as (name, values); GridError naming what is wrong."""
    name, eq, values = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise GridError(f"--grid {text!r}: expected NAME=VALUES, NAME an identifier (e.g. seed=0:8 or platform=sim,interp)")
    if ":" in values and "," not in values:
        parts = values.split(":")
        try:
            bounds = [int(p) for p in parts]
        except ValueError:
            raise GridError(f"--grid {text!r}: START:STOP[:STEP] takes integers") from None
        if len(bounds) not in (2, 3) or (len(bounds) == 3 and bounds[2] == 0):
            raise GridError(f"--grid {text!r}: a range is START:STOP or START:STOP:STEP, STEP not 0")
        out = [str(v) for v in range(*bounds)]
    else:
        out = [v.strip() for v in values.split(",")]
        if any(not v for v in out):
            out = []
    if not out:
        raise GridError(f"--grid {text!r} gives no values", )
    return name, out


def cases(grids: list[str], template: list[str]) -> list[Case]:
    """Every case of ``grids`` (``NAME=VALUES`` each) for the command ``template`` (argv)."""
    if not template:
        raise GridError("no command: give it after --, e.g. tilescope sweep --grid seed=0:4 -- python m.py --seed {seed}")
    dims: dict[str, list[str]] = {}
    for text in grids:
        name, values = parse_grid(text)
        if name in dims:
            raise GridError(f"--grid {name} is given twice: give its values once ({name}=a,b,c)")
        dims[name] = values
    used = _placeholders(template)
    unknown = [n for n in used if n not in dims]
    if unknown:
        raise GridError(f"the command uses {{{unknown[0]}}}, which no --grid names: add --grid {unknown[0]}=...")
    unused = [n for n in dims if n not in used]
    if unused:
        raise GridError(f"--grid {unused[0]} is not used by the command: put {{{unused[0]}}} where its value goes")
    names = list(dims)
    out = []
    for i, combo in enumerate(itertools.product(*(dims[n] for n in names))):
        values = dict(zip(names, combo))
        out.append(Case(f"c{i:04d}", values, tuple(arg.format(**values) for arg in template)))
    return out


def _placeholders(template: list[str]) -> list[str]:
    out: list[str] = []
    for arg in template:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as e:
            raise GridError(f"the command argument {arg!r} is not a template: {e} (write {{{{ and }}}} for braces)") from None
        for f in fields:
            if not f.isidentifier():
                raise GridError(f"the command argument {arg!r} has the placeholder {{{f}}}: a placeholder is {{NAME}}")
            if f not in out:
                out.append(f)
    return out
