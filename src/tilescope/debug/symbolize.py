"""Resolving machine addresses to C++ lines and the DSL lines they came from.

``symbolize(pcs, maps)`` turns the return addresses of a thread (of this process, or of a dead
one whose ``/proc/<pid>/maps`` text was kept) into ``SourceFrame``s: module, function, C++
``file:line`` and, through the ``// @ file:line`` marker every generated statement ends with, the
DSL line and its text.

Invariants:
- It never raises: an address outside every mapping, a module without line info, a missing or
  failing ``addr2line`` all give frames with only ``pc`` and ``module`` (as far as known).
- One ``addr2line`` process per module, whatever the number of addresses in it.
- Inlined code is kept: each address gives its inline chain, innermost first (a tile library
  function, then the kernel that inlined it), every frame of the chain with the same ``pc``.
- ``pcs[0]`` is taken as the interrupted instruction and every later pc as a return address,
  looked up at ``pc - 1`` so that it names the call, not the line after it.
- With ``build``, a kernel loaded through its content-named copy (``<cache>/loaded/<sha>.so``)
  is named by the build's binary, and C++ paths recorded in DWARF by another build directory
  (a compiler-cache hit on the same text) are replaced by this build's source of that binary.
  Only binaries and sources inside the build are read (``paths.outside_reason``).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from tilescope.build.paths import KERNEL_CONFIG, inside, outside_reason
from tilescope.build.state import sha256_file
from tilescope.debug.failures import SourceFrame

#: ``... // @ models/x.py:12`` or ``... // in [64, 512] @ models/x.py:9`` (as toolchain.compiler).
DSL_MARKER = re.compile(r"//[^@\n]*@\s*(\S+):(\d+)\s*$")
ADDR2LINE_TIMEOUT_S = 30.0
log = logging.getLogger("tilescope")
_MARKER_LOOKBACK = 40  # lines searched upwards for a marker when a line has none (e.g. `}`)


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/<pid>/maps``."""

    start: int
    end: int
    perms: str
    offset: int
    path: str  # "" for anonymous mappings; "[stack]" etc. for special ones


def parse_maps(text: str) -> list[Mapping]:
    """The mappings of a ``/proc/<pid>/maps`` text; malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5:
            continue
        try:
            lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
            offset = int(parts[2], 16)
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) == 6 else ""
        out.append(Mapping(lo, hi, parts[1], offset, path))
    return out


def find_mapping(maps: list[Mapping], pc: int) -> Mapping | None:
    for m in maps:
        if m.start <= pc < m.end:
            return m
    return None


@functools.lru_cache(maxsize=256)
def _elf_loads(path: str, mtime_ns: int) -> tuple[tuple[int, int, int], ...]:
    """(p_offset, p_vaddr, p_filesz) of every PT_LOAD segment of a 64-bit little-endian ELF file."""
    del mtime_ns  # part of the cache key only
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return ()
        phoff, phentsize, phnum = struct.unpack_from("<Q", head, 32)[0], *struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_offset, p_vaddr, p_filesz))
    return tuple(loads)


def module_address(pc: int, m: Mapping) -> int:
    """The address of ``pc`` as the module's ELF file (and addr2line) names it.

    ``pc - start + offset`` is the file offset; the PT_LOAD segment holding that offset gives
    the virtual address. For g++-built shared objects the text segment has ``p_vaddr ==
    p_offset``, so both agree there; the data segment does not (it is shifted by a page).
    """
    file_offset = pc - m.start + m.offset
    try:
        loads = _elf_loads(m.path, os.stat(m.path).st_mtime_ns)
    except (OSError, struct.error):
        return file_offset
    for p_offset, p_vaddr, p_filesz in loads:
        if p_offset <= file_offset < p_offset + p_filesz:
            return file_offset - p_offset + p_vaddr
    return file_offset


def _addr2line(module: str, addresses: list[int]) -> dict[int, list[tuple[str, str]]] | None:
    """Inline chains (function, ``file:line``), innermost first, of each address; None if
    addr2line is missing or failed."""
    tool = shutil.which("addr2line")
    if tool is None or not addresses:
        return None
    unique = sorted(set(addresses))
    try:
        proc = subprocess.run(
            [tool, "-a", "-f", "-i", "-C", "-e", module, *(f"{a:#x}" for a in unique)],
            capture_output=True,
            text=True,
            timeout=ADDR2LINE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    chains: dict[int, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    lines = proc.stdout.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("0x"):
            try:
                current = chains.setdefault(int(line, 16), [])
            except ValueError:
                current = None
            i += 1
            continue
        if current is not None and i + 1 < len(lines):
            current.append((line, lines[i + 1]))
        i += 2
    return chains


def _split_location(loc: str) -> tuple[str, int]:
    """``/path/file.cpp:41 (discriminator 2)`` -> (path, 41); (path or "", 0) when unknown."""
    loc = loc.split(" (", 1)[0]
    path, _, line = loc.rpartition(":")
    if not path or path == "??" or not line.isdigit():
        return "", 0
    return path, int(line)


@functools.lru_cache(maxsize=64)
def _read_lines(path: str, mtime_ns: int) -> tuple[str, ...]:
    del mtime_ns  # part of the cache key only
    with open(path, encoding="utf-8", errors="replace") as f:
        return tuple(f.read().splitlines())


def _lines(path: str) -> tuple[str, ...]:
    try:
        return _read_lines(path, os.stat(path).st_mtime_ns)
    except OSError:
        return ()


def dsl_marker(cpp_path: str, line: int) -> str:
    """``file:line`` of the DSL marker on ``cpp_path``'s 1-based ``line``, or of the nearest one
    above it (a ``}`` or a hand-added line has none); "" if none is found."""
    lines = _lines(cpp_path)
    if not 1 <= line <= len(lines):
        return ""
    for text in reversed(lines[max(0, line - _MARKER_LOOKBACK) : line]):
        m = DSL_MARKER.search(text)
        if m:
            return f"{m[1]}:{m[2]}"
        if text.startswith(("extern ", "}")):  # the start or end of another function
            break
    return ""


def dsl_source(dsl: str, cpp_path: str = "") -> str:
    """The stripped text of the DSL line ``file:line``.

    Markers name the file as the compile saw it: relative to the directory the program was
    compiled from when that was shorter. It is looked up as given, then against the ancestors
    of the C++ file (a build lives in ``<compile dir>/build_output/_jit_<name>_<stamp>``).
    """
    path, _, line = dsl.rpartition(":")
    if not path or not line.isdigit():
        return ""
    found = dsl_file(path, cpp_path)
    if found is None:
        return ""
    lines = _lines(str(found))
    return lines[int(line) - 1].strip() if 1 <= int(line) <= len(lines) else ""


def dsl_file(path: str, cpp_path: str = "") -> Path | None:
    """The DSL file a marker names (see ``dsl_source``): as given, else against the ancestors of
    the C++ file of the build; None when neither exists."""
    candidates = [Path(path)]
    if not os.path.isabs(path) and cpp_path:
        candidates += [parent / path for parent in Path(cpp_path).resolve().parents]
    return next((c for c in candidates if c.is_file()), None)


def build_source(cpp_path: str) -> Path | None:
    """The build directory of a kernel (``kernels/<core>/<name>.cpp``) or orchestration
    (``orchestration/<name>.cpp``) source, if ``cpp_path`` is one."""
    p = Path(cpp_path)
    if p.suffix != ".cpp":
        return None
    if p.parent.parent.name == "kernels":
        root = p.parent.parent.parent
    elif p.parent.name == "orchestration":
        root = p.parent.parent
    else:
        return None
    return root if inside(root, KERNEL_CONFIG).is_file() or not root.exists() else None


def kernel_frame(frames: list[SourceFrame]) -> SourceFrame | None:
    """The frame in a kernel or orchestration .cpp of a tilescope build: the outermost such
    frame of the innermost address that has one (the generated function that inlined the tile
    library code it stopped in)."""
    best: SourceFrame | None = None
    for f in frames:
        if best is not None and f.pc != best.pc:
            break
        if f.cpp and build_source(f.cpp.rpartition(":")[0]) is not None:
            best = f
    return best


def build_binaries(build: Path) -> dict[str, tuple[Path, Path]]:
    """sha256 of each binary of a build -> (binary, its C++ source); {} if unreadable."""
    import runpy

    try:
        cfg = runpy.run_path(str(inside(build, KERNEL_CONFIG)))
        entries = [cfg["ORCHESTRATION"], *cfg["KERNELS"]]
        out = {}
        for e in entries:
            if outside_reason(build, e["binary"]) or outside_reason(build, e["source"]):
                continue  # a build names only its own files; anything else is not read
            binary = build / e["binary"]
            if binary.is_file():
                out[sha256_file(binary)] = (binary, build / e["source"])
        return out
    except Exception:  # noqa: BLE001 - symbolizing is best effort: fall back to the raw paths
        return {}


def symbolize(
    pcs: list[int], maps: str | None = None, *, build: str | os.PathLike | None = None
) -> list[SourceFrame]:
    """Frames for the addresses ``pcs`` of one thread, innermost first.

    Args:
        pcs: ``pcs[0]`` the interrupted (faulting) instruction, then return addresses.
        maps: the text of the process's ``/proc/<pid>/maps``; None: this process's.
        build: a build directory, to name kernels by the build's binaries and sources.

    Returns:
        Each address's inline chain, innermost first; an address that cannot be resolved
        gives one frame with ``pc`` and ``module`` (as far as known). Never raises.
    """
    try:
        return _symbolize(pcs, maps, build)
    except Exception as e:  # noqa: BLE001 - a report without lines beats no report
        log.debug("[symbolize] cannot resolve %d addresses: %s: %s", len(pcs), type(e).__name__, e)
        return [SourceFrame(pc=pc) for pc in pcs]


def _symbolize(pcs: list[int], maps: str | None, build: str | os.PathLike | None) -> list[SourceFrame]:
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            maps = ""
    mappings = parse_maps(maps)
    by_module: dict[str, list[int]] = {}
    where: list[tuple[Mapping | None, int]] = []
    for i, pc in enumerate(pcs):
        m = find_mapping(mappings, pc)
        if m is None or not m.path.startswith("/"):
            where.append((m, 0))
            continue
        addr = module_address(pc if i == 0 else pc - 1, m)
        where.append((m, addr))
        by_module.setdefault(m.path, []).append(addr)
    resolved = {}
    for module, addrs in by_module.items():
        if os.path.isfile(module):
            resolved[module] = _addr2line(module, addrs) or {}
    binaries = build_binaries(Path(build).resolve()) if build is not None else {}
    frames: list[SourceFrame] = []
    for pc, (m, addr) in zip(pcs, where):
        module = m.path if m is not None else ""
        chain = resolved.get(module, {}).get(addr, [])
        alias = _alias(module, binaries)
        if alias is not None:
            module = str(alias[0])
        if not chain:
            frames.append(SourceFrame(pc=pc, module=module))
            continue
        for function, location in chain:
            frames.append(_frame(pc, module, function, location, alias))
    return frames


def _alias(module: str, binaries: dict[str, tuple[Path, Path]]) -> tuple[Path, Path] | None:
    """The build's (binary, source) of a content-named loaded copy ``<cache>/loaded/<sha>.so``."""
    if not binaries or not module:
        return None
    return binaries.get(Path(module).stem)


def _frame(
    pc: int, module: str, function: str, location: str, alias: tuple[Path, Path] | None
) -> SourceFrame:
    path, line = _split_location(location)
    frame = SourceFrame(pc=pc, module=module, function="" if function == "??" else function)
    if not path:
        return frame
    if alias is not None and Path(path).name == alias[1].name and Path(path).resolve() != alias[1]:
        path = str(alias[1])  # DWARF of a cache hit names the build dir that compiled the text first
    frame = replace(frame, cpp=f"{path}:{line}")
    if line and build_source(path) is not None:
        dsl = dsl_marker(path, line)
        if dsl:
            frame = replace(frame, dsl=dsl, dsl_source=dsl_source(dsl, path))
    return frame


__all__ = ["DSL_MARKER", "Mapping", "build_source", "dsl_file", "kernel_frame", "parse_maps", "symbolize"]
