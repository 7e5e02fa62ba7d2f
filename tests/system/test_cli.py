"""The tilescope command."""

import subprocess
import sys

import pytest

from tilescope.cli import main


@pytest.mark.slow
def test_doctor_reports_every_check(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("g++", "C++17", "cache dir", "torch", "runtime core"):
        assert any(line.startswith("ok") and name in line for line in out.splitlines()), name
    assert "next: python models/rms_norm.py -p sim" in out


def test_doctor_names_a_missing_compiler(monkeypatch, capsys):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL g++" in out and "apt-get install g++" in out
    assert "problem(s): g++, C++17" in out


def test_console_script_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "tilescope.cli", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("tilescope ")
