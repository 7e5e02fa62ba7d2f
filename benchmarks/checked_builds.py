"""The cost of checked builds (``check_bounds``, the default) against unchecked ones.

    python benchmarks/checked_builds.py [--pairs 200] [--json]

For rms_norm and softmax at 1024x1024 and 4096x4096 and matmul 1024^3, both builds run in the same process, one
call of each in turn (so drift in the machine's speed hits both alike); each figure is the median
over ``pairs`` calls, and the ratio is checked / unchecked.
"""

from __future__ import annotations

import argparse
import functools
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
import softmax  # noqa: E402


def _pair_medians(checked, unchecked, pairs: int) -> tuple[float, float]:
    for fn in (checked, unchecked):
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {"checked": [], "unchecked": []}
    for i in range(pairs):
        order = (("checked", checked), ("unchecked", unchecked))
        for name, fn in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return statistics.median(times["checked"]) * 1e3, statistics.median(times["unchecked"]) * 1e3


def measure(pairs: int) -> list[dict[str, float | str]]:
    """One row per case: the median ms of the checked and the unchecked build, and their ratio.
    The programs are run_all.py's (the same blocks and chunks)."""
    import matmul

    torch.manual_seed(0)
    cases = []
    for n in (1024, 4096):
        x, y = torch.randn(n, n), torch.zeros(n, n)
        cases.append(
            (
                f"rms_norm {n}x{n}",
                rms_norm.build(n, n, block=32, chunk=min(n, 512)),
                (x, torch.rand(1, n), y, 1e-6),
            )
        )
        cases.append((f"softmax {n}x{n}", softmax.build(n, n, block=max(1, 16384 // n), chunk=n), (x, y)))
    n = 1024
    cases.append(
        (
            "matmul 1024^3 f32",
            matmul.build(n, n, n, tm=64, tn=64, tk=64),
            (torch.randn(n, n), torch.randn(n, n), torch.zeros(n, n)),
        )
    )
    rows: list[dict[str, float | str]] = []
    for case, jit, args in cases:
        checked, unchecked = (jit.compile(check_bounds=c) for c in (True, False))
        reps = pairs if "1024x1024" in case else max(pairs // 8, 10)
        c, u = _pair_medians(
            functools.partial(checked.run, *args), functools.partial(unchecked.run, *args), reps
        )
        rows.append({"case": case, "checked_ms": c, "unchecked_ms": u, "ratio": c / u})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=200, help="alternated calls per build (1024x1024)")
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TILESCOPE_BUILD_DIR", tmp)
        rows = measure(args.pairs)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'case':<22}{'checked ms':>12}{'unchecked ms':>14}{'ratio':>8}")
    for r in rows:
        print(f"{r['case']:<22}{r['checked_ms']:>12.3f}{r['unchecked_ms']:>14.3f}{r['ratio']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
