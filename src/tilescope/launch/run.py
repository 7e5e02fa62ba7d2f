"""The one run path of a sim build: ``launch``.

``CompiledProgram.run`` (in process), the isolated child (``launch/isolate.py``) and a task
replayed alone (``launch/task.py``) all run through ``launch``: it converts the arguments, asks
the run observers (``debug/observers.py``) what to record, runs the graph on the runtime core,
and then — on success and on failure alike — finishes every observer once. A failed run
becomes a ``RuntimeFailure`` whose ``.failure`` is the report ``debug.diagnose`` words.

Invariants:
- The options are validated (``knobs.runtime_options``) before they get here; ``isolate`` is
  not looked at (the caller decided where to run).
- A whole-program run executes the build's orchestration with its kernel table; a task run
  (``task=i``) executes kernel ``i`` alone through the core's single-task orchestration, on a
  view of the build whose only kernel (func_id 0) is kernel ``i`` and whose arguments are its
  parameters, so every report and observer names things as the user wrote them.
- Libraries are loaded once per ``Binaries`` and kept loaded while it lives.
"""

from __future__ import annotations

import copy
import ctypes
import logging
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope._logging import level_number
from tilescope.build.manifest import Build
from tilescope.debug.diagnose import failure_from_report
from tilescope.debug.failures import Failure
from tilescope.debug.observers import Recording, finish_all, observers_for, recording_of
from tilescope.errors import RunInterrupted, RuntimeFailure
from tilescope.ir.types import Direction
from tilescope.runtime.graph import (
    RunChecks,
    run_graph,
    scalar_arg,
    single_task_orchestration,
    tensor_arg,
    worker_stack_mib,
)
from tilescope.runtime.library import ProbeInstaller, load_entry, probe_sink, sink_installer
from tilescope.runtime.records import RunReport

log = logging.getLogger("tilescope")


@dataclass
class RunInfo:
    """How a run went: where, how long, how many tasks, the NaN/Inf report of ``nan_check``
    (None if it was off or every output was finite) and, for a sim run, the core's records
    (``report``: what the run's observers and ``capture`` asked it to record)."""

    platform: str
    wall_s: float
    num_tasks: int
    nan: Failure | None = None
    report: RunReport | None = None


@dataclass
class Binaries:
    """A build's loaded orchestration and kernels (entry addresses by func_id); the libraries
    stay loaded while this object lives."""

    orchestration: int = 0
    kernels: list[int] = field(default_factory=list)
    libraries: list[ctypes.CDLL] = field(default_factory=list)
    probes: list[ProbeInstaller | None] = field(default_factory=list)  # per kernel: ts_probe_install


_load_lock = threading.Lock()


def load_binaries(build: Build) -> Binaries:
    """Load the build's orchestration and kernel libraries (each through a content-named copy)."""
    with _load_lock:
        loaded = Binaries()
        orch = build.config["ORCHESTRATION"]
        entry = load_entry(build.work_dir / orch["binary"], orch["function_name"])
        loaded.orchestration = entry.address
        loaded.libraries.append(entry.library)
        for k in build.kernels:
            entry = load_entry(build.work_dir / k["binary"], k["function_name"])
            loaded.kernels.append(entry.address)
            loaded.libraries.append(entry.library)
            loaded.probes.append(sink_installer(entry.library))
        return loaded


def task_view(build: Build, kernel_index: int) -> Build:
    """``build`` as a one-kernel program: kernel ``kernel_index`` is func_id 0, and the program's
    arguments are that kernel's parameters."""
    view = copy.copy(build)
    view.kernels = [build.kernels[kernel_index]]
    view.args = build.kernel_params(kernel_index)
    view.name = f"{build.name}.{build.kernels[kernel_index]['name']}"
    return view


def kernel_filter(build: Build, opts: dict[str, Any]) -> tuple[bool, ...] | None:
    """One flag per kernel of ``build`` for ``opts['kernel_filter']`` (None: every kernel).

    Raises:
        ConfigError: a name that is not a kernel of the build (the real ones are listed).
    """
    wanted = knobs.kernel_names(opts["kernel_filter"])
    if wanted is None:
        return None
    names = [k["name"] for k in build.kernels]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise knobs.ConfigError(
            f"runtime_cfg['kernel_filter']: {', '.join(map(repr, unknown))} is not a kernel of {build.name}; "
            f"its kernels: {', '.join(names)}"
        )
    return tuple(n in wanted for n in names)


def launch(
    build: Build,
    binaries: Binaries,
    args: tuple | list,
    opts: dict[str, Any],
    *,
    task: int | None = None,
    crash_report: Path | str | None = None,
    capture: Recording | None = None,
    dump_arena_bytes: int | None = None,
    poison: int | None = None,
    shuffle_seed: int | None = None,
) -> RunInfo:
    """Run ``build`` (or, with ``task``, its kernel ``task`` alone) on ``args`` in this process.

    ``capture`` asks the core for records no observer writes out (the caller reads them from
    ``RunInfo.report``); ``dump_arena_bytes`` is the tensor dump's payload room per worker
    (None: ``runtime.graph.DUMP_ARENA_BYTES``); ``poison`` a byte every intermediate starts filled
    with (None: zeros); ``shuffle_seed`` a randomized schedule (None: the usual one).

    Raises:
        RuntimeFailure: the run failed; ``.failure`` (a Failure) names the task, kernel and
            source line, and ``.report`` holds the run's records.
        ConfigError: options that cannot be combined, or an unknown kernel in ``kernel_filter``.
    """
    if task is None:
        target, orch, kernels = build, binaries.orchestration, binaries.kernels
        installers = binaries.probes
    else:
        target, orch, kernels = task_view(build, task), single_task_orchestration(), [binaries.kernels[task]]
        installers = binaries.probes[task : task + 1]
    observers = observers_for(opts)
    recording = recording_of(observers)
    if capture is not None:
        recording = recording.merge(capture)
    sink = probe_sink() if recording.probes else None
    for install in installers:
        if install is not None:
            install(sink)
    checks = RunChecks(
        task_timeout_s=float(opts["task_timeout_s"]),
        serial=bool(opts["serial"]),
        nan_check=recording.nan_check,
        print_intermediates=recording.print_intermediates,
        kernel_filter=kernel_filter(target, opts),
        crash_report_path=str(crash_report) if crash_report is not None else None,
        worker_stack_mib=worker_stack_mib(int(build.runtime_config.get("local_memory_bytes", 0))),
        dump_arena_bytes=dump_arena_bytes,
        probes=recording.probes,
        poison=poison,
        shuffle_seed=shuffle_seed,
        pmu=recording.pmu,
    )
    cargs = [
        scalar_arg(a, spec.dtype) if spec.direction is Direction.SCALAR else tensor_arg(a, spec.direction)
        for spec, a in zip(target.args, args)
    ]
    try:
        report = run_graph(
            orch,
            kernels,
            [k["name"] for k in target.kernels],
            cargs,
            num_workers=1 if task is not None else opts["num_workers"],
            record_edges=recording.record_edges,
            record_task_times=recording.record_task_times,
            dump_level=recording.dump_level,
            checks=checks,
        )
    except RuntimeFailure as e:
        report = getattr(e, "report", None)
        if report is None:
            raise
        if task is not None:
            report.saved = None  # NOTE: a task run alone was saved already: reported, not saved again
        failure = failure_from_report(target, report)
        # NOTE: the caller reports the failure (it is the message of the error raised below);
        # logging it as an error too printed every failure twice.
        log.log(level_number("v3"), "[runtime] %s failed: %s", target.name, failure.message)
        finish_all(observers, target, report, failed=True)  # what was recorded up to the failure
        if failure.kind == "interrupted":  # Ctrl-C: the report, then stop as Python would
            print("[INTERRUPTED] " + failure.render().removeprefix("[interrupted] "), file=sys.stderr, flush=True)
            stop = RunInterrupted(failure.message)
            stop.failure = failure  # type: ignore[attr-defined]
            raise stop from None
        err = RuntimeFailure(failure.render())
        err.failure = failure  # type: ignore[attr-defined]
        err.report = report  # type: ignore[attr-defined]
        raise err from None
    log.log(
        level_number("v3"),
        "[runtime] %s: %d tasks on %d workers, %d dependencies, %.3f ms",
        target.name,
        report.num_tasks,
        report.num_workers,
        report.num_dependencies,
        report.wall_s * 1e3,
    )
    if task is not None:
        report.saved = None
    results = finish_all(observers, target, report, failed=False)
    return RunInfo("sim", report.wall_s, report.num_tasks, results.get("nan_check"), report)
