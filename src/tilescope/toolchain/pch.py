"""Precompiled headers (g++ ``.gch``) of the tile library, kept in the compiler cache.

Invariants:
- A source's PCH is made from the ``#include <tilescope/...>`` lines it opens with (only comments
  and blank lines before and between them), so using it (``-include <umbrella>``) changes nothing
  the source sees: the headers' guards make its own includes no-ops.
- A PCH is keyed like an object (``pch_key``): the include lines, the flags, the compiler, the
  contents of the package's headers, the resolved ``-march=native`` target and the ABI version. It
  is made without the include directories that follow the package's own (a build's kernel folder):
  they change nothing it includes, so every build shares one PCH per flag set instead of adding
  tens of megabytes to the cache each. It lives at
  ``<cache>/pch/<key[:2]>/<key>/umbrella.hpp(.gch)``, with ``umbrella.hpp.gch.size`` naming the
  size g++ wrote.
- A PCH appears atomically (written to a temporary file, moved into place); one process builds it
  while the others wait on a ``flock`` of ``build.lock`` beside it, then reuse it.
- A PCH that cannot be used (truncated, rejected by g++, a compile that crashes only with it) is
  removed with a logged reason and the source is compiled without it: never an error.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tilescope.toolchain import cache
from tilescope.toolchain.cache import CacheKey

logger = logging.getLogger("tilescope.toolchain")

UMBRELLA = "umbrella.hpp"
_INCLUDE = re.compile(r"#\s*include\s*<(tilescope/[\w./-]+)>")


def leading_includes(source: Path) -> tuple[str, ...]:
    """The ``tilescope/...`` headers ``source`` includes before any other code, in order."""
    found: list[str] = []
    with open(source, encoding="utf-8", errors="replace") as f:
        for line in f:
            text = line.strip()
            if not text or text.startswith("//"):
                continue
            m = _INCLUDE.fullmatch(text)
            if m is None:
                break
            found.append(m[1])
    return tuple(found)


def pch_key(includes: Sequence[str], flags: Sequence[str], parts: dict[str, str]) -> CacheKey:
    """The key of the PCH of ``includes`` compiled with ``flags``; ``parts`` are the object key's
    compiler, headers, target and abi parts."""
    return CacheKey(
        {
            "includes": "\n".join(includes),
            "flags": cache.sha256_bytes("\0".join(flags).encode()),
            **{name: parts[name] for name in ("compiler", "headers", "target", "abi")},
        }
    )


def pch_dir(digest: str) -> Path:
    """Where the PCH for ``digest`` lives (whether or not it exists yet)."""
    return cache.cache_dir() / "pch" / digest[:2] / digest


def _usable(gch: Path) -> bool:
    """Whether ``gch`` is there, whole (the size g++ wrote), and starts as a g++ PCH does."""
    try:
        recorded = int(Path(f"{gch}.size").read_text(encoding="utf-8"))
        if gch.stat().st_size != recorded:
            return False
        with open(gch, "rb") as f:
            return f.read(4) == b"gpch"
    except (OSError, ValueError):
        return False


def discard(umbrella: Path, reason: str) -> None:
    """Remove the PCH of ``umbrella`` (the next compile rebuilds it), logging ``reason``."""
    gch = Path(f"{umbrella}.gch")
    logger.warning("precompiled header %s not used and removed (%s); compiling without it", gch, reason)
    for path in (Path(f"{gch}.size"), gch):
        path.unlink(missing_ok=True)


def ensure(cxx: str, includes: Sequence[str], command_flags: Sequence[str], digest: str) -> Path | None:
    """The umbrella header to ``-include`` (its ``.gch`` beside it), built into the cache if missing.

    ``command_flags`` are the compile's flags and include directories. None (with the reason logged)
    when no PCH can be had: the caller compiles without one.
    """
    where = pch_dir(digest)
    umbrella = where / UMBRELLA
    gch = Path(f"{umbrella}.gch")
    try:
        if _usable(gch):
            return umbrella
        where.mkdir(parents=True, exist_ok=True)
        with open(where / "build.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process builds it, the others wait and reuse it
            if _usable(gch):
                return umbrella
            if gch.exists():
                discard(umbrella, "truncated or not a g++ precompiled header")
            text = "".join(f"#include <{name}>\n" for name in includes)
            cache.atomic_write_bytes(umbrella, text.encode())
            return umbrella if _build(cxx, umbrella, gch, command_flags) else None
    except OSError as exc:
        logger.warning("cannot build a precompiled header in %s (%s); compiling without one", where, exc)
        return None


def _build(cxx: str, umbrella: Path, gch: Path, command_flags: Sequence[str]) -> bool:
    tmp = cache.temp_path_beside(gch)
    command = [cxx, *command_flags, "-x", "c++-header", "-o", str(tmp), str(umbrella)]
    logger.debug("precompiling %s: %s", umbrella, shlex.join(command))
    try:
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            logger.warning(
                "cannot precompile %s (%s); compiling without a precompiled header", umbrella, first
            )
            return False
        size = tmp.stat().st_size
        os.replace(tmp, gch)
        cache.atomic_write_bytes(Path(f"{gch}.size"), str(size).encode())
        return True
    finally:
        tmp.unlink(missing_ok=True)


def rejected(stderr: str, umbrella: Path) -> bool:
    """Whether g++'s ``stderr`` says it could not use the PCH of ``umbrella`` (``-Winvalid-pch``)."""
    gch = f"{umbrella}.gch"
    return any(
        gch in ln and ("-Winvalid-pch" in ln or "precompiled header" in ln) for ln in stderr.splitlines()
    )


def without_pch_notes(stderr: str, umbrella: Path) -> str:
    """``stderr`` less the lines about the PCH (so a used-as-text PCH does not read as a warning)."""
    gch = f"{umbrella}.gch"
    return "\n".join(ln for ln in stderr.splitlines() if gch not in ln and str(umbrella) not in ln)
