"""What `tilescope triage` and its pieces cost, on a 1024-task program ([1024, 1024] f32 tensors,
two kernels of 512 tasks each on [32, 64] tiles, an intermediate between them).

- ``coverage``: the compile-time store-coverage analysis of every kernel (part of each compile).
- ``audit run``: the access-audit run (every load and store recorded; the audit build's compile
  not counted: it is cached) against the plain sim run on the same data; printed as a ratio.
- ``poison``: the two poisoned serial runs with their level-2 dumps and comparison, against the
  plain sim run.
- ``shuffle``: one shuffled run with its level-2 dump, against the plain sim run.
- ``triage``: `tilescope triage` end to end on the program with one task's store loop one chunk
  short (category ``uninitialized``), and on the correct program (``pass``, with its shuffled
  runs); target: well inside the 60 s budget.
- ``triage --fix``: the same on the short program with ``--fix``: the proposal step (the loop
  bound, applied to a copy, recompiled and re-run on the saved data) against triage without it.

Run: ``python benchmarks/triage.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, run_jit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_all import median_time  # noqa: E402

F = ts.f32
N = 1024


@ts.kernel
def scale_tile(x: ts.Tensor[[32, 64], F], h: ts.Out[[32, 64], F]):
    for c in ts.range(0, 64, 16):
        ts.store(h, [0, c], ts.load(x, [0, c], [32, 16]) * 0.5 + 0.25)


@ts.kernel
def scale_tile_short(x: ts.Tensor[[32, 64], F], h: ts.Out[[32, 64], F]):
    for c in ts.range(0, 48, 16):  # one chunk short
        ts.store(h, [0, c], ts.load(x, [0, c], [32, 16]) * 0.5 + 0.25)


@ts.kernel
def norm_tile(h: ts.Tensor[[32, 64], F], y: ts.Out[[32, 64], F]):
    t = ts.load(h, [0, 0], [32, 64])
    ts.store(y, [0, 0], t * ts.rsqrt(ts.row_sum(t * t) + 1.0))


def _program(first):
    @ts.jit
    def big(x: ts.Tensor[[N, N], F], y: ts.Out[[N, N], F]):
        h = ts.create_tensor([N, N], F)
        for r in ts.range(0, N, 32):
            for c in ts.range(0, N, 64):
                first(x[r : r + 32, c : c + 64], h[r : r + 32, c : c + 64])
                norm_tile(h[r : r + 32, c : c + 64], y[r : r + 32, c : c + 64])

    return big


def golden(t):
    h = t["x"] * 0.5 + 0.25
    blocks = h.reshape(N, N // 64, 64)
    t["y"][:] = (blocks * torch.rsqrt((blocks * blocks).sum(-1, keepdim=True) + 1.0)).reshape(N, N)


SPECS = [TensorSpec("x", [N, N], torch.float32), TensorSpec("y", [N, N], torch.float32, is_output=True)]


def main() -> None:
    from tilescope.analysis.audit import audit_run
    from tilescope.analysis.poison import poison_run
    from tilescope.analysis.recorded import recorded_run
    from tilescope.analysis.triage.triage_command import triage
    from tilescope.ir.unwritten import unwritten
    from tilescope.runtime.run_config import Recording

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    args = p.parse_args()
    good, short = _program(scale_tile), _program(scale_tile_short)

    ir = good.program()
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        unwritten(ir)
    print(f"coverage: {(time.perf_counter() - t0) / args.repeat * 1e3:.2f} ms for the program's {len(ir.kernels)} kernels")

    result = run_jit(good, SPECS, golden_fn=golden, save_data=True, runtime_cfg={"log_level": "error"})
    prog = ts.CompiledProgram.from_dir(result.work_dir)
    inputs = {"x": torch.randn(N, N), "y": torch.zeros(N, N)}
    plain = median_time(lambda: prog.run(inputs["x"].clone(), torch.zeros(N, N)), reps=args.repeat)
    audit_run(prog, inputs)  # NOTE: compiles the audit build once; the runs below reuse it
    audit = median_time(lambda: audit_run(prog, inputs), reps=args.repeat, warmup=0)
    poison = median_time(lambda: poison_run(prog, inputs), reps=args.repeat, warmup=0)
    shuffled = median_time(lambda: recorded_run(prog, inputs, Recording(record_edges=True, dump_level=2),
                                                shuffle=(4, 7)), reps=args.repeat, warmup=0)  # fmt: skip
    print(f"sim run alone: {plain * 1e3:.1f} ms ({result.num_tasks} tasks)")
    print(f"audit run: {audit * 1e3:.1f} ms ({audit / plain:.1f}x the sim run)")
    print(f"poison runs (two, serial, level-2 dumps, compared): {poison * 1e3:.1f} ms ({poison / plain:.1f}x)")
    print(f"one shuffled run (4 workers, level-2 dump): {shuffled * 1e3:.1f} ms ({shuffled / plain:.1f}x)")

    for name, fn in (("uninitialized", short), ("pass", good)):
        work = run_jit(fn, SPECS, golden_fn=golden, save_data=True, runtime_cfg={"log_level": "error"}).work_dir
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rep = triage(work)
            times.append(time.perf_counter() - t0)
        assert rep.category == name, rep.render()
        steps = ", ".join(f"{s['step']} {s['seconds']:.2f}s" for s in rep.steps)
        print(f"triage ({name}): median {statistics.median(times):.2f} s of {args.repeat} (budget 60 s): {steps}")
        if name != "uninitialized":
            continue
        fixed, proposing = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rep = triage(work, fix=True)
            fixed.append(time.perf_counter() - t0)
            proposing.append(next(s["seconds"] for s in rep.steps if s["step"].startswith("propose a fix")))
        assert rep.fix["verified"], rep.render()
        print(f"triage --fix ({name}): median {statistics.median(fixed):.2f} s "
              f"({statistics.median(fixed) / statistics.median(times):.1f}x triage); proposing and verifying "
              f"`{rep.fix['edit']['after'].strip()}`: median {statistics.median(proposing):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
