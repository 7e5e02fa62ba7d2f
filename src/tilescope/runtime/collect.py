"""Copying a finished run's results out of the core into ``records`` (one ctypes call per kind).

Invariants:
- ``RunResult`` owns a finished run's ``ts_run_result`` and frees it when it is collected itself
  (no other code calls ``ts_run_free`` on it).
- Nothing ``collect`` returns points into the result, with one exception: the buffer records of a
  plain run (one that succeeded and recorded nothing else: no dump, edges, task records, reads,
  saved inputs, NaN records or counters) are copied out on first read, through a reference to the
  RunResult that keeps it alive until then; most runs never read them, and what such a result
  holds is small (its buffer records and names).
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

from tilescope.ir import dtypes
from tilescope.runtime.abi import (
    DIRECTIONS,
    DUMP_OVERWRITTEN,
    DUMP_ROLES,
    DUMP_STAGES,
    DUMP_TRUNCATED,
    EDGE_KINDS,
    EDGE_SOURCES,
    FAILURE_CAUSES,
    FAILURE_KINDS,
    MAX_DIMS,
    SAVED_PARTIAL,
    ArgKind,
    TsBufferRecord,
    TsDumpRecord,
    TsDumpTagRecord,
    TsEdgeRecord,
    TsFailureRecord,
    TsNanRecord,
    TsOrchReadRecord,
    TsRunSummary,
    TsTaskArgRecord,
    TsTaskRecord,
    TsTensor,
    TsWaitRecord,
)
from tilescope.runtime.pmu import collect_pmu
from tilescope.runtime.records import (
    BufferRecord,
    BufferRecords,
    DumpRecord,
    DumpReport,
    DumpTagRecord,
    EdgeRecord,
    FailureInfo,
    NanRecord,
    OrchReadRecord,
    RunReport,
    SavedInputs,
    TaskArgRecord,
    TaskRecord,
    WaitRecord,
)


class RunResult:
    """A finished run's ``ts_run_result`` (the handle ``ts_runtime_run`` or ``ts_run`` returned),
    freed when this object goes."""

    __slots__ = ("lib", "handle")

    def __init__(self, lib: ctypes.CDLL, handle: int) -> None:
        self.lib = lib
        self.handle = handle

    def __del__(self) -> None:
        handle, self.handle = self.handle, None
        if handle:
            self.lib.ts_run_free(handle)

    def __reduce__(self):
        # NOTE: a copy would be a second owner of the handle (freed twice)
        raise TypeError("a RunResult owns the core's run result and cannot be copied or pickled")


def collect(result: RunResult, record_task_times: bool) -> RunReport:
    """The RunReport of the finished run ``result``: everything the core recorded, copied out
    (a plain run's buffer records on first read: see the module's invariants). Task records are
    copied only with ``record_task_times``. Every count is read in one call first, and only the
    records there are are fetched.
    """
    lib, handle = result.lib, result.handle
    counts = TsRunSummary()
    lib.ts_run_summarize(handle, ctypes.byref(counts))
    num_tasks = counts.num_tasks
    report = RunReport(
        status=counts.status,
        error=lib.ts_run_error(handle).decode(errors="replace") if counts.error_bytes else "",
        wall_s=counts.wall_seconds,
        num_tasks=num_tasks,
        num_workers=counts.num_workers,
        num_dependencies=counts.num_dependencies,
    )
    if record_task_times and num_tasks:
        buf = (TsTaskRecord * num_tasks)()
        n = lib.ts_run_copy_tasks(handle, buf, num_tasks)
        rows = np.ctypeslib.as_array(buf)[:n].tolist()
        report.tasks = [
            TaskRecord(
                tid, fid, lib.ts_run_task_name(handle, tid).decode(errors="replace"), worker, sub, start, end
            )
            for tid, fid, worker, sub, start, end in rows
        ]
    num_edges = counts.num_edges
    if num_edges:
        buf = (TsEdgeRecord * num_edges)()
        n = lib.ts_run_copy_edges(handle, buf, num_edges)
        report.edges = [
            EdgeRecord(pred, succ, arg, EDGE_KINDS[kind], EDGE_SOURCES[source])
            for pred, succ, arg, kind, source, _ in np.ctypeslib.as_array(buf)[:n].tolist()
        ]
    num_args = counts.num_task_args
    if num_args:
        buf = (TsTaskArgRecord * num_args)()
        n = lib.ts_run_copy_task_args(handle, buf, num_args)
        report.task_args = [_task_arg(rec) for rec in buf[:n]]
    num_buffers = counts.num_buffers
    if num_buffers:
        plain = not (
            counts.status
            or record_task_times
            or num_edges
            or counts.num_task_args
            or counts.num_dump_records
            or counts.num_orch_reads
            or counts.num_waits
            or counts.num_nan
            or counts.num_saved
            or counts.num_nan_saved
            or counts.num_pmu
        )
        if plain:
            report.buffers = BufferRecords(lambda: _buffer_records(result, num_buffers))
        else:
            records = _buffer_records(result, num_buffers)
            report.buffers = BufferRecords(lambda: records)
    num_tags = counts.num_dump_tags
    if num_tags:
        buf = (TsDumpTagRecord * num_tags)()
        n = lib.ts_run_copy_dump_tags(handle, buf, num_tags)
        report.dump_tags = [
            DumpTagRecord(r.first_task, r.tensor.buffer_id, *_view(r.tensor)) for r in buf[:n]
        ]
    if counts.num_orch_reads:
        report.reads = _collect_reads(lib, handle)
    if counts.num_pmu or counts.pmu_note_bytes:
        report.pmu, report.pmu_note = collect_pmu(lib, handle)
    if counts.dump_level or counts.num_dump_records:  # level 0: probes only
        report.dump = _collect_dump(lib, handle)
    if (
        counts.failure_kind
        or counts.num_waits
        or counts.num_nan
        or counts.nan_total
        or counts.num_saved
        or counts.num_nan_saved
    ):
        _collect_failure(lib, handle, report)
    return report


# ts_buffer_record: ts_tensor (data, buffer_id, dtype, ndim, shape, strides, offset), program_arg, reserved
BUFFER_RECORD = struct.Struct(f"=Qqii{MAX_DIMS}q{MAX_DIMS}qqii")


def _buffer_records(result: RunResult, count: int) -> list[BufferRecord]:
    """The first ``count`` buffer records of ``result``, copied in one call and unpacked in one
    pass (reading them through ctypes cost a Python object per field); only intermediates are
    named (name_tensor), so only their names are asked for."""
    lib, handle = result.lib, result.handle
    buf = (TsBufferRecord * count)()
    n = lib.ts_run_copy_buffers(handle, buf, count)
    out = []
    for i, rec in enumerate(BUFFER_RECORD.iter_unpack(bytes(buf)[: n * BUFFER_RECORD.size])):
        ndim, arg = rec[3], rec[5 + 2 * MAX_DIMS]
        name = (lib.ts_run_buffer_name(handle, i) or b"").decode(errors="replace") if arg < 0 else ""
        out.append(
            BufferRecord(
                rec[1],
                arg,
                dtypes.BY_CODE[rec[2]].name,
                rec[4 : 4 + ndim],
                rec[4 + MAX_DIMS : 4 + MAX_DIMS + ndim],
                rec[4 + 2 * MAX_DIMS],
                name,
            )
        )
    return out


def _collect_reads(lib: ctypes.CDLL, handle: int) -> list[OrchReadRecord]:
    n = lib.ts_run_num_orch_reads(handle)
    if not n:
        return []
    buf = (TsOrchReadRecord * n)()
    n = lib.ts_run_copy_orch_reads(handle, buf, n)
    nwaits = lib.ts_run_num_orch_read_waits(handle)
    waits = (ctypes.c_int64 * max(nwaits, 1))()
    lib.ts_run_copy_orch_read_waits(handle, waits, nwaits)
    out = []
    for i, r in enumerate(buf[:n]):
        out.append(
            OrchReadRecord(
                (lib.ts_run_orch_read_name(handle, i) or b"").decode(errors="replace"),
                (lib.ts_run_orch_read_where(handle, i) or b"").decode(errors="replace"),
                tuple(r.index[: r.ndim]),
                dtypes.BY_CODE[r.dtype].name,
                r.value,
                tuple(waits[r.first_wait : r.first_wait + r.num_waits]),
                r.wait_start_ns,
                r.wait_end_ns,
                r.next_task,
                r.buffer_id,
                r.element,
            )
        )
    return out


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
            rec.wall_ns,
            rec.cpu_ns,
            rec.blocked_ns,
            tuple(rec.frames[: rec.nframes]),
            FAILURE_CAUSES[rec.cause] if 0 <= rec.cause < len(FAILURE_CAUSES) else "",
            rec.arg_index,
            rec.op.decode(errors="replace"),
            rec.tensor.decode(errors="replace"),
            rec.where.decode(errors="replace"),
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
    saved = _saved_records(lib, handle, "saved")
    if saved:
        raw, records, payload = saved
        partial = tuple(r.arg_index for r in raw if r.flags & SAVED_PARTIAL)
        report.saved = SavedInputs(lib.ts_run_saved_task(handle), records, payload, partial)
    saved = _saved_records(lib, handle, "nan_saved")
    if saved:
        by_task: dict[int, SavedInputs] = {}
        for raw, rec in zip(*saved[:2]):
            task = by_task.setdefault(rec.task_id, SavedInputs(rec.task_id, [], saved[2], ()))
            task.records.append(rec)
            if raw.flags & SAVED_PARTIAL:
                task.partial_args += (rec.arg_index,)
        report.nan_saved = list(by_task.values())


def _saved_records(
    lib: ctypes.CDLL, handle: int, which: str
) -> tuple[list[TsDumpRecord], list[DumpRecord], np.ndarray] | None:
    """The raw records, decoded records and payload of a set of saved task inputs (``which`` is
    ``saved``, the failed task's, or ``nan_saved``, those of the tasks that made NaN/Inf)."""
    n = getattr(lib, f"ts_run_num_{which}")(handle)
    if not n:
        return None
    buf = (TsDumpRecord * n)()
    raw = buf[: getattr(lib, f"ts_run_copy_{which}")(handle, buf, n)]
    payload = np.empty(getattr(lib, f"ts_run_{which}_payload_size")(handle), dtype=np.uint8)
    if payload.size:
        getattr(lib, f"ts_run_copy_{which}_payload")(handle, payload.ctypes.data, payload.size)
    return raw, _decode(raw), payload


def _collect_dump(lib: ctypes.CDLL, handle: int) -> DumpReport:
    # NOTE: the records stay raw (one copy of the C array) until someone reads DumpReport.records:
    # writing the dump needs no per-record Python object
    raw = np.empty(lib.ts_run_num_dump_records(handle) * ctypes.sizeof(TsDumpRecord), dtype=np.uint8)
    n = lib.ts_run_copy_dump_records(
        handle, raw.ctypes.data_as(ctypes.POINTER(TsDumpRecord)), len(raw) // ctypes.sizeof(TsDumpRecord)
    )
    payload = np.empty(lib.ts_run_dump_payload_size(handle), dtype=np.uint8)
    if payload.size:
        lib.ts_run_copy_dump_payload(handle, payload.ctypes.data, payload.size)
    raw = raw[: n * ctypes.sizeof(TsDumpRecord)]
    task_ids = np.unique(raw.view(np.int64)[:: ctypes.sizeof(TsDumpRecord) // 8])
    return DumpReport(
        level=lib.ts_run_dump_level(handle),
        raw=raw,
        payload=payload,
        dropped_records=lib.ts_run_dump_dropped(handle),
        task_names=_task_names(lib, handle, task_ids),
        decode=decode_dump_records,
    )


def _task_names(lib: ctypes.CDLL, handle: int, task_ids: np.ndarray) -> dict[int, str]:
    ids = task_ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    out = ctypes.create_string_buffer(lib.ts_run_copy_task_names(handle, ids, task_ids.size, None, 0))
    lib.ts_run_copy_task_names(handle, ids, task_ids.size, out, len(out))
    return dict(zip(task_ids.tolist(), out.raw.decode(errors="replace").split("\0")))


def decode_dump_records(raw: np.ndarray) -> list[DumpRecord]:
    """The records of a raw ``ts_dump_record`` array (``DumpReport.raw``)."""
    return _decode(list((TsDumpRecord * (raw.size // ctypes.sizeof(TsDumpRecord))).from_buffer_copy(raw)))


def _decode(raw: list[TsDumpRecord]) -> list[DumpRecord]:
    records = []
    for rec in raw:
        dtype = dtypes.BY_CODE.get(rec.dtype)
        value: float | int | bool | None = None
        if rec.kind == ArgKind.SCALAR and dtype is not None:
            value = rec.value.v.f if dtype.is_float else rec.value.v.i
            if dtype.name == "bool":
                value = bool(value)
        elif DUMP_STAGES[rec.stage] == "probe":
            value = rec.value.v.i  # the kernel's probe id
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
    return records


def _task_arg(rec: TsTaskArgRecord) -> TaskArgRecord:
    a = rec.arg
    direction = DIRECTIONS[a.dir].value
    if a.kind == ArgKind.SCALAR:
        dtype = dtypes.BY_CODE[a.u.s.dtype]
        value = a.u.s.v.f if dtype.is_float else a.u.s.v.i
        return TaskArgRecord(rec.task_id, rec.arg_index, "scalar", direction, dtype.name, value=value)
    t = a.u.t
    dtype, shape, strides, offset = _view(t)
    return TaskArgRecord(
        rec.task_id,
        rec.arg_index,
        "tensor",
        direction,
        dtype,
        buffer_id=t.buffer_id,
        ndim=t.ndim,
        shape=shape,
        strides=strides,
        offset=offset,
    )


def _view(t: TsTensor) -> tuple[str, tuple[int, ...], tuple[int, ...], int]:
    """A tensor argument's dtype name, shape, strides and offset (elements)."""
    return dtypes.BY_CODE[t.dtype].name, tuple(t.shape[: t.ndim]), tuple(t.strides[: t.ndim]), t.offset
