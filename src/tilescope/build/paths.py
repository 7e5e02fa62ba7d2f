"""The names inside a build directory, and the one way files in it are replaced.

Invariants:
- Every path a writer or a reader of a build uses is named here once (DESIGN §2's table):
  ``dfx_outputs/`` and what goes in it, ``kernel_config.py``, ``build_state.json``, ``ir/``,
  ``data/``.
- ``atomic_write`` / ``atomic_write_bytes`` / ``atomic_save`` make a file appear complete or not
  at all: the content goes to a temporary file beside it, created exclusively and named for the
  process, the thread and a count (two threads or two processes never share one; its
  permissions are the usual 0666 less the umask), and is moved over the target with
  ``os.replace``. ``atomic_dir`` does the same for a whole directory (a data snapshot): it is
  filled under a temporary name beside its place and renamed into place with one ``os.rename``.
- What a run records into its build after the fact (``last_run.json``) goes through
  ``write_into_build``: only into a complete build, and no directory is ever made for it, so a
  run of a build that is gone, cleaned or interrupted leaves nothing behind, not even a stub.
- torch.save's failed writes are OSErrors (``torch_save``): torch raises a RuntimeError, with no
  errno, when the disk fills up; it is raised as ENOSPC (the device has no room left), so every
  writer reports it as any other failed write.
- ``saved_data`` counts only whole snapshots (``in/``, ``out/`` and ``meta.json``); what a killed
  save left (``interrupted_saves``) is no data to any reader.
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
import shutil
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from tilescope.errors import BuildFileError, TilescopeError, clipped, file_size_limit
from tilescope.knobs import COMPILE_KNOBS

KERNEL_CONFIG = "kernel_config.py"  # written last: a build without it is incomplete
BUILD_LOCK = ".lock"  # flock'd by every process using the build (build.lock)
LAST_RUN = "last_run.json"  # the harness's last result: passed, platform, time
BUILD_STATE = "build_state.json"
REPORT_DIR = "report"  # report/report.json and report/summary.txt: the compile report
REPORT_JSON = "report.json"  # report/report.json
PASSES_DUMP_DIR = "passes_dump"  # dump_passes: passes_dump/NN_after_<Pass>.py
DEBUG_DIR = "debug"
DEBUG_RUN = f"{DEBUG_DIR}/run.py"  # runs the build on its saved data
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
KERNELS_DIR = "kernels"  # kernels/<core>/<kernel>.cpp and its .so
ORCHESTRATION_DIR = "orchestration"  # orchestration/<program>.cpp and its .so

# Every entry tilescope writes at the top of a build directory: `tilescope clean` removes these, and
# the temporary files of interrupted writes of them (TEMP_NAME), and never anything else.
BUILD_ENTRIES = frozenset(
    {KERNEL_CONFIG, BUILD_LOCK, LAST_RUN, BUILD_STATE, REPORT_DIR, PASSES_DUMP_DIR, DEBUG_DIR, SCENE_TEST,
     IR_DIR, DATA_DIR, DFX_DIR, KERNELS_DIR, ORCHESTRATION_DIR}
)  # fmt: skip
# the temporary file (or directory) an atomic write makes beside its target: .<name>.<pid>.<thread>.<n>.tmp
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.(?P<thread>\d+)\.(?P<n>\d+)\.tmp")


def build_entry_name(name: str) -> bool:
    """Whether ``name`` is one tilescope writes at the top of a build directory (``BUILD_ENTRIES``),
    or the temporary name of an interrupted write of one."""
    temp = TEMP_NAME.fullmatch(name)
    return (temp["name"] if temp else name) in BUILD_ENTRIES


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


def complete_snapshot(data_dir: str | os.PathLike) -> bool:
    """Whether ``data_dir`` holds a whole data snapshot: ``in/``, ``out/`` and ``meta.json``, which a
    save writes last (a snapshot appears whole, renamed into place: ``atomic_dir``)."""
    d = Path(data_dir)
    return (d / "in").is_dir() and (d / "out").is_dir() and (d / DATA_META).is_file()


def _snapshot_places(work: Path) -> list[tuple[str, Path]]:
    return [("data", work / DATA_DIR)] + [(t, work / DFX_DIR / t / LOCALIZE_DATA) for t in (TRIAGE_DIR, LOCALIZE_DIR)]


def saved_data(work_dir: str | os.PathLike) -> list[tuple[str, Path]]:
    """The whole data snapshots a build holds, the one a run saved with --save-data first
    (``("data", <work>/data)``), then the copies ``--triage`` and ``--localize`` saved for their
    tool (``("triage", <work>/dfx_outputs/triage/data)``), the newest first. A snapshot a save left
    incomplete, and the temporary directory of a save that was killed, are not among them."""
    whole = [(tool, d) for tool, d in _snapshot_places(Path(work_dir)) if complete_snapshot(d)]
    copies = sorted((c for c in whole if c[0] != "data"), key=lambda c: (c[1] / DATA_META).stat().st_mtime)
    return [c for c in whole if c[0] == "data"] + copies[::-1]


def interrupted_saves(work_dir: str | os.PathLike) -> list[Path]:
    """What saves of data snapshots that did not finish left in a build: the temporary directories
    of saves whose process is gone, and snapshot directories without their ``meta.json``."""
    left = []
    for _, d in _snapshot_places(Path(work_dir)):
        left += abandoned_temps(d)
        if d.is_dir() and any(d.iterdir()) and not complete_snapshot(d):
            left.append(d)
    return left


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
    if code == errno.EFBIG:
        return (f"{where} would be larger than the file size limit of this process (ulimit -f: {file_size_limit()}): "
                "raise it (ulimit -f unlimited) and run again")  # fmt: skip
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


def temp_name(path: Path) -> Path:
    """A new temporary name beside ``path`` (``TEMP_NAME``), for this process and thread."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_TEMP_COUNT)}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def abandoned_temps(path: Path) -> list[Path]:
    """The temporary files and directories beside ``path`` that writes of it left in a process that
    is gone (killed mid-write): no process will finish or remove them."""
    try:
        beside = list(path.parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in beside:
        m = TEMP_NAME.fullmatch(entry.name)
        if m and m["name"] == path.name and not _alive(int(m["pid"])):
            found.append(entry)
    return sorted(found)


def atomic_dir(path: Path, write: Callable[[Path], Any]) -> None:
    """Make the directory ``path`` appear whole or not at all: ``write(tmp)`` fills a new
    temporary directory beside it, which one ``os.rename`` then moves to ``path`` (``path`` must
    not exist, or be an empty directory: else the rename's OSError, ENOTEMPTY or EEXIST).

    The temporary directory is removed when ``write`` or the rename fails; those that killed
    writes of ``path`` left (``abandoned_temps``) are removed first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for left in abandoned_temps(path):
        shutil.rmtree(left, ignore_errors=True)
    while True:
        tmp = temp_name(path)
        try:
            tmp.mkdir()
            break
        except FileExistsError:  # left by a process that had this pid and died mid-write
            continue
    try:
        write(tmp)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _open_temp(path: Path, parents: bool = True) -> tuple[int, Path]:
    """A new file beside ``path`` for writing, named for this process and thread (and a count),
    created exclusively with the usual permissions (0666 less the umask); ``path``'s directory is
    made first with ``parents``, else a missing one is a FileNotFoundError."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = temp_name(path)
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


def atomic_write_bytes(path: Path, data: bytes | memoryview, parents: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (``parents=False``: never make its directory)."""
    fd, tmp = _open_temp(path, parents)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        move_over(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str, parents: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (``parents=False``: never make its directory)."""
    atomic_write_bytes(path, text.encode("utf-8"), parents)


def write_into_build(work: Path, name: str, text: str) -> bool:
    """Replace ``work/name`` with ``text`` atomically when ``work`` is a complete build (it holds
    ``kernel_config.py``), making no directory: a build that is gone, cleaned or an interrupted
    compile gets nothing, not even a stub. Whether it was written; an OSError if it cannot be."""
    config = work / KERNEL_CONFIG
    if not config.is_file() or config.is_symlink():
        return False
    atomic_write(work / name, text, parents=False)
    return True


# NOTE: torch's writer raises a RuntimeError, never an OSError, when a write fails; on a full disk it
# says "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", with no errno in it
_TORCH_WRITER = ("inline_container", "PytorchStreamWriter", "file write failed")


def _no_room(folder: Path) -> bool:
    try:
        return os.statvfs(folder).f_bavail == 0
    except OSError:
        return False


def torch_write_error(e: RuntimeError, path: Path) -> OSError | None:
    """The OSError a failed ``torch.save(..., path)`` (``e``) stands for, or None when ``e`` is not
    a write failure: ENOSPC or EDQUOT when its text says so or ``path``'s file system has no room
    left, else EIO with torch's words."""
    text = str(e)
    for code in (errno.ENOSPC, errno.EDQUOT):
        if os.strerror(code) in text:
            return OSError(code, os.strerror(code), str(path))
    if not any(marker in text for marker in _TORCH_WRITER):
        return None
    if _no_room(path.parent):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    words = re.sub(r"^\[enforce fail at [^\]]*\][ .]*", "", text.strip())
    return OSError(errno.EIO, f"torch.save could not write {path.name} ({words})", str(path))


def torch_save(value: Any, path: Path) -> None:
    """``torch.save(value, path)``; a failure of torch's writer raised as the OSError it stands for
    (``torch_write_error``: a full disk is ENOSPC), so callers handle it as any failed write."""
    import torch

    try:
        torch.save(value, path)
    except RuntimeError as e:
        error = torch_write_error(e, path)
        if error is None:
            raise
        raise error from None


def atomic_save(value: Any, path: Path) -> None:
    """``torch.save(value, path)`` atomically (``torch_save``: a failed write is an OSError)."""
    atomic_replace(path, lambda tmp: torch_save(value, tmp))
