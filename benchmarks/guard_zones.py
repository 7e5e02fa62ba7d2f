"""Guard zones' cost: the shipped runtime core against one built without them
(``-DTS_RUNTIME_NO_GUARD_ZONES``: intermediates on the heap, no zones, no per-task check).

- ``tiny_tasks``: 2000 tasks, each a row of one of two [1000, 128] f32 intermediates (every task
  checks the zones of the tensors it takes): the per-task check at its most visible.
- ``vector_dag``: the model (5 tasks through 4 [64, 128] intermediates): the cost of mapping each
  intermediate with its guard pages, per run.

Each core variant runs in its own process (the core is loaded once per process), alternated
``rounds`` times; each process reports the median of ``repeat`` runs. Printed: the medians of those
medians, their ratio (guarded / plain) and the plain variant's spread across rounds.

Run: ``python benchmarks/guard_zones.py [--repeat 30] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

import tilescope as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from run_all import median_time  # noqa: E402

F = ts.f32
ROWS = 1000
VARIANTS = ("plain", "guarded")


@ts.kernel
def bump(x: ts.Tensor[[1, 128], F], y: ts.Out[[1, 128], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [1, 128]) + 1.0)


@ts.jit
def tiny_tasks(x: ts.Tensor[[ROWS, 128], F], y: ts.Out[[ROWS, 128], F]):
    a = ts.create_tensor([ROWS, 128], F)
    for r in ts.range(0, ROWS):
        bump(x[r : r + 1, :], a[r : r + 1, :])
    for r in ts.range(0, ROWS):
        bump(a[r : r + 1, :], y[r : r + 1, :])


def child(variant: str, program: str, repeat: int, workers: int) -> float:
    from tilescope.runtime import library

    library.load_core_variant(("TS_RUNTIME_NO_GUARD_ZONES",) if variant == "plain" else ())
    if program == "tiny_tasks":
        prog = tiny_tasks.compile()
        args = (torch.randn(ROWS, 128), torch.zeros(ROWS, 128))
    else:
        import vector_dag

        prog = vector_dag.vector_dag.compile()
        args = (torch.randn(64, 128), torch.randn(64, 128), torch.zeros(64, 128))
    return median_time(lambda: prog.run(*args, num_workers=workers), repeat, warmup=1)


def compare(program: str, repeat: int, workers: int, rounds: int) -> dict:
    medians: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            cmd = [sys.executable, __file__, "--child", variant, "--program", program, "--repeat", str(repeat),
                   "--workers", str(workers)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ).stdout
            medians[variant].append(float(out.strip().splitlines()[-1]))
    plain, guarded = statistics.median(medians["plain"]), statistics.median(medians["guarded"])
    return {
        "program": program,
        "plain_ms": round(plain * 1e3, 3),
        "guarded_ms": round(guarded * 1e3, 3),
        "ratio": round(guarded / plain, 4),
        "spread_pct": round((max(medians["plain"]) / min(medians["plain"]) - 1) * 100, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="alternated processes per core variant")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--program", choices=("tiny_tasks", "vector_dag"), default="tiny_tasks", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(child(args.child, args.program, args.repeat, args.workers))
        return 0
    for program in ("tiny_tasks", "vector_dag"):
        print(json.dumps(compare(program, args.repeat, args.workers, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
