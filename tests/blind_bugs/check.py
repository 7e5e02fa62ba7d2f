"""Check the blind bugs: each program as written must fail its comparison (or its run), and pass
once its culprit line reads as ``fixed``.

    PYTHONPATH=src:tests python tests/blind_bugs/check.py [module ...] [-k NAME] [--twice]

The fixed program is the bug's module with that one line replaced, imported from a copy.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import sys
import tempfile
import time
from pathlib import Path

import torch

from tilescope.harness import run_jit

MODULES = ("norms", "attention", "reductions", "elementwise", "gemm", "losses", "scans_and_gathers", "new_user", "blocks", "repairs")


def run(bug):
    return run_jit(bug.program, bug.specs, golden_fn=bug.golden, rtol=bug.rtol, atol=bug.atol,
                   runtime_cfg={"log_level": "error"})


def culprit(bug) -> tuple[Path, int]:
    """The file and 0-based line index of the bug's culprit line; asserts the text is unique in its function."""
    fn, text = bug.line
    py = fn.fn
    lines, start = inspect.getsourcelines(py)
    hits = [i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, f"{bug.name}: {text!r} occurs {len(hits)} times in {py.__name__}"
    return Path(inspect.getsourcefile(py)), start - 1 + hits[0]


def fixed_bug(bug, tmp: Path):
    path, idx = culprit(bug)
    src = path.read_text().splitlines(keepends=True)
    old = src[idx]
    assert old.strip() != bug.fixed, f"{bug.name}: the culprit line already reads as fixed"
    src[idx] = old[: len(old) - len(old.lstrip())] + bug.fixed + "\n"
    copy = tmp / f"{path.stem}_fixed_{bug.name}.py"
    copy.write_text("".join(src))
    spec = importlib.util.spec_from_file_location(copy.stem, copy)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[copy.stem] = mod
    spec.loader.exec_module(mod)
    return next(b for b in mod.BUGS if b.name == bug.name)


def nonfinite(result) -> bool:
    return any(isinstance(v, torch.Tensor) and v.is_floating_point() and not torch.isfinite(v).all()
               for v in (result.outputs or {}).values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("modules", nargs="*", default=MODULES)
    parser.add_argument("-k", default=None, help="only bugs whose name contains this")
    parser.add_argument("--twice", action="store_true", help="run the buggy program twice (determinism)")
    args = parser.parse_args(argv)
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.modules:
            mod = importlib.import_module(f"blind_bugs.{name}")
            for bug in mod.BUGS:
                if args.k and args.k not in bug.name:
                    continue
                t0 = time.time()
                res = run(bug)
                notes = []
                if res.passed:
                    notes.append("BUGGY PASSES")
                if args.twice and run(bug).passed != res.passed:
                    notes.append("NONDETERMINISTIC")
                fres = run(fixed_bug(bug, Path(tmp)))
                if not fres.passed:
                    notes.append(f"FIXED FAILS ({fres.error or 'mismatch'})")
                kind = "error" if res.error else ("nonfinite" if nonfinite(res) else "mismatch")
                status = "ok" if not notes else "BAD"
                if notes:
                    bad.append(bug.name)
                print(f"{status:3} {bug.name:28} {bug.category:14} {kind:9} {time.time() - t0:5.1f}s "
                      f"{' '.join(notes)}", flush=True)
    print(f"{len(bad)} bad: {bad}" if bad else "all ok")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
