"""Tensor dump cost: full-dump (level 2) throughput on large tensors, the cost per small record,
and the run time with every instrument off (an empty task-observer list) against a runtime core
built without the observer calls (``-DTS_RUNTIME_NO_OBSERVERS``).

- ``throughput`` (target >= 1000 MB/s): a bandwidth-bound program (block copies of a
  [rows, 1024] f32 matrix, 256 KiB per record, one input and one output record per task) run with
  and without ``enable_dump_tensor=2``, alternated; MB/s = payload bytes written to
  ``tensor_dump.bin`` / (median run time with the dump - median run time without): the capture
  in the workers, the flush, the manifest and writing both files, i.e. the dump end to end.
  ``run_MB_per_s`` (bytes / median run time with the dump) is printed too, and in ``--json``.
- ``records`` (target <= 1 us): the same for many tiny tasks (two 32-byte records each):
  (median run time with the dump - without) / records.
- ``overhead``: median time of a run of many tiny tasks with every instrument off, each core
  variant in its own process (the core is loaded once per process), alternated ``rounds`` times:
  ``no_observers`` is the core without the observer calls, ``observers_off`` the shipped core with
  an empty observer list.

Run: ``python benchmarks/dump_throughput.py [--rows 8192] [--repeat 9] [--no-overhead] [--json]``;
``measure()`` returns the same figures as a dict.
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


def on_off(prog, args: tuple, repeat: int, workers: int) -> tuple[float, float, dict]:
    """Median run times without and with a level-2 dump (runs alternated), and the dump's manifest."""
    off, on = [], []
    for level in (0, 2):  # warm-up: loads, starts workers, touches pages
        prog.run(*args, enable_dump_tensor=level, num_workers=workers)
    for _ in range(repeat):
        for level, times in ((0, off), (2, on)):
            t0 = time.perf_counter()
            prog.run(*args, enable_dump_tensor=level, num_workers=workers)
            times.append(time.perf_counter() - t0)
    manifest = json.loads((prog.work_dir / "dfx_outputs/tensor_dump/tensor_dump.json").read_text())
    return statistics.median(off), statistics.median(on), manifest


def throughput(rows: int, repeat: int, workers: int) -> dict:
    prog = copy_program(rows).compile()
    off, on, manifest = on_off(prog, (torch.randn(rows, COLS), torch.zeros(rows, COLS)), repeat, workers)
    mb = manifest["bin_size"] / 1e6
    return {
        "payload_MB": round(mb, 1),
        "records": len(manifest["records"]),
        "run_off_ms": round(off * 1e3, 2),
        "run_dump_ms": round(on * 1e3, 2),
        "dump_MB_per_s": round(mb / max(on - off, 1e-9)),
        "run_MB_per_s": round(mb / on),
    }


def records(repeat: int, workers: int) -> dict:
    prog = tiny_tasks.compile()
    args = (torch.randn(TINY_TASKS, 8), torch.zeros(TINY_TASKS, 8))
    off, on, manifest = on_off(prog, args, repeat, workers)
    n = len(manifest["records"])
    return {
        "records": n,
        "record_bytes": manifest["records"][0]["bin_size"],
        "run_off_ms": round(off * 1e3, 3),
        "run_dump_ms": round(on * 1e3, 3),
        "us_per_record": round((on - off) / n * 1e6, 3),
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


def measure(
    rows: int = 8192, repeat: int = 9, workers: int = 2, rounds: int = 3, with_overhead: bool = True
) -> dict:
    """Every figure of this benchmark: ``throughput`` (``dump_MB_per_s``: large tensors, end to end),
    ``records`` (``us_per_record``: tiny ones) and, with ``with_overhead``, ``overhead``."""
    out = {"throughput": throughput(rows, repeat, workers), "records": records(repeat, workers)}
    if with_overhead:
        out["overhead"] = overhead(repeat, workers, rounds)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192, help="matrix rows (payload = 2 * rows * 4 KiB)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternated processes per core variant")
    ap.add_argument("--no-overhead", action="store_true", help="skip the instruments-off comparison")
    ap.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    ap.add_argument("--child", choices=("no_observers", "observers_off"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(overhead_child(args.child, max(args.repeat * 5, 30), args.workers))
        return 0
    result = measure(args.rows, args.repeat, args.workers, args.rounds, not args.no_overhead)
    if args.json:
        print(json.dumps(result))
        return 0
    t, r = result["throughput"], result["records"]
    print(
        f"large tensors: {t['dump_MB_per_s']} MB/s end to end ({t['payload_MB']} MB in {t['records']} records, "
        f"run {t['run_off_ms']} ms -> {t['run_dump_ms']} ms with the dump; target >= 1000 MB/s); "
        f"{t['run_MB_per_s']} MB/s counting the whole run"
    )
    print(
        f"small records: {r['us_per_record']} us per record ({r['records']} records of {r['record_bytes']} B, "
        f"run {r['run_off_ms']} ms -> {r['run_dump_ms']} ms; target <= 1 us)"
    )
    if "overhead" in result:
        print(json.dumps({"overhead": result["overhead"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
