"""localize, triage and triage --fix over every seeded bug of tests/seeded_bugs.py: each names the
category, the culprit and its line the entry says, and the fix it says verifies."""

import json

import pytest
from seeded_bugs import BUGS, SeededBug

from tilescope.analysis.localize.localize_command import localize
from tilescope.analysis.report import Fix
from tilescope.analysis.triage.triage_command import triage
from tilescope.harness import run_jit
from tilescope.harness.replay import replay_compiled

_BUILT: dict[str, object] = {}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Where the bugs' builds go: a folder of the module's (a test's own tmp dir is removed when it
    passes, and the builds are shared by the tests of every bug)."""
    return tmp_path_factory.mktemp("seeded")


def built(bug: SeededBug, base):
    """The bug's build, run once on its inputs with --save-data (one per process)."""
    if bug.name not in _BUILT:
        result = run_jit(bug.program, bug.specs, golden_fn=bug.golden, rtol=bug.rtol, atol=bug.atol, save_data=True,
                         compile_cfg={"build_dir": str(base)})  # fmt: skip
        assert not result.passed and result.work_dir is not None and (result.work_dir / "data" / "in").is_dir()
        _BUILT[bug.name] = result.work_dir
    return _BUILT[bug.name]


@pytest.mark.slow
@pytest.mark.parametrize("bug", [b for b in BUGS if b.localize is not None], ids=lambda b: b.name)
def test_localize_names_the_culprit(bug, builds):
    rep = localize(built(bug, builds))
    bug.localize.check(rep)
    if rep.tolerance is not None:  # the tolerance it proposes passes
        assert replay_compiled(built(bug, builds), platform="sim", rtol=rep.tolerance.rtol, atol=rep.tolerance.atol).passed


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
def test_triage_names_the_culprit_and_its_fix_verifies(bug, builds):
    work = built(bug, builds)
    rep = triage(work, fix=bug.fix is not None)
    bug.triage.check(rep)
    if bug.fix is not None:
        bug.fix.check(rep.fix)
        on_disk = json.loads((work / "dfx_outputs" / "triage" / "report.json").read_text())
        assert Fix.from_json(on_disk["fix"]) == rep.fix  # what report.json holds
