"""Compiling a Program into a build directory: the compile driver.

Invariants:
- A build directory is created exclusively (``os.mkdir``), so two compiles started in the
  same second never share one; ``kernel_config.py`` is written last and atomically, so a
  directory without it is an interrupted build. The compile holds the build's lock
  (``build.lock``) from its creation, so ``tilescope clean`` never removes a build being made.
- The order is fixed: passes (each verified, optionally dumped) -> the final IR as DSL source
  (``ir/<program>.py``) -> one C++ file per kernel and one for the orchestration -> g++ (in
  parallel, cached by content; skipped by a compile for the interp platform, whose binaries are
  built by the first sim run) -> report -> build state -> ``debug/run.py`` and
  ``scene_test.py`` -> ``kernel_config.py``.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope.build.build_report import write_report
from tilescope.build.lock import BuildLock, hold_build
from tilescope.build.paths import (
    BUILD_BASE_FIX,
    DEBUG_RUN,
    IR_DIR,
    KERNEL_CONFIG,
    KERNELS_DIR,
    ORCHESTRATION_DIR,
    PASSES_DUMP_DIR,
    REPORT_DIR,
    SCENE_TEST,
    atomic_write,
    inside,
    new_build_dir,
    write_problem,
)
from tilescope.build.state import ir_state, record_state, sha256_text
from tilescope.build.target import host_target
from tilescope.codegen.build_files import run_py, scene_test
from tilescope.codegen.kernel_config import config_data, kernel_config_source
from tilescope.codegen.kernel_cpp import kernel_cpp
from tilescope.codegen.kernel_fusion import streamed_outputs
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.errors import TilescopeError, ToolchainError, VerifyError, render_at
from tilescope.ir.analysis import kernel_core
from tilescope.ir.nodes import Program
from tilescope.ir.printer import program_str
from tilescope.ir.traverse import recursion_room
from tilescope.ir.unwritten import Unwritten, unwritten
from tilescope.passes.manager import PassManager
from tilescope.passes.pipeline import DEFAULT_PIPELINE
from tilescope.toolchain import compiler as toolchain
from tilescope.toolchain.cache import cache_dir

log = logging.getLogger("tilescope")


@dataclass(frozen=True)
class Compiled:
    """A finished compile: the new build directory, the final IR, and the seconds spent in the
    passes and in g++ (``{"passes": ..., "build": ...}``)."""

    work_dir: Path
    program: Program
    timings: dict[str, float]
    lock: BuildLock | None = None  # held from the directory's creation; the caller closes it


@recursion_room()
def compile_to_dir(
    program: Program, compile_cfg: dict[str, Any] | None = None, *, build_cpp: bool = True
) -> Compiled:
    """Front-end IR -> passes -> C++ -> g++ -> a new build directory (see the module's order).

    ``build_cpp=False`` (a build only the interp platform will run) writes the C++ but runs no g++.

    Raises:
        TilescopeError: the build directory cannot be written (read only, full); the partial
            directory this compile made is removed.
    """
    opts = knobs.compile_options(compile_cfg)
    work = new_build_dir(Path(opts["build_dir"]), program.name)
    held = None
    try:
        held = hold_build(work)  # `tilescope clean` leaves a build being compiled alone
        return _compile_into(work, program, opts, held, build_cpp)
    except VerifyError:
        # NOTE: a program the passes or the strict coverage check refused leaves no half build behind
        # (unless its passes were dumped: those dumps are what show the failing pass)
        if not opts["dump_passes"]:
            if held is not None:
                held.close()
            shutil.rmtree(work, ignore_errors=True)
        raise
    except (OSError, ToolchainError) as e:
        cause = e if isinstance(e, OSError) else e.__cause__
        if not isinstance(cause, OSError) or Path(cause.filename or work).is_relative_to(cache_dir()):
            raise  # a compile error: the build directory is kept, it shows the failing C++
        if held is not None:
            held.close()
        shutil.rmtree(work, ignore_errors=True)  # made by this compile moments ago, and half written
        raise TilescopeError(
            f"cannot write {cause.filename or work}: {write_problem(cause, work)}; the partial build directory "
            f"{work} was removed. Free space there, or {BUILD_BASE_FIX}, and compile again"
        ) from None


def _coverage(program: Program, strict: bool) -> list[Unwritten]:
    """The kernels' Out params that their stores cannot write whole: a warning each, or (strict)
    a VerifyError naming the first."""
    gaps = unwritten(program)
    if gaps and strict:
        first = gaps[0]
        more = f"\n  ({len(gaps) - 1} more: see the build's report/summary.txt)" if len(gaps) > 1 else ""
        raise VerifyError(first.message() + more, first.loc, first.hint())
    for g in gaps:
        hint = f"{g.hint()}; compile_cfg strict=True (--strict) makes this an error"
        log.warning("[compile] warning: %s", render_at(g.message(), g.loc, hint))
    return gaps


def _compile_into(
    work: Path, program: Program, opts: dict[str, Any], held: BuildLock | None, build_cpp: bool
) -> Compiled:
    t0 = time.perf_counter()
    manager = PassManager(
        DEFAULT_PIPELINE,
        verify=bool(opts["verify"]),
        local_memory_bytes=opts["local_memory_bytes"],
        dump_dir=inside(work, PASSES_DUMP_DIR) if opts["dump_passes"] else None,
    )
    final, pass_report = manager.run(program)
    gaps = _coverage(final, bool(opts["strict"]))
    atomic_write(inside(work, IR_DIR, f"{final.name}.py"), program_str(final, f"final IR of {final.name}"))
    t_passes = time.perf_counter() - t0

    jobs = []
    generated: dict[str, str] = {}  # the sha256 of the text codegen wrote, by path in the build
    streamed = streamed_outputs(final)
    for k in final.kernels:
        src = inside(work, KERNELS_DIR, kernel_core(k), f"{k.name}.cpp")
        text = kernel_cpp(
            k,
            check_bounds=bool(opts["check_bounds"]),
            streamed=streamed.get(k.name, frozenset()),
            bf16_dot=opts["bf16_matmul"] == "dot",
        )
        atomic_write(src, text)
        generated[src.relative_to(work).as_posix()] = sha256_text(text)
        jobs.append(toolchain.BuildJob(src, src.with_suffix(".so")))
    orch_src = inside(work, ORCHESTRATION_DIR, f"{final.name}.cpp")
    text = orchestration_cpp(final)
    atomic_write(orch_src, text)
    generated[orch_src.relative_to(work).as_posix()] = sha256_text(text)
    jobs.append(toolchain.BuildJob(orch_src, orch_src.with_suffix(".so")))
    t1 = time.perf_counter()
    results = toolchain.build(jobs) if build_cpp else []
    t_build = time.perf_counter() - t1

    write_report(inside(work, REPORT_DIR), final, pass_report, results, opts, gaps)
    runtime_config = {
        "platforms": list(knobs.PLATFORMS),
        "local_memory_bytes": opts["local_memory_bytes"],
        "check_bounds": bool(opts["check_bounds"]),
        "bf16_matmul": opts["bf16_matmul"],
        "target": host_target(),
    }
    data = config_data(final, runtime_config)
    generated_with = {
        "check_bounds": bool(opts["check_bounds"]),
        "verify": bool(opts["verify"]),
        "bf16_matmul": opts["bf16_matmul"],
    }
    record_state(work, data, ir_state(work, data, final), generated, generated_with)
    atomic_write(inside(work, DEBUG_RUN), run_py(data))
    atomic_write(inside(work, SCENE_TEST), scene_test(data))
    atomic_write(inside(work, KERNEL_CONFIG), kernel_config_source(data))  # last: marks the build complete
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
    return Compiled(work, final, {"passes": t_passes, "build": t_build}, held)
