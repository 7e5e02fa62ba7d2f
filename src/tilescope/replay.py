"""Re-running a build without its Python source: ``tilescope replay BUILD_DIR`` and
``replay_compiled(work_dir, ...)``; one task alone on its saved inputs: ``tilescope replay
BUILD_DIR --task ID`` and ``replay_task(work_dir, task_id)``.

Invariants: the build is loaded with ``CompiledProgram.from_dir`` (so hand edits are rebuilt
first, only the edited files); with no tensors given, the inputs and golden come from the
build's saved data (``data/``) or ``golden_data``, with the tolerances the data was saved with
unless overridden.

A task replay reads ``<build>/dfx_outputs/failure/task_<ID>/`` (or ``--from DIR``), as
``failures.save_task_inputs`` wrote it, and checks it against the kernel's recorded parameters
(every problem listed in one error); outputs start as zeros. On ``sim`` the kernel runs alone
through the runtime core (``ts_single_task_orchestration``); on ``interp`` its IR runs on the
same inputs. Nothing in the saved directory is modified or deleted. The ``tilescope replay``
command isolates sim runs (``--no-isolate`` turns it off), so a crash is reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope._logging import configure
from tilescope.errors import RuntimeFailure, TilescopeError
from tilescope.failures import FAILURE_DIR, Failure
from tilescope.harness.cli import add_runtime_args, runtime_cfg_from_args
from tilescope.harness.data import DataError, load_meta, load_snapshot
from tilescope.harness.run import Phases, RunResult, data_args, execute, finish


def replay_compiled(
    work_dir: str | os.PathLike,
    *args: Any,
    golden_data: str | os.PathLike | None = None,
    platform: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    compare_fn: Callable[..., Any] | None = None,
    **runtime_cfg: Any,
) -> RunResult:
    """Run the build ``work_dir``.

    With ``args`` (torch tensors and numbers, in parameter order) it runs on them and writes the
    outputs in place. Without, it replays saved data — ``golden_data`` or ``<work_dir>/data`` —
    and compares every output with the saved golden. Edited C++ or IR in the build is rebuilt
    first (only what changed).
    """
    from tilescope.program import CompiledProgram

    work = Path(work_dir)
    if platform is not None:
        runtime_cfg["platform"] = platform
    phases = Phases(runtime_cfg.get("log_level") or knobs.RUNTIME_KNOBS["log_level"].value())
    result = RunResult(
        False, work_dir=work, platform=runtime_cfg.get("platform") or "sim", timings=phases.timings
    )
    name = work.name
    try:
        configure(knobs.runtime_options(runtime_cfg)["log_level"])
        compiled = phases.run("compile", f"load build {work}", lambda: CompiledProgram.from_dir(work))
        name = compiled.name
        if args:
            compiled.check_args(args)
            inputs = {a.name: v for a, v in zip(compiled.args, args)}
            execute(phases, result, compiled, inputs, None, runtime_cfg, rtol or 0.0, atol or 0.0)
            return finish(result, name)
        data = Path(golden_data) if golden_data else work / "data"
        if not golden_data and not data.is_dir():
            raise DataError(
                f"{work} has no saved data ({data}): re-run the model with --save-data, pass --golden-data DIR, "
                "or call replay_compiled with tensors"
            )
        meta = load_meta(data)
        rtol = meta.get("rtol", 1e-5) if rtol is None else rtol
        atol = meta.get("atol", 1e-5) if atol is None else atol
        inputs, saved = phases.run(
            "inputs", f"load golden data {data}", lambda: load_snapshot(data, data_args(compiled))
        )
        execute(phases, result, compiled, inputs, lambda _: saved, runtime_cfg, rtol, atol, compare_fn)
    except TilescopeError as e:
        result.error = str(e)
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
    return finish(result, name)


# -- one task alone ------------------------------------------------------------------------------

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
        return self.error is None


def saved_task_dirs(work_dir: Path) -> list[Path]:
    """The saved task directories of a build, in task id order."""
    base = Path(work_dir) / "dfx_outputs" / FAILURE_DIR
    dirs = [d for d in base.glob("task_*") if (d / "task.json").is_file()] if base.is_dir() else []

    def key(d: Path) -> tuple[int, str]:
        head = d.name.removeprefix("task_").split("_", 1)[0]
        return (int(head) if head.isdigit() else -1, d.name)

    return sorted(dirs, key=key)


def _describe_saved(d: Path) -> str:
    try:
        meta = json.loads((d / "task.json").read_text())
        return f"{d}  (task {meta.get('task_id')}, kernel {meta.get('kernel')}: {meta.get('why', '')})"
    except (OSError, ValueError):
        return f"{d}  (task.json unreadable)"


def _task_dir(work: Path, task_id: int | None, from_dir: str | os.PathLike | None) -> Path:
    if from_dir is not None:
        d = Path(from_dir)
    elif task_id is not None:
        d = work / "dfx_outputs" / FAILURE_DIR / f"task_{task_id}"
    else:
        raise TilescopeError("replay_task needs a task id or a saved task directory (--task ID / --from DIR)")
    if (d / "task.json").is_file():
        return d
    available = saved_task_dirs(work)
    listing = "\n  ".join(_describe_saved(a) for a in available)
    what = f"{d} has no task.json" if d.is_dir() else f"{d} does not exist"
    hint = (
        f"saved tasks of this build:\n  {listing}"
        if available
        else "this build has no saved tasks: a failing run saves the failing task's inputs there "
        "(a crash with --isolate, a task past --task-timeout, a kernel error, or --nan-check)"
    )
    raise TilescopeError(f"no saved task to replay: {what}; {hint}")


def load_saved_task(
    program: Any, task_id: int | None = None, from_dir: str | os.PathLike | None = None
) -> SavedTask:
    """Read and check a saved task of ``program``'s build; every problem is listed in one error."""
    import torch

    from tilescope.language import dtypes as dt

    d = _task_dir(Path(program.work_dir), task_id, from_dir)
    path = d / "task.json"
    try:
        meta = json.loads(path.read_text())
        entries = list(meta["args"])
        saved_id, kernel_name = int(meta["task_id"]), str(meta["kernel"])
        for e in entries:
            missing = [k for k in ("index", "name", "role") if k not in e]
            if missing:
                raise KeyError(f"args[].{missing[0]}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        what = f"{type(e).__name__}: {e}" if not isinstance(e, KeyError) else f"the key {e} is missing"
        raise TilescopeError(
            f"{path} is not a readable saved task ({what}); it was written by save_task_inputs as JSON "
            "with task_id, kernel and args"
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
        if direction == "scalar":
            if "value" not in e:
                problems.append(f"{where}: a scalar without a value")
            values.append(e.get("value"))
            continue
        shape = tuple(p["shape"])
        if direction == "out":
            values.append(torch.zeros(shape, dtype=dtype.torch))
            continue
        file = d / str(e.get("file", ""))
        if not e.get("file") or not file.is_file():
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
        names, directions, values, partial,
    )  # fmt: skip


def run_task_in_process(
    program: Any,
    kernel_index: int,
    args: list[Any],
    directions: list[str],
    opts: dict[str, Any],
    crash_report: str | None = None,
) -> Any:
    """Run kernel ``kernel_index`` of ``program`` once, alone, on ``args`` in this process on the
    sim platform (``ts_single_task_orchestration``); returns a ``RunInfo``.

    Raises:
        RuntimeFailure: the task failed (``exc.failure`` is set when the core described it).
    """
    from tilescope.language import dtypes as dt
    from tilescope.program import RunInfo
    from tilescope.runtime import core

    kernel = program.kernels[kernel_index]
    params = kernel["params"]
    loaded = program._load()
    cargs = [
        core.scalar_arg(a, dt.by_name(p["dtype"])) if d == "scalar" else core.tensor_arg(a, d)
        for a, d, p in zip(args, directions, params)
    ]
    checks = core.RunChecks(
        task_timeout_s=float(opts.get("task_timeout_s") or 0.0),
        nan_check=bool(opts.get("nan_check")),
        trace_tasks=int(opts.get("print_intermediates") or 0) >= 3,
        crash_report_path=crash_report,
    )
    report = core.run_graph(
        core.single_task_orchestration(),
        [loaded.kernels[kernel_index]],
        [kernel["name"]],
        cargs,
        num_workers=1,
        checks=checks,
    )
    return RunInfo("sim", report.wall_s, report.num_tasks)


def _run_interp(program: Any, task: SavedTask, values: list[Any], float64: bool) -> None:
    from tilescope.runtime.interp import _KernelInterp

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
    from tilescope.program import CompiledProgram

    opts = knobs.runtime_options(runtime_cfg)
    configure(opts["log_level"])
    program = CompiledProgram.from_dir(work_dir)
    return run_saved_task(program, load_saved_task(program, task_id, from_dir), opts)


def run_saved_task(program: Any, task: SavedTask, opts: dict[str, Any]) -> TaskReplay:
    """Run ``task`` of ``program`` alone with validated runtime options ``opts``."""
    values = [v.clone() if hasattr(v, "clone") else v for v in task.values]
    outputs = {n: v for n, v, d in zip(task.names, values, task.directions) if d in ("out", "inout")}
    result = TaskReplay(task, opts["platform"], outputs)
    t0 = time.perf_counter()
    try:
        if opts["platform"] == "interp":
            _run_interp(program, task, values, bool(opts["float64"]))
            result.num_tasks = 1
        elif opts["isolate"]:
            from tilescope.isolate import run_child

            result.num_tasks = run_child(
                program,
                values,
                task.directions,
                opts,
                {"kind": "task", "kernel_index": task.kernel_index},
                crash_kernels=[task.kernel],
                crash_task_id=task.task_id,
                save_inputs=False,
            ).num_tasks
        else:
            info = run_task_in_process(program, task.kernel_index, values, task.directions, opts)
            result.num_tasks = info.num_tasks
    except RuntimeFailure as e:
        result.error = str(e)
        result.failure = getattr(e, "failure", None)
    result.wall_s = time.perf_counter() - t0
    return result


def tensor_stats(t: Any) -> str:
    """``min .. max, mean m, k NaN, j Inf`` over the finite values of a tensor."""
    import torch

    x = t.detach().to(torch.float64)
    finite = x[torch.isfinite(x)]
    nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
    head = (
        f"min {finite.min().item():.6g}, max {finite.max().item():.6g}, mean {finite.mean().item():.6g}"
        if finite.numel()
        else "no finite value"
    )
    return f"{head}, {nan} NaN, {inf} Inf"


def _say(line: str, file: Any = None) -> None:
    print(line, file=file or sys.stdout, flush=True)


def print_task_header(task: SavedTask, platform: str, file: Any = None) -> None:
    """What is about to be replayed, as the CLI prints it before running."""
    _say(f"[REPLAY] task {task.task_id} '{task.task_name}' (kernel {task.kernel['name']}) alone on "
         f"{platform}, inputs from {task.dir}", file)  # fmt: skip
    if task.why:
        _say(f"[REPLAY] saved because: {task.why.splitlines()[0]}", file)
    for name in task.partial:
        _say(
            f"[REPLAY] note: inout {name!r} was saved after the kernel had partly run; the replay starts from it",
            file,
        )


def print_task_outcome(result: TaskReplay, file: Any = None) -> None:
    """How the replay ended and the statistics of every output, as the CLI prints them."""
    if result.passed:
        _say(f"[REPLAY] ran to the end ({result.wall_s:.2f}s)", file)
    else:
        _say("[REPLAY] FAILED:", file)
        text = result.failure.render() if result.failure is not None else (result.error or "")
        for line in text.splitlines():
            _say(f"  {line}", file)
    for name, t in result.outputs.items():
        _say(f"  {name} {list(t.shape)} {str(t.dtype).removeprefix('torch.')}: {tensor_stats(t)}", file)


def add_replay_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("build_dir", help="a build directory (build_output/_jit_<fn>_<stamp>)")
    parser.add_argument("--golden-data", default=None, help="replay this data dir (default: BUILD_DIR/data)")
    parser.add_argument(
        "--rtol", type=float, default=None, help="relative tolerance (default: the saved run's)"
    )
    parser.add_argument(
        "--atol", type=float, default=None, help="absolute tolerance (default: the saved run's)"
    )
    t = parser.add_argument_group("one task")
    t.add_argument(
        "--task",
        type=int,
        default=None,
        metavar="ID",
        help="replay task ID alone on its saved inputs (BUILD_DIR/dfx_outputs/failure/task_ID)",
    )
    t.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        metavar="DIR",
        help="replay the task saved in DIR (default: BUILD_DIR/dfx_outputs/failure/task_ID)",
    )
    add_runtime_args(parser)
    return parser


def run_cli(args: argparse.Namespace) -> int:
    cfg = runtime_cfg_from_args(args)
    if cfg.get("platform", "sim") == "sim":
        cfg.setdefault("isolate", True)  # a crash in the replayed code is reported, not fatal
    if args.task is None and args.from_dir is None:
        result = replay_compiled(
            args.build_dir, golden_data=args.golden_data, rtol=args.rtol, atol=args.atol, **cfg
        )
        return 0 if result.passed else 1
    ignored = [flag for flag, v in (("--golden-data", args.golden_data), ("--rtol", args.rtol),
                                    ("--atol", args.atol)) if v is not None]  # fmt: skip
    try:
        if ignored:
            raise TilescopeError(f"{', '.join(ignored)} apply to whole-program replays, not to --task")
        from tilescope.program import CompiledProgram

        opts = knobs.runtime_options(cfg)
        configure(opts["log_level"])
        program = CompiledProgram.from_dir(args.build_dir)
        task = load_saved_task(program, args.task, args.from_dir)
        print_task_header(task, opts["platform"])
        replay = run_saved_task(program, task, opts)
    except TilescopeError as e:
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
        return 1
    print_task_outcome(replay)
    return 0 if replay.passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = add_replay_args(argparse.ArgumentParser(prog="tilescope replay", description=__doc__))
    return run_cli(parser.parse_args(argv))
