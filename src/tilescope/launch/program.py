"""``CompiledProgram``: a build directory, ready to run on ``sim`` (compiled) or ``interp``
(the reference interpreter of its final IR).

Invariants:
- Every call checks its arguments against the recorded specs and lists every mismatch (an
  argument passed by keyword included), and refuses a platform or CPU the build was not
  compiled for, saying what to do. Its run keywords are validated once, into a ``RunConfig``
  (``run_config``), which goes unchanged to the run path.
- A sim run goes through the one run path (``launch.run.launch``): in this process, or in a
  child process with ``isolate`` (``launch.isolate``), which runs ``launch`` there.
- The build's libraries are loaded on the first sim run and stay loaded while the object lives.
- Every run whose arguments and platform were accepted is noted to an open
  ``program_calls.recording()`` block (none open: nothing is noted or copied).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from tilescope import knobs
from tilescope._logging import configure, level_kept
from tilescope._tracebacks import api_boundary
from tilescope.build.compile import compile_to_dir
from tilescope.build.manifest import Build
from tilescope.build.paths import CRASH_REPORT, dfx_dir, inside
from tilescope.build.state import load_state, refresh
from tilescope.build.target import check_target
from tilescope.errors import ArgumentError, ConfigError
from tilescope.ir.nodes import Program
from tilescope.launch import program_calls
from tilescope.launch.inputs_kept import KeptInputs
from tilescope.launch.isolate import run_isolated
from tilescope.launch.launch_plan import args_key
from tilescope.launch.run import Binaries, RunInfo, launch, load_binaries
from tilescope.launch.weights import forget_functions
from tilescope.runtime.host_memory import check_local_memory, run_workers, unwritable
from tilescope.runtime.interp import run_program
from tilescope.runtime.run_config import RunConfig


def run_config(name: str, params: list[str], runtime_cfg: Mapping[str, Any]) -> RunConfig:
    """The options of a call of the program ``name(*params)`` with the keywords ``runtime_cfg``,
    validated (``RunConfig.from_keywords``).

    Raises:
        ArgumentError: a program argument passed by keyword (keywords are run options).
        ConfigError: a keyword that is not a run option, or a value or combination it refuses.
    """
    named = [k for k in runtime_cfg if k in params and k not in knobs.RUNTIME_KNOBS]
    if named:
        raise ArgumentError(
            f"{name}({', '.join(params)}) takes its arguments by position, got {', '.join(f'{k}=' for k in named)} "
            "as keyword(s): keywords are run options (platform=, num_workers=, ...); pass every argument in order"
        )
    return RunConfig.from_keywords(runtime_cfg)


def compile_program(
    program: Program, compile_cfg: dict[str, Any] | None = None, *, build_cpp: bool = True
) -> CompiledProgram:
    """Front-end IR -> passes -> C++ -> g++ -> a build directory, returned loaded (``build_cpp=False``:
    no g++, the first sim run builds the binaries)."""
    done = compile_to_dir(program, compile_cfg, build_cpp=build_cpp)
    compiled = CompiledProgram(done.work_dir, program=done.program)
    compiled.timings = dict(done.timings)
    if done.lock is not None:
        done.lock.close()  # the CompiledProgram holds the build now
    return compiled


class CompiledProgram(Build):
    """A build directory, ready to run on ``sim`` (compiled) or ``interp`` (reference)."""

    def __init__(self, work_dir: str | os.PathLike, program: Program | None = None):
        super().__init__(work_dir, program)
        self._binaries: Binaries | None = None
        self._lock = threading.Lock()
        self._target_ok: set[str] = set()  # platforms check_target accepted (the CPU does not change)
        self._crash_report: tuple[str, str] | None = None  # a crash report's directory and path, once made
        self._args_passed: tuple | None = None  # the signature of the last arguments check_args passed
        self._last_config: tuple[RunConfig, str | None, RunConfig] | None = None  # _with_crash_report's
        self._param_names = [a.name for a in self.args]
        self._outputs = tuple(i for i, a in enumerate(self.args) if a.is_output)  # positions _check_writable checks
        self.timings: dict[str, float] = {}
        self._refreshed = True  # False: loaded without bringing its binaries up to date

    @classmethod
    @api_boundary
    def from_dir(cls, path: str | os.PathLike, build_cpp: bool = True) -> CompiledProgram:
        """Load a build directory written by ``compile``, first rebuilding only what was edited
        in it by hand (C++ sources, or the IR dump ``ir/<program>.py``). ``build_cpp=False`` (a run
        on interp, which reads the IR dump as it is) loads it without g++: its first sim run rebuilds."""
        if build_cpp:
            return cls.refreshed(path)  # type: ignore[return-value]
        loaded = cls(path)
        load_state(loaded.work_dir, loaded.config)  # refused as a refresh would refuse it
        loaded._refreshed = False
        return loaded

    def binaries(self) -> Binaries:
        """The build's loaded libraries (loaded on first use)."""
        with self._lock:
            if self._binaries is None:
                self.ensure_binaries()
                self._binaries = load_binaries(self)
            return self._binaries

    @api_boundary
    def run(self, *args: Any, **runtime_cfg: Any) -> RunInfo:
        """Run on ``args`` (outputs are written into the Out/InOut tensors passed in) with the run
        options ``runtime_cfg`` (``platform=``, ``num_workers=``, ...: ``knobs.RUNTIME_KNOBS``).

        ``log_level`` applies to this run: the level is as it was after it.

        Raises:
            RuntimeFailure: the run failed; ``exc.failure`` (a debug.failures.Failure) names the
                task, kernel and source line, and where the failing task's inputs were saved.
        """
        with level_kept():
            return self._run(args, run_config(self.name, self._param_names, runtime_cfg))

    __call__ = run

    @api_boundary
    def run_with(self, config: RunConfig, *args: Any) -> RunInfo:
        """``run`` with options validated already (``RunConfig.from_keywords``)."""
        with level_kept():
            return self._run(args, config)

    def _run(self, args: tuple, config: RunConfig) -> RunInfo:
        configure(config.log_level)
        key = self._check_args_again(args)
        self._check_writable(args)
        rc = self.runtime_config
        if config.platform not in rc.get("platforms", knobs.PLATFORMS):
            raise ConfigError(
                f"{self.work_dir} was compiled for platform(s) {', '.join(rc['platforms'])}, not "
                f"{config.platform!r}: compile it again with this tilescope"
            )
        program_calls.note(self, args)
        if config.platform == "interp":
            t0 = time.perf_counter()
            kept = KeptInputs(self.args, args)
            n = run_program(self.program(), list(args), float64=config.float64, max_tasks=config.max_tasks)
            kept.check(self.name, self.work_dir)
            return RunInfo("interp", time.perf_counter() - t0, n)
        if config.platform not in self._target_ok:
            check_target(self.work_dir, rc.get("target"), config.platform)
            self._target_ok.add(config.platform)
        if config.isolate:
            # NOTE: the child would refuse them too: refused here, no child is started for nothing
            check_local_memory(int(rc.get("local_memory_bytes", 0)), run_workers(config), self.name)
            self.ensure_binaries()
            # NOTE: the child gets each storage apart, so it cannot see an input sharing bytes with
            # an output that the copy back then overwrites: those are kept here
            kept = KeptInputs(self.args, args, confined=True)
            info = run_isolated(self, args, config)
            kept.check(self.name, self.work_dir)
            return info
        return launch(self, self.binaries(), args, self._with_crash_report(config), key=key)

    @api_boundary
    def weights_changed(self) -> None:
        """Drop what this build's kernels packed of their ts.Weight arguments, so the next sim run
        packs them again: after a change to a weight that torch does not count (through NumPy or
        another tensor over the same memory, such as ``w.data``, or in an inference tensor). A
        change torch counts, and a new tensor, are seen on their own."""
        binaries = self._binaries
        if binaries is None:
            if not all((self.work_dir / k["binary"]).is_file() for k in self.kernels):
                return  # never built here: nothing was packed from these libraries
            binaries = self.binaries()  # NOTE: libraries another build of the same bytes loaded are these
        for fn in forget_functions(binaries.libraries):
            fn()
        for watch in binaries.weights.values():
            watch.forget()

    def ensure_binaries(self) -> None:
        """Build the binaries of a build compiled or loaded for the interp platform only (missing, or
        not brought up to date with hand edits)."""
        binaries = [self.config["ORCHESTRATION"]["binary"], *(k["binary"] for k in self.kernels)]
        if not self._refreshed or not all((self.work_dir / b).is_file() for b in binaries):
            refresh(self.work_dir, self.config)
            self._refreshed = True

    def _with_crash_report(self, config: RunConfig) -> RunConfig:
        """``config`` with this build's crash report path; the last one made is reused while the
        options and the path are the same (a program run in a loop)."""
        path = self._crash_report_path()
        last = self._last_config
        if last is not None and last[0] is config and last[1] == path:
            return last[2]
        made = config.replace(crash_report=path)
        self._last_config = (config, path, made)
        return made

    def _crash_report_path(self) -> str | None:
        """Where a crashing kernel's report goes; None when the build cannot be written (a read-only
        or full build still runs, and a crash is still reported, without the report file). The
        directory is made on the first run; the core makes it again if it was removed since
        (``write_crash_report``), so a run in a loop does not look at the file system."""
        known = self._crash_report
        if known is not None:
            return known[1]
        try:
            where = dfx_dir(self.work_dir)
        except OSError:
            return None
        self._crash_report = (str(where), str(inside(where, CRASH_REPORT)))
        return self._crash_report[1]

    def _check_writable(self, args: tuple) -> None:
        """ArgumentError naming every Out/InOut tensor whose memory is mapped read-only: a kernel (or
        an isolated run's copy back) writing there would kill the process with SIGSEGV. Checked on
        every call: the signature ``_check_args_again`` compares cannot tell memory apart."""
        import torch

        bad = [self.args[i] for i in self._outputs if isinstance(args[i], torch.Tensor) and unwritable(args[i])]
        if bad:
            raise ArgumentError(
                f"{len(bad)} argument(s) of {self.name} cannot be written:\n  " + "\n  ".join(
                    f"argument {spec.name!r} ({spec.describe()}): its memory is mapped read-only (a tensor made "
                    "from a np.memmap opened with mode='r', or from another read-only buffer), and a run writes "
                    f"its {spec.direction.value} parameters in place: open the memmap with mode='r+' (writes reach "
                    f"the file) or mode='c' (copy on write), or pass a copy ({spec.name}.clone())" for spec in bad)
            )  # fmt: skip

    def _check_args_again(self, args: tuple) -> tuple | None:
        """``check_args``, skipped when the layout part of the arguments' key
        (``launch_plan.args_key``) equals that of the last arguments it passed: any change to a
        checked property is checked in full, with the same errors; new tensors of the same layout
        are not checked again. Returns the key (None: not told cheaply)."""
        key = args_key(self.args, args)
        if key is None or key[0] != self._args_passed:
            self.check_args(args)
            self._args_passed = None if key is None else key[0]
        return key


__all__ = ["CompiledProgram", "RunInfo", "compile_program", "run_config"]
