"""The names inside a build directory, and the one way files in it are replaced.

Invariants:
- Every path a writer or a reader of a build uses is named here once (DESIGN §2's table):
  ``dfx_outputs/`` and what goes in it, ``kernel_config.py``, ``build_state.json``, ``ir/``,
  ``data/``.
- ``atomic_write`` / ``atomic_write_bytes`` / ``atomic_save`` make a file appear complete or not
  at all: the content goes to a temporary file beside it, created exclusively and named for the
  process, the thread and a count (two threads or two processes never share one; its
  permissions are the usual 0666 less the umask), and is moved over the target with
  ``os.replace``.
- Confinement: every file a tool reads or writes under a build is reached with ``inside(base,
  *names)`` (or ``dfx_dir``, which uses it), ``base`` being the build or a folder already reached
  so. Each component is checked in turn: one that is a symbolic link must resolve inside ``base``,
  else the path is refused with a message naming the link and where it points. No path under a
  build is made with ``/`` from the names below (``tests/build/test_confinement.py`` enforces it),
  so a build handed over by someone else, or a link made by mistake, cannot make a tool read or
  write a file outside it.
- ``confined`` is the same check for a path that a build's data file names (``build_state.json``'s
  IR dump, ``kernel_config.py``'s sources and binaries, a saved task's files, a tensor dump's
  payload file), which must also be relative and without ``..``.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import errno
import itertools
import os
import re
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from tilescope.errors import BuildFileError, TilescopeError, clipped
from tilescope.knobs import COMPILE_KNOBS

KERNEL_CONFIG = "kernel_config.py"  # written last: a build without it is incomplete
BUILD_LOCK = ".lock"  # flock'd by every process using the build (build.lock)
LAST_RUN = "last_run.json"  # the harness's last result: passed, platform, time
BUILD_STATE = "build_state.json"
REPORT_DIR = "report"  # report/report.json and report/summary.txt: the compile report
REPORT_JSON = "report.json"  # report/report.json
PASSES_DUMP_DIR = "passes_dump"  # dump_passes: passes_dump/NN_after_<Pass>.py
DEBUG_RUN = "debug/run.py"  # runs the build on its saved data
SCENE_TEST = "scene_test.py"  # the build as a pytest case (its inputs and golden to be written)
TASK_JSON = "task.json"  # dfx_outputs/failure/task_<id>/task.json: a saved task's arguments
DATA_META = "meta.json"  # data/meta.json: the tolerances and seed a snapshot was saved with
DATA_REFERENCES = "intermediates"  # data/intermediates/<name>.pt: golden_fn's intermediates and probes
DATA_SECOND = "second"  # data/second/{in,out,meta.json}: a second input set (another seed) and its golden
IR_DIR = "ir"  # ir/<program>.py: the final IR as DSL source
DATA_DIR = "data"  # --save-data snapshots: data/in, data/out, data/meta.json
DFX_DIR = "dfx_outputs"  # everything a run writes for debugging
FAILURE_DIR = "failure"  # dfx_outputs/failure/task_<id>: a failing task's saved inputs
INTERMEDIATES_DIR = "intermediates"  # dfx_outputs/intermediates[_n]: print_intermediates
TENSOR_DUMP_DIR = "tensor_dump"  # dfx_outputs/tensor_dump/: the manifest and the payloads
TENSOR_DUMP_JSON = "tensor_dump.json"
TENSOR_DUMP_BIN = "tensor_dump.bin"
DEPS_JSON = "deps.json"
DEPS_HTML = "deps_graph.html"
TRACE_JSON = "trace.json"
PMU_CSV = "pmu.csv"  # dfx_outputs/pmu.csv: enable_pmu
CRASH_REPORT = "crash_report.txt"  # dfx_outputs/crash_report[_<id>].txt
LOCALIZE_DIR = "localize"  # dfx_outputs/localize/: tilescope localize's report
TRIAGE_DIR = "triage"  # dfx_outputs/triage/: tilescope triage's runs (audit/: the access audit build)
LOCALIZE_JSON = "report.json"
LOCALIZE_HTML = "report.html"
LOCALIZE_DATA = "data"  # dfx_outputs/localize/data: the data of a run localized by --localize
PROBE_DIR = "probe"  # dfx_outputs/localize/probe/<kernel>.cpp and .so: localize's probe build
AUDIT_DIR = "audit"  # dfx_outputs/triage/audit/<kernel>.so: triage's access audit build
FIX_DIR = "fix"  # dfx_outputs/triage/fix/: the repair search's copies of the program
FIX_DIFF = "fix.diff"  # dfx_outputs/triage/fix.diff: the verified fix, as a unified diff of the user's file
GOLDEN_TRACE = "golden/trace.pt"  # data/golden/trace.pt: the golden's own steps (golden_trace)


class OutsideBuildError(BuildFileError):
    """A path under a build leads out of it through a symbolic link."""


def _leaves(root: Path, link: Path, base: str | os.PathLike) -> str | None:
    """Why the symbolic link ``link`` leads out of ``root`` (``base`` resolved); None when it stays inside."""
    try:
        target = link.resolve(strict=False)
    except (OSError, RuntimeError):  # a loop of links
        return f"{link} is a symbolic link that loops"
    if target == root or root in target.parents:
        return None
    try:
        points = os.readlink(link)
    except OSError:
        points = str(target)
    shown = points if points == str(target) else f"{points} ({target})"
    return f"{link} is a symbolic link to {shown}, outside {base}"


def _walk(base: str | os.PathLike, names: tuple[str, ...]) -> tuple[Path, str | None]:
    """``base / names...`` and why it leads out of ``base`` (None when it does not)."""
    path = Path(base)
    root: Path | None = None
    for name in names:
        for part in PurePosixPath(name).parts:
            if part in ("/", "..", "."):
                return path, f"{name!r} is not a name inside {base}"
            path = path / part
            if path.is_symlink():
                root = root or Path(base).resolve()
                why = _leaves(root, path, base)
                if why is not None:
                    return path, why
    return path, None


def inside(base: str | os.PathLike, *names: str) -> Path:
    """``base / names...`` once no component of it is a symbolic link leading out of ``base``.

    ``names`` are relative names (``"dfx_outputs"``, ``"triage/fix"``), never ``..``. The path is
    returned as ``base`` spells it (not resolved), so messages name it the way the user named the
    build; nothing is created.

    Raises:
        OutsideBuildError: a component is a symbolic link that leads out of ``base`` (or loops).
    """
    path, why = _walk(base, names)
    if why is not None:
        raise OutsideBuildError(
            f"{why}: tilescope reads and writes only inside a build, so it is refused. Remove the link "
            "(copy what it points to into the build if it is needed there)"
        )
    return path


def outside_reason(base: str | os.PathLike, relative: Any) -> str | None:
    """Why ``relative`` (as a data file holds it) is not a path inside ``base``; None when it is."""
    if not isinstance(relative, str) or not relative:
        return f"expected a path relative to {base}"
    if PurePosixPath(relative).is_absolute() or Path(relative).is_absolute():
        return f"an absolute path, expected one relative to {base}"
    if ".." in PurePosixPath(relative).parts:
        return f"a path that climbs out with '..', expected one inside {base}"
    return _walk(base, (relative,))[1]


def confined(
    base: str | os.PathLike, relative: Any, what: str, fix: str = "compile the program again"
) -> Path:
    """``base / relative`` when it lies inside ``base``, symbolic links resolved; else a BuildFileError.

    The path is returned as ``base`` spells it (not resolved), so messages name it the way the
    user named the build.

    Args:
        base: the directory the path is relative to (a build, a saved task's directory, ...).
        relative: the path as a data file holds it.
        what: where it was read, for the message (``"build_state.json's ir.file"``).
        fix: what to do about a refused path.
    """
    why = outside_reason(base, relative)
    if why is not None:
        raise BuildFileError(
            f"{what} is {relative!r}: {why}. A build's files name only files inside the build; this "
            f"value was edited in or did not come from tilescope, so it is refused: {fix}"
        )
    return Path(base) / relative


def saved_data(work_dir: str | os.PathLike) -> list[tuple[str, Path]]:
    """The data directories a build holds (each with ``in/``), the one a run saved with
    --save-data first (``("data", <work>/data)``), then the copies ``--triage`` and ``--localize``
    saved for their tool (``("triage", <work>/dfx_outputs/triage/data)``), the newest first."""
    found = [("data", inside(work_dir, DATA_DIR))] if inside(work_dir, DATA_DIR, "in").is_dir() else []
    copies = [(tool, inside(work_dir, DFX_DIR, tool, LOCALIZE_DATA)) for tool in (TRIAGE_DIR, LOCALIZE_DIR)]
    copies = [(tool, d) for tool, d in copies if inside(d, "in").is_dir()]
    return found + sorted(copies, key=lambda c: (c[1] / "in").stat().st_mtime, reverse=True)


def dfx_dir(work_dir: str | os.PathLike, *names: str) -> Path:
    """``<work_dir>/dfx_outputs[/names...]``, checked with ``inside`` and created if missing."""
    out = inside(work_dir, DFX_DIR, *names)
    out.mkdir(parents=True, exist_ok=True)
    return out


# the name new_build_dir gives: the program, the time, and a count when that name was taken
BUILD_DIR_NAME = re.compile(r"_jit_(?P<program>.+)_(?P<stamp>\d{8}_\d{6})(?:_(?P<n>\d+))?")


def build_base() -> Path:
    """The directory new builds go under: ``TILESCOPE_BUILD_DIR``, else ``./build_output``."""
    return Path(COMPILE_KNOBS["build_dir"].value())


BUILD_BASE_FIX = "set TILESCOPE_BUILD_DIR (or compile_cfg build_dir) to a directory you can write"


def write_problem(exc: OSError, path: Path) -> str:
    """Why ``path`` (or a file under it) cannot be written, in words: ``is a file, not a directory``,
    ``no space left on its device``, else the system's reason."""
    in_the_way = _file_in_the_way(path)
    if in_the_way is not None:
        return f"{in_the_way} is a file, not a directory"
    if exc.errno == errno.ENOSPC:
        return "no space left on its device"
    return exc.strerror or str(exc)


PATH_MAX, NAME_MAX = 4096, 255  # the longest path, and name in it, Linux opens (bytes)


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest of ``path`` and its parents that exists, when it is a file (where a directory
    belongs); None when it is a directory or cannot be looked at."""
    try:
        for p in (path, *path.parents):
            if p.exists():
                return None if p.is_dir() else p
    except OSError:
        return None
    return None


def path_problem(value: str, what: str) -> str | None:
    """Why the path ``value`` (an argument) cannot name a file on this system: longer than a path
    or a name in it can be; None when it can. Checked before the path is used, so that an absurd
    argument is refused at once, and quoted clipped."""
    size = len(os.fsencode(value)) if len(value) <= PATH_MAX else len(value)
    longest = max((len(os.fsencode(part)) for part in value.split(os.sep)), default=0) if size <= PATH_MAX else 0
    if size <= PATH_MAX and longest <= NAME_MAX:
        return None
    limit = f"a path holds at most {PATH_MAX} bytes" if size > PATH_MAX else f"a name in a path at most {NAME_MAX} bytes"
    return f"{what} {clipped(value)} is too long to name a file ({limit}): pass the path of the directory"


def os_problem(exc: OSError, path: Path | None = None) -> str:
    """An OSError as the condition in words, the path it is about (clipped; ``path`` when the
    error names none) and what to do: a read-only file system, a file where a directory belongs,
    no space left, a name too long, permission denied; else the system's reason. Never a
    tilescope defect: the machine's state."""
    name = exc.filename if isinstance(exc.filename, str | bytes | os.PathLike) else path
    where = clipped(os.fsdecode(name)) if name is not None else "a file"
    code = exc.errno
    if code == errno.ENAMETOOLONG:
        return (f"{where} is a name too long for the file system (a path holds at most {PATH_MAX} bytes, a name in it "
                f"{NAME_MAX}): use a shorter path")  # fmt: skip
    in_the_way = _file_in_the_way(Path(os.fsdecode(name))) if name is not None else None
    if in_the_way is not None:
        return (f"{clipped(str(in_the_way))} is a file where a directory belongs: move it away (tilescope keeps "
                "its outputs in a directory of that name)")  # fmt: skip
    if code == errno.EROFS:
        return (f"{where} is on a read-only file system: work on a copy in a directory you can write "
                "(cp -r BUILD DIR)")  # fmt: skip
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the device holding {where}: free some space (`tilescope clean` removes old "
                "builds) and run again")  # fmt: skip
    if code in (errno.EACCES, errno.EPERM):
        return (f"permission denied on {where}: make it writable for this user, or copy the build to a directory "
                "you can write")  # fmt: skip
    if code == errno.ENOENT:
        return f"{where} does not exist"
    return f"{where}: {exc.strerror or type(exc).__name__}"


def writable_dir(folder: Path, tool: str) -> Path:
    """``folder``, created if missing and checked writable by writing a small file in it; a
    TilescopeError saying why not (``os_problem``) before ``tool`` starts work it could not save."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = _open_temp(folder / ".writable")
        try:
            os.write(fd, bytes(4096))
        finally:
            os.close(fd)
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise TilescopeError(f"{tool} cannot write {clipped(str(folder))}: {os_problem(e, folder)}") from None
    return folder


def new_build_dir(base: Path, name: str) -> Path:
    """``<base>/_jit_<name>_<YYYYMMDD_HHMMSS>[_n]``, created exclusively.

    Raises:
        TilescopeError: ``base`` cannot hold a new directory (a file in the way, read only, full).
    """
    stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    stem = f"_jit_{name}_{stamp}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(10_000):
            path = base / (stem if n == 0 else f"{stem}_{n}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
    except OSError as e:
        raise TilescopeError(
            f"cannot create a build directory under {base}: {write_problem(e, base)}; {BUILD_BASE_FIX}"
        ) from None
    raise TilescopeError(f"cannot create a build directory under {base}: too many builds named {stem}_*")


_TEMP_COUNT = itertools.count()


def _open_temp(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` for writing, named for this process and thread (and a count),
    created exclusively with the usual permissions (0666 less the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_TEMP_COUNT)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # left by a process that had this pid and died mid-write
            continue


def _renameat2() -> Any:
    """libc's ``renameat2`` (Linux), or None."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
        _RENAMEAT2 = getattr(libc, "renameat2", False)
    return _RENAMEAT2 or None


_RENAMEAT2: Any = None
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def move_over(tmp: Path, path: Path) -> None:
    """``os.replace(tmp, path)``, ``tmp`` being a new file beside ``path``. On Linux an existing
    regular file is swapped with ``tmp`` in one step (``renameat2`` ``RENAME_EXCHANGE``), then
    removed: readers still see either file whole, but ext4 does not write the new file's data out
    before the rename returns, as it does for a rename over a file (tens of ms for a large one)."""
    exchange = _renameat2()
    try:
        regular = exchange is not None and stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        regular = False
    if regular and exchange(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0:
        os.unlink(tmp)  # the old file
        return
    os.replace(tmp, path)  # no file there, not Linux, or a file system without the exchange


def atomic_replace(path: Path, write: Callable[[Path], Any]) -> None:
    """Call ``write(tmp)`` on a fresh temporary file beside ``path``, then move it over ``path``.

    The temporary file is removed if ``write`` raises (or the process is interrupted in it).
    """
    fd, tmp = _open_temp(path)
    os.close(fd)
    try:
        write(tmp)
        move_over(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes | memoryview) -> None:
    """Replace ``path`` with ``data`` atomically."""
    fd, tmp = _open_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        move_over(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_save(value: Any, path: Path) -> None:
    """``torch.save(value, path)`` atomically."""
    import torch

    atomic_replace(path, lambda tmp: torch.save(value, tmp))
