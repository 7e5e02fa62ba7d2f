"""Re-running a build without its Python source: ``tilescope replay BUILD_DIR`` and
``replay_compiled(work_dir, ...)``; one task alone on its saved inputs: ``tilescope replay
BUILD_DIR --task ID`` (``launch.task``).

Invariants: the build is loaded with ``CompiledProgram.from_dir`` (so hand edits are rebuilt
first, only the edited files); with no tensors given, the inputs and golden come from the
build's saved data (``data/``) or ``golden_data``, with the tolerances the data was saved with
unless overridden. The ``tilescope replay`` command isolates sim runs (``--no-isolate`` turns it
off), so a crash is reported, not fatal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope._logging import configure, level_kept
from tilescope.analysis.compare import check_tolerances
from tilescope.analysis.data import DataError, load_meta, load_snapshot
from tilescope.analysis.progress import tolerance_arg
from tilescope.build.manifest import as_build_dir
from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import DATA_DIR, saved_data
from tilescope.debug.intermediates import value_stats
from tilescope.errors import TilescopeError
from tilescope.harness.flags import add_runtime_args, runtime_cfg_from_args
from tilescope.harness.run_jit import Execution, Expected, Phases, RunResult, data_args, execute, finish
from tilescope.launch.program import CompiledProgram
from tilescope.launch.task import SavedTask, TaskReplay, load_saved_task, run_saved_task
from tilescope.runtime.run_config import RunConfig


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
    first (only what changed). ``log_level`` applies to this replay: the level is as it was after it.
    """
    with level_kept():  # ``log_level`` applies to this replay, as to a run
        work = as_build_dir(work_dir)
        if platform is not None:
            runtime_cfg["platform"] = platform
        phases = Phases(runtime_cfg.get("log_level") or knobs.RUNTIME_KNOBS["log_level"].value())
        result = RunResult(
            False,
            work_dir=work,
            platform=knobs.RUNTIME_KNOBS["platform"].value(runtime_cfg.get("platform")),
            timings=phases.timings,
        )
        name = work.name
        try:
            config = RunConfig.from_keywords(runtime_cfg)
            configure(config.log_level)
            interp = result.platform == "interp"  # runs the IR dump: no g++
            compiled = phases.run("compile", f"load build {work}", lambda: CompiledProgram.from_dir(work, not interp))
            name = compiled.name
            if args:
                check_tolerances(rtol or 0.0, atol or 0.0)
                compiled.check_args(args)
                inputs = {a.name: v for a, v in zip(compiled.args, args)}
                execute(phases, result, Execution(compiled, config, Expected(None, rtol or 0.0, atol or 0.0)), inputs)
                return finish(result, name)
            held = saved_data(work)  # data/, else what --triage or --localize saved for its tool
            if not golden_data and not held:
                raise DataError(
                    f"{work} has no saved data ({work}/{DATA_DIR}): re-run the model with --save-data, pass --golden-data "
                    "DIR, or call replay_compiled with tensors"
                )
            data = Path(golden_data) if golden_data else held[0][1]
            meta = load_meta(data, given=[k for k, v in (("rtol", rtol), ("atol", atol)) if v is not None])
            rtol = meta.get("rtol", 1e-5) if rtol is None else rtol
            atol = meta.get("atol", 1e-5) if atol is None else atol
            check_tolerances(rtol, atol)
            inputs, saved = phases.run(
                "inputs", f"load golden data {data}", lambda: load_snapshot(data, data_args(compiled))
            )
            expected = Expected(lambda _: saved, rtol, atol, compare_fn, golden_from=data)
            execute(phases, result, Execution(compiled, config, expected), inputs)
        except TilescopeError as e:
            result.error = str(e)
            result.failure = getattr(e, "failure", None)
            print(f"[ERROR] {e}", file=sys.stderr, flush=True)
        return finish(result, name)


def result_json(result: RunResult) -> dict[str, Any]:
    """A whole-program replay (``replay_compiled``) as plain JSON data: pass/fail, the error and the
    failure report if the run failed, and each output compared with its golden."""
    return {
        "mode": "program", "build": str(result.work_dir) if result.work_dir else None, "platform": result.platform,
        "passed": result.passed, "error": result.error, "failure": result.failure.to_json() if result.failure else None,
        "nan": result.nan.to_json() if result.nan else None, "num_tasks": result.num_tasks, "rtol": result.rtol,
        "atol": result.atol, "outputs": [c.to_json() for c in result.comparisons],
        "timings_s": {k: round(v, 3) for k, v in result.timings.items()},
    }  # fmt: skip


def task_replay_json(replay: TaskReplay) -> dict[str, Any]:
    """One task replayed alone (``run_saved_task``) as plain JSON data: the task, whether it ran to
    the end (else its failure report), and the statistics of each output as it left them."""
    task = replay.task
    return {
        "mode": "task", "task": task.task_id, "task_name": task.task_name, "kernel": task.kernel["name"],
        "platform": replay.platform, "inputs_from": str(task.dir), "saved_because": task.why or None,
        "passed": replay.passed, "error": replay.error,
        "failure": replay.failure.to_json() if replay.failure else None, "wall_s": round(replay.wall_s, 3),
        "outputs": {name: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), **value_stats(t)}
                    for name, t in replay.outputs.items()},
    }  # fmt: skip


def tensor_stats(t: Any) -> str:
    """``min .. max, mean m, k NaN, j Inf`` over the finite values of a tensor."""
    s = value_stats(t)
    head = f"min {s['min']:.6g}, max {s['max']:.6g}, mean {s['mean']:.6g}" if s["min"] is not None else "no finite value"
    return f"{head}, {s['nan']} NaN, {s['inf']} Inf"


def _say(line: str, file: Any = None) -> None:
    print(line, file=file or sys.stdout, flush=True)


def print_task_header(task: SavedTask, platform: str, file: Any = None) -> None:
    """What is about to be replayed, as the CLI prints it before running: the task, why it was
    saved, and every input (scalars' values, tensors' statistics)."""
    _say(f"[REPLAY] task {task.task_id} '{task.task_name}' (kernel {task.kernel['name']}) alone on "
         f"{platform}, inputs from {task.dir}", file)  # fmt: skip
    if task.why:
        _say(f"[REPLAY] saved because: {task.why.splitlines()[0]}", file)
    for name in task.partial:
        _say(
            f"[REPLAY] note: inout {name!r} was saved after the kernel had partly run; the replay starts from it",
            file,
        )
    for name, value, direction in zip(task.names, task.values, task.directions):
        if direction == "scalar":
            _say(f"  in  {name} = {value!r}", file)
        elif direction in ("in", "inout"):
            region = task.regions.get(name)
            _say(f"  in  {_tensor_line(f'{name} = {region}' if region else name, value)}", file)


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
        _say(f"  out {_tensor_line(name, t)}", file)


def _tensor_line(name: str, t: Any) -> str:
    return f"{name} {list(t.shape)} {str(t.dtype).removeprefix('torch.')}: {tensor_stats(t)}"


def add_replay_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``tilescope replay``'s arguments and the runtime flags to ``parser``; returns it."""
    parser.add_argument(
        "build_dir", metavar="BUILD_DIR", type=PATH_ARG, help="a build directory (build_output/_jit_<fn>_<stamp>)"
    )
    parser.add_argument(
        "--golden-data", type=PATH_ARG, default=None, help="replay this data dir (default: BUILD_DIR/data)"
    )
    parser.add_argument(
        "--rtol", type=tolerance_arg, default=None, help="relative tolerance (default: the saved run's)"
    )
    parser.add_argument(
        "--atol", type=tolerance_arg, default=None, help="absolute tolerance (default: the saved run's)"
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
        type=PATH_ARG,
        default=None,
        metavar="DIR",
        help="replay the task saved in DIR (default: BUILD_DIR/dfx_outputs/failure/task_ID)",
    )
    add_runtime_args(parser)
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope replay``: the whole build on its saved (or ``--golden-data``) data, or one saved
    task with ``--task``/``--from``; sim runs are isolated by default. Returns the exit status.
    """
    cfg = runtime_cfg_from_args(args)
    isolate, platform = knobs.RUNTIME_KNOBS["isolate"], knobs.RUNTIME_KNOBS["platform"]
    if "isolate" not in cfg and not isolate.is_set() and platform.value(cfg.get("platform")) == "sim":
        cfg["isolate"] = True  # replay's own default: a crash in the replayed code is reported, not fatal
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
        config = RunConfig.from_keywords(cfg)
        configure(config.log_level)
        program = CompiledProgram.from_dir(args.build_dir, config.platform != "interp")
        task = load_saved_task(program, args.task, args.from_dir)
        print_task_header(task, config.platform)
        replay = run_saved_task(program, task, config)
    except TilescopeError as e:
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
        return 1
    print_task_outcome(replay)
    return 0 if replay.passed else 1


def main(argv: list[str] | None = None) -> int:
    """``debug/run.py``'s entry point: ``tilescope replay`` with ``argv``; returns the exit status."""
    parser = add_replay_args(argparse.ArgumentParser(prog="tilescope replay", description=__doc__))
    return run_cli(parser.parse_args(argv))
