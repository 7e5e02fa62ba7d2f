"""Per-task counters after a sim run (``enable_pmu``): ``dfx_outputs/pmu.csv``, the counters and
bytes moved that ``trace.json``'s task slices carry, and the copy limit they are ranked against
(``tilescope trace``, ``tools/trace.py``).

Invariants:
- ``pmu.csv`` has one row per executed task, by task id, with the columns ``PMU_COLUMNS``; a
  counter the machine does not expose is an empty cell. Which counters were available, where
  from, and why the others were not is the run's note (``RunReport.pmu_note``): logged once per
  run and kept in ``trace.json``'s ``otherData.pmu.note``.
- A task's bytes are the bytes of its tensor arguments' regions (shape times item size):
  ``bytes_read`` counts ``in`` and ``inout`` arguments, ``bytes_written`` ``out`` and ``inout``.
- The copy limit is measured once per process (a copy of ``COPY_BYTES`` bytes, best of
  ``COPY_REPEATS``) and counts each copied byte twice, read and written, as a task's bytes do.
- The file is replaced atomically.
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from tilescope.build.manifest import Build
from tilescope.build.paths import PMU_CSV, atomic_write, inside
from tilescope.ir import dtypes
from tilescope.runtime.records import PmuRecord, RunReport

log = logging.getLogger("tilescope")

PMU_COLUMNS = (
    "task_id",
    "kernel",
    "task",
    "worker",
    "wall_ns",
    "cpu_ns",
    "page_faults",
    "ctx_switches",
    "cycles",
    "instructions",
    "cache_misses",
    "bytes_read",
    "bytes_written",
)
COUNTERS = ("wall_ns", "cpu_ns", "page_faults", "ctx_switches", "cycles", "instructions", "cache_misses")
COPY_BYTES = 64 << 20
COPY_REPEATS = 5


@functools.cache
def copy_limit_gbs() -> float:
    """This process's copy bandwidth in GB/s (bytes read plus bytes written per second): the best
    of ``COPY_REPEATS`` copies of ``COPY_BYTES`` bytes, measured at the first call only."""
    src = np.ones(COPY_BYTES, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # NOTE: touches every page first, so faults are not timed
    best = float("inf")
    for _ in range(COPY_REPEATS):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * COPY_BYTES / best / 1e9


def task_bytes(report: RunReport) -> dict[int, tuple[int, int]]:
    """Every task's ``(bytes_read, bytes_written)``, from its recorded tensor arguments."""
    moved: dict[int, list[int]] = {}
    for a in report.task_args:
        if a.kind != "tensor":
            continue
        n = int(np.prod(a.shape, dtype=np.int64)) * dtypes.by_name(a.dtype).itemsize
        rw = moved.setdefault(a.task_id, [0, 0])
        if a.direction in ("in", "inout"):
            rw[0] += n
        if a.direction in ("out", "inout"):
            rw[1] += n
    return {t: (r, w) for t, (r, w) in moved.items()}


def slice_counters(rec: PmuRecord, moved: tuple[int, int]) -> dict[str, Any]:
    """The counters a task's trace slice carries (``args.pmu``); None where unavailable."""
    return {**{c: getattr(rec, c) for c in COUNTERS}, "bytes_read": moved[0], "bytes_written": moved[1]}


def pmu_summary(report: RunReport) -> dict[str, Any]:
    """``trace.json``'s ``otherData.pmu``: the run's note and the copy limit."""
    return {"note": report.pmu_note, "copy_limit_gbs": copy_limit_gbs(), "copy_bytes": COPY_BYTES}


def write_pmu(out_dir: Path, program: Build, report: RunReport) -> list[Path]:
    """Write ``out_dir/pmu.csv`` for ``report`` (a run of ``program``) and log the run's note once;
    returns ``[path]``."""
    kernels = [k["name"] for k in program.kernels]
    tasks = {t.task_id: t for t in report.tasks}
    moved = task_bytes(report)
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(PMU_COLUMNS)
    for rec in report.pmu:
        t = tasks.get(rec.task_id)
        func_id = t.func_id if t is not None else -1
        kernel = kernels[func_id] if 0 <= func_id < len(kernels) else f"func_{func_id}"
        counters = ["" if getattr(rec, c) is None else getattr(rec, c) for c in COUNTERS]
        out.writerow([rec.task_id, kernel, t.name if t is not None else "", rec.worker, *counters,
                      *moved.get(rec.task_id, (0, 0))])  # fmt: skip
    path = inside(out_dir, PMU_CSV)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buf.getvalue())
    log.info("[pmu] %s: %s", program.name, report.pmu_note)
    return [path]
