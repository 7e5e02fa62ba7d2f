"""``@ts.kernel`` and ``@ts.inline``, and the orchestration base that ``@ts.jit`` builds on
(``launch/jit.py``: compiling and running need the layers above the language).

Invariants: decorating never parses; the front-end builds the IR on first use and caches it on
the object (``frontend.kernel_ir`` / ``frontend.program_ir``). These objects are what the
front-end recognises in DSL code: a kernel call is a task, an inline helper is inlined, an
orchestration cannot be called from DSL code.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilescope._tracebacks import api_boundary
from tilescope.errors import DSLError, SourceLoc, TilescopeError
from tilescope.ir.nodes import Kernel, Program
from tilescope.language.kernel_names import NAME_RULE, name_problem

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep


def caller_loc() -> SourceLoc | None:
    """The innermost place outside tilescope on the stack: the line that applied a decorator."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _what(obj: Any) -> str:
    """How a message names something that is not a plain function."""
    if isinstance(obj, KernelFunction):
        return f"the @ts.kernel {obj.name}"
    if isinstance(obj, Orchestration):
        return f"the @ts.jit function {obj.name}"
    if isinstance(obj, InlineFunction):
        return f"the @ts.inline helper {obj.fn.__name__}"
    if inspect.isclass(obj):
        return f"the class {obj.__qualname__}"
    if inspect.isbuiltin(obj):
        return f"the builtin {obj.__qualname__}"
    if inspect.ismethod(obj):
        return f"the bound method {obj.__qualname__}"
    text = repr(obj)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(obj).__name__})"


def check_dsl_function(fn: Any, decorator: str) -> None:
    """Raise a DSLError at the decorating line unless ``fn`` is a plain ``def`` function, the only
    thing a DSL decorator can read the source of."""
    if isinstance(fn, KernelFunction | Orchestration | InlineFunction):
        raise DSLError(
            f"{decorator} decorates a plain function, got {_what(fn)}",
            caller_loc(),
            "a function is one of @ts.kernel, @ts.jit or @ts.inline: keep one decorator",
        )
    if not inspect.isfunction(fn):
        raise DSLError(
            f"{decorator} decorates a function, got {_what(fn)}",
            caller_loc(),
            f"write {decorator} on the line above 'def name(...):'",
        )
    kind = (
        "a lambda"
        if fn.__name__ == "<lambda>"
        else "a generator"
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        else "an async function"
        if inspect.iscoroutinefunction(fn)
        else None
    )
    if kind is not None:
        raise DSLError(
            f"{decorator} decorates a plain 'def' function, got {kind} ({fn.__qualname__})",
            caller_loc(),
            f"write {decorator} on the line above 'def name(...):'",
        )


class KernelFunction:
    """An in-core kernel: loads tiles from its tensor params, computes, stores.

    Its ``name`` is the ``def`` name, or the one ``@ts.kernel(name=...)`` (or setting ``.name``
    before its first compile) gave it; a program whose kernels share a ``def`` name tells them
    apart (``language.kernel_names``).
    """

    def __init__(self, fn: Callable, name: str | None = None):
        check_dsl_function(fn, "@ts.kernel")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.given_name = name  # checked by the caller (``kernel``)
        self.cached_ir: Kernel | None = None  # set by frontend.kernel_ir

    @property
    def name(self) -> str:
        """The kernel's name: the one given, else the ``def`` name."""
        return self.given_name or self.fn.__name__

    @name.setter
    @api_boundary
    def name(self, value: str) -> None:
        problem = name_problem(value)
        if problem is not None:
            raise DSLError(f"kernel {self.name}: .name = {value!r} is not a kernel name: {problem}", caller_loc(),
                           f"{NAME_RULE}, e.g. 'mm_128x64'")  # fmt: skip
        if self.cached_ir is not None and value != self.name:
            raise DSLError(
                f"kernel {self.name}: .name cannot change once the kernel is compiled (a program holds it "
                "under its name)",
                caller_loc(),
                f"name it where it is made: @ts.kernel(name={value!r}), or set .name before its first compile",
            )
        self.given_name = value

    @property
    def name_given(self) -> bool:
        """Whether the name was given (``@ts.kernel(name=...)`` or ``.name = ...``), so kept as is."""
        return self.given_name is not None

    @api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Always raises: a kernel runs as a task, called from a ``@ts.jit`` orchestration."""
        raise TilescopeError(
            f"kernel {self.name!r} runs as a task: call it from a @ts.jit orchestration "
            f"(e.g. {self.name}(x[r:r + 64, :], ...)), then call the @ts.jit function with torch tensors"
        )

    def __repr__(self) -> str:
        return f"<ts.kernel {self.name}>"


class InlineFunction:
    """A helper whose body is inlined at each call site inside kernels or orchestrations."""

    def __init__(self, fn: Callable):
        check_dsl_function(fn, "@ts.inline")
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: a helper is inlined into DSL code, never called from Python."""
        raise TilescopeError(f"@ts.inline helper {self.fn.__name__!r} can only be called from DSL code")


class Orchestration:
    """An orchestration function and its compile options (``@ts.jit`` makes the runnable
    subclass, ``launch.jit.JitFunction``)."""

    def __init__(self, fn: Callable, compile_cfg: dict[str, Any] | None = None):
        check_dsl_function(fn, "@ts.jit")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.compile_cfg = dict(compile_cfg or {})
        self.cached_program: Program | None = None  # set by frontend.program_ir

    def __repr__(self) -> str:
        return f"<ts.jit {self.name}>"


def _no_options(decorator: str, options: dict[str, Any]) -> None:
    got = f", got {', '.join(f'{k}=' for k in options)}" if options else ""
    raise DSLError(
        f"{decorator} takes no arguments{got}",
        caller_loc(),
        f"write {decorator}, without parentheses, on the line above 'def name(...):'",
    )


_NO_FUNCTION: Any = object()


@api_boundary
def kernel(
    fn: Callable = _NO_FUNCTION, /, *, name: str | None = None, **options: Any
) -> KernelFunction | Callable[[Callable], KernelFunction]:
    """Declare an in-core kernel: ``@ts.kernel``, ``@ts.kernel()`` or ``@ts.kernel(name="mm_128x64")``.

    Args:
        fn: the kernel's function (given when used without parentheses).
        name: the kernel's name in the build, reports, traces and dumps (default: the ``def``
            name; kernels of one program that share a ``def`` name get distinct names).
    """
    if options:
        raise DSLError(
            f"@ts.kernel has no option {', '.join(f'{k}=' for k in options)}; its only option is name=",
            caller_loc(),
            'write @ts.kernel, or @ts.kernel(name="...") to name the kernel',
        )
    if name is not None:
        problem = name_problem(name)
        if problem is not None:
            raise DSLError(f"@ts.kernel(name={name!r}): not a kernel name: {problem}", caller_loc(),
                           f"{NAME_RULE}, e.g. @ts.kernel(name=\"mm_128x64\")")  # fmt: skip
    if fn is _NO_FUNCTION:

        @api_boundary
        def decorate(f: Callable) -> KernelFunction:
            return KernelFunction(f, name)

        return decorate
    if isinstance(fn, str):
        raise DSLError(
            f"@ts.kernel decorates a function, got {fn!r} (str)",
            caller_loc(),
            f"to name the kernel, write @ts.kernel(name={fn!r})",
        )
    return KernelFunction(fn, name)


def inline(fn: Callable | None = None, /, **options: Any) -> InlineFunction:
    """Declare a helper inlined into kernels or orchestrations (``@ts.inline``, no arguments)."""
    if fn is None or options:
        _no_options("@ts.inline", options)
    return InlineFunction(fn)
