"""The one run path of a sim build: ``launch``.

``CompiledProgram.run`` (in process), the isolated child (``launch/isolate.py``) and a task
replayed alone (``launch/task.py``) all run through ``launch``: it converts the arguments, asks
the run observers (``debug/observers.py``) what to record, runs the graph on the runtime core,
and then — on success and on failure alike — finishes every observer once. A failed run
becomes a ``RuntimeFailure`` whose ``.failure`` is the report ``debug.diagnose`` words.

Invariants:
- The options arrive validated, as a ``RunConfig`` (``RunConfig.from_keywords``), and are not
  checked again; ``isolate`` is not looked at (the caller decided where to run).
- A whole-program run executes the build's orchestration with its kernel table; a task run
  (``kernel_index=i``) executes kernel ``i`` alone through the core's single-task orchestration, on a
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

from tilescope._logging import level_number
from tilescope.build.manifest import Build
from tilescope.build.state import stores_confined
from tilescope.debug.diagnose import failure_from_report
from tilescope.debug.failures import Failure
from tilescope.debug.observers import finish_all, observers_for, recording_of
from tilescope.errors import ConfigError, RunInterrupted, RuntimeFailure
from tilescope.launch.inputs_kept import KeptInputs
from tilescope.launch.launch_plan import LaunchPlans, args_key
from tilescope.launch.weights import WeightWatch, forget_functions
from tilescope.runtime.graph import run_graph, single_task_orchestration
from tilescope.runtime.host_memory import check_local_memory, run_workers, worker_stack_mib
from tilescope.runtime.library import ProbeInstaller, load_entry, probe_sink, sink_installer
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import Recording, RunConfig

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
    # every library is the one built from the C++ codegen wrote for a verified program, with bounds
    # checks: a store stays inside the tensor its kernel was given, so a run can change only an
    # input sharing bytes with an output (KeptInputs keeps only those)
    stores_confined: bool = False
    plans: LaunchPlans = field(default_factory=LaunchPlans)  # the core's arguments, per set of arguments
    names: list[str] = field(default_factory=list)  # the kernels' names, by func_id
    # NOTE: whether a probe sink may be installed in a kernel: a run without probes sets none again
    # only then (a call into every kernel library, on every run). Kept per Binaries, while a sink is
    # the library's: another CompiledProgram of the same library may leave one installed, which a
    # run without probes then calls and which records nothing (no probe scope on its threads)
    sink_installed: bool = True
    # the ts.Weight arguments of the last run, per set of arguments (None: the whole program; i:
    # kernel i alone), whose change drops the packed weight tiles of the libraries (launch/weights.py)
    weights: dict[int | None, WeightWatch] = field(default_factory=dict)

    def weight_watch(self, view: int | None, specs: list) -> WeightWatch:
        """The WeightWatch of a whole-program run (None) or of kernel ``view`` run alone, whose
        arguments are ``specs``."""
        watch = self.weights.get(view)
        if watch is None:
            watch = self.weights[view] = WeightWatch(specs, forget_functions(self.libraries, "ts_weights_changed_in"))
        return watch


_load_lock = threading.Lock()


def load_binaries(build: Build) -> Binaries:
    """Load the build's orchestration and kernel libraries (each through a content-named copy)."""
    with _load_lock:
        loaded = Binaries()
        orch = build.config["ORCHESTRATION"]
        entry = load_entry(build.work_dir / orch["binary"], orch["function_name"])
        loaded.orchestration = entry.address
        loaded.libraries.append(entry.library)
        digests = {orch["binary"]: entry.sha256}
        for k in build.kernels:
            entry = load_entry(build.work_dir / k["binary"], k["function_name"])
            loaded.kernels.append(entry.address)
            loaded.libraries.append(entry.library)
            loaded.probes.append(sink_installer(entry.library))
            loaded.names.append(k["name"])
            digests[k["binary"]] = entry.sha256
        loaded.stores_confined = stores_confined(build.work_dir, build.config, digests)
        return loaded


def task_view(build: Build, kernel_index: int) -> Build:
    """``build`` as a one-kernel program: kernel ``kernel_index`` is func_id 0, and the program's
    arguments are that kernel's parameters."""
    view = copy.copy(build)
    view.kernels = [build.kernels[kernel_index]]
    view.args = build.kernel_params(kernel_index)
    view.name = f"{build.name}.{build.kernels[kernel_index]['name']}"
    return view


def kernel_filter(build: Build, config: RunConfig) -> tuple[bool, ...] | None:
    """One flag per kernel of ``build`` for ``config.kernel_filter`` (None: every kernel).

    Raises:
        ConfigError: a name that is not a kernel of the build (the real ones are listed).
    """
    if config.kernel_filter is None:
        return None
    names = [k["name"] for k in build.kernels]
    unknown = [n for n in config.kernel_filter if n not in names]
    if unknown:
        raise ConfigError(
            f"runtime_cfg['kernel_filter']: {', '.join(map(repr, unknown))} is not a kernel of {build.name}; "
            f"its kernels: {', '.join(names)}"
        )
    return tuple(n in config.kernel_filter for n in names)


def launch(
    build: Build,
    binaries: Binaries,
    args: tuple | list,
    config: RunConfig,
    *,
    kernel_index: int | None = None,
    capture: Recording | None = None,
    key: tuple | None = None,
) -> RunInfo:
    """Run ``build`` (or, with ``kernel_index``, that kernel alone, as one task on one worker) on
    ``args`` in this process, with the validated options ``config``.

    ``capture`` asks the core for records no observer writes out (the caller reads them from
    ``RunInfo.report``). ``key`` is ``launch_plan.args_key(build.args, args)`` when the caller has it
    (a whole-program run); the run's descriptors are made once per key (``Binaries.plans``).

    Raises:
        RuntimeFailure: the run failed; ``.failure`` (a Failure) names the task, kernel and
            source line, and ``.report`` holds the run's records.
        ConfigError: recordings that cannot be combined, an unknown kernel in ``kernel_filter``, or
            workers whose stacks for the build's local memory this machine cannot give.
    """
    if kernel_index is None:
        target, orch, kernels = build, binaries.orchestration, binaries.kernels
        installers = binaries.probes
        names = binaries.names if len(binaries.names) == len(kernels) else [k["name"] for k in build.kernels]
    else:
        target, orch = task_view(build, kernel_index), single_task_orchestration()
        kernels, installers = [binaries.kernels[kernel_index]], binaries.probes[kernel_index : kernel_index + 1]
        names = [target.kernels[0]["name"]]
    observers = observers_for(config)
    recording = recording_of(observers)
    if capture is not None:
        recording = recording.merge(capture)
    sink = probe_sink() if recording.probes else None
    if sink is not None or binaries.sink_installed:
        for install in installers:
            if install is not None:
                install(sink)
        binaries.sink_installed = sink is not None or kernel_index is not None
    local_memory = int(build.runtime_config.get("local_memory_bytes", 0))
    check_local_memory(local_memory, 1 if kernel_index is not None else run_workers(config), build.name)
    if key is None or kernel_index is not None:
        key = args_key(target.args, args)
    plan = binaries.plans.plan(target.args, args, key, confined=binaries.stores_confined, view=kernel_index)
    kept = KeptInputs(target.args, args, indices=plan.kept) if plan.kept else None
    watch = binaries.weight_watch(kernel_index, target.args)
    watch.before_run(args)
    try:
        try:
            report = run_graph(
                orch,
                kernels,
                names,
                plan.args,
                config if kernel_index is None else config.replace(num_workers=1),
                recording,
                kernel_filter=kernel_filter(target, config),
                worker_stack_mib=worker_stack_mib(local_memory),
            )
        finally:
            watch.written(args)  # what it wrote, whether it finished or not
    except RuntimeFailure as e:
        report = getattr(e, "report", None)
        if report is None:
            raise
        if kernel_index is not None:
            report.saved = None  # NOTE: a task run alone was saved already: reported, not saved again
        failure = failure_from_report(target, report)
        # NOTE: the caller reports the failure (it is the message of the error raised below);
        # logging it as an error too printed every failure twice.
        log.log(_V3, "[runtime] %s failed: %s", target.name, failure.message)
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
    if log.isEnabledFor(_V3):
        log.log(
            _V3,
            "[runtime] %s: %d tasks on %d workers, %d dependencies, %.3f ms",
            target.name,
            report.num_tasks,
            report.num_workers,
            report.num_dependencies,
            report.wall_s * 1e3,
        )
    if kernel_index is not None:
        report.saved = None
    nan = finish_all(observers, target, report, failed=False).get("nan_check") if observers else None
    if kept is not None:
        kept.check(target.name, build.work_dir)
    return RunInfo("sim", report.wall_s, report.num_tasks, nan, report)


_V3 = level_number("v3")
