"""The tensor dump viewer: reads ``dfx_outputs/tensor_dump/`` and is ``tilescope dump``.

The format (version 1) is ``tensor_dump.json`` (the manifest: run fields plus one record per
captured tensor or scalar) and ``tensor_dump.bin`` (the payloads, each a record's region copied
contiguous, row-major over its ``shape``, little endian). See docs/dump.md.

Invariants:
- ``load_dump`` raises ``DumpError`` only when nothing can be listed: no manifest, not JSON, not
  a version 1 tensor dump, no ``records`` list, or a ``bin_file`` outside the dump's directory.
  Everything else wrong is kept and reported:
  a record that cannot be decoded (a bad dtype/shape, a payload past the end of the .bin, a size
  that does not match its shape) carries its ``problems`` and is listed flagged ``BAD``; a
  problem with the dump as a whole (a missing manifest field, a .bin whose size differs from the
  manifest's) is in ``Dump.problems``. Every other record still decodes.
- A record's ``index`` is its position in ``records`` (the manifest's ``index`` is checked
  against it); ``-i N`` and ``--diff A B`` use it.
- Nothing here writes into the dump except ``--export``, which writes only under its output
  directory (default ``<tensor_dump>/txt/``) and never replaces a file there unless ``--force``
  is given (nor ever a file given as the output directory).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import atomic_save, atomic_write, inside, os_problem
from tilescope.debug.intermediates import value_stats
from tilescope.tools.dump_data import (  # noqa: F401 - re-exported: the viewer's API
    _DIFF_SHOWN,
    _DIGITS,
    _EDGE,
    BIN_FILE,
    DFX_DIR,
    DTYPES,
    DUMP_DIR,
    FORMAT,
    LEVELS,
    MANIFEST,
    MAX_NDIM,
    ROLES,
    STAGE_ALIASES,
    STAGES,
    VERSION,
    Dump,
    DumpError,
    Record,
    _int,
    _ranges,
    find_manifest,
    load_dump,
    normalize_stage,
    select,
)


def format_value(v: Any, dtype: str) -> str:
    """One element as text that reads back to the same value in ``dtype``."""
    if isinstance(v, bool) or dtype == "bool":
        return "true" if v else "false"
    if isinstance(v, float) or dtype in _DIGITS:
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return str(f)
        return f"{f:.{_DIGITS.get(dtype, 9)}g}"
    return str(v)


def _shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def format_table(records: Sequence[Record]) -> str:
    """The record table: one line per record."""
    head = (
        "index",
        "task",
        "kernel",
        "stage",
        "role",
        "arg",
        "tensor",
        "kind",
        "dtype",
        "shape",
        "bytes/value",
        "flags",
    )
    rows = [
        (
            str(r.index),
            str(r.task_id),
            r.kernel,
            r.stage.split("_")[0],
            r.role,
            str(r.arg_index),
            (f"probe:{r.probe}" if r.probe is not None else (r.region or r.tensor or "-")).replace(", ", ","),  # NOTE: one cell
            r.kind,
            r.dtype,
            _shape(r.shape),
            format_value(r.value, r.dtype) if r.kind == "scalar" else str(r.nbytes),
            " ".join(r.flags()),
        )
        for r in records
    ]
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(head)]
    right = {0, 1, 5, 10}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    return "\n".join(line(c).rstrip() for c in [head, *rows])


def _header(d: Dump) -> list[str]:
    lvl = "?" if d.level is None else f"{d.level} ({LEVELS.get(d.level, 'unknown')})"
    payload = "?" if d.bin_actual is None else f"{d.bin_actual} payload bytes"
    lines = [
        f"tensor dump {d.dir}",
        f"program {d.program}: level {lvl}, {len(d.records)} records, {payload}, "
        f"{'?' if d.num_workers is None else d.num_workers} workers",
    ]
    if d.status:
        lines.append(
            f"run FAILED (status {d.status}): {d.error or '?'}; the dump holds what was captured before it"
        )
    return lines


def _problem_lines(d: Dump, records: Sequence[Record]) -> list[str]:
    lines = [f"problem: {p}" for p in d.problems]
    lines += [f"BAD {r.describe()}: {'; '.join(r.problems)}" for r in records if r.problems]
    return lines


def format_listing(d: Dump, records: Sequence[Record], filters: str = "") -> str:
    """What ``tilescope dump`` prints: header, table, counts, problems and a next hint."""
    lines = _header(d)
    if filters:
        lines.append(f"{len(records)} of {len(d.records)} records match {filters}")
    lines += ["", format_table(records), ""]
    by: dict[str, Counter[str]] = {}
    for r in records:
        by.setdefault(r.stage, Counter())[r.role] += 1
    lines.append(
        "by stage/role: "
        + (
            "; ".join(f"{s}: " + ", ".join(f"{k} {n}" for k, n in sorted(c.items())) for s, c in by.items())
            or "none"
        )
    )
    flagged_t = sum(r.truncated for r in d.records)
    flagged_o = sum(r.overwritten for r in d.records)
    lines.append(
        f"truncated {d.truncated}, overwritten {d.overwritten}, dropped_records {d.dropped_records}"
        + (
            f" (records flagged: truncated {flagged_t}, overwritten {flagged_o})"
            if (flagged_t, flagged_o) != (d.truncated, d.overwritten)
            else ""
        )
    )
    if d.truncated or d.overwritten or d.dropped_records:
        lines.append(
            "  some payloads or records were lost: dump fewer tensors (level 1 + ts.dump_tag) to keep them all"
        )
    lines += _problem_lines(d, records)
    lines.append(_next_hint(d, records, filtered=bool(filters)))
    return "\n".join(lines)


def _next_hint(d: Dump, records: Sequence[Record], filtered: bool) -> str:
    where = str(d.dir)
    if filtered:
        return (
            f"next: add --export to write these {len(records)} record(s) as text + .pt under {d.dir / 'txt'}"
        )
    before = {
        (r.task_id, r.arg_index): r.index for r in d.records if r.role == "inout" and r.stage == STAGES[0]
    }
    for r in d.records:
        if r.role == "inout" and r.stage == STAGES[1] and (r.task_id, r.arg_index) in before:
            a = before[(r.task_id, r.arg_index)]
            return (
                f"next: tilescope dump {where} --task {r.task_id} --stage after --export, "
                f"or --diff {a} {r.index} to see what task {r.task_id} changed in its inout"
            )
    outs = [r for r in d.records if r.stage == STAGES[1] and not r.problems]
    if outs:
        return (
            f"next: tilescope dump {where} --task {outs[0].task_id} --stage after --export (or -i N --export)"
        )
    return f"next: tilescope dump {where} -i N --export to decode a record to text + .pt"


# -- export --------------------------------------------------------------------------------------


def _coord(flat: int, shape: Sequence[int]) -> list[int]:
    out = []
    for d in reversed(shape):
        out.append(flat % d if d else 0)
        flat = flat // d if d else 0
    return out[::-1]


def _pick(n: int) -> list[int | None]:
    """Indices shown along a dim of ``n``: all, or the first/last ``_EDGE`` with None for '...'."""
    return list(range(n)) if n <= 2 * _EDGE else [*range(_EDGE), None, *range(n - _EDGE, n)]


def _short(v: Any, dtype: str) -> str:
    return f"{v:.6g}" if isinstance(v, float) else format_value(v, dtype)


def format_grid(t: torch.Tensor, dtype: str) -> list[str]:
    """The overview of a tensor: its last two dims as a grid, large dims elided with '...'."""
    if t.dim() == 0:
        return [_short(t.item(), dtype)]
    if t.dim() == 1:
        return _grid2(t.unsqueeze(0), dtype, row_labels=False)
    lead = list(t.shape[:-2])
    n = math.prod(lead)
    if not lead:
        return _grid2(t, dtype)
    lines: list[str] = []
    for k in _pick(n):
        if k is None:
            lines.append(f"... ({n - 2 * _EDGE} slices not shown)")
            continue
        idx = _coord(k, lead)
        lines.append("[" + ", ".join(map(str, idx)) + ", :, :]")
        lines += _grid2(t[tuple(idx)], dtype)
    return lines


def _grid2(m: torch.Tensor, dtype: str, row_labels: bool = True) -> list[str]:
    rows, cols = _pick(m.shape[0]), _pick(m.shape[1])
    cells = [
        [("..." if i is None or j is None else _short(m[i, j].item(), dtype)) for j in cols] for i in rows
    ]
    w = max([3, *(len(c) for row in cells for c in row), *(len(str(j)) for j in cols if j is not None)])
    lw = max([3, *(len(str(i)) for i in rows if i is not None)]) if row_labels else 0
    pad = " " * (lw + 2) if row_labels else ""
    out = [pad + " ".join(("..." if j is None else str(j)).rjust(w) for j in cols).rstrip()]
    for i, row in zip(rows, cells):
        label = ("..." if i is None else str(i)).rjust(lw) + "  " if row_labels else ""
        out.append(label + " ".join(c.rjust(w) for c in row))
    return out


def _stats(t: torch.Tensor) -> str:
    if t.numel() == 0:
        return "empty"
    if t.dtype == torch.bool:
        return f"true {int(t.sum())} of {t.numel()}"
    s = value_stats(t)
    parts = [f"nan {s['nan']}", f"inf {s['inf']}"]
    if s["min"] is not None:
        parts = [f"min {s['min']:.6g}", f"max {s['max']:.6g}", f"mean {s['mean']:.6g}", *parts]
    return ", ".join(parts)


def export_name(r: Record) -> str:
    """The file stem of a record's export: ``r0003_t1_scale_before_input_a0``."""
    stem = f"r{r.index:04d}_t{r.task_id}_{r.kernel}_{r.stage.split('_')[0]}_{r.role}_a{r.arg_index}"
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in stem)


def record_text(d: Dump, r: Record, limit: int | None = None) -> tuple[str, torch.Tensor | None]:
    """A record as text (header, overview grid, ``[i, j] value`` lines) and its tensor (or None)."""
    lines = [
        f"# tilescope tensor dump: {r.describe()}",
        f"# dump: {d.dir} (program {d.program}, level {d.level if d.level is not None else '?'})",
        f"# task: {r.task_id} task_name: {r.task_name} kernel: {r.kernel} func_id: {r.func_id}",
        f"# stage: {r.stage} role: {r.role} arg: {r.arg_index} kind: {r.kind} tensor: {r.tensor}",
        f"# dtype: {r.dtype} shape: {list(r.shape)} strides: {list(r.strides)} start_offset: {r.start_offset}",
        f"# numel: {r.numel} bytes: {r.nbytes} stored: {r.bin_size} bin_offset: {r.bin_offset}",
        f"# flags: {' '.join(r.flags()) or 'none'}",
    ]
    t: torch.Tensor | None = None
    try:
        t = d.tensor(r, partial=True)
    except DumpError as e:
        lines += [f"# no values: {e}"]
        return "\n".join(lines) + "\n", None
    if r.truncated:
        lines.append(f"# truncated: {t.numel()} of {r.numel} elements stored (the first, row-major)")
    lines.append(f"# stats: {_stats(t)}")
    full = t if not r.truncated else None
    lines += ["", "overview" + (f" (last two dims of {list(r.shape)})" if len(r.shape) > 2 else "") + ":"]
    lines += format_grid(full if full is not None else t, r.dtype)
    n = t.numel()
    shown = n if limit is None else min(limit, n)
    lines += [
        "",
        f"elements ([index] value, row-major): {shown} of {n}" + ("" if shown == n else " (--limit)"),
    ]
    flat = t.reshape(-1).tolist()
    for k in range(shown):
        lines.append(f"[{', '.join(map(str, _coord(k, r.shape)))}] {format_value(flat[k], r.dtype)}")
    return "\n".join(lines) + "\n", t


def export(
    d: Dump,
    records: Sequence[Record],
    out_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    force: bool = False,
) -> list[Path]:
    """Write each record as ``<stem>.txt`` and (when it decodes) ``<stem>.pt``; return the paths.

    Each file is written whole or not at all, and replaces what is at its name (with ``force``):
    a symbolic link there is replaced, never written through.

    Raises:
        DumpError: ``out_dir`` is not a directory, or (without ``force``) a file of this export
            already exists in it; nothing is written then. Or a write failed (a full disk, a file
            size limit): the files written before it stay, the failed one is not left half written.
    """
    out = Path(out_dir) if out_dir else inside(d.dir, "txt")
    if out.exists() and not out.is_dir():
        raise DumpError(f"--export {out}: a file, not a directory; name a directory (created if missing)")
    names = [f"{export_name(r)}{ext}" for r in records for ext in (".txt", ".pt")]
    taken = [out / n for n in names if (out / n).exists()]
    if taken and (not force or any(p.is_dir() for p in taken)):
        more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
        fix = "move them away" if force else "pass --force to replace them, or --export ANOTHER_DIR"
        raise DumpError(
            f"{len(taken)} file(s) of this export already exist in {out}: "
            f"{', '.join(p.name for p in taken[:3])}{more}; nothing was written: {fix}"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DumpError(f"--export {out}: cannot create it ({e.strerror}); name another directory") from None
    paths: list[Path] = []
    for r in records:
        text, t = record_text(d, r, limit)
        txt = out / f"{export_name(r)}.txt"
        try:
            atomic_write(txt, text, parents=False)
            paths.append(txt)
            if t is not None:
                pt = out / f"{export_name(r)}.pt"
                atomic_save(t, pt)
                paths.append(pt)
        except OSError as e:
            done = f"{len(paths)} file(s) of this export were written before it" if paths else "nothing was written"
            raise DumpError(f"--export stopped: {os_problem(e, txt)}; {done}") from None
    return paths


# -- diff ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Diff:
    """Element-wise comparison of two records' values (B against A)."""

    a: Record
    b: Record
    numel: int
    differing: int
    max_abs: float
    max_abs_at: tuple[tuple[int, ...], Any, Any] | None  # (coords, A, B)
    max_rel: float  # |A - B| / max(|A|, |B|)
    max_rel_at: tuple[tuple[int, ...], Any, Any] | None
    first: tuple[tuple[tuple[int, ...], Any, Any], ...]


def diff(d: Dump, a: Record | int, b: Record | int, shown: int = _DIFF_SHOWN) -> Diff:
    """Compare two records element-wise; NaN equals NaN, same-signed infinities are equal.

    Raises:
        DumpError: a record does not decode, or the shapes differ.
    """
    ra = d.records[a] if isinstance(a, int) else a
    rb = d.records[b] if isinstance(b, int) else b
    ta, tb = d.tensor(ra), d.tensor(rb)
    if ta.shape != tb.shape:
        raise DumpError(
            f"shapes differ: record {ra.index} is {list(ta.shape)}, record {rb.index} is {list(tb.shape)}; "
            "cannot compare element-wise"
        )
    fa, fb = ta.double(), tb.double()
    same = (fa == fb) | (torch.isnan(fa) & torch.isnan(fb))
    differ = ~same
    absd = (fa - fb).abs().masked_fill(same, 0.0).nan_to_num(nan=math.inf)
    denom = torch.maximum(fa.abs(), fb.abs())
    rel = (absd / denom).masked_fill(same, 0.0).nan_to_num(nan=math.inf)
    shape = list(ta.shape)

    la, lb = ta.reshape(-1), tb.reshape(-1)

    def at(k: int) -> tuple[tuple[int, ...], Any, Any]:
        return tuple(_coord(k, shape)), la[k].item(), lb[k].item()

    def arg_max(x: torch.Tensor) -> tuple[float, tuple[tuple[int, ...], Any, Any] | None]:
        if not bool(differ.any()):
            return 0.0, None
        k = int(x.reshape(-1).argmax())
        return float(x.reshape(-1)[k]), at(k)

    max_abs, abs_at = arg_max(absd)
    max_rel, rel_at = arg_max(rel)
    first = tuple(at(k) for k in differ.reshape(-1).nonzero().reshape(-1)[:shown].tolist())
    return Diff(ra, rb, ta.numel(), int(differ.sum()), max_abs, abs_at, max_rel, rel_at, first)


def format_diff(d: Dump, x: Diff) -> str:
    """What ``tilescope dump --diff A B`` prints."""
    a, b = x.a, x.b

    def at(where: tuple[tuple[int, ...], Any, Any] | None) -> str:
        if where is None:
            return ""
        c, va, vb = where
        return (
            f" at [{', '.join(map(str, c))}] (A {format_value(va, a.dtype)}, B {format_value(vb, b.dtype)})"
        )

    lines = [
        f"A = {a.describe()}",
        f"B = {b.describe()}",
        f"shape {list(a.shape)} {'==' if a.shape == b.shape else '!='} {list(b.shape)}; "
        f"dtype {a.dtype} {'==' if a.dtype == b.dtype else '!= (compared as f64)'} {b.dtype}",
    ]
    pct = 100.0 * x.differing / x.numel if x.numel else 0.0
    lines.append(f"differing elements: {x.differing} of {x.numel} ({pct:.2f}%)")
    if x.differing:
        lines.append(f"max abs diff {x.max_abs:.6g}{at(x.max_abs_at)}")
        lines.append(f"max rel diff {x.max_rel:.6g}{at(x.max_rel_at)}  (|A-B| / max(|A|, |B|))")
        lines.append(f"first differences ({len(x.first)} shown):")
        for c, va, vb in x.first:
            lines.append(
                f"  [{', '.join(map(str, c))}] A {format_value(va, a.dtype)}  B {format_value(vb, b.dtype)}"
            )
        lines.append(
            f"next: tilescope dump {d.dir} -i {a.index} -i {b.index} --export to write both as text + .pt"
        )
    else:
        lines.append("the two records are identical")
    return "\n".join(lines)


# -- the command ---------------------------------------------------------------------------------


def add_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The viewer's arguments (shared by ``tilescope dump`` and ``python -m``)."""
    p.add_argument(
        "dir",
        metavar="DIR",
        type=PATH_ARG,
        nargs="?",
        default=None,
        help="a build dir, its dfx_outputs, the tensor_dump dir or tensor_dump.json "
        "(default: the newest build with a dump under TILESCOPE_BUILD_DIR or ./build_output)",
    )
    g = p.add_argument_group("filters (combinable)")
    g.add_argument("--task", type=int, help="task id")
    g.add_argument("--kernel", help="kernel name")
    g.add_argument("--stage", help="before, after or probe (before_dispatch / after_completion / probe)")
    g.add_argument("--role", help="input, output, inout, scalar or probe")
    g.add_argument("--arg", type=int, help="argument index")
    g.add_argument("-i", "--index", type=int, action="append", metavar="N", help="record index (repeatable)")
    p.add_argument(
        "--export",
        type=PATH_ARG,
        nargs="?",
        const=Path(),  # NOTE: not a str: argparse would check it as a path argument (an empty one is refused)
        default=None,
        metavar="OUT_DIR",
        help="write the chosen records as text and .pt (default OUT_DIR: <tensor_dump>/txt/)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --export: replace export files already in OUT_DIR (by default that is refused)",
    )
    p.add_argument(
        "--values",
        action="store_true",
        help="print each chosen record's values (stats, overview, elements); one chosen record prints them anyway",
    )
    p.add_argument(
        "--limit", type=int, help="element lines per exported or printed record / differences shown by --diff"
    )
    p.add_argument(
        "--diff", type=int, nargs=2, metavar=("A", "B"), help="compare records A and B element-wise"
    )
    return p


_VALUES_SHOWN = 32  # element lines a printed record shows by default (--limit N for more)


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope dump [DIR]``: list, filter, export or diff; a one-line error and 1 when it cannot."""

    def fail(msg: str) -> int:
        print(f"tilescope dump: error: {msg}", file=sys.stderr)
        return 1

    if args.limit is not None and args.limit < 0:
        return fail(f"--limit {args.limit}: expected a count >= 0")
    if args.force and args.export is None:
        return fail("--force only applies to --export (it replaces files an earlier export wrote)")
    names = ("task", "kernel", "stage", "role", "arg", "index")
    filters = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    try:
        d = load_dump(args.dir)
        if args.diff is not None:
            if filters or args.export is not None:
                return fail("--diff takes two record indices; drop the filters and --export")
            a, b = select(d, index=args.diff[0])[0], select(d, index=args.diff[1])[0]
            x = diff(d, a, b, _DIFF_SHOWN if args.limit is None else args.limit)
            print(format_diff(d, x))
            return 0
        records = select(d, **filters)
    except DumpError as e:
        return fail(str(e))
    text = " ".join(
        f"-i {','.join(map(str, v))}" if k == "index" else f"--{k} {v}" for k, v in filters.items()
    )
    if not d.records:
        print("\n".join(_header(d)))
        print("the dump holds no records (at level 1, tag tensors with ts.dump_tag or submit(dumps=[...]))")
        return 0
    if not records:
        print("\n".join(_header(d)))
        print(f"no record matches {text}; drop a filter (tilescope dump {d.dir} lists them all)")
        return 1
    if args.export is None:
        print(format_listing(d, records, text))
        for r in records if args.values or len(records) == 1 else []:
            print("\n" + record_text(d, r, _VALUES_SHOWN if args.limit is None else args.limit)[0].rstrip())
        return 0
    try:
        paths = export(d, records, None if args.export == Path() else args.export, args.limit, force=args.force)
    except DumpError as e:
        return fail(str(e))
    print("\n".join(_header(d)))
    for p in paths:
        print(f"wrote {p}")
    bad = [r for r in records if r.problems or not (r.kind == "scalar" or r.has_payload)]
    for r in bad:
        why = "; ".join(r.problems) if r.problems else "no payload (metadata only)"
        print(f"no values for {r.describe()}: {why} (its .txt holds the metadata)")
    print(f"exported {len(records)} record(s), {sum(p.suffix == '.pt' for p in paths)} .pt file(s)")
    print("next: torch.load(path, weights_only=True) a .pt and compare it with your torch reference")
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``dump [DIR]`` to the ``tilescope`` command's subparsers."""
    p = subparsers.add_parser(
        "dump", help="view a tensor dump (dfx_outputs/tensor_dump): list, filter, export to text/.pt, diff"
    )
    add_args(p)
    p.set_defaults(fn=run_cli)
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m tilescope.tools.dump_viewer [DIR]``."""
    p = argparse.ArgumentParser(
        prog="python -m tilescope.tools.dump_viewer", description=__doc__.splitlines()[0]
    )
    add_args(p)
    return run_cli(p.parse_args(argv))


__all__ = [
    "DTYPES", "Diff", "Dump", "DumpError", "Record", "diff", "export", "find_manifest", "format_listing",
    "load_dump", "record_text", "register", "select"
]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
