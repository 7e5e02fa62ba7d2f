"""The cost of one call of ``CompiledProgram.run`` (options, argument checks, observers, the
ctypes run and its records), for tiny programs and for rms_norm, in microseconds: the whole
call as a user sees it, Python included (``runtime_overhead.py`` times ``graph.run_graph``
alone, without the program's checks).

    python benchmarks/run_path.py [--calls 2000] [--json]

Run it against two checkouts (``PYTHONPATH=<checkout>/src``), alternating, to compare the
Python run path of two versions; each figure is the median over ``calls`` calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

import rms_norm  # noqa: E402
import vector_dag  # noqa: E402


def _median_us(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(calls: int) -> dict[str, float]:
    torch.manual_seed(0)
    out: dict[str, float] = {}
    dag = vector_dag.vector_dag.compile()
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    z = torch.zeros(vector_dag.R, vector_dag.C)
    out["vector_dag (5 tasks) us/call"] = _median_us(lambda: dag.run(x, y, z, num_workers=2), calls)
    out["vector_dag with deps+trace us/call"] = _median_us(
        lambda: dag.run(x, y, z, num_workers=2, enable_dep_gen=True, enable_trace=True), max(calls // 10, 50)
    )
    tiny = rms_norm.build(8, 16, block=1, chunk=16).compile()  # 8 tasks of one 16-element row
    rows, gain, res = torch.randn(8, 16), torch.rand(1, 16), torch.zeros(8, 16)
    out["rms_norm 8x16 (8 tiny tasks) us/call"] = _median_us(
        lambda: tiny.run(rows, gain, res, 1e-6, num_workers=2), calls
    )
    prog = rms_norm.build(512, 512).compile()
    a, g, o = torch.randn(512, 512), torch.rand(1, 512), torch.zeros(512, 512)
    out["rms_norm 512x512 us/call"] = _median_us(lambda: prog.run(a, g, o, 1e-6, num_workers=2), calls)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per figure (median kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ.setdefault("TILESCOPE_BUILD_DIR", tmp)
        result = measure(args.calls)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:<40} {v:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
