"""`tilescope triage` on the model scripts at their own sizes, each with one realistic mistake
written into a copy of its source: what triage named against where the mistake is, and how long
it took (its own elapsed time, as the report prints it: the build and the failing run not counted).

    python benchmarks/triage_models.py [--only softmax,rope] [--fix] [--warm 2] [--json FILE]

Each model runs with a compiler cache of its own, so its first triage is cold (its probe and audit
builds compile anew; the model's own build, and the precompiled header, are not counted). With
``--warm N`` (default 2) ``tilescope triage BUILD`` then runs N more times on the same failing
build: the warm figure, the median of those (what a developer rerunning triage, or triaging the
next failure of the same program, waits).

Target: each named (category, kernel, op and line) in under 60 s on 2 CPUs; the warm median
<= 10 s. With ``--fix``
(triage's default budget, 60 CPU seconds): each gets its fix (the line as the model has it),
verified, and says how many candidates its search screened and compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mistake:
    """One line of a model script as it should read, as the mistake has it, and what triage
    should name."""

    model: str  # models/<model>.py
    right: str
    wrong: str
    category: str
    kernel: str
    op: str
    what: str


MISTAKES = (
    Mistake("softmax", "s = s * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))",
            "s = s + ts.row_sum(ts.exp(t - m_new))", "algorithm", "softmax_rows", "add",
            "online softmax: the running sum is not rescaled when the running max grows"),
    Mistake("rms_norm", "inv = ts.rsqrt(acc / float(cols) + eps)", "inv = ts.rsqrt(acc / float(cols - 1) + eps)",
            "algorithm", "rms_rows", "div", "the mean of squares divides by cols - 1"),
    Mistake("flash_attention", "alpha = ts.exp(m - m_new)", "alpha = ts.exp(m_new - m)", "nan",
            "attention_block", "sub", "the rescale factor's exponent has its operands swapped: exp(inf) on the first block"),
    Mistake("matmul", "acc = acc + ts.matmul(", "acc = ts.matmul(", "algorithm", "matmul_block", "matmul",
            "the K loop overwrites its accumulator instead of adding to it"),
    Mistake("rope", "ts.store(y, [i, 0, half], ts.cast(x2 * c + x1 * s, ts.bf16))",
            "ts.store(y, [i, 0, half], ts.cast(x2 * c - x1 * s, ts.bf16))", "algorithm", "rope_block", "sub",
            "the rotation's second half subtracts where it adds"),
    Mistake("layernorm", "d = t - ts.row_mean(t)", "d = t - ts.row_mean(t) * 0.5", "algorithm", "layernorm_rows", "mul",
            "the mean is halved before it is subtracted"),
)  # fmt: skip


def run(m: Mistake, work: Path, fix: bool = False, warm: int = 0) -> dict:
    """Copy the model with the mistake, run it with --triage (or --fix); what triage printed, parsed."""
    source = (ROOT / "models" / f"{m.model}.py").read_text()
    if m.right not in source:
        return {"model": m.model, "error": f"{m.right!r} is not in models/{m.model}.py"}
    script = work / f"{m.model}.py"
    script.write_text(source.replace(m.right, m.wrong, 1))
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if m.wrong in t)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'models'}", TILESCOPE_BUILD_DIR=str(work / "builds"),
               TILESCOPE_TRIAGE_BUDGET="60" if fix else "600", TILESCOPE_CACHE_DIR=str(work / "cache"))  # fmt: skip
    done = subprocess.run([sys.executable, str(script), "--fix" if fix else "--triage"], env=env, cwd=work,
                          capture_output=True, text=True, timeout=3600)  # fmt: skip
    out = done.stdout
    head = re.search(r"^\[triage\] \S+: (\w+)", out, re.M)
    if head is None:
        return {"model": m.model, "error": "no triage (the run passed?)", "tail": out[-400:]}
    culprit = re.search(r"^  culprit: (.*)$", out, re.M)
    said = culprit[1] if culprit else ""
    kernel = re.search(r"kernel (\w+)", said)
    op = re.search(r"op (\w+)", said)
    at = re.search(r" at (\S+):(\d+)", said)
    seconds = re.search(r"^  \((\d+(?:\.\d+)?)s\)$", out, re.M)
    return {
        "model": m.model, "what": m.what, "category": head[1], "kernel": kernel[1] if kernel else None,
        "op": op[1] if op else None, "line": f"{Path(at[1]).name}:{at[2]}" if at else None,
        "want": f"{m.category} {m.kernel} {m.op} {m.model}.py:{line}",
        "named": (head[1], kernel and kernel[1], op and op[1], at and f"{Path(at[1]).name}:{at[2]}")
        == (m.category, m.kernel, m.op, f"{m.model}.py:{line}"),
        "seconds": float(seconds[1]) if seconds else None,
        "warm_seconds": _warm(work, env, warm) if warm and not fix else None,
        **(_fix(out, m) if fix else {}),
    }  # fmt: skip


def _warm(work: Path, env: dict, n: int) -> float | None:
    """The median elapsed time of ``n`` more triages of the failing build (its saved data)."""
    builds = sorted(p.parents[2] for p in (work / "builds").glob("*/dfx_outputs/triage/report.json"))  # the one triaged
    if not builds:
        return None
    times = []
    for _ in range(n):
        done = subprocess.run([sys.executable, "-m", "tilescope", "triage", str(builds[-1]), "--json"], env=env,
                              cwd=work, capture_output=True, text=True, timeout=3600)  # fmt: skip
        try:
            times.append(float(json.loads(done.stdout)["elapsed_s"]))
        except (ValueError, KeyError):
            return None
    return statistics.median(times)


def _fix(out: str, m: Mistake) -> dict:
    """The fix triage printed: verified, whether its line is the model's, and its search's counts."""
    verified = re.search(r"^  fix \(verified on ", out, re.M) is not None
    after = re.search(r"^    \+ (.*)$", out, re.M)
    searched = re.search(r"searched: (\d+) candidates screened on the interpreter, (\d+) compiled and run, from "
                         r"(\d+) catalogue rules, in (\d+(?:\.\d+)?)s", out)  # fmt: skip
    return {"fix_verified": verified, "fix_right": verified and bool(after) and m.right in after[1],
            "fix_after": after[1] if after else None, "screened": int(searched[1]) if searched else 0,
            "compiled": int(searched[2]) if searched else 0, "fix_seconds": float(searched[4]) if searched else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated model names (default: all)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="the rows as JSON: into FILE, or alone on standard output (the table on standard error)")
    p.add_argument("--fix", action="store_true", help="triage --fix: measure the repair search too")
    p.add_argument("--warm", type=int, default=2, metavar="N", help="triages of the same build after the first (default 2)")
    args = p.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    say = sys.stderr if args.json == "-" else sys.stdout
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in MISTAKES:
            if only and m.model not in only:
                continue
            work = Path(tmp) / m.model
            work.mkdir()
            row = run(m, work, args.fix, args.warm)
            rows.append(row)
            if "error" in row:
                print(f"{m.model:16s} ERROR {row['error']}", file=say, flush=True)
                continue
            got = f"{row['category']} {row['kernel']} {row['op']} {row['line']}"
            warm = f" warm {row['warm_seconds']:5.1f}s" if row.get("warm_seconds") is not None else ""
            print(f"{m.model:16s} {'named' if row['named'] else 'MISSED':7s} {row['seconds']:6.1f}s{warm}  {got}"
                  + ("" if row["named"] else f"  (want {row['want']})"), file=say, flush=True)  # fmt: skip
            if args.fix:
                state = "right" if row["fix_right"] else ("verified" if row["fix_verified"] else "none")
                print(f"{'':16s} fix {state}: {row['screened']} screened, {row['compiled']} compiled, "
                      f"{row['fix_seconds']}s  {row['fix_after'] or ''}", file=say, flush=True)  # fmt: skip
    timed = [r["seconds"] for r in rows if r.get("seconds") is not None]
    named = sum(bool(r.get("named")) for r in rows)
    warm = [r["warm_seconds"] for r in rows if r.get("warm_seconds") is not None]
    if timed:
        print(f"named {named} of {len(rows)}; triage seconds: median {statistics.median(timed):.1f}, max {max(timed):.1f}"
              + (f"; warm: median {statistics.median(warm):.1f}, max {max(warm):.1f}" if warm else ""),
              file=say)  # fmt: skip
    if args.json == "-":
        print(json.dumps(rows, indent=1))
    elif args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
