"""Copying a finished run's results out of the core into ``records`` (one ctypes call per kind).

Invariants: this runs after ``ts_runtime_run`` returned and before ``ts_run_free``; nothing it
returns points into the run result, which the caller frees right after.
"""

from __future__ import annotations

import ctypes

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
    FAILURE_KINDS,
    SAVED_PARTIAL,
    ArgKind,
    TsBufferRecord,
    TsDumpRecord,
    TsDumpTagRecord,
    TsEdgeRecord,
    TsFailureRecord,
    TsNanRecord,
    TsOrchReadRecord,
    TsTaskArgRecord,
    TsTaskRecord,
    TsTensor,
    TsWaitRecord,
)
from tilescope.runtime.pmu import collect_pmu
from tilescope.runtime.records import (
    BufferRecord,
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


def collect(lib: ctypes.CDLL, handle: int, record_task_times: bool) -> RunReport:
    """The RunReport of the finished run ``handle``: everything the core recorded, copied out.
    Task records are copied only with ``record_task_times``; the caller still owns (and frees) the
    handle.
    """
    num_tasks = lib.ts_run_num_tasks(handle)
    report = RunReport(
        status=lib.ts_run_status(handle),
        error=lib.ts_run_error(handle).decode(errors="replace"),
        wall_s=lib.ts_run_wall_seconds(handle),
        num_tasks=num_tasks,
        num_workers=lib.ts_run_num_workers(handle),
        num_dependencies=lib.ts_run_num_dependencies(handle),
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
        report.buffers = [
            BufferRecord(
                r.tensor.buffer_id,
                r.program_arg,
                *_view(r.tensor),
                (lib.ts_run_buffer_name(handle, i) or b"").decode(errors="replace"),
            )
            for i, r in enumerate(buf[:n])
        ]
    num_tags = lib.ts_run_num_dump_tags(handle)
    if num_tags:
        buf = (TsDumpTagRecord * num_tags)()
        n = lib.ts_run_copy_dump_tags(handle, buf, num_tags)
        report.dump_tags = [
            DumpTagRecord(r.first_task, r.tensor.buffer_id, *_view(r.tensor)) for r in buf[:n]
        ]
    report.reads = _collect_reads(lib, handle)
    report.pmu, report.pmu_note = collect_pmu(lib, handle)
    if lib.ts_run_dump_level(handle) or lib.ts_run_num_dump_records(handle):  # level 0: probes only
        report.dump = _collect_dump(lib, handle)
    _collect_failure(lib, handle, report)
    return report


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
    n = getattr(lib, f"ts_run_copy_{which}")(handle, buf, n)
    payload = np.empty(getattr(lib, f"ts_run_{which}_payload_size")(handle), dtype=np.uint8)
    if payload.size:
        getattr(lib, f"ts_run_copy_{which}_payload")(handle, payload.ctypes.data, payload.size)
    records, _ = _dump_records(lib, handle, buf[:n])
    return list(buf[:n]), records, payload


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
        if rec.task_id not in names:
            name = lib.ts_run_task_name(handle, rec.task_id)
            names[rec.task_id] = name.decode(errors="replace") if name is not None else ""
    return records, names


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
