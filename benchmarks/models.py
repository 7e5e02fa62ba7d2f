"""The real-kernel models on sim against torch eager and torch.compile, measured in one run.

    python benchmarks/models.py [--reps 7] [--models layernorm,rope] [--no-compile] [--json]

For each model at its default size: the median time of one ``prog.run(...)`` on sim (compiled
once beforehand; Python's part of the call included), of the same computation in torch eager
(the natural torch code: bf16 inputs stay bf16 where the model is bf16), and of that code
under ``torch.compile`` (steady state; its first call, which compiles, is reported on its
own). A model with bf16 matmuls is also timed compiled with ``bf16_matmul="dot"`` (``sim_dot``:
the CPU's bf16 dot-product instruction, the same bits but for subnormals). Every implementation runs with this process's torch thread count equal to the sim's
worker count, so the ratios compare like with like. The implementations take turns
(``run_all.turns``): each round, each one makes a first call, untimed calls for 50 ms more, then
two timed ones, so a figure is the implementation on its own, not sharing the CPUs with the other
pool's still-spinning threads; ``sim after torch`` is the sim's first call right after a torch op.
Target: sim at least as fast as torch eager (``eager / sim >= 1``) for every model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from run_all import after_other, turns  # noqa: E402

MODELS = ("layernorm", "rope", "flash_attention", "paged_attention_decode", "moe_expert", "mla_decode")


@dataclass
class Case:
    name: str
    program: object  # a @ts.jit function
    specs: list
    eager: Callable[..., object]  # torch code over the named inputs
    what: str


def case(name: str) -> Case:
    """A model module's default program, specs, torch code and size (``PROGRAM``, ``specs()``,
    ``eager``, ``SIZE``)."""
    module = __import__(name)
    return Case(name, module.PROGRAM, module.specs(), module.eager, module.SIZE)


def bench(case: Case, reps: int, use_compile: bool) -> dict[str, float]:
    """Seconds of one call of each implementation of ``case``, in ``reps`` rounds of turns
    (run_all.turns): the medians of the timed calls, and ``sim_after_torch`` (sim's first calls
    right after a torch op; None when no round put one there)."""
    from tilescope.harness.specs import generate

    values = generate(case.specs, seed=0)
    names = [s.name for s in case.specs]
    args = [values[n] for n in names]
    prog = case.program.compile()
    dot = case.program.compile(bf16_matmul="dot")
    uses_dot = any("_dot(" in (dot.work_dir / k["source"]).read_text() for k in dot.kernels)
    inputs = {n: v for n, v in values.items() if not getattr(next(s for s in case.specs if s.name == n), "is_output", False)}
    calls = {"sim": lambda: prog.run(*args), "eager": lambda: case.eager(**inputs)}
    if uses_dot:
        calls["sim_dot"] = lambda: dot.run(*args)
    row = {}
    if use_compile:
        compiled = torch.compile(case.eager)
        t0 = time.perf_counter()
        compiled(**inputs)
        row["compile_first"] = time.perf_counter() - t0
        calls["compiled"] = lambda: compiled(**inputs)
    timed = turns(calls, reps)
    row.update({key: statistics.median(got["steady"]) for key, got in timed.items()})
    row["sim_after_torch"] = after_other(timed, "sim")
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--json", action="store_true", help="print one JSON list of the rows (seconds)")
    args = parser.parse_args(argv)
    threads = os.cpu_count() or 1  # the sim's default: one worker per CPU
    torch.set_num_threads(threads)
    chosen = [m for m in args.models.split(",") if m] or list(MODELS)
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if args.json:
        rows = []
        for name in chosen:
            c = case(name)
            rows.append({"model": name, "size": c.what, "threads": threads, **bench(c, args.reps, not args.no_compile)})
        print(json.dumps(rows))
        return 0
    print(f"{threads} threads (sim workers and torch); medians of {args.reps} rounds of turns")
    print("| model | size | sim | sim after torch | torch eager | eager / sim | torch.compile | compile / sim | "
          "compile's first call |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name in chosen:
        c = case(name)
        r = bench(c, args.reps, not args.no_compile)
        ms = {k: v * 1e3 for k, v in r.items() if v is not None}
        comp = f"{ms['compiled']:.2f} ms | {r['compiled'] / r['sim']:.2f}x | {r['compile_first']:.1f} s" if "compiled" in r else "— | — | —"
        after = f"{ms['sim_after_torch']:.2f} ms" if r["sim_after_torch"] is not None else "—"
        print(f"| {name} | {c.what} | {ms['sim']:.2f} ms | {after} | {ms['eager']:.2f} ms | {r['eager'] / r['sim']:.2f}x | {comp} |")
        if "sim_dot" in r:
            print(f"| {name}, bf16_matmul=dot | {c.what} | {ms['sim_dot']:.2f} ms | | {ms['eager']:.2f} ms | "
                  f"{r['eager'] / r['sim_dot']:.2f}x | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
