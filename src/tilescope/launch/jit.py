"""``@ts.jit``: an orchestration function that compiles itself on first call and runs.

Invariants: decorating never parses; the IR is built on first use and cached on the object
(``language.decorators.Orchestration``). Compiled programs are kept in memory keyed by compile
options; the disk cache behind the toolchain makes a compile in a new process skip g++ for
unchanged sources.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from tilescope._tracebacks import api_boundary
from tilescope.errors import ConfigError
from tilescope.ir.nodes import Program
from tilescope.knobs import check_compile_cfg, freeze
from tilescope.language.decorators import Orchestration, caller_loc
from tilescope.language.frontend import program_ir
from tilescope.launch.program import CompiledProgram, compile_program, run_config


class JitFunction(Orchestration):
    """An orchestration: creates tensors, loops, and submits kernel tasks.

    Calling it with torch tensors (and Python scalars) compiles it once per compile options
    and runs it on the ``sim`` platform; outputs are written into the Out/InOut tensors.
    """

    def __init__(self, fn: Callable, compile_cfg: dict[str, Any] | None = None):
        super().__init__(fn, compile_cfg)
        self._compiled: dict[tuple, CompiledProgram] = {}
        self._lock = threading.Lock()
        self._param_names: list[str] | None = None  # the function's parameters, read on the first call

    @api_boundary
    def program(self) -> Program:
        """The front-end's IR of this orchestration and its kernels (before passes)."""
        return program_ir(self)

    @api_boundary
    def compile(self, *example_args: Any, build_cpp: bool = True, **compile_cfg: Any) -> CompiledProgram:
        """Compile to a build directory; ``example_args`` (optional) are checked against the
        parameters. ``build_cpp=False`` runs no g++ (for the interp platform): the C++ is written and
        built by the first sim run."""
        cfg = {**self.compile_cfg, **compile_cfg}
        compiled = compile_program(self.program(), cfg, build_cpp=build_cpp)
        if example_args:
            compiled.check_args(example_args)
        return compiled

    @api_boundary
    def __call__(self, *args: Any, **runtime_cfg: Any) -> None:
        """Compile on the first call (kept for later calls), then run on ``args`` with ``runtime_cfg``.

        Outputs are written into the Out/InOut tensors; a failed run raises RuntimeFailure.
        """
        if self._param_names is None:  # NOTE: inspect.signature took 7 us a call, a tenth of a small run's
            self._param_names = list(inspect.signature(self.fn).parameters)
        config = run_config(self.name, self._param_names, runtime_cfg)
        key = freeze(self.compile_cfg)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                # a build run on interp only runs no g++: a later sim run builds its binaries
                compiled = self._compiled[key] = self.compile(build_cpp=config.platform != "interp")
        compiled.run_with(config, *args)


    @api_boundary
    def weights_changed(self) -> None:
        """``CompiledProgram.weights_changed`` for each build this function compiled and ran."""
        with self._lock:
            compiled = list(self._compiled.values())
        for c in compiled:
            c.weights_changed()


def jit(fn: Callable | None = None, **compile_cfg: Any):
    """Declare an orchestration; ``@ts.jit(dump_passes=True)`` sets compile options (checked here)."""
    try:
        check_compile_cfg(compile_cfg)
    except ConfigError as e:
        raise ConfigError(f"@ts.jit at {caller_loc()}: {e}") from None
    if fn is None:
        return lambda f: JitFunction(f, compile_cfg)
    return JitFunction(fn, compile_cfg)
