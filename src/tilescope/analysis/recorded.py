"""One serial sim run of a build on copies of given inputs, recording what an analysis reads: the
run under ``tilescope localize``, ``tilescope triage`` and ``--poison``.

Invariants: the given inputs are never written (the run has guarded copies; arguments that alias
stay aliased); a level-2 tensor dump's payload room is grown until the dump lost nothing (or it
would pass ``MAX_ARENA``); a failing run raises the RuntimeFailure, for the caller to word.
"""

from __future__ import annotations

import contextvars
import math
from pathlib import Path
from typing import Any

import torch

from tilescope.ir import dtypes
from tilescope.ir.types import Direction
from tilescope.launch.program import CompiledProgram
from tilescope.launch.run import launch
from tilescope.runtime.guarded import guarded_args
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import DUMP_ARENA_BYTES, Recording, RunConfig

MAX_ARENA = 8 << 30  # the most one recorded run keeps of every task's arguments
# where a kernel that crashes during a recorded run writes its crash report (None: nowhere); the
# contained child of `tilescope triage` sets it, so that its parent can name the crash
crash_report_to: contextvars.ContextVar[Path | None] = contextvars.ContextVar("crash_report_to", default=None)


def recorded_run(
    build: CompiledProgram,
    inputs: dict[str, Any],
    capture: Recording,
    *,
    poison: int | None = None,
    dep_gen: bool = False,
    shuffle: tuple[int, int] | None = None,
) -> tuple[list[Any], RunReport]:
    """Run ``build`` on sim, serially, on copies of ``inputs``, recording ``capture``; returns the
    arguments as the run left them and its report. With ``poison``, intermediates and the Out
    arguments' copies start with every byte ``poison``; ``dep_gen`` also writes deps.json; with
    ``shuffle`` = (workers, seed) the run is not serial but shuffled (``ts_run_config``'s
    ``shuffle_seed``) on that many workers.

    Raises:
        RuntimeFailure: the run failed (``.failure`` says how, ``.report`` what it recorded).
    """
    # NOTE: the schedule is the analysis's own: TILESCOPE_SERIAL or TILESCOPE_NUM_WORKERS never change it
    schedule = {"serial": True} if shuffle is None else {"num_workers": shuffle[0], "shuffle_seed": shuffle[1]}
    config = RunConfig.for_analysis(**schedule, enable_dep_gen=dep_gen, log_level="error", poison=poison,
                                    crash_report=crash_report_to.get())  # fmt: skip
    arena = DUMP_ARENA_BYTES
    while True:
        args = guarded_args([inputs[a.name] for a in build.args])
        if poison is not None:
            # NOTE: an Out argument that shares its storage with an input is not poisoned: that would
            # change the input
            read = {args[i].untyped_storage().data_ptr() for i, a in enumerate(build.args)
                    if a.direction is not Direction.OUT and torch.is_tensor(args[i])}  # fmt: skip
            for i, a in enumerate(build.args):
                if a.direction is Direction.OUT and torch.is_tensor(args[i]) and (
                    args[i].untyped_storage().data_ptr() not in read
                ):
                    poison_fill(args[i], poison)
        report = launch(build, build.binaries(), args, config.replace(dump_arena_bytes=arena), capture=capture).report
        records = report.dump.records if report.dump is not None else []
        lost = any(r.truncated or r.overwritten for r in records)
        need = sum(math.prod(r.shape) * dtypes.by_name(r.dtype).itemsize for r in records if r.kind != "scalar")
        if not capture.dump_level or not lost or arena >= need or need > MAX_ARENA:
            return args, report
        arena = need + (1 << 20)


def poison_fill(t: torch.Tensor, byte: int) -> None:
    """Every byte of ``t``'s elements set to ``byte`` (a bool element to ``byte``'s lowest bit, the
    only values a bool may hold)."""
    if t.dtype == torch.bool:
        t.fill_(bool(byte & 1))
        return
    t.fill_(torch.full((t.element_size(),), byte, dtype=torch.uint8).view(t.dtype)[0])
