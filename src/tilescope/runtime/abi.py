"""The C ABI of the runtime core, mirrored for ctypes (``tilescope/runtime_api.h``, ``abi.h``).

Invariants: every struct here has the field order, types and size of its C twin; the core is
checked against ``sizeof(ts_arg)`` and the ABI version when it is loaded (``library.py``), so a
mismatch is an error, never a misread. The codes of enums (``ts_dir``, ``ts_edge_kind``, …) are
the tuples' indices.
"""

from __future__ import annotations

import ctypes
import enum

from tilescope.errors import ArgumentError
from tilescope.ir.types import MAX_TENSOR_DIMS, Direction

MAX_DIMS = MAX_TENSOR_DIMS  # TS_MAX_DIMS (abi.h)
DUMP_STAGES = ("before_dispatch", "after_completion", "probe")  # ts_dump_stage
DUMP_ROLES = ("input", "output", "inout", "scalar", "probe")  # by ts_dir; "probe": TS_DUMP_ROLE_PROBE
DUMP_TRUNCATED, DUMP_OVERWRITTEN = 1, 2  # ts_dump_record flags
SAVED_PARTIAL = 4  # ts_dump_record flag of saved task inputs (TS_SAVED_PARTIAL)
MAX_FRAMES = 32  # TS_MAX_FRAMES
FAILURE_KINDS = (
    "none",
    "error",
    "deadlock",
    "timeout",
    "kernel_error",
    "interrupted",
    "guard",
)  # ts_failure_kind
FAILURE_CAUSES = ("", "bounds", "region")  # ts_failure_cause (TS_CAUSE_NONE is "")
GUARD_BYTE = 0xFD  # TS_GUARD_BYTE: every byte of a guard zone


DIRECTION_CODES = {Direction.IN: 0, Direction.OUT: 1, Direction.INOUT: 2, Direction.SCALAR: 3}  # ts_dir
DIRECTIONS = tuple(DIRECTION_CODES)  # by ts_dir code


def as_direction(value: Direction | int | str) -> Direction:
    """``Direction.IN``, its ``ts_dir`` code ``0`` or its name ``"in"``, as a Direction."""
    if isinstance(value, Direction):
        return value
    if isinstance(value, str):
        try:
            return Direction(value.lower())
        except ValueError:
            pass
    elif isinstance(value, int) and 0 <= value < len(DIRECTIONS):
        return DIRECTIONS[value]
    known = ", ".join(d.value for d in Direction)
    raise ArgumentError(f"unknown argument direction {value!r}; known: {known}")


class ArgKind(enum.IntEnum):
    """``ts_arg_kind``: whether a ``ts_arg`` holds a tensor or a scalar."""

    TENSOR = 0
    SCALAR = 1


EDGE_KINDS = ("RAW", "WAW", "WAR", "ORDER")  # ts_edge_kind
EDGE_SOURCES = ("tensormap", "explicit")  # ts_edge_source


class TsTensor(ctypes.Structure):
    """``ts_tensor``: a strided view (in elements) of a buffer, which ``buffer_id`` names."""

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
    """The value of a ``ts_scalar``: ``f`` for floating dtypes, ``i`` for integer and bool ones."""

    _fields_ = [("f", ctypes.c_double), ("i", ctypes.c_int64)]


class TsScalar(ctypes.Structure):
    """``ts_scalar``: a scalar argument and its ``ts_dtype``."""

    _fields_ = [("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32), ("v", TsScalarValue)]


class TsArgValue(ctypes.Union):
    """The payload of a ``ts_arg``: a tensor view or a scalar, by ``kind``."""

    _fields_ = [("t", TsTensor), ("s", TsScalar)]


class TsArg(ctypes.Structure):
    """``ts_arg``: one argument of a program or task: its kind, direction and value."""

    _fields_ = [("kind", ctypes.c_int32), ("dir", ctypes.c_int32), ("u", TsArgValue)]


class TsGuardZone(ctypes.Structure):
    """``ts_guard_zone``: a program argument allocated with guard zones around its buffer."""

    _fields_ = [
        ("program_arg", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("bytes", ctypes.c_int64),
        ("before", ctypes.c_int64),
        ("after", ctypes.c_int64),
        ("reach", ctypes.c_int64),
    ]


class TsRunConfig(ctypes.Structure):
    """``ts_run_config``: how a run goes and what the core records (workers, dumps, timeout, checks)."""

    _fields_ = [
        ("num_workers", ctypes.c_int32),
        ("record_edges", ctypes.c_int32),
        ("record_task_times", ctypes.c_int32),
        ("dump_level", ctypes.c_int32),
        ("dump_arena_bytes", ctypes.c_int64),
        ("dump_max_records", ctypes.c_int64),
        ("task_timeout_s", ctypes.c_double),
        ("serial", ctypes.c_int32),
        ("nan_check", ctypes.c_int32),
        ("print_intermediates", ctypes.c_int32),
        ("worker_stack_mib", ctypes.c_int32),
        ("kernel_filter", ctypes.c_void_p),
        ("crash_report_path", ctypes.c_char_p),
        ("guard_zones", ctypes.POINTER(TsGuardZone)),
        ("num_guard_zones", ctypes.c_int32),
        ("probes", ctypes.c_int32),
        ("poison", ctypes.c_int32),
        ("shuffle_seed", ctypes.c_uint32),
        ("pmu", ctypes.c_int32),
        ("max_tasks", ctypes.c_int64),
    ]


class TsEdgeRecord(ctypes.Structure):
    """``ts_edge_record``: one dependency ``pred -> succ``: its kind (RAW, WAW, WAR, ORDER), its source."""

    _fields_ = [
        ("pred", ctypes.c_int64),
        ("succ", ctypes.c_int64),
        ("arg_index", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("source", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class TsTaskRecord(ctypes.Structure):
    """``ts_task_record``: one task's kernel, worker (-1 if skipped) and submit/start/end times."""

    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("worker", ctypes.c_int32),
        ("submit_ns", ctypes.c_int64),
        ("start_ns", ctypes.c_int64),
        ("end_ns", ctypes.c_int64),
    ]


class TsPmuRecord(ctypes.Structure):
    """``ts_pmu_record``: one executed task's counters (-1 where unavailable)."""

    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("worker", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("wall_ns", ctypes.c_int64),
        ("cpu_ns", ctypes.c_int64),
        ("page_faults", ctypes.c_int64),
        ("ctx_switches", ctypes.c_int64),
        ("cycles", ctypes.c_int64),
        ("instructions", ctypes.c_int64),
        ("cache_misses", ctypes.c_int64),
    ]


class TsTaskArgRecord(ctypes.Structure):
    """``ts_task_arg_record``: one argument of one task, as submitted."""

    _fields_ = [
        ("task_id", ctypes.c_int64),
        ("arg_index", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("arg", TsArg),
    ]


class TsBufferRecord(ctypes.Structure):
    """``ts_buffer_record``: a whole buffer of the run, with its program argument (-1: an intermediate)."""

    _fields_ = [("tensor", TsTensor), ("program_arg", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class TsDumpTagRecord(ctypes.Structure):
    """``ts_dump_tag_record``: a tensor tagged with ``dump_tag`` and the first task the tag applies to."""

    _fields_ = [("tensor", TsTensor), ("first_task", ctypes.c_int64)]


class TsDumpRecord(ctypes.Structure):
    """``ts_dump_record``: one dumped (or saved) argument of one task, and where its payload lies."""

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


class TsDumpBufferName(ctypes.Structure):
    """``ts_dump_buffer_name``: a buffer's display name (JSON-escaped) and layout, for a dump manifest."""

    _fields_ = [
        ("buffer_id", ctypes.c_int64),
        ("name", ctypes.c_char_p),
        ("ndim", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("offset", ctypes.c_int64),
    ]


class TsDumpProbeName(ctypes.Structure):
    """``ts_dump_probe_name``: a kernel's probe's name and DSL line (``file:line``; None: none), JSON-escaped."""

    _fields_ = [
        ("func_id", ctypes.c_int32),
        ("probe_id", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("line", ctypes.c_char_p),
    ]


DUMP_COUNTS = 17  # TS_DUMP_COUNTS: ts_dump_count_records's counts


class TsFailureRecord(ctypes.Structure):
    """``ts_failure_record``: a run's first failure: its kind, task, the stopped thread's frames,
    and what the place that made it knew (``cause`` and the op, argument and DSL line)."""

    _fields_ = [
        ("kind", ctypes.c_int32),
        ("worker", ctypes.c_int32),
        ("task_id", ctypes.c_int64),
        ("func_id", ctypes.c_int32),
        ("nframes", ctypes.c_int32),
        ("elapsed_ns", ctypes.c_int64),
        ("wall_ns", ctypes.c_int64),
        ("cpu_ns", ctypes.c_int64),
        ("blocked_ns", ctypes.c_int64),
        ("frames", ctypes.c_uint64 * MAX_FRAMES),
        ("cause", ctypes.c_int32),
        ("arg_index", ctypes.c_int32),
        ("op", ctypes.c_char * 16),
        ("tensor", ctypes.c_char * 64),
        ("where", ctypes.c_char * 176),
    ]


class TsWaitRecord(ctypes.Structure):
    """``ts_wait_record``: one unmet dependency of a task that can never run (a deadlock)."""

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


class TsOrchReadRecord(ctypes.Structure):
    """``ts_orch_read_record``: one orchestration read, its value and the tasks it waited for."""

    _fields_ = [
        ("buffer_id", ctypes.c_int64),
        ("element", ctypes.c_int64),
        ("index", ctypes.c_int64 * MAX_DIMS),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("value", ctypes.c_int64),
        ("next_task", ctypes.c_int64),
        ("wait_start_ns", ctypes.c_int64),
        ("wait_end_ns", ctypes.c_int64),
        ("first_wait", ctypes.c_int64),
        ("num_waits", ctypes.c_int64),
    ]


class TsNanRecord(ctypes.Structure):
    """``ts_nan_record``: an output holding NaN/Inf after a task, and whether an input brought it."""

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


class TsRunSummary(ctypes.Structure):
    """``ts_run_summary``: every count of a finished run, read in one call."""

    _fields_ = [
        ("status", ctypes.c_int32),
        ("num_workers", ctypes.c_int32),
        ("dump_level", ctypes.c_int32),
        ("failure_kind", ctypes.c_int32),
        ("wall_seconds", ctypes.c_double),
        *(
            (name, ctypes.c_int64)
            for name in (
                "error_bytes",
                "num_tasks",
                "num_dependencies",
                "num_edges",
                "num_task_args",
                "num_buffers",
                "num_dump_tags",
                "num_orch_reads",
                "num_dump_records",
                "num_waits",
                "num_nan",
                "nan_total",
                "num_saved",
                "num_nan_saved",
                "num_pmu",
                "pmu_note_bytes",
            )
        ),
    ]


_RESULT = ctypes.c_void_p  # ts_run_result*

# The C ABI's functions (``runtime_api.h``): name -> (restype, argtypes).
PROTOTYPES = {
    "ts_runtime_create": (ctypes.c_void_p, [ctypes.c_int32]),
    "ts_runtime_num_workers": (ctypes.c_int32, [ctypes.c_void_p]),
    "ts_runtime_destroy": (None, [ctypes.c_void_p]),
    "ts_runtime_run": (
        _RESULT,
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
        _RESULT,
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
    "ts_run_summarize": (None, [_RESULT, ctypes.POINTER(TsRunSummary)]),
    "ts_run_status": (ctypes.c_int32, [_RESULT]),
    "ts_run_error": (ctypes.c_char_p, [_RESULT]),
    "ts_run_num_tasks": (ctypes.c_int64, [_RESULT]),
    "ts_run_num_dependencies": (ctypes.c_int64, [_RESULT]),
    "ts_run_num_edges": (ctypes.c_int64, [_RESULT]),
    "ts_run_num_workers": (ctypes.c_int32, [_RESULT]),
    "ts_run_wall_seconds": (ctypes.c_double, [_RESULT]),
    "ts_run_copy_tasks": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsTaskRecord), ctypes.c_int64]),
    "ts_run_copy_edges": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsEdgeRecord), ctypes.c_int64]),
    "ts_run_num_pmu": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_pmu": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsPmuRecord), ctypes.c_int64]),
    "ts_run_pmu_note": (ctypes.c_char_p, [_RESULT]),
    "ts_run_num_task_args": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_task_args": (
        ctypes.c_int64,
        [_RESULT, ctypes.POINTER(TsTaskArgRecord), ctypes.c_int64],
    ),
    "ts_run_num_buffers": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_buffers": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsBufferRecord), ctypes.c_int64]),
    "ts_run_buffer_name": (ctypes.c_char_p, [_RESULT, ctypes.c_int64]),
    "ts_run_num_dump_tags": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_dump_tags": (
        ctypes.c_int64,
        [_RESULT, ctypes.POINTER(TsDumpTagRecord), ctypes.c_int64],
    ),
    "ts_run_num_orch_reads": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_orch_reads": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsOrchReadRecord), ctypes.c_int64]),
    "ts_run_orch_read_name": (ctypes.c_char_p, [_RESULT, ctypes.c_int64]),
    "ts_run_orch_read_where": (ctypes.c_char_p, [_RESULT, ctypes.c_int64]),
    "ts_run_num_orch_read_waits": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_orch_read_waits": (
        ctypes.c_int64,
        [_RESULT, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64],
    ),
    "ts_run_dump_level": (ctypes.c_int32, [_RESULT]),
    "ts_run_num_dump_records": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_dump_records": (
        ctypes.c_int64,
        [_RESULT, ctypes.POINTER(TsDumpRecord), ctypes.c_int64],
    ),
    "ts_run_dump_payload_size": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_dump_payload": (ctypes.c_int64, [_RESULT, ctypes.c_void_p, ctypes.c_int64]),
    "ts_run_dump_dropped": (ctypes.c_int64, [_RESULT]),
    "ts_dump_count_records": (
        None,
        [ctypes.POINTER(TsDumpRecord), ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)],
    ),
    "ts_dump_write_records_json": (
        ctypes.c_int32,
        [
            ctypes.c_int32,
            ctypes.POINTER(TsDumpRecord),
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int32,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_char_p,
            ctypes.c_int64,
            ctypes.POINTER(TsDumpBufferName),
            ctypes.c_int32,
            ctypes.POINTER(TsDumpProbeName),
            ctypes.c_int32,
        ],
    ),
    "ts_run_task_name": (ctypes.c_char_p, [_RESULT, ctypes.c_int64]),
    "ts_run_copy_task_names": (
        ctypes.c_int64,
        [_RESULT, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64],
    ),
    "ts_run_failure": (ctypes.c_int32, [_RESULT, ctypes.POINTER(TsFailureRecord)]),
    "ts_run_num_waits": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_waits": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsWaitRecord), ctypes.c_int64]),
    "ts_run_num_nan": (ctypes.c_int64, [_RESULT]),
    "ts_run_nan_total": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_nan": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsNanRecord), ctypes.c_int64]),
    "ts_run_saved_task": (ctypes.c_int64, [_RESULT]),
    "ts_run_num_saved": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_saved": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsDumpRecord), ctypes.c_int64]),
    "ts_run_saved_payload_size": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_saved_payload": (ctypes.c_int64, [_RESULT, ctypes.c_void_p, ctypes.c_int64]),
    "ts_run_num_nan_saved": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_nan_saved": (ctypes.c_int64, [_RESULT, ctypes.POINTER(TsDumpRecord), ctypes.c_int64]),
    "ts_run_nan_saved_payload_size": (ctypes.c_int64, [_RESULT]),
    "ts_run_copy_nan_saved_payload": (ctypes.c_int64, [_RESULT, ctypes.c_void_p, ctypes.c_int64]),
    "ts_run_free": (None, [_RESULT]),
    "ts_core_abi_version": (ctypes.c_uint32, []),
    "ts_core_sizeof_arg": (ctypes.c_int32, []),
}
