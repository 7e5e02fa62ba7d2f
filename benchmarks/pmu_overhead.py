"""What enable_pmu costs per task: the core's wall time of a run with the counters on against the
same run recording the same task records and arguments without them (enable_dep_gen), and the
whole call (files written) against one with no instrument (medians, runs interleaved).

    python benchmarks/pmu_overhead.py [--reps 21] [--workers 1] [--json]

The second number is read inside the run: a task's pmu wall_ns brackets its task-times slice
and the counters' reads, so their difference is what reading the counters costs a task.
The program is rms_norm on a [2048, 512] input in blocks of 8 rows (256 small tasks), so the
per-task cost is not hidden by the kernels' own time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

import rms_norm  # noqa: E402

ROWS, COLS, BLOCK = 2048, 512, 8
CASES = {
    "none": {},
    "dep-gen (same records)": {"enable_dep_gen": True},
    "pmu": {"enable_pmu": True},
}


def measure(reps: int = 21, workers: int = 1) -> dict:
    """Medians: ``core_ms`` and ``call_ms`` per case (CASES), ``pmu_ns_per_task`` (core wall, pmu
    minus dep-gen, per task) and ``reads_ns_per_task`` (a task's pmu wall minus its kernel time)."""
    os.environ.setdefault("TILESCOPE_BUILD_DIR", tempfile.mkdtemp(prefix="tilescope-bench-"))
    prog = rms_norm.build(ROWS, COLS, block=BLOCK, chunk=128).compile()
    x, g, y = torch.randn(ROWS, COLS), torch.rand(1, COLS), torch.zeros(ROWS, COLS)
    tasks = ROWS // BLOCK
    inside: list[int] = []  # per task: the counters' own bracket minus the kernel's (task times)
    core: dict[str, list[float]] = {name: [] for name in CASES}
    call: dict[str, list[float]] = {name: [] for name in CASES}
    for cfg in CASES.values():  # warm-up (and the copy limit, measured once per process)
        prog.run(x, g, y, 1e-6, log_level="error", num_workers=workers, **cfg)
    for _ in range(reps):
        for name, cfg in CASES.items():
            t0 = time.perf_counter()
            info = prog.run(x, g, y, 1e-6, log_level="error", num_workers=workers, **cfg)
            call[name].append(time.perf_counter() - t0)
            core[name].append(info.report.wall_s)
            times = {t.task_id: t.end_ns - t.start_ns for t in info.report.tasks}
            inside += [r.wall_ns - times[r.task_id] for r in info.report.pmu]
    med = statistics.median
    return {
        "tasks": tasks,
        "workers": workers,
        "core_ms": {name: med(core[name]) * 1e3 for name in CASES},
        "call_ms": {name: med(call[name]) * 1e3 for name in CASES},
        "pmu_ns_per_task": (med(core["pmu"]) - med(core["dep-gen (same records)"])) / tasks * 1e9,
        "reads_ns_per_task": med(inside),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    r = measure(args.reps, args.workers)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"rms_norm {ROWS}x{COLS}, {r['tasks']} tasks, {args.workers} worker(s); medians of {args.reps}\n")
    print(f"{'case':<24}{'core ms':>9}{'call ms':>9}")
    for name in CASES:
        print(f"{name:<24}{r['core_ms'][name]:>9.3f}{r['call_ms'][name]:>9.3f}")
    print(f"\npmu counters: {r['pmu_ns_per_task']:.0f} ns per task (core wall, pmu - dep-gen, / {r['tasks']} tasks)")
    print(f"pmu counters' reads: {r['reads_ns_per_task']:.0f} ns per task (median of pmu wall_ns - task time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
