"""Path arguments: a path the system cannot look up is a clear error, never a traceback.

Invariants:
- ``PATH_ARG`` is the ``type=`` of every path argument of the ``tilescope`` command and of a model
  script's harness flags, and ``checked_path`` the same check where the API takes a build: a path
  the system cannot look up (too long, a loop of symbolic links, no permission) is a clear error
  naming the argument, the condition and what to do; a path is echoed clipped (``errors.clipped``).
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path
from typing import Any

from tilescope.errors import TilescopeError, clipped


def _limits() -> tuple[int, int]:
    try:
        return os.pathconf("/", "PC_NAME_MAX"), os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def path_problem(path: Any) -> str | None:
    """Why the system cannot look ``path`` up at all, in words with what to do: empty, too long, a loop
    of symbolic links, a directory on it that cannot be searched, a NUL character; None when it can
    (whether it exists or not: a missing path is for its user to explain)."""
    if isinstance(path, str | bytes) and not path:
        return "an empty path; name a directory (`.` for this one)"
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return "contains a NUL character; pass the path without it"
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            name_max, path_max = _limits()
            longest = max((len(os.fsencode(p)) for p in Path(path).parts), default=0)
            which = (f"a name in it has {longest} bytes, the limit is {name_max} (and {path_max} for a whole path)"
                     if longest > name_max else
                     f"it has {len(os.fsencode(path))} bytes, the limit is {path_max}")  # fmt: skip
            return (f"too long for the file system: {which}; pass a shorter path (a relative one, or a symbolic "
                    "link to a directory deep down)")  # fmt: skip
        if e.errno == errno.ELOOP:
            return "too many levels of symbolic links (a link on it leads back to itself); fix or remove the link"
        if e.errno in (errno.EACCES, errno.EPERM):
            return ("permission denied (a directory on it cannot be searched by this user); check the permissions "
                    "of each directory on it (ls -ld), or pass a path this user can read")  # fmt: skip
        return f"cannot be looked up: {e.strerror or e}"
    return None


def checked_path(path: Any, what: str) -> None:
    """A TilescopeError naming ``what`` (``"build directory"``), the path (shortened) and the
    condition, when the system cannot look ``path`` up (``path_problem``)."""
    problem = path_problem(path)
    if problem is not None:
        raise TilescopeError(f"{what} {clipped(path)}: {problem}")


class PathArg:
    """The ``type=`` of every path argument of a command: the path as given, or an
    ``argparse.ArgumentTypeError`` (``argument NAME: <the path, shortened>: <the condition>; <what
    to do>``) when the system cannot look it up (``path_problem``)."""

    __name__ = "path"

    def __call__(self, text: str) -> str:
        """``text`` itself, once the system can look it up."""
        problem = path_problem(text)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{clipped(text)}: {problem}" if text else problem)
        return text


PATH_ARG = PathArg()
