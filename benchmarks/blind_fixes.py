"""What `tilescope triage --fix` repairs on the blind-written bugs of tests/blind_bugs: for each,
whether a fix was proposed and verified, whether it is the intended repair (the same line text,
or the same outputs as the intended repair on a third input set, on the interpreter), and the
seconds the triage with its fix took (the build and the failing run not counted).

    python benchmarks/blind_fixes.py [--only NAME,NAME] [--json FILE]

Target: at least 80% of the bugs with a one-line repair get a fix that is verified and right,
each within the default budget (60 CPU seconds) on 2 CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from blind_bugs.all import BUGS  # noqa: E402
from blind_bugs.score import build, expected_line  # noqa: E402

from tilescope.analysis.localize.metrics import close  # noqa: E402
from tilescope.analysis.triage.triage_command import triage  # noqa: E402
from tilescope.harness.specs import generate, outputs  # noqa: E402
from tilescope.launch.jit import JitFunction  # noqa: E402
from tilescope.runtime.interp import run_program  # noqa: E402

THIRD_SEED = 2


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text.split("#")[0])


def _program_with(bug, path: Path, line: int, new: str, tag: str):
    """The bug's program from a copy of its module with line ``line`` replaced by ``new``."""
    lines = path.read_text().splitlines(keepends=True)
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    lines[line - 1] = indent + new.strip() + "\n"
    return _program_of("".join(lines), path.name, getattr(bug.program, "name", None), tag)


def _program_of(text: str, file: str, name: str, tag: str):
    """The IR of program ``name`` in a module whose source is ``text`` (read while the file exists)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / f"blind_{tag}_{file}"
        copy.write_text(text)
        spec = importlib.util.spec_from_file_location(f"blind_bugs._copy_{tag}", copy)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return next(v for v in vars(module).values() if isinstance(v, JitFunction) and v.name == name).program()


def _same_outputs(bug, fix) -> bool:
    """The proposed fix and the intended repair give the same outputs on a third input set."""
    file, no = expected_line(bug)
    fn = getattr(bug.line[0], "fn", bug.line[0])
    path = Path(sys.modules[fn.__module__].__file__)
    try:
        want = _program_with(bug, path, no, bug.fixed, "want")
        text = path.read_text()
        for e in [fix.edit, *fix.also]:
            lines = text.splitlines(keepends=True)
            lines[e.line - 1] = e.after + "\n"
            text = "".join(lines)
        got = _program_of(text, path.name, want.name, "got")
        runs = []
        for program in (want, got):
            inputs = generate(bug.specs, THIRD_SEED)
            args = [inputs[p.name] for p in program.params]
            run_program(program, args)
            runs.append({s.name: inputs[s.name] for s in outputs(bug.specs)})
        return all(bool(close(runs[1][n], runs[0][n], bug.rtol, bug.atol).all()) for n in runs[0])
    except Exception as e:  # noqa: BLE001 - an intended line that does not drop in (a two-line fix) is "not compared"
        print(f"  ({bug.name}: not compared with the intended repair: {type(e).__name__}: {e})")
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated bug names (default: all)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    bugs = [b for b in BUGS if not only or b.name in only]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TILESCOPE_BUILD_DIR"] = str(Path(tmp) / "build_output")
        for bug in bugs:
            with contextlib.redirect_stdout(io.StringIO()):
                work = build(bug)
            t0 = time.perf_counter()
            rep = triage(work, fix=True, progress=lambda _: None)
            took = time.perf_counter() - t0
            fix = rep.fix
            verified = bool(fix and fix.verified and fix.edit is not None)
            same_text = verified and not fix.also and _norm(fix.edit.after) == _norm(bug.fixed)
            right = verified and (same_text or _same_outputs(bug, fix))
            s = fix.search if fix else None
            row = {"name": bug.name, "pattern": bug.pattern, "verified": verified, "same_text": same_text,
                   "right": right, "two_lines": bool(fix and fix.also), "after": fix.edit.after.strip() if verified else None,
                   "intended": bug.fixed.strip(), "why_none": None if verified else (fix.why_none if fix else None),
                   "second_set": bool(fix and fix.verified_on and "second" in fix.verified_on),
                   "screened": s.screened if s else 0, "compiled": s.compiled if s else 0, "seconds": round(took, 2)}  # fmt: skip
            rows.append(row)
            mark = "right" if right else ("verified" if verified else "none")
            print(f"{bug.name:34} {mark:8} {row['screened']:4} screened {row['compiled']:2} compiled {took:6.1f}s  "
                  f"{row['after'] or row['why_none']}", flush=True)  # fmt: skip
    n = len(rows)
    print(f"verified: {sum(r['verified'] for r in rows)} of {n}; right (same line, or same outputs as the intended "
          f"repair on seed {THIRD_SEED}): {sum(r['right'] for r in rows)}; same text: {sum(r['same_text'] for r in rows)}; "
          f"on two input sets: {sum(r['second_set'] for r in rows)}; median {statistics.median(r['seconds'] for r in rows):.1f}s, "
          f"max {max(r['seconds'] for r in rows):.1f}s")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
