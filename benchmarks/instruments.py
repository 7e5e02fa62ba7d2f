"""Run-time cost of each instrument, on and off, against a run with none (medians).

    python benchmarks/instruments.py [--reps 15]

The program is rms_norm on a [2048, 2048] input (64 tasks). "off" runs pass every instrument
option explicitly as off; the others turn one on. Full-dump throughput is measured separately
by benchmarks/dump_throughput.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

import rms_norm  # noqa: E402

CASES = {
    "no options": {},
    "all off": {"enable_dump_tensor": 0, "enable_dep_gen": False, "enable_trace": False},
    "trace": {"enable_trace": True},
    "dep-gen": {"enable_dep_gen": True},
    "dump level 3 (metadata)": {"enable_dump_tensor": 3},
    "dump level 2 (full)": {"enable_dump_tensor": 2},
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    os.environ.setdefault("TILESCOPE_BUILD_DIR", tempfile.mkdtemp(prefix="tilescope-bench-"))
    prog = rms_norm.build(2048, 2048, block=32, chunk=512).compile()
    x, g, y = torch.randn(2048, 2048), torch.rand(1, 2048), torch.zeros(2048, 2048)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for cfg in CASES.values():  # warm-up
        prog.run(x, g, y, 1e-6, log_level="error", **cfg)
    for _ in range(args.reps):  # interleaved, so drift hits every case alike
        for name, cfg in CASES.items():
            t0 = time.perf_counter()
            prog.run(x, g, y, 1e-6, log_level="error", **cfg)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["no options"])
    print(f"rms_norm 2048x2048, 64 tasks; medians of {args.reps}\n")
    print(f"{'instrument':<28}{'ms/run':>9}{'vs none':>10}")
    for name, ts_ in times.items():
        m = statistics.median(ts_)
        print(f"{name:<28}{m * 1e3:>9.2f}{m / base:>9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
