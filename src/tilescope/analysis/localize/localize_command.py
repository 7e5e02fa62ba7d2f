"""Naming the culprit of a wrong answer: ``tilescope localize BUILD`` and ``localize(build_dir)``.

It runs the build once more on its saved data (``data/``, or ``golden_data``) on sim, serially,
recording every task's arguments (a level-2 tensor dump kept in memory) and the dependency
graph (written as ``dfx_outputs/deps.json``, so ``tilescope deps BUILD --task ID`` shows the
culprit's neighbours), then hands everything to ``debug.localize.analyze``. The report goes to
``dfx_outputs/localize/report.json``; the verdict is printed (``--json``: the report itself).

Invariants: nothing the user made is changed (the data directory is only read; the build's
C++ is only read); a build without saved data, data that do not match the build, a run that
fails rather than answers wrong: each a LocalizeError saying what to do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tilescope._logging import configure, level_kept
from tilescope.analysis.compare import check_tolerances
from tilescope.analysis.data import DataError, load_meta, load_references, load_snapshot
from tilescope.analysis.golden_trace import load_trace
from tilescope.analysis.localize.analyze import Inputs, analyze
from tilescope.analysis.localize.html import write_html
from tilescope.analysis.localize.nan_origin import asks_inf, nonfinite_origin
from tilescope.analysis.localize.op_naming import expr_op, op_name
from tilescope.analysis.localize.probe_build import compile_probe_build, instrument
from tilescope.analysis.localize.source_map import kernel_sites, kernel_text
from tilescope.analysis.localize.tasks import CapturedTask, captured_tasks
from tilescope.analysis.progress import Progress, tolerance_arg
from tilescope.analysis.recorded import recorded_run
from tilescope.analysis.report import Report, localize_dump, write_report
from tilescope.build.manifest import as_build_dir
from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import (
    DATA_DIR,
    DFX_DIR,
    LOCALIZE_DIR,
    inside,
    os_problem,
    saved_data,
    writable_dir,
)
from tilescope.build.state import source_hashes
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.tensor_dump import write_tensor_dump
from tilescope.errors import RuntimeFailure, TilescopeError, clipped
from tilescope.ir.nodes import Assign, Store, Var
from tilescope.ir.traverse import child_exprs, walk_exprs
from tilescope.launch.program import CompiledProgram
from tilescope.launch.run import Binaries, launch
from tilescope.runtime.guarded import guarded_clone
from tilescope.runtime.library import load_entry, sink_installer
from tilescope.runtime.run_config import Recording, RunConfig


class LocalizeError(TilescopeError):
    """localize cannot start: no saved data, data that do not fit, a run that fails."""


def _data_dir(work: Path, golden_data: str | os.PathLike | None) -> Path:
    if golden_data is not None:
        return Path(golden_data)
    held = saved_data(work)  # data/, else what --triage or --localize saved for its tool
    if not held:
        raise LocalizeError(
            f"{work} has no saved data ({work}/{DATA_DIR}/in and out): localize works on the exact data of a run. Save this "
            f"build's: python model.py --runtime-dir {work} --save-data (run_jit(..., runtime_dir=..., "
            f"save_data=True)), then `tilescope localize {work}`; or pass --golden-data DIR, or use --localize on "
            "the model script"
        )
    return held[0][1]


def _sim_run(build: CompiledProgram, inputs: dict[str, Any]) -> tuple[dict[str, torch.Tensor], Any]:
    """sim on copies of ``inputs`` (with guard zones), serially, recording what localize reads."""
    capture = Recording(record_edges=True, record_task_times=True, dump_level=2, probes=True)
    try:
        args, report = recorded_run(build, inputs, capture, dep_gen=True)
    except RuntimeFailure as e:
        raise LocalizeError(
            f"the sim run of {build.name} on this data fails rather than answering wrong:\n{e}\n"
            "localize explains wrong answers; see the failure with `tilescope replay "
            f"{build.work_dir}`"
        ) from None
    outputs = {a.name: args[i] for i, a in enumerate(build.args) if a.is_output}
    return outputs, report


def _probe_runner(build: CompiledProgram):
    """Replays one captured task on a probe build of its kernel (``debug.localize.probe_build``):
    its inputs as sim gave them, Out parameters starting as sim left them."""

    def run(task: CapturedTask, so: Path) -> tuple[dict[int, torch.Tensor], list[tuple[int, torch.Tensor]]]:
        entry = load_entry(so, "kernel_entry")
        normal = build.binaries()
        binaries = Binaries(normal.orchestration, list(normal.kernels), [*normal.libraries, entry.library],
                            list(normal.probes))  # fmt: skip
        binaries.kernels[task.func_id] = entry.address
        binaries.probes[task.func_id] = sink_installer(entry.library)
        args = task.arguments(build.kernel_params(task.func_id), guarded_clone)
        config = RunConfig.for_analysis(log_level="error")
        try:
            info = launch(build, binaries, args, config, kernel_index=task.func_id, capture=Recording(probes=True))
        except RuntimeFailure as e:
            raise LocalizeError(f"task {task.task_id} fails on the probe build: {e}") from None
        dump = info.report.dump
        captures = []
        for r in dump.records if dump is not None else []:
            if r.stage == "probe" and (tile := record_tensor(dump.payload, r)) is not None:
                captures.append((int(r.value), tile.clone()))
        return {i: args[i] for i in task.outputs}, captures

    return run


def nan_op(build: CompiledProgram, inputs: dict[str, Any], task_id: int,
           poisoned: dict[int, torch.Tensor] | None = None) -> tuple[str, str | None, str, str] | None:  # fmt: skip
    """The first statement of task ``task_id``'s kernel whose tile holds NaN/Inf, from a replay of
    the task (its inputs as a serial run of ``inputs`` gives them) on a probe build of its kernel:
    (op, DSL line, C++ line, the evidence line); None when no statement's tile does. ``poisoned``
    (argument index -> mask) sets those elements of a float input to NaN first: memory nothing
    wrote, so that the statement that reads it is the one named.

    Raises:
        LocalizeError: the task is not in the run, or its kernel's C++ no longer pairs with the IR.
        ProbeBuildError: the probe build does not compile.
    """
    _, report = recorded_run(build, inputs, Recording(record_edges=True, dump_level=2))
    task = next((t for t in captured_tasks(build, report) if t.task_id == task_id and not t.lost), None)
    if task is None:
        raise LocalizeError(f"task {task_id} is not in a serial run of {build.name}, or its dump was lost")
    for i, mask in (poisoned or {}).items():
        given = task.inputs.get(i)
        if torch.is_tensor(given) and given.is_floating_point() and given.shape == mask.shape:
            task.inputs[i] = given.masked_fill(mask, float("nan"))
    kernel = build.program().kernel(task.kernel)
    sites, why = kernel_sites(build, kernel)
    if not sites:
        raise LocalizeError(why or f"kernel {kernel.name} has no statement to replay")
    text, _ = kernel_text(build, kernel.name)
    _, captures = _probe_runner(build)(task, compile_probe_build(build, kernel.name, instrument(text, sites)))
    by_index = {s.index: s for s in sites.values()}
    # tiles that hold an Inf on purpose (`full([..], -inf)`, `fill=-inf`) and what carries it on: the signs each holds
    infinite: dict[str, set[bool]] = {}
    flipped: dict[str, Any] = {}  # a carried Inf of the other sign (`m_new - m`, m -inf): the site that flipped it
    for index, tile in captures:
        site = by_index.get(index)
        if site is None or not tile.is_floating_point() or bool(torch.isfinite(tile).all()):
            continue
        reads = {e.name for e in walk_exprs(child_exprs(site.stmt)) if isinstance(e, Var)}
        # NOTE: an Inf the program asks for (a running max starts at -inf) is not the fault; a NaN always is
        if not bool(torch.isnan(tile).any()) and isinstance(site.stmt, Assign | Store):
            signs = {s for s in (True, False) if bool((torch.isposinf(tile) if s else torch.isneginf(tile)).any())}
            asked = any(asks_inf(e) for e in walk_exprs(child_exprs(site.stmt)))
            if asked or reads & set(infinite):
                if isinstance(site.stmt, Assign):
                    carried = set().union(*(infinite[r] for r in reads if r in infinite))
                    origin = next((flipped[r] for r in reads if r in flipped), None)
                    if origin is None and not asked and not signs <= carried:
                        origin = site
                    if origin is not None:
                        flipped[site.stmt.target] = origin
                    infinite[site.stmt.target] = signs | infinite.get(site.stmt.target, set())
                continue
        # NOTE: a NaN made from an Inf whose sign an earlier statement flipped (0 * exp(m_new - m)) was made there
        site = next((flipped[r] for r in reads if r in flipped), site)
        bad = int((~torch.isfinite(tile)).sum())
        # NOTE: a store of a value computed in place (store(y, cast(t))) made it in that value's op
        op = expr_op(site.stmt.value) if isinstance(site.stmt, Store) and not isinstance(site.stmt.value, Var) else (
            op_name(site.stmt))  # fmt: skip
        inner = _inner_op(kernel, task, build, site.stmt)
        if inner is not None and inner != op:
            op = inner  # NOTE: `log(t + 1.0) * s`: the log made the NaN, the mul only carried it
        return op, site.dsl_line, site.cpp, (
            f"replaying task {task_id} on a probe build of kernel {kernel.name}, the first statement whose tile holds "
            f"NaN/Inf it was not given is {site.dsl_line or site.cpp} (`{site.text}`): {bad} of {tile.numel()} elements"
        )
    return None


def _inner_op(kernel, task: CapturedTask, build: CompiledProgram, stmt) -> str | None:
    """The innermost op of ``stmt`` that makes the NaN/Inf, from the task run again on the
    reference interpreter (None when it is not that statement's, or cannot be told)."""
    try:
        found = nonfinite_origin(kernel, task.arguments(build.kernel_params(task.func_id)))
    except (TilescopeError, RuntimeError, KeyError, TypeError, ValueError, IndexError):
        return None
    return expr_op(found[1]) if found is not None and found[0] is stmt else None


def localize(
    build_dir: str | os.PathLike,
    golden_data: str | os.PathLike | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Localize the wrong answer of the build ``build_dir`` on its saved data (or ``golden_data``):
    the report (also written to ``dfx_outputs/localize/report.json``). ``progress`` hears a line
    per step (default: on a terminal only).

    Raises:
        LocalizeError: no saved data, or the sim run fails instead of answering.
        DataError: the data do not match the build's arguments.
    """
    started = time.perf_counter()
    say = progress or Progress("localize")
    work = as_build_dir(build_dir)
    say("load the build and its data")
    build = CompiledProgram.from_dir(work)
    data = _data_dir(work, golden_data)
    writable_dir(inside(work, DFX_DIR, LOCALIZE_DIR), "localize")  # NOTE: before the runs whose outputs go there
    given = [k for k, v in (("rtol", rtol), ("atol", atol)) if v is not None]
    meta = load_meta(data, given=given)
    rtol = meta.get("rtol", 1e-5) if rtol is None else rtol
    atol = meta.get("atol", 1e-5) if atol is None else atol
    check_tolerances(rtol, atol)
    inputs, golden = load_snapshot(data, list(build.args))
    references, limitations = load_references(data)
    trace, no_trace = load_trace(data, inputs)
    saved_sources = meta.get("sources")
    if isinstance(saved_sources, dict):
        now = source_hashes(work, build.config)
        changed = sorted(k for k, v in saved_sources.items() if now.get(k) != v)
        if changed:
            limitations.append(
                f"{', '.join(changed)} changed since the data were saved: the data are from the build as it was; "
                "sim runs the code as it is now"
            )
    say("run it serially, recording every task's arguments")
    sim, report = _sim_run(build, inputs)
    say(f"analyze {report.num_tasks} tasks (codegen, algorithm, precision)")
    rep = analyze(
        Inputs(build, str(data), inputs, golden, sim, report, float(rtol), float(atol), started, limitations, references,
               _probe_runner(build), trace, no_trace)  # fmt: skip
    )
    try:
        write_report(work, rep)
        write_html(work, rep, rep.maps)
        if any(str(localize_dump(work)) in n for n in rep.next):  # the probes a next step shows: the run's dump
            write_tensor_dump(localize_dump(work).parent, build, report)
    except OSError as e:
        rep.limitations.append(f"the report could not be written into {work}: {e}")
    return rep


def internal_error(e: Exception, tool: str = "localize") -> str:
    """What stopped ``tool``, in one line: the machine's state for an OSError (a read-only file
    system, a file where a directory belongs, no space left, a name too long: ``os_problem``), the
    first line of a tilescope error (worded for its user: a build's file it refuses, a link out of
    the build), else a defect of the tool itself, what was raised and where. A value a defect's
    line quotes is clipped."""
    import traceback

    if isinstance(e, OSError):
        return f"{tool} stopped: {os_problem(e)}; the build and its data are as they were"
    if isinstance(e, TilescopeError):
        return f"{tool} stopped: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return (
        f"{tool} failed inside tilescope ({type(e).__name__}: {clipped(str(e))}{where}); this is a tilescope defect: "
        "the build and its data are as they were, and `tilescope replay BUILD` still reproduces the run"
    )


def report_cli(tool: str, call: Callable[[], Report], as_json: bool, ok: Callable[[Report], bool]) -> int:
    """Run ``call`` (localize or triage) for its command: the report printed (``as_json``: as
    JSON), 0 when ``ok`` says so, else 1; an error in one ``[ERROR]`` line; Ctrl-C in one line, 130.
    It logs at ``warn`` while it runs, and leaves the level as it found it (a command called in
    process, by a test or a script, changes nothing for what runs after it)."""
    with level_kept():
        configure("warn")
        return _report_cli(tool, call, as_json, ok)


def _report_cli(tool: str, call: Callable[[], Report], as_json: bool, ok: Callable[[Report], bool]) -> int:
    try:
        rep = call()
    except KeyboardInterrupt:
        print(f"[INTERRUPTED] {tool} stopped (Ctrl-C); the build and its data are as they were", file=sys.stderr,
              flush=True)  # fmt: skip
        return 130
    except (TilescopeError, DataError) as e:
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # noqa: BLE001 - a defect of the tool itself: said in one line, with where
        print(f"[ERROR] {internal_error(e, tool)}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(rep.to_json(), indent=1) if as_json else rep.render())
    return 0 if ok(rep) else 1


def add_localize_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``tilescope localize``'s arguments."""
    p.add_argument("build_dir", metavar="BUILD", type=PATH_ARG, help="a build directory with saved data (--save-data)")
    p.add_argument("--golden-data", type=PATH_ARG, default=None, metavar="DIR", help="use this data directory instead of BUILD/data")
    p.add_argument("--rtol", type=tolerance_arg, default=None, help="relative tolerance (default: the data's)")
    p.add_argument("--atol", type=tolerance_arg, default=None, help="absolute tolerance (default: the data's)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of the verdict")
    return p


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope localize``: 0 when the outputs pass or their error is rounding the dtypes allow
    (``precision``/``innocent``), 1 when a culprit was named or localize could not run."""
    return report_cli("localize", lambda: localize(args.build_dir, args.golden_data, rtol=args.rtol, atol=args.atol),
                      args.json, lambda rep: rep.category == "pass" or rep.verdict == "innocent")  # fmt: skip


__all__ = ["LocalizeError", "add_localize_args", "internal_error", "localize", "nan_op", "report_cli", "run_cli"]
