"""Runtime overhead: per task (empty tasks through the C++ runtime vs a Python loop of ctypes
calls) and per run (an empty graph).

Three measurements, each the median of ``repeat`` runs of ``n`` calls to the same no-op kernel:

- ``chain``: every task is INOUT on one small intermediate tensor, so each depends on the one
  before (the tensor map finds one RAW edge per task; nothing runs in parallel).
- ``fanout``: every task writes its own row of an [n, 16] intermediate (no edges; the tensor map
  holds n disjoint entries).
- ``python_loop``: a plain Python loop calling the compiled kernel through ctypes n times.

and the fixed cost of one run, the median over ``runs`` calls of ``graph.run_graph`` (as the
Python caller sees it):

- ``empty``: an orchestration that submits nothing.
- ``tiny``: 8 no-op tasks writing disjoint rows (no edges).

These are the core's costs as ``run_graph`` sees them (the ctypes run and its records); the
whole ``CompiledProgram.run`` of a tiny program, with its option and argument checks, is
``run_path.py``'s figure. Workers are reused between runs (``graph.runtime_pool()``), so these measure the hand-off to
parked workers, not thread start-up; the first run, which starts them, is not counted.

Run as a script to print a table: ``python benchmarks/runtime_overhead.py [--n 100000]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tilescope.ir import dtypes
from tilescope.ir.types import Direction
from tilescope.runtime import abi, graph, library
from tilescope.runtime.run_config import RunConfig
from tilescope.toolchain import BuildJob, build

NOOP_KERNEL = """
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) { (void)args; }
"""

CHAIN = """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    const int64_t n = orch.scalar_arg<int64_t>(0);
    ts::TensorHandle state = orch.create_tensor(TS_F32, {16});
    for (int64_t i = 0; i < n; ++i) {
        ts::Task t = orch.task(0, "noop");
        t.add_inout(state, {16});
        orch.submit(t);
    }
    return orch.status();
}
"""

FANOUT = """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    const int64_t n = orch.scalar_arg<int64_t>(0);
    ts::TensorHandle rows = orch.create_tensor(TS_F32, {n, 16});
    for (int64_t i = 0; i < n; ++i) {
        ts::Task t = orch.task(0, "noop");
        t.add_output(rows.slice({{i, i + 1}, {0, 16}}), {1, 16});
        orch.submit(t);
    }
    return orch.status();
}
"""

EMPTY = """
#include <tilescope/abi.h>
extern "C" int orchestration_entry(const ts_orch_api *, void *, const ts_arg *, int32_t) { return 0; }
"""

TINY = """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle rows = orch.create_tensor(TS_F32, {8, 16});
    for (int64_t i = 0; i < 8; ++i) {
        ts::Task t = orch.task(0, "noop");
        t.add_output(rows.slice({{i, i + 1}, {0, 16}}), {1, 16});
        orch.submit(t);
    }
    return orch.status();
}
"""


def _build(workdir: Path) -> dict[str, library.EntryPoint]:
    sources = {"noop": NOOP_KERNEL, "chain": CHAIN, "fanout": FANOUT, "empty": EMPTY, "tiny": TINY}
    jobs = []
    for name, text in sources.items():
        src = workdir / f"{name}.cpp"
        src.write_text(text)
        jobs.append(BuildJob(src, workdir / f"{name}.so"))
    build(jobs)
    return {
        name: library.load_entry(job.output, "kernel_entry" if name == "noop" else "orchestration_entry")
        for name, job in zip(sources, jobs)
    }


def _time_graph(
    entries: dict[str, library.EntryPoint], orch: str, n: int, num_workers: int
) -> tuple[float, int]:
    """Seconds for one run (as the Python caller sees it) and the number of workers it used."""
    started = time.perf_counter()
    report = graph.run_graph(
        entries[orch].address,
        [entries["noop"].address],
        ["noop"],
        [graph.scalar_arg(n, dtypes.i64)],
        RunConfig(num_workers=num_workers),
    )
    elapsed = time.perf_counter() - started
    assert report.num_tasks == n
    return elapsed, report.num_workers


def _time_runs(entries: dict[str, library.EntryPoint], orch: str, runs: int, num_workers: int) -> float:
    """Median seconds of one ``run_graph`` call of a small graph (after one warm-up run)."""
    args = (entries[orch].address, [entries["noop"].address], ["noop"], [])
    config = RunConfig(num_workers=num_workers)
    graph.run_graph(*args, config)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        graph.run_graph(*args, config)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _time_python_loop(kernel: library.EntryPoint, n: int) -> float:
    fn = ctypes.CFUNCTYPE(None, ctypes.POINTER(abi.TsArg))(kernel.address)
    state = (ctypes.c_float * 16)()
    arg = abi.TsArg(kind=abi.ArgKind.TENSOR, dir=abi.DIRECTION_CODES[Direction.INOUT])
    arg.u.t.data = ctypes.addressof(state)
    arg.u.t.buffer_id = ctypes.addressof(state)
    arg.u.t.ndim = 1
    arg.u.t.shape[0] = 16
    arg.u.t.strides[0] = 1
    args = (abi.TsArg * 1)(arg)
    started = time.perf_counter()
    for _ in range(n):
        fn(args)
    return time.perf_counter() - started


def measure(n: int = 100_000, num_workers: int = 0, repeat: int = 3, runs: int = 1000) -> dict:
    """Microseconds per task (per call for the Python loop), median of ``repeat`` runs, and
    microseconds per small run, median of ``runs`` runs.

    Returns a dict with ``n``, ``num_workers`` (as resolved), ``cpus`` and ``chain_us``,
    ``fanout_us``, ``python_loop_us``, ``empty_run_us``, ``tiny_run_us``.
    """
    library.load_core()
    with tempfile.TemporaryDirectory(prefix="tilescope-bench-") as tmp:
        entries = _build(Path(tmp))
        chain = [_time_graph(entries, "chain", n, num_workers) for _ in range(repeat)]
        fanout = [_time_graph(entries, "fanout", n, num_workers) for _ in range(repeat)]
        loop = [_time_python_loop(entries["noop"], n) for _ in range(repeat)]
        empty = _time_runs(entries, "empty", runs, num_workers)
        tiny = _time_runs(entries, "tiny", runs, num_workers)
    return {
        "n": n,
        "num_workers": chain[0][1],
        "cpus": os.cpu_count(),
        "chain_us": statistics.median(t for t, _ in chain) / n * 1e6,
        "fanout_us": statistics.median(t for t, _ in fanout) / n * 1e6,
        "python_loop_us": statistics.median(loop) / n * 1e6,
        "empty_run_us": empty * 1e6,
        "tiny_run_us": tiny * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="tasks per graph (default 100000)")
    parser.add_argument("--workers", type=int, default=0, help="worker threads (0 = all hardware threads)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is kept")
    parser.add_argument("--runs", type=int, default=1000, help="runs of the small graphs; the median is kept")
    parser.add_argument("--json", action="store_true", help="print the measure() dict as JSON")
    args = parser.parse_args()
    r = measure(args.n, args.workers, args.repeat, args.runs)
    if args.json:
        print(json.dumps(r))
        return
    print(f"{r['n']} empty tasks, {r['num_workers']} workers, {r['cpus']} CPUs")
    print(f"{'graph':<28}{'us/task':>10}")
    print(f"{'chain (INOUT, 1 RAW each)':<28}{r['chain_us']:>10.2f}")
    print(f"{'fan-out (disjoint writes)':<28}{r['fanout_us']:>10.2f}")
    print(f"{'python loop via ctypes':<28}{r['python_loop_us']:>10.2f}")
    print(f"{'graph':<28}{'us/run':>10}")
    print(f"{'empty (no task)':<28}{r['empty_run_us']:>10.1f}")
    print(f"{'tiny (8 no-op tasks)':<28}{r['tiny_run_us']:>10.1f}")


if __name__ == "__main__":
    main()
