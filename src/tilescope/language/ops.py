"""The DSL's operations: one stub per ``ts.<name>`` op of ``ir.op_registry``, made from its
entry. The stubs are markers the front-end recognises by identity; calling one from ordinary
Python raises, because kernels and orchestrations are compiled, not executed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from tilescope.errors import TilescopeError
from tilescope.ir.op_registry import OpDef, dsl_ops


class DSLOp:
    """A DSL operation, the stub of one registry op: ``kind`` says where it may appear ("kernel",
    "orch" or "both")."""

    def __init__(self, op: OpDef):
        self.op = op
        self.name = op.name
        self.kind = op.kind
        self.signature = op.signature
        self.__doc__ = op.doc

    def __repr__(self) -> str:
        return f"ts.{self.name}"

    def __call__(self, *args, **kwargs):
        """Always raises a TilescopeError: DSL ops are compiled from source, never called."""
        where = {"kernel": "a @ts.kernel", "orch": "a @ts.jit function", "both": "@ts.kernel / @ts.jit code"}
        raise TilescopeError(
            f"ts.{self.name}{self.signature} can only be used inside {where[self.kind]}; "
            "DSL functions are compiled from their source, not called as Python"
        )


STUBS: Mapping[str, DSLOp] = MappingProxyType({d.name: DSLOp(d) for d in dsl_ops()})
"""``ts.<name>`` for every DSL op of the registry; the package exports each under its name."""
RANGE = STUBS["range"]  # the loop marker the front-end recognises in ``for``


def op_names(kind: str | None = None) -> list[str]:
    """The names of the DSL ops usable in ``kind`` code ("kernel" or "orch"; None: every op)."""
    return sorted(n for n, v in STUBS.items() if kind is None or v.kind in (kind, "both"))


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three of ``candidates`` spelled like ``name``, closest first; only those about as
    close as the closest (``ts.arange`` suggests ``ts.range``, not also ``ts.triage``)."""
    found = difflib.get_close_matches(name, sorted(set(candidates)), n=3, cutoff=0.6)
    score = {c: difflib.SequenceMatcher(None, name, c).ratio() for c in found}
    return [c for c in found if score[c] >= score[found[0]] - 0.15] if found else []


def unknown_op_message(
    prefix: str, name: str, candidates: Iterable[str], kind: str | None = None
) -> tuple[str, str]:
    """``<prefix><name> is not a tilescope op`` with the close matches among ``candidates``, and
    the list of the ops that exist (those usable in ``kind`` code, or every op)."""
    matches = close_matches(name, candidates)
    text = f"{prefix}{name} is not a tilescope op"
    if matches:
        text += f"; did you mean {' or '.join(prefix + m for m in matches)}?"
    where = {"kernel": " in a @ts.kernel", "orch": " in a @ts.jit orchestration"}.get(kind or "", "")
    return text, f"the ops{where}: {', '.join(prefix + n for n in op_names(kind))}"
