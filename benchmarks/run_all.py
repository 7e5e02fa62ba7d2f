"""Every performance case, measured in one run on this machine, against its target.

    python benchmarks/run_all.py [--quick] [--sections bandwidth,matmul,...] [--json]

Each section runs its benchmark script in a process of its own (``--json``) and reads its
figures back (the matmul program, which has no script, runs in this process); every ratio
compares implementations timed in the same process, in turns, with the sim's worker count as
torch's thread count (medians of repeated runs):

- bandwidth: rms_norm, softmax, layernorm (f32 N x N) vs torch eager, ``torch.compile`` (steady
  state; its first call separately) and a copy of the same bytes (benchmarks/bandwidth.py).
- matmul: the tile library's 1024^3 f32, bf16 and int8 kernels on one thread, per instruction-set
  path this CPU has, vs torch (benchmarks/tile_matmul.py); and a 1024^3 f32 program on every worker.
- models: the real-kernel models at their default sizes vs eager and compile (benchmarks/models.py).
- runtime: one ``prog.run`` of 8 tiny tasks (benchmarks/run_path.py); per task in 100k-task chains
  and fan-outs vs a bare ctypes call from a Python loop (benchmarks/runtime_overhead.py).
- compile: edit one kernel -> re-run, a cold 4-kernel compile (benchmarks/edit_rerun.py).
- dump: tensor dump throughput and cost per small record (benchmarks/dump_throughput.py).
- pmu: what ``enable_pmu`` costs a task (benchmarks/pmu_overhead.py).
- debugger: ``tilescope triage`` on the model scripts, each with a seeded mistake, cold (its first
  triage) and warm (the same build again), and how many it named (benchmarks/triage_models.py).

The header names the CPU, its vector instruction sets, the compiler and torch. ``--json`` prints
one object ``{"machine": {...}, "rows": [...]}``; each row has ``section``, ``case``, ``value``,
``unit``, ``vs`` (the ratios, named), ``target`` and ``met`` (null where the case has no target).
Exit status 1 when a section failed to run (its error is a row); a missed target is a figure,
not a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SECTIONS = ("bandwidth", "matmul", "models", "runtime", "compile", "dump", "pmu", "debugger")
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
)


def median_time(fn, reps: int, warmup: int = 2) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# The implementations run on torch's OpenMP threads (not the sim's workers) in turns().
TORCH_KEYS = frozenset({"eager", "compiled", "copy"})


def turns(calls: dict, rounds: int, per: int = 2, seed: int = 0, settle_s: float = 0.05) -> dict[str, dict[str, list]]:
    """The functions in ``calls`` timed in turns, ``rounds`` times: each round takes them in an
    order of its own (a fixed seed's shuffle, so on average each follows every other as often).
    In its turn a function makes a first call, then untimed calls until ``settle_s`` has passed
    since the turn began, then ``per`` timed calls. Returns, per key, ``"steady"``: the sorted
    seconds of the timed calls, and ``"first"``: (seconds, the key that ran just before) of each
    first call.

    Why the first calls are apart: the sim's workers and torch's OpenMP threads share the CPUs, and
    each pool keeps spinning for a while after its call returns (torch's for ~3 ms here:
    docs/performance.md), so a call right after the other pool's shares the cores with it (and
    finds its data out of the caches). A heavy op disturbs the next calls for longer: rms_norm
    4096² on sim ran 5.47 ms right after torch's eager version, 5.11 ms 10 ms later, 4.40 ms 30 ms
    later, 4.34 ms 100 ms later and 4.24 ms after its own calls, hence 50 ms. The timed calls
    measure an implementation as it runs on its own, and a disturbance of the machine still falls on every implementation alike; the
    first calls show what following the other pool costs (``after_other``)."""
    if per < 1:
        raise ValueError(f"turns: per must be >= 1 (the timed calls after each first one), got {per}")
    for fn in calls.values():
        fn()
    out: dict[str, dict[str, list]] = {key: {"steady": [], "first": []} for key in calls}
    order = list(calls.items())
    shuffle = random.Random(seed).shuffle
    previous = order[-1][0] if order else None  # the warm-up's last call
    for _ in range(rounds):
        shuffle(order)
        for key, fn in order:
            t0 = time.perf_counter()
            fn()
            out[key]["first"].append((time.perf_counter() - t0, previous))
            while time.perf_counter() - t0 < settle_s:
                fn()
            for _ in range(per):
                t1 = time.perf_counter()
                fn()
                out[key]["steady"].append(time.perf_counter() - t1)
            previous = key
    for got in out.values():
        got["steady"].sort()
    return out


def after_other(timed: dict, key: str) -> float | None:
    """Median seconds of ``key``'s first calls (``turns``) that followed the other pool's: a torch
    implementation for a sim one (TORCH_KEYS), a sim one for torch's; None when none did."""
    mine = key in TORCH_KEYS
    secs = [s for s, before in timed[key]["first"] if before is not None and (before in TORCH_KEYS) != mine]
    return statistics.median(secs) if secs else None


def after_torch(r: dict) -> dict:
    """The ``vs`` entry of a script's row with ``sim_after_torch`` (none when no call followed a torch op)."""
    return {} if r["sim_after_torch"] is None else {"sim after a torch op ms": r["sim_after_torch"] * 1e3}


def machine() -> dict:
    """The CPU model, its vector instruction sets, CPU count, compiler, Python and torch versions."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    try:
        gxx = subprocess.run(
            ["g++", "--version"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[0]
    except (OSError, IndexError):
        gxx = "not found"
    import torch

    return {
        "cpu": fields.get("model name", platform.processor() or "unknown"),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "cpus": os.cpu_count(),
        "gxx": gxx,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def run_script(script: str, *args: str) -> object:
    """The JSON that ``benchmarks/<script> --json *args`` prints, run in a process of its own with a
    fresh build directory (the user's compiler cache kept)."""
    with tempfile.TemporaryDirectory(prefix="tilescope-bench-") as tmp:
        env = {**os.environ, "TILESCOPE_BUILD_DIR": tmp}
        proc = subprocess.run(
            [sys.executable, str(HERE / script), "--json", *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    if proc.returncode:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{script} exited with {proc.returncode}:\n{tail}")
    lines = proc.stdout.splitlines()
    for start in (i for i, line in enumerate(lines) if line[:1] in "[{"):  # after any log lines
        try:
            return json.loads("\n".join(lines[start:]))
        except json.JSONDecodeError:
            continue
    raise RuntimeError(f"{script} printed no JSON:\n{proc.stdout[-500:]}")


def row(
    section: str, case: str, value: float | None, unit: str, vs: dict | None = None, target: str = "", met=None
) -> dict:
    return {
        "section": section,
        "case": case,
        "value": value,
        "unit": unit,
        "vs": vs or {},
        "target": target,
        "met": None if met is None else bool(met),
    }


def bandwidth(quick: bool) -> list[dict]:
    sizes = "1024,4096" if quick else "1024,2048,4096"
    rows = []
    for r in run_script("bandwidth.py", "--sizes", sizes, "--reps", "5" if quick else "9"):
        n = r["size"]
        vs = {
            "eager / sim": r["eager_over_sim"],
            "compile / sim": r["compiled_over_sim"],
            "sim / copy": r["sim_over_copy"],
            "sim with inputs unchecked / copy": r["sim_unchecked_over_copy"],
            "compile's first call s": r["compile_first"],
        }
        vs.update(after_torch(r))
        target = "eager / sim >= 1, compile / sim >= 1"
        met = r["eager_over_sim"] >= 1 and r["compiled_over_sim"] >= 1
        if n == 4096:
            target += ", sim / copy <= 1.3"
            met = met and r["sim_over_copy"] <= 1.3
        rows.append(row("bandwidth", f"{r['model']} {n}x{n} f32", r["sim"] * 1e3, "ms", vs, target, met))
    return rows


def matmul(quick: bool) -> list[dict]:
    res = run_script("tile_matmul.py", "--isa", "native,avx2", "--reps", "3" if quick else "5")
    ref = res["torch"]
    n = res["n"]
    rows = []
    for r in res["runs"]:
        where = f"{n}^3, 1 thread, {r['isa']}"
        rows.append(
            row(
                "matmul",
                f"tile f32 {where}",
                r["f32"] * 1e3,
                "ms",
                {"torch / tile": r["f32_vs_torch"]},
                "torch / tile >= 1.0",
                r["f32_vs_torch"] >= 1.0,
            )
        )
        rows.append(
            row(
                "matmul",
                f"tile bf16 {where}",
                r["bf16"] * 1e3,
                "ms",
                {
                    "torch's fastest / tile": r["bf16_vs_torch"],
                    "torch bf16 / tile": r["bf16_vs_torch_bf16"],
                    "torch f32 upcast / tile": r["bf16_vs_torch_upcast"],
                },
                "torch's fastest / tile >= 1.2",
                r["bf16_vs_torch"] >= 1.2,
            )
        )
        rows.append(
            row(
                "matmul",
                f"tile int8 {where}",
                r["i8"] * 1e3,
                "ms",
                {"tile f32 / tile int8": r["i8_vs_f32"], "torch _int_mm / tile": r["i8_vs_torch"]},
                "tile f32 / tile int8 >= 2",
                r["i8_vs_f32"] >= 2 and r["i8_exact"],
            )
        )
    rows.append(
        row(
            "matmul",
            f"torch f32 {n}^3, 1 thread",
            ref["f32"] * 1e3,
            "ms",
            {
                "bf16 ms": ref["bf16"] * 1e3,
                "bf16 upcast ms": ref["bf16_upcast"] * 1e3,
                "_int_mm ms": ref["i8"] * 1e3,
            },
        )
    )
    return rows


def matmul_program(quick: bool) -> list[dict]:
    """A 1024^3 f32 program (64^3 tiles) on every worker, vs torch on as many threads."""
    import torch

    sys.path.insert(0, str(ROOT / "models"))
    import matmul as matmul_model

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    n = 1024
    with (
        tempfile.TemporaryDirectory(prefix="tilescope-bench-") as tmp,
        mock.patch.dict(os.environ, {"TILESCOPE_BUILD_DIR": tmp}),  # restored on the way out
    ):
        prog = matmul_model.build(n, n, n, tm=64, tn=64, tk=64).compile()
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        reps = 5 if quick else 11
        timed = turns({"sim": lambda: prog.run(a, b, c, num_workers=threads), "eager": lambda: a @ b}, reps)
        sim, eager = (statistics.median(timed[key]["steady"]) for key in ("sim", "eager"))
    return [
        row(
            "matmul",
            f"program f32 {n}^3, {threads} workers",
            sim * 1e3,
            "ms",
            {"torch / sim": eager / sim},
            "torch / sim >= 1.0",
            eager / sim >= 1.0,
        )
    ]


def models(quick: bool) -> list[dict]:
    rows = []
    for r in run_script("models.py", "--reps", "3" if quick else "7"):
        vs = {
            "eager / sim": r["eager"] / r["sim"],
            "compile / sim": r["compiled"] / r["sim"],
            "compile's first call s": r["compile_first"],
        }
        vs.update(after_torch(r))
        met = r["eager"] >= r["sim"] and r["compiled"] >= r["sim"]
        rows.append(
            row(
                "models",
                f"{r['model']} ({r['size']})",
                r["sim"] * 1e3,
                "ms",
                vs,
                "eager / sim >= 1, compile / sim >= 1",
                met,
            )
        )
        if "sim_dot" in r:
            rows.append(
                row(
                    "models",
                    f"{r['model']} ({r['size']}), bf16_matmul=dot",
                    r["sim_dot"] * 1e3,
                    "ms",
                    {"eager / sim": r["eager"] / r["sim_dot"], "compile / sim": r["compiled"] / r["sim_dot"]},
                    "eager / sim >= 1, compile / sim >= 1",
                    r["eager"] >= r["sim_dot"] and r["compiled"] >= r["sim_dot"],
                )
            )
    return rows


def runtime(quick: bool) -> list[dict]:
    path = run_script("run_path.py", "--calls", "300" if quick else "2000")
    tiny = path["rms_norm 8x16 (8 tiny tasks) us/call"]
    rows = [
        row(
            "runtime",
            "one prog.run of 8 tiny tasks (Python included)",
            tiny,
            "us",
            {},
            "<= 50 us",
            tiny <= 50,
        )
    ]
    for key, value in path.items():
        if key != "rms_norm 8x16 (8 tiny tasks) us/call":
            rows.append(row("runtime", f"prog.run {key.removesuffix(' us/call')}", value, "us"))
    n = "20000" if quick else "100000"
    r = run_script("runtime_overhead.py", "--n", n, "--runs", "200" if quick else "1000")
    loop = r["python_loop_us"]
    rows += [
        row(
            "runtime",
            f"chain of {r['n']} empty tasks, per task",
            r["chain_us"],
            "us",
            {"Python ctypes loop / chain": loop / r["chain_us"]},
            "<= 0.4 us and below a ctypes call",
            r["chain_us"] <= 0.4 and r["chain_us"] < loop,
        ),
        row(
            "runtime",
            f"fan-out of {r['n']} empty tasks, per task",
            r["fanout_us"],
            "us",
            {"Python ctypes loop / fan-out": loop / r["fanout_us"]},
        ),
        row("runtime", "bare ctypes call of the kernel from a Python loop", loop, "us"),
        row("runtime", "C++ run of an empty graph", r["empty_run_us"], "us"),
        row("runtime", "C++ run of 8 no-op tasks", r["tiny_run_us"], "us"),
    ]
    return rows


def compile_latency(quick: bool) -> list[dict]:
    r = run_script("edit_rerun.py", "--reps", "2" if quick else "5")
    return [
        row(
            "compile",
            "edit one kernel -> re-run",
            r["rerun"],
            "s",
            {"one file's compile s": r["one_file"]},
            "<= 0.4 s",
            r["rerun"] <= 0.4,
        ),
        row(
            "compile",
            "cold compile of a 4-kernel program (PCH cached)",
            r["cold4"],
            "s",
            {},
            "<= 1.5 s",
            r["cold4"] <= 1.5,
        ),
        row(
            "compile",
            "one kernel file with the PCH",
            r["one_file"],
            "s",
            {"without / with": r["no_pch"] / r["one_file"]},
        ),
    ]


def dump(quick: bool) -> list[dict]:
    r = run_script("dump_throughput.py", "--no-overhead", "--repeat", "3" if quick else "9")
    t, rec = r["throughput"], r["records"]
    return [
        row(
            "dump",
            f"level 2, {t['payload_MB']} MB in {t['records']} records",
            t["dump_MB_per_s"],
            "MB/s",
            {},
            ">= 1000 MB/s",
            t["dump_MB_per_s"] >= 1000,
        ),
        row(
            "dump",
            f"{rec['records']} small records of {rec['record_bytes']} B, per record",
            rec["us_per_record"],
            "us",
            {},
            "<= 1 us",
            rec["us_per_record"] <= 1,
        ),
    ]


def pmu(quick: bool) -> list[dict]:
    r = run_script("pmu_overhead.py", "--reps", "5" if quick else "21")
    return [
        row("pmu", f"enable_pmu per task ({r['tasks']} tasks, core wall)", r["pmu_ns_per_task"] / 1e3, "us"),
        row("pmu", "the counters' reads per task", r["reads_ns_per_task"] / 1e3, "us"),
    ]


def debugger(quick: bool) -> list[dict]:
    r = run_script("triage_models.py", "--warm", "1" if quick else "2", *(["--only", "rms_norm,matmul"] if quick else []))
    cold = [x["seconds"] for x in r if x.get("seconds") is not None]
    warm = [x["warm_seconds"] for x in r if x.get("warm_seconds") is not None]
    named = sum(bool(x.get("named")) for x in r)
    rows = [row("debugger", f"models named by triage (category, kernel, op, line), of {len(r)}", named, "models")]
    if cold:
        rows.append(row("debugger", "triage of a model's failure, cold, median", statistics.median(cold), "s",
                        {"max s": max(cold)}))  # fmt: skip
    if warm:
        rows.append(row("debugger", "triage of a model's failure, warm, median", statistics.median(warm), "s",
                        {"max s": max(warm)}, "<= 10 s", statistics.median(warm) <= 10))  # fmt: skip
    return rows


RUNNERS = {
    "bandwidth": [bandwidth],
    "matmul": [matmul, matmul_program],
    "models": [models],
    "runtime": [runtime],
    "compile": [compile_latency],
    "dump": [dump],
    "pmu": [pmu],
    "debugger": [debugger],
}


def _ratios(vs: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" + ("" if k.endswith((" s", " ms")) else "x") for k, v in vs.items())


def print_table(info: dict, rows: list[dict]) -> None:
    print(f"CPU: {info['cpu']} ({info['cpus']} CPUs); vector ISA: {' '.join(info['isa']) or 'none known'}")
    print(f"{info['gxx']}; Python {info['python']}; torch {info['torch']}\n")
    section = None
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            print(f"\n## {section}\n\n| case | value | vs | target | met |\n|---|---|---|---|---|")
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        value = r["error"] if "error" in r else f"{r['value']:.3g} {r['unit']}"
        print(f"| {r['case']} | {value} | {_ratios(r['vs'])} | {r['target']} | {met} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument(
        "--sections", default="", help=f"comma-separated, of {','.join(SECTIONS)} (default: all)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args(argv)
    chosen = [s for s in args.sections.split(",") if s] or list(SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; expected some of {', '.join(SECTIONS)}")
    info = machine()
    rows: list[dict] = []
    failed = False
    for section in chosen:
        for runner in RUNNERS[section]:
            try:
                rows += runner(args.quick)
            except Exception as exc:  # one broken section must not hide the others' figures
                failed = True
                rows.append({**row(section, runner.__name__, None, ""), "error": f"failed: {exc}"})
    if args.json:
        print(json.dumps({"machine": info, "rows": rows}, indent=1))
    else:
        print_table(info, rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
