"""Compile C++ sources to shared objects with g++, in parallel, through the object cache.

Invariants:
- Every compile runs one explicit g++ command, logged at debug level on logger
  ``tilescope.toolchain``; a cache hit runs no compiler process at all.
- The cache key of a job is built from named parts (``source``, ``flags``, ``compiler``,
  ``headers``, ``target``, ``abi``), each logged at debug level. Include-directory *paths* are not
  part of the key; the contents of every header under them are. ``target`` is what the
  ``-march=`` of TILESCOPE_MARCH (default ``native``) resolves to on this host (``target_macros``),
  not the flag string; a ``-march`` that enables an instruction set this CPU lacks is refused.
- A single-source job that opens with ``#include <tilescope/...>`` lines is compiled with a
  precompiled header of them (``pch``), cached under the same key parts; a PCH that cannot be
  built or used is logged and left out, never an error.
- ``job.output`` and cache objects are written atomically (see ``cache``). A cache that cannot
  be written is replaced by a temporary one (``cache.cache_unusable``), never an error.
- A failed compile raises ``CompileError`` carrying the failing C++ line, the DSL line it came
  from (``// @ file:line`` markers emitted by codegen) and the exact command that failed.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tilescope import knobs
from tilescope.errors import ConfigError, ToolchainError, file_size_limit
from tilescope.toolchain import cache, pch
from tilescope.toolchain.cache import CacheKey

logger = logging.getLogger("tilescope.toolchain")

BASE_FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O3",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    # no a * b + c fused, so f32 ops round as interp's (torch's); the tile lib's matmul and math fuse by hand
    "-ffp-contract=off",
    "-Wall",
    "-Wextra",
    # x86: AVX-512's width for vectorized loops (g++ 12 tunes -march=native to 256 bits); same bits
    *(("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()),
)

# TILESCOPE_DEBUG_INFO (knobs.ENV_KNOBS "debug_info"): -g1, line tables and inlined frames, all that crash
# reports and backtraces read; or -g, locals and types for gdb (a kernel's compile ~1.5x slower).
DEBUG_INFO_FLAGS = {"lines": "-g1", "full": "-g"}


def debug_info_flag() -> str:
    """The -g flag of TILESCOPE_DEBUG_INFO (default: lines, -g1).

    Raises:
        ConfigError: the variable is set to something else than lines or full.
    """
    knobs.ENV_KNOBS["debug_info"].env_value()  # NOTE: value() alone would take a bad value for unset
    return DEBUG_INFO_FLAGS[knobs.env_setting("debug_info")]


def march_flag() -> str:
    """``-march=`` of TILESCOPE_MARCH (default ``native``: the host's own instruction set).

    Raises:
        ConfigError: the variable is set to something that is not a -march value.
    """
    knobs.ENV_KNOBS["march"].env_value()  # NOTE: value() alone would take a bad value for unset
    return f"-march={knobs.env_setting('march')}"


INSTALL_HINT = (
    "tilescope needs a C++17 g++ (GCC 8 or newer). Install it with `apt-get install g++` on "
    "Debian/Ubuntu (or your distribution's package), or set CXX to the compiler's path."
)

#: A generated C++ line's origin in the DSL source, e.g. ``acc = acc + t;  // @ models/x.py:12`` or
#: ``TensorView<float> x(args[0]);  // in [64, 512] @ models/x.py:9``.
DSL_MARKER = re.compile(r"//[^@\n]*@\s*(\S+):(\d+)\s*$")
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note): "
)
_LOCATION = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):")
_MAX_ERROR_LINES = 8


class CompileError(ToolchainError):
    """g++ rejected a source file.

    Attributes:
        command: the argv that reproduces the failure (the failed compile, writing the job's output).
        stderr: the compiler's complete diagnostics.
        cpp_file: the C++ file of the first error (the job's own source when the error is reported
            through it, e.g. a template instantiated from it), or None if g++ gave no location.
        cpp_line: the 1-based line in ``cpp_file``, or None.
        dsl_loc: ``"file:line"`` of the DSL code that generated the failing line, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        command: list[str],
        stderr: str,
        cpp_file: Path | None,
        cpp_line: int | None,
        dsl_loc: str | None,
    ):
        super().__init__(message)
        self.command = command
        self.stderr = stderr
        self.cpp_file = cpp_file
        self.cpp_line = cpp_line
        self.dsl_loc = dsl_loc


@dataclass(frozen=True)
class BuildJob:
    """One shared object to build from ``source`` (plus ``extra_sources``, linked into the same
    object). The package's include directory is always on the include path, before
    ``include_dirs``; only headers under include directories are tracked by the cache."""

    source: Path
    output: Path
    include_dirs: tuple[Path, ...] = ()
    extra_flags: tuple[str, ...] = ()
    extra_sources: tuple[Path, ...] = ()

    @property
    def sources(self) -> tuple[Path, ...]:
        """``source`` then ``extra_sources``, in link order."""
        return (Path(self.source), *(Path(s) for s in self.extra_sources))

    def all_include_dirs(self) -> tuple[Path, ...]:
        """The package's include directory, then ``include_dirs``, without repeats."""
        return tuple(dict.fromkeys((cache.PACKAGE_INCLUDE_DIR, *(Path(d) for d in self.include_dirs))))


@dataclass(frozen=True)
class BuildResult:
    """A built (or cached) object: its job, cache key, whether it was a hit, the g++ command and its time."""

    job: BuildJob
    key: str
    cache_hit: bool
    command: list[str] = field(default_factory=list)  # the g++ argv; empty on a cache hit
    seconds: float = 0.0


_stats_lock = threading.Lock()
_stats = {"compiles": 0, "cache_hits": 0}


def stats() -> dict[str, int]:
    """Process-wide counters: ``compiles`` (g++ runs that succeeded) and ``cache_hits``."""
    with _stats_lock:
        return dict(_stats)


def reset_stats() -> None:
    """Zero the counters ``stats`` reports."""
    with _stats_lock:
        for name in _stats:
            _stats[name] = 0


def _count(name: str) -> None:
    with _stats_lock:
        _stats[name] += 1


def find_cxx() -> str:
    """The C++ compiler to use: ``$CXX`` if set, else ``g++`` on PATH.

    Raises:
        ToolchainError: the compiler cannot be found; the message says how to install one.
    """
    given = knobs.env_setting("cxx")
    wanted = given or "g++"
    found = shutil.which(wanted)
    if found is None:
        where = f"CXX is set to {wanted!r}, which is not an executable" if given else "g++ is not on PATH"
        raise ToolchainError(f"g++ was not found ({where}). {INSTALL_HINT}")
    return found


def _remembered(folder: str, cxx: str, extra: str, what: str, compute: Callable[[], str]) -> str:
    """``compute()``, remembered on disk in ``<cache>/<folder>/`` per compiler executable (resolved
    path, size, mtime) and ``extra``: a later process reads it back instead of running ``cxx``."""
    real = Path(cxx).resolve()
    st = real.stat()
    signature = cache.sha256_bytes(f"{real}\0{st.st_size}\0{st.st_mtime_ns}{extra}".encode())
    remembered = cache.cache_dir() / folder / f"{signature}.txt"
    try:
        return remembered.read_text(encoding="utf-8")
    except OSError:
        pass
    value = compute()
    try:
        cache.atomic_write_bytes(remembered, value.encode())
    except OSError as exc:
        logger.debug("cannot remember %s in %s: %s", what, remembered, exc)
    return value


@functools.cache
def compiler_identity(cxx: str) -> str:
    """First line of ``cxx --version`` and the target triple (``-dumpmachine``).

    Remembered per process and, on disk, per compiler executable (resolved path, size, mtime), so a
    process whose builds are all cache hits runs no compiler process at all.
    """

    def identity() -> str:
        try:
            version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
            machine = subprocess.run([cxx, "-dumpmachine"], capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ToolchainError(f"cannot run {cxx!r} to read its version: {exc}. {INSTALL_HINT}") from exc
        first = version.stdout.splitlines()[0] if version.stdout else "unknown"
        return f"{first} ({machine.stdout.strip()})"

    return _remembered("compilers", cxx, "", "the compiler identity", identity)


# The macros g++ defines for an instruction-set extension, e.g. __AVX512F__ or __AVXVNNI__ (not the
# tuning or arch macros, which differ between -march values without changing what may run).
_ISA_MACRO = re.compile(r"^#define __([A-Z0-9_]+)__ 1$")
_NOT_ISA = {"OPTIMIZE", "PIC", "pic", "GNUC_STDC_INLINE", "NO_INLINE", "SSP_STRONG", "ELF", "LP64", "CET"}


def _predefined(cxx: str, march: str) -> str:
    """The macros ``cxx -march=<march>`` predefines, sorted, one per line."""
    command = [cxx, "-std=c++17", f"-march={march}", "-E", "-dM", "-x", "c++", os.devnull]
    try:
        macros = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        if march == "native" or isinstance(exc, OSError):  # the compiler's fault, not the variable's
            raise ToolchainError(f"cannot run {shlex.join(command)} to read the target: {exc}. {INSTALL_HINT}") from exc
        raise ConfigError(
            f"TILESCOPE_MARCH={march!r}: g++ does not accept -march={march} ({exc.stderr.strip()[:200]}); "
            "set it to native or to a -march value g++ knows, such as x86-64-v3"
        ) from exc
    return "\n".join(sorted(macros.splitlines()))


def _isa_macros(macros: str) -> set[str]:
    return {m.group(1) for line in macros.splitlines() if (m := _ISA_MACRO.match(line))} - _NOT_ISA


@functools.cache
def target_macros(cxx: str, march: str = "native") -> str:
    """Hash of the macros ``cxx -march=<march>`` predefines: the instruction set it compiles for.

    Two hosts with the same flags and compiler but different CPUs get different hashes. Remembered
    per process and, on disk, per compiler executable, ``march`` and ``/proc/cpuinfo`` features, so
    a process whose builds are all cache hits runs no compiler process at all.

    Raises:
        ConfigError: ``march`` is not a -march value g++ accepts, or it enables an instruction set
            extension (e.g. AVX-512) that this CPU lacks, whose kernels would die of SIGILL here.
    """

    def target() -> str:
        macros = _predefined(cxx, march)
        if march != "native":
            beyond = sorted(_isa_macros(macros) - _isa_macros(_predefined(cxx, "native")))
            if beyond:
                shown = ", ".join(beyond[:6]) + (f" and {len(beyond) - 6} more" if len(beyond) > 6 else "")
                raise ConfigError(
                    f"TILESCOPE_MARCH={march!r} compiles for {shown}, which this CPU lacks: its kernels would "
                    "die of SIGILL here; choose a lower -march (x86-64-v3 is AVX2) or native"
                )
        return cache.sha256_bytes(macros.encode())

    return _remembered("targets", cxx, f"\0{march}\0{cache.cpu_features()}", "the target", target)


def _flags(job: BuildJob) -> list[str]:
    return [*BASE_FLAGS, march_flag(), debug_info_flag(), *(f"-I{d}" for d in job.all_include_dirs()), *job.extra_flags]


def _pch_flags(job: BuildJob) -> list[str]:
    """The flags ``job``'s precompiled header is made with (and keyed by): the compile's, less the
    include directories after the package's own. The umbrella includes only ``<tilescope/...>``
    headers, found in the package's directory first, so a kernel folder on the include path (the
    audit build's) changes nothing in it and must not make a PCH of its own."""
    return [
        *BASE_FLAGS,
        march_flag(),
        debug_info_flag(),
        f"-I{cache.PACKAGE_INCLUDE_DIR}",
        *(f for f in job.extra_flags if not f.startswith("-I")),
    ]


def compile_command(cxx: str, job: BuildJob, output: Path, umbrella: Path | None = None) -> list[str]:
    """The g++ argv that builds ``job`` into ``output`` (with the precompiled ``umbrella`` header, if given)."""
    use_pch = ["-Winvalid-pch", "-include", str(umbrella)] if umbrella is not None else []
    return [cxx, *_flags(job), *use_pch, "-o", str(output), *(str(s) for s in job.sources)]


def cache_key(job: BuildJob, cxx: str, headers: str) -> CacheKey:
    """The named parts that decide whether ``job``'s object can be reused."""
    march = march_flag()
    return CacheKey(
        {
            "source": cache.sha256_files(job.sources),
            "flags": cache.sha256_bytes("\0".join((*BASE_FLAGS, march, debug_info_flag(), *job.extra_flags)).encode()),
            "compiler": cache.sha256_bytes(compiler_identity(cxx).encode()),
            "headers": headers,
            "target": target_macros(cxx, march.removeprefix("-march=")),
            "abi": str(cache.abi_version()),
        }
    )


def build(jobs: Sequence[BuildJob], max_parallel: int | None = None) -> list[BuildResult]:
    """Build every job, in parallel, reusing cached objects; results are in job order.

    All jobs run to completion even if one fails; then the first failure (in job order) is
    raised, and the others are logged.

    Raises:
        CompileError: g++ rejected a source.
        ToolchainError: no compiler, a source file that cannot be read, or an unwritable cache
            or output directory.
    """
    if not jobs:
        return []
    cxx = find_cxx()
    header_hashes: dict[tuple[Path, ...], str] = {}
    for job in jobs:
        dirs = job.all_include_dirs()
        if dirs not in header_hashes:
            header_hashes[dirs] = cache.headers_hash(dirs)
    package = (cache.PACKAGE_INCLUDE_DIR,)
    if package not in header_hashes:
        header_hashes[package] = cache.headers_hash(package)
    workers = max(1, min(len(jobs), max_parallel or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tilescope-cxx") as pool:
        futures = [pool.submit(_build_one, job, cxx, header_hashes[job.all_include_dirs()], header_hashes[package]) for job in jobs]
        outcomes: list[BuildResult | ToolchainError] = []
        for job, future in zip(jobs, futures):
            try:
                outcomes.append(future.result())
            except ToolchainError as exc:
                outcomes.append(exc)
            except OSError as exc:
                error = ToolchainError(
                    f"cannot build {job.source}: {exc} (cache dir {cache.cache_dir()}, output {job.output}; "
                    "set TILESCOPE_CACHE_DIR to a writable directory if the cache is the problem)"
                )
                error.__cause__ = exc
                outcomes.append(error)
    failures = [o for o in outcomes if isinstance(o, ToolchainError)]
    for extra in failures[1:]:
        logger.error("%s", extra)
    if failures:
        raise failures[0]
    return [o for o in outcomes if isinstance(o, BuildResult)]


def _build_one(job: BuildJob, cxx: str, headers: str, package_headers: str) -> BuildResult:
    started = time.perf_counter()
    for src in job.sources:
        if not src.is_file():
            raise ToolchainError(f"cannot compile {src}: no such file")
    key = cache_key(job, cxx, headers)
    key.log(str(job.source))
    digest = key.digest
    try:
        obj, command = _cached_object(job, cxx, key, package_headers)
    except OSError as exc:  # the cache cannot be written: go on with this process's own
        cache.cache_unusable(exc)
        obj, command = _cached_object(job, cxx, key, package_headers)
    output = cache.relocate(Path(job.output))
    try:
        cache.atomic_copy(obj, output)
    except OSError as exc:
        where = "the compiler cache" if output.is_relative_to(cache.cache_dir()) else "the build directory"
        raise ToolchainError(
            f"cannot write {output}: {exc.strerror or exc}; free space in {where} or make it writable "
            "(TILESCOPE_BUILD_DIR / TILESCOPE_CACHE_DIR choose where they are)"
        ) from exc
    _count("compiles" if command else "cache_hits")
    if not command:
        logger.debug("cache hit for %s: %s", job.source, obj)
    return BuildResult(job, digest, not command, command, time.perf_counter() - started)


def _umbrella(job: BuildJob, cxx: str, key: CacheKey, package_headers: str) -> Path | None:
    """The precompiled umbrella header for ``job`` (built if missing), or None to compile without one.
    It is keyed by the package's headers alone: the only ones it includes."""
    if job.extra_sources:
        return None
    includes = pch.leading_includes(Path(job.source))
    if not includes:
        return None
    flags = _pch_flags(job)
    parts = {**key.parts, "headers": package_headers}
    return pch.ensure(cxx, includes, flags, pch.pch_key(includes, flags, parts).digest)


def _cached_object(job: BuildJob, cxx: str, key: CacheKey, package_headers: str) -> tuple[Path, list[str]]:
    """The cached object for ``key``, compiled into the cache if missing; the g++ argv ([] on a hit).

    Raises:
        OSError: the cache cannot be written (g++ running out of space included).
    """
    obj = cache.object_path(key.digest)
    if obj.is_file():
        return obj, []
    tmp = cache.temp_path_beside(obj)
    umbrella = _umbrella(job, cxx, key, package_headers)
    command = compile_command(cxx, job, tmp, umbrella)
    logger.debug("compiling %s: %s", job.source, shlex.join(command))
    try:
        proc = subprocess.run(command, capture_output=True, text=True)
        if umbrella is not None and (proc.returncode != 0 or pch.rejected(proc.stderr, umbrella)):
            proc, command = _without_pch(job, cxx, tmp, umbrella, proc, command)
        if proc.returncode != 0:
            if "No space left on device" in proc.stderr:
                raise OSError(errno.ENOSPC, "No space left on device (g++ writing into the cache)", str(tmp))
            if "File size limit exceeded" in proc.stderr or "File too large" in proc.stderr:
                raise ToolchainError(
                    f"cannot build {job.source}: the file size limit of this process (ulimit -f: {file_size_limit()}) "
                    "is smaller than the object g++ writes, in any directory; raise it (ulimit -f unlimited) and run again"
                )
            reproduce = compile_command(cxx, job, Path(job.output))
            raise _compile_error(job, proc.stderr or proc.stdout, reproduce)
        if proc.stderr.strip():
            logger.warning("g++ diagnostics for %s:\n%s", job.source, proc.stderr.rstrip())
        if not _is_elf(tmp):
            raise ToolchainError(
                f"cannot build {job.source}: the compiler {cxx!r} exited with status 0 but wrote no object file "
                f"({shlex.join(command[:1])} is not a C++ compiler tilescope can use); set CXX to a C++17 g++ "
                "(GCC 8 or newer), or unset it"
            )
        os.replace(tmp, obj)
    finally:
        tmp.unlink(missing_ok=True)
    return obj, command


def _is_elf(path: Path) -> bool:
    """Whether ``path`` starts as an ELF object does (what g++ writes)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _without_pch(
    job: BuildJob, cxx: str, tmp: Path, umbrella: Path, proc: subprocess.CompletedProcess, command: list[str]
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """After a compile with ``umbrella`` failed or g++ rejected its PCH: compile without it when the PCH
    may be at fault (and then remove it). A plain compile error is kept as it is."""
    if pch.rejected(proc.stderr, umbrella):
        pch.discard(
            umbrella,
            "g++ rejected it: " + next(ln for ln in proc.stderr.splitlines() if f"{umbrella}.gch" in ln),
        )
        if proc.returncode == 0:  # g++ read the headers as text: the object is right
            return subprocess.CompletedProcess(
                proc.args, 0, proc.stdout, pch.without_pch_notes(proc.stderr, umbrella)
            ), command
    elif proc.returncode > 0 and "internal compiler error" not in proc.stderr:
        return proc, command  # an error in the source, with or without the PCH
    plain = compile_command(cxx, job, tmp)
    retry = subprocess.run(plain, capture_output=True, text=True)
    if retry.returncode == 0 and proc.returncode != 0 and Path(f"{umbrella}.gch").exists():
        pch.discard(umbrella, f"the compile of {job.source} failed with it and passed without it")
    return retry, plain


def _compile_error(job: BuildJob, stderr: str, reproduce: list[str]) -> CompileError:
    """``reproduce`` is the failed compile with the job's own output in place of the cache temp
    file: the command a person re-runs."""
    lines = stderr.splitlines()
    first = next(
        (i for i, ln in enumerate(lines) if (m := _DIAGNOSTIC.match(ln)) and "error" in m["kind"]), None
    )
    excerpt: list[str] = []
    err_file: Path | None = None
    err_line: int | None = None
    if first is not None:
        m = _DIAGNOSTIC.match(lines[first])
        assert m is not None
        err_file, err_line = Path(m["file"]), int(m["line"])
        excerpt.append(lines[first])
        for ln in lines[first + 1 : first + _MAX_ERROR_LINES]:
            if _DIAGNOSTIC.match(ln):
                break
            excerpt.append(ln)
    else:
        excerpt = [ln for ln in lines if ln.strip()][:_MAX_ERROR_LINES]

    # NOTE: an error inside a header (the tile library) is reported "required from" a line of the
    # job's own source; that line is the one generated from the DSL, so prefer it.
    cpp_file, cpp_line = err_file, err_line
    own = {str(s) for s in job.sources} | {str(s.resolve()) for s in job.sources}
    if err_file is None or str(err_file) not in own:
        for ln in lines:
            m = _LOCATION.match(ln)  # include-chain lines ("In file included from") do not match
            if m and m["file"] in own:
                cpp_file, cpp_line = Path(m["file"]), int(m["line"])
                break

    parts = [f"C++ compile failed: {job.source}", *(f"  {ln}" for ln in excerpt)]
    dsl_loc = None
    if cpp_file is not None and cpp_line is not None:
        text, dsl_loc = _line_and_dsl_loc(cpp_file, cpp_line)
        parts.append(f"  failing C++ line {cpp_file}:{cpp_line}: {text.strip()}")
        parts.append(f"  generated from DSL: {dsl_loc}" if dsl_loc else "  generated from DSL: (no @ marker)")
    parts.append(f"  reproduce with: {shlex.join(reproduce)}")
    return CompileError(
        "\n".join(parts),
        command=reproduce,
        stderr=stderr,
        cpp_file=cpp_file,
        cpp_line=cpp_line,
        dsl_loc=dsl_loc,
    )


def _line_and_dsl_loc(path: Path, line: int) -> tuple[str, str | None]:
    """The text of ``path``'s 1-based ``line`` and the DSL location of its ``// @`` marker, or of
    the nearest preceding line's marker."""
    try:
        source_lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(source not readable)", None
    if not 1 <= line <= len(source_lines):
        return "(line not in file)", None
    for text in reversed(source_lines[:line]):
        m = DSL_MARKER.search(text)
        if m:
            return source_lines[line - 1], f"{m[1]}:{m[2]}"
    return source_lines[line - 1], None


def check() -> list[tuple[str, bool, str]]:
    """Toolchain health for ``tilescope doctor``: (check name, passed, detail) triples."""
    results: list[tuple[str, bool, str]] = []
    try:
        cxx = find_cxx()
        results.append(("g++", True, f"{cxx}: {compiler_identity(cxx)}"))
    except ToolchainError as exc:
        results.append(("g++", False, str(exc)))
        cxx = None

    if cxx is None:
        results.append(("C++17", False, "skipped: no compiler"))
    else:
        results.append(_check_cxx17(cxx))

    root = cache.configured_cache_dir()  # the one asked for, not a temporary stand-in
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor.", delete=True) as f:
            f.write(b"ok")
        results.append(("cache dir", True, f"{root} is writable"))
    except OSError as exc:
        results.append(("cache dir", False, f"{root} is not writable ({exc}); set TILESCOPE_CACHE_DIR"))
    return results


_CXX17_PROBE = """\
#include <optional>
#include <string_view>
template <class T> constexpr int kind() { if constexpr (sizeof(T) == 4) return 4; else return 0; }
extern "C" int probe() { std::optional<std::string_view> s{"ok"}; return kind<float>() + int(s->size()); }
"""


def _check_cxx17(cxx: str) -> tuple[str, bool, str]:
    with tempfile.TemporaryDirectory(prefix="tilescope-doctor-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(_CXX17_PROBE)
        command = [cxx, *BASE_FLAGS, march_flag(), "-o", str(Path(tmp) / "probe.so"), str(src)]
        proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip())
        return ("C++17", False, f"{shlex.join(command)} failed: {first}. {INSTALL_HINT}")
    return ("C++17", True, "compiles a C++17 shared object with the base flags")
