"""``run_jit``: compile a ``@ts.jit`` program, generate inputs, run it, compute the golden and
compare — printing one phase line per step and a comparison report per output.

Invariants: a TilescopeError in any phase ends the run with a report (``RunResult.passed`` is
False, ``error`` holds the message), and so does a ``golden_fn``, an ``init_value`` function or a
``compare_fn`` that raises (a UserCodeError naming the user's line it raised at); the program,
the specs and the tolerances are checked before anything compiles or runs; inputs are generated
from ``seed`` so reruns see the same data; the golden runs on copies, never on the tensors the
program wrote.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope._logging import configure, level_number
from tilescope._tracebacks import api_boundary
from tilescope.analysis.compare import CompareReport, check_tolerances, compare_outputs
from tilescope.analysis.data import Second, load_snapshot, save_snapshot, second_seed
from tilescope.analysis.fix.copies import candidate_import
from tilescope.analysis.fix.verify import propose_for_compile_error
from tilescope.analysis.golden_trace import GoldenTrace, record_golden
from tilescope.analysis.report import Report
from tilescope.analysis.triage.triage_command import error_report
from tilescope.build.manifest import ArgSpec, Build
from tilescope.build.paths import DATA_DIR, LAST_RUN, inside, write_into_build
from tilescope.build.state import source_hashes
from tilescope.debug.failures import Failure
from tilescope.errors import DSLError, HarnessError, RunInterrupted, RuntimeFailure, TilescopeError
from tilescope.harness.checks import (
    NO_CHECKS,
    Checks,
    RunData,
    localize_run,
    poison_check,
    second_set,
    shuffle_check,
    triage_run,
)
from tilescope.harness.golden import golden_outputs
from tilescope.harness.specs import Spec, check_specs, check_specs_match, generate, outputs, seed_problem
from tilescope.language.decorators import InlineFunction, KernelFunction
from tilescope.launch.jit import JitFunction
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args
from tilescope.runtime.run_config import RunConfig


@dataclass
class RunResult:
    """The outcome of a harness run: pass/fail or the error, outputs, golden, comparisons, timings."""

    passed: bool
    error: str | None = None
    work_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    platform: str = "sim"
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    golden: dict[str, torch.Tensor] = field(default_factory=dict)
    references: dict[str, torch.Tensor] = field(default_factory=dict)  # golden_fn's intermediates and probes
    comparisons: list[CompareReport] = field(default_factory=list)
    num_tasks: int = 0
    rtol: float = 0.0
    atol: float = 0.0
    failure: Failure | None = None  # how the run failed (task, kernel, line, saved inputs)
    nan: Failure | None = None  # nan_check: the NaN/Inf report
    localize: Report | None = None  # localize=True and a comparison failed: its culprit
    triage: Report | None = None  # triage=True and the run failed or mismatched: its category and culprit
    poison: Any = None  # poison=True: what the poisoned runs showed (harness.poison.Poisoned)
    shuffle: Any = None  # shuffle=N: the shuffled runs (debug.triage.shuffle.ShuffleReport)

    def __bool__(self) -> bool:
        return self.passed


class Phases:
    """Prints ``[RUN] <phase> … done (1.23s)`` lines unless the log level silences info."""

    def __init__(self, log_level: str | None):
        self.quiet = log_level is not None and level_number(log_level) > level_number("info")
        self.timings: dict[str, float] = {}

    def say(self, line: str) -> None:
        """Print ``line`` unless the log level is quieter than info."""
        if not self.quiet:
            print(line, flush=True)

    def run(
        self, key: str, label: str, fn: Callable[[], Any], detail: Callable[[Any], str] | None = None
    ) -> Any:
        """``fn()``, timed into ``timings[key]``; prints ``label``'s line (and ``detail(out)``) at the end."""
        # NOTE: the line is printed when the phase ends, so log lines the phase emits (rebuilds,
        # compiles) come before it instead of splitting it.
        t0 = time.perf_counter()
        try:
            out = fn()
        except TilescopeError:
            self.timings[key] = time.perf_counter() - t0
            self.say(f"[RUN] {label} … FAILED")
            raise
        except KeyboardInterrupt as e:  # a run's own Ctrl-C printed its report (RunInterrupted)
            if not isinstance(e, RunInterrupted):
                print(f"[INTERRUPTED] run_jit stopped in its phase '{label}' (Ctrl-C); the build and any data saved "
                      "before stay as they were", file=sys.stderr, flush=True)  # fmt: skip
            raise
        self.timings[key] = dt = time.perf_counter() - t0
        extra = f", {detail(out)}" if detail else ""
        self.say(f"[RUN] {label} … done ({dt:.2f}s{extra})")
        return out


def data_args(compiled: Build) -> list[ArgSpec]:
    """The arguments a data snapshot holds: every parameter of the build, in order."""
    return list(compiled.args)


def _clone(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in values.items()}


@dataclass(frozen=True)
class Expected:
    """What a run's outputs are compared with, and how."""

    golden: Callable[[dict[str, Any]], dict[str, torch.Tensor]] | None  # values -> outputs (None: not checked)
    rtol: float
    atol: float
    compare_fn: Callable[..., Any] | None = None
    golden_from: str | os.PathLike | None = None  # the golden was loaded from this data directory, not computed
    second: Callable[[], Second] | None = None  # a second input set from the specs (another seed) and its golden


@dataclass(frozen=True)
class Execution:
    """One harness run of a build: its options, what its outputs are compared with, whether its
    data are saved (with ``meta``, such as the seed) and the checks asked for."""

    compiled: CompiledProgram
    config: RunConfig
    expected: Expected
    save_data: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    checks: Checks = NO_CHECKS

    def data(self, before: dict[str, Any], golden: dict, references: dict, trace: GoldenTrace | None) -> RunData:
        """This run's data, as a check needs them."""
        e = self.expected
        return RunData(build=self.compiled, before=before, golden=golden, references=references, data=e.golden_from,
                       saved=self.save_data, rtol=e.rtol, atol=e.atol, trace=trace, second=e.second)  # fmt: skip

    def wants_trace(self) -> bool:
        """Whether the golden's trace is recorded: its data are saved or analysed, and golden_fn is here."""
        c = self.checks
        return self.expected.golden_from is None and (self.save_data or c.triage or c.localize)


def execute(phases: Phases, result: RunResult, run: Execution, inputs: dict[str, Any]) -> None:
    """Run ``run.compiled`` on ``inputs`` (its outputs written in place: the run writes copies with
    guard zones, runtime/guarded.py, copied back after it, a failed run's too), then compute the
    golden from a copy of the inputs (or take the one loaded from ``golden_from``), optionally
    snapshot both, and compare; then the ``checks`` asked for (``harness.checks``) on the data of
    this run. Fills ``result``."""
    before = _clone(inputs)
    info = _run_program(phases, result, run, inputs, before)
    result.num_tasks = info.num_tasks
    result.nan = info.nan
    out_names = [a.name for a in run.compiled.args if a.is_output]
    result.outputs = {n: inputs[n] for n in out_names}
    if run.expected.golden is None:
        phases.say("[RUN] no golden_fn: outputs are not checked")
        result.passed = True
        return
    trace = _compare(phases, result, run, before, run.expected.golden)
    _check(phases, result, run.checks, run.data(before, result.golden, result.references, trace))


def _run_program(phases: Phases, result: RunResult, run: Execution, inputs: dict[str, Any], before: dict[str, Any]):
    """The run itself, on guarded copies of ``inputs`` whose outputs are copied back however it
    ends; a failed run's data are saved and triaged when asked before its error is raised again."""
    compiled = run.compiled
    guarded = dict(zip(inputs, guarded_args(list(inputs.values()))))  # NOTE: inputs that alias stay aliased
    args = [guarded[a.name] for a in compiled.args]
    try:
        return phases.run(
            "run",
            f"run on {run.config.platform}",
            lambda: compiled.run_with(run.config, *args),
            lambda i: f"{i.num_tasks} tasks",
        )
    except RuntimeFailure:
        _after_failure(phases, result, run, before)
        raise
    finally:
        for a in compiled.args:
            if a.is_output:
                inputs[a.name].copy_(guarded[a.name])


def _after_failure(phases: Phases, result: RunResult, run: Execution, before: dict[str, Any]) -> None:
    """A failed run is what its data are most wanted for: saved (--save-data) and triaged."""
    data = _golden_of(phases, run, run.expected.golden, before) if run.expected.golden is not None else None
    if data is None:
        return
    if run.save_data:
        try:
            _save(phases, run, before, *data)
        except TilescopeError as e:  # NOTE: the run's failure is the error to raise, not the save's
            phases.say(f"[RUN] the data could not be saved: {e}")
    if run.checks.triage:
        result.triage = triage_run(run.data(before, *data), phases.say, run.checks.fix, run.checks.budget)


def _compare(
    phases: Phases,
    result: RunResult,
    run: Execution,
    before: dict[str, Any],
    golden: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
) -> GoldenTrace | None:
    """The golden (computed on a copy of the inputs, or the saved one), saved with the inputs when
    asked, and every output compared with it; the golden's trace, when recorded."""
    expected = run.expected
    out_names = list(result.outputs)
    if expected.golden_from is not None:
        computed = golden(before)
        phases.say(f"[RUN] golden … from {Path(expected.golden_from) / 'out'} (saved, not computed)")
    else:
        computed = phases.run("golden", "golden", lambda: golden(_clone(before)))
    result.golden = {n: computed[n] for n in out_names}
    # what else golden_fn filled: references of intermediates and probes, for `tilescope localize`
    result.references = {k: v for k, v in computed.items() if k not in result.golden}
    trace = _trace(phases, run, golden, before)
    if run.save_data:
        _save(phases, run, before, result.golden, result.references, trace)
    rtol, atol = result.rtol, result.atol = expected.rtol, expected.atol
    result.comparisons = compare_outputs(result.outputs, result.golden, out_names, rtol, atol, expected.compare_fn)
    for rep in result.comparisons:
        for line in rep.lines(rtol, atol):
            phases.say(line)
    result.passed = all(r.passed for r in result.comparisons)
    return trace


def _check(phases: Phases, result: RunResult, checks: Checks, run: RunData) -> None:
    """The checks asked for, on the data of a run that was compared."""
    if checks.poison:
        result.poison = poison_check(run, phases.say)
    if checks.shuffle:
        result.shuffle = shuffle_check(run, checks.shuffle, phases.say)
    if checks.triage and (not result.passed or result.nan is not None):
        result.triage = triage_run(run, phases.say, checks.fix, checks.budget)
    elif checks.triage:
        phases.say(
            "[triage] the run passed: nothing to triage (--shuffle N checks that it stays the same across schedules; "
            f"so does tilescope triage {run.build.work_dir} after --save-data)"
        )
    elif checks.localize and not result.passed:
        result.localize = localize_run(run, phases.say)


def _trace(phases: Phases, run: Execution, golden: Callable[[dict[str, Any]], dict], before: dict) -> GoldenTrace | None:
    """The golden's trace of intermediates (``analysis.golden_trace``), when this run's data are
    saved or analysed; None (and a line saying why) when it cannot be recorded."""
    if not run.wants_trace():
        return None
    try:
        return record_golden(golden, _clone(before))
    except Exception as e:  # noqa: BLE001 - the run's result never depends on the trace
        phases.say(f"[RUN] the golden's steps could not be recorded ({type(e).__name__}: {e}); localize will not "
                   "align the kernels with them")  # fmt: skip
        return None


def _save(phases: Phases, run: Execution, before: dict, golden: dict, references: dict,
          trace: GoldenTrace | None) -> None:  # fmt: skip
    """Snapshot this run's inputs and golden into the build's ``data/`` (``--save-data``)."""
    compiled = run.compiled
    # NOTE: the code's hashes let `tilescope localize` say when the build changed since the save
    meta = {"rtol": run.expected.rtol, "atol": run.expected.atol, **run.meta,
            "sources": source_hashes(compiled.work_dir, compiled.config)}  # fmt: skip
    where = phases.run(
        "save",
        "save data",
        lambda: save_snapshot(inside(compiled.work_dir, DATA_DIR), data_args(compiled), before, golden, meta, references,
                              trace, second_set(run.expected.second, phases.say)),
        str,
    )
    phases.say(f"[RUN] replay it with: --golden-data {where}")


def _golden_of(phases: Phases, run: Execution, golden: Callable[[dict[str, Any]], dict],
               before: dict[str, Any]) -> tuple[dict, dict, GoldenTrace | None] | None:  # fmt: skip
    """The golden outputs, references and trace of a run that failed (None if golden_fn fails too)."""
    try:
        computed = golden(before) if run.expected.golden_from is not None else golden(_clone(before))
    except TilescopeError:
        return None
    names = [a.name for a in run.compiled.args if a.is_output]
    return {n: computed[n] for n in names}, {k: v for k, v in computed.items() if k not in names}, _trace(
        phases, run, golden, before)


def record_last_run(result: RunResult) -> None:
    """Write ``last_run.json`` (passed, platform, time, and each compared output's figures) into the
    build, for ``tilescope builds`` and ``tilescope bisect --metric``; nothing into a build that is
    gone or incomplete (``paths.write_into_build``)."""
    if result.work_dir is None:
        return
    stamp = _dt.datetime.now().isoformat(timespec="seconds")
    outputs = {c.name: {"max_abs_err": c.max_abs_diff, "max_rel_err": c.max_rel_diff, "mismatches": c.mismatches,
                        "numel": c.numel} for c in result.comparisons}  # fmt: skip
    record = {"passed": result.passed, "platform": result.platform, "time": stamp, "outputs": outputs}
    text = json.dumps(record) + "\n"
    try:
        write_into_build(Path(result.work_dir), LAST_RUN, text)
    except OSError:
        pass  # a read-only build, or one removed meanwhile: nothing recorded


def finish(result: RunResult, name: str) -> RunResult:
    """Record ``last_run.json`` and print the ``[PASS]``/``[FAIL]`` line; returns ``result``."""
    record_last_run(result)
    verdict = "PASS" if result.passed else "FAIL"
    where = f" ({result.work_dir})" if result.work_dir else ""
    print(f"[{verdict}] {name} on {result.platform}{where}", flush=True)
    return result


@dataclass(frozen=True)
class JitRequest:
    """What ``run_jit`` was asked to do (its arguments, the checks gathered in ``Checks``)."""

    fn: Any
    specs: list[Spec]
    golden_fn: Callable[[dict[str, Any]], None] | None
    golden_data: str | None
    compile_cfg: dict[str, Any] | None
    rtol: float
    atol: float
    compare_fn: Callable[..., Any] | None
    compile_only: bool
    runtime_dir: str | None
    save_data: bool
    seed: int
    checks: Checks


@api_boundary
def run_jit(
    fn,
    specs: list[Spec],
    golden_fn: Callable[[dict[str, Any]], None] | None = None,
    golden_data: str | None = None,
    compile_cfg: dict[str, Any] | None = None,
    runtime_cfg: dict[str, Any] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    compare_fn: Callable[..., Any] | None = None,
    compile_only: bool = False,
    runtime_dir: str | None = None,
    save_data: bool = False,
    seed: int = 0,
    localize: bool = False,
    triage: bool = False,
    poison: bool = False,
    shuffle: int = 0,
    fix: bool = False,
    budget: float | None = None,
) -> RunResult:
    """Compile ``fn`` (or reuse the build ``runtime_dir``), run it on inputs generated from
    ``specs`` (or replayed from ``golden_data``) and compare every output with ``golden_fn``
    (which fills the outputs of a dict name -> tensor in place) or the replayed golden. With
    ``localize``, a failed comparison is localized (``tilescope localize``) on this run's data:
    the verdict is printed and kept in ``result.localize``; with ``triage``, any failure (a
    failed run, a mismatch, a NaN) is triaged (``tilescope triage``) into ``result.triage``;
    ``poison`` runs it twice poisoned (``result.poison``), ``shuffle=N`` N times on shuffled
    schedules (``result.shuffle``); ``fix`` (implies ``triage``) proposes an edit for the culprit
    and verifies it on this run's data (``tilescope triage --fix``; ``result.triage.fix``), a
    program that does not compile included; ``budget`` is triage's, in CPU seconds (``--budget``).

    Called while ``--fix`` imports a copy of the module to try an edit (a model script without an
    ``if __name__ == "__main__":`` guard), it runs nothing and returns a result that says so."""
    if (copy := candidate_import()) is not None:
        return RunResult(False, error=f"not run: {copy} is a copy of the module imported to try a fix")
    given_cfgs = {"runtime_cfg": runtime_cfg, "compile_cfg": compile_cfg}
    runtime_cfg = dict(runtime_cfg) if isinstance(runtime_cfg, Mapping) else {}
    phases = Phases(runtime_cfg.get("log_level") or knobs.RUNTIME_KNOBS["log_level"].value())
    platform = knobs.RUNTIME_KNOBS["platform"].value(runtime_cfg.get("platform"))
    result = RunResult(False, platform=platform, timings=phases.timings)
    checks = Checks(bool(localize), bool(triage or fix), bool(poison), shuffle, bool(fix), budget)
    request = JitRequest(fn, specs, golden_fn, golden_data, compile_cfg, rtol, atol, compare_fn, compile_only,
                         runtime_dir, save_data, seed, checks)  # fmt: skip
    try:
        config = _run_config(request, given_cfgs, runtime_cfg, platform)
        compiled = _compiled(phases, request, platform)
        result.work_dir = compiled.work_dir
        if compile_only:
            result.passed = True
            done = "loaded" if runtime_dir else "compiled"
            print(f"[COMPILED] {fn.name}: {done} OK, not run (compile only): {result.work_dir}", flush=True)
            return result
        check_specs_match(specs, compiled.name, compiled.args)
        inputs, expected = _inputs(phases, request, compiled)
        execute(phases, result, Execution(compiled, config, expected, save_data, {"seed": seed}, checks), inputs)
    except TilescopeError as e:
        _report_error(result, request, e)
    return finish(result, program_name(fn))


def _run_config(
    request: JitRequest, given_cfgs: dict[str, Any], runtime_cfg: dict[str, Any], platform: str
) -> RunConfig:
    """Every option checked before anything compiles or runs; the run's validated options (a
    triaged sim run is isolated unless asked otherwise: a crash must become a report that triage
    can classify)."""
    check_options(given_cfgs, request.golden_fn, request.compare_fn, request.compile_only, request.save_data,
                  request.golden_data, request.runtime_dir)  # fmt: skip
    if request.checks.problem():
        raise HarnessError(str(request.checks.problem()))
    if request.checks.triage and "isolate" not in runtime_cfg and platform == "sim":
        runtime_cfg["isolate"] = True
    config = RunConfig.from_keywords(runtime_cfg)
    configure(config.log_level)
    check_program(request.fn)
    check_specs(request.specs)
    check_tolerances(request.rtol, request.atol)
    if seed_problem(request.seed) is not None:
        raise HarnessError(str(seed_problem(request.seed)))
    return config


def _compiled(phases: Phases, request: JitRequest, platform: str) -> CompiledProgram:
    """The build: ``runtime_dir`` loaded, or ``fn`` compiled (without g++ for an interp run)."""
    runtime_dir, fn = request.runtime_dir, request.fn
    if runtime_dir:
        return phases.run(
            "compile",
            f"reuse build {runtime_dir}",
            lambda: CompiledProgram.from_dir(runtime_dir, platform != "interp"),
            lambda c: "no front-end",
        )
    build_cpp = bool(request.compile_only) or platform != "interp"
    return phases.run(
        "compile",
        f"compile {fn.name}",
        lambda: fn.compile(build_cpp=build_cpp, **(request.compile_cfg or {})),
        lambda c: str(c.work_dir),
    )


def _inputs(phases: Phases, request: JitRequest, compiled: CompiledProgram) -> tuple[dict[str, Any], Expected]:
    """The inputs of the run and what its outputs are compared with: generated from the specs and
    golden_fn, or loaded from ``golden_data``."""
    golden_data = request.golden_data
    if golden_data:
        inputs, saved = phases.run(
            "inputs", f"load golden data {golden_data}", lambda: load_snapshot(golden_data, data_args(compiled))
        )
        golden = lambda _inputs: saved  # noqa: E731 - replayed, golden_fn is not called
        return inputs, Expected(golden, request.rtol, request.atol, request.compare_fn, golden_data)
    inputs = phases.run(
        "inputs", "generate inputs", lambda: generate(request.specs, request.seed), lambda d: f"seed {request.seed}"
    )
    computed = second = None
    if request.golden_fn is not None:
        names = [s.name for s in outputs(request.specs)]
        computed = golden_outputs(request.golden_fn, names)
        second = functools.cache(functools.partial(_second, request.specs, request.seed, computed, names))
    return inputs, Expected(computed, request.rtol, request.atol, request.compare_fn, second=second)


def _second(specs: list[Spec], seed: int, golden: Callable[[dict[str, Any]], dict], names: list[str]) -> Second:
    """The second input set: drawn from ``specs`` with the seed after ``seed``, and its golden."""
    other = second_seed(seed)
    inputs = generate(specs, other)
    computed = golden(_clone(inputs))
    return Second(inputs, {n: computed[n] for n in names}, other)


def _report_error(result: RunResult, request: JitRequest, e: TilescopeError) -> None:
    """Print the error that ended the run into ``result``; with triage and no build or run to
    triage, the error is the answer (and, with fix, a program that did not compile gets one)."""
    result.error = str(e)
    result.failure = getattr(e, "failure", None)
    print(f"[ERROR] {e}", file=sys.stderr, flush=True)
    if not request.checks.triage or result.triage is not None:
        return
    found = error_report(program_name(request.fn), e)
    if found is None:
        return
    result.triage = found
    if request.checks.fix and isinstance(e, DSLError) and isinstance(request.fn, JitFunction):
        found.fix = propose_for_compile_error(request.fn, e, _fix_data(request), request.rtol, request.atol,
                                              request.compile_cfg)  # fmt: skip
    print(found.render(), flush=True)


def _fix_data(request: JitRequest):
    """What a fix for a program that did not compile is verified on: the inputs this run would
    have had, and their golden."""

    def data(compiled: CompiledProgram) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        if request.golden_data:
            return load_snapshot(request.golden_data, data_args(compiled))
        if request.golden_fn is None:
            raise HarnessError("no golden_fn to verify a fix against")
        inputs = generate(request.specs, request.seed)
        names = [s.name for s in outputs(request.specs)]
        computed = golden_outputs(request.golden_fn, names)(_clone(inputs))
        return inputs, {a.name: computed[a.name] for a in compiled.args if a.is_output}

    return data


def check_options(
    cfgs: dict[str, Any],
    golden_fn: Any,
    compare_fn: Any,
    compile_only: bool,
    save_data: bool,
    golden_data: Any,
    runtime_dir: Any,
) -> None:
    """HarnessError for ``run_jit`` options that are not what they must be, or that a run would
    silently ignore, before anything compiles or runs."""
    examples = {"runtime_cfg": "{'platform': 'interp'}", "compile_cfg": "{'check_bounds': False}"}
    for key, cfg in cfgs.items():
        if cfg is not None and not isinstance(cfg, Mapping):
            raise HarnessError(
                f"{key} must be a dict of options ({key}={examples[key]}), got {cfg!r} ({type(cfg).__name__})"
            )
    for key, f in (("golden_fn", golden_fn), ("compare_fn", compare_fn)):
        if f is not None and not callable(f):
            raise HarnessError(
                f"{key} must be a function (or None), got {f!r} ({type(f).__name__}): pass the function itself, "
                f"{key}=name, without calling it or quoting its name"
            )
    if compile_only and (save_data or golden_data):
        given = "save_data (--save-data)" if save_data else "golden_data (--golden-data)"
        raise HarnessError(
            f"{given} needs a run, and compile_only (--compile-only) stops before it: drop one of them"
        )
    if runtime_dir and cfgs["compile_cfg"]:
        keys = ", ".join(sorted(cfgs["compile_cfg"]))
        raise HarnessError(
            f"compile_cfg {keys} cannot apply to the reused build {runtime_dir} (runtime_dir / --runtime-dir): "
            "it runs as it was compiled; drop these options, or compile again without runtime_dir"
        )


def program_name(fn: Any) -> str:
    """How the verdict line names what ``run_jit`` was given."""
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__


def check_program(fn: Any) -> None:
    """HarnessError unless ``fn`` is a ``@ts.jit`` function, saying what it is instead."""
    if isinstance(fn, JitFunction):
        return
    if isinstance(fn, KernelFunction):
        got = f"the @ts.kernel {fn.name}, which runs as one task"
        hint = "pass the @ts.jit function that submits it (a kernel alone has no task graph)"
    elif isinstance(fn, InlineFunction):
        got = f"the @ts.inline helper {fn.fn.__name__}"
        hint = "pass the @ts.jit function whose kernels use it"
    elif callable(fn) and hasattr(fn, "__code__"):
        got = f"the function {fn.__qualname__}, which is not decorated"
        name = fn.__name__ if fn.__name__.isidentifier() else "name"
        hint = f"put @ts.jit on the line above 'def {name}(...):'"
    else:
        text = repr(fn)
        got = f"{text if len(text) <= 60 else text[:57] + '...'} ({type(fn).__name__})"
        hint = "pass the @ts.jit function itself"
    raise HarnessError(f"run_jit runs a @ts.jit program, got {got}: {hint}")
