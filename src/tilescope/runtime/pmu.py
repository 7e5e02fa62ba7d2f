"""Copying a run's per-task counters (``enable_pmu``, ``ts_pmu_record``) out of the core."""

from __future__ import annotations

import ctypes

import numpy as np

from tilescope.runtime.abi import TsPmuRecord
from tilescope.runtime.records import PmuRecord


def collect_pmu(lib: ctypes.CDLL, handle: int) -> tuple[list[PmuRecord], str]:
    """The counters of every executed task of run ``handle`` (by task id) and the run's note on
    which counters were available; ``([], "")`` when the run had no pmu."""
    n = lib.ts_run_num_pmu(handle)
    note = (lib.ts_run_pmu_note(handle) or b"").decode(errors="replace")
    if not n:
        return [], note
    buf = (TsPmuRecord * n)()
    n = lib.ts_run_copy_pmu(handle, buf, n)
    return [
        PmuRecord(tid, worker, wall, cpu, pf, cs, *(None if v < 0 else v for v in (cyc, ins, cm)))
        for tid, worker, _, wall, cpu, pf, cs, cyc, ins, cm in np.ctypeslib.as_array(buf)[:n].tolist()
    ], note
