"""The build's ``report/``: per-kernel local-memory and tile use, task counts, pass and
compile timings — as ``report.json`` and a readable ``summary.txt``."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from tilescope.build.paths import REPORT_DIR, REPORT_JSON, atomic_write, inside
from tilescope.ir.analysis import kernel_core, local_memory_peak
from tilescope.ir.nodes import Assign, Const, For, Program, Stmt, Submit
from tilescope.ir.traverse import child_exprs, stmt_bodies, walk_exprs, walk_stmts
from tilescope.ir.types import TileType
from tilescope.ir.unwritten import Unwritten


def _static_trips(loop: For) -> int | None:
    a, b, c = loop.start, loop.stop, loop.step
    if all(isinstance(x, Const) for x in (a, b, c)):
        return max(0, math.ceil((b.value - a.value) / c.value))
    return None


def task_counts(body: tuple[Stmt, ...]) -> tuple[dict[str, int], bool]:
    """Tasks per kernel for one run, and whether the count is exact (loops with static bounds,
    no run-time branches)."""
    counts: dict[str, int] = {}
    exact = True

    def visit(stmts: tuple[Stmt, ...], mult: int) -> None:
        nonlocal exact
        for s in stmts:
            for e in walk_exprs(child_exprs(s)):
                if isinstance(e, Submit):
                    counts[e.kernel] = counts.get(e.kernel, 0) + mult
            if isinstance(s, For):
                trips = _static_trips(s)
                if trips is None:
                    exact = False
                visit(s.body, mult * (trips if trips is not None else 1))
                continue
            for b in stmt_bodies(s):  # a run-time branch: each body may run, or not
                exact = False
                visit(b, mult)

    visit(body, 1)
    return counts, exact


def build_report(
    program: Program, pass_timings, build_results, opts: dict[str, Any], gaps: list[Unwritten] = ()
) -> dict[str, Any]:
    """The report as JSON data: per kernel its core, local-memory peak and tasks per run; the Out
    regions no store writes (``unwritten``); pass and compile times; the sha256 of each DSL file
    the program was compiled from (``dsl_sources``: a fix is proposed against the build's IR dump
    when that file has changed since)."""
    capacity = opts["local_memory_bytes"]
    counts, exact = task_counts(program.body)
    kernels = []
    for k in program.kernels:
        peak = local_memory_peak(k)
        tiles = [
            s for s in walk_stmts(k.body) if isinstance(s, Assign) and isinstance(s.value.type, TileType)
        ]
        kernels.append(
            {
                "name": k.name,
                "core": kernel_core(k),
                "local_memory_peak_bytes": peak.bytes,
                "local_memory_capacity_bytes": capacity,
                "local_memory_use": round(peak.bytes / capacity, 4),
                "peak_at": f"{peak.loc}" if peak.loc else None,
                "live_tiles_at_peak": [{"name": n, "type": str(t), "bytes": t.nbytes} for n, t in peak.live],
                "tile_values": len(tiles),
                "tasks_per_run": counts.get(k.name, 0),
            }
        )
    return {
        "program": program.name,
        "tasks_per_run": sum(counts.values()),
        "tasks_per_run_exact": exact,
        "kernels": kernels,
        "unwritten": [g.as_dict() for g in gaps],
        "dsl_sources": dsl_sources(program),
        "pass_seconds": {name: round(t, 6) for name, t in pass_timings},
        "compile": [
            {"source": str(r.job.source.name), "cache_hit": r.cache_hit, "seconds": round(r.seconds, 4)}
            for r in build_results
        ],
    }


def dsl_sources(program: Program) -> dict[str, str]:
    """``{absolute path: sha256}`` of the DSL files the program and its kernels were written in
    (those that can be read). A path is kept as the user named it (made absolute, symbolic links
    not resolved): a model reached through a link is found again, and proposed against, by that name."""
    out = {}
    for loc in (program.loc, *(k.loc for k in program.kernels)):
        path = Path(os.path.abspath(loc.file)) if loc is not None else None
        if path is not None and str(path) not in out:
            try:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
    return out


def summary_text(rep: dict[str, Any]) -> str:
    """``build_report``'s data as the readable table of ``summary.txt``."""
    approx = "" if rep["tasks_per_run_exact"] else " (estimate: run-time loop bounds or branches)"
    lines = [f"program {rep['program']}: {rep['tasks_per_run']} tasks per run{approx}", ""]
    lines.append(f"{'kernel':<24}{'core':<6}{'tasks':>8}{'local mem peak':>18}{'use':>8}  peak at")
    for k in rep["kernels"]:
        peak = f"{k['local_memory_peak_bytes'] / 1024:.1f} KiB"
        lines.append(
            f"{k['name']:<24}{k['core']:<6}{k['tasks_per_run']:>8}{peak:>18}{k['local_memory_use']:>8.1%}  "
            f"{k['peak_at'] or '-'}"
        )
    if rep.get("unwritten"):
        lines += ["", "warnings: Out regions no store of the kernel writes:"]
        lines += [f"  {g['at'] or '-'}: {g['message']}" for g in rep["unwritten"]]
    lines += ["", "pass timings:"]
    lines += [f"  {name:<24}{t * 1000:8.2f} ms" for name, t in rep["pass_seconds"].items()]
    hits = sum(c["cache_hit"] for c in rep["compile"])
    lines += ["", f"compile: {len(rep['compile'])} files, {hits} from cache"]
    return "\n".join(lines) + "\n"


def load_report(work: Path) -> dict[str, Any]:
    """A build's ``report/report.json`` read back; {} when it is missing, corrupt or not an object
    (an older build, or one written by hand)."""
    try:
        data = json.loads((inside(work, REPORT_DIR, REPORT_JSON)).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def report_problem(work: Path) -> str | None:
    """Why the build's ``report/report.json`` cannot be read (missing, not JSON, not an object), in
    words with what to do; None when it can. A build of this format always has one: it records
    the DSL files the build came from and the compile's store-coverage findings (``--fix`` edits
    from them)."""
    path = inside(work, REPORT_DIR, REPORT_JSON)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        why = "is missing"
    except (OSError, ValueError) as e:
        why = f"cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    else:
        if isinstance(data, dict):
            return None
        why = f"holds {type(data).__name__}, not the compile's report"
    return (f"{path} {why}: the build is incomplete or was edited by hand (the compile writes it, with the DSL files the "
            "build came from and the store-coverage findings): compile the program again")


def write_report(
    out: Path, program: Program, pass_report, build_results, opts: dict[str, Any], gaps: list[Unwritten] = ()
) -> dict[str, Any]:
    """Write ``report.json`` and ``summary.txt`` into ``out``; returns the report data."""
    rep = build_report(program, pass_report.timings, build_results, opts, gaps)
    atomic_write(inside(out, REPORT_JSON), json.dumps(rep, indent=2) + "\n")
    atomic_write(out / "summary.txt", summary_text(rep))
    return rep
