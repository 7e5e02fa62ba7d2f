"""Tensor dump cost: full-dump (level 2) throughput, and the run time with every instrument off
(an empty task-observer list) against a runtime core built without the observer calls
(``-DTS_RUNTIME_NO_OBSERVERS``).

- ``throughput``: a bandwidth-bound program (block copies of a [rows, 1024] f32 matrix, one
  input and one output record per task) run with ``enable_dump_tensor=2``; MB/s = payload bytes
  written to ``tensor_dump.bin`` / (median run time with the dump - median run time without),
  i.e. the capture in the workers, the flush and writing both files. The end-to-end rate (bytes
  / median run time with the dump) is printed too.
- ``overhead``: median time of a run of many tiny tasks with every instrument off, each core
  variant in its own process (the core is loaded once per process), alternated ``rounds`` times:
  ``no_observers`` is the core without the observer calls, ``observers_off`` the shipped core with
  an empty observer list.

Run: ``python benchmarks/dump_throughput.py [--rows 8192] [--repeat 9]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import tilescope as ts

F = ts.f32
COLS = 1024
BLOCK = 64
TINY_TASKS = 2000


@ts.kernel
def copy_block(x: ts.Tensor[[BLOCK, COLS], F], y: ts.Out[[BLOCK, COLS], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [BLOCK, COLS]))


def copy_program(rows: int):
    @ts.jit
    def block_copy(x: ts.Tensor[[rows, COLS], F], y: ts.Out[[rows, COLS], F]):
        for r in ts.range(0, rows, BLOCK):
            copy_block(x[r : r + BLOCK, :], y[r : r + BLOCK, :])

    return block_copy


@ts.kernel
def bump(x: ts.Tensor[[1, 8], F], y: ts.Out[[1, 8], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [1, 8]) + 1.0)


@ts.jit
def tiny_tasks(x: ts.Tensor[[TINY_TASKS, 8], F], y: ts.Out[[TINY_TASKS, 8], F]):
    for r in ts.range(0, TINY_TASKS):
        bump(x[r : r + 1, :], y[r : r + 1, :])


def timed(fn, repeat: int) -> float:
    fn()  # warm-up: loads, starts workers, touches pages
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(rows: int, repeat: int, workers: int) -> dict:
    prog = copy_program(rows).compile()
    x, y = torch.randn(rows, COLS), torch.zeros(rows, COLS)
    off = timed(lambda: prog.run(x, y, num_workers=workers), repeat)
    on = timed(lambda: prog.run(x, y, enable_dump_tensor=2, num_workers=workers), repeat)
    manifest = json.loads((prog.work_dir / "dfx_outputs/tensor_dump/tensor_dump.json").read_text())
    mb = manifest["bin_size"] / 1e6
    return {
        "payload_MB": round(mb, 1),
        "records": len(manifest["records"]),
        "run_off_ms": round(off * 1e3, 2),
        "run_dump_ms": round(on * 1e3, 2),
        "dump_MB_per_s": round(mb / max(on - off, 1e-9)),
        "end_to_end_MB_per_s": round(mb / on),
    }


def overhead_child(variant: str, repeat: int, workers: int) -> float:
    from tilescope.runtime import library

    library.load_core_variant(
        ("TS_RUNTIME_NO_OBSERVERS",) if variant == "no_observers" else ()
    )  # NOTE: before any run, so every runtime uses it
    prog = tiny_tasks.compile()
    x, y = torch.randn(TINY_TASKS, 8), torch.zeros(TINY_TASKS, 8)
    return timed(lambda: prog.run(x, y, num_workers=workers), repeat)


def overhead(repeat: int, workers: int, rounds: int) -> dict:
    medians: dict[str, list[float]] = {"no_observers": [], "observers_off": []}
    for _ in range(rounds):
        for variant in medians:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                variant,
                "--repeat",
                str(repeat),
                "--workers",
                str(workers),
            ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ).stdout
            medians[variant].append(float(out.strip().splitlines()[-1]))
    plain, off = statistics.median(medians["no_observers"]), statistics.median(medians["observers_off"])
    return {
        "tasks": TINY_TASKS,
        "no_observers_ms": round(plain * 1e3, 3),
        "observers_off_ms": round(off * 1e3, 3),
        "ratio": round(off / plain, 4),
        "diff_pct": round((off / plain - 1) * 100, 2),
        "spread_pct": round((max(medians["no_observers"]) / min(medians["no_observers"]) - 1) * 100, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192, help="matrix rows (payload = 2 * rows * 4 KiB)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternated processes per core variant")
    ap.add_argument("--child", choices=("no_observers", "observers_off"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(overhead_child(args.child, max(args.repeat * 5, 30), args.workers))
        return 0
    print(json.dumps({"throughput": throughput(args.rows, args.repeat, args.workers)}))
    print(json.dumps({"overhead": overhead(args.repeat, args.workers, args.rounds)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
