"""``tilescope problems DIR``: run a suite of problems in KernelBench's format and score the
solutions: correct trials, worst error, solution and eager times, speedup, and fast_p.

A reference ``REFS/REL.py`` defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``; its solution ``SOLUTIONS/REL.py`` defines ``class ModelNew`` whose
``forward`` calls tilescope programs (``pairing``: ``tilescope problems DIR`` is ``--refs DIR
--solutions DIR/solutions``). Each problem is evaluated as KernelBench does (``problem_eval``);
a wrong answer leaves its data for ``tilescope triage`` (``failing_data``).

Invariants: one problem failing in any way (an import, a missing name, a raise, a compile error,
a wrong answer) never stops the others; the exit status is 0 only when every problem is correct.
With ``--json`` (no file) standard output holds the JSON alone: the table, and anything the
problems print, go to standard error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope.analysis.progress import Progress, seconds_arg
from tilescope.analysis.triage.triage_command import triage
from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import atomic_write, build_base, os_problem
from tilescope.errors import TilescopeError
from tilescope.harness.flags import (
    add_compile_args,
    add_runtime_args,
    compile_cfg_from_args,
    effective_knobs,
    runtime_cfg_from_args,
    seed_arg,
)
from tilescope.harness.problems.failing_data import save_failing_data
from tilescope.harness.problems.pairing import ProblemsError, find_pairs
from tilescope.harness.problems.problem_cases import Interrupted, default_out, make_out, run_on_engine
from tilescope.harness.problems.problem_eval import KERNELBENCH_SEED, Outcome, evaluate
from tilescope.harness.problems.problem_table import RunInfo, Table, summary, to_json
from tilescope.harness.sweep.engines import add_engine_args, engine_from_args
from tilescope.harness.sweep.sweep_report import SWEEP_HTML

DESCRIPTION = (
    "Run problems in KernelBench's format: each reference REFS/REL.py (class Model, get_inputs, "
    "get_init_inputs) against its solution SOLUTIONS/REL.py (class ModelNew calling tilescope programs); "
    "report correct trials, max abs error, solution and eager times, speedup, and fast_0/fast_1. "
    "A wrong answer's data are saved for `tilescope triage BUILD`."
)


def _count(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {lo}..{hi} {what}")
        return value

    parse.__name__ = what
    return parse


def _substring(text: str) -> str:
    """``--filter``'s type: a non-empty part of a problem's name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty filter selects every problem: leave --filter out instead")
    return text.strip()


def _name(text: str) -> str:
    """``--problem``'s type: a problem's name, its path under the solutions without ``.py``."""
    name = text.strip().removesuffix(".py")
    if not name:
        raise argparse.ArgumentTypeError("an empty name names no problem: REL of SOLUTIONS/REL.py, e.g. level1/relu")
    return name


def add_problems_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``tilescope problems``'s arguments: the suite, the evaluation, and the run and compile flags."""
    p.add_argument("dir", metavar="DIR", nargs="?", type=PATH_ARG, default=None,
                   help="a folder of references REL.py whose solutions are DIR/solutions/REL.py")  # fmt: skip
    g = p.add_argument_group("problems")
    g.add_argument(
        "--refs", type=PATH_ARG, default=None, metavar="DIR", help="the references (instead of DIR)"
    )
    g.add_argument("--solutions", type=PATH_ARG, default=None, metavar="DIR",
                   help="the solutions: SOLUTIONS/REL.py solves REFS/REL.py (default: REFS/solutions)")  # fmt: skip
    g.add_argument("--filter", type=_substring, action="append", default=None, metavar="SUBSTR",
                   help="only the problems whose name (REL without .py) contains SUBSTR, in any case; repeat for "
                        "more")  # fmt: skip
    g.add_argument("--problem", type=_name, action="append", default=None, metavar="NAME",
                   help="only the problem named NAME exactly (its path under the solutions without .py); repeat for "
                        "more")  # fmt: skip
    g.add_argument("--trials", type=_count(1, 1000, "trials"), default=5, metavar="K",
                   help="correctness trials per problem, each on fresh seeded get_inputs() (default: 5)")  # fmt: skip
    g.add_argument("--perf-trials", type=_count(0, 100000, "runs"), default=10, metavar="N",
                   help="timed runs of each model of a correct problem, the median kept (default: 10; 0: no "
                        "timing, no fast_p)")  # fmt: skip
    g.add_argument(
        "--seed",
        type=seed_arg,
        default=KERNELBENCH_SEED,
        help=f"seed of the models' parameters and of the trials' seeds (default: {KERNELBENCH_SEED})",
    )
    g.add_argument("--json", nargs="?", const="-", default=None, type=PATH_ARG, metavar="FILE",
                   help="the results as JSON: on standard output alone (the table goes to standard error), or "
                        "into FILE (the table printed as usual)")  # fmt: skip
    g.add_argument(
        "--triage",
        action="store_true",
        help="triage each wrong answer on its saved data and print the verdict (tilescope triage)",
    )
    g.add_argument("--budget", type=seconds_arg, default=None, metavar="SECONDS",
                   help="with --triage: the CPU seconds each triage may spend (default: $TILESCOPE_TRIAGE_BUDGET, "
                        "else 60)")  # fmt: skip
    e = p.add_argument_group("engines (each problem a process of its own; default: all in this process)")
    add_engine_args(e, engine_default=None, what="problem")
    e.add_argument("--out", type=PATH_ARG, default=None, metavar="DIR",
                   help="with --engine: a new folder for each problem's output, builds and saved data, and sweep.json "
                        "and sweep.html (default: problems-<time> under the build directory)")  # fmt: skip
    add_runtime_args(p)
    add_compile_args(p)
    return p


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs the solutions' programs compile and run with, checked now (a ConfigError names a bad one)."""
    runtime, compile_cfg = runtime_cfg_from_args(args), compile_cfg_from_args(args)
    knobs.runtime_options(runtime)
    knobs.compile_options(compile_cfg)
    return {**runtime, **compile_cfg}


def run_problems(args: argparse.Namespace, write) -> tuple[list[Outcome], RunInfo]:
    """Every problem of the suite ``args`` names, each row written as it is done; the outcomes."""
    if args.dir is not None and args.refs is not None:
        raise ProblemsError(f"pass the references once: DIR ({args.dir}) or --refs ({args.refs}), not both")
    refs = args.refs if args.refs is not None else args.dir
    if refs is None:
        raise ProblemsError("no problems named: pass DIR (references, solutions in DIR/solutions), or --refs DIR "
                            "--solutions DIR")  # fmt: skip
    if args.budget is not None and not args.triage:
        raise ProblemsError("--budget is triage's: it needs --triage")
    options = _options(args)
    try:
        engine = engine_from_args(args) if args.engine else None
    except ValueError as e:
        raise ProblemsError(str(e)) from None
    if engine is None:
        given = [f for f, v in (("--timeout", args.timeout), ("--out", args.out)) if v is not None]
        if given:
            raise ProblemsError(f"{given[0]} needs --engine local or --engine ray (each problem a process of its own)")
        if args.jobs is not None:
            raise ProblemsError("-j needs --engine local (that many problems at once, each a process of its own)")
        ray = [f for f, v in (("--ray-address", args.ray_address), ("--ray-shared", args.ray_shared),
                              ("--case-cpus", args.case_cpus != 1.0)) if v]  # fmt: skip
        if ray:
            raise ProblemsError(f"{ray[0]} needs --engine ray (each problem a Ray task)")
    suite = find_pairs(refs, args.solutions, args.filter, args.problem)
    platform = knobs.RUNTIME_KNOBS["platform"].value(options.get("platform"))
    info = RunInfo(platform, args.trials, args.perf_trials, args.seed, str(suite.refs), str(suite.solutions),
                   suite.unsolved)  # fmt: skip
    table = Table([p.name for p in suite.pairs], write)
    if engine is not None:
        if args.out is not None:
            out = Path(args.out).resolve()  # NOTE: absolute: a Ray worker runs in the folder its `ray start` ran in
        else:
            out = default_out(build_base().resolve())
        claimed = make_out(out)
    table.header()
    if engine is not None:
        forwarded = effective_knobs(runtime_cfg_from_args(args), compile_cfg_from_args(args))
        try:
            outcomes = run_on_engine(args, engine, suite, forwarded, table, out)
        finally:
            claimed.release()
        write(summary(outcomes, info) + f"\n(each problem's output and builds: {out}; the table: {out / SWEEP_HTML})")
        return outcomes, info
    outcomes = []
    for pair in suite.pairs:
        outcome = evaluate(pair, args.trials, args.seed, args.perf_trials, options)
        save_failing_data(outcome)
        if args.triage and outcome.saved:
            try:
                outcome.triage = triage(outcome.saved, budget=args.budget, progress=Progress("triage"))
            except TilescopeError as e:
                outcome.saved_note = f"triage could not run: {e}"
        table.row(outcome)
        outcomes.append(outcome)
    write(summary(outcomes, info))
    return outcomes, info


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope problems``: 0 when every problem is correct, 1 otherwise, 130 when an engine's
    run was interrupted."""
    to_stdout = args.json == "-"
    stdout = sys.stdout

    def write(line: str) -> None:
        print(line, file=sys.stderr if to_stdout else stdout, flush=True)

    try:
        with contextlib.redirect_stdout(sys.stderr) if to_stdout else contextlib.nullcontext():
            outcomes, info = run_problems(args, write)
    except Interrupted as e:
        print(f"tilescope problems: {e}", file=sys.stderr)
        return 130
    if args.json is not None:
        text = json.dumps(to_json(outcomes, info), indent=2) + "\n"
        if to_stdout:
            stdout.write(text)
        else:
            try:
                atomic_write(Path(args.json), text)
            except OSError as e:
                raise ProblemsError(
                    f"cannot write --json {args.json}: {os_problem(e, Path(args.json))}"
                ) from None
    return 0 if all(o.correct for o in outcomes) else 1


__all__ = ["DESCRIPTION", "add_problems_args", "run_cli", "run_problems"]
