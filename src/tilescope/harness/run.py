"""``run_jit``: compile a ``@ts.jit`` program, generate inputs, run it, compute the golden and
compare — printing one phase line per step and a comparison report per output.

Invariants: a TilescopeError in any phase ends the run with a report (``RunResult.passed`` is
False, ``error`` holds the message); inputs are generated from ``seed`` so reruns see the same
data; the golden runs on copies, never on the tensors the program wrote.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope.errors import ConfigError, TilescopeError
from tilescope.harness.compare import CompareReport, compare_outputs
from tilescope.harness.specs import Spec, generate, outputs
from tilescope.log import configure, level_number


@dataclass
class RunResult:
    passed: bool
    error: str | None = None
    work_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    platform: str = "sim"
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    golden: dict[str, torch.Tensor] = field(default_factory=dict)
    comparisons: list[CompareReport] = field(default_factory=list)
    num_tasks: int = 0

    def __bool__(self) -> bool:
        return self.passed


class _Phases:
    """Prints ``[RUN] <phase> … done (1.23s)`` lines unless the log level silences info."""

    def __init__(self, log_level: str | None):
        self.quiet = log_level is not None and level_number(log_level) > level_number("info")
        self.timings: dict[str, float] = {}

    def say(self, line: str) -> None:
        if not self.quiet:
            print(line, flush=True)

    def run(
        self, key: str, label: str, fn: Callable[[], Any], detail: Callable[[Any], str] | None = None
    ) -> Any:
        if not self.quiet:
            print(f"[RUN] {label} …", end=" ", flush=True)
        t0 = time.perf_counter()
        try:
            out = fn()
        except TilescopeError:
            self.timings[key] = time.perf_counter() - t0
            if not self.quiet:
                print("FAILED", flush=True)
            raise
        self.timings[key] = dt = time.perf_counter() - t0
        extra = f", {detail(out)}" if detail else ""
        self.say(f"done ({dt:.2f}s{extra})")
        return out


_NOT_YET = {
    "runtime_dir": "--runtime-dir (re-run a build's artifacts)",
    "golden_data": "--golden-data (replay saved inputs and golden)",
    "save_data": "--save-data (snapshot inputs and golden)",
}


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
) -> RunResult:
    """Compile ``fn``, run it on inputs generated from ``specs`` and compare every output with
    ``golden_fn`` (which fills the outputs of a dict name -> tensor in place)."""
    runtime_cfg = dict(runtime_cfg or {})
    phases = _Phases(runtime_cfg.get("log_level") or knobs.RUNTIME_KNOBS["log_level"].value())
    result = RunResult(False, platform=runtime_cfg.get("platform") or "sim", timings=phases.timings)
    try:
        for key, what in _NOT_YET.items():
            if locals()[key]:
                raise ConfigError(
                    f"{what} is not implemented yet in this version of tilescope; run without it"
                )
        opts = knobs.runtime_options(runtime_cfg)
        configure(opts["log_level"])
        compiled = phases.run(
            "compile",
            f"compile {fn.name}",
            lambda: fn.compile(**(compile_cfg or {})),
            lambda c: str(c.work_dir),
        )
        result.work_dir = compiled.work_dir
        if compile_only:
            result.passed = True
            return result
        names = [s.name for s in specs]
        expected_names = [a.name for a in compiled.args]
        if names != expected_names:
            raise ConfigError(
                f"specs must follow the program's parameters in order: expected {expected_names}, got {names}"
            )
        inputs = phases.run(
            "inputs", "generate inputs", lambda: generate(specs, seed), lambda d: f"seed {seed}"
        )
        golden_inputs = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()}
        args = [inputs[n] for n in names]
        info = phases.run(
            "run",
            f"run on {opts['platform']}",
            lambda: compiled.run(*args, **runtime_cfg),
            lambda i: f"{i.num_tasks} tasks",
        )
        result.num_tasks = info.num_tasks
        out_names = [s.name for s in outputs(specs)]
        result.outputs = {n: inputs[n] for n in out_names}
        if golden_fn is None:
            phases.say("[RUN] no golden_fn: outputs are not checked")
            result.passed = True
            return result
        phases.run("golden", "golden", lambda: golden_fn(golden_inputs))
        result.golden = {n: golden_inputs[n] for n in out_names}
        result.comparisons = compare_outputs(result.outputs, result.golden, out_names, rtol, atol, compare_fn)
        for rep in result.comparisons:
            for line in rep.lines(rtol, atol):
                phases.say(line)
        result.passed = all(r.passed for r in result.comparisons)
    except TilescopeError as e:
        result.error = str(e)
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
    verdict = "PASS" if result.passed else "FAIL"
    where = f" ({result.work_dir})" if result.work_dir else ""
    print(f"[{verdict}] {fn.name} on {result.platform}{where}", flush=True)
    return result
