import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import NO_LIMIT_S  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))

# A suite started with SIGINT ignored (under nohup, as a background job of a non-interactive shell,
# by a runner that starts jobs so) hands that on to every process it starts, and Python then
# installs no Ctrl-C handler: the tests that press Ctrl-C on a run, a sweep or the test process
# itself would wait for a stop that cannot land. Python's own handler here is inherited as the
# default action by every child (a handled signal is reset by exec), as at a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _unlimited_triage_budget():
    """Triages (in process, and in the commands and servers tests start) get a budget that cannot
    run out, module fixtures' included."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TILESCOPE_TRIAGE_BUDGET", str(NO_LIMIT_S))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _isolated_build_dir(tmp_path, monkeypatch):
    """Every test writes its build directories under its own tmp dir."""
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path / "build_output"))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A compiler cache of the test's own (never the user's), and fresh compile counters: the
    cache's path. Toolchain tests use it for every test (``pytest.mark.usefixtures``)."""
    from tilescope.toolchain import reset_stats

    cache = tmp_path / "cache"
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(cache))
    reset_stats()
    return cache


# Profiles of the fuzz net (tests/system/test_fuzz.py). Registered here so that
# `--hypothesis-profile fuzz` (make fuzz) can select one; no profile is loaded by default.
settings.register_profile("ci", max_examples=20, deadline=None, derandomize=False, print_blob=True)
settings.register_profile("fuzz", max_examples=10_000, deadline=None, derandomize=False, print_blob=True)
