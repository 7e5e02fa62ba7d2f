"""Building and loading shared objects: the runtime core, and the kernels and orchestrations of a
build.

Invariants:
- The core is compiled from the shipped sources by the toolchain (content-addressed cache) the
  first time a process needs it, loaded once, and checked against ``abi``'s mirror of the C
  structs (ABI version and ``sizeof(ts_arg)``) before use.
- Every other library is loaded through a copy named by its content (``open_library``): the
  dynamic loader keeps a library by path, so a binary rebuilt in place is still picked up in
  the same process, and two builds never see each other's code.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tilescope.errors import TilescopeError, ToolchainError
from tilescope.runtime import abi
from tilescope.toolchain import BuildJob, build, cache_dir, object_path
from tilescope.toolchain.cache import abi_version, cache_is_temporary, cached_copy

CSRC_DIR = Path(__file__).resolve().parent / "csrc"


@dataclass(frozen=True)
class EntryPoint:
    """An exported function of a loaded kernel/orchestration library; keeps the library loaded."""

    library: ctypes.CDLL
    symbol: str
    address: int
    sha256: str  # of the library's bytes as loaded


_load_lock = threading.Lock()
_core: tuple[ctypes.CDLL, Path] | None = None


def load_core() -> ctypes.CDLL:
    """The runtime core library, built (or fetched from the cache) and loaded on first use."""
    return _loaded()[0]


def library_path() -> Path:
    """The path of the loaded runtime core (building and loading it if needed)."""
    return _loaded()[1]


def _loaded() -> tuple[ctypes.CDLL, Path]:
    global _core
    with _load_lock:
        if _core is None:
            path = _build_core()
            _core = (_open_core(path), path)
        return _core


def _build_core(defines: tuple[str, ...] = ()) -> Path:
    """Build (or fetch) the core; ``defines`` (e.g. ``TS_RUNTIME_NO_OBSERVERS``) only for benchmarks."""
    sources = sorted(CSRC_DIR.glob("*.cpp"))
    if not sources:
        raise ToolchainError(f"the runtime core sources are missing from {CSRC_DIR}; reinstall tilescope")
    job = BuildJob(
        source=sources[0],
        extra_sources=tuple(sources[1:]),
        # NOTE: a stable name for tools (gdb, addr2line); the process loads the content-addressed
        # object itself, which no other build can replace while it is being opened.
        output=cache_dir() / "runtime" / "libtilescope_core.so",
        include_dirs=(CSRC_DIR,),
        extra_flags=("-pthread", *(f"-D{d}" for d in defines)),
    )
    (result,) = build([job])
    if not result.cache_hit:
        logging.getLogger("tilescope").info(
            "[runtime] built the runtime core on first use (%.1fs); later runs reuse it%s",
            result.seconds,
            " (in this process only: the cache is temporary)" if cache_is_temporary() else "",
        )
    return object_path(result.key)


def _open_core(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    for name, (restype, argtypes) in abi.PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    core_abi, core_arg = lib.ts_core_abi_version(), lib.ts_core_sizeof_arg()
    if core_abi != abi_version() or core_arg != ctypes.sizeof(abi.TsArg):
        raise ToolchainError(
            f"runtime core {path} does not match this tilescope: ABI {core_abi} / sizeof(ts_arg) {core_arg}, "
            f"expected ABI {abi_version()} / {ctypes.sizeof(abi.TsArg)}; delete it and run again"
        )
    return lib


def open_library(path: str | os.PathLike) -> tuple[ctypes.CDLL, str]:
    """Load a kernel or orchestration library (RTLD_LOCAL, RTLD_NOW) through a copy named by its
    content, so a library rebuilt in place is picked up again in this process; the library and the
    sha256 of the bytes loaded.

    Raises:
        TilescopeError: ``path`` does not exist (an incomplete build).
        ToolchainError: the dynamic loader refuses it (empty, cut short, corrupt); the copy made
            to load it is removed again.
    """
    path = Path(path)
    if not path.is_file():
        raise TilescopeError(
            f"{path} is missing: the build is incomplete; recompile it (run without --runtime-dir)"
        )
    # NOTE: read once, hashed and copied from the same bytes: a binary replaced meanwhile cannot
    # leave a copy whose name says other bytes than it holds
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    loaded = cached_copy(path, f"loaded/{digest}{path.suffix}", data)
    try:
        return ctypes.CDLL(str(loaded), mode=os.RTLD_LOCAL | os.RTLD_NOW), digest
    except OSError as e:
        loaded.unlink(missing_ok=True)  # named by its content: no one can load this content
        reason = str(e).replace(f"{loaded}: ", "")
        raise ToolchainError(
            f"{path} cannot be loaded ({reason}): it is not a shared object tilescope built, or it was cut "
            "short or damaged. Delete it and run again: tilescope rebuilds a missing binary from its C++ source"
        ) from None


def load_entry(path: str | os.PathLike, symbol: str) -> EntryPoint:
    """Open a kernel or orchestration library (``open_library``) and find ``symbol`` in it.

    Raises:
        TilescopeError: ``path`` does not exist.
        ToolchainError: the library does not export ``symbol``.
    """
    lib, digest = open_library(path)
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        raise ToolchainError(
            f"{path} does not export {symbol!r}; was it built from tilescope generated code?"
        ) from None
    address = ctypes.cast(fn, ctypes.c_void_p).value
    assert address is not None
    return EntryPoint(lib, symbol, address, digest)


ProbeInstaller = Callable[[int | None], None]


def sink_installer(library: ctypes.CDLL, symbol: str = "ts_probe_install") -> ProbeInstaller | None:
    """A kernel library's ``ts_probe_install`` (set where its ``ts.probe`` calls go; None: off),
    or its ``ts_audit_install`` (where an audit build's loads and stores are recorded); None when
    the library has no such sink."""
    try:
        fn = getattr(library, symbol)
    except AttributeError:
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p], None
    return fn


def probe_sink() -> int:
    """The address of the core's ``ts_probe_record``, what a kernel's probes are pointed at."""
    address = ctypes.cast(load_core().ts_probe_record, ctypes.c_void_p).value
    assert address is not None
    return address


def load_core_variant(defines: tuple[str, ...]) -> Path:
    """Build the core with extra ``-D`` defines (e.g. ``TS_RUNTIME_NO_OBSERVERS``, for benchmarks that
    compare variants) and make it this process's core; call it before the first run."""
    global _core
    path = _build_core(defines)
    with _load_lock:
        _core = (_open_core(path), path)
    return path
