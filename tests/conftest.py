import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))


@pytest.fixture(autouse=True)
def _isolated_build_dir(tmp_path, monkeypatch):
    """Every test writes its build directories under its own tmp dir."""
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path / "build_output"))
