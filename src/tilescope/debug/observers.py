"""Run observers: every instrument of a sim run, one object each, keyed by its user-facing knob.

An observer says what the runtime core must record for it (``Recording``) and, once the run
is over, turns the records into its output (``finish``). ``launch`` builds the list from the
run's options with ``observers_for`` and calls each observer once, on success and on failure
alike, so an instrument has exactly one name through every layer:

| knob (``runtime_cfg``)  | CLI flag                 | output                                          |
|-------------------------|--------------------------|-------------------------------------------------|
| ``enable_dep_gen``      | ``--enable-dep-gen``     | ``dfx_outputs/deps.json`` + ``deps_graph.html`` |
| ``enable_trace``        | ``--trace``              | ``dfx_outputs/trace.json``                      |
| ``enable_pmu``          | ``--enable-pmu``         | ``dfx_outputs/pmu.csv`` (and ``trace.json``)    |
| ``enable_dump_tensor``  | ``--dump-tensor [N]``    | ``dfx_outputs/tensor_dump/``                    |
| ``print_intermediates`` | ``--print-intermediates``| ``dfx_outputs/intermediates/`` or stdout lines  |
| ``nan_check``           | ``--nan-check``          | a ``nan`` Failure on the run's result           |
| ``probes``              | ``--probes``             | probe records in ``dfx_outputs/tensor_dump/``   |

Invariants:
- An observer that is off is not in the list: it costs nothing.
- Each observer's output is written even if another one fails. After a failed run a writing
  error is only logged, so it never hides the run's own error; otherwise it raises.
- Files are replaced atomically (``build.paths``), so a reader never sees half a file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from tilescope.build.lock import outputs_lock
from tilescope.build.manifest import Build
from tilescope.build.paths import dfx_dir, os_problem
from tilescope.debug.deps_json import write_deps
from tilescope.debug.diagnose import nan_failure
from tilescope.debug.intermediates import write_intermediates
from tilescope.debug.pmu_csv import write_pmu
from tilescope.debug.tensor_dump import write_tensor_dump
from tilescope.debug.trace_json import write_trace
from tilescope.errors import TilescopeError
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import NO_RECORDING, Recording, RunConfig

log = logging.getLogger("tilescope")


class RunObserver(Protocol):
    """One instrument of a sim run."""

    knob: str  # the runtime_cfg key that turns it on
    what: str  # what it writes, for messages

    def recording(self) -> Recording:
        """What the core must record for this observer."""
        ...

    def finish(self, build: Build, report: RunReport, failed: bool) -> Any:
        """Write the output from the run's records (as far as a failed run got); returns what it
        made (paths, or a Failure)."""
        ...


class DepsObserver:
    """``enable_dep_gen``: the dependency graph, ``deps.json`` and ``deps_graph.html``."""

    knob, what = "enable_dep_gen", "dependency graph"

    def recording(self) -> Recording:
        """Every edge and task record."""
        return Recording(record_edges=True, record_task_times=True)

    def finish(self, build: Build, report: RunReport, failed: bool) -> list[Path]:
        """Write ``dfx_outputs/deps.json`` and ``deps_graph.html``; returns both paths."""
        return write_deps(dfx_dir(build.work_dir), build, report)


class TraceObserver:
    """``enable_trace``: a timeline of the run's tasks, ``trace.json``."""

    knob, what = "enable_trace", "trace"

    def recording(self) -> Recording:
        """The task records (workers and times)."""
        return Recording(record_task_times=True)

    def finish(self, build: Build, report: RunReport, failed: bool) -> list[Path]:
        """Write ``dfx_outputs/trace.json``; returns its path."""
        return write_trace(dfx_dir(build.work_dir), build, report)


class PmuObserver:
    """``enable_pmu``: every task's counters, ``pmu.csv``; the trace (which carries them on its
    task slices) is written by the TraceObserver that ``enable_pmu`` turns on too."""

    knob, what = "enable_pmu", "per-task counters"

    def recording(self) -> Recording:
        """The counters, the task records (kernels, names) and the task arguments (bytes moved)."""
        return Recording(pmu=True, record_task_times=True, record_edges=True)

    def finish(self, build: Build, report: RunReport, failed: bool) -> list[Path]:
        """Write ``dfx_outputs/pmu.csv``; returns its path."""
        return write_pmu(dfx_dir(build.work_dir), build, report)


class TensorDumpObserver:
    """``enable_dump_tensor``: the tensor dump at ``level``, under ``dfx_outputs/tensor_dump/``;
    with ``probes`` (the ``probes`` knob), the kernels' probe tiles in it too (level 0: only them)."""

    what = "tensor dump"

    def __init__(self, level: int, probes: bool = False) -> None:
        self.level = level
        self.probes = probes
        self.knob = "enable_dump_tensor" if level else "probes"

    def recording(self) -> Recording:
        """A tensor dump at this observer's level, with the probes if they are on."""
        return Recording(dump_level=self.level, probes=self.probes)

    def finish(self, build: Build, report: RunReport, failed: bool) -> list[Path]:
        """Write the dump's manifest and payload; returns their paths, none when nothing was dumped."""
        if report.dump is None:
            return []
        return write_tensor_dump(dfx_dir(build.work_dir), build, report)


class IntermediatesObserver:
    """``print_intermediates``: 1 saves every task's arguments as ``.pt``, 2 prints their
    statistics (both from a level-2 dump), 3 prints a line as each task starts and finishes."""

    knob, what = "print_intermediates", "intermediate values"

    def __init__(self, level: int) -> None:
        self.level = level

    def recording(self) -> Recording:
        """A level-2 dump for levels 1 and 2; for level 3, the core's per-task start/finish lines."""
        return Recording(print_intermediates=self.level, dump_level=0 if self.level == 3 else 2)

    def finish(self, build: Build, report: RunReport, failed: bool) -> list[Path]:
        """Save (level 1) or print (level 2) every dumped argument; returns the saved directory, if any."""
        if self.level == 3 or report.dump is None:
            return []
        saved = write_intermediates(build, report, self.level)
        return [saved] if saved is not None else []


class NanCheckObserver:
    """``nan_check``: a Failure naming the tasks whose outputs hold NaN/Inf."""

    knob, what = "nan_check", "NaN/Inf report"

    def recording(self) -> Recording:
        """The core's NaN/Inf scan of every task's outputs."""
        return Recording(nan_check=True)

    def finish(self, build: Build, report: RunReport, failed: bool) -> Any:
        """The NaN/Inf Failure (also logged), or None when the outputs are finite or the run failed."""
        if failed:  # the run's own failure report comes first; its saved task is the failing one
            return None
        nan = nan_failure(build, report)
        if nan is not None:
            log.error("[nan_check] %s:\n%s", build.name, nan.render())
        return nan


def observers_for(config: RunConfig) -> list[RunObserver]:
    """The observers a run's options turn on, in the order they finish."""
    observers: list[RunObserver] = []
    if config.enable_dep_gen:
        observers.append(DepsObserver())
    if config.enable_trace or config.enable_pmu:
        observers.append(TraceObserver())
    if config.enable_pmu:
        observers.append(PmuObserver())
    if config.enable_dump_tensor or config.probes:
        observers.append(TensorDumpObserver(config.enable_dump_tensor, config.probes))
    if config.print_intermediates:
        observers.append(IntermediatesObserver(config.print_intermediates))
    if config.nan_check:
        observers.append(NanCheckObserver())
    return observers


def recording_of(observers: list[RunObserver]) -> Recording:
    """What the core must record for all of ``observers``."""
    recording = NO_RECORDING
    for o in observers:
        recording = recording.merge(o.recording())
    return recording


def finish_all(observers: list[RunObserver], build: Build, report: RunReport, failed: bool) -> dict[str, Any]:
    """Finish every observer (each even if another one fails); returns their results by knob.

    Raises:
        TilescopeError: an observer could not write its output and the run itself succeeded.
    """
    results: dict[str, Any] = {}
    problems: list[str] = []
    if not observers:
        return results
    with outputs_lock(build.work_dir):  # the outputs of concurrent runs of the build never mix
        for o in observers:
            try:
                results[o.knob] = made = o.finish(build, report, failed)
            except Exception as e:  # noqa: BLE001 - one broken output must not lose the others
                why = os_problem(e) if isinstance(e, OSError) else f"{type(e).__name__}: {e}"
                problems.append(f"cannot write the {o.what} of {build.name}: {why}")
                continue
            if isinstance(made, list):
                for p in made:
                    log.info("[dfx] wrote %s", p)
    for problem in problems:
        log.error("[dfx] %s", problem)
    if problems and not failed:
        raise TilescopeError("; ".join(problems))
    return results
