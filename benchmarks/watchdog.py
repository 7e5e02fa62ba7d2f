"""What the failure guards cost when nothing is wrong.

Every task runs under a guard (a ``sigsetjmp`` and two counter bumps, so the watchdog can stop
it and a crash can name it), and with a time budget (``task_timeout_s``, default 60 s) a
watchdog thread samples the workers every 100 ms. Three variants, each in its own process:

- ``plain``: a runtime core built with ``-DTS_RUNTIME_NO_GUARDS`` (no per-task guard), no budget;
- ``guards``: the shipped core, no budget (``task_timeout_s=0``);
- ``watchdog``: the shipped core with the default budget (what every run gets).

Two workloads: 100k empty tasks in a chain (per-task overhead, the worst case for a per-task
cost) and rms_norm 2048x2048 (a real model). Variants alternate over ``--rounds`` processes;
each figure is the median of the per-process medians.

Run: ``python benchmarks/watchdog.py [--rounds 3]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("plain", "guards", "watchdog")


def child(variant: str, n: int, repeat: int) -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from tilescope.ir import dtypes
    from tilescope.runtime import graph, library
    from tilescope.runtime.run_config import RunConfig

    import rms_norm
    import runtime_overhead

    library.load_core_variant(
        ("TS_RUNTIME_NO_GUARDS",) if variant == "plain" else ()
    )  # NOTE: before any run, so every runtime uses it
    budget = 60.0 if variant == "watchdog" else 0.0
    config = RunConfig(task_timeout_s=budget)
    with tempfile.TemporaryDirectory(prefix="tilescope-bench-") as tmp:
        entries = runtime_overhead._build(Path(tmp))
        chain = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            graph.run_graph(
                entries["chain"].address,
                [entries["noop"].address],
                ["noop"],
                [graph.scalar_arg(n, dtypes.i64)],
                config,
            )
            chain.append((time.perf_counter() - t0) / n * 1e6)
    prog = rms_norm.build(2048, 2048, block=32, chunk=512).compile()
    x, g, y = torch.randn(2048, 2048), torch.rand(1, 2048), torch.zeros(2048, 2048)
    prog.run(x, g, y, 1e-6, task_timeout_s=budget)
    model = []
    for _ in range(repeat * 3):
        t0 = time.perf_counter()
        prog.run(x, g, y, 1e-6, task_timeout_s=budget)
        model.append((time.perf_counter() - t0) * 1e3)
    return {"chain_us": statistics.median(chain), "rms_norm_ms": statistics.median(model)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="tasks in the chain")
    ap.add_argument("--repeat", type=int, default=5, help="runs per process; the median is kept")
    ap.add_argument("--rounds", type=int, default=3, help="alternated processes per variant")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.n, args.repeat)))
        return 0
    got: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for v in VARIANTS:
            cmd = [sys.executable, __file__, "--child", v, "--n", str(args.n), "--repeat", str(args.repeat)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ).stdout
            got[v].append(json.loads(out.strip().splitlines()[-1]))
    result: dict[str, dict] = {}
    for v in VARIANTS:
        result[v] = {
            k: round(statistics.median(r[k] for r in got[v]), 3) for k in ("chain_us", "rms_norm_ms")
        }
    for v in VARIANTS[1:]:
        for k in ("chain_us", "rms_norm_ms"):
            result[v][f"{k}_vs_plain"] = round(result[v][k] / result["plain"][k], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
