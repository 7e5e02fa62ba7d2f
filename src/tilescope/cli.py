"""The ``tilescope`` command.

tilescope doctor      check g++ (version, C++17), torch and the cache directory
tilescope localize    name the culprit of a wrong answer on a build's saved data
tilescope triage      classify any failure of a build on its saved data and name its culprit
tilescope problems    run KernelBench-style problems (Model vs ModelNew): correctness, speedup, fast_p
tilescope sweep       run a command over a grid of values; one report, each failure triaged
tilescope bisect      the first commit at which a command went wrong, and its culprit line
tilescope builds      list the build directories; tilescope clean --keep N removes old ones
tilescope mcp         serve the debugging tools to a coding agent (Model Context Protocol, stdio)

Also ``python -m tilescope``. Output piped into a reader that stops early (``| head``) ends the
command quietly with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from tilescope._version import __version__
from tilescope.agents import server as mcp_server
from tilescope.analysis.localize import localize_command as localize
from tilescope.analysis.triage import triage_command as triage
from tilescope.errors import TilescopeError
from tilescope.harness import replay
from tilescope.harness.bisect import bisect_command as bisect
from tilescope.harness.problems import problems_command as problems
from tilescope.harness.sweep import sweep_command as sweep
from tilescope.runtime import library
from tilescope.toolchain import compiler
from tilescope.tools import builds, deps, dump_viewer, trace


def _check_torch() -> tuple[str, bool, str]:
    try:
        import torch
    except ImportError:
        return ("torch", False, "not installed: pip install torch==2.13.0 (the CPU build)")
    return ("torch", True, f"{torch.__version__} ({torch.get_num_threads()} threads)")


def _check_runtime() -> tuple[str, bool, str]:
    try:
        path = library.library_path()
    except Exception as e:  # noqa: BLE001 - doctor reports whatever failed
        return ("runtime core", False, f"cannot build or load: {e}")
    return ("runtime core", True, f"built and loaded ({path})")


def cmd_doctor(args: argparse.Namespace) -> int:
    """``tilescope doctor``: g++ and torch, then (if they pass) the runtime core; 1 if one fails."""
    checks = [*compiler.check(), _check_torch()]
    if all(ok for _, ok, _ in checks):
        checks.append(_check_runtime())
    width = max(len(name) for name, _, _ in checks)
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name:<{width}}  {detail}")
    failed = [name for name, ok, _ in checks if not ok]
    if failed:
        print(
            f"\n{len(failed)} problem(s): {', '.join(failed)}. Fix them, then run `tilescope doctor` again."
        )
        return 1
    print("\neverything tilescope needs is here; next: python models/rms_norm.py -p sim")
    return 0


class _StdoutError(Exception):
    """Standard output could not be written (a full disk, an I/O error): not the command's fault."""


class _CheckedStdout:
    """sys.stdout for one command: a failed write or flush raises _StdoutError, so that it is told
    apart from a failure writing one of the command's own files."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _StdoutError(e) from e

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _StdoutError(e) from e

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def build_parser() -> argparse.ArgumentParser:
    """The ``tilescope`` command's parser, every subcommand on it."""
    parser = argparse.ArgumentParser(prog="tilescope", description="tile kernels: compile, run, debug")
    parser.add_argument("--version", action="version", version=f"tilescope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("doctor", help="check g++, torch and the cache directory")
    p.set_defaults(fn=cmd_doctor)
    p = sub.add_parser(
        "replay",
        help="re-run a build on its saved data (or --golden-data), or one task on its saved inputs (--task ID)",
    )
    replay.add_replay_args(p)
    p.set_defaults(fn=replay.run_cli)
    p = sub.add_parser(
        "localize",
        help="name the culprit of a wrong answer (task, kernel, op, line) on a build's saved data",
        description=localize.__doc__.split("\n\n")[0].replace("``", ""),
    )
    localize.add_localize_args(p)
    p.set_defaults(fn=localize.run_cli)
    p = sub.add_parser(
        "triage",
        help="classify a failure (crash, hang, race, uninitialized, wrong values, ...) and name its culprit",
        description=triage.__doc__.split("\n\n")[0].replace("``", ""),
    )
    triage.add_triage_args(p)
    p.set_defaults(fn=triage.run_cli)
    p = sub.add_parser(
        "problems",
        help="run KernelBench-style problems: each reference Model against its ModelNew solution (correct, speedup, "
        "fast_p)",
        description=problems.DESCRIPTION,
    )
    problems.add_problems_args(p)
    p.set_defaults(fn=problems.run_cli)
    p = sub.add_parser(
        "sweep",
        help="run a command over a grid of values (platforms, seeds, shapes) and report each case, failures triaged",
        description=sweep.__doc__.split("\n\n")[0],
        epilog="example: tilescope sweep --grid platform=sim,interp --grid seed=0:4 --out sweeps/rms -- "
        "python models/rms_norm.py -p {platform} --seed {seed} --save-data",
    )
    sweep.add_sweep_args(p)
    p.set_defaults(fn=sweep.run_cli)
    p = sub.add_parser(
        "bisect",
        help="find the first commit at which a command went wrong (or a precision drifted), and its culprit line",
        description=bisect.__doc__.split("\n\n")[0],
    )
    bisect.add_bisect_args(p)
    p.set_defaults(fn=bisect.run_cli)
    dump_viewer.register(sub)
    deps.register(sub)
    trace.register(sub)
    builds.register(sub)
    p = sub.add_parser(
        "mcp",
        help="serve triage, propose_fix, localize, replay, dump, deps and trace to a coding agent (MCP over stdio)",
        description=mcp_server.DESCRIPTION,
    )
    mcp_server.add_mcp_args(p)
    p.set_defaults(fn=mcp_server.run_cli)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``tilescope`` command on ``argv`` (default: ``sys.argv[1:]``); the subcommand's exit status."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a command records of how it was called
    stdout = sys.stdout
    sys.stdout = _CheckedStdout(stdout)
    try:
        status = args.fn(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # NOTE: the reader of the output went away (`tilescope dump BUILD | head`): stop quietly, as
        # cat does.
        _silence_stdout()
        return 1
    except _StdoutError as e:
        print(f"tilescope {args.command}: cannot write to standard output: {e.__cause__}", file=sys.stderr)
        _silence_stdout()
        return 1
    except TilescopeError as e:
        # NOTE: what a command did not word itself (a build file refused on its way, a link out of the
        # build): one line naming the command, never a traceback
        print(f"tilescope {args.command}: error: {e}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
