"""Compiling a Program into a build directory, and running a build.

Invariants:
- A build directory is created exclusively (``os.mkdir``), so two compiles started in the
  same second never share one; ``kernel_config.py`` is written last and atomically, so a
  directory without it is an interrupted build.
- ``CompiledProgram`` needs only the build directory: ``kernel_config.py`` for signatures and
  argument specs, the ``.so`` files for ``sim``, and ``ir/<program>.py`` (the final IR as DSL
  source) for ``interp``.
- Every call checks its arguments against the recorded specs and lists every mismatch.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import logging
import os
import runpy
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope.buildstate import ir_state, record_state, refresh
from tilescope.codegen.build_files import write_build_files
from tilescope.codegen.kernel_config import BUILD_FORMAT, config_data, kernel_config_source
from tilescope.codegen.kernel_cpp import kernel_cpp
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.dfx import DFX_DIR, write_dfx
from tilescope.errors import ArgumentError, RuntimeFailure, TilescopeError
from tilescope.failures import Failure
from tilescope.ir.nodes import Program
from tilescope.ir.printer import program_str
from tilescope.language import dtypes as dt
from tilescope.passes.manager import PassManager
from tilescope.passes.pipeline import DEFAULT_PIPELINE
from tilescope.report import write_report
from tilescope.toolchain import compiler as toolchain
from tilescope.tools.intermediates import write_intermediates

log = logging.getLogger("tilescope")


def new_build_dir(base: Path, name: str) -> Path:
    """``<base>/_jit_<name>_<YYYYMMDD_HHMMSS>[_n]``, created exclusively."""
    base.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    stem = f"_jit_{name}_{stamp}"
    for n in range(10_000):
        path = base / (stem if n == 0 else f"{stem}_{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise TilescopeError(f"cannot create a build directory under {base}: too many builds named {stem}_*")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def compile_program(program: Program, compile_cfg: dict[str, Any] | None = None) -> CompiledProgram:
    """Front-end IR -> passes -> C++ -> g++ -> a build directory, returned loaded."""
    opts = knobs.compile_options(compile_cfg)
    work = new_build_dir(Path(opts["build_dir"]), program.name)
    t0 = time.perf_counter()
    manager = PassManager(
        DEFAULT_PIPELINE,
        verify=bool(opts["verify"]),
        local_memory_bytes=opts["local_memory_bytes"],
        dump_dir=work / "passes_dump" if opts["dump_passes"] else None,
    )
    final, pass_report = manager.run(program)
    _write_atomic(work / "ir" / f"{final.name}.py", program_str(final, f"final IR of {final.name}"))
    t_passes = time.perf_counter() - t0

    jobs = []
    for k in final.kernels:
        src = work / "kernels" / k.core / f"{k.name}.cpp"
        _write_atomic(src, kernel_cpp(k, check_bounds=bool(opts["check_bounds"])))
        jobs.append(toolchain.BuildJob(src, src.with_suffix(".so")))
    orch_src = work / "orchestration" / f"{final.name}.cpp"
    _write_atomic(orch_src, orchestration_cpp(final))
    jobs.append(toolchain.BuildJob(orch_src, orch_src.with_suffix(".so")))
    t1 = time.perf_counter()
    results = toolchain.build(jobs)
    t_build = time.perf_counter() - t1

    write_report(work / "report", final, pass_report, results, opts)
    runtime_config = {
        "platforms": list(knobs.PLATFORMS),
        "local_memory_bytes": opts["local_memory_bytes"],
        "check_bounds": bool(opts["check_bounds"]),
        "target": host_target(),
    }
    data = config_data(final, runtime_config)
    record_state(work, data, ir_state(work, data, final))
    write_build_files(work, data)
    _write_atomic(work / "kernel_config.py", kernel_config_source(data))  # last: marks the build complete
    hits = sum(r.cache_hit for r in results)
    log.debug(
        "[compile] %s: %d kernels, passes %.2fs, g++ %.2fs (%d of %d from cache) -> %s",
        final.name,
        len(final.kernels),
        t_passes,
        t_build,
        hits,
        len(results),
        work,
    )
    compiled = CompiledProgram(work, program=final)
    compiled.timings = {"passes": t_passes, "build": t_build}
    return compiled


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    name: str
    direction: str  # in | out | inout | scalar
    shape: tuple[int, ...] | None
    dtype: dt.DType

    def describe(self) -> str:
        if self.shape is None:
            return f"scalar {self.dtype.name}"
        return f"{self.direction} tensor {list(self.shape)} {self.dtype.name}"


@dataclass
class RunInfo:
    platform: str
    wall_s: float
    num_tasks: int
    nan: Failure | None = None  # nan_check: the NaN/Inf report, None if every output was finite


def host_target() -> dict[str, Any]:
    """What the sim binaries are compiled for (``-march=native``): the machine and its CPU flags."""
    import platform

    from tilescope.toolchain import cache

    return {"arch": platform.machine(), "cpu_flags": cache.cpu_features().split()}


def check_target(work_dir: Path, recorded: dict[str, Any] | None, platform: str) -> None:
    """Refuse to run a build on a platform or CPU it was not compiled for, saying what to do."""
    if recorded is None:
        return
    here = host_target()
    if recorded.get("arch") != here["arch"]:
        raise knobs.ConfigError(
            f"{work_dir} was compiled for {recorded.get('arch')} but this machine is {here['arch']}: its binaries "
            f"cannot run here; compile the program again, or run it with platform='interp'"
        )
    missing = sorted(set(recorded.get("cpu_flags", ())) - set(here["cpu_flags"]))
    if missing and platform == "sim":
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise knobs.ConfigError(
            f"{work_dir} was compiled (with -march=native) on a CPU with {shown}, which this CPU lacks: its "
            "kernels may crash with SIGILL here; compile the program again on this machine, or run it with "
            "platform='interp'"
        )


# runtime_cfg keys that only the sim platform implements (a truthy value on interp is an error)
SIM_ONLY = ("isolate", "nan_check", "print_intermediates", "serial", "kernel_filter")


@dataclass
class _Loaded:
    libs: list[ctypes.CDLL] = field(default_factory=list)
    orch: int = 0
    kernels: list[int] = field(default_factory=list)


class CompiledProgram:
    """A build directory, ready to run on ``sim`` (compiled) or ``interp`` (reference)."""

    def __init__(self, work_dir: str | os.PathLike, program: Program | None = None):
        self.work_dir = Path(work_dir)
        self.config = _load_config(self.work_dir)
        self.name: str = self.config["PROGRAM"]
        self.args = [
            ArgSpec(
                a["name"],
                a["direction"],
                None if a["shape"] is None else tuple(a["shape"]),
                dt.by_name(a["dtype"]),
            )
            for a in self.config["ARGS"]
        ]
        self.kernels: list[dict] = self.config["KERNELS"]
        self._program = program
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()
        self.timings: dict[str, float] = {}

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> CompiledProgram:
        """Load a build directory written by ``compile``, first rebuilding only what was edited
        in it by hand (C++ sources, or the IR dump ``ir/<program>.py``)."""
        config = _load_config(Path(path))
        refresh(Path(path), config)
        return cls(path)

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.name} at {self.work_dir}>"

    # -- arguments -----------------------------------------------------------------------------

    def check_args(self, args: tuple | list) -> None:
        """Raise ArgumentError listing every argument that does not match the program."""
        import torch

        problems = []
        if len(args) != len(self.args):
            names = ", ".join(a.name for a in self.args)
            raise ArgumentError(f"{self.name}({names}) takes {len(self.args)} arguments, got {len(args)}")
        for spec, a in zip(self.args, args):
            where = f"argument {spec.name!r}"
            if spec.shape is None:
                ok = isinstance(a, int | float | bool) if spec.dtype.is_float else isinstance(a, int | bool)
                if torch.is_tensor(a) and a.dim() == 0:
                    ok = True
                if not ok:
                    problems.append(
                        f"{where}: expected a Python number ({spec.describe()}), got {type(a).__name__}"
                    )
                continue
            if not torch.is_tensor(a):
                problems.append(
                    f"{where}: expected a torch.Tensor ({spec.describe()}), got {type(a).__name__}"
                )
                continue
            got = []
            if tuple(a.shape) != spec.shape:
                got.append(f"shape {list(a.shape)} (expected {list(spec.shape)})")
            if a.dtype != spec.dtype.torch:
                got.append(f"dtype {a.dtype} (expected {spec.dtype.torch})")
            if a.device.type != "cpu":
                got.append(f"device {a.device} (expected cpu: move it with .cpu())")
            if not a.is_contiguous():
                got.append("a non-contiguous tensor (expected contiguous: pass .contiguous())")
            if got:
                problems.append(f"{where}: " + "; ".join(got))
        if problems:
            raise ArgumentError(
                f"{len(problems)} argument(s) of {self.name} do not match the compiled program:\n  "
                + "\n  ".join(problems)
            )

    # -- running -------------------------------------------------------------------------------

    def program(self) -> Program:
        """The final IR (read back from ``ir/<program>.py`` for a loaded build)."""
        if self._program is None:
            from tilescope.language.frontend import load_source

            path = self.work_dir / "ir" / f"{self.name}.py"
            if not path.is_file():
                raise TilescopeError(f"{path} is missing: the interp platform needs the build's final IR")
            self._program = load_source(path.read_text(), str(path)).program()
        return self._program

    def _load(self) -> _Loaded:
        with self._lock:
            if self._loaded is None:
                loaded = _Loaded()
                orch = self.config["ORCHESTRATION"]
                lib = _open(self.work_dir / orch["binary"])
                loaded.libs.append(lib)
                loaded.orch = ctypes.cast(getattr(lib, orch["function_name"]), ctypes.c_void_p).value
                for k in self.kernels:
                    klib = _open(self.work_dir / k["binary"])
                    loaded.libs.append(klib)
                    loaded.kernels.append(
                        ctypes.cast(getattr(klib, k["function_name"]), ctypes.c_void_p).value
                    )
                self._loaded = loaded
            return self._loaded

    def run(self, *args: Any, **runtime_cfg: Any) -> RunInfo:
        """Run on ``args`` (outputs are written into the Out/InOut tensors passed in).

        Raises:
            RuntimeFailure: the run failed; ``exc.failure`` (a failures.Failure) names the task,
                kernel and source line, and where the failing task's inputs were saved.
        """
        from tilescope._logging import configure

        opts = knobs.runtime_options(runtime_cfg)
        configure(opts["log_level"])
        self.check_args(args)
        rc = self.config.get("RUNTIME_CONFIG", {})
        if opts["platform"] not in rc.get("platforms", knobs.PLATFORMS):
            raise knobs.ConfigError(
                f"{self.work_dir} was compiled for platform(s) {', '.join(rc['platforms'])}, not "
                f"{opts['platform']!r}: compile it again with this tilescope"
            )
        if opts["platform"] == "interp":
            return self._run_interp(args, opts, runtime_cfg)
        if opts["float64"]:
            raise knobs.ConfigError("runtime_cfg['float64'] applies to the interp platform only")
        check_target(self.work_dir, rc.get("target"), opts["platform"])
        if opts["isolate"]:
            from tilescope.isolate import run_isolated

            return run_isolated(self, args, opts)
        dfx = self.work_dir / DFX_DIR
        dfx.mkdir(exist_ok=True)
        return self._execute(args, opts, crash_report=dfx / "crash_report.txt")

    __call__ = run

    def _run_interp(self, args: tuple, opts: dict[str, Any], given: dict[str, Any]) -> RunInfo:
        sim_only = [k for k in SIM_ONLY if given.get(k)]
        if opts["enable_dump_tensor"]:
            sim_only.insert(0, "enable_dump_tensor")
        if sim_only:
            raise knobs.ConfigError(
                f"runtime_cfg {', '.join(repr(k) for k in sim_only)}: implemented on the sim platform only; "
                "run with platform='sim'"
            )
        from tilescope.runtime.interp import run_program

        t0 = time.perf_counter()
        n = run_program(self.program(), list(args), float64=bool(opts["float64"]))
        return RunInfo("interp", time.perf_counter() - t0, n)

    def _kernel_filter(self, opts: dict[str, Any]) -> tuple[bool, ...] | None:
        wanted = knobs.kernel_names(opts["kernel_filter"])
        if wanted is None:
            return None
        names = [k["name"] for k in self.kernels]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise knobs.ConfigError(
                f"runtime_cfg['kernel_filter']: {', '.join(map(repr, unknown))} is not a kernel of {self.name}; "
                f"its kernels: {', '.join(names)}"
            )
        return tuple(n in wanted for n in names)

    def _execute(self, args: tuple, opts: dict[str, Any], crash_report: Path | None = None) -> RunInfo:
        """One in-process sim run with validated ``opts`` (``isolate`` is not looked at).

        Raises:
            RuntimeFailure: with ``.failure`` (a Failure) and ``.report`` (the RunReport).
        """
        from tilescope._logging import level_number
        from tilescope.diagnose import failure_from_report, nan_failure
        from tilescope.runtime import core

        printing = opts["print_intermediates"]
        dump_level = opts["enable_dump_tensor"]
        if printing in (1, 2):
            if dump_level not in (0, 2):
                raise knobs.ConfigError(
                    f"print_intermediates={printing} records every task's arguments (a level-2 dump); it "
                    f"cannot be combined with enable_dump_tensor={dump_level}: drop one of them"
                )
            dump_level = 2
        checks = core.RunChecks(
            task_timeout_s=float(opts["task_timeout_s"]),
            serial=bool(opts["serial"]),
            nan_check=bool(opts["nan_check"]),
            trace_tasks=printing == 3,
            kernel_filter=self._kernel_filter(opts),
            crash_report_path=str(crash_report) if crash_report is not None else None,
        )
        loaded = self._load()
        cargs = [
            core.scalar_arg(a, spec.dtype) if spec.shape is None else core.tensor_arg(a, spec.direction)
            for spec, a in zip(self.args, args)
        ]
        dfx = bool(opts["enable_dep_gen"] or opts["enable_trace"] or opts["enable_dump_tensor"])
        try:
            report = core.run_graph(
                loaded.orch,
                loaded.kernels,
                [k["name"] for k in self.kernels],
                cargs,
                num_workers=opts["num_workers"],
                record_edges=bool(opts["enable_dep_gen"]),
                record_tasks=bool(opts["enable_dep_gen"] or opts["enable_trace"]),
                dump_level=dump_level,
                checks=checks,
            )
        except RuntimeFailure as e:
            report = getattr(e, "report", None)
            if report is None:
                raise
            failure = failure_from_report(self, report)
            log.error("[runtime] %s failed: %s", self.name, failure.message)
            if dfx:
                write_dfx(self, report, opts, run_failed=True)  # what was recorded up to the failure
            if printing in (1, 2) and report.dump is not None:
                write_intermediates(self, report.dump, printing)
            err = RuntimeFailure(failure.render())
            err.failure = failure  # type: ignore[attr-defined]
            err.report = report  # type: ignore[attr-defined]
            raise err from None
        log.log(
            level_number("v3"),
            "[runtime] %s: %d tasks on %d workers, %d dependencies, %.3f ms",
            self.name,
            report.num_tasks,
            report.num_workers,
            report.num_dependencies,
            report.wall_s * 1e3,
        )
        if dfx:
            write_dfx(self, report, opts)
        if printing in (1, 2) and report.dump is not None:
            write_intermediates(self, report.dump, printing)
        nan = nan_failure(self, report) if checks.nan_check else None
        if nan is not None:
            log.error("[nan_check] %s:\n%s", self.name, nan.render())
        return RunInfo("sim", report.wall_s, report.num_tasks, nan)


def _open(path: Path) -> ctypes.CDLL:
    """Load a shared object through a copy named by its content.

    NOTE: the dynamic loader keeps a library loaded by path, so a binary rebuilt in place would
    not be picked up again in this process; a content-named copy always is.
    """
    if not path.is_file():
        raise TilescopeError(
            f"{path} is missing: the build is incomplete; recompile it (run without --runtime-dir)"
        )
    from tilescope.buildstate import sha256_file
    from tilescope.toolchain import cache

    loaded = cache.cache_dir() / "loaded" / f"{sha256_file(path)}{path.suffix}"
    if not loaded.is_file():
        cache.atomic_copy(path, loaded)
    return ctypes.CDLL(str(loaded), mode=os.RTLD_LOCAL | os.RTLD_NOW)


def _load_config(work: Path) -> dict[str, Any]:
    path = work / "kernel_config.py"
    if not work.is_dir():
        raise TilescopeError(f"build directory {work} does not exist")
    if not path.is_file():
        raise TilescopeError(
            f"{work} has no kernel_config.py: it is not a tilescope build directory, or its compile was "
            "interrupted; compile again"
        )
    try:
        cfg = runpy.run_path(str(path))
    except Exception as e:  # noqa: BLE001 - a corrupt config is reported, whatever broke
        raise TilescopeError(f"{path} cannot be loaded: {type(e).__name__}: {e}") from None
    fmt = cfg.get("BUILD_FORMAT")
    if fmt != BUILD_FORMAT:
        raise TilescopeError(
            f"{work} was written by tilescope {cfg.get('TILESCOPE_VERSION', '?')} (build format {fmt}); this "
            f"version reads format {BUILD_FORMAT}: compile the program again"
        )
    missing = [k for k in ("PROGRAM", "ORCHESTRATION", "KERNELS", "ARGS") if k not in cfg]
    if missing:
        raise TilescopeError(f"{path} lacks {', '.join(missing)}: compile the program again")
    return cfg


__all__ = ["CompiledProgram", "RunInfo", "compile_program"]
