"""ctypes binding of the C++ runtime core (``runtime/csrc``, API in ``tilescope/runtime_api.h``).

Invariants:
- The core is compiled from the shipped sources by the toolchain (content-addressed cache) the
  first time a process needs it, loaded once, and checked against this module's mirror of the
  C structs (ABI version and ``sizeof(ts_arg)``) before use.
- Python is never on the per-task path: ``run_graph`` makes one ctypes call, which releases the
  GIL while the graph runs, and converts the records afterwards.
- Worker threads outlive a run: a ``Runtime`` owns a ``ts_runtime`` whose workers park between
  runs. ``run_graph`` borrows one from a pool keyed by the requested worker count and gives it
  back afterwards; a Runtime is lent to one call at a time, so concurrent ``run_graph`` calls
  never share one. The pool keeps at most ``MAX_IDLE_RUNTIMES`` idle, closes them at
  interpreter exit and forgets them in a forked child (whose copies have no threads).
- ``TsArg`` values hold raw pointers: the tensors they describe must stay alive, and must not
  be resized, until ``run_graph`` returns.
"""

from __future__ import annotations

import atexit
import ctypes
import enum
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilescope.errors import ArgumentError, RuntimeFailure, ToolchainError
from tilescope.language import dtypes
from tilescope.language.dtypes import DType
from tilescope.toolchain import BuildJob, build, cache_dir, object_path
from tilescope.toolchain.cache import abi_version

CSRC_DIR = Path(__file__).resolve().parent / "csrc"
MAX_DIMS = 4  # TS_MAX_DIMS
MAX_IDLE_RUNTIMES = 4  # idle runtimes (each with parked workers) kept for reuse
DUMP_ARENA_BYTES = 64 << 20  # tensor dump payload ring per worker (levels 1 and 2)
DUMP_MAX_RECORDS = 1 << 20  # tensor dump records kept per worker; later ones are dropped (and counted)
DUMP_STAGES = ("before_dispatch", "after_completion")  # ts_dump_stage
DUMP_ROLES = ("input", "output", "inout", "scalar")  # by ts_dir
DUMP_TRUNCATED, DUMP_OVERWRITTEN = 1, 2  # ts_dump_record flags
SAVED_PARTIAL = 4  # ts_dump_record flag of saved task inputs (TS_SAVED_PARTIAL)
MAX_FRAMES = 32  # TS_MAX_FRAMES
FAILURE_KINDS = ("none", "error", "deadlock", "timeout", "kernel_error")  # ts_failure_kind


class Direction(enum.IntEnum):
    """``ts_dir``: how a task (or program) uses an argument."""

    IN = 0
    OUT = 1
    INOUT = 2
    SCALAR = 3


def as_direction(value: Direction | int | str | enum.Enum) -> Direction:
    """``Direction.IN``, ``0``, ``"in"`` or any enum whose value is one of those, as a Direction."""
    if isinstance(value, enum.Enum) and not isinstance(value, Direction):
        value = value.value
    if isinstance(value, str):
        try:
            return Direction[value.upper()]
        except KeyError:
            known = ", ".join(d.name.lower() for d in Direction)
            raise ArgumentError(f"unknown argument direction {value!r}; known: {known}") from None
    return Direction(value)


class ArgKind(enum.IntEnum):
    TENSOR = 0
    SCALAR = 1


EDGE_KINDS = ("RAW", "WAW", "WAR", "ORDER")  # ts_edge_kind
EDGE_SOURCES = ("tensormap", "explicit")  # ts_edge_source


class TsTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("buffer_id", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("offset", ctypes.c_int64),
    ]


class TsScalarValue(ctypes.Union):
    _fields_ = [("f", ctypes.c_double), ("i", ctypes.c_int64)]


class TsScalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32), ("v", TsScalarValue)]


class TsArgValue(ctypes.Union):
    _fields_ = [("t", TsTensor), ("s", TsScalar)]


class TsArg(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("dir", ctypes.c_int32), ("u", TsArgValue)]


class TsRunConfig(ctypes.Structure):
    _fields_ = [
        ("num_workers", ctypes.c_int32),
        ("record_edges", ctypes.c_int32),
        ("record_tasks", ctypes.c_int32),
        ("dump_level", ctypes.c_int32),
        ("dump_arena_bytes", ctypes.c_int64),
        ("dump_max_records", ctypes.c_int64),
        ("task_timeout_s", ctypes.c_double),
        ("serial", ctypes.c_int32),
        ("nan_check", ctypes.c_int32),
        ("trace_tasks", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("kernel_filter", ctypes.c_void_p),
        ("crash_report_path", ctypes.c_char_p),
    ]


class TsEdgeRecord(ctypes.Structure):
    _fields_ = [
        ("pred", ctypes.c_int64),
        ("succ", ctypes.c_int64),
        ("arg_index", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("source", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class TsTaskRecord(ctypes.Structure):
    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("worker", ctypes.c_int32),
        ("submit_ns", ctypes.c_int64),
        ("start_ns", ctypes.c_int64),
        ("end_ns", ctypes.c_int64),
    ]


class TsTaskArgRecord(ctypes.Structure):
    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("arg_index", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("arg", TsArg),
    ]


class TsBufferRecord(ctypes.Structure):
    _fields_ = [("tensor", TsTensor), ("program_arg", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class TsDumpTagRecord(ctypes.Structure):
    _fields_ = [("tensor", TsTensor), ("first_task", ctypes.c_int64)]


class TsDumpRecord(ctypes.Structure):
    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("arg_index", ctypes.c_int32),
        ("role", ctypes.c_int32),
        ("stage", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("flags", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("start_offset", ctypes.c_int64),
        ("buffer_id", ctypes.c_int64),
        ("value", TsScalar),
        ("bin_offset", ctypes.c_int64),
        ("bin_size", ctypes.c_int64),
        ("worker", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class TsFailureRecord(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("worker", ctypes.c_int32),
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("nframes", ctypes.c_int32),
        ("elapsed_ns", ctypes.c_int64),
        ("frames", ctypes.c_uint64 * MAX_FRAMES),
    ]


class TsWaitRecord(ctypes.Structure):
    _fields_ = [
        ("task", ctypes.c_int64),
        ("pred", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("pred_func_id", ctypes.c_int32),
        ("pred_state", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("source", ctypes.c_int32),
        ("arg_index", ctypes.c_int32),
        ("arg", TsArg),
    ]


class TsNanRecord(ctypes.Structure):
    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("worker", ctypes.c_int32),
        ("arg_index", ctypes.c_int32),
        ("origin", ctypes.c_int32),
        ("first_index", ctypes.c_int64),
        ("nan_count", ctypes.c_int64),
        ("inf_count", ctypes.c_int64),
        ("input_arg", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("producer", ctypes.c_int64),
    ]


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """How a run failed: ``kind`` is ``error``, ``deadlock``, ``timeout`` or ``kernel_error``;
    ``task_id``/``func_id``/``worker`` are -1 where they do not apply (the orchestration).
    ``frames`` are the stopped thread's return addresses (timeouts; ``frames[0]`` the pc)."""

    kind: str
    task_id: int
    func_id: int
    worker: int
    elapsed_ns: int
    frames: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """An unmet dependency of a task that can never run (a deadlock): ``task`` waits for
    ``pred``, which is blocked too or was never submitted (``pred_func_id`` -1). ``kind``/``source``
    as in EdgeRecord; ``arg`` is task's argument behind a tensor-map edge (None for explicit deps)."""

    task: int
    pred: int
    func_id: int
    pred_func_id: int
    never_submitted: bool
    kind: str
    source: str
    arg: TaskArgRecord | None


@dataclass(frozen=True, slots=True)
class NanRecord:
    """A task whose output argument ``arg_index`` holds NaN/Inf after it ran. ``fresh``: all its
    inputs were finite (the task made them); otherwise ``input_arg`` was not, last written by
    task ``producer`` (-1: a program input). ``first_index`` is row-major within the region."""

    task_id: int
    func_id: int
    worker: int
    arg_index: int
    fresh: bool
    first_index: int
    nan_count: int
    inf_count: int
    input_arg: int
    producer: int


@dataclass
class SavedInputs:
    """The arguments of the one task worth replaying alone (see ``ts_run_saved_task``):
    records as in the dump (stage before_dispatch; outputs without payload)."""

    task_id: int
    records: list[DumpRecord]
    payload: np.ndarray  # uint8
    partial_args: tuple[int, ...]  # inouts captured after the kernel had partly run


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task's timing (nanoseconds since the run started, steady clock). ``worker`` is -1
    (and the times 0) for a task skipped after a failure."""

    task_id: int
    func_id: int
    name: str
    worker: int
    submit_ns: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class EdgeRecord:
    """A dependency ``pred -> succ``. ``arg`` is succ's argument index (-1 for explicit edges);
    ``kind`` is RAW, WAW, WAR or ORDER (explicit); ``source`` is ``tensormap`` or ``explicit``."""

    pred: int
    succ: int
    arg: int
    kind: str
    source: str


@dataclass(frozen=True, slots=True)
class TaskArgRecord:
    """One argument of one task as submitted (recorded with ``record_edges``). ``kind`` is
    ``tensor`` or ``scalar``; ``direction`` ``in``, ``out``, ``inout`` or ``scalar``. A tensor is a
    view of buffer ``buffer_id`` (``shape``/``strides``/``offset`` in elements, ``value`` None);
    a scalar has ``value`` and no buffer (``buffer_id`` 0, empty shape)."""

    task_id: int
    arg_index: int
    kind: str
    direction: str
    dtype: str
    buffer_id: int = 0
    ndim: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    offset: int = 0
    value: float | int | None = None


@dataclass(frozen=True, slots=True)
class BufferRecord:
    """A buffer the run knows as a whole (recorded with ``record_edges``): a tensor program
    argument (``program_arg`` its index) or an intermediate from ``create_tensor`` (-1)."""

    buffer_id: int
    program_arg: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class DumpTagRecord:
    """A tensor region the orchestration marked with ``dump_tag``, effective from ``first_task``."""

    first_task: int
    buffer_id: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class DumpRecord:
    """One dumped argument of one task. ``stage`` is ``before_dispatch`` (inputs, inouts,
    scalars) or ``after_completion`` (outputs, inouts); ``role`` is ``input``, ``output``,
    ``inout`` or ``scalar``. A tensor's payload is ``payload[bin_offset:bin_offset + bin_size]``
    of its DumpReport (``bin_offset`` None: no payload kept); a scalar has ``value``."""

    task_id: int
    func_id: int
    arg_index: int
    role: str
    stage: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    start_offset: int
    buffer_id: int
    value: float | int | bool | None
    bin_offset: int | None
    bin_size: int
    truncated: bool
    overwritten: bool
    worker: int


@dataclass
class DumpReport:
    """The tensor dump of one run (flushed from every worker, a failed run included): records
    sorted by (task_id, stage, arg_index) and their payloads, concatenated in record order."""

    level: int
    records: list[DumpRecord]
    payload: np.ndarray  # uint8
    dropped_records: int
    task_names: dict[int, str]


@dataclass
class RunReport:
    status: int
    error: str
    wall_s: float
    num_tasks: int
    num_workers: int
    num_dependencies: int  # distinct (pred, succ) pairs the scheduler enforced
    tasks: list[TaskRecord] = field(default_factory=list)  # with record_tasks
    edges: list[EdgeRecord] = field(default_factory=list)  # with record_edges
    task_args: list[TaskArgRecord] = field(default_factory=list)  # with record_edges
    buffers: list[BufferRecord] = field(default_factory=list)  # with record_edges or a dump
    dump_tags: list[DumpTagRecord] = field(default_factory=list)
    dump: DumpReport | None = None  # with dump_level 1..3
    failure: FailureInfo | None = None  # None when the run did not fail
    waits: list[WaitRecord] = field(default_factory=list)  # deadlocks
    nan: list[NanRecord] = field(default_factory=list)  # nan_check (at most 256)
    nan_total: int = 0  # nan_check: tasks whose outputs held NaN/Inf
    saved: SavedInputs | None = None


@dataclass(frozen=True)
class EntryPoint:
    """An exported function of a loaded kernel/orchestration library; keeps the library loaded."""

    library: ctypes.CDLL
    symbol: str
    address: int


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
    """Build (or fetch) the core; ``defines`` (e.g. ``TS_RUNTIME_NO_DUMP``) only for benchmarks."""
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
            "[runtime] built the runtime core on first use (%.1fs); later runs reuse it", result.seconds
        )
    return object_path(result.key)


def _open_core(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    c_result = ctypes.c_void_p
    protos = {
        "ts_runtime_create": (ctypes.c_void_p, [ctypes.c_int32]),
        "ts_runtime_num_workers": (ctypes.c_int32, [ctypes.c_void_p]),
        "ts_runtime_destroy": (None, [ctypes.c_void_p]),
        "ts_runtime_run": (
            c_result,
            [
                ctypes.c_void_p,
                ctypes.POINTER(TsRunConfig),
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_int32,
                ctypes.POINTER(TsArg),
                ctypes.c_int32,
            ],
        ),
        "ts_run": (
            c_result,
            [
                ctypes.POINTER(TsRunConfig),
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_int32,
                ctypes.POINTER(TsArg),
                ctypes.c_int32,
            ],
        ),
        "ts_run_status": (ctypes.c_int32, [c_result]),
        "ts_run_error": (ctypes.c_char_p, [c_result]),
        "ts_run_num_tasks": (ctypes.c_int64, [c_result]),
        "ts_run_num_dependencies": (ctypes.c_int64, [c_result]),
        "ts_run_num_edges": (ctypes.c_int64, [c_result]),
        "ts_run_num_workers": (ctypes.c_int32, [c_result]),
        "ts_run_wall_seconds": (ctypes.c_double, [c_result]),
        "ts_run_copy_tasks": (ctypes.c_int64, [c_result, ctypes.POINTER(TsTaskRecord), ctypes.c_int64]),
        "ts_run_copy_edges": (ctypes.c_int64, [c_result, ctypes.POINTER(TsEdgeRecord), ctypes.c_int64]),
        "ts_run_num_task_args": (ctypes.c_int64, [c_result]),
        "ts_run_copy_task_args": (
            ctypes.c_int64,
            [c_result, ctypes.POINTER(TsTaskArgRecord), ctypes.c_int64],
        ),
        "ts_run_num_buffers": (ctypes.c_int64, [c_result]),
        "ts_run_copy_buffers": (ctypes.c_int64, [c_result, ctypes.POINTER(TsBufferRecord), ctypes.c_int64]),
        "ts_run_num_dump_tags": (ctypes.c_int64, [c_result]),
        "ts_run_copy_dump_tags": (
            ctypes.c_int64,
            [c_result, ctypes.POINTER(TsDumpTagRecord), ctypes.c_int64],
        ),
        "ts_run_dump_level": (ctypes.c_int32, [c_result]),
        "ts_run_num_dump_records": (ctypes.c_int64, [c_result]),
        "ts_run_copy_dump_records": (
            ctypes.c_int64,
            [c_result, ctypes.POINTER(TsDumpRecord), ctypes.c_int64],
        ),
        "ts_run_dump_payload_size": (ctypes.c_int64, [c_result]),
        "ts_run_copy_dump_payload": (ctypes.c_int64, [c_result, ctypes.c_void_p, ctypes.c_int64]),
        "ts_run_dump_dropped": (ctypes.c_int64, [c_result]),
        "ts_run_task_name": (ctypes.c_char_p, [c_result, ctypes.c_int64]),
        "ts_run_failure": (ctypes.c_int32, [c_result, ctypes.POINTER(TsFailureRecord)]),
        "ts_run_num_waits": (ctypes.c_int64, [c_result]),
        "ts_run_copy_waits": (ctypes.c_int64, [c_result, ctypes.POINTER(TsWaitRecord), ctypes.c_int64]),
        "ts_run_num_nan": (ctypes.c_int64, [c_result]),
        "ts_run_nan_total": (ctypes.c_int64, [c_result]),
        "ts_run_copy_nan": (ctypes.c_int64, [c_result, ctypes.POINTER(TsNanRecord), ctypes.c_int64]),
        "ts_run_saved_task": (ctypes.c_int64, [c_result]),
        "ts_run_num_saved": (ctypes.c_int64, [c_result]),
        "ts_run_copy_saved": (ctypes.c_int64, [c_result, ctypes.POINTER(TsDumpRecord), ctypes.c_int64]),
        "ts_run_saved_payload_size": (ctypes.c_int64, [c_result]),
        "ts_run_copy_saved_payload": (ctypes.c_int64, [c_result, ctypes.c_void_p, ctypes.c_int64]),
        "ts_run_free": (None, [c_result]),
        "ts_core_abi_version": (ctypes.c_uint32, []),
        "ts_core_sizeof_arg": (ctypes.c_int32, []),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    core_abi, core_arg = lib.ts_core_abi_version(), lib.ts_core_sizeof_arg()
    if core_abi != abi_version() or core_arg != ctypes.sizeof(TsArg):
        raise ToolchainError(
            f"runtime core {path} does not match this tilescope: ABI {core_abi} / sizeof(ts_arg) {core_arg}, "
            f"expected ABI {abi_version()} / {ctypes.sizeof(TsArg)}; delete it and run again"
        )
    return lib


def load_entry(path: Path, symbol: str) -> EntryPoint:
    """Open a kernel or orchestration library (RTLD_LOCAL) and find ``symbol`` in it.

    NOTE: the dynamic loader caches libraries by path; a library rebuilt in place is only picked
    up by a new process, so builds write each version to its own path.
    """
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        raise ToolchainError(
            f"{path} does not export {symbol!r}; was it built from tilescope generated code?"
        ) from None
    address = ctypes.cast(fn, ctypes.c_void_p).value
    assert address is not None
    return EntryPoint(lib, symbol, address)


def tensor_arg(t, direction: Direction | int | str) -> TsArg:
    """Describe torch tensor ``t`` (any strided CPU view) as a ``ts_arg``.

    ``data`` is the storage's base pointer and ``offset`` the view's storage offset, so views of
    one storage share ``buffer_id`` (the storage base address) and aliasing program arguments are
    ordered by the tensor map. A 0-d tensor is described as shape [1].

    Raises:
        ArgumentError: not a CPU tensor, too many dims, an unsupported dtype, or a bad direction.
    """
    direction = as_direction(direction)
    if direction == Direction.SCALAR:
        raise ArgumentError("tensor_arg: a tensor argument needs direction IN, OUT or INOUT, not SCALAR")
    if t.device.type != "cpu":
        raise ArgumentError(
            f"tensor_arg: tensors must be on the CPU for the sim platform, got one on {t.device}"
        )
    if t.dim() > MAX_DIMS:
        raise ArgumentError(
            f"tensor_arg: a tensor of shape {list(t.shape)} has {t.dim()} dims; at most {MAX_DIMS} are supported"
        )
    try:
        dtype = dtypes.from_torch(t.dtype)
    except ValueError as exc:
        raise ArgumentError(f"tensor_arg: {exc}") from None
    shape = tuple(t.shape) or (1,)
    strides = tuple(t.stride()) or (1,)
    base = t.untyped_storage().data_ptr()
    arg = TsArg(kind=ArgKind.TENSOR, dir=direction)
    desc = arg.u.t
    desc.data = base
    desc.buffer_id = base
    desc.dtype = dtype.code
    desc.ndim = len(shape)
    desc.offset = t.storage_offset()
    for d, (n, s) in enumerate(zip(shape, strides)):
        desc.shape[d] = n
        desc.strides[d] = s
    return arg


def scalar_arg(value: float | int | bool, dtype: DType) -> TsArg:
    """A ``ts_arg`` scalar of ``dtype``: stored as a double for float dtypes, else as an int64.

    Raises:
        ArgumentError: ``value`` does not fit (e.g. a non-integral float for an integer dtype).
    """
    arg = TsArg(kind=ArgKind.SCALAR, dir=Direction.SCALAR)
    arg.u.s.dtype = dtype.code
    if dtype.is_float:
        arg.u.s.v.f = float(value)
        return arg
    if isinstance(value, float) and not value.is_integer():
        raise ArgumentError(f"scalar_arg: {value!r} is not an integer, but the dtype is {dtype!r}")
    ivalue = int(value)
    if not -(2**63) <= ivalue < 2**63:
        raise ArgumentError(f"scalar_arg: {ivalue} does not fit in 64 bits")
    arg.u.s.v.i = ivalue
    return arg


class Runtime:
    """A ``ts_runtime``: worker threads started by the first run, parked (asleep) between runs
    and reused by every later one, until ``close()``.

    Runs on one Runtime are serialized (a concurrent ``run`` waits for the one in progress); each
    starts from a clean state, whatever the previous run left behind or failed with.
    The workers are joined by ``close()``, on leaving a ``with`` block, or when the object is
    collected; a Runtime inherited by a forked child has no threads there and is never used or
    destroyed by it.
    """

    def __init__(self, num_workers: int = 0) -> None:
        """A runtime whose workers start with its first run.

        Args:
            num_workers: worker threads; 0 = one per hardware thread.

        Raises:
            ArgumentError: ``num_workers`` is negative.
            RuntimeFailure: the runtime cannot be created (out of memory).
        """
        if num_workers < 0:
            raise ArgumentError(
                f"Runtime: num_workers must be >= 0 (0 = all hardware threads), got {num_workers}"
            )
        self._lib = load_core()
        self._pid = os.getpid()
        self._lock = threading.Lock()  # a run and close() never overlap on one handle
        self._handle: int | None = self._lib.ts_runtime_create(num_workers)
        if not self._handle:
            raise RuntimeFailure(f"cannot create a runtime with {num_workers} worker(s): out of memory")
        self.requested_workers = num_workers
        self.num_workers: int = self._lib.ts_runtime_num_workers(self._handle)

    def run(
        self,
        orch_fn_address: int,
        kernel_fn_addresses: list[int],
        kernel_names: list[str],
        args: list[TsArg],
        record_edges: bool = False,
        record_tasks: bool = False,
        dump_level: int = 0,
        checks: RunChecks | None = None,
    ) -> RunReport:
        """Run an orchestration on this runtime's workers; see ``run_graph``.

        Raises:
            RuntimeFailure: the run failed (``exc.report`` holds the RunReport), or the runtime
                is closed or belongs to another process.
            ArgumentError: the kernel tables disagree or an address is NULL.
        """
        _check_graph("Runtime.run", orch_fn_address, kernel_fn_addresses, kernel_names)
        lib = self._lib
        nkernels = len(kernel_fn_addresses)
        kernels = (ctypes.c_void_p * nkernels)(*kernel_fn_addresses)
        names = (ctypes.c_char_p * nkernels)(*(n.encode() for n in kernel_names))
        arg_array = (TsArg * len(args))(*args)
        if dump_level not in (0, 1, 2, 3):
            raise ArgumentError(f"Runtime.run: dump_level must be 0..3, got {dump_level!r}")
        checks = checks or RunChecks()
        filt = None
        if checks.kernel_filter is not None:
            if len(checks.kernel_filter) != nkernels:
                raise ArgumentError(
                    f"Runtime.run: kernel_filter has {len(checks.kernel_filter)} flags for {nkernels} kernel(s)"
                )
            filt = (ctypes.c_uint8 * nkernels)(*(int(bool(f)) for f in checks.kernel_filter))
        config = TsRunConfig(
            0,
            int(record_edges),
            int(record_tasks),
            dump_level,
            DUMP_ARENA_BYTES,
            DUMP_MAX_RECORDS,
            float(checks.task_timeout_s),
            int(checks.serial),
            int(checks.nan_check),
            int(checks.trace_tasks),
            0,
            ctypes.cast(filt, ctypes.c_void_p) if filt is not None else None,
            os.fsencode(checks.crash_report_path) if checks.crash_report_path else None,
        )
        with self._lock:
            if self._handle is None or self._pid != os.getpid():
                raise RuntimeFailure(
                    "Runtime.run: this runtime is closed (or was created by another process)"
                )
            handle = lib.ts_runtime_run(
                self._handle,
                ctypes.byref(config),
                orch_fn_address,
                kernels,
                names,
                nkernels,
                arg_array,
                len(args),
            )
        try:
            report = _collect(lib, handle, record_tasks)
        finally:
            lib.ts_run_free(handle)
        if report.status != 0:
            failure = RuntimeFailure(report.error)
            failure.report = report  # type: ignore[attr-defined]
            raise failure
        return report

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Wait for a run in progress, then join the workers. Idempotent."""
        if self._pid != os.getpid():
            # NOTE: a forked child has the handle but not its threads (joining them would hang)
            # and perhaps a lock held by a thread that does not exist there: leave both alone.
            self._handle = None
            return
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._lib.ts_runtime_destroy(handle)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()


class RuntimePool:
    """Idle Runtimes (parked workers) by requested worker count, lent to one caller at a time.

    Invariants:
    - A Runtime is either idle here or lent to exactly one caller, so runs on one Runtime never
      overlap; a caller that finds no idle Runtime of its worker count gets a new one.
    - At most ``max_idle`` stay idle: giving back one more closes the least recently used.
      ``close()`` closes every idle one, and every one given back later.
    """

    def __init__(self, max_idle: int = MAX_IDLE_RUNTIMES) -> None:
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[Runtime] = []  # least recently used first
        self._closed = False

    def borrow(self, num_workers: int) -> Runtime:
        """An idle Runtime with ``num_workers`` requested workers, or a new one."""
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i].requested_workers == num_workers:
                    return self._idle.pop(i)
        return Runtime(num_workers)

    def give_back(self, runtime: Runtime) -> None:
        """Keep ``runtime`` for reuse (or close it, if the pool is full or closed)."""
        with self._lock:
            if not self._closed:
                self._idle.append(runtime)
                if len(self._idle) <= self.max_idle:
                    return
                runtime = self._idle.pop(0)
        runtime.close()

    def idle_workers(self) -> list[int]:
        """The requested worker counts of the idle Runtimes, least recently used first."""
        with self._lock:
            return [r.requested_workers for r in self._idle]

    def close(self) -> None:
        """Close every idle Runtime (joining its workers); later give-backs close theirs."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for runtime in idle:
            runtime.close()

    def _forget_after_fork(self) -> None:
        # NOTE: the lock may have been held by a thread that does not exist in the child.
        self._lock = threading.Lock()
        self._idle = []


_runtimes = RuntimePool()
atexit.register(_runtimes.close)
os.register_at_fork(after_in_child=_runtimes._forget_after_fork)


def runtime_pool() -> RuntimePool:
    """The process's pool of idle Runtimes that ``run_graph`` borrows from."""
    return _runtimes


def _check_graph(
    caller: str, orch_fn_address: int, kernel_fn_addresses: list[int], kernel_names: list[str]
) -> None:
    if len(kernel_fn_addresses) != len(kernel_names):
        raise ArgumentError(
            f"{caller}: {len(kernel_fn_addresses)} kernel addresses but {len(kernel_names)} names"
        )
    if not orch_fn_address or not all(kernel_fn_addresses):
        raise ArgumentError(f"{caller}: the orchestration and every kernel need a non-NULL entry address")


@dataclass(frozen=True)
class RunChecks:
    """What a run watches for (see ``ts_run_config``): a per-task time budget (0: none), a
    serial schedule (needs a 1-worker runtime), NaN/Inf checks, a stderr line per task start and
    finish, a per-kernel filter (one flag per func_id) for those lines and dump levels 2/3, and
    where a crashing kernel writes its report."""

    task_timeout_s: float = 0.0
    serial: bool = False
    nan_check: bool = False
    trace_tasks: bool = False
    kernel_filter: tuple[bool, ...] | None = None
    crash_report_path: str | None = None


def single_task_orchestration() -> int:
    """Address of the core's orchestration that submits kernel 0 on every program argument."""
    return ctypes.cast(load_core().ts_single_task_orchestration, ctypes.c_void_p).value


def run_graph(
    orch_fn_address: int,
    kernel_fn_addresses: list[int],
    kernel_names: list[str],
    args: list[TsArg],
    num_workers: int = 0,
    record_edges: bool = False,
    record_tasks: bool = False,
    dump_level: int = 0,
    checks: RunChecks | None = None,
) -> RunReport:
    """Run an orchestration (``orchestration_entry``'s address) with kernels indexed by func_id.

    Blocks until the orchestration returned and every task finished; the GIL is released
    meanwhile. ``num_workers=0`` uses every hardware thread. ``dump_level`` 1..3 collects the
    tensor dump into ``report.dump`` (1 tagged, 2 every argument, 3 metadata only), bounded by
    ``DUMP_ARENA_BYTES`` and ``DUMP_MAX_RECORDS`` per worker. The run borrows a Runtime from
    ``runtime_pool()``, so consecutive runs reuse parked worker threads instead of starting them.

    Raises:
        RuntimeFailure: the run failed; the message is the runtime's and ``exc.report`` holds the
            RunReport (records included, as far as the run got).
        ArgumentError: the kernel tables disagree or an address is NULL.
    """
    _check_graph("run_graph", orch_fn_address, kernel_fn_addresses, kernel_names)
    if num_workers < 0:
        raise ArgumentError(
            f"run_graph: num_workers must be >= 0 (0 = all hardware threads), got {num_workers}"
        )
    if checks is not None and checks.serial:
        num_workers = 1
    runtime = _runtimes.borrow(num_workers)
    try:
        return runtime.run(
            orch_fn_address,
            kernel_fn_addresses,
            kernel_names,
            args,
            record_edges,
            record_tasks,
            dump_level,
            checks,
        )
    finally:
        _runtimes.give_back(runtime)


def _collect(lib: ctypes.CDLL, handle: int, record_tasks: bool) -> RunReport:
    num_tasks = lib.ts_run_num_tasks(handle)
    report = RunReport(
        status=lib.ts_run_status(handle),
        error=lib.ts_run_error(handle).decode(errors="replace"),
        wall_s=lib.ts_run_wall_seconds(handle),
        num_tasks=num_tasks,
        num_workers=lib.ts_run_num_workers(handle),
        num_dependencies=lib.ts_run_num_dependencies(handle),
    )
    if record_tasks and num_tasks:
        buf = (TsTaskRecord * num_tasks)()
        n = lib.ts_run_copy_tasks(handle, buf, num_tasks)
        rows = np.ctypeslib.as_array(buf)[:n].tolist()
        report.tasks = [
            TaskRecord(
                tid, fid, lib.ts_run_task_name(handle, tid).decode(errors="replace"), worker, sub, start, end
            )
            for tid, fid, worker, sub, start, end in rows
        ]
    num_edges = lib.ts_run_num_edges(handle)
    if num_edges:
        buf = (TsEdgeRecord * num_edges)()
        n = lib.ts_run_copy_edges(handle, buf, num_edges)
        report.edges = [
            EdgeRecord(pred, succ, arg, EDGE_KINDS[kind], EDGE_SOURCES[source])
            for pred, succ, arg, kind, source, _ in np.ctypeslib.as_array(buf)[:n].tolist()
        ]
    num_args = lib.ts_run_num_task_args(handle)
    if num_args:
        buf = (TsTaskArgRecord * num_args)()
        n = lib.ts_run_copy_task_args(handle, buf, num_args)
        report.task_args = [_task_arg(rec) for rec in buf[:n]]
    num_buffers = lib.ts_run_num_buffers(handle)
    if num_buffers:
        buf = (TsBufferRecord * num_buffers)()
        n = lib.ts_run_copy_buffers(handle, buf, num_buffers)
        for rec in buf[:n]:
            t = rec.tensor
            report.buffers.append(
                BufferRecord(
                    t.buffer_id,
                    rec.program_arg,
                    dtypes.BY_CODE[t.dtype].name,
                    tuple(t.shape[: t.ndim]),
                    tuple(t.strides[: t.ndim]),
                    t.offset,
                )
            )
    num_tags = lib.ts_run_num_dump_tags(handle)
    if num_tags:
        buf = (TsDumpTagRecord * num_tags)()
        n = lib.ts_run_copy_dump_tags(handle, buf, num_tags)
        for rec in buf[:n]:
            t = rec.tensor
            report.dump_tags.append(
                DumpTagRecord(
                    rec.first_task,
                    t.buffer_id,
                    dtypes.BY_CODE[t.dtype].name,
                    tuple(t.shape[: t.ndim]),
                    tuple(t.strides[: t.ndim]),
                    t.offset,
                )
            )
    if lib.ts_run_dump_level(handle):
        report.dump = _collect_dump(lib, handle)
    _collect_failure(lib, handle, report)
    return report


def _collect_failure(lib: ctypes.CDLL, handle: int, report: RunReport) -> None:
    rec = TsFailureRecord()
    kind = lib.ts_run_failure(handle, ctypes.byref(rec))
    if kind:
        report.failure = FailureInfo(
            FAILURE_KINDS[kind],
            rec.task_id,
            rec.func_id,
            rec.worker,
            rec.elapsed_ns,
            tuple(rec.frames[: rec.nframes]),
        )
    n = lib.ts_run_num_waits(handle)
    if n:
        buf = (TsWaitRecord * n)()
        n = lib.ts_run_copy_waits(handle, buf, n)
        for w in buf[:n]:
            arg = None
            if w.arg_index >= 0:
                arg = _task_arg(TsTaskArgRecord(w.task, w.arg_index, 0, w.arg))
            report.waits.append(
                WaitRecord(
                    w.task,
                    w.pred,
                    w.func_id,
                    w.pred_func_id,
                    w.pred_state == 1,
                    EDGE_KINDS[w.kind],
                    EDGE_SOURCES[w.source],
                    arg,
                )
            )
    n = lib.ts_run_num_nan(handle)
    if n:
        buf = (TsNanRecord * n)()
        n = lib.ts_run_copy_nan(handle, buf, n)
        report.nan = [
            NanRecord(
                r.task_id,
                r.func_id,
                r.worker,
                r.arg_index,
                r.origin == 0,
                r.first_index,
                r.nan_count,
                r.inf_count,
                r.input_arg,
                r.producer,
            )
            for r in buf[:n]
        ]
    report.nan_total = lib.ts_run_nan_total(handle)
    n = lib.ts_run_num_saved(handle)
    if n:
        buf = (TsDumpRecord * n)()
        n = lib.ts_run_copy_saved(handle, buf, n)
        payload = np.empty(lib.ts_run_saved_payload_size(handle), dtype=np.uint8)
        if payload.size:
            lib.ts_run_copy_saved_payload(handle, payload.ctypes.data, payload.size)
        records, _ = _dump_records(lib, handle, buf[:n])
        partial = tuple(r.arg_index for r in buf[:n] if r.flags & SAVED_PARTIAL)
        report.saved = SavedInputs(lib.ts_run_saved_task(handle), records, payload, partial)


def _collect_dump(lib: ctypes.CDLL, handle: int) -> DumpReport:
    n = lib.ts_run_num_dump_records(handle)
    buf = (TsDumpRecord * n)()
    n = lib.ts_run_copy_dump_records(handle, buf, n)
    payload = np.empty(lib.ts_run_dump_payload_size(handle), dtype=np.uint8)
    if payload.size:
        lib.ts_run_copy_dump_payload(handle, payload.ctypes.data, payload.size)
    records, names = _dump_records(lib, handle, buf[:n])
    return DumpReport(
        level=lib.ts_run_dump_level(handle),
        records=records,
        payload=payload,
        dropped_records=lib.ts_run_dump_dropped(handle),
        task_names=names,
    )


def _dump_records(lib: ctypes.CDLL, handle: int, raw: list[TsDumpRecord]) -> tuple[list[DumpRecord], dict]:
    records = []
    names: dict[int, str] = {}
    for rec in raw:
        dtype = dtypes.BY_CODE.get(rec.dtype)
        value: float | int | bool | None = None
        if rec.kind == ArgKind.SCALAR and dtype is not None:
            value = rec.value.v.f if dtype.is_float else rec.value.v.i
            if dtype.name == "bool":
                value = bool(value)
        kept = rec.bin_size > 0
        records.append(
            DumpRecord(
                task_id=rec.task_id,
                func_id=rec.func_id,
                arg_index=rec.arg_index,
                role=DUMP_ROLES[rec.role],
                stage=DUMP_STAGES[rec.stage],
                kind="scalar" if rec.kind == ArgKind.SCALAR else "tensor",
                dtype=dtype.name if dtype is not None else f"invalid({rec.dtype})",
                shape=tuple(rec.shape[: rec.ndim]),
                strides=tuple(rec.strides[: rec.ndim]),
                start_offset=rec.start_offset,
                buffer_id=rec.buffer_id,
                value=value,
                bin_offset=rec.bin_offset if kept else None,
                bin_size=rec.bin_size if kept else 0,
                truncated=bool(rec.flags & DUMP_TRUNCATED),
                overwritten=bool(rec.flags & DUMP_OVERWRITTEN),
                worker=rec.worker,
            )
        )
        if rec.task_id not in names:
            name = lib.ts_run_task_name(handle, rec.task_id)
            names[rec.task_id] = name.decode(errors="replace") if name is not None else ""
    return records, names


def _task_arg(rec: TsTaskArgRecord) -> TaskArgRecord:
    a = rec.arg
    direction = Direction(a.dir).name.lower()
    if a.kind == ArgKind.SCALAR:
        dtype = dtypes.BY_CODE[a.u.s.dtype]
        value = a.u.s.v.f if dtype.is_float else a.u.s.v.i
        return TaskArgRecord(rec.task_id, rec.arg_index, "scalar", direction, dtype.name, value=value)
    t = a.u.t
    return TaskArgRecord(
        rec.task_id,
        rec.arg_index,
        "tensor",
        direction,
        dtypes.BY_CODE[t.dtype].name,
        buffer_id=t.buffer_id,
        ndim=t.ndim,
        shape=tuple(t.shape[: t.ndim]),
        strides=tuple(t.strides[: t.ndim]),
        offset=t.offset,
    )
