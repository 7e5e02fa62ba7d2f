"""The bandwidth-bound models (rms_norm, softmax, layernorm) against torch and against a copy.

    python benchmarks/bandwidth.py [--reps 9] [--models rms_norm,softmax] [--sizes 1024,4096]
                                   [--no-compile] [--json]

For each model and square f32 size N x N, built to read each row once (``models/row_tiling.py``:
tasks of up to 512 KiB of whole rows, at least 16 of them, taken 16 KiB at a time): the median time of one ``prog.run(...)`` on sim
(compiled once beforehand; Python's part of the call included), of the same computation in torch
eager and under ``torch.compile`` (steady state; its first call, which compiles, is reported on
its own), and of ``y.copy_(x)`` on tensors of the same size: reading the input and writing the
output once each, the least memory traffic the model can do. ``sim_unchecked`` is the same run
with the check that it left its inputs alone turned off (``inputs_unchecked``): a checked build
of generated C++ copies no input for that check (docs/failures.md), so the two columns differ
only by the timing noise; an unchecked or hand-edited build's would show what the copy costs. Every implementation runs with the
sim's worker count as torch's thread count. The implementations take turns (``run_all.turns``):
each round, each one makes a first call, untimed calls for 50 ms more, then two timed ones, so a figure is the
implementation on its own, not sharing the CPUs with the other pool's still-spinning threads;
``sim after torch`` is the sim's first call right after a torch op, what that sharing costs. Targets: at 4096 x 4096 sim within 1.3x the copy
(``sim / copy <= 1.3``), and from 1024 x 1024 up at least as fast as eager and compile
(``eager / sim >= 1`` and ``compile / sim >= 1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from run_all import after_other, turns

from tilescope.launch.inputs_kept import inputs_unchecked

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))

from row_tiling import row_tiling  # noqa: E402

MODELS = ("rms_norm", "softmax", "layernorm")
SIZES = (1024, 2048, 4096)


def _rms_eager(x, gamma, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma


def _softmax_eager(x):
    return torch.softmax(x, dim=-1)


def _layernorm_eager(x, gamma, beta, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma[0], beta[0], eps)


def setup(name: str, n: int, tiling: dict | None = None) -> tuple:
    """(program, sim args, torch function, its keyword inputs, output) for model ``name`` at n x n
    f32, built with ``tiling`` (build()'s keyword arguments, e.g. block= and chunk=) or else the
    whole-row tiling of ``models/row_tiling.py``."""
    module = __import__(name)
    if tiling is None:
        tiling = row_tiling(n, n)
    x = torch.randn(n, n)
    y = torch.empty(n, n)
    if name == "rms_norm":
        gamma = torch.rand(1, n)
        return module.build(n, n, **tiling), (x, gamma, y, 1e-6), _rms_eager, {"x": x, "gamma": gamma, "eps": 1e-6}, y
    if name == "softmax":
        return module.build(n, n, **tiling), (x, y), _softmax_eager, {"x": x}, y
    if name == "layernorm":
        gamma, beta = torch.rand(1, n), torch.randn(1, n)
        inputs = {"x": x, "gamma": gamma, "beta": beta, "eps": 1e-5}
        return module.build(n, n, **tiling), (x, gamma, beta, y, 1e-5), _layernorm_eager, inputs, y
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def measure(
    name: str, n: int, reps: int = 9, threads: int | None = None, use_compile: bool = True, tiling: dict | None = None
) -> dict:
    """Seconds for model ``name`` at n x n f32, timed in ``reps`` rounds of turns (run_all.turns):
    ``sim``, ``sim_unchecked``, ``eager``, ``compiled`` and ``compile_first`` (when use_compile),
    ``copy``: the medians of the calls that follow one of their own; the fastest of each as
    ``<key>_min`` (on a shared machine the least disturbed one); ``sim_after_torch``: the median
    of sim's calls right after a torch op (None if no round put one there); and the ratios of the
    medians ``sim_over_copy``, ``eager_over_sim``, ``compiled_over_sim``. ``tiling``: as setup()'s.
    Checks sim's output against eager's first."""
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    program, args, fn, inputs, y = setup(name, n, tiling)
    prog = program.compile()
    prog.run(*args, num_workers=threads)
    want = fn(**inputs)
    if not torch.allclose(y, want, rtol=1e-4, atol=1e-5):
        raise AssertionError(f"{name} {n}x{n}: sim differs from torch by {(y - want).abs().max().item():.3g}")
    src, dst = torch.randn(n, n), torch.empty(n, n)
    row = {"model": name, "size": n, "threads": threads}
    def unchecked():
        with inputs_unchecked():
            prog.run(*args, num_workers=threads)

    timed = {
        "sim": lambda: prog.run(*args, num_workers=threads),
        "sim_unchecked": unchecked,
        "eager": lambda: fn(**inputs),
        "copy": lambda: dst.copy_(src),
    }
    if use_compile:
        compiled = torch.compile(fn)
        t0 = time.perf_counter()
        compiled(**inputs)
        row["compile_first"] = time.perf_counter() - t0
        timed["compiled"] = lambda: compiled(**inputs)
    got = turns(timed, reps)
    for key, ts in got.items():
        row[key], row[f"{key}_min"] = statistics.median(ts["steady"]), ts["steady"][0]
    row["sim_after_torch"] = after_other(got, "sim")
    if use_compile:
        row["compiled_over_sim"] = row["compiled"] / row["sim"]
    row["sim_over_copy"] = row["sim"] / row["copy"]
    row["sim_unchecked_over_copy"] = row["sim_unchecked"] / row["copy"]
    row["eager_over_sim"] = row["eager"] / row["sim"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--sizes", default="", help="comma-separated N for N x N (default: 1024,2048,4096)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--json", action="store_true", help="print one JSON list of the rows instead of a table")
    args = parser.parse_args(argv)
    chosen = [m for m in args.models.split(",") if m] or list(MODELS)
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s] or list(SIZES)
    except ValueError:
        parser.error(f"--sizes takes comma-separated integers, got {args.sizes!r}")
    rows = [measure(m, n, args.reps, use_compile=not args.no_compile) for m in chosen for n in sizes]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{rows[0]['threads']} threads (sim workers and torch); medians of {args.reps} rounds of turns; times in ms")
    print("| model | size | sim | sim after torch | sim, inputs unchecked | eager | compile | copy | sim / copy | "
          "unchecked / copy | eager / sim | compile / sim | compile's first call |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ms = {k: v * 1e3 for k, v in r.items() if isinstance(v, float)}
        after = f"{ms['sim_after_torch']:.2f}" if r["sim_after_torch"] is not None else "—"
        if "compiled" in r:
            comp = (
                f"{ms['compiled']:.2f} | {ms['copy']:.2f} | {r['sim_over_copy']:.2f}x | "
                f"{r['sim_unchecked_over_copy']:.2f}x | {r['eager_over_sim']:.2f}x | {r['compiled_over_sim']:.2f}x | "
                f"{r['compile_first']:.1f} s"
            )
        else:
            comp = (
                f"— | {ms['copy']:.2f} | {r['sim_over_copy']:.2f}x | {r['sim_unchecked_over_copy']:.2f}x | "
                f"{r['eager_over_sim']:.2f}x | — | —"
            )
        print(
            f"| {r['model']} | {r['size']}x{r['size']} | {ms['sim']:.2f} | {after} | {ms['sim_unchecked']:.2f} | "
            f"{ms['eager']:.2f} | {comp} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
