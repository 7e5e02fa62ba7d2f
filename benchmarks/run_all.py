"""Performance ratios, all measured in one run on this machine (medians of repeated runs).

    python benchmarks/run_all.py [--quick]

- rms_norm and softmax at several sizes: sim vs torch eager, same thread count
  (target: not slower than torch at 4096 x 4096, i.e. ratio torch/sim >= 1).
- matmul 1024^3 fp32: sim vs torch (target: >= 0.3x torch).
- runtime overhead: us per task for 100k empty tasks as a chain and as a wide fan-out, vs a
  plain Python loop calling the same compiled no-op kernel through ctypes (target: <= 5 us).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def median_time(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rms_eager(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma


def bench_rows(name: str, sizes, reps: int, threads: int) -> list[tuple]:
    import rms_norm
    import softmax

    rows_out = []
    for rows, cols in sizes:
        x = torch.randn(rows, cols)
        y = torch.empty(rows, cols)
        if name == "rms_norm":
            fn = rms_norm.build(rows, cols, block=32, chunk=min(cols, 512))
            gamma = torch.rand(1, cols)
            args = (x, gamma, y, 1e-6)
            eager = functools.partial(_rms_eager, x, gamma)
        else:
            # one 64 KiB row block per task, the whole row in one tile (the single-pass kernel)
            fn = softmax.build(rows, cols, block=max(1, 16384 // cols), chunk=cols)
            args = (x, y)
            eager = functools.partial(torch.softmax, x, dim=-1)
        prog = fn.compile()
        t_sim = median_time(functools.partial(prog.run, *args, num_workers=threads), reps)
        t_torch = median_time(eager, reps)
        rows_out.append((f"{name} {rows}x{cols}", t_sim, t_torch))
    return rows_out


def bench_matmul(reps: int, threads: int) -> tuple:
    import matmul

    n = 1024
    fn = matmul.build(n, n, n, tm=64, tn=64, tk=64)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    prog = fn.compile()
    t_sim = median_time(lambda: prog.run(a, b, c, num_workers=threads), reps)
    t_torch = median_time(lambda: a @ b, reps)
    return ("matmul 1024^3 f32", t_sim, t_torch)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    reps = 5 if args.quick else 15
    os.environ.setdefault("TILESCOPE_BUILD_DIR", tempfile.mkdtemp(prefix="tilescope-bench-"))
    sizes = (
        [(1024, 1024), (4096, 4096)] if args.quick else [(512, 512), (1024, 1024), (2048, 2048), (4096, 4096)]
    )

    print(f"threads: {threads} (sim workers = torch threads)\n")
    print(f"{'case':<28}{'sim ms':>10}{'torch ms':>10}{'torch/sim':>11}")
    results = bench_rows("rms_norm", sizes, reps, threads) + bench_rows("softmax", sizes, reps, threads)
    results.append(bench_matmul(reps, threads))
    for label, t_sim, t_torch in results:
        print(f"{label:<28}{t_sim * 1e3:>10.2f}{t_torch * 1e3:>10.2f}{t_torch / t_sim:>10.2f}x")

    import runtime_overhead

    n = 20_000 if args.quick else 100_000
    r = runtime_overhead.measure(n, threads, repeat=5)
    print(f"\nruntime overhead ({n} empty tasks, {r['num_workers']} workers; median of 5 runs):")
    print(f"  {'chain (each task INOUT on one tensor)':<44}{r['chain_us']:>7.2f} us/task")
    print(f"  {'fan-out (disjoint writes)':<44}{r['fanout_us']:>7.2f} us/task")
    print(f"  {'Python loop calling the kernel via ctypes':<44}{r['python_loop_us']:>7.2f} us/call")
    print(f"  {'one run of an empty graph':<44}{r['empty_run_us']:>7.1f} us/run")
    print(f"  {'one run of 8 no-op tasks':<44}{r['tiny_run_us']:>7.1f} us/run")
    print(
        f"  chain / Python loop: {r['chain_us'] / r['python_loop_us']:.2f}x;  "
        f"fan-out / Python loop: {r['fanout_us'] / r['python_loop_us']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
