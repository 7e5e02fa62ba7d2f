"""Helpers several test files share: DSL error lines, native kernels and orchestrations built
from C++ text, test programs of the tile library's headers, and a vector_dag build with saved
data to break copies of."""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tilescope.debug.failures import SavedArg, save_task_inputs
from tilescope.errors import DSLError
from tilescope.harness import run_jit
from tilescope.runtime import library
from tilescope.toolchain import BuildJob, build
from tilescope.toolchain import compiler as toolchain

INCLUDE = Path(__file__).resolve().parents[1] / "src" / "tilescope" / "runtime" / "include"

# A triage budget (seconds of wall time) that no machine runs out of, however slow or loaded: a
# verdict under test never depends on how busy the machine is (conftest sets it as the default,
# TILESCOPE_TRIAGE_BUDGET). Tests of running out pass a budget of their own.
NO_LIMIT_S = 24 * 3600.0


def line_of(fn, text: str) -> int:
    """The line of ``fn``'s source (a DSL function or a plain one) that contains ``text``."""
    lines, start = inspect.getsourcelines(getattr(fn, "fn", fn))
    return start + next(i for i, line in enumerate(lines) if text in line)


def dsl_error(jit) -> DSLError:
    """The DSLError compiling ``jit``'s front-end raises."""
    with pytest.raises(DSLError) as info:
        jit.program()
    return info.value


def native_entries(root: Path, kernels: dict[str, str], orchestrations: dict[str, str]) -> dict[str, Any]:
    """Every kernel (``k_<name>``) and orchestration (``o_<name>``) of C++ text, built once (in
    parallel) under ``root`` with a private cache, and loaded."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILESCOPE_CACHE_DIR", str(root / "cache"))
        jobs = {}
        for prefix, sources in (("k_", kernels), ("o_", orchestrations)):
            for name, text in sources.items():
                src = root / f"{prefix}{name}.cpp"
                src.write_text(text)
                jobs[prefix + name] = BuildJob(src, root / f"{prefix}{name}.so")
        build(list(jobs.values()))
        library.load_core()
    return {
        key: library.load_entry(job.output, "kernel_entry" if key.startswith("k_") else "orchestration_entry")
        for key, job in jobs.items()
    }


def header_program(source: str, folder: Path) -> Path:
    """A C++ program (``source``, a ``main`` over the tile library's headers) built in ``folder``
    with the kernels' flags and -Werror (no warnings); its path."""
    src, exe = folder / "main.cpp", folder / "main"
    src.write_text(source)
    flags = [f for f in (*toolchain.BASE_FLAGS, toolchain.march_flag()) if f not in ("-shared", "-fPIC")]
    cmd = [toolchain.find_cxx(), *flags, "-Werror", "-I", str(INCLUDE), str(src), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return exe


def vector_dag_build(base: Path, runtime_cfg: dict[str, Any]) -> Path:
    """A vector_dag build under ``base``, run once with ``runtime_cfg`` and saved data, with
    task 0's inputs saved as a failure would save them."""
    import vector_dag  # NOTE: from models/, which only the test session puts on the path
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        save_data=True,
        compile_cfg={"build_dir": str(base)},
        runtime_cfg=runtime_cfg,
    )
    assert result.passed, result.error
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    args = [SavedArg(0, "a", "input", x), SavedArg(1, "b", "input", y), SavedArg(2, "out", "output", x)]
    save_task_inputs(result.work_dir, 0, "add", "add", 0, args, "saved by the test")
    return result.work_dir


def generated_and_edited(program, tmp_path: Path, edit) -> tuple[Any, Any]:
    """``program`` (a one-kernel ``@ts.jit``) compiled twice under ``tmp_path``: as generated, and
    with its kernel's C++ rewritten by ``edit`` (text -> text; it must change it) and rebuilt."""
    from tilescope import CompiledProgram

    prog = program.compile(build_dir=str(tmp_path / "generated"))
    other = program.compile(build_dir=str(tmp_path / "edited"))
    (k,) = other.kernels
    source = other.work_dir / k["source"]
    text = source.read_text()
    edited = edit(text)
    assert edited != text, "the edit changed nothing"
    source.write_text(edited)
    return prog, CompiledProgram.from_dir(other.work_dir)


def private_copy(pristine: Path, tmp_path: Path) -> Path:
    """A copy of the build ``pristine`` under ``tmp_path``, free to break."""
    work = tmp_path / pristine.name
    shutil.copytree(pristine, work)
    (work / ".lock").unlink(missing_ok=True)
    return work


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# NOTE: CI installs chromium and playwright (.ci/run, the test extras), so there a page test must
# run; elsewhere it is skipped, saying what to install.
IN_CI = bool(os.environ.get("CI"))
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not IN_CI, reason="no chromium binary on PATH (apt-get install -y chromium)"
)


@contextlib.contextmanager
def headless_page(path: Path) -> Iterator[tuple[Any, list[str], list[str]]]:
    """``path`` open in headless chromium: (the playwright page, console errors, requested URLs)."""
    if IN_CI:
        assert CHROMIUM is not None, "CI must install chromium (.ci/run)"
        from playwright import sync_api
    else:
        sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    errors: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            yield page, errors, requests
        finally:
            browser.close()
