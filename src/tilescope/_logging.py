"""Log levels shared by the harness and the runtime binding.

Levels: ``debug``, ``v0``..``v9`` (v0 most verbose, v5 = info, the default), ``info``, ``warn``,
``error``, ``null`` (silent). They map onto Python logging levels of the ``tilescope`` logger:
v0 = 10 (DEBUG) ... v5 = 20 (INFO) ... v9 = 28; warn = 30; error = 40; null disables output.

With ``TILESCOPE_LOG_DIR`` set, every message that passes the level is also appended, with a
timestamp, to ``$TILESCOPE_LOG_DIR/tilescope_<pid>.log`` (runtime messages included). A log file
that cannot be created or written (a file in the way, read only, a full disk) never stops a run:
one warning says why and what to do, and messages go on to stderr only.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sys
from pathlib import Path

from tilescope import knobs

_LOGGER = logging.getLogger("tilescope")
DEFAULT_LEVEL = "v5"


@functools.lru_cache(maxsize=32)
def level_number(name: str) -> int:
    if name == "debug":
        return logging.DEBUG
    if name.startswith("v") and name[1:].isdigit() and 0 <= int(name[1:]) <= 9:
        return logging.DEBUG + 2 * int(name[1:])
    table = {
        "info": logging.INFO,
        "warn": logging.WARNING,
        "error": logging.ERROR,
        "null": logging.CRITICAL + 10,
    }
    if name not in table:
        raise ValueError(f"unknown log level {name!r}; known: debug, v0..v9, info, warn, error, null")
    return table[name]


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (it may be redirected)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # the base class assigns it; the property always wins
        pass


class _Formatter(logging.Formatter):
    """Info lines as they are (``[cpp->.so] ...``); other levels prefixed with their name."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        if logging.INFO <= record.levelno < logging.WARNING:
            return msg
        return f"[{level_name(record.levelno)}] {msg}"


def level_name(levelno: int) -> str:
    """``v0``..``v4`` below info, else the standard name."""
    if levelno < logging.INFO:
        return f"v{max(0, (levelno - logging.DEBUG) // 2)}"
    return logging.getLevelName(levelno)


class _FileFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%Y-%m-%d %H:%M:%S")
        return f"{stamp}.{int(record.msecs):03d} {level_name(record.levelno):<7} {record.getMessage()}"


_unwritable: set[Path] = set()  # log files already warned about


def _warn_log_file(path: Path, exc: BaseException | None) -> None:
    if path in _unwritable:
        return
    _unwritable.add(path)
    if path.parent.exists() and not path.parent.is_dir():
        why = f"{path.parent} is a file, not a directory"
    elif isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        why = "no space left on its device"
    else:
        why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
    _LOGGER.warning(
        "cannot write the log file %s (%s): going on without it (messages still go to stderr); "
        "make TILESCOPE_LOG_DIR a writable directory with free space",
        path,
        why,
    )


class _LogFile(logging.FileHandler):
    """``TILESCOPE_LOG_DIR``'s file; the first write that fails warns once and turns it off."""

    def __init__(self, path: Path):
        super().__init__(path, encoding="utf-8")
        self._tilescope_file = path
        self.broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if self.broken:
            return
        self.broken = True
        exc = sys.exc_info()[1]
        try:
            self.close()  # flushing what is buffered may fail the same way
        except Exception:  # noqa: BLE001 - the file is given up on either way
            pass
        _warn_log_file(self._tilescope_file, exc)


def _attach_log_dir() -> None:
    # NOTE: the usual case, on every run: two lookups, no validation
    if not knobs.env_is_set(_LOG_DIR_VAR) and not knobs.overridden("log_dir"):
        return
    log_dir = knobs.env_setting("log_dir")
    if not log_dir:
        return
    path = Path(log_dir) / f"tilescope_{os.getpid()}.log"
    if path in _unwritable or any(getattr(h, "_tilescope_file", None) == path for h in _LOGGER.handlers):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _LogFile(path)
    except OSError as exc:
        _warn_log_file(path, exc)
        return
    handler.setFormatter(_FileFormatter())
    _LOGGER.addHandler(handler)


def configure(level: str | None = None) -> None:
    """Set the tilescope log level (None keeps the current one) and attach a stderr handler once
    (again if it was removed since)."""
    global _stderr_handler
    if _stderr_handler is None or _stderr_handler not in _LOGGER.handlers:
        handler = _StderrHandler()
        handler.setFormatter(_Formatter())
        _LOGGER.addHandler(handler)
        _LOGGER.propagate = False
        _stderr_handler = handler
        if level is None:
            _set_level(level_number(DEFAULT_LEVEL))
    _attach_log_dir()
    if level is not None:
        _set_level(level_number(level))


_stderr_handler: _StderrHandler | None = None  # the one configure() attached
_LOG_DIR_VAR = knobs.ENV_KNOBS["log_dir"].env_var


def _set_level(level: int) -> None:
    """The tilescope logger's level, set only when it changes.

    NOTE: ``Logger.setLevel`` clears the level cache of every logger of the process (torch's
    included): ~30 us, which was a fifth of a small program's ``run`` when done on every call."""
    if _LOGGER.level != level:
        _LOGGER.setLevel(level)


class _LevelKept:
    """The block of ``level_kept``: the level on entering it, set again on leaving it (a class,
    not a generator: it is on the path of every run of a compiled program)."""

    __slots__ = ("level",)

    def __enter__(self) -> None:
        self.level = _LOGGER.level or level_number(DEFAULT_LEVEL)  # NOTE: never configured: the level configure() gives

    def __exit__(self, *exc: object) -> None:
        _set_level(self.level)


def level_kept() -> _LevelKept:
    """A block that restores the tilescope log level on leaving it: a tool's own runs (a fix's
    candidate, say) set the level they run at without changing the caller's."""
    return _LevelKept()

