"""``@ts.kernel``, ``@ts.jit`` and ``@ts.inline``.

Invariants: decorating never parses; the IR is built on first use and cached on the object.
A JitFunction keeps compiled programs in memory keyed by compile options; the disk cache
behind the toolchain makes a compile in a new process skip g++ for unchanged sources.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Kernel, Program

if TYPE_CHECKING:
    from tilescope.program import CompiledProgram


class KernelFunction:
    """An in-core kernel: loads tiles from its tensor params, computes, stores."""

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self._ir: Kernel | None = None

    def ir(self) -> Kernel:
        if self._ir is None:
            from tilescope.language.frontend import parse_kernel

            self._ir = parse_kernel(self.fn)
        return self._ir

    def __call__(self, *args: Any, **kwargs: Any) -> None:
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
        raise TilescopeError(f"@ts.inline helper {self.fn.__name__!r} can only be called from DSL code")


class JitFunction:
    """An orchestration: creates tensors, loops, and submits kernel tasks.

    Calling it with torch tensors (and Python scalars) compiles it once per compile options
    and runs it on the ``sim`` platform; outputs are written into the Out/InOut tensors.
    """

    def __init__(self, fn: Callable, compile_cfg: dict[str, Any] | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.compile_cfg = dict(compile_cfg or {})
        self._program: Program | None = None
        self._compiled: dict[tuple, CompiledProgram] = {}
        self._lock = threading.Lock()

    def program(self) -> Program:
        """The front-end's IR of this orchestration and its kernels (before passes)."""
        if self._program is None:
            from tilescope.language.frontend import parse_program

            self._program = parse_program(self.fn, lambda k: k.ir())
        return self._program

    def compile(self, *example_args: Any, **compile_cfg: Any) -> CompiledProgram:
        """Compile to a build directory; ``example_args`` (optional) are checked against the
        parameters."""
        from tilescope.program import compile_program

        cfg = {**self.compile_cfg, **compile_cfg}
        compiled = compile_program(self.program(), cfg)
        if example_args:
            compiled.check_args(example_args)
        return compiled

    def __call__(self, *args: Any, **runtime_cfg: Any) -> None:
        from tilescope.knobs import freeze

        key = freeze(self.compile_cfg)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = self.compile()
        compiled.run(*args, **runtime_cfg)

    def __repr__(self) -> str:
        return f"<ts.jit {self.name}>"


def kernel(fn: Callable) -> KernelFunction:
    """Declare an in-core kernel."""
    return KernelFunction(fn)


def inline(fn: Callable) -> InlineFunction:
    """Declare a helper inlined into kernels or orchestrations."""
    return InlineFunction(fn)


def jit(fn: Callable | None = None, **compile_cfg: Any):
    """Declare an orchestration; ``@ts.jit(dump_passes=True)`` sets compile options."""
    if fn is None:
        return lambda f: JitFunction(f, compile_cfg)
    return JitFunction(fn, compile_cfg)
