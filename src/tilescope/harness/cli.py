"""The flags every model script shares, and their mapping onto ``run_jit`` keyword arguments.

``add_runtime_args`` holds the flags about one run (shared with ``tilescope replay`` and the
build's ``debug/run.py``); ``add_harness_args`` adds those about compiling and data.
"""

from __future__ import annotations

import argparse
from typing import Any

from tilescope.knobs import LOG_LEVELS, PLATFORMS


def add_runtime_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("run")
    g.add_argument("-p", "--platform", choices=PLATFORMS, default="sim", help="where to run (default: sim)")
    g.add_argument("-d", "--device", type=int, default=0, help="device index (default: 0)")
    g.add_argument(
        "--dump-tensor",
        "--dump-args",
        dest="dump_tensor",
        type=int,
        nargs="?",
        const=2,
        default=0,
        choices=range(4),
        metavar="LEVEL",
        help="tensor/scalar dump level: 1 tagged, 2 full (default), 3 metadata",
    )
    g.add_argument("--enable-dep-gen", action="store_true", help="write the dependency graph")
    g.add_argument("--trace", action="store_true", help="write a Chrome trace of the run")
    g.add_argument("--log-level", choices=LOG_LEVELS, default=None, help="log level (default: v5 = info)")
    g.add_argument("--workers", type=int, default=0, help="worker threads (default: one per CPU)")
    g.add_argument("--float64", action="store_true", help="interp only: compute floats in float64")
    f = parser.add_argument_group("failures")
    f.add_argument(
        "--task-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a task (or the orchestration) that runs longer, with a report (default: 60; 0 = none)",
    )
    f.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in a child process: a crashing kernel becomes a report and the caller goes on",
    )
    f.add_argument("--nan-check", action="store_true", help="report the first task that makes a NaN/Inf")
    f.add_argument(
        "--print-intermediates",
        type=int,
        choices=(1, 2, 3),
        default=0,
        metavar="{1,2,3}",
        help="1 save every task's inputs and outputs as .pt, 2 print their statistics, "
        "3 print tasks as they start and finish",
    )
    f.add_argument(
        "--kernel-filter", default=None, metavar="A,B", help="only these kernels for --print-intermediates"
    )
    f.add_argument(
        "--serial", action="store_true", help="one worker, submission order (deterministic schedule)"
    )
    return parser


def add_harness_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_runtime_args(parser)
    g = parser.add_argument_group("tilescope harness")
    g.add_argument(
        "--runtime-dir", default=None, help="reuse a build directory: only edited files are rebuilt"
    )
    g.add_argument("--golden-data", default=None, help="replay inputs and golden from a saved data dir")
    g.add_argument("--save-data", action="store_true", help="snapshot inputs and golden into <build>/data")
    g.add_argument("--dump-passes", action="store_true", help="write the IR after every pass")
    g.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default: 0)")
    g.add_argument("--compile-only", action="store_true", help="stop after compiling")
    g.add_argument(
        "--check-bounds", action="store_true", help="checked build: every load/store checks its bounds"
    )
    return parser


def runtime_cfg_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``runtime_cfg`` from parsed run flags."""
    cfg: dict[str, Any] = {"platform": args.platform, "device_id": args.device, "num_workers": args.workers}
    if args.log_level:
        cfg["log_level"] = args.log_level
    if args.dump_tensor:
        cfg["enable_dump_tensor"] = args.dump_tensor
    if args.enable_dep_gen:
        cfg["enable_dep_gen"] = True
    if args.trace:
        cfg["enable_trace"] = True
    if args.float64:
        cfg["float64"] = True
    if args.task_timeout is not None:
        cfg["task_timeout_s"] = args.task_timeout
    if args.isolate is not None:
        cfg["isolate"] = args.isolate
    if args.nan_check:
        cfg["nan_check"] = True
    if args.print_intermediates:
        cfg["print_intermediates"] = args.print_intermediates
    if args.kernel_filter:
        cfg["kernel_filter"] = args.kernel_filter
    if args.serial:
        cfg["serial"] = True
    return cfg


def harness_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``run_jit`` keyword arguments from parsed harness flags."""
    return {
        "runtime_cfg": runtime_cfg_from_args(args),
        "compile_cfg": {
            **({"dump_passes": True} if args.dump_passes else {}),
            **({"check_bounds": True} if args.check_bounds else {}),
        },
        "runtime_dir": args.runtime_dir,
        "golden_data": args.golden_data,
        "save_data": args.save_data,
        "compile_only": args.compile_only,
        "seed": args.seed,
    }
