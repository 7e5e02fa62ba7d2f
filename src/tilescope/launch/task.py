"""One task alone on its saved inputs: ``replay_task(work_dir, task_id)`` (the CLI is
``tilescope replay BUILD_DIR --task ID``, in ``harness/replay.py``).

Invariants: a task replay reads ``<build>/dfx_outputs/failure/task_<ID>/`` (or a given
directory), as ``debug.failures.save_task_inputs`` wrote it, and checks it against the kernel's
recorded parameters (every problem listed in one error); every file it names must lie in that
directory (``paths.confined``), and tensors are read with ``torch.load(weights_only=True)``, so
a saved task is read as data only; outputs start as zeros. On ``sim`` the
kernel runs alone through the one run path (``launch.run``, with the core's
``ts_single_task_orchestration``); on ``interp`` its IR runs on the same inputs. Nothing in the
saved directory is modified or deleted.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope._logging import configure
from tilescope.build.paths import DFX_DIR, FAILURE_DIR, TASK_JSON, confined, inside
from tilescope.debug.failures import Failure
from tilescope.errors import BuildFileError, RuntimeFailure, TilescopeError
from tilescope.ir import dtypes as dt
from tilescope.ir.traverse import recursion_room
from tilescope.launch.isolate import ChildRun, run_child
from tilescope.launch.program import CompiledProgram
from tilescope.launch.run import launch
from tilescope.runtime.guarded import guarded_clone
from tilescope.runtime.interp import _KernelInterp
from tilescope.runtime.run_config import RunConfig

_ROLE_DIRECTIONS = {"input": "in", "output": "out", "inout": "inout", "scalar": "scalar"}


@dataclass
class SavedTask:
    """A task's saved arguments, checked against the build's kernel, ready to run."""

    dir: Path
    task_id: int
    task_name: str
    kernel_index: int  # func_id of the kernel in the build
    kernel: dict[str, Any]  # its kernel_config.KERNELS entry
    why: str
    names: list[str]
    directions: list[str]  # in | out | inout | scalar, in parameter order
    values: list[Any]  # tensors (outputs: zeros of the recorded shape) and numbers
    partial: list[str] = field(default_factory=list)  # inouts captured after the kernel partly ran
    regions: dict[str, str] = field(default_factory=dict)  # parameter -> ``h[0:64, 0:128]``, as saved


@dataclass
class TaskReplay:
    """What replaying one task did: ``outputs`` (Out and InOut tensors by parameter name) as the
    kernel left them, and ``failure`` if it failed (None: it ran to the end)."""

    task: SavedTask
    platform: str
    outputs: dict[str, Any]
    wall_s: float = 0.0
    num_tasks: int = 0  # tasks run: 1, or 0 if it failed before the kernel ran
    failure: Failure | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the task ran without a RuntimeFailure (``error`` is None)."""
        return self.error is None


def saved_task_dirs(work_dir: Path) -> list[Path]:
    """The saved task directories of a build, in task id order."""
    base = inside(work_dir, DFX_DIR, FAILURE_DIR)
    dirs = [d for d in base.glob("task_*") if (inside(d, TASK_JSON)).is_file()] if base.is_dir() else []

    def key(d: Path) -> tuple[int, str]:
        head = d.name.removeprefix("task_").split("_", 1)[0]
        return (int(head) if head.isdigit() else -1, d.name)

    return sorted(dirs, key=key)


def _describe_saved(d: Path) -> str:
    try:
        meta = json.loads((inside(d, TASK_JSON)).read_text())
        return f"{d}  (task {meta.get('task_id')}, kernel {meta.get('kernel')}: {meta.get('why', '')})"
    except (OSError, ValueError):
        return f"{d}  (task.json unreadable)"


def _task_dir(work: Path, task_id: int | None, from_dir: str | os.PathLike | None) -> Path:
    if from_dir is not None:
        d = Path(from_dir)
        if d.name == TASK_JSON and d.is_file():
            d = d.parent  # --from .../task_3/task.json names the directory it is in
    elif task_id is not None:
        d = inside(work, DFX_DIR, FAILURE_DIR, f"task_{task_id}")
    else:
        raise TilescopeError("replay_task needs a task id or a saved task directory (--task ID / --from DIR)")
    if (inside(d, TASK_JSON)).is_file():
        return d
    available = saved_task_dirs(work)
    listing = "\n  ".join(_describe_saved(a) for a in available)
    if d.is_dir():
        what = f"{d} has no task.json"
    elif d.exists():
        what = (
            f"{d} is a file, not a saved task's directory (dfx_outputs/failure/task_<id>/, holding task.json)"
        )
    else:
        what = f"{d} does not exist"
    hint = (
        f"saved tasks of this build:\n  {listing}"
        if available
        else "this build has no saved tasks: a failing run saves the failing task's inputs there "
        "(a crash with --isolate, a task past --task-timeout, a kernel error, or --nan-check)"
    )
    raise TilescopeError(f"no saved task to replay: {what}; {hint}")


def load_saved_task(
    program: CompiledProgram, task_id: int | None = None, from_dir: str | os.PathLike | None = None
) -> SavedTask:
    """Read and check a saved task of ``program``'s build; every problem is listed in one error."""
    import torch

    if task_id is not None and (isinstance(task_id, bool) or not isinstance(task_id, int)):
        raise TilescopeError(
            f"task_id is {task_id!r} ({type(task_id).__name__}), expected an int: the task's id, as the "
            "failure report names it (task 3 -> 3)"
        )
    d = _task_dir(Path(program.work_dir), task_id, from_dir)
    path = inside(d, TASK_JSON)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise TypeError(f"a JSON {type(meta).__name__}, not an object")
        if not isinstance(meta["args"], list):
            raise TypeError(f"args is {meta['args']!r}, not a list")
        entries = list(meta["args"])
        saved_id, kernel_name = int(meta["task_id"]), str(meta["kernel"])
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise TypeError(f"args[{i}] is {e!r}, not an object")
            missing = [k for k in ("index", "name", "role") if k not in e]
            if missing:
                raise KeyError(f"args[{i}].{missing[0]}")
            if not isinstance(e["index"], int) or isinstance(e["index"], bool):
                raise TypeError(f"args[{i}].index is {e['index']!r}, not an int")
            if not isinstance(e["role"], str):
                raise TypeError(f"args[{i}].role is {e['role']!r}, not a string")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        what = f"{type(e).__name__}: {e}" if not isinstance(e, KeyError) else f"the key {e} is missing"
        raise TilescopeError(
            f"{path} is not a readable saved task ({what}); it was written by save_task_inputs as JSON "
            "with task_id, kernel and args: replay another saved task, or re-run to save this one again"
        ) from None
    if task_id is not None and saved_id != task_id:
        raise TilescopeError(f"{path} holds task {saved_id}, not task {task_id}")
    by_name = {k["name"]: i for i, k in enumerate(program.kernels)}
    if kernel_name not in by_name:
        raise TilescopeError(
            f"{path}: kernel {kernel_name!r} is not a kernel of {program.name} "
            f"(its kernels: {', '.join(by_name) or 'none'}); was it saved from another build?"
        )
    index = by_name[kernel_name]
    kernel = program.kernels[index]
    params = kernel.get("params") or []
    problems = []
    if len(entries) != len(params):
        problems.append(f"{len(entries)} arguments saved, but kernel {kernel_name} has {len(params)}")
    names, directions, values, partial = [], [], [], []
    regions: dict[str, str] = {}
    for i, (e, p) in enumerate(zip(sorted(entries, key=lambda e: e["index"]), params)):
        where = f"arg {i} {p['name']!r}"
        direction = _ROLE_DIRECTIONS.get(e["role"])
        if direction != p["direction"]:
            problems.append(
                f"{where}: saved as {e['role']!r}, but the kernel's parameter is {p['direction']!r}"
            )
            continue
        dtype = dt.by_name(p["dtype"])
        names.append(p["name"])
        directions.append(direction)
        if isinstance(e.get("region"), str):
            regions[p["name"]] = e["region"]
        if direction == "scalar":
            value = e.get("value")
            if "value" not in e:
                problems.append(f"{where}: a scalar without a value")
            elif isinstance(value, bool) or not isinstance(value, int | float):
                problems.append(f"{where}: the scalar's value is {value!r}, expected a number")
            values.append(value)
            continue
        shape = tuple(p["shape"])
        if direction == "out":
            values.append(torch.zeros(shape, dtype=dtype.torch))
            continue
        if "file" not in e:
            problems.append(f"{where}: task.json names no file for it")
            values.append(None)
            continue
        try:
            file = confined(d, e["file"], f"{where}'s file", "replay a task this build saved itself")
        except BuildFileError as err:
            problems.append(str(err))
            values.append(None)
            continue
        if not file.is_file():
            problems.append(f"{where}: its file {file} is missing")
            values.append(None)
            continue
        try:
            t = torch.load(file, weights_only=True)
        except Exception as err:  # noqa: BLE001 - an unreadable file is listed, whatever broke
            problems.append(f"{file}: cannot be loaded ({type(err).__name__}: {err})")
            values.append(None)
            continue
        if not torch.is_tensor(t) or tuple(t.shape) != shape or t.dtype != dtype.torch:
            got = f"shape {list(t.shape)} {t.dtype}" if torch.is_tensor(t) else type(t).__name__
            problems.append(f"{file}: {got}, expected shape {list(shape)} {dtype.torch} for {where}")
        values.append(t.contiguous() if torch.is_tensor(t) else t)
        if e.get("partial"):
            partial.append(p["name"])
    if problems:
        raise TilescopeError(
            f"saved task {d} does not match kernel {kernel_name} of {program.work_dir} ({len(problems)} "
            "problem(s)):\n  " + "\n  ".join(problems)
        )
    return SavedTask(
        d, saved_id, str(meta.get("task_name") or kernel_name), index, kernel, str(meta.get("why", "")),
        names, directions, values, partial, regions,
    )  # fmt: skip


@recursion_room()
def _run_interp(program: CompiledProgram, task: SavedTask, values: list[Any], float64: bool) -> None:
    kernels = {k.name: k for k in program.program().kernels}
    try:
        _KernelInterp(kernels[task.kernel["name"]], float64).run(values)
    except IndexError as err:
        raise RuntimeFailure(f"task {task.task_id} ({task.task_name}) on interp: {err}") from None


def replay_task(
    work_dir: str | os.PathLike,
    task_id: int | None = None,
    *,
    from_dir: str | os.PathLike | None = None,
    **runtime_cfg: Any,
) -> TaskReplay:
    """Run one saved task alone: its kernel on its saved inputs, outputs starting as zeros.

    ``runtime_cfg`` are the usual run options: ``platform`` (``sim`` runs the kernel's binary,
    ``interp`` its IR), ``isolate`` (sim: in a child process), ``task_timeout_s``, ``float64``.

    Raises:
        TilescopeError: the build or the saved task cannot be loaded or does not match.
    """
    config = RunConfig.from_keywords(runtime_cfg)
    configure(config.log_level)
    program = CompiledProgram.from_dir(work_dir)
    return run_saved_task(program, load_saved_task(program, task_id, from_dir), config)


def run_saved_task(program: CompiledProgram, task: SavedTask, config: RunConfig) -> TaskReplay:
    """Run ``task`` of ``program`` alone with the validated options ``config``."""
    values = [guarded_clone(v) if hasattr(v, "clone") else v for v in task.values]
    outputs = {n: v for n, v, d in zip(task.names, values, task.directions) if d in ("out", "inout")}
    result = TaskReplay(task, config.platform, outputs)
    t0 = time.perf_counter()
    try:
        if config.platform == "interp":
            _run_interp(program, task, values, config.float64)
            result.num_tasks = 1
        elif config.isolate:
            child = ChildRun(task.kernel_index, crash_kernels=[task.kernel], crash_task_id=task.task_id, save_inputs=False)
            result.num_tasks = run_child(program, values, task.directions, config, child).num_tasks
        else:
            info = launch(program, program.binaries(), values, config, kernel_index=task.kernel_index)
            result.num_tasks = info.num_tasks
    except RuntimeFailure as e:
        result.error = str(e)
        result.failure = getattr(e, "failure", None)
    result.wall_s = time.perf_counter() - t0
    return result
