"""Tracebacks that end at the user's call.

A TilescopeError that leaves a public entry point (``api_boundary``: calling a ``@ts.jit``
function, ``fn.compile()``, ``fn.program()``, ``kernel_ir``, ``CompiledProgram.run``,
``CompiledProgram.from_dir`` and ``run_jit``) carries a traceback without tilescope's own frames,
so it ends at the user's line; the exceptions it chains are trimmed the same way, and a note on
the error says so. A Ctrl-C (KeyboardInterrupt) is the user's too: its traceback ends at their
call. ``TILESCOPE_TRACEBACK=full`` (the ``traceback`` knob) keeps every frame.

Invariants: only TilescopeError and KeyboardInterrupt are touched (any other exception is a
tilescope bug and keeps its whole traceback); the error object raised is the one the code below
raised; nested entry points add the note once.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tilescope.errors import TilescopeError
from tilescope.knobs import env_setting

_PACKAGE_DIR = str(Path(__file__).resolve().parent) + os.sep
_F = TypeVar("_F", bound=Callable[..., Any])
NOTE = "(tilescope's internal frames are hidden; TILESCOPE_TRACEBACK=full shows them)"


# NOTE: the standard library's frames below an entry point are tilescope's doing too (a thread
# pool running a compile job, a context manager used as a decorator): they are hidden with ours.
_STDLIB_DIRS = tuple(
    str(Path(p).resolve()) + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def _internal(tb: types.TracebackType) -> bool:
    if tb.tb_frame.f_code.co_filename.startswith("<frozen "):  # the standard library's frozen modules (importlib)
        return True
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return path.startswith(_PACKAGE_DIR) or (path.startswith(_STDLIB_DIRS) and "site-packages" not in path)


def filter_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the frames of tilescope's own modules and of the standard library they call."""
    kept = []
    while tb is not None:
        if not _internal(tb):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        # NOTE: an exception raised between two lines (a Ctrl-C inside the import machinery) may
        # carry no line number; the frame's own is the next best
        line = t.tb_lineno if t.tb_lineno is not None else (t.tb_frame.f_lineno or 0)
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, line)
    return out


def api_boundary(fn: _F) -> _F:
    """Wrap a public entry point: a TilescopeError raised below it (and the exceptions it
    chains) leaves with tilescope's internal frames filtered out of its traceback."""

    @functools.wraps(fn)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (TilescopeError, KeyboardInterrupt) as e:
            if env_setting("traceback") == "full":
                raise
            seen: set[int] = set()
            chained: BaseException | None = e
            while chained is not None and id(chained) not in seen:
                seen.add(id(chained))
                chained.__traceback__ = filter_traceback(chained.__traceback__)
                chained = chained.__cause__ or chained.__context__
            if NOTE not in getattr(e, "__notes__", ()):
                e.add_note(NOTE)
            raise e  # the error from your call above, with tilescope's own frames left out

    return entry_point  # type: ignore[return-value]
