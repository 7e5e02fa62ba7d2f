"""User-facing error types.

Every error a kernel author can cause derives from TilescopeError and carries a message that
names the thing, what was expected, and what to do. Errors tied to DSL source carry a
``SourceLoc`` and render as ``file:line: message`` followed by the offending source line.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A place in a source file: ``file:line`` (the column is kept but not printed)."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source_line(self) -> str:
        """The text of that line (``''`` if the file cannot be read)."""
        return linecache.getline(self.file, self.line).rstrip("\n")


SHOWN_CHARS = 200  # the most of a value a message quotes (an argument echoed back, a path)


def file_size_limit() -> str:
    """This process's file size limit (``ulimit -f``) in words: ``4096 bytes``, or ``unlimited``."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


def clipped(text: Any, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a message quotes it: whole up to ``limit`` characters, else its start, its
    end and how long it is (a 20 MB argument is never echoed back whole)."""
    text = os.fspath(text) if isinstance(text, os.PathLike) else str(text)
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 6
    return f"{text[:head]}…{text[-tail:]} ({len(text)} characters)"


class TilescopeError(Exception):
    """Base class of every error tilescope reports to users."""


class DSLError(TilescopeError):
    """An error at a location in the user's DSL source (front-end or verifier)."""

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        return render_at(self.message, self.loc, self.hint)


def render_at(message: str, loc: SourceLoc | None, hint: str | None = None) -> str:
    """``file:line: message``, the source line, and ``hint:`` — how an error (or a compile
    warning) tied to DSL source reads."""
    parts = [f"{loc}: {message}" if loc else message]
    if loc is not None:
        src = loc.source_line()
        if src.strip():
            parts.append(f"    {src.strip()}")
    if hint:
        parts.append(f"  hint: {hint}")
    return "\n".join(parts)


class UnsupportedSyntaxError(DSLError):
    """A Python construct the DSL front-end does not accept."""


class AnnotationError(DSLError, TypeError):
    """A parameter annotation that is not one (``ts.Tensor[[16, 0], ts.f32]``); a TypeError too, as
    Python's own subscripts raise."""


class VerifyError(DSLError):
    """The IR verifier rejected a program (shape, dtype, bounds, memory, direction);
    ``pass_name`` is the pass after which it did ("" for the front-end's IR). A kernel that reads
    an Out param names it in ``out_read``: (kernel, param)."""

    pass_name: str = ""
    out_read: tuple[str, str] | None = None


class ArgumentError(TilescopeError):
    """Arguments passed to a compiled program or kernel do not match its parameters."""


class HarnessError(TilescopeError):
    """The test harness was given something it cannot use: not a ``@ts.jit`` program, a negative
    tolerance, specs that are not specs, a ``compare_fn`` answer that is not a bool."""


class ConfigError(TilescopeError):
    """Unknown or invalid compile_cfg / runtime_cfg keys or values."""


class ToolchainError(TilescopeError):
    """The C++ toolchain is missing or failed."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT): a KeyboardInterrupt, so the program stops as it would;
    ``exc.failure`` names the tasks that were running (their report was printed)."""


class RuntimeFailure(TilescopeError):
    """The task-graph runtime reported a failure while running a program."""


class BuildFileError(TilescopeError):
    """A file of a build directory is missing a key, holds a value of the wrong type, or names a
    path outside the build."""
