"""What this machine's memory allows a run: the workers' stacks a build's local memory needs, and
whether a tensor's memory may be written at all.

Invariants:
- ``check_local_memory`` is the one check of a build's ``local_memory_bytes`` against what the
  machine and the runtime core can give (the compile knob's range is checked in ``knobs``): a
  worker's tiles live on its stack, which holds twice the local memory plus 4 MiB
  (``worker_stack_mib``), so N workers reserve N such stacks. Past the core's limit
  (``knobs.MAX_LOCAL_MEMORY_BYTES``: the stack size must fit the core's 32-bit MiB count) or past
  the physical memory it is a ConfigError naming the knob, the value, the limit and what to do,
  raised before a thread starts. Builds with the default stacks are never refused here.
- ``unwritable(t)`` tells, without writing a byte and without faulting, whether the storage of
  CPU tensor ``t`` is mapped read-only (a tensor made from a read-only ``np.memmap`` or a
  read-only buffer): the kernel is asked to make its first and last pages writable
  (``MADV_POPULATE_WRITE``), and ``/proc/self/maps`` is read where it refuses or, before Linux
  5.14, cannot.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import weakref
from typing import Any

from tilescope.errors import ConfigError
from tilescope.knobs import MAX_LOCAL_MEMORY_BYTES
from tilescope.runtime.run_config import RunConfig

STACK_EXTRA_BYTES = 4 << 20  # a worker stack's room beyond twice the local memory
DEFAULT_STACK_BYTES = 8 << 20  # a thread's default stack: enough for a build's default local memory
_MADV_POPULATE_WRITE = 23  # linux/mman.h, Linux >= 5.14
# storages found writable -> the byte range they had then (a resized storage is asked again)
_writable: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()


def worker_stack_mib(local_memory_bytes: int) -> int:
    """The worker stack (MiB) a build with this much local memory needs, 0 when the default
    8 MiB thread stack is enough: a kernel's tiles live on its worker's stack, and the compiled
    code may keep a statement's temporaries apart, so twice the local memory plus 4 MiB."""
    need = 2 * max(local_memory_bytes, 0) + STACK_EXTRA_BYTES
    return 0 if need <= DEFAULT_STACK_BYTES else -(-need // (1 << 20))


def run_workers(config: RunConfig) -> int:
    """The worker threads a sim run with ``config`` runs on (``num_workers=0``: one per CPU)."""
    return 1 if config.serial else config.num_workers or _cpu_count()


@functools.lru_cache(maxsize=1)
def _cpu_count() -> int:
    """os.cpu_count(), read once: it reads a file under /sys each time (2 us of every run), and the
    runtime core sizes its default worker count once per runtime too."""
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or a container's memory limit below it (cgroup v2's
    ``memory.max``); None where the system does not say."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total if total > 0 else None


def size_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (``1.5 GiB``)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} bytes"


def check_local_memory(local_memory_bytes: int, workers: int, program: str) -> None:
    """ConfigError when ``workers`` workers with stacks for ``local_memory_bytes`` (the build of
    ``program``'s compile knob) cannot be given by the core or by this machine (see the module
    docstring); nothing for a build whose workers keep the default stacks."""
    stack_mib = worker_stack_mib(local_memory_bytes)
    if stack_mib == 0:
        return
    value = f"local_memory_bytes={local_memory_bytes} ({size_text(local_memory_bytes)}) of build {program}"
    if local_memory_bytes > MAX_LOCAL_MEMORY_BYTES:
        raise ConfigError(
            f"{value}: more than the {size_text(MAX_LOCAL_MEMORY_BYTES)} the runtime can give a worker (its tiles live "
            f"on a stack twice that size): compile again with compile_cfg local_memory_bytes <= {MAX_LOCAL_MEMORY_BYTES}"
        )
    physical = physical_memory_bytes()
    stack = stack_mib << 20
    if physical is None or workers * stack <= physical:
        return
    fit = physical // stack
    most = max(0, (physical // max(workers, 1) - STACK_EXTRA_BYTES) // 2)
    fewer = (f", or run with at most {fit} worker(s) (num_workers=, --workers)" if fit
             else ": not even one worker's stack fits")  # fmt: skip
    raise ConfigError(
        f"{value}: each of the {workers} worker(s) reserves a stack of {size_text(stack)} (twice the local memory, "
        f"plus 4 MiB), {size_text(workers * stack)} in all, more than this machine's {size_text(physical)} of "
        f"physical memory: compile with a smaller compile_cfg local_memory_bytes (at most {most}, {size_text(most)}, "
        f"for {workers} worker(s); report/summary.txt lists each kernel's peak){fewer}"
    )


@functools.lru_cache(maxsize=1)
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's madvise when this kernel has MADV_POPULATE_WRITE (tried on a private page), else None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    page = mmap.mmap(-1, mmap.PAGESIZE)
    anchor = ctypes.c_char.from_buffer(page)
    try:
        works = fn(ctypes.addressof(anchor), mmap.PAGESIZE, _MADV_POPULATE_WRITE) == 0
    finally:
        del anchor
        page.close()
    return fn if works else None


def _writable_in_maps(lo: int, hi: int) -> bool:
    """Whether ``/proc/self/maps`` maps every byte of [lo, hi) writable."""
    try:
        with open("/proc/self/maps", "rb") as f:
            rows = f.read().splitlines()
    except OSError:
        return True  # NOTE: no way to tell: the run goes ahead as it always did
    covered = lo
    for row in rows:
        span, perms = row.split(None, 2)[:2]
        start, end = (int(x, 16) for x in span.split(b"-"))
        if end <= covered or start > covered:
            continue
        if b"w" not in perms:
            return False
        covered = end
        if covered >= hi:
            return True
    return covered >= hi


def unwritable(t) -> bool:
    """Whether CPU tensor ``t``'s storage lies in memory mapped read-only (see the module
    docstring); False for a tensor without elements. A storage found writable is remembered while
    it lives (and keeps its memory), so a run's outputs cost a lookup, not a system call."""
    if not t.is_cpu or t.numel() == 0:
        return False
    storage = t.untyped_storage()
    lo, hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    if _writable.get(storage) == (lo, hi) or hi <= lo:
        return False
    fn = _madvise()
    page = mmap.PAGESIZE
    if fn is not None and all(fn(p, page, _MADV_POPULATE_WRITE) == 0 for p in {lo & ~(page - 1), (hi - 1) & ~(page - 1)}):
        ok = True
    else:  # NOTE: refused (read-only, a mapping the kernel does not populate, interrupted), or no madvise: the maps tell
        ok = _writable_in_maps(lo, hi)
    if ok:
        _writable[storage] = (lo, hi)
    return not ok


__all__ = [
    "check_local_memory",
    "physical_memory_bytes",
    "run_workers",
    "size_text",
    "unwritable",
    "worker_stack_mib",
]
