"""Content-addressed store of compiled shared objects.

Invariants:
- An object's key is the sha256 of its named key parts (``CacheKey.parts``); two builds that agree
  on every part produce interchangeable objects, so an object is never rebuilt or rewritten.
- Objects live at ``<cache_dir>/objects/<key[:2]>/<key>.so``; the cache directory is
  ``$TILESCOPE_CACHE_DIR`` or ``~/.cache/tilescope``.
- Every file this module writes appears atomically: it is written to a temporary file in the
  destination directory and moved into place with ``os.replace``, so a reader (another thread,
  another process, ``dlopen``) sees either no file or a complete one.
- A cache that cannot be written (a file, read only, no permission, a full disk) never stops a
  run: the first time it fails, one warning says why and what to do, and the process goes on
  with a temporary cache of its own (removed at exit), so nothing is reused by later runs.
"""

from __future__ import annotations

import atexit
import errno
import functools
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tilescope import knobs
from tilescope.errors import ToolchainError

logger = logging.getLogger("tilescope.toolchain")

#: Headers under this directory (abi.h, orchestration.hpp, the tile library) are on every
#: compile's include path, so generated code can ``#include <tilescope/...>``.
PACKAGE_INCLUDE_DIR = Path(__file__).resolve().parent.parent / "runtime" / "include"

HEADER_SUFFIXES = (".h", ".hpp")


def configured_cache_dir() -> Path:
    """The cache root asked for: ``$TILESCOPE_CACHE_DIR`` if set and non-empty, else ``~/.cache/tilescope``."""
    env = knobs.env_setting("cache_dir")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tilescope"


_state_lock = threading.Lock()
_writable: set[Path] = set()  # configured roots found writable in this process
_fallback: dict[Path, Path] = {}  # configured root -> the temporary cache used instead


def cache_dir() -> Path:
    """The cache root in use: ``configured_cache_dir()`` when it can be written, else (after one
    warning) this process's temporary cache (see ``cache_unusable``)."""
    root = configured_cache_dir()
    with _state_lock:
        if root in _fallback:
            return _fallback[root]
        if root in _writable:
            return root
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return cache_unusable(exc, root)
    with _state_lock:
        _writable.add(root)
    return root


def _reason(exc: OSError, root: Path) -> str:
    if root.exists() and not root.is_dir():
        return "it is a file, not a directory"
    if exc.errno == errno.ENOSPC:
        return "no space left on its device"
    return exc.strerror or str(exc)


def cache_unusable(exc: OSError, root: Path | None = None) -> Path:
    """Stop using the configured cache in this process after ``exc``; returns the temporary cache.

    The first call for a root warns once, naming the root, the reason and what to do.
    """
    root = configured_cache_dir() if root is None else root
    with _state_lock:
        if root not in _fallback:
            tmp = Path(tempfile.mkdtemp(prefix="tilescope-cache-"))
            atexit.register(shutil.rmtree, tmp, ignore_errors=True)
            _fallback[root] = tmp
            _writable.discard(root)
            logger.warning(
                "the compiler cache %s cannot be written (%s): this process goes on with a temporary cache "
                "(%s, removed at exit), so nothing is reused by later runs; make it a writable directory "
                "with free space, or set TILESCOPE_CACHE_DIR to one",
                root,
                _reason(exc, root),
                tmp,
            )
        return _fallback[root]


def cache_is_temporary() -> bool:
    """Whether this process gave up on the configured cache (``cache_unusable``)."""
    with _state_lock:
        return configured_cache_dir() in _fallback


def relocate(path: Path) -> Path:
    """``path`` moved into the temporary cache when it lies in a configured cache given up on."""
    with _state_lock:
        for root, tmp in _fallback.items():
            if Path(path).is_relative_to(root):
                return tmp / Path(path).relative_to(root)
    return Path(path)


def cached_copy(src: Path, relative: str, data: bytes | None = None) -> Path:
    """``<cache>/<relative>``, a copy of ``src`` made unless it is there already (``data``: the
    bytes of ``src`` already read, written as they are, so the copy holds exactly those).

    Raises:
        ToolchainError: even the temporary cache cannot take the copy.
    """

    def copy(dst: Path) -> None:
        if data is None:
            atomic_copy(src, dst)
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(dst, data)

    dst = cache_dir() / relative
    if dst.is_file():
        return dst
    try:
        copy(dst)
    except OSError as exc:
        dst = cache_unusable(exc) / relative
        try:
            copy(dst)
        except OSError as again:
            raise ToolchainError(
                f"cannot copy {src} to {dst} to load it: {again.strerror or again}"
            ) from None
    return dst


def object_path(key: str) -> Path:
    """Where the object for ``key`` lives (whether or not it exists yet)."""
    return cache_dir() / "objects" / key[:2] / f"{key}.so"


def sha256_bytes(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_files(paths: Iterable[Path]) -> str:
    """Hash of the contents of ``paths`` in the given order (names excluded)."""
    h = hashlib.sha256()
    for path in paths:
        data = path.read_bytes()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def headers_hash(include_dirs: Iterable[Path]) -> str:
    """Hash of every ``.h``/``.hpp`` file under ``include_dirs`` (recursively).

    Each header contributes its include-dir index, its path relative to that directory and its
    contents, so renaming, adding, removing or editing any header changes the hash, while moving
    the whole include tree elsewhere does not.
    """
    h = hashlib.sha256()
    for index, root in enumerate(include_dirs):
        root = Path(root)
        if not root.is_dir():
            h.update(f"{index}:missing\n".encode())
            continue
        headers = sorted(p for p in root.rglob("*") if p.suffix in HEADER_SUFFIXES and p.is_file())
        for header in headers:
            data = header.read_bytes()
            h.update(f"{index}:{header.relative_to(root).as_posix()}:{len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def cpu_features() -> str:
    """The host CPU's feature flags (what ``-march=native`` compiles for), as one string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


@functools.lru_cache(maxsize=1)
def abi_version() -> int:
    """``TS_ABI_VERSION`` as defined in the shipped ``tilescope/abi.h``."""
    text = (PACKAGE_INCLUDE_DIR / "tilescope" / "abi.h").read_text(encoding="utf-8")
    match = re.search(r"^#define\s+TS_ABI_VERSION\s+(\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{PACKAGE_INCLUDE_DIR / 'tilescope' / 'abi.h'} does not define TS_ABI_VERSION")
    return int(match.group(1))


@dataclass(frozen=True)
class CacheKey:
    """A cache key and the named parts it was computed from (each part is a hex digest or a
    short literal)."""

    parts: Mapping[str, str]

    @property
    def digest(self) -> str:
        """The key: sha256 of the parts as sorted JSON."""
        return sha256_bytes(json.dumps(dict(self.parts), sort_keys=True).encode())

    def log(self, what: str) -> None:
        """Log every part and the key at debug level, naming ``what`` the key is for."""
        if logger.isEnabledFor(logging.DEBUG):
            for name, value in self.parts.items():
                logger.debug("cache key part %s for %s: %s", name, what, value)
            logger.debug("cache key for %s: %s", what, self.digest)


def atomic_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` so that ``dst`` appears complete or not at all."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        shutil.copymode(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(dst: Path, data: bytes) -> None:
    """Write ``data`` to ``dst`` so that ``dst`` appears complete or not at all."""
    tmp = temp_path_beside(dst)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temp_path_beside(dst: Path) -> Path:
    """A fresh, unused path in ``dst``'s directory, for writing ``dst`` atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    return Path(tmp)
