"""What `tilescope triage` names on the blind-written bugs of tests/blind_bugs: for each, the
category, kernel, op and DSL line it named against where the mistake is, and the seconds the
triage took (the build and the failing run not counted).

    python benchmarks/blind_bugs.py [--only NAME,NAME] [--json FILE]

Target: every bug named (all four right), each in under 60 s on 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from blind_bugs.all import BUGS  # noqa: E402
from blind_bugs.score import triage_named  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated bug names (default: all)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    bugs = [b for b in BUGS if not only or b.name in only]
    os.environ.setdefault("TILESCOPE_TRIAGE_BUDGET", "600")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TILESCOPE_BUILD_DIR"] = str(Path(tmp) / "build_output")
        for bug in bugs:
            named = triage_named(bug)
            hits = named.hits(bug)
            rows.append({**named.to_json(), "hits": hits, "expected": {
                "category": bug.category, "kernel": bug.kernel, "op": bug.op}})  # fmt: skip
            marks = "".join("x" if hits[k] else "." for k in ("category", "kernel", "op", "line"))
            print(f"{bug.name:32} {marks}  {named.category:14} {named.kernel or '-':24} {named.op or '-':10} "
                  f"{(named.line or '-').rsplit('/', 1)[-1]:28} {named.seconds:6.1f}s", flush=True)  # fmt: skip
    full = sum(all(r["hits"].values()) for r in rows)
    print(f"named (category, kernel, op and line): {full} of {len(rows)}; "
          + ", ".join(f"{k} {sum(r['hits'][k] for r in rows)}" for k in ("category", "kernel", "op", "line"))
          + f"; median {statistics.median(r['seconds'] for r in rows):.1f}s, max {max(r['seconds'] for r in rows):.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
