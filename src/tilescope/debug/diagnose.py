"""From a run's records to a Failure a person can act on.

``failure_from_report`` words how a sim run failed (an orchestration error, a deadlock with the
blocked tasks, what they wait for and the cycle, a timeout with the stopped code's C++ and DSL
line, a kernel that threw) and saves the inputs of the task worth replaying alone.
``nan_failure`` words a NaN/Inf check: every task that made them from finite inputs (the lowest
id first, each one's inputs saved), and the tasks that only passed them on, each pointing at the
task upstream. A replay command names a saved directory that got a ``_<n>`` suffix with --from.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from tilescope.build.manifest import Build
from tilescope.build.state import hand_edited
from tilescope.debug.deps_json import buffer_names, region_text
from tilescope.debug.failures import Failure, SavedArg, SourceFrame, save_task_inputs
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.symbolize import symbolize
from tilescope.debug.tensor_dump import view_of
from tilescope.ir import dtypes
from tilescope.runtime.records import (
    FailureInfo,
    NanRecord,
    RunReport,
    SavedInputs,
    TaskArgRecord,
    WaitRecord,
)

log = logging.getLogger("tilescope")

_ROLE = {"input": "input", "inout": "inout", "output": "output", "scalar": "scalar"}
MAX_NAN_SAVED = 64  # tasks whose inputs nan_check saves (kMaxNanSaved of the runtime core)


class _Names:
    """Kernel, task and tensor names of one run."""

    def __init__(self, program: Build, report: RunReport) -> None:
        self.program = program
        self.report = report
        self.kernels = [k["name"] for k in program.kernels]
        self.buffers = buffer_names(program, report)
        self.task_names = {t.task_id: t.name for t in report.tasks}
        if report.dump is not None:
            self.task_names.update(report.dump.task_names)

    def kernel(self, func_id: int) -> str:
        return self.kernels[func_id] if 0 <= func_id < len(self.kernels) else f"func_id {func_id}"

    def task(self, task_id: int, func_id: int) -> str:
        kernel = self.kernel(func_id)
        name = self.task_names.get(task_id, "")
        label = f"task {task_id}"
        if name and name != kernel:
            label += f" {name!r}"
        return f"{label} (kernel {kernel})"

    def param(self, func_id: int, arg_index: int) -> str:
        if 0 <= func_id < len(self.kernels):
            params = self.program.kernels[func_id].get("params", [])
            if 0 <= arg_index < len(params):
                return params[arg_index]["name"]
        return f"arg{arg_index}"

    def param_shape(self, func_id: int, arg_index: int) -> list[int] | None:
        if 0 <= func_id < len(self.kernels):
            params = self.program.kernels[func_id].get("params", [])
            if 0 <= arg_index < len(params):
                return params[arg_index]["shape"]
        return None

    def region(self, arg) -> str:
        return region_text(arg, self.buffers)


def failure_from_report(program: Build, report: RunReport) -> Failure:
    """The Failure of a failed sim run (``report.status != 0``); saves the replayable task's inputs."""
    names = _Names(program, report)
    info = report.failure
    kind = info.kind if info is not None else "error"
    task_id = info.task_id if info is not None else -1
    func_id = info.func_id if info is not None else -1
    f = Failure(kind=kind, message=report.error, task_id=task_id, worker=info.worker if info else -1)
    if func_id >= 0:
        f.kernel = names.kernel(func_id)
        f.task_name = names.task_names.get(task_id, "") or f.kernel
    if info is not None:
        f.cause, f.arg, f.op, f.dsl_line = info.cause, info.arg_index, info.op, info.where
        f.tensor = info.tensor or (names.param(func_id, info.arg_index) if info.arg_index >= 0 else "")
    if kind == "deadlock":
        _explain_deadlock(f, names, report.waits)
    elif kind == "timeout":
        _explain_timeout(f, names, info)
    elif kind == "kernel_error":
        _explain_kernel_error(f, names, report)
    elif kind == "guard":
        _explain_guard(f, names, report)
    elif f.cause == "region" and f.op == "call" and f.dsl_line:
        f.details.append(f"the region was given by the call at {f.dsl_line}")
    if report.saved is not None:
        _save(f, program, names, report.saved, why=kind)
    f.locate()
    return f


def _explain_deadlock(f: Failure, names: _Names, waits: list[WaitRecord]) -> None:
    blocked = sorted({w.task for w in waits})
    f.details.append(f"{len(blocked)} blocked task(s) with unmet dependencies; nothing is running or ready")
    func_of = {w.task: w.func_id for w in waits}
    func_of.update({w.pred: w.pred_func_id for w in waits if not w.never_submitted})
    for w in waits:
        f.details.append(f"{names.task(w.task, w.func_id)} waits for {_wait_target(w, names)}")
    cycle = _find_cycle(waits)
    if cycle:
        path = " -> ".join(names.task(t, func_of.get(t, -1)) for t in [*cycle, cycle[0]])
        f.details.append(f"dependency cycle: {path}")
        f.message = f"deadlock: a dependency cycle through {len(cycle)} task(s); " + f.message.removeprefix(
            "deadlock: "
        )
        f.next_steps.append(
            "remove one edge of the cycle (an explicit deps= entry, or the argument behind it)"
        )
    missing = sorted({w.pred for w in waits if w.never_submitted})
    if missing:
        f.next_steps.append(
            f"task(s) {', '.join(map(str, missing))} were never submitted: submit the producer, or drop the "
            "dependency on it"
        )
    f.next_steps.append("see every edge: run again with --enable-dep-gen, then `tilescope deps <build>`")


def _wait_target(w: WaitRecord, names: _Names) -> str:
    if w.never_submitted:
        return f"task {w.pred}, which was never submitted (explicit dep)"
    target = names.task(w.pred, w.pred_func_id)
    if w.source == "explicit":
        return f"{target} (explicit dep)"
    param = names.param(w.func_id, w.arg.arg_index) if w.arg is not None else "?"
    region = names.region(w.arg) if w.arg is not None else "?"
    return f"{target}: {w.kind} on {param} = {region}"


def _find_cycle(waits: list[WaitRecord]) -> list[int]:
    """A cycle among blocked tasks (each waits for the next), or [] if there is none."""
    graph: dict[int, list[int]] = {}
    for w in waits:
        if not w.never_submitted:
            graph.setdefault(w.task, []).append(w.pred)
    state: dict[int, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(graph.get(start, [])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :]
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(graph.get(nxt, []))))
                path.append(nxt)
    return []


def _explain_timeout(f: Failure, names: _Names, info) -> None:
    f.details.append(_charged_time(info))
    f.frames = _symbolize(list(info.frames), names.program)
    where = f.where()
    if where is not None and (where.cpp or where.dsl):
        f.details.append(f"stopped at {where.describe()}")
    if info.task_id < 0:
        f.next_steps.append("the orchestration loops without submitting: check its loop bounds and steps")
    else:
        f.next_steps.append("print tasks as they start and finish: run again with --print-intermediates 3")
    f.next_steps.append("a longer budget: --task-timeout SECONDS (runtime_cfg task_timeout_s)")


def _charged_time(info: FailureInfo) -> str:
    """What the watchdog charged the stopped code against ``task_timeout_s``, and what it did not."""
    if info.cpu_ns < 0:
        return f"charged {info.wall_ns / 1e9:.2f} s of wall time: the thread's CPU time could not be read"
    waiting = max(0, info.wall_ns - info.cpu_ns - info.blocked_ns)
    return (
        f"charged {info.elapsed_ns / 1e9:.2f} s: {info.cpu_ns / 1e9:.2f} s on the CPU + "
        f"{info.blocked_ns / 1e9:.2f} s blocked; not charged: {waiting / 1e9:.2f} s waiting for a core "
        f"(of {info.wall_ns / 1e9:.2f} s wall)"
    )


def _explain_kernel_error(f: Failure, names: _Names, report: RunReport) -> None:
    if f.arg >= 0 and report.saved is not None and report.saved.task_id == f.task_id:
        index = f.arg
        for r in report.saved.records:
            if r.arg_index == index and r.kind == "tensor":
                arg = TaskArgRecord(
                    r.task_id,
                    index,
                    "tensor",
                    r.role,
                    r.dtype,
                    r.buffer_id,
                    len(r.shape),
                    r.shape,
                    r.strides,
                    r.start_offset,
                )
                f.details.append(
                    f"{f'task {f.task_id}'}'s {names.param(report.failure.func_id, index)} is "
                    f"{names.region(arg)}"
                )


def _explain_guard(f: Failure, names: _Names, report: RunReport) -> None:
    _explain_kernel_error(f, names, report)  # the writer's argument into the tensor, when saved
    m = re.search(r"program argument (\d+)", f.message)
    if m and 0 <= int(m.group(1)) < len(names.program.args):
        f.details.append(f"program argument {m.group(1)} is {names.program.args[int(m.group(1))].name}")
    if f.task_id < 0:
        f.next_steps.append("find the writer: run again with --serial --print-intermediates 3")
    elif "run again with --serial" in f.message:
        f.next_steps.append("name the writer: run again with --serial")
    program = names.program
    kernel = (
        program.kernels[report.failure.func_id]
        if 0 <= report.failure.func_id < len(program.kernels)
        else None
    )
    edited = hand_edited(program.work_dir, program.config)
    if kernel is not None and kernel.get("source") in edited:
        f.details.append(f"{kernel['source']} was edited by hand since it was generated: look there first")
    if not program.config.get("RUNTIME_CONFIG", {}).get("check_bounds", False):  # older builds: unchecked
        f.next_steps.append(
            "this build was compiled with check_bounds=False: compile it checked (the default) to stop the "
            "load or store outside its tensor at its DSL line"
        )
    elif not edited:
        f.next_steps.append(
            "a checked build with no hand-edited C++ should never write outside a tensor: please report it, "
            "with this build"
        )


def _symbolize(pcs: list[int], program: Build) -> list[SourceFrame]:
    """Frames of this process, resolved; those in this build's binaries name its own .cpp files,
    and frames past the runtime core's entry (Python, ctypes) are dropped."""
    if not pcs:
        return []
    try:
        frames = symbolize(pcs, build=program.work_dir)
    except Exception as e:  # noqa: BLE001 - a report without lines beats no report
        log.warning("[failure] cannot resolve source lines: %s: %s", type(e).__name__, e)
        return [SourceFrame(pc) for pc in pcs]
    kept = []
    for fr in frames:
        kept.append(fr)
        if fr.function.startswith("ts_runtime_run") or fr.function.startswith("ts_run("):
            break
    return kept


def _save(f: Failure, program: Build, names: _Names, saved: SavedInputs, why: str) -> Path | None:
    saved_args = _save_task(program, names, saved, why)
    if saved_args is None:
        return None
    out, args = saved_args
    if f.task_id == saved.task_id or f.task_id < 0:
        f.saved_inputs = str(out)
    f.next_steps.insert(0, f"replay the task alone: {_replay_command(program, saved.task_id, out)}")
    partial = [a.name for a in args if a.partial]
    if partial:
        f.details.append(
            f"note: inout {', '.join(partial)} was saved after the kernel had partly run (not its input value)"
        )
    return out


def _replay_command(program: Build, task_id: int, out: Path) -> str:
    """The command that replays task ``task_id`` on the inputs saved in ``out`` (a directory
    with a suffix, because an earlier run saved that task too, is named with --from)."""
    command = f"tilescope replay {program.work_dir} --task {task_id}"
    return command if out.name == f"task_{task_id}" else f"{command} --from {out}"


def _save_task(
    program: Build, names: _Names, saved: SavedInputs, why: str
) -> tuple[Path, list[SavedArg]] | None:
    """Write one task's saved inputs; returns the directory and the arguments (None on failure)."""
    import torch

    func_id = saved.records[0].func_id if saved.records else -1
    args = []
    for r in saved.records:
        name = names.param(func_id, r.arg_index)
        if r.kind == "scalar":
            args.append(SavedArg(r.arg_index, name, "scalar", r.value))
            continue
        value = record_tensor(saved.payload, r)
        if value is None:  # an output: the kernel writes it
            value = torch.empty(r.shape, dtype=dtypes.by_name(r.dtype).torch)
        partial = r.arg_index in saved.partial_args
        args.append(SavedArg(r.arg_index, name, _ROLE[r.role], value, partial, names.region(view_of(r))))
    try:
        out = save_task_inputs(
            program.work_dir,
            saved.task_id,
            names.task_names.get(saved.task_id, "") or names.kernel(func_id),
            names.kernel(func_id),
            func_id,
            args,
            why,
        )
    except OSError as e:
        log.error("[failure] cannot save the inputs of task %d: %s", saved.task_id, e)
        return None
    return out, args


def nan_failure(program: Build, report: RunReport) -> Failure | None:
    """The NaN/Inf report of a run with nan_check, or None when every output was finite."""
    if not report.nan:
        return None
    names = _Names(program, report)
    fresh = [r for r in report.nan if r.fresh]
    first = min(fresh or report.nan, key=lambda r: (r.task_id, r.arg_index))
    f = Failure(
        kind="nan",
        message="",
        task_id=first.task_id,
        task_name=names.task_names.get(first.task_id, "") or names.kernel(first.func_id),
        kernel=names.kernel(first.func_id),
        worker=first.worker,
    )
    if fresh:
        f.message = (
            f"{names.task(first.task_id, first.func_id)} made NaN/Inf from finite inputs: "
            + _nan_what(first, names)
        )
    else:
        f.message = (
            f"{report.nan_total} task(s) produced NaN/Inf, each from a non-finite input (no task made them): "
            "a program input holds NaN/Inf"
        )
    for r in sorted(report.nan, key=lambda r: (r.task_id, r.arg_index)):
        if r is first:
            continue
        if r.fresh:
            f.details.append(f"{names.task(r.task_id, r.func_id)} also made NaN/Inf: {_nan_what(r, names)}")
            continue
        source = f"task {r.producer}" if r.producer >= 0 else "a program input"
        f.details.append(
            f"{names.task(r.task_id, r.func_id)}: {names.param(r.func_id, r.arg_index)} is non-finite because "
            f"input {names.param(r.func_id, r.input_arg)} already was (from {source})"
        )
    if report.nan_total > len(report.nan):
        f.details.append(f"... {report.nan_total - len(report.nan)} more task(s) not listed")
    _save_nan_tasks(f, program, names, report, sorted({r.task_id for r in fresh}))
    return f


def _save_nan_tasks(f: Failure, program: Build, names: _Names, report: RunReport, fresh: list[int]) -> None:
    """Save the inputs of every task that made NaN/Inf from finite inputs (those the runtime
    kept), each with its replay command; name the ones it could not keep."""
    saved = {s.task_id: s for s in report.nan_saved}
    tasks = sorted(set(fresh) | set(saved))
    if len(tasks) > 1:
        f.details.append(f"{len(tasks)} tasks made NaN/Inf from finite inputs: {', '.join(map(str, tasks))}")
    missing = [t for t in tasks if t not in saved]
    if missing:
        f.details.append(
            f"the inputs of task(s) {', '.join(map(str, missing))} are not saved: nan_check saves those of "
            f"the {MAX_NAN_SAVED} lowest task ids"
        )
    for task_id in tasks:
        if task_id not in saved:
            continue
        saved_args = _save_task(program, names, saved[task_id], why="nan")
        if saved_args is None:
            continue
        out, args = saved_args
        if not f.saved_inputs:
            f.saved_inputs = str(out)
        f.saved_tasks.append(f"{task_id}: {out}")
        f.next_steps.append(f"replay the task alone: {_replay_command(program, task_id, out)}")
        partial = [a.name for a in args if a.partial]
        if partial:
            f.details.append(
                f"note: task {task_id}'s inout {', '.join(partial)} was saved after the kernel had run "
                "(not its input value)"
            )


def _nan_what(r: NanRecord, names: _Names) -> str:
    shape = names.param_shape(r.func_id, r.arg_index)
    where = f"element {r.first_index}"
    if shape:
        where = "[" + ", ".join(str(int(i)) for i in np.unravel_index(r.first_index, shape)) + "]"
    return (
        f"output {names.param(r.func_id, r.arg_index)} (arg {r.arg_index}) has {r.nan_count} NaN and "
        f"{r.inf_count} Inf; the first at {where}"
    )


__all__ = ["failure_from_report", "nan_failure"]
