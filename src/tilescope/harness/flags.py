"""The flags every model script shares, generated from the knob registry (``knobs.py``), and
their mapping onto ``run_jit`` keyword arguments.

``add_runtime_args`` holds the flags about one run (shared with ``tilescope replay`` and the
build's ``debug/run.py``): one per runtime knob that has a flag, same name, same help.
``add_harness_args`` adds the compile knobs' flags and those about builds and data.

Invariant: a flag that is not given leaves its knob unset, so an ``override`` block, the knob's
environment variable or its default decides it.
"""

from __future__ import annotations

import argparse
from typing import Any

from tilescope.analysis.progress import seconds_arg
from tilescope.build.path_args import PATH_ARG
from tilescope.harness.specs import seed_problem
from tilescope.knobs import COMPILE_KNOBS, RUNTIME_KNOBS, Knob, compile_options, runtime_options

_GROUPS = {"run": "run", "failures": "failures", "compile": "compile"}


def _help(knob: Knob) -> str:
    default = knob.default
    shown = "" if default in (None, False) else f" (default: {default})"
    env = f"; env {knob.env_var}" if knob.env_var else ""
    return f"{knob.help}{shown}{env}".replace("%", "%%")


def _add_flags(parser: argparse.ArgumentParser, knobs: dict[str, Knob]) -> None:
    groups: dict[str, Any] = {}
    for knob in knobs.values():
        if knob.flag is None:
            continue
        group = groups.get(knob.flag.group)
        if group is None:
            group = groups[knob.flag.group] = parser.add_argument_group(_GROUPS[knob.flag.group])
        options = dict(knob.flag.options)
        if options.get("action") == "BooleanOptionalAction":
            options["action"] = argparse.BooleanOptionalAction
        group.add_argument(*knob.flag.names, dest=knob.name, default=None, help=_help(knob), **options)


def _given(args: argparse.Namespace, knobs: dict[str, Knob]) -> dict[str, Any]:
    return {
        k.name: getattr(args, k.name)
        for k in knobs.values()
        if k.flag is not None and getattr(args, k.name, None) is not None
    }


def seed_arg(text: str) -> int:
    """``--seed``'s type: a whole number in torch's seed range, else an argparse error saying so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. --seed 0)") from None
    problem = seed_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def add_runtime_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The run flags: one per runtime knob with a flag (``knobs.RUNTIME_KNOBS``)."""
    _add_flags(parser, RUNTIME_KNOBS)
    return parser


def add_compile_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The compile flags: one per compile knob with a flag (``knobs.COMPILE_KNOBS``)."""
    _add_flags(parser, COMPILE_KNOBS)
    return parser


def add_harness_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The run flags, the compile knobs' flags, and the harness's own (builds, data, seed)."""
    add_runtime_args(parser)
    add_compile_args(parser)
    g = parser.add_argument_group("tilescope harness")
    g.add_argument(
        "--runtime-dir", type=PATH_ARG, default=None, help="reuse a build directory: only edited files are rebuilt"
    )
    g.add_argument("--golden-data", type=PATH_ARG, default=None, help="replay inputs and golden from a saved data dir")
    g.add_argument("--save-data", action="store_true", help="snapshot inputs and golden into <build>/data")
    g.add_argument("--seed", type=seed_arg, default=0, help="seed for generated inputs (default: 0)")
    g.add_argument("--compile-only", action="store_true", help="stop after compiling")
    g.add_argument(
        "--localize", action="store_true", help="when an output mismatches, name the culprit (tilescope localize)"
    )
    g.add_argument(
        "--triage",
        action="store_true",
        help="when the run fails in any way (compile, crash, hang, NaN, mismatch), classify it and name the "
        "culprit (tilescope triage)",
    )
    g.add_argument(
        "--fix",
        action="store_true",
        help="with --triage (implied): propose an edit for the culprit, verified on this run's data (triage --fix)",
    )
    g.add_argument(
        "--budget", type=seconds_arg, default=None, metavar="SECONDS",
        help="with --triage/--fix: the CPU seconds triage may spend (default: $TILESCOPE_TRIAGE_BUDGET, else 60)",
    )
    g.add_argument(
        "--poison", action="store_true", help="run twice with never-written memory poisoned: name what reads it"
    )
    g.add_argument(
        "--shuffle", type=_runs, default=0, metavar="N", help="run N times on shuffled schedules and compare bit for bit"
    )
    return parser


def _runs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs") from None
    if not 2 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 2..1000 runs")
    return n


def runtime_cfg_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``runtime_cfg`` from parsed run flags (only the flags that were given)."""
    return _given(args, RUNTIME_KNOBS)


def compile_cfg_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``compile_cfg`` from parsed compile flags (only the flags that were given)."""
    return _given(args, COMPILE_KNOBS)


def knob_argv(options: dict[str, Any]) -> list[str]:
    """The flags that set ``options`` (knob name to value, as ``runtime_cfg_from_args`` and
    ``compile_cfg_from_args`` give them) again: what a child process is given to run the same way."""
    knobs = {**RUNTIME_KNOBS, **COMPILE_KNOBS}
    argv: list[str] = []
    for name, value in options.items():
        knob = knobs[name]
        if knob.flag is None or value is None:
            raise ValueError(f"{name} has no flag: it cannot be passed on a command line")
        flag = max(knob.flag.names, key=len)
        action = knob.flag.options.get("action")
        if action == "store_true":
            argv += [flag] if value else []
        elif action == "BooleanOptionalAction":
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)]
    return argv


def effective_knobs(runtime_cfg: dict[str, Any], compile_cfg: dict[str, Any]) -> dict[str, Any]:
    """The knobs with a flag whose value, once the given flags, an ``override`` block and the
    environment are applied, is not the default: what a process on another machine (whose
    environment is not this one's) must be given as flags to run the same way.

    Raises:
        ConfigError: a value a knob refuses (given, or an environment variable's).
    """
    values = {**runtime_options(runtime_cfg), **compile_options(compile_cfg)}
    known = {**RUNTIME_KNOBS, **COMPILE_KNOBS}
    return {name: v for name, v in values.items()
            if known[name].flag is not None and v is not None and v != known[name].default}  # fmt: skip


def harness_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``run_jit`` keyword arguments from parsed harness flags."""
    return {
        "runtime_cfg": runtime_cfg_from_args(args),
        "compile_cfg": compile_cfg_from_args(args),
        "runtime_dir": args.runtime_dir,
        "golden_data": args.golden_data,
        "save_data": args.save_data,
        "compile_only": args.compile_only,
        "seed": args.seed,
        "localize": args.localize,
        "triage": args.triage,
        "poison": args.poison,
        "shuffle": args.shuffle,
        "fix": args.fix,
        "budget": args.budget,
    }
