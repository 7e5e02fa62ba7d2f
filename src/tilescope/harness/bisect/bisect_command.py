"""``tilescope bisect``: the first commit at which a kernel went wrong, and its culprit line.

    tilescope bisect --good v1.2 --bad HEAD -- python models/attn.py --save-data
    tilescope bisect --good A --bad B --metric max_rel_err --threshold 1e-3 -- python m.py --save-data
    tilescope bisect --good A --bad B --tool-repo ~/tilescope -- python models/attn.py --save-data

The command runs at revisions between ``--good`` and ``--bad`` (``revisions``), each in a
temporary detached worktree, with ``git bisect run``'s conventions: exit 0 good, 125 skip, any
other exit bad; a run whose program the harness could not compile (its ``[RUN] compile NAME …
FAILED``: the user's code does not build there) is a skip with the reason, a run past
``--timeout`` is bad (a hang). With ``--metric`` a revision is bad
when the harness's comparison figure (``last_run.json``: ``max_abs_err``, ``max_rel_err``, or
``mismatch_fraction``, the largest over the outputs) is above ``--threshold``: a precision that
drifts over many commits. ``-j N`` tests N revisions of the range at once (a k-ary search).

With ``--tool-repo DIR`` the revisions are tilescope's own (the kernel stays as it is in the
working directory, the compiler and runtime move): the command runs with that revision's
``src`` first on ``PYTHONPATH`` and a compiler cache of its own.

The first bad commit is printed with its subject, author, date and the kernel sources it
changed, then the triage of its failing build (its saved data: the command must ``--save-data``):
``commit 3f2a1c broke it: models/attn.py:41, op row_sum, category algorithm``. The user's
working tree, index, HEAD and branches are never touched; the worktrees are removed, the builds
and logs stay in the bisect's folder (``--work``, default a new temporary folder).

Exit status: 0 the first bad commit was found, 1 it could not be told (skipped revisions around
it), 2 bad arguments or a range that cannot be bisected (a good revision that fails, a bad one
that passes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tilescope.analysis.progress import seconds_arg
from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import LAST_RUN, REPORT_DIR, REPORT_JSON, inside
from tilescope.errors import TilescopeError
from tilescope.harness.bisect import revisions as git
from tilescope.harness.bisect.revisions import BisectError, Commit
from tilescope.harness.sweep.case_run import case_dir, triage_build
from tilescope.harness.sweep.engines import Engine, Runner, positive_float
from tilescope.harness.sweep.grid import Case
from tilescope.harness.sweep.ray_engine import RayUnavailable

METRICS = ("max_abs_err", "max_rel_err", "mismatch_fraction")
SKIP = 125


def add_bisect_args(p: argparse.ArgumentParser) -> None:
    """``tilescope bisect``'s flags and the command after ``--``."""
    p.add_argument("--good", required=True, metavar="REV", help="a revision where the command passes")
    p.add_argument("--bad", required=True, metavar="REV", help="a later revision where it fails (e.g. HEAD)")
    p.add_argument("--metric", choices=METRICS, default=None,
                   help="decide by the harness's comparison figure instead of the exit status (with --threshold)")
    p.add_argument("--threshold", type=float, default=None, metavar="X",
                   help="with --metric: a revision whose figure is above X is bad")  # fmt: skip
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="revisions tested at once (a k-ary search; default 1, a binary one), on the engine --engine "
                        "names")  # fmt: skip
    p.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="where each revision runs: local (processes on this machine) or ray (Ray tasks on a local Ray "
                        "bound to 127.0.0.1, or the cluster --ray-address names; --work must be on a filesystem every "
                        "node sees at the same path)")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --engine ray: the cluster to use (auto: the one `ray start` made here; ray://host:port)")
    p.add_argument("--case-cpus", type=positive_float, default=1.0, metavar="N",
                   help="with --engine ray: the CPUs Ray reserves for each revision's run (default: 1)")
    p.add_argument("--timeout", type=seconds_arg, default=None, metavar="SECONDS",
                   help="a run still going after this long is killed and the revision is bad (a hang)")
    p.add_argument("--tool-repo", default=None, metavar="DIR", type=PATH_ARG,
                   help="bisect tilescope itself: revisions of this checkout's src, the kernel as it is here")
    p.add_argument("--work", default=None, metavar="DIR", type=PATH_ARG,
                   help="where the builds and logs of each revision go (default: a new temporary folder)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run at each revision")


class _Interrupted(TilescopeError):
    """Ctrl-C while revisions ran (their worktrees are removed, their builds and logs kept)."""


@dataclass
class Tested:
    """What the command said at one revision."""

    rev: str
    state: str  # good, bad, skip
    why: str
    seconds: float
    returncode: int | None = None
    metric: float | None = None
    builds: list[str] = field(default_factory=list)
    log: str = ""


def run_cli(args: argparse.Namespace) -> int:
    """Run the bisect ``args`` describe; its exit status (see the module docstring)."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        result = _Bisect(args, command).run()
    except (BisectError, RayUnavailable) as e:
        print(f"tilescope bisect: error: {e}", file=sys.stderr)
        return 2
    except _Interrupted as e:
        print(f"tilescope bisect: {e}", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(_text(result))
    return 0 if result["first_bad"] is not None else 1


class _Bisect:
    def __init__(self, args: argparse.Namespace, command: list[str]):
        if not command:
            raise BisectError("no command: give it after --, e.g. tilescope bisect --good A --bad B -- python m.py")
        if (args.metric is None) != (args.threshold is None):
            raise BisectError("--metric and --threshold go together: a revision is bad when its figure passes the threshold")
        if args.jobs < 1:
            raise BisectError(f"-j {args.jobs}: expected at least 1")
        if args.engine != "ray" and (args.ray_address or args.case_cpus != 1.0):
            raise BisectError(f"{'--ray-address' if args.ray_address else '--case-cpus'} is for --engine ray")
        self.engine = Engine(args.engine, args.jobs, args.timeout, args.ray_address, True, args.case_cpus)
        self.runner = Runner(self.engine)
        self.args, self.command = args, command
        self.cwd = Path.cwd()
        self.tool = Path(args.tool_repo).resolve() if args.tool_repo else None
        self.repo = git.top_level(self.tool or self.cwd)
        self.good = git.commit(self.repo, args.good, "--good")
        self.bad = git.commit(self.repo, args.bad, "--bad")
        self.revs = git.between(self.repo, self.good, self.bad)
        if args.ray_address and not args.work:
            raise BisectError("--ray-address: give --work, a folder every node of the cluster sees at the same path (the "
                              "revisions' worktrees and builds go there)")  # fmt: skip
        # NOTE: absolute: a Ray worker runs in the folder its `ray start` ran in
        self.work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="tilescope-bisect-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.tested: dict[str, Tested] = {}
        self.worktrees: list[Path] = []
        self.lock = threading.Lock()
        self.rounds = 0

    def say(self, text: str) -> None:
        print(f"[bisect] {text}", file=sys.stderr, flush=True)

    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        n = len(self.revs)
        self.say(f"{n} revision(s) after {self.good[:10]} (good) up to {self.bad[:10]} (bad), {self.args.jobs} at once; "
                 f"builds and logs in {self.work}")  # fmt: skip
        try:
            with self.runner:
                first, candidates, culprit = self.search(n)
        finally:
            for w in self.worktrees:
                git.remove_worktree(self.repo, w)
        commit = git.describe(self.repo, first) if first else None
        return {
            "repository": str(self.repo), "mode": "tool" if self.tool else "kernel", "good": self.good, "bad": self.bad,
            "command": self.command, "revisions": n, "jobs": self.args.jobs, "engine": self.engine.kind,
            "ray_nodes": self.runner.nodes, "rounds": self.rounds,
            "tests": len(self.tested), "seconds": round(time.perf_counter() - started, 2), "work": str(self.work),
            "first_bad": (asdict(commit) | {"kernel_files": self.kernel_files(commit, first)}) if commit else None,
            "candidates": [] if first else candidates, "culprit": culprit,
            "tested": [asdict(self.tested[r]) for r in [self.good, *self.revs] if r in self.tested],
        }  # fmt: skip

    def search(self, n: int) -> tuple[str | None, list[str], dict[str, Any] | None]:
        """The k-ary search: the first bad revision (None when skips hide it), the candidates, and
        the first bad one's culprit."""
        ends = self.test([self.good, self.bad])
        if ends[self.bad].state != "bad":
            raise BisectError(f"--bad {self.args.bad} is not bad: {ends[self.bad].why} (log: {ends[self.bad].log})")
        if ends[self.good].state != "good":
            raise BisectError(f"--good {self.args.good} is not good: {ends[self.good].why} (log: {ends[self.good].log})")
        lo, hi = -1, n - 1  # the last known good and the first known bad, as indices of self.revs
        while True:
            untested = [i for i in range(lo + 1, hi) if self.revs[i] not in self.tested]
            if not untested:
                break
            picks = _spread(untested, self.args.jobs)
            self.test([self.revs[i] for i in picks])
            states = {i: self.tested[r].state for i, r in enumerate(self.revs) if r in self.tested}
            hi = min([i for i in range(lo + 1, hi + 1) if states.get(i) == "bad"], default=hi)
            lo = max([i for i in range(lo + 1, hi) if states.get(i) == "good"], default=lo)
        candidates = self.revs[lo + 1 : hi + 1]
        first = candidates[0] if len(candidates) == 1 else None
        return first, candidates, self.culprit(first) if first else None

    def test(self, revs: list[str]) -> dict[str, Tested]:
        """Run the command at ``revs`` on the engine, at most ``-j`` at once; their results (also kept)."""
        self.rounds += 1
        cases: dict[str, Case] = {}
        for rev in revs:
            if rev in self.tested:
                continue
            prepared = self.prepare(rev)
            if isinstance(prepared, Tested):
                self.record(prepared)
            else:
                cases[rev] = prepared
        by_id = {c.id: rev for rev, c in cases.items()}

        failed: list[TilescopeError] = []

        def ended(case: Case, record: dict[str, Any]) -> None:
            try:
                self.record(self.classify(by_id[case.id], record))
            except (BisectError, _Interrupted) as e:  # NOTE: raised once the round's other runs ended
                failed.append(e)

        todo = list(cases.values())
        for start in range(0, len(todo), self.args.jobs):  # NOTE: Ray would start them all at once
            if self.runner.run(todo[start : start + self.args.jobs], self.work, False, str(self.cwd), ended):
                raise _Interrupted(f"interrupted: builds and logs of the revisions tested are in {self.work}")
            if failed:
                raise failed[0]
        return {r: self.tested[r] for r in revs}

    def record(self, t: Tested) -> None:
        self.tested[t.rev] = t
        self.say(f"round {self.rounds}: {t.rev[:10]} {t.state}" + (f" ({t.why})" if t.why else ""))

    def tree(self, rev: str) -> Path:
        """The worktree of ``rev``, in its case's folder."""
        return self.case_of(rev) / "tree"

    def case_of(self, rev: str) -> Path:
        return case_dir(self.work, Case(rev[:12], {}, ()))

    def prepare(self, rev: str) -> Case | Tested:
        """``rev``'s worktree and the case that runs the command in it (a skip when the user's
        directory does not exist there)."""
        tree = self.tree(rev)
        tree.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:  # NOTE: git's worktree records are one file per repository
            git.add_worktree(self.repo, rev, tree)
            self.worktrees.append(tree)
        settings = []
        if self.tool:
            path = os.pathsep.join([str(tree / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
            # NOTE: the runtime core of that revision, built apart
            settings = [f"PYTHONPATH={path}", f"TILESCOPE_CACHE_DIR={self.case_of(rev) / 'cache'}"]
            cwd = self.cwd
        else:
            cwd = tree / self.cwd.relative_to(self.repo)
            if not cwd.is_dir():
                return Tested(rev, "skip", f"{cwd.relative_to(tree)} does not exist at this revision", 0.0)
        argv = ("env", *settings, *self.command) if settings else tuple(self.command)
        return Case(rev[:12], {"rev": rev}, argv, str(cwd))

    def classify(self, rev: str, record: dict[str, Any]) -> Tested:
        """Good, bad or skip from the case's record (its exit status, its output, its figures)."""
        log = self.work / record["log"] if record.get("log") else self.case_of(rev) / "output.log"
        builds = [self.work / b for b in record.get("builds") or []]
        rc = record.get("returncode")
        t = Tested(rev, "bad", "", float(record.get("seconds") or 0.0), rc, None, [str(b) for b in builds], str(log))
        if record["status"] == "timeout":
            t.why = f"still running after {self.args.timeout:g} s (a hang)"
        elif record["status"] == "interrupted":
            raise _Interrupted(f"interrupted: builds and logs of the revisions tested are in {self.work}")
        elif rc is None:  # NOTE: the engine could not run it: that says nothing of the revision
            raise BisectError(f"revision {rev[:10]} could not be run: {record.get('why') or record['status']} "
                              f"(its log: {log}); nothing was concluded from it")  # fmt: skip
        elif rc == SKIP:
            t.state, t.why = "skip", "the command asked to skip it (exit 125)"
        elif rc not in (0, 1) or not self.args.metric:
            if rc == 0:
                t.state = "good"
            elif 0 < rc < 128 and _build_failed(log):
                t.state, t.why = "skip", f"the program could not be built at this revision: {_last_error(log)}"
            else:
                t.why = f"exit status {rc}" + (f" (signal {-rc})" if rc < 0 else "")
                t.why += " (the command was not found)" if rc == 127 else ""
        else:
            t.metric = _metric(builds, self.args.metric)
            if t.metric is None:
                t.state, t.why = "skip", f"no {self.args.metric} recorded (the run made no comparison)"
            else:
                t.state = "bad" if t.metric > self.args.threshold else "good"
                t.why = f"{self.args.metric} {t.metric:.3g} {'>' if t.state == 'bad' else '<='} {self.args.threshold:g}"
        return t

    def culprit(self, rev: str) -> dict[str, Any] | None:
        """The triage of the first bad revision's build (its worktree still there), its line made
        relative to the repository."""
        t = self.tested[rev]
        tree = self.tree(rev)
        cwd = self.cwd if self.tool else tree / self.cwd.relative_to(self.repo)
        found = triage_build([Path(b) for b in t.builds], cwd)
        found.pop("report", None)  # NOTE: saved in the build's dfx_outputs/triage/report.json
        line = found.get("line")
        if line:
            path, _, no = line.rpartition(":")
            full = (cwd / path).resolve()
            if full.is_relative_to(tree.resolve()):
                found["line"] = f"{full.relative_to(tree.resolve())}:{no}"
        return found

    def kernel_files(self, commit: Commit, rev: str) -> list[str]:
        """The files ``commit`` changed among the DSL sources its failing build was compiled from
        (every changed file when the build does not say)."""
        tree = self.tree(rev).resolve()
        sources: set[str] = set()
        for b in self.tested[rev].builds:
            try:
                recorded = json.loads(inside(b, REPORT_DIR, REPORT_JSON).read_text()).get("dsl_sources") or {}
            except (OSError, ValueError, TilescopeError):
                continue
            for f in recorded:
                p = Path(f).resolve()
                if p.is_relative_to(tree):
                    sources.add(str(p.relative_to(tree)))
        return [f for f in commit.files if f in sources] if sources else list(commit.files)


def _spread(indices: list[int], k: int) -> list[int]:
    """``k`` of ``indices`` spread evenly (all of them when there are no more): the points that cut
    the range into ``k + 1`` parts."""
    if len(indices) <= k:
        return indices
    n = len(indices)
    return sorted({indices[(j * n) // (k + 1)] for j in range(1, k + 1)})


def _metric(builds: list[Path], name: str) -> float | None:
    """The largest ``name`` over the outputs of the builds' last runs (None when none recorded it)."""
    values = []
    for b in builds:
        try:
            outputs = json.loads(inside(b, LAST_RUN).read_text()).get("outputs") or {}
        except (OSError, ValueError, TilescopeError):
            continue
        for o in outputs.values():
            if name == "mismatch_fraction":
                values.append(o["mismatches"] / max(o["numel"], 1))
            elif name in o:
                values.append(float(o[name]))
    return max(values) if values else None


_COMPILE_FAILED = re.compile(r"^\[RUN\] compile \S+ … FAILED", re.MULTILINE)


def _build_failed(log: Path) -> bool:
    """Whether the run's output says the harness could not compile the program (the line
    ``[RUN] compile NAME … FAILED``): a revision where the user's code does not build."""
    try:
        return _COMPILE_FAILED.search(log.read_text(errors="replace")) is not None
    except OSError:
        return False


def _last_error(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    errors = [x for x in lines if x.startswith("[ERROR]") or re.match(r"\w*Error\b", x)]
    return (errors or lines or ["no output"])[-1].strip()[:300]


def _text(r: dict[str, Any]) -> str:
    if r["first_bad"] is None:
        cands = ", ".join(c[:10] for c in r["candidates"])
        return (f"the first bad commit is one of {cands}: the revisions between were skipped; see the logs in "
                f"{r['work']}")  # fmt: skip
    c, f = r["first_bad"], r["culprit"] or {}
    where = ", ".join(x for x in (f.get("line"), f.get("op") and f"op {f['op']}",
                                  f.get("category") and f"category {f['category']}") if x)  # fmt: skip
    lines = [f"commit {c['hash'][:10]} broke it" + (f": {where}" if where else ""),
             f"  {c['subject']}", f"  {c['author']}, {c['date']}",
             f"  changed: {', '.join(c['kernel_files']) or '(no kernel source)'}"]  # fmt: skip
    if not f.get("ran", True) or not f:
        lines.append(f"  (no culprit line: {f.get('why', 'triage did not run')})")
    lines.append(f"  {r['tests']} revisions tested in {r['rounds']} rounds ({r['jobs']} at once), {r['seconds']:.1f} s; "
                 f"builds and logs: {r['work']}")  # fmt: skip
    return "\n".join(lines)
