"""Locks on build directories: a process that uses a build holds it, so that ``tilescope clean``
leaves it alone.

Invariants:
- A process that uses a build holds a shared ``flock`` on its ``.lock`` file (``hold_build``:
  from the start of its compile, and for as long as a CompiledProgram of it exists).
- ``try_exclusive`` never waits: a build that some process holds is reported as held, and a
  build is removed only by a caller holding its exclusive lock.
- Where locks cannot be taken (a read-only build, no ``fcntl``) nothing is held and nothing fails.
- ``outputs_lock`` serializes the writing of a run's debug outputs (``dfx_outputs/.lock``), so the
  files there always come from one run; ``reading_outputs`` holds the same lock shared while a
  viewer reads files that belong together.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: builds are never locked
    fcntl = None  # type: ignore[assignment]

from tilescope.build.paths import BUILD_LOCK, DFX_DIR, inside
from tilescope.errors import TilescopeError


class BuildBusyError(TilescopeError):
    """The build directory is being removed by ``tilescope clean``."""


# -- locks ----------------------------------------------------------------------------------------


class BuildLock:
    """A lock on a build directory, held until ``close()`` or until the object is collected."""

    def __init__(self, fd: int):
        self._fd: int | None = fd  # a plain descriptor: no file object to warn when collected

    def close(self) -> None:
        """Release the lock; idempotent."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __del__(self) -> None:
        self.close()


def hold_build(work: str | os.PathLike) -> BuildLock | None:
    """A shared lock on the build ``work``, held until the returned lock is closed (or
    collected); None where it cannot be taken (a read-only build, no ``fcntl``).

    Raises:
        BuildBusyError: ``tilescope clean`` is removing the build right now.
    """
    if fcntl is None:
        return None
    try:
        fd = os.open(inside(work, BUILD_LOCK), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BuildBusyError(
            f"{work} is being removed by `tilescope clean`; compile the program again"
        ) from None
    except OSError:
        os.close(fd)
        return None
    return BuildLock(fd)


def try_exclusive(work: Path) -> BuildLock | None | bool:
    """An exclusive lock on ``work``, True when the build has no lock file (no process has used
    it since builds have one), or None when a process holds it."""
    if fcntl is None:
        return True
    try:
        fd = os.open(inside(work, BUILD_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return BuildLock(fd)


def in_use(work: Path) -> bool:
    """Whether a process holds the build ``work`` (compiling, loaded or running it)."""
    held = try_exclusive(work)
    if held is None:
        return True
    if held is not True:
        held.close()
    return False


@contextlib.contextmanager
def reading_outputs(dfx: Path) -> Iterator[None]:
    """Hold the ``dfx_outputs`` directory ``dfx``'s lock shared for the block, so that files read
    together there (a tensor dump's manifest and payload) come from one run: a run rewriting them
    (``outputs_lock``) waits, and the block waits for one. Nothing is created; where there is no
    lock file (no run has written there, or a copied directory) the block runs without it."""
    with _flocked(inside(dfx, BUILD_LOCK), exclusive=False, create=False):
        yield


@contextlib.contextmanager
def outputs_lock(work: str | os.PathLike) -> Iterator[None]:
    """Hold the build's ``dfx_outputs/.lock`` exclusively for the block (waiting for it), so that
    the files one run writes there (a tensor dump's manifest and payload, deps, trace) come from
    that run alone, whichever threads or processes run the build at once. Where the lock cannot
    be taken (a read-only build, no ``fcntl``) the block runs without it."""
    with _flocked(inside(work, DFX_DIR, BUILD_LOCK), exclusive=True, create=True):
        yield


@contextlib.contextmanager
def _flocked(path: Path, exclusive: bool, create: bool) -> Iterator[None]:
    """``flock`` ``path`` (creating it and its directory with ``create``) for the block; the block
    runs unlocked where that is not possible (no such file, a read-only build, no ``fcntl``)."""
    fd = -1
    if fcntl is not None:
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
            fd = os.open(path, flags, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError:
            if fd >= 0:
                os.close(fd)
            fd = -1
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the flock
