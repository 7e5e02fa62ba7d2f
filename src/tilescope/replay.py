"""Re-running a build without its Python source: ``tilescope replay BUILD_DIR`` and
``replay_compiled(work_dir, ...)``.

Invariants: the build is loaded with ``CompiledProgram.from_dir`` (so hand edits are rebuilt
first, only the edited files); with no tensors given, the inputs and golden come from the
build's saved data (``data/``) or ``golden_data``, with the tolerances the data was saved with
unless overridden.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope._logging import configure
from tilescope.errors import TilescopeError
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


def add_replay_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("build_dir", help="a build directory (build_output/_jit_<fn>_<stamp>)")
    parser.add_argument("--golden-data", default=None, help="replay this data dir (default: BUILD_DIR/data)")
    parser.add_argument(
        "--rtol", type=float, default=None, help="relative tolerance (default: the saved run's)"
    )
    parser.add_argument(
        "--atol", type=float, default=None, help="absolute tolerance (default: the saved run's)"
    )
    add_runtime_args(parser)
    return parser


def run_cli(args: argparse.Namespace) -> int:
    result = replay_compiled(
        args.build_dir,
        golden_data=args.golden_data,
        rtol=args.rtol,
        atol=args.atol,
        **runtime_cfg_from_args(args),
    )
    return 0 if result.passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = add_replay_args(argparse.ArgumentParser(prog="tilescope replay", description=__doc__))
    return run_cli(parser.parse_args(argv))
