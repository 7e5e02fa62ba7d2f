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
- No per-record Python work: the core writes the records (``ts_dump_write_records_json``) from
  ``DumpReport.raw``, names and regions as ``deps.region_text`` gives them, from the tables built
  here (kernels, task names, buffers with their layouts, probes).
"""

from __future__ import annotations

import ctypes
import json
import os
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import numpy as np

from tilescope.build.manifest import Build
from tilescope.build.paths import TENSOR_DUMP_BIN as BIN_FILE
from tilescope.build.paths import TENSOR_DUMP_DIR as DUMP_DIR
from tilescope.build.paths import TENSOR_DUMP_JSON as MANIFEST
from tilescope.build.paths import atomic_replace, atomic_write_bytes, inside
from tilescope.debug.deps_json import buffer_names
from tilescope.runtime.abi import (
    DUMP_COUNTS,
    DUMP_ROLES,
    DUMP_STAGES,
    MAX_DIMS,
    TsDumpBufferName,
    TsDumpProbeName,
    TsDumpRecord,
)
from tilescope.runtime.library import load_core
from tilescope.runtime.records import DumpRecord, RunReport, TaskArgRecord

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


def _header(program: Build, report: RunReport, counts: list[int]) -> dict[str, Any]:
    """The manifest's fields but ``records`` (``counts``: ``ts_dump_count_records``'s)."""
    dump = report.dump
    assert dump is not None
    roles = {
        "before_dispatch": ("input", "inout", "scalar"),
        "after_completion": ("output", "inout"),
        "probe": ("probe",),
    }
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
        "counts": {
            stage: {role: counts[s * 5 + DUMP_ROLES.index(role)] for role in roles[stage]}
            for s, stage in enumerate(DUMP_STAGES)
        },
        "truncated": counts[15],
        "overwritten": counts[16],
        "dropped_records": dump.dropped_records,
    }


def _escaped(text: str) -> bytes:
    """``text`` as the inside of a JSON string."""
    return encode_basestring_ascii(text)[1:-1].encode()


def _names(program: Build, report: RunReport):
    """The C tables ``ts_dump_write_records_json`` names records with: kernels, task names, buffers
    (name and layout) and probes."""
    dump = report.dump
    assert dump is not None
    kernels = [_escaped(k["name"]) for k in program.kernels]
    task_ids = np.fromiter(dump.task_names, dtype=np.int64, count=len(dump.task_names))
    # NOTE: one C-encoded string for all tasks; '"\0"' only occurs between two quoted names
    quoted = "\0".join(map(encode_basestring_ascii, dump.task_names.values()))
    task_names = quoted[1:-1].replace('"\0"', "\0") + "\0" if task_ids.size else ""
    buffers = buffer_names(program, report)
    bufs = (TsDumpBufferName * max(len(buffers), 1))()
    for b, (buffer_id, (name, (shape, strides, offset))) in zip(bufs, buffers.items()):
        b.buffer_id, b.name, b.offset = buffer_id, _escaped(name), offset
        b.ndim = len(shape) if len(shape) <= MAX_DIMS else -1
        b.shape[: len(shape[:MAX_DIMS])] = shape[:MAX_DIMS]
        b.strides[: len(strides[:MAX_DIMS])] = strides[:MAX_DIMS]
    probes = [
        (func_id, p["id"], _escaped(p["name"]), None if p.get("line") is None else _escaped(str(p["line"])))
        for func_id, k in enumerate(program.kernels)
        for p in k.get("probes", [])
    ]
    return (
        (ctypes.c_char_p * max(len(kernels), 1))(*kernels), len(kernels),
        task_ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), task_names.encode(), len(task_ids),
        bufs, len(buffers), (TsDumpProbeName * max(len(probes), 1))(*probes), len(probes),
    )  # fmt: skip


def write_manifest(path: Path, program: Build, report: RunReport) -> None:
    """Write ``report``'s dump manifest (``tensor_dump.json``) to the new file ``path``: the header
    from Python, the records straight from the runtime's record array."""
    dump = report.dump
    if dump is None:
        raise ValueError("write_manifest: the run report has no tensor dump (run with enable_dump_tensor)")
    lib = load_core()
    n = dump.raw.size // ctypes.sizeof(TsDumpRecord)
    records = dump.raw.ctypes.data_as(ctypes.POINTER(TsDumpRecord))
    counts = (ctypes.c_int64 * DUMP_COUNTS)()
    lib.ts_dump_count_records(records, n, counts)
    head = json.dumps(_header(program, report, list(counts)), indent=1)
    with open(path, "wb") as f:
        f.write(head[:-2].encode() + b',\n "records": [')
        f.flush()
        err = lib.ts_dump_write_records_json(f.fileno(), records, n, *_names(program, report))
        if err:
            raise OSError(err, os.strerror(err), str(path))
        f.write(b"\n ]\n}\n" if n else b"]\n}\n")


def write_tensor_dump(out: Path, program: Build, report: RunReport) -> list[Path]:
    """Write ``<out>/tensor_dump/tensor_dump.{bin,json}``; returns their paths."""
    assert report.dump is not None
    folder = inside(out, DUMP_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    bin_path, json_path = inside(folder, BIN_FILE), inside(folder, MANIFEST)
    atomic_write_bytes(bin_path, memoryview(report.dump.payload))
    atomic_replace(json_path, lambda tmp: write_manifest(tmp, program, report))
    return [json_path, bin_path]


__all__ = ["probe_of", "view_of", "write_manifest", "write_tensor_dump"]
