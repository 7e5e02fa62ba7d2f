"""Content-addressed store of compiled shared objects.

Invariants:
- An object's key is the sha256 of its named key parts (``CacheKey.parts``); two builds that agree
  on every part produce interchangeable objects, so an object is never rebuilt or rewritten.
- Objects live at ``<cache_dir>/objects/<key[:2]>/<key>.so``; the cache directory is
  ``$TILESCOPE_CACHE_DIR`` or ``~/.cache/tilescope``.
- Every file this module writes appears atomically: it is written to a temporary file in the
  destination directory and moved into place with ``os.replace``, so a reader (another thread,
  another process, ``dlopen``) sees either no file or a complete one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tilescope import knobs

logger = logging.getLogger("tilescope.toolchain")

#: Headers under this directory (abi.h, orchestration.hpp, the tile library) are on every
#: compile's include path, so generated code can ``#include <tilescope/...>``.
PACKAGE_INCLUDE_DIR = Path(__file__).resolve().parent.parent / "runtime" / "include"

HEADER_SUFFIXES = (".h", ".hpp")


def cache_dir() -> Path:
    """The cache root: ``$TILESCOPE_CACHE_DIR`` if set and non-empty, else ``~/.cache/tilescope``."""
    env = knobs.env_setting("cache_dir")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tilescope"


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
