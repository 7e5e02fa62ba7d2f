"""``@ts.kernel`` and ``@ts.inline``, and the orchestration base that ``@ts.jit`` builds on
(``launch/jit.py``: compiling and running need the layers above the language).

Invariants: decorating never parses; the front-end builds the IR on first use and caches it on
the object (``frontend.kernel_ir`` / ``frontend.program_ir``). These objects are what the
front-end recognises in DSL code: a kernel call is a task, an inline helper is inlined, an
orchestration cannot be called from DSL code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Kernel, Program


class KernelFunction:
    """An in-core kernel: loads tiles from its tensor params, computes, stores."""

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.cached_ir: Kernel | None = None  # set by frontend.kernel_ir

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
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: a helper is inlined into DSL code, never called from Python."""
        raise TilescopeError(f"@ts.inline helper {self.fn.__name__!r} can only be called from DSL code")


class Orchestration:
    """An orchestration function and its compile options (``@ts.jit`` makes the runnable
    subclass, ``launch.jit.JitFunction``)."""

    def __init__(self, fn: Callable, compile_cfg: dict[str, Any] | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.compile_cfg = dict(compile_cfg or {})
        self.cached_program: Program | None = None  # set by frontend.program_ir

    def __repr__(self) -> str:
        return f"<ts.jit {self.name}>"


def kernel(fn: Callable) -> KernelFunction:
    """Declare an in-core kernel."""
    return KernelFunction(fn)


def inline(fn: Callable) -> InlineFunction:
    """Declare a helper inlined into kernels or orchestrations."""
    return InlineFunction(fn)
