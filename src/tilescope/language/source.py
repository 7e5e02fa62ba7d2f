"""Reading a DSL function's source: its AST, file, namespace and annotations.

Invariants: the function is never executed; line numbers are those of the user's file; the
namespace is what the function's body can see (builtins, then globals, then closure variables).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilescope.errors import DSLError, SourceLoc


@dataclass(frozen=True)
class FunctionSource:
    """A DSL function as read: its ``def`` node, file, visible namespace and annotations."""

    tree: ast.FunctionDef
    file: str
    namespace: dict[str, Any]
    annotations: dict[str, Any]


def function_source(fn: Callable) -> FunctionSource:
    """Parse ``fn``'s source; line numbers are those of its file."""
    try:
        lines, start = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError):
        raise DSLError(
            f"cannot read the source of {fn.__qualname__}",
            None,
            "tilescope compiles DSL functions from their source: define them in a .py file",
        ) from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, start - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise DSLError(f"{fn.__qualname__} is not a plain function definition", SourceLoc(file, start))
    ns: dict[str, Any] = dict(vars(builtins))
    ns.update(fn.__globals__)
    if fn.__closure__:
        ns.update(inspect.getclosurevars(fn).nonlocals)
    return FunctionSource(fdef, file, ns, dict(getattr(fn, "__annotations__", {})))


# What messages call the Python constructs the DSL does not take (the AST class name otherwise).
_SYNTAX_NAMES = {
    "JoinedStr": "f-strings",
    "FormattedValue": "f-string fields",
    "Dict": "dict literals",
    "Set": "set literals",
    "NamedExpr": "':=' assignments",
    "Await": "'await' expressions",
    "Yield": "'yield' expressions",
    "YieldFrom": "'yield from' expressions",
    "Slice": "slices outside a subscript",
    "Match": "'match'",
    "AsyncFor": "'async for'",
    "AsyncWith": "'async with'",
    "AsyncFunctionDef": "'async def'",
    "Import": "'import'",
    "ImportFrom": "'from ... import'",
    "TryStar": "'try ... except*'",
}


def syntax_name(node: ast.AST) -> str:
    """How an error names a Python construct: ``f-strings`` for a ``JoinedStr``; other nodes
    by their AST class name (``Starred expressions``)."""
    name = type(node).__name__
    if name in _SYNTAX_NAMES:
        return _SYNTAX_NAMES[name]
    return name if isinstance(node, ast.stmt) else f"{name} expressions"
