"""Reading a tensor dump (``dfx_outputs/tensor_dump/``): the manifest, its records and their
payloads. The viewer (``tilescope dump``) is built on this; see ``dump_viewer``.

Invariants:
- ``load_dump`` raises ``DumpError`` only when nothing can be listed: no manifest, not JSON, not
  a version 1 tensor dump, no ``records`` list, or a ``bin_file`` outside the dump's directory
  (``paths.confined``: payloads are never read from anywhere else). Everything else wrong is kept and reported:
  a record that cannot be decoded carries its ``problems``; a problem with the dump as a whole
  is in ``Dump.problems``. Every other record still decodes.
- A record's ``index`` is its position in ``records``.
- The manifest and the payload file are one pair: they are read under the outputs lock (held
  shared, ``build.lock.reading_outputs``), and a payload replaced by a later run is refused
  when a record is decoded, never read as this manifest's.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from tilescope.build.lock import reading_outputs
from tilescope.build.paths import DFX_DIR, build_base, confined, inside
from tilescope.build.paths import TENSOR_DUMP_BIN as BIN_FILE
from tilescope.build.paths import TENSOR_DUMP_DIR as DUMP_DIR
from tilescope.build.paths import TENSOR_DUMP_JSON as MANIFEST
from tilescope.debug.tensor_dump import FORMAT, VERSION
from tilescope.errors import BuildFileError, TilescopeError

MAX_NDIM = 4

DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool, "f64": torch.float64, "i64": torch.int64
}  # fmt: skip
ROLES = ("input", "output", "inout", "scalar", "probe")
STAGES = ("before_dispatch", "after_completion", "probe")
STAGE_ALIASES = {"before": "before_dispatch", "after": "after_completion"}
LEVELS = {0: "probes only", 1: "tagged only", 2: "full", 3: "metadata only"}
# Digits that print a value of the dtype so it reads back to the same value.
_DIGITS = {"f32": 9, "f16": 5, "bf16": 4, "f64": 17}
_RECORD_FIELDS = "task_id kernel arg_index role stage kind dtype shape bin_offset bin_size".split()
_MANIFEST_FIELDS = "program level bin_file bin_size num_workers status error counts truncated overwritten dropped_records".split()
_EDGE = 3  # rows/cols shown at each end of the overview grid
_DIFF_SHOWN = 10


class DumpError(TilescopeError):
    """A tensor dump that cannot be read, a record that cannot be decoded, or a bad filter."""


@dataclass(frozen=True, slots=True)
class Record:
    """One captured tensor or scalar. ``index`` is its position in the manifest's records."""

    index: int
    task_id: int
    kernel: str
    func_id: int
    task_name: str
    arg_index: int
    role: str
    stage: str
    kind: str  # "tensor" or "scalar"
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    start_offset: int
    tensor: str | None  # program argument name, or the intermediate's (its orchestration variable)
    region: str | None  # the part of it the argument covers, ``h[0:64, 128:256]`` (None: unknown)
    value: Any  # a scalar's value, else None
    bin_offset: int | None
    bin_size: int  # bytes stored in the .bin
    truncated: bool
    overwritten: bool
    problems: tuple[str, ...] = ()  # why the record cannot be decoded; empty when it can
    probe: str | None = None  # a probe record's name (ts.probe(tile, "name")), and its DSL line
    line: str | None = None

    @property
    def numel(self) -> int:
        """Elements of the whole region."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole region (numel x element size); 0 for an unknown dtype."""
        dt = DTYPES.get(self.dtype)
        return self.numel * dt.itemsize if dt is not None else 0

    @property
    def has_payload(self) -> bool:
        """Whether the ``.bin`` holds bytes of this record."""
        return self.bin_offset is not None and self.bin_size > 0

    def flags(self) -> list[str]:
        """The listing's flags: ``BAD``, ``truncated:<n>B``, ``overwritten``, ``meta`` (no payload)."""
        out = []
        if self.problems:
            out.append("BAD")
        if self.truncated:
            out.append(f"truncated:{self.bin_size}B")
        if self.overwritten:
            out.append("overwritten")
        if self.kind != "scalar" and not (
            self.has_payload or self.problems or self.truncated or self.overwritten
        ):
            out.append("meta")
        return out

    def describe(self) -> str:
        """How messages name the record: its index, task, kernel, stage, role and argument."""
        if self.probe is not None:
            return f"record {self.index} (task {self.task_id} {self.kernel}, probe {self.probe} at {self.line})"
        return (
            f"record {self.index} (task {self.task_id} {self.kernel}, {self.stage}, {self.role} arg "
            f"{self.arg_index}{'' if self.tensor is None else ' ' + (self.region or self.tensor)})"
        )


@dataclass(frozen=True, slots=True)
class Dump:
    """A loaded tensor dump: the manifest's fields, its records and what is wrong with it."""

    dir: Path
    manifest: Path
    bin: Path
    program: str
    level: int | None
    num_workers: int | None
    status: int
    error: str
    counts: dict[str, dict[str, int]]
    truncated: int
    overwritten: int
    dropped_records: int
    bin_size: int | None  # as the manifest says
    bin_actual: int | None  # the file's size; None when it is missing
    records: tuple[Record, ...]
    problems: tuple[str, ...]  # dump-wide problems (records' own are on each record)
    bin_stamp: tuple[int, int, int] | None = None  # the payload read with the manifest: (dev, inode, mtime)

    def tensor(self, record: Record | int, *, partial: bool = False) -> torch.Tensor:
        """Decode a record's payload (a scalar's value) to a tensor of its dtype and shape.

        Args:
            record: a ``Record`` of this dump or its index.
            partial: for a truncated record, return the stored elements as a 1-D tensor (the
                first elements in row-major order) instead of raising.

        Raises:
            DumpError: the record is bad, has no payload (level 3, overwritten) or is truncated.
        """
        r = self.records[record] if isinstance(record, int) else record
        if r.problems:
            raise DumpError(f"{r.describe()} cannot be decoded: {'; '.join(r.problems)}")
        dt = DTYPES[r.dtype]
        if r.kind == "scalar":
            if r.value is None:
                raise DumpError(f"{r.describe()}: a scalar without a value")
            return torch.tensor(r.value, dtype=dt)
        if r.overwritten:
            raise DumpError(
                f"{r.describe()}: payload overwritten (ring reuse), so it is not this record's value; "
                "dump fewer tensors (level 1 + ts.dump_tag) to keep it"
            )
        if not r.has_payload:
            if r.numel == 0:
                return torch.empty(r.shape, dtype=dt)
            why = "a level 3 (metadata only) dump" if self.level == 3 else "no bytes stored"
            raise DumpError(f"{r.describe()} has no payload ({why}); dump at level 1 or 2 for values")
        if r.truncated and not partial:
            raise DumpError(
                f"{r.describe()} is truncated: {r.bin_size} of {r.nbytes} bytes stored; "
                "tensor(record, partial=True) decodes the stored elements"
            )
        assert r.bin_offset is not None
        with open(self.bin, "rb") as f:
            if self.bin_stamp is not None and _stamp(os.fstat(f.fileno())) != self.bin_stamp:
                raise DumpError(
                    f"{self.bin} was rewritten by another run after {self.manifest} was read, so its bytes "
                    "are not this manifest's records: run the command again (it reads the new dump)"
                )
            f.seek(r.bin_offset)
            data = f.read(r.bin_size)
        n = len(data) // dt.itemsize
        if len(data) != r.bin_size:
            raise DumpError(f"{r.describe()}: read {len(data)} of {r.bin_size} bytes from {self.bin}")
        raw = torch.frombuffer(bytearray(data[: n * dt.itemsize]), dtype=torch.uint8) if n else None
        if raw is None:
            flat = torch.empty(0, dtype=dt)
        else:
            if sys.byteorder == "big" and dt.itemsize > 1:
                raw = raw.view(n, dt.itemsize).flip(1).reshape(-1)
            flat = raw != 0 if dt == torch.bool else raw.view(dt)
        return flat.clone() if r.truncated else flat.reshape(r.shape).clone()


# -- finding and loading -------------------------------------------------------------------------


def find_manifest(path: str | os.PathLike | None = None) -> Path:
    """The manifest for ``path``: a build dir, its dfx_outputs, the tensor_dump dir or the manifest.

    With no path: the newest dump under the build base directory.
    """
    if path is None:
        base = build_base()
        found = sorted(base.glob(f"*/{DFX_DIR}/{DUMP_DIR}/{MANIFEST}"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise DumpError(
                f"no tensor dump under {base}/*/{DFX_DIR}/{DUMP_DIR}: run with --dump-tensor "
                "(runtime_cfg enable_dump_tensor=2), or pass the dump directory"
            )
        return found[-1]
    p = Path(path)
    if p.is_file():
        return p
    if not p.exists():
        raise DumpError(f"{p} does not exist")
    for d in (p, inside(p, DUMP_DIR), inside(p, DFX_DIR, DUMP_DIR)):
        manifest = inside(d, MANIFEST)
        if manifest.is_file():
            return manifest
        if manifest.exists():
            raise DumpError(
                f"{manifest} is a directory, not a dump manifest: remove it (a run writes the file there) "
                "and re-run with --dump-tensor"
            )
        if inside(d, BIN_FILE).is_file():
            raise DumpError(
                f"{d} has {BIN_FILE} but no {MANIFEST} (the manifest is written last: was the run "
                "killed?); re-run with --dump-tensor"
            )
    raise DumpError(
        f"no {MANIFEST} in {p}, {p}/{DUMP_DIR} or {p}/{DFX_DIR}/{DUMP_DIR}: run with --dump-tensor "
        "(runtime_cfg enable_dump_tensor=2) to write one"
    )


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    """A file's identity and version: a run replaces the payload file (a new inode), never edits it."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _record(pos: int, raw: Any, level: int | None, bin_actual: int | None, bin_name: str) -> Record:
    problems: list[str] = []
    if not isinstance(raw, dict):
        problems.append(f"not a JSON object but {json.dumps(raw)[:40]}")
        raw = {}
    elif missing := [k for k in _RECORD_FIELDS if k not in raw]:
        problems.append(f"missing field(s) {', '.join(missing)}")

    def get_int(key: str, default: int) -> int:
        v = raw.get(key, default)
        if v is None and key not in _RECORD_FIELDS:
            return default
        if not _int(v):
            problems.append(f"{key} is {v!r}, not an int")
            return default
        return v

    task_id, arg_index = get_int("task_id", -1), get_int("arg_index", -1)
    role, stage, kind = str(raw.get("role", "?")), str(raw.get("stage", "?")), str(raw.get("kind", "?"))
    dtype = str(raw.get("dtype", "?"))
    if "role" in raw and role not in ROLES:
        problems.append(f"role {role!r} is not one of {', '.join(ROLES)}")
    if "stage" in raw and stage not in STAGES:
        problems.append(f"stage {stage!r} is not one of {', '.join(STAGES)}")
    if "kind" in raw and kind not in ("tensor", "scalar"):
        problems.append(f"kind {kind!r} is not tensor or scalar")
    if "dtype" in raw and dtype not in DTYPES:
        problems.append(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape_raw = raw.get("shape", [])
    shape: tuple[int, ...] = ()
    if not isinstance(shape_raw, list) or not all(_int(d) for d in shape_raw):
        problems.append(f"shape {shape_raw!r} is not a list of ints")
    elif len(shape_raw) > MAX_NDIM:
        problems.append(
            f"shape {shape_raw} has ndim {len(shape_raw)} > {MAX_NDIM} (a record never claims more)"
        )
    elif any(d < 0 for d in shape_raw):
        problems.append(f"shape {shape_raw} has a negative dim")
    else:
        shape = tuple(shape_raw)
    strides_raw = raw.get("strides") or []
    strides = tuple(strides_raw) if isinstance(strides_raw, list) and all(map(_int, strides_raw)) else ()

    off = raw.get("bin_offset")
    size = raw.get("bin_size", 0)
    if off is not None and (not _int(off) or off < 0):
        problems.append(f"bin_offset {off!r} is not a byte offset")
        off = None
    if not _int(size) or size < 0:
        problems.append(f"bin_size {size!r} is not a byte count")
        size = 0
    truncated, overwritten = bool(raw.get("truncated", False)), bool(raw.get("overwritten", False))
    r = Record(
        index=pos,
        task_id=task_id,
        kernel=str(raw.get("kernel", "?")),
        func_id=get_int("func_id", -1),
        task_name=str(raw.get("task_name") or raw.get("kernel", "?")),
        arg_index=arg_index,
        role=role,
        stage=stage,
        kind=kind,
        dtype=dtype,
        shape=shape,
        strides=strides,
        start_offset=get_int("start_offset", 0),
        tensor=None if raw.get("tensor") is None else str(raw.get("tensor")),
        region=raw.get("region") if isinstance(raw.get("region"), str) else None,
        value=raw.get("value"),
        bin_offset=off,
        bin_size=size,
        truncated=truncated,
        overwritten=overwritten,
        probe=str(raw["probe"]) if raw.get("probe") is not None else None,
        line=str(raw["line"]) if raw.get("line") is not None else None,
    )
    if not problems and kind == "scalar" and r.value is None and not r.has_payload:
        problems.append("a scalar record without a value")
    if not problems:
        if off is None and size > 0:
            problems.append(f"bin_size {size} but bin_offset null")
        elif off is not None and kind == "tensor" and not overwritten:
            need = r.nbytes
            if truncated and size > need:
                problems.append(
                    f"marked truncated but stores {size} bytes, more than the {need} its shape needs"
                )
            elif not truncated and size != need:
                problems.append(
                    f"bin_size {size} but shape {list(shape)} of {dtype} needs {need} bytes "
                    "(and the record is not marked truncated)"
                )
        if off is not None and size > 0 and not problems:
            if bin_actual is None:
                problems.append(f"payload in {bin_name}, which is missing")
            elif off + size > bin_actual:
                problems.append(
                    f"payload bytes [{off}, {off + size}) lie past the end of {bin_name} "
                    f"({bin_actual} bytes): the file is truncated"
                )
    if problems:
        r = replace(r, problems=tuple(problems))
    return r


def _read_manifest(manifest: Path) -> tuple[str, tuple[int, int, int] | None]:
    """The manifest's text, and the stamp of the payload file beside it under the name a run
    writes (None if there is none), read together."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DumpError(f"cannot read {manifest}: {e}") from None
    try:
        return text, _stamp(os.stat(inside(manifest.parent, BIN_FILE)))
    except OSError:
        return text, None


def load_dump(path: str | os.PathLike | None = None) -> Dump:
    """Read a tensor dump: a build dir, its dfx_outputs, the tensor_dump dir or the manifest.

    With no path, the newest dump under the build base directory (``TILESCOPE_BUILD_DIR`` or
    ``./build_output``).

    Raises:
        DumpError: no manifest, not JSON, not a version 1 tilescope tensor dump, no records, or a
            ``bin_file`` that is not a file in the dump's directory.
    """
    manifest = find_manifest(path)
    dfx = manifest.parent.parent
    with reading_outputs(dfx) if dfx.name == DFX_DIR else contextlib.nullcontext():
        text, bin_stamp = _read_manifest(manifest)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DumpError(
            f"{manifest} is not valid JSON (line {e.lineno} column {e.colno}: {e.msg}); "
            "a partial manifest means the run was killed while writing it: re-run with --dump-tensor"
        ) from None
    if not isinstance(data, dict):
        raise DumpError(
            f"{manifest} is not a tensor dump manifest: a JSON {type(data).__name__}, not an object"
        )
    if data.get("format") != FORMAT:
        raise DumpError(
            f"{manifest} is not a tensor dump manifest: format is {data.get('format')!r}, not {FORMAT!r}"
        )
    if data.get("version") != VERSION:
        raise DumpError(
            f"{manifest} is tensor dump version {data.get('version')!r}; this viewer reads version {VERSION}"
        )
    if not isinstance(data.get("records"), list):
        raise DumpError(f"{manifest} has no records list (field 'records' is {data.get('records')!r})")

    problems = []
    missing = [k for k in _MANIFEST_FIELDS if k not in data]
    if missing:
        problems.append(f"manifest lacks field(s) {', '.join(missing)}; shown as unknown")
    level = data.get("level") if _int(data.get("level")) else None
    bin_name = data.get("bin_file") or BIN_FILE
    try:
        bin_path = confined(
            manifest.parent,
            bin_name,
            f"{manifest}'s bin_file",
            "re-run with --dump-tensor to write a new dump",
        )
    except BuildFileError as e:
        raise DumpError(str(e)) from None
    bin_name = str(bin_name)
    bin_actual = bin_path.stat().st_size if bin_path.is_file() else None
    declared = data.get("bin_size") if _int(data.get("bin_size")) else None
    if bin_actual is None and (declared or 0) > 0:
        problems.append(f"{bin_name} is missing but the manifest says it holds {declared} bytes")
    elif bin_actual is not None and declared is not None and bin_actual != declared:
        problems.append(
            f"{bin_name} is {bin_actual} bytes but the manifest says {declared}"
            + (": the file was cut short" if bin_actual < declared else "")
        )

    records = tuple(_record(i, raw, level, bin_actual, bin_name) for i, raw in enumerate(data["records"]))
    for i, raw in enumerate(data["records"]):
        if isinstance(raw, dict) and raw.get("index", i) != i:
            problems.append(f"record at position {i} says index {raw.get('index')!r}; listed as {i}")
    order = [(r.task_id, STAGES.index(r.stage) if r.stage in STAGES else 2, r.arg_index) for r in records]
    if order != sorted(order):
        problems.append("records are not sorted by (task_id, stage, arg_index)")

    def count(key: str) -> int:
        v = data.get(key, 0)
        return v if _int(v) else 0

    counts = data.get("counts") if isinstance(data.get("counts"), dict) else {}
    status = data.get("status", 0)
    return Dump(
        dir=manifest.parent,
        manifest=manifest,
        bin=bin_path,
        program=str(data.get("program", "?")),
        level=level,
        num_workers=data.get("num_workers") if _int(data.get("num_workers")) else None,
        status=status if _int(status) else -1,
        error=str(data.get("error") or ""),
        counts=counts,
        truncated=count("truncated"),
        overwritten=count("overwritten"),
        dropped_records=count("dropped_records"),
        bin_size=declared,
        bin_actual=bin_actual,
        records=records,
        problems=tuple(problems),
        bin_stamp=bin_stamp if bin_path == inside(manifest.parent, BIN_FILE) else None,
    )


# -- filtering -----------------------------------------------------------------------------------


def _ranges(ids: Iterable[int]) -> str:
    xs = sorted(set(ids))
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


def normalize_stage(stage: str) -> str:
    """``before``/``after``/``probe`` (or the full stage name) to the stage name; DumpError otherwise."""
    s = STAGE_ALIASES.get(stage, stage)
    if s not in STAGES:
        raise DumpError(f"stage {stage!r} is not one of before, after, probe ({', '.join(STAGES)})")
    return s


def select(
    dump: Dump,
    *,
    task: int | None = None,
    kernel: str | None = None,
    stage: str | None = None,
    role: str | None = None,
    arg: int | None = None,
    index: int | Sequence[int] | None = None,
) -> list[Record]:
    """The records matching every given filter, in dump order.

    Raises:
        DumpError: a filter value the dump does not have (the message lists the valid ones).
    """
    rs = list(dump.records)
    if index is not None:
        wanted = [index] if isinstance(index, int) else list(index)
        bad = [i for i in wanted if not 0 <= i < len(rs)]
        if bad:
            raise DumpError(
                f"record index {', '.join(map(str, bad))} out of range: the dump has records 0-{len(rs) - 1}"
                if rs
                else "the dump has no records"
            )
        rs = [rs[i] for i in sorted(set(wanted))]
    if task is not None:
        tasks = {r.task_id for r in dump.records}
        if task not in tasks:
            raise DumpError(f"task {task} is not in the dump; tasks: {_ranges(tasks)}")
        rs = [r for r in rs if r.task_id == task]
    if kernel is not None:
        kernels = sorted({r.kernel for r in dump.records})
        if kernel not in kernels:
            raise DumpError(f"kernel {kernel!r} is not in the dump; kernels: {', '.join(kernels) or 'none'}")
        rs = [r for r in rs if r.kernel == kernel]
    if stage is not None:
        s = normalize_stage(stage)
        rs = [r for r in rs if r.stage == s]
    if role is not None:
        if role not in ROLES:
            raise DumpError(f"role {role!r} is not one of {', '.join(ROLES)}")
        rs = [r for r in rs if r.role == role]
    if arg is not None:
        args = {r.arg_index for r in dump.records}
        if arg not in args:
            raise DumpError(f"arg {arg} is not in the dump; arg indices: {_ranges(args)}")
        rs = [r for r in rs if r.arg_index == arg]
    return rs


# -- formatting ----------------------------------------------------------------------------------
