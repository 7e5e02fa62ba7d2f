"""A program compiled for the interp platform never runs the C++ compiler; a later sim run builds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope.harness import run_jit

import rms_norm

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

ROWS, COLS = 128, 256


@pytest.fixture
def recording_cxx(tmp_path, monkeypatch):
    """CXX is a script that records every call and fails: any g++ run is seen (and breaks the build)."""
    calls = tmp_path / "cxx_calls.txt"
    script = tmp_path / "fake-g++"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(script))
    return calls


def args():
    return torch.randn(ROWS, COLS), torch.rand(1, COLS), torch.zeros(ROWS, COLS), 1e-6


def expected(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def test_interp_call_runs_no_compiler_and_sim_builds_it_later(recording_cxx, monkeypatch):
    fn = rms_norm.build(ROWS, COLS)
    x, g, y, eps = args()
    fn(x, g, y, eps, platform="interp")
    assert not recording_cxx.exists()
    torch.testing.assert_close(y, expected(x, g, eps), rtol=1e-5, atol=1e-5)
    [compiled] = fn._compiled.values()
    work = compiled.work_dir
    assert (work / "ir" / f"{compiled.name}.py").is_file() and (work / "kernel_config.py").is_file()
    assert sorted(work.glob("kernels/*/*.cpp")) and not list(work.glob("kernels/*/*.so"))

    monkeypatch.delenv("CXX")
    y_sim = torch.zeros_like(y)
    fn(x, g, y_sim, eps)  # the same build, now on sim: its binaries are built first
    assert list(work.glob("kernels/*/*.so")) and (work / f"orchestration/{compiled.name}.so").is_file()
    torch.testing.assert_close(y_sim, y, rtol=1e-5, atol=1e-5)


def test_harness_on_interp_runs_no_compiler(recording_cxx):
    result = run_jit(
        rms_norm.build(ROWS, COLS),
        rms_norm.specs(ROWS, COLS),
        rms_norm.golden,
        runtime_cfg={"platform": "interp"},
    )
    assert result.passed, result.error
    assert not recording_cxx.exists()
    assert not list(Path(result.work_dir).glob("**/*.so"))


def test_compile_only_still_builds_the_cpp(recording_cxx):
    result = run_jit(
        rms_norm.build(ROWS, COLS),
        rms_norm.specs(ROWS, COLS),
        rms_norm.golden,
        runtime_cfg={"platform": "interp"},
        compile_only=True,
    )
    assert not result.passed and os.path.getsize(recording_cxx) > 0


def test_replay_on_interp_runs_no_compiler_and_sim_builds_it(recording_cxx, monkeypatch):
    x, g, y, eps = args()
    work = rms_norm.build(ROWS, COLS).compile(build_cpp=False).work_dir
    cpp = sorted(work.glob("kernels/*/*.cpp"))[0]
    cpp.write_text(cpp.read_text() + "// edited by hand\n")
    result = ts.replay_compiled(work, x, g, y, eps, platform="interp", log_level="error")
    assert result.passed, result.error
    assert not recording_cxx.exists()
    torch.testing.assert_close(y, expected(x, g, eps), rtol=1e-5, atol=1e-5)
    monkeypatch.delenv("CXX")
    y_sim = torch.zeros_like(y)
    result = ts.replay_compiled(work, x, g, y_sim, eps, platform="sim", log_level="error")
    assert result.passed, result.error
    assert cpp.with_suffix(".so").is_file()
    torch.testing.assert_close(y_sim, y, rtol=1e-5, atol=1e-5)
