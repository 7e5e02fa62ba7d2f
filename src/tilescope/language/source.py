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
