"""The k-ary search of ``tilescope bisect``: rounds and wall time against the binary search.

    python benchmarks/bisect_kary.py [--commits 16] [--break-at 11] [--ray] [--json]

A synthetic repository of ``--commits`` commits of a model script whose kernel scales its input;
the commit ``--break-at`` changes the scale, so the model fails from there on. Each configuration
bisects the whole range (``--good`` the first commit, ``--bad`` the last) in a process of its
own with a compiler cache of its own (every configuration starts cold, as a bisect over real
revisions does: each revision compiles its own code): the local engine with ``-j 1`` (binary),
``-j 2`` and ``-j 3``, and with ``--ray`` the Ray engine (a local Ray on the loopback) with
``-j 2``. Reported: rounds, revisions run, seconds, and the speed-up over ``-j 1``; each
configuration must name the breaking commit, else the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = '''
import sys

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, run_jit

SCALE = {scale}


@ts.kernel
def scaled(x: ts.Tensor[[8, 64], ts.f32], y: ts.Out[[8, 64], ts.f32]):
    ts.store(y, [0, 0], ts.exp(ts.load(x, [0, 0], [8, 64])) * SCALE)


@ts.jit
def model(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32]):
    for r in ts.range(0, 64, 8):
        scaled(x[r : r + 8, :], y[r : r + 8, :])


def golden(t):
    t["y"][:] = torch.exp(t["x"]) * 2.0


if __name__ == "__main__":
    specs = [TensorSpec("x", [64, 64], torch.float32), TensorSpec("y", [64, 64], torch.float32, is_output=True)]
    sys.exit(0 if run_jit(model, specs, golden_fn=golden, save_data=True).passed else 1)
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(repo: Path, commits: int, break_at: int) -> list[str]:
    """The repository; its commits' hashes."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "bench@example.com")
    _git(repo, "config", "user.name", "Bench")
    hashes = []
    for i in range(commits):
        (repo / "model.py").write_text(MODEL.format(scale=2.5 if i >= break_at else 2.0))
        (repo / "CHANGES").write_text(f"revision {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"revision {i}")
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    return hashes


def bisect(repo: Path, hashes: list[str], work: Path, flags: list[str]) -> dict:
    env = dict(os.environ, TILESCOPE_CACHE_DIR=str(work / "cache"), TILESCOPE_LOG_LEVEL="error")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tilescope", "bisect", "--good", hashes[0], "--bad", hashes[-1], "--json",
                        "--work", str(work / "runs"), *flags, "--", sys.executable, "model.py"],
                       cwd=repo, env=env, capture_output=True, text=True)  # fmt: skip
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bisect {' '.join(flags)} failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return {**json.loads(p.stdout), "wall_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--break-at", type=int, default=11)
    ap.add_argument("--ray", action="store_true", help="also the Ray engine (needs tilescope[ray])")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    configs = [("local -j1", ["-j", "1"]), ("local -j2", ["-j", "2"]), ("local -j3", ["-j", "3"])]
    if a.ray:
        configs.append(("ray -j2", ["--engine", "ray", "-j", "2"]))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        hashes = make_repo(Path(tmp) / "repo", a.commits, a.break_at)
        for i, (name, flags) in enumerate(configs):
            r = bisect(Path(tmp) / "repo", hashes, Path(tmp) / f"w{i}", flags)
            if (r["first_bad"] or {}).get("hash") != hashes[a.break_at]:
                raise SystemExit(f"{name} named {r['first_bad']}, not revision {a.break_at}")
            rows.append({"config": name, "rounds": r["rounds"], "runs": r["tests"], "seconds": round(r["wall_s"], 1)})
    base = rows[0]["seconds"]
    for row in rows:
        row["speedup"] = round(base / row["seconds"], 2)
    info = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "commits": a.commits,
            "break_at": a.break_at, "rows": rows}  # fmt: skip
    if a.json:
        print(json.dumps(info, indent=1))
        return
    print(f"bisect over {a.commits} commits (breaks at {a.break_at}), {os.cpu_count()} CPUs")
    for row in rows:
        print(f"  {row['config']:<10} {row['rounds']} rounds  {row['runs']:>2} runs  {row['seconds']:6.1f} s  "
              f"{row['speedup']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
