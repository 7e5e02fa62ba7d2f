"""Running a task graph on the runtime core: argument descriptors, worker pools, one run.

Invariants:
- Python is never on the per-task path: ``run_graph`` makes one ctypes call, which releases the
  GIL while the graph runs, and converts the records afterwards (``collect.py``).
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
import functools
import os
import struct
import threading

from tilescope.errors import ArgumentError, RuntimeFailure
from tilescope.ir import dtypes
from tilescope.ir.dtypes import DType
from tilescope.ir.types import Direction
from tilescope.runtime.abi import (
    DIRECTION_CODES,
    MAX_DIMS,
    ArgKind,
    TsArg,
    as_direction,
)
from tilescope.runtime.collect import RunResult, collect
from tilescope.runtime.guarded import guard_zones
from tilescope.runtime.library import load_core
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import NO_RECORDING, Recording, RunConfig, core_config

MAX_IDLE_RUNTIMES = 4  # idle runtimes (each with parked workers) kept for reuse


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
    if not t.is_cpu:
        raise ArgumentError(
            f"tensor_arg: tensors must be on the CPU for the sim platform, got one on {t.device}"
        )
    ndim = t.dim()
    if ndim > MAX_DIMS:
        raise ArgumentError(
            f"tensor_arg: a tensor of shape {list(t.shape)} has {ndim} dims; at most {MAX_DIMS} are supported"
        )
    code = _DTYPE_CODES.get(t.dtype)
    if code is None:
        try:
            code = _DTYPE_CODES[t.dtype] = dtypes.from_torch(t.dtype).code
        except ValueError as exc:
            raise ArgumentError(f"tensor_arg: {exc}") from None
    base = t.untyped_storage().data_ptr()
    pad = _ZEROS[max(ndim, 1) :]
    shape, strides = (t.shape, t.stride()) if ndim else ((1,), (1,))  # a 0-d tensor as shape [1]
    # NOTE: packed in one go: setting the ctypes fields one by one cost twice as much
    return TsArg.from_buffer_copy(
        TENSOR_ARG.pack(
            ArgKind.TENSOR,
            DIRECTION_CODES[direction],
            base,
            base,
            code,
            max(ndim, 1),
            *shape,
            *pad,
            *strides,
            *pad,
            t.storage_offset(),
        )
    )


# ts_arg of a tensor: kind, dir, then ts_tensor (data, buffer_id, dtype, ndim, shape, strides, offset)
TENSOR_ARG = struct.Struct(f"=iiQqii{MAX_DIMS}q{MAX_DIMS}qq")
_ZEROS = (0,) * MAX_DIMS
_DTYPE_CODES: dict = {}  # torch dtype -> ts_dtype code, filled on first use


def scalar_arg(value: float | int | bool, dtype: DType) -> TsArg:
    """A ``ts_arg`` scalar of ``dtype``: stored as a double for float dtypes, else as an int64.

    Raises:
        ArgumentError: ``value`` does not fit (e.g. a non-integral float for an integer dtype).
    """
    if dtype.is_float:
        return TsArg.from_buffer_copy(
            SCALAR_ARG_F.pack(ArgKind.SCALAR, _SCALAR_DIR, dtype.code, 0, float(value))
        )
    if isinstance(value, float) and not value.is_integer():
        raise ArgumentError(f"scalar_arg: {value!r} is not an integer, but the dtype is {dtype!r}")
    ivalue = int(value)
    if not -(2**63) <= ivalue < 2**63:
        raise ArgumentError(f"scalar_arg: {ivalue} does not fit in 64 bits")
    return TsArg.from_buffer_copy(SCALAR_ARG_I.pack(ArgKind.SCALAR, _SCALAR_DIR, dtype.code, 0, ivalue))


# ts_arg of a scalar: kind, dir, then ts_scalar (dtype, reserved, value), zeros to sizeof(ts_arg)
SCALAR_ARG_F = struct.Struct(f"=iiiid{ctypes.sizeof(TsArg) - 24}x")
SCALAR_ARG_I = struct.Struct(f"=iiiiq{ctypes.sizeof(TsArg) - 24}x")
_SCALAR_DIR = DIRECTION_CODES[Direction.SCALAR]


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
        args: list[TsArg] | ctypes.Array,
        config: RunConfig | None = None,
        recording: Recording | None = None,
        *,
        kernel_filter: tuple[bool, ...] | None = None,
        worker_stack_mib: int = 0,
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
        kernels, names = _kernel_tables(tuple(kernel_fn_addresses), tuple(kernel_names))
        arg_array = args if isinstance(args, ctypes.Array) else (TsArg * len(args))(*args)
        recording = recording or NO_RECORDING
        if recording.dump_level not in (0, 1, 2, 3):
            raise ArgumentError(f"Runtime.run: dump_level must be 0..3, got {recording.dump_level!r}")
        if recording.print_intermediates not in (0, 1, 2, 3):
            raise ArgumentError(
                f"Runtime.run: print_intermediates must be 0..3, got {recording.print_intermediates!r}"
            )
        if kernel_filter is not None and len(kernel_filter) != nkernels:
            raise ArgumentError(f"Runtime.run: kernel_filter has {len(kernel_filter)} flags for {nkernels} kernel(s)")
        core = core_config(
            config or RunConfig(),
            recording,
            kernel_filter=kernel_filter,
            worker_stack_mib=worker_stack_mib,
            guard_zones=guard_zones(args),
        )
        with self._lock:
            if self._handle is None or self._pid != os.getpid():
                raise RuntimeFailure(
                    "Runtime.run: this runtime is closed (or was created by another process)"
                )
            handle = lib.ts_runtime_run(
                self._handle,
                ctypes.byref(core),
                orch_fn_address,
                kernels,
                names,
                nkernels,
                arg_array,
                len(args),
            )
        report = collect(RunResult(lib, handle), recording.record_task_times)
        if report.status != 0:
            failure = RuntimeFailure(report.error)
            failure.report = report  # type: ignore[attr-defined]
            raise failure
        return report

    @property
    def closed(self) -> bool:
        """Whether ``close`` has run (or the runtime was inherited by a forked child)."""
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


@functools.lru_cache(maxsize=256)
def _kernel_tables(addresses: tuple[int, ...], names: tuple[str, ...]) -> tuple[ctypes.Array, ctypes.Array]:
    """The C arrays of a run's kernel addresses and names, made once per table (a program's runs
    all pass the same one); the cache keeps them alive while the core reads them."""
    return (ctypes.c_void_p * len(addresses))(*addresses), (ctypes.c_char_p * len(names))(*(n.encode() for n in names))


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


def single_task_orchestration() -> int:
    """Address of the core's orchestration that submits kernel 0 on every program argument."""
    return ctypes.cast(load_core().ts_single_task_orchestration, ctypes.c_void_p).value


def run_graph(
    orch_fn_address: int,
    kernel_fn_addresses: list[int],
    kernel_names: list[str],
    args: list[TsArg] | ctypes.Array,
    config: RunConfig | None = None,
    recording: Recording | None = None,
    *,
    kernel_filter: tuple[bool, ...] | None = None,
    worker_stack_mib: int = 0,
) -> RunReport:
    """Run an orchestration (``orchestration_entry``'s address) with kernels indexed by func_id,
    on ``args`` (``TsArg``s, or a ctypes array of them made already).

    Blocks until the orchestration returned and every task finished; the GIL is released
    meanwhile. The run's options come from ``config`` (default: ``RunConfig()``; its
    ``num_workers=0`` uses every hardware thread, ``serial`` one worker) and what the core
    records from ``recording`` (default: nothing): a ``dump_level`` of 1..3 collects the tensor
    dump into ``report.dump`` (1 tagged, 2 every argument, 3 metadata only), bounded by
    ``run_config.DUMP_ARENA_BYTES`` and ``DUMP_MAX_RECORDS`` per worker. ``kernel_filter`` is one
    flag per kernel (print_intermediates lines and dump levels 2/3 for those only) and
    ``worker_stack_mib`` the workers' stack size (0: the default; see ``host_memory.worker_stack_mib()``).
    The run borrows a Runtime from ``runtime_pool()``, so consecutive runs reuse parked worker
    threads instead of starting them.

    Raises:
        RuntimeFailure: the run failed; the message is the runtime's and ``exc.report`` holds the
            RunReport (records included, as far as the run got).
        ArgumentError: the kernel tables disagree or an address is NULL.
    """
    _check_graph("run_graph", orch_fn_address, kernel_fn_addresses, kernel_names)
    config = config or RunConfig()
    if config.num_workers < 0:
        raise ArgumentError(
            f"run_graph: num_workers must be >= 0 (0 = all hardware threads), got {config.num_workers}"
        )
    runtime = _runtimes.borrow(1 if config.serial else config.num_workers)
    try:
        return runtime.run(
            orch_fn_address,
            kernel_fn_addresses,
            kernel_names,
            args,
            config,
            recording,
            kernel_filter=kernel_filter,
            worker_stack_mib=worker_stack_mib,
        )
    finally:
        _runtimes.give_back(runtime)
