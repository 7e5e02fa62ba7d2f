"""Tensors with guard zones, so that the runtime checks program arguments as it checks its own.

``guarded_clone(t)`` copies ``t`` into a mapping of its own laid out as the runtime lays out an
intermediate tensor: a 64-byte zone of ``GUARD_BYTE``, the tensor's bytes, a zone of
``GUARD_BYTE`` to the end of its page (at least 64 bytes), with inaccessible address space on
both sides (``guard_span``: at least 16 MiB, and 64 times the mapping, up to 4 GiB: reserved,
never memory). A kernel that writes just outside it changes a zone, which the runtime names after
the task (the run fails with kind ``guard``); one that writes further faults at once on its own
thread, whatever happens to be mapped nearby: an isolated run (``map_guarded``, each argument of
its shared file mapped so) faults where an in-process run faults.
``adopt_zones`` registers zones a caller laid out itself (the isolated child's shared file, where
the kernels must write so that a crash keeps what they wrote). ``guard_zones(args)`` lists the
zones of the program arguments, for ``ts_run_config::guard_zones``. The harness and task replay
hand kernels such copies; tensors a caller passes to a ``@ts.jit`` function are its own memory
and have no zones.

Invariants: a zone is listed while its mapping lives (a finalizer forgets it when the mapping is
freed, so a later tensor at the same address is never mistaken for a guarded one); the mapping
lives as long as any tensor viewing it.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import sys
import threading
import weakref
from typing import Any

import torch

from tilescope.runtime.abi import GUARD_BYTE, TsArg, TsGuardZone

log = logging.getLogger("tilescope")

HEAD_BYTES = 64  # GuardZones::kHeadBytes
MIN_TAIL_BYTES = 64  # GuardZones::kMinTailBytes
_PROT_NONE = 0
_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
# Linux's mmap flags (x86-64 and arm64 alike): what the mmap module does not expose
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
GUARD_SPAN_MIN = 16 << 20
GUARD_SPAN_MAX = 4 << 30
GUARD_SPAN_FACTOR = 64

_zones: dict[int, tuple[int, int, int, int]] = {}  # data address -> (bytes, before, after, reach)
# NOTE: reentrant: a garbage collection while it is held (guard_zones) can run a copy's finalizer,
# _forget, on the same thread
_lock = threading.RLock()
_libc: ctypes.CDLL | None = None


def _mprotect_none(address: int, length: int) -> bool:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return _libc.mprotect(ctypes.c_void_p(address), ctypes.c_size_t(length), _PROT_NONE) == 0


def guard_span(nbytes: int) -> int:
    """Bytes of inaccessible address space on each side of an ``nbytes`` mapping."""
    span = min(max(GUARD_SPAN_MIN, GUARD_SPAN_FACTOR * nbytes), GUARD_SPAN_MAX)
    return -(-span // mmap.PAGESIZE) * mmap.PAGESIZE


def _libc() -> Any:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.mmap.restype = ctypes.c_void_p
        _libc_handle.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_long]  # fmt: skip
        _libc_handle.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return _libc_handle


_libc_handle: Any = None
_MAP_FAILED = ctypes.c_void_p(-1).value


def map_guarded(nbytes: int, fd: int = -1, offset: int = 0) -> Any | None:
    """A writable mapping of ``nbytes`` (a multiple of the page size): anonymous, or ``fd``'s bytes
    from ``offset`` (shared), placed inside inaccessible address space (``guard_span`` on each
    side). Returns a ctypes byte array over it (the mapping lives as long as the array), or None
    where it cannot be made (not Linux, no address space)."""
    if not sys.platform.startswith("linux") or nbytes <= 0 or nbytes % mmap.PAGESIZE:
        return None
    libc, span = _libc(), guard_span(nbytes)
    total = span + nbytes + span
    base = libc.mmap(None, total, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        return None
    flags = _MAP_FIXED | (_MAP_SHARED if fd >= 0 else _MAP_PRIVATE | _MAP_ANONYMOUS)
    if libc.mmap(base + span, nbytes, _PROT_RW, flags, fd, offset) in (None, _MAP_FAILED):
        libc.munmap(base, total)
        return None
    body = (ctypes.c_char * nbytes).from_address(base + span)
    weakref.finalize(body, libc.munmap, base, total)
    return body


def _forget(address: int) -> None:
    with _lock:
        _zones.pop(address, None)


def guarded_clone(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of CPU tensor ``t`` with guard zones (``t`` itself if it has no elements,
    or a plain copy when no mapping can be made)."""
    nbytes = t.numel() * t.element_size()
    if nbytes == 0 or t.device.type != "cpu":
        return t.clone()
    page = mmap.PAGESIZE
    body = -(-(HEAD_BYTES + nbytes + MIN_TAIL_BYTES) // page) * page
    m, reach = map_guarded(body), guard_span(body)
    if m is None:
        m, reach = _paged(body)
        if m is None:
            log.debug("[guard] no mapping for a %d-byte tensor: a copy without guard zones", nbytes)
            return t.clone()
    tail = body - HEAD_BYTES - nbytes
    m[0:HEAD_BYTES] = bytes([GUARD_BYTE]) * HEAD_BYTES
    m[HEAD_BYTES + nbytes : body] = bytes([GUARD_BYTE]) * tail
    data = ctypes.addressof(m) + HEAD_BYTES
    out = torch.frombuffer(m, dtype=t.dtype, count=t.numel(), offset=HEAD_BYTES).view(t.shape)
    out.copy_(t)
    with _lock:
        _zones[data] = (nbytes, HEAD_BYTES, tail, reach)
    weakref.finalize(m, _forget, data)
    return out


def _paged(body: int) -> tuple[Any | None, int]:
    """``body`` bytes between two inaccessible pages (where ``map_guarded`` cannot map): a ctypes
    array over them, kept alive with the mapping, and the inaccessible bytes on each side (0
    where the pages could not be protected)."""
    page = mmap.PAGESIZE
    try:
        m = mmap.mmap(-1, body + 2 * page)
    except OSError:
        return None, 0
    anchor = ctypes.c_char.from_buffer(m)
    base = ctypes.addressof(anchor)
    del anchor  # NOTE: an exported buffer would keep the mapping from being closed
    reach = page
    if not (_mprotect_none(base, page) and _mprotect_none(base + page + body, page)):
        log.debug("[guard] no guard pages for a %d-byte mapping: its zones are still checked", body)
        reach = 0
    view = (ctypes.c_char * body).from_address(base + page)
    _kept[id(view)] = m
    weakref.finalize(view, _kept.pop, id(view), None)
    return view, reach


_kept: dict[int, mmap.mmap] = {}


def guarded_args(values: list) -> list:
    """``values`` with every CPU tensor replaced by a guarded copy (``guarded_clone``). Tensors
    of one dtype that view one storage share one copy of the part of it they view, each viewing
    it as it viewed the original: arguments that alias stay aliased."""
    groups: dict[tuple[int, torch.dtype], list[torch.Tensor]] = {}
    for v in values:
        if torch.is_tensor(v) and v.device.type == "cpu" and v.numel() and min(v.stride(), default=0) >= 0:
            groups.setdefault((v.untyped_storage().data_ptr(), v.dtype), []).append(v)
    copies: dict[int, torch.Tensor] = {}
    for views in groups.values():
        if len({id(v) for v in views}) == 1:
            copies[id(views[0])] = guarded_clone(views[0])
            continue
        lo = min(v.storage_offset() for v in views)
        hi = max(v.storage_offset() + sum((n - 1) * st for n, st in zip(v.shape, v.stride())) + 1 for v in views)
        base = guarded_clone(views[0].new_empty(0).set_(views[0].untyped_storage(), lo, (hi - lo,), (1,)))
        for v in views:
            copies[id(v)] = base.as_strided(v.shape, v.stride(), base.storage_offset() + v.storage_offset() - lo)
    return [
        copies[id(v)] if id(v) in copies else guarded_clone(v) if torch.is_tensor(v) else v for v in values
    ]


def adopt_zones(t: torch.Tensor, before: int, after: int, owner: object, reach: int = 0) -> None:
    """Register ``before`` and ``after`` bytes of GUARD_BYTE around ``t``'s storage, which the
    caller wrote there (the isolated child's shared file), for as long as ``owner`` (the memory
    holding them) lives, with ``reach`` bytes of inaccessible address space beyond them (0: none
    known). The runtime refuses the run if they do not hold GUARD_BYTE."""
    address = t.untyped_storage().data_ptr()
    with _lock:
        _zones[address] = (t.untyped_storage().nbytes(), before, after, reach)
    weakref.finalize(owner, _forget, address)


def guard_zones(args: list[TsArg]) -> list[TsGuardZone]:
    """The guard zones of the tensor program arguments among ``args`` made by ``guarded_clone``
    (one per buffer, for the first argument that views it)."""
    out: list[TsGuardZone] = []
    if not _zones:  # NOTE: the common case, without the lock: no guarded_clone is alive
        return out
    seen = set()
    with _lock:
        for i, a in enumerate(args):
            if a.kind != 0:  # TS_ARG_TENSOR
                continue
            address = a.u.t.data or 0
            zone = _zones.get(address)
            if zone is None or address in seen:
                continue
            seen.add(address)
            out.append(TsGuardZone(i, 0, *zone))
    return out


__all__ = [
    "HEAD_BYTES", "MIN_TAIL_BYTES", "adopt_zones", "guard_span", "guard_zones", "guarded_args", "guarded_clone",
    "map_guarded",
]  # fmt: skip
