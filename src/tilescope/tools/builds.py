"""Build directories: which there are, and removing old ones.

``tilescope builds [BASE]`` lists the build directories under the build base (``TILESCOPE_BUILD_DIR``
or ``./build_output``): program, when it was built, size, the saved data it holds (``yes`` for
--save-data's, ``triage copy`` for what --triage saved; ``tilescope triage BUILD`` uses either; only
whole snapshots: ``interrupted save`` for what a save that did not finish left), the last
harness result and whether a process is using it. ``tilescope clean --keep N [BASE]`` removes the
oldest builds of each program, keeping its N newest.

Invariants:
- A build directory is one tilescope provably made: a directory named
  ``_jit_<program>_<YYYYMMDD_HHMMSS>[_n]`` holding the ``kernel_config.py`` a compile writes (its
  first line is tilescope's header) and a ``build_state.json`` of tilescope's format. Anything
  else (other directories, files, interrupted compiles without ``kernel_config.py``, a directory
  whose ``kernel_config.py`` or ``build_state.json`` tilescope did not write) is listed as "not a
  build, left alone", with the reason, and never touched.
- ``clean`` removes from a build only the entries tilescope writes there (``paths.BUILD_ENTRIES``,
  the temporary files of interrupted writes of them, and a ``__pycache__`` holding only the
  bytecode of the build's own ``scene_test.py`` and ``kernel_config.py``), ``kernel_config.py``
  first. A symbolic link is never tilescope's. When anything else is left the directory is kept
  with it, and the report names what was kept; otherwise the directory goes too.
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
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope.build.lock import in_use, try_exclusive
from tilescope.build.path_args import PATH_ARG, path_problem
from tilescope.build.paths import (
    BUILD_DIR_NAME,
    BUILD_LOCK,
    BUILD_STATE,
    KERNEL_CONFIG,
    LAST_RUN,
    SCENE_TEST,
    OutsideBuildError,
    build_base,
    build_entry_name,
    inside,
    interrupted_saves,
    saved_data,
)
from tilescope.build.state import STATE_FORMAT
from tilescope.codegen.kernel_config import written_by_tilescope
from tilescope.errors import TilescopeError, clipped


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
    foreign: list[Path] = field(default_factory=list)  # entries in it that tilescope did not write
    interrupted: list[Path] = field(default_factory=list)  # what saves of data that did not finish left

    def data_text(self) -> str:
        """The DATA column: ``yes`` (--save-data's snapshot), ``triage copy``, ``interrupted save``, or ``-``."""
        held = ["yes" if d == "data" else f"{d} copy" for d in self.data]
        return ", ".join(held + (["interrupted save"] if self.interrupted else [])) or "-"

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


def _entry_size(path: Path) -> int:
    """Bytes of a file or link, or of the files under a directory."""
    return _size(path) if path.is_dir() and not path.is_symlink() else os.lstat(path).st_size


# the bytecode Python writes when the build's own modules run (`pytest <build>`): cpython-311.pyc, ...
_OWN_BYTECODE = re.compile(rf"({Path(SCENE_TEST).stem}|{Path(KERNEL_CONFIG).stem})\.[\w.-]+\.pyc")


def _tilescope_wrote(entry: Path) -> bool:
    """Whether ``entry``, at the top of a build, is one tilescope writes there (never a link)."""
    if entry.is_symlink():
        return False
    if entry.name == "__pycache__" and entry.is_dir():
        return all(_OWN_BYTECODE.fullmatch(f.name) and f.is_file() and not f.is_symlink() for f in entry.iterdir())
    return build_entry_name(entry.name)


def foreign_entries(work: Path) -> list[Path]:
    """The entries at the top of the build ``work`` that tilescope did not write, by name."""
    return sorted(e for e in work.iterdir() if not _tilescope_wrote(e))


def not_a_build(entry: Path) -> str | None:
    """Why the directory ``entry`` (named like a build) is not provably one tilescope made; None
    when it is: its ``kernel_config.py`` starts with tilescope's header and its ``build_state.json``
    is of tilescope's format."""
    config = inside(entry, KERNEL_CONFIG)
    if not config.is_file() or config.is_symlink():
        why = "a compile in progress" if in_use(entry) else "an interrupted compile, or not a tilescope build"
        return f"no {KERNEL_CONFIG}: {why}"
    try:
        with open(config, encoding="utf-8", errors="replace") as f:
            first = f.readline(500)
    except OSError as e:
        return f"its {KERNEL_CONFIG} cannot be read ({e.strerror})"
    if not written_by_tilescope(first):
        return f"its {KERNEL_CONFIG} was not written by tilescope"
    state_path = inside(entry, BUILD_STATE)
    if not state_path.is_file() or state_path.is_symlink():
        return f"no {BUILD_STATE}, which every build tilescope compiles holds: not a tilescope build"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return f"its {BUILD_STATE} is not one tilescope writes: not JSON"
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return f"its {BUILD_STATE} is not one tilescope writes: not of format {STATE_FORMAT}"
    if not isinstance(state.get("sources"), dict) or not isinstance(state.get("ir"), dict):
        return f"its {BUILD_STATE} is not one tilescope writes: no 'sources' and 'ir'"
    return None


def _last_run(path: Path) -> dict[str, Any] | None:
    """``last_run.json``; None when there is none, a dict without ``passed`` when it is corrupt."""
    if not inside(path, LAST_RUN).exists():
        return None
    try:
        data = json.loads(inside(path, LAST_RUN).read_text())
    except (OSError, ValueError):
        return {"unreadable": True}
    return data if isinstance(data, dict) else {"unreadable": True}


def _listed(entry: Path, m: re.Match) -> BuildEntry | str:
    """The build ``entry`` as listed, or why it is not a build."""
    why = not_a_build(entry)
    if why is not None:
        return why
    try:
        built = _dt.datetime.strptime(m["stamp"], "%Y%m%d_%H%M%S")
    except ValueError:
        built = _dt.datetime.fromtimestamp(entry.stat().st_mtime)
    return BuildEntry(
        entry,
        m["program"],
        built,
        _size(entry),
        [tool for tool, _ in saved_data(entry)],
        _last_run(entry),
        in_use(entry),
        foreign_entries(entry),
        interrupted_saves(entry),
    )


def list_builds(base: str | os.PathLike | None = None) -> Listing:
    """Every build directory under ``base`` (default: the build base), by program, oldest first."""
    base = Path(base) if base is not None else build_base()
    problem = path_problem(base)
    if problem is not None:
        raise BuildsError(f"build base directory {clipped(base)}: {problem}")
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
            listed = _listed(entry, m)
        except OutsideBuildError as e:  # a file of it is a link out of it: never read, never removed
            listed = str(e)
        if isinstance(listed, str):
            others.append((entry, listed))
        else:
            builds.append(listed)
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
                b.data_text(),
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
    """What ``clean_builds`` removed (or would, in a dry run), kept and skipped, and what was not a build.

    A removed build whose directory held entries tilescope did not write keeps its directory with
    them (``BuildEntry.foreign``)."""

    removed: list[BuildEntry]
    kept: list[BuildEntry]
    skipped: list[tuple[BuildEntry, str]]  # not removed, and why (in use, an error)
    others: list[tuple[Path, str]]
    dry_run: bool

    @property
    def freed(self) -> int:
        """Bytes of what was removed from the removed builds."""
        return sum(b.size - sum(_entry_size(e) for e in b.foreign) for b in self.removed)


def _remove_entry(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _remove_build(work: Path) -> list[Path]:
    """Remove what tilescope wrote in ``work`` (``kernel_config.py`` first, so that what an error
    leaves is no build; the lock file last), and the directory unless something else is in it;
    the entries kept."""
    foreign = foreign_entries(work)
    ours = sorted((e for e in work.iterdir() if e not in foreign and e.name != BUILD_LOCK),
                  key=lambda e: (e.name != KERNEL_CONFIG, e.name))  # fmt: skip
    for entry in ours:
        _remove_entry(entry)
    inside(work, BUILD_LOCK).unlink(missing_ok=True)
    if not foreign:
        work.rmdir()
    return foreign


def clean_builds(base: str | os.PathLike | None = None, keep: int = 1, dry_run: bool = False) -> CleanReport:
    """Remove the builds of each program but its ``keep`` newest, oldest first; never a build
    in use, nor anything that is not a build, nor a file in a build that tilescope did not write."""
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
            b.foreign = foreign_entries(b.path) if dry_run else _remove_build(b.path)
            report.removed.append(b)
        except OSError as e:
            report.skipped.append((b, f"cannot remove it: {e}"))
        finally:
            if held is not True:
                held.close()
    report.kept.sort(key=listing.builds.index)
    return report


def _foreign_text(entries: list[Path]) -> str:
    """``3 files tilescope did not write: plots/, results.csv``: how many files, and the entries."""
    count = 0
    for e in entries:
        count += sum(len(files) for _, _, files in os.walk(e)) if e.is_dir() and not e.is_symlink() else 1
    names = [e.name + (" (a link)" if e.is_symlink() else "/" if e.is_dir() else "") for e in entries]
    shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
    return f"{count} file{'s' if count != 1 else ''} tilescope did not write: {shown}"


def format_clean(report: CleanReport, keep: int) -> str:
    """What ``tilescope clean`` prints: each build removed or skipped, what a removed build's
    directory kept, then a summary line."""
    verb = "would remove" if report.dry_run else "removed"
    lines = []
    for b in report.removed:
        freed = b.size - sum(_entry_size(e) for e in b.foreign)
        lines.append(f"{verb} {b.path} ({b.program}, {human_size(freed)})")
        if b.foreign:
            keeps = "would keep" if report.dry_run else "kept"
            lines.append(f"  {keeps} the directory: {_foreign_text(b.foreign)}")
    lines += [f"skipped {b.path}: {why}" for b, why in report.skipped]
    lines += [f"not a build, left alone: {p} ({why})" for p, why in report.others]
    partial = sum(1 for b in report.removed if b.foreign)
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
        + (
            f"; {partial} director{'ies' if partial > 1 else 'y'} kept for files tilescope did not write"
            if partial
            else ""
        )
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
    p.add_argument("base", nargs="?", default=None, metavar="BASE", type=PATH_ARG, help=base_help)
    p.set_defaults(fn=run_builds)
    p = subparsers.add_parser(
        "clean", help="remove old build directories, keeping the N newest of each program (never one in use)"
    )
    p.add_argument("base", nargs="?", default=None, metavar="BASE", type=PATH_ARG, help=base_help)
    p.add_argument(
        "--keep", type=_keep_count, required=True, metavar="N", help="builds to keep per program (newest)"
    )
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(fn=run_clean)
