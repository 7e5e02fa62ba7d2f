"""Calling the functions a harness user passes in: ``golden_fn``, a TensorSpec's ``init_value``
and ``compare_fn``.

Invariants: whatever one raises becomes a UserCodeError (a TilescopeError, so the run ends with
an ``[ERROR]`` line, never a traceback) whose message names the function, the innermost line of
the user's own code it raised at (not tilescope, torch or the standard library; else the
function's definition) and the exception.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilescope.errors import TilescopeError


class UserCodeError(TilescopeError):
    """A function the user passed to the harness raised; the message names the user's line."""


class GoldenError(UserCodeError):
    """``golden_fn`` raised; the message names the user's line it raised at."""


def _library_dirs() -> tuple[str, ...]:
    """Directories of code that is not the user's: tilescope, the standard library, installed packages."""
    paths = sysconfig.get_paths()
    dirs = {str(Path(__file__).resolve().parents[1])}
    dirs.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def function_name(fn: Callable[..., Any]) -> str:
    """How messages name a user's function: its qualified name (``torch.randn``), else its repr."""
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if name and module and module.split(".")[0] == "torch":
        return f"torch.{name}"
    return name or repr(fn)


def user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``e``'s traceback in the user's own code (not tilescope, torch or
    the standard library), or None."""
    libs = _library_dirs()
    user = [f for f in traceback.extract_tb(e.__traceback__) if not os.path.realpath(f.filename).startswith(libs)]
    return user[-1] if user else None


def user_failure(what: str, fn: Callable[..., Any], e: BaseException, context: str = "") -> str:
    """``<what> <name> raised at <file>:<line><context>: <Type>: <message>`` and that line's
    source: the innermost frame of the user's own code, else ``fn``'s definition; a function
    with neither (a builtin such as ``torch.randn``) is named without a place."""
    frame = user_frame(e)
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    source = ""
    if frame is not None:
        where = f" at {frame.filename}:{frame.lineno}"
        source = (frame.line or "").strip()
    else:
        code = getattr(fn, "__code__", None)
        where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
    return f"{what} {function_name(fn)} raised{where}{context}: {text}" + (
        f"\n    {source}" if source else ""
    )


def call_user(
    what: str,
    fn: Callable[..., Any],
    *args: Any,
    context: str = "",
    error: type[UserCodeError] = UserCodeError,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)``; whatever it raises becomes ``error`` naming the user's line."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - whatever the user's function raises ends the run with a report
        raise error(user_failure(what, fn, e, context)) from e
