"""Build directories: which there are, and removing old ones.

``tilescope builds [BASE]`` lists the build directories under the build base (``TILESCOPE_BUILD_DIR``
or ``./build_output``): program, when it was built, size, the saved data it holds (``yes`` for
--save-data's, ``triage copy`` for what --triage saved; ``tilescope triage BUILD`` uses either), the last
harness result and whether a process is using it. ``tilescope clean --keep N [BASE]`` removes the
oldest builds of each program, keeping its N newest.

Invariants:
- A build directory is a directory named ``_jit_<program>_<YYYYMMDD_HHMMSS>[_n]`` that holds
  ``kernel_config.py``. Nothing else is ever removed: other directories, files and interrupted
  compiles (no ``kernel_config.py``) are listed as left alone.
- A process that uses a build holds a shared ``flock`` on its ``.lock`` file (``build.lock``:
  from the start of its compile, and for as long as a CompiledProgram of it exists). ``clean``
  takes the lock exclusively without waiting, skips a build it cannot lock (in use) and removes
  a build only while it holds that lock.
- ``last_run.json`` (written by the harness after a run: ``passed``, ``platform``, ``time``) is
  the last result shown; a build never run through the harness shows none.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope.build.lock import in_use, try_exclusive
from tilescope.build.paths import (
    BUILD_DIR_NAME,
    KERNEL_CONFIG,
    LAST_RUN,
    OutsideBuildError,
    build_base,
    inside,
    saved_data,
)
from tilescope.errors import TilescopeError


class BuildsError(TilescopeError):
    """The build base directory cannot be listed or cleaned."""


# -- listing --------------------------------------------------------------------------------------


@dataclass
class BuildEntry:
    """One build directory as listed: program, build time, size, saved data, last run, in use."""

    path: Path
    program: str
    built: _dt.datetime
    size: int  # bytes
    data: list[str]  # the saved data it holds: "data" (--save-data), "triage", "localize" (their tools' copies)
    last_run: dict[str, Any] | None  # last_run.json, None if the harness never ran it (no "passed": corrupt)
    in_use: bool

    def last_text(self) -> str:
        """The last run as listed: ``passed (sim, 2024-01-02 03:04:05)``, or ``-`` when never run."""
        run = self.last_run
        if not run:
            return "-"
        if not isinstance(run.get("passed"), bool):
            return f"unknown ({LAST_RUN} is not one the harness wrote)"
        verdict = "passed" if run["passed"] else "failed"
        return f"{verdict} ({run.get('platform', '?')}, {str(run.get('time', '?')).replace('T', ' ')})"


@dataclass
class Listing:
    """The builds under a base directory, and the entries there that are not builds."""

    base: Path
    builds: list[BuildEntry]  # by program, oldest first
    others: list[tuple[Path, str]]  # entries that are not builds, and why


def _size(path: Path) -> int:
    """Bytes of the files under ``path`` (links counted as links, never followed)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def _last_run(path: Path) -> dict[str, Any] | None:
    """``last_run.json``; None when there is none, a dict without ``passed`` when it is corrupt."""
    if not inside(path, LAST_RUN).exists():
        return None
    try:
        data = json.loads(inside(path, LAST_RUN).read_text())
    except (OSError, ValueError):
        return {"unreadable": True}
    return data if isinstance(data, dict) else {"unreadable": True}


def list_builds(base: str | os.PathLike | None = None) -> Listing:
    """Every build directory under ``base`` (default: the build base), by program, oldest first."""
    base = Path(base) if base is not None else build_base()
    if not base.exists():
        raise BuildsError(
            f"build base directory {base} does not exist (the base is TILESCOPE_BUILD_DIR, else ./build_output; "
            "pass another one as BASE)"
        )
    if not base.is_dir():
        raise BuildsError(
            f"{base} is not a directory (the build base holds _jit_<program>_<time> directories)"
        )
    if inside(base, KERNEL_CONFIG).is_file():
        raise BuildsError(
            f"{base} is a build directory, not a build base (the directory holding _jit_<program>_<time> "
            f"builds): pass its base, {base.parent}"
        )
    builds, others = [], []
    for entry in sorted(base.iterdir()):
        m = BUILD_DIR_NAME.fullmatch(entry.name)
        if entry.is_symlink() or not entry.is_dir():
            others.append((entry, "not a directory"))
            continue
        if m is None:
            others.append((entry, "not named _jit_<program>_<YYYYMMDD_HHMMSS>"))
            continue
        try:
            if not inside(entry, KERNEL_CONFIG).is_file():
                why = (
                    "a compile in progress"
                    if in_use(entry)
                    else "an interrupted compile, or not a tilescope build"
                )
                others.append((entry, f"no {KERNEL_CONFIG}: {why}"))
                continue
            try:
                built = _dt.datetime.strptime(m["stamp"], "%Y%m%d_%H%M%S")
            except ValueError:
                built = _dt.datetime.fromtimestamp(entry.stat().st_mtime)
            builds.append(
                BuildEntry(
                    entry,
                    m["program"],
                    built,
                    _size(entry),
                    [tool for tool, _ in saved_data(entry)],
                    _last_run(entry),
                    in_use(entry),
                )
            )
        except OutsideBuildError as e:  # a file of it is a link out of it: never read, never removed
            others.append((entry, str(e)))
    builds.sort(key=lambda b: (b.program, b.built, int(BUILD_DIR_NAME.fullmatch(b.path.name)["n"] or 0)))
    return Listing(base, builds, others)


def human_size(n: int) -> str:
    """``n`` bytes as ``512 B``, ``1.5 KB`` ... up to GB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"


def format_listing(listing: Listing) -> str:
    """The ``tilescope builds`` table, a total line, and the entries left alone."""
    lines = []
    if listing.builds:
        rows = [("BUILD", "PROGRAM", "BUILT", "SIZE", "DATA", "IN USE", "LAST RUN")]
        rows += [
            (
                b.path.name,
                b.program,
                b.built.strftime("%Y-%m-%d %H:%M:%S"),
                human_size(b.size),
                ", ".join("yes" if d == "data" else f"{d} copy" for d in b.data) or "-",
                "yes" if b.in_use else "-",
                b.last_text(),
            )
            for b in listing.builds
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    total = sum(b.size for b in listing.builds)
    lines.append(f"{len(listing.builds)} build(s), {human_size(total)} under {listing.base}")
    lines += [f"not a build, left alone: {p} ({why})" for p, why in listing.others]
    return "\n".join(lines)


# -- cleaning -------------------------------------------------------------------------------------


@dataclass
class CleanReport:
    """What ``clean_builds`` removed (or would, in a dry run), kept and skipped, and what was not a build."""

    removed: list[BuildEntry]
    kept: list[BuildEntry]
    skipped: list[tuple[BuildEntry, str]]  # not removed, and why (in use, an error)
    others: list[tuple[Path, str]]
    dry_run: bool

    @property
    def freed(self) -> int:
        """Bytes of the removed builds."""
        return sum(b.size for b in self.removed)


def clean_builds(base: str | os.PathLike | None = None, keep: int = 1, dry_run: bool = False) -> CleanReport:
    """Remove the builds of each program but its ``keep`` newest, oldest first; never a build
    in use, nor anything that is not a build."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise BuildsError(f"keep must be a number of builds >= 0, got {keep!r}")
    listing = list_builds(base)
    by_program: dict[str, list[BuildEntry]] = {}
    for b in listing.builds:
        by_program.setdefault(b.program, []).append(b)
    report = CleanReport([], [], [], listing.others, dry_run)
    old: list[BuildEntry] = []
    for builds in by_program.values():
        newest_first = builds[::-1]
        report.kept += newest_first[:keep]
        old += newest_first[keep:]
    for b in sorted(old, key=listing.builds.index):  # oldest first
        held = try_exclusive(b.path)
        if held is None:
            report.skipped.append((b, "in use by a running process"))
            continue
        try:
            if not dry_run:
                shutil.rmtree(b.path)
            report.removed.append(b)
        except OSError as e:
            report.skipped.append((b, f"cannot remove it: {e}"))
        finally:
            if held is not True:
                held.close()
    report.kept.sort(key=listing.builds.index)
    return report


def format_clean(report: CleanReport, keep: int) -> str:
    """What ``tilescope clean`` prints: each build removed or skipped, then a summary line."""
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {b.path} ({b.program}, {human_size(b.size)})" for b in report.removed]
    lines += [f"skipped {b.path}: {why}" for b, why in report.skipped]
    lines += [f"not a build, left alone: {p} ({why})" for p, why in report.others]
    lines.append(
        f"{verb} {len(report.removed)} build(s), "
        f"{'would free' if report.dry_run else 'freed'} {human_size(report.freed)}; "
        f"kept {len(report.kept)} (--keep {keep}"
        + (
            ""
            if keep == 0
            else ": the newest of each program"
            if keep == 1
            else f": the {keep} newest of each program"
        )
        + ")"
        + (f"; skipped {len(report.skipped)}" if report.skipped else "")
        + (" (dry run: nothing was removed)" if report.dry_run else "")
    )
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------------


def _keep_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of builds >= 0, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number of builds >= 0, got {n}")
    return n


def run_builds(args: argparse.Namespace) -> int:
    """``tilescope builds [BASE]``; returns the exit status."""
    try:
        print(format_listing(list_builds(args.base)))
    except BuildsError as e:
        print(f"tilescope builds: error: {e}", file=sys.stderr)
        return 1
    return 0


def run_clean(args: argparse.Namespace) -> int:
    """``tilescope clean --keep N [BASE]``; exit status 1 if a build not in use could not be removed."""
    try:
        report = clean_builds(args.base, args.keep, args.dry_run)
    except BuildsError as e:
        print(f"tilescope clean: error: {e}", file=sys.stderr)
        return 1
    print(format_clean(report, args.keep))
    return 1 if any(not why.startswith("in use") for _, why in report.skipped) else 0


def register(subparsers: Any) -> None:
    """Add ``builds [BASE]`` and ``clean --keep N [BASE]`` to the ``tilescope`` command."""
    base_help = "the build base directory (default: TILESCOPE_BUILD_DIR, else ./build_output)"
    p = subparsers.add_parser(
        "builds", help="list build directories: program, time, size, saved data, in use, last result"
    )
    p.add_argument("base", nargs="?", default=None, metavar="BASE", help=base_help)
    p.set_defaults(fn=run_builds)
    p = subparsers.add_parser(
        "clean", help="remove old build directories, keeping the N newest of each program (never one in use)"
    )
    p.add_argument("base", nargs="?", default=None, metavar="BASE", help=base_help)
    p.add_argument(
        "--keep", type=_keep_count, required=True, metavar="N", help="builds to keep per program (newest)"
    )
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(fn=run_clean)
