"""The tensor dump of a sim run: ``dfx_outputs/tensor_dump/tensor_dump.json`` + ``tensor_dump.bin``.

Invariants (format: tilescope-tensor-dump version 1):
- Built only from a ``RunReport`` whose ``dump`` the runtime flushed from every worker (after a
  failed run too, with the run's status and error) and the build's kernel and argument tables.
- Records keep the runtime's order, (task_id, stage [before_dispatch, after_completion, probe],
  arg_index); ``index`` is the position. A probe record (``stage`` and ``role`` ``probe``, with
  ``--probes``) names its ``probe``, ``probe_id`` and DSL ``line``; its ``arg_index`` is its place
  among the task's probes, in the order they ran. ``tensor`` names a program argument by its buffer (the first
  argument of aliasing ones), else the intermediate's orchestration variable, as ``deps.json`` does;
  ``region`` is the part of it the argument covers (``h[0:64, 128:256]``).
- ``tensor_dump.bin`` holds every kept payload at its record's ``bin_offset`` (nothing at level
  3); a payload lost to the arena is flagged (``truncated``/``overwritten``) and counted, and
  records lost to a full record buffer are counted in ``dropped_records``.
- Both files are replaced atomically, the payload first, so a manifest never names a missing bin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tilescope.build.manifest import Build
from tilescope.build.paths import TENSOR_DUMP_BIN as BIN_FILE
from tilescope.build.paths import TENSOR_DUMP_DIR as DUMP_DIR
from tilescope.build.paths import TENSOR_DUMP_JSON as MANIFEST
from tilescope.build.paths import atomic_write, atomic_write_bytes
from tilescope.debug.deps import buffer_names, region_text
from tilescope.runtime.records import DumpRecord, DumpReport, RunReport, TaskArgRecord

FORMAT = "tilescope-tensor-dump"
VERSION = 1


def view_of(r: DumpRecord) -> TaskArgRecord:
    """A dump record's region as a task argument (what ``region_text`` reads)."""
    direction = {"input": "in", "output": "out", "inout": "inout"}.get(r.role, r.role)
    return TaskArgRecord(
        r.task_id, r.arg_index, r.kind, direction, r.dtype, r.buffer_id, len(r.shape), r.shape, r.strides,
        r.start_offset,
    )  # fmt: skip


def probe_of(program: Build, r: DumpRecord) -> dict[str, Any] | None:
    """A probe record's entry in its kernel's probe table (``KERNELS[..]["probes"]``: id, name, line);
    None for an argument record. An id the table lacks is named ``probe<id>``."""
    if r.stage != "probe":
        return None
    table = program.kernels[r.func_id].get("probes", []) if 0 <= r.func_id < len(program.kernels) else []
    return next((p for p in table if p.get("id") == r.value), {"name": f"probe{r.value}", "line": None})


def manifest(program: Build, report: RunReport) -> dict[str, Any]:
    """The ``tensor_dump.json`` object for ``report`` (which must carry a dump)."""
    dump: DumpReport | None = report.dump
    if dump is None:
        raise ValueError("manifest: the run report has no tensor dump (run with enable_dump_tensor)")
    kernels = [k["name"] for k in program.kernels]
    buffers = buffer_names(program, report)
    names = {buffer_id: name for buffer_id, (name, _) in buffers.items()}
    counts = {
        "before_dispatch": {"input": 0, "inout": 0, "scalar": 0},
        "after_completion": {"output": 0, "inout": 0},
        "probe": {"probe": 0},
    }
    records = []
    for index, r in enumerate(dump.records):
        counts[r.stage][r.role] += 1
        kernel = kernels[r.func_id] if 0 <= r.func_id < len(kernels) else f"kernel{r.func_id}"
        probe = probe_of(program, r)
        records.append(
            {
                "index": index,
                "task_id": r.task_id,
                "kernel": kernel,
                "func_id": r.func_id,
                "task_name": dump.task_names.get(r.task_id) or kernel,
                "arg_index": r.arg_index,
                "role": r.role,
                "stage": r.stage,
                "kind": r.kind,
                "dtype": r.dtype,
                "shape": list(r.shape),
                "strides": list(r.strides),
                "start_offset": r.start_offset,
                "tensor": None if r.kind == "scalar" or probe else names.get(r.buffer_id, f"buffer@{r.buffer_id:#x}"),
                "region": None if r.kind == "scalar" or probe else region_text(view_of(r), buffers),
                **({"probe": probe["name"], "probe_id": r.value, "line": probe.get("line")} if probe else {}),
                "value": r.value,
                "bin_offset": r.bin_offset,
                "bin_size": r.bin_size,
                "truncated": r.truncated,
                "overwritten": r.overwritten,
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "program": program.name,
        "level": dump.level,
        "bin_file": BIN_FILE,
        "bin_size": int(dump.payload.size),
        "num_workers": report.num_workers,
        "status": report.status,
        "error": report.error,
        "counts": counts,
        "truncated": sum(r.truncated for r in dump.records),
        "overwritten": sum(r.overwritten for r in dump.records),
        "dropped_records": dump.dropped_records,
        "records": records,
    }


def write_tensor_dump(out: Path, program: Build, report: RunReport) -> list[Path]:
    """Write ``<out>/tensor_dump/tensor_dump.{bin,json}``; returns their paths."""
    data = manifest(program, report)
    assert report.dump is not None
    folder = Path(out) / DUMP_DIR
    folder.mkdir(parents=True, exist_ok=True)
    bin_path, json_path = folder / BIN_FILE, folder / MANIFEST
    atomic_write_bytes(bin_path, memoryview(report.dump.payload))
    atomic_write(json_path, json.dumps(data, indent=1) + "\n")
    return [json_path, bin_path]


__all__ = ["manifest", "probe_of", "view_of", "write_tensor_dump"]
