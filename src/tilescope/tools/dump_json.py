"""A tensor dump as JSON data: its records, and the values of one record, bounded (what
``tilescope mcp``'s ``dump_records`` and ``dump_values`` return; ``tilescope dump`` prints the same
records as a table).

Invariants: built on ``dump_data`` alone (``load_dump``, ``select``, ``Dump.tensor``), so a record
reads the same here as in the viewer; every answer is bounded — at most ``limit`` records or
values, with how many were left out — and says so; floats that JSON cannot hold (NaN, ±Inf) are
left to the caller's encoder (``tilescope mcp`` writes them as strings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilescope.debug.intermediates import value_stats
from tilescope.tools.dump_data import LEVELS, Dump, DumpError, Record

DEFAULT_RECORDS = 200
DEFAULT_VALUES = 256


def record_json(r: Record) -> dict[str, Any]:
    """One record as the listing shows it: where it comes from (task, kernel, stage, role,
    argument, tensor and region, or probe and line), what it holds (kind, dtype, shape, bytes,
    a scalar's value), its flags and the problems that keep it from decoding."""
    return {
        "index": r.index, "task_id": r.task_id, "task_name": r.task_name, "kernel": r.kernel,
        "stage": r.stage, "role": r.role, "arg_index": r.arg_index, "tensor": r.tensor, "region": r.region,
        "probe": r.probe, "line": r.line, "kind": r.kind, "dtype": r.dtype, "shape": list(r.shape),
        "numel": r.numel, "nbytes": r.nbytes, "value": r.value if r.kind == "scalar" else None,
        "flags": r.flags(), "problems": list(r.problems),
    }  # fmt: skip


def dump_json(d: Dump, records: Sequence[Record], limit: int = DEFAULT_RECORDS) -> dict[str, Any]:
    """The dump's header (program, level, run status, losses, problems) and the first ``limit`` of
    ``records``; ``left_out`` counts the rest."""
    shown = list(records)[: max(limit, 0)]
    return {
        "dump": str(d.dir), "program": d.program, "level": d.level, "level_text": None if d.level is None else LEVELS.get(d.level),
        "run_status": d.status, "run_error": d.error or None, "total_records": len(d.records),
        "matched": len(records), "returned": len(shown), "left_out": len(records) - len(shown),
        "lost": {"truncated": d.truncated, "overwritten": d.overwritten, "dropped_records": d.dropped_records},
        "problems": list(d.problems), "records": [record_json(r) for r in shown],
    }  # fmt: skip


def values_json(d: Dump, r: Record, offset: int = 0, limit: int = DEFAULT_VALUES) -> dict[str, Any]:
    """Record ``r``'s values, flat in row-major order from element ``offset``, at most ``limit`` of
    them (``left_out`` counts the stored values not returned), and the statistics of all its
    stored values (``value_stats``).

    Raises:
        DumpError: the record does not decode (bad, metadata only, overwritten), or ``offset``
            lies past its stored values.
    """
    t = d.tensor(r, partial=True)
    flat = t.reshape(-1)
    stored = flat.numel()
    if offset and offset >= stored:
        raise DumpError(
            f"offset {offset} is past the {stored} stored value(s) of {r.describe()}: pass 0..{max(stored - 1, 0)}"
        )
    picked = flat[offset : offset + max(limit, 0)]
    return {
        "record": record_json(r), "shape": list(r.shape), "dtype": r.dtype, "numel": r.numel, "stored": stored,
        "truncated": r.truncated, "offset": offset, "returned": picked.numel(),
        "left_out": stored - picked.numel(), "values": picked.tolist(), "stats": value_stats(t) if stored else None,
    }  # fmt: skip


__all__ = ["DEFAULT_RECORDS", "DEFAULT_VALUES", "dump_json", "record_json", "values_json"]
