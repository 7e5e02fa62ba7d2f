"""What `tilescope localize` and probes cost.

- ``localize``: a 1024-task program on 4 MiB tensors ([1024, 1024] f32 in, out and an
  intermediate; two kernels, 512 tasks each, on [32, 64] tiles), with a constant edited by hand in
  one kernel's C++ (a codegen case: every task is re-executed, then a probe build made and
  replayed). Target: < 30 s end to end. Printed: the median of ``--repeat`` localize runs, and
  the sim run alone on the same data for scale.
- ``probes off``: a kernel with a ``ts.probe`` inside its innermost loop against the same kernel
  without it, both run with probes off (the default), alternated; target: no measurable cost.
  Printed: the medians and their ratio (with probe / without).
- ``probe build``: compiling the probe build of one kernel, the object cache empty (a fresh
  cache directory); target: < 2 s.

Run: ``python benchmarks/localize.py [--repeat 3]``.
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

import tilescope as ts
from tilescope.harness import TensorSpec, run_jit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_all import median_time  # noqa: E402

F = ts.f32
N = 1024


@ts.kernel
def scale_tile(x: ts.Tensor[[32, 64], F], h: ts.Out[[32, 64], F]):
    t = ts.load(x, [0, 0], [32, 64])
    ts.store(h, [0, 0], t * 0.5 + 0.25)


@ts.kernel
def norm_tile(h: ts.Tensor[[32, 64], F], y: ts.Out[[32, 64], F]):
    t = ts.load(h, [0, 0], [32, 64])
    s = ts.row_sum(t * t)
    ts.store(y, [0, 0], t * ts.rsqrt(s + 1.0))


@ts.jit
def big(x: ts.Tensor[[N, N], F], y: ts.Out[[N, N], F]):
    h = ts.create_tensor([N, N], F)
    for r in ts.range(0, N, 32):
        for c in ts.range(0, N, 64):
            scale_tile(x[r : r + 32, c : c + 64], h[r : r + 32, c : c + 64])
            norm_tile(h[r : r + 32, c : c + 64], y[r : r + 32, c : c + 64])


def big_golden(t):
    h = t["x"] * 0.5 + 0.25
    blocks = h.reshape(N, N // 64, 64)
    t["y"][:] = (blocks * torch.rsqrt((blocks * blocks).sum(-1, keepdim=True) + 1.0)).reshape(N, N)


@ts.kernel
def with_probe(x: ts.Tensor[[64, 256], F], y: ts.Out[[64, 256], F]):
    acc = ts.zeros([64, 32], F)
    for c in ts.range(0, 256, 32):
        t = ts.load(x, [0, c], [64, 32])
        acc = acc + t * t
        ts.probe(acc, "acc")
    ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 256]) * ts.row_sum(acc))


@ts.kernel
def without_probe(x: ts.Tensor[[64, 256], F], y: ts.Out[[64, 256], F]):
    acc = ts.zeros([64, 32], F)
    for c in ts.range(0, 256, 32):
        t = ts.load(x, [0, c], [64, 32])
        acc = acc + t * t
    ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 256]) * ts.row_sum(acc))


@ts.jit
def probed(x: ts.Tensor[[4096, 256], F], y: ts.Out[[4096, 256], F]):
    for r in ts.range(0, 4096, 64):
        with_probe(x[r : r + 64, :], y[r : r + 64, :])


@ts.jit
def plain(x: ts.Tensor[[4096, 256], F], y: ts.Out[[4096, 256], F]):
    for r in ts.range(0, 4096, 64):
        without_probe(x[r : r + 64, :], y[r : r + 64, :])


def bench_localize(repeat: int) -> None:
    from tilescope.analysis.localize.localize_command import localize

    specs = [TensorSpec("x", [N, N], torch.float32), TensorSpec("y", [N, N], torch.float32, is_output=True)]
    result = run_jit(big, specs, golden_fn=big_golden, save_data=True, runtime_cfg={"log_level": "error"})
    work = result.work_dir
    cpp = work / "kernels" / "vec" / "scale_tile.cpp"
    cpp.write_text(cpp.read_text().replace("0.25f", "0.2501f"))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        rep = localize(work)
        times.append(time.perf_counter() - t0)
    assert rep.category == "codegen" and rep.culprit.kernel == "scale_tile", rep.render()
    prog = ts.CompiledProgram.from_dir(work)
    x, y = torch.randn(N, N), torch.zeros(N, N)
    sim = median_time(lambda: prog.run(x, y), reps=5)
    print(
        f"localize: {result.num_tasks} tasks on [{N}, {N}] f32 tensors (4 MiB each): median {statistics.median(times):.2f} s "
        f"of {repeat} (target < 30 s); the sim run alone {sim * 1e3:.1f} ms; culprit {rep.culprit.text()}"
    )


def bench_probes_off(repeat: int, rounds: int) -> None:
    x = torch.randn(4096, 256)
    with_p, without = probed.compile(), plain.compile()
    y1, y2 = torch.zeros_like(x), torch.zeros_like(x)
    a, b = [], []
    for _ in range(rounds):
        a.append(median_time(lambda: with_p.run(x, y1), reps=repeat))
        b.append(median_time(lambda: without.run(x, y2), reps=repeat))
    assert torch.equal(y1, y2)
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"probes off: a probe in the inner loop (8 per task, 64 tasks) {ma * 1e3:.3f} ms vs none {mb * 1e3:.3f} ms: "
        f"ratio {ma / mb:.3f} (medians of {rounds} rounds of {repeat} runs; spread of 'none' "
        f"{(max(b) - min(b)) / mb * 100:.1f}%)"
    )


def bench_probe_build() -> None:
    from tilescope.analysis.localize.probe_build import compile_probe_build, instrument
    from tilescope.analysis.localize.source_map import kernel_sites, kernel_text

    prog = plain.compile()
    kernel = next(k for k in prog.program().kernels if k.name == "without_probe")
    sites, _ = kernel_sites(prog, kernel)
    text = instrument(kernel_text(prog, kernel.name)[0], sites)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TILESCOPE_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        compile_probe_build(prog, kernel.name, text)
        took = time.perf_counter() - t0
    print(f"probe build: one kernel compiled in {took:.2f} s with an empty object cache (target < 2 s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="localize runs (default 3)")
    p.add_argument("--rounds", type=int, default=5, help="alternated rounds of the probes-off comparison")
    args = p.parse_args()
    bench_probes_off(repeat=20, rounds=args.rounds)
    bench_probe_build()
    bench_localize(args.repeat)


if __name__ == "__main__":
    main()
