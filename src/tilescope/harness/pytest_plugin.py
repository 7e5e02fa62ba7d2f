"""pytest plugin: ``pytest BUILD_DIR`` runs a build's cases.

A build directory (one holding ``kernel_config.py`` and ``build_state.json``) is collected as
one test file whose cases are its saved data (``data/``, when present) and every entry of
``CASES`` in its ``scene_test.py``. Each case compiles nothing: hand edits in the build are
rebuilt first (only the edited files), then the case runs and every output is compared.

Options: ``--platform sim|interp``, ``--dump-tensor [LEVEL]``, ``--enable-dep-gen``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tilescope.build.paths import BUILD_STATE, DATA_DIR, KERNEL_CONFIG, SCENE_TEST, inside
from tilescope.knobs import PLATFORMS


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--platform``, ``--dump-tensor [LEVEL]`` and ``--enable-dep-gen`` for build cases."""
    group = parser.getgroup("tilescope", "tilescope build directories")
    group.addoption(
        "--platform", choices=PLATFORMS, default="sim", help="platform of build cases (default: sim)"
    )
    group.addoption(
        "--dump-tensor",
        type=int,
        nargs="?",
        const=2,
        default=0,
        metavar="LEVEL",
        help="tensor dump level of cases",
    )
    group.addoption("--enable-dep-gen", action="store_true", default=False, help="write the dependency graph")


def _is_build_dir(path: Path) -> bool:
    return inside(path, KERNEL_CONFIG).is_file() and inside(path, BUILD_STATE).is_file()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """True for a build's ``scene_test.py`` (BuildFile reads it); None leaves the decision to pytest."""
    # A build's scene_test.py is read by BuildFile, not imported as a test module (several
    # builds hold a file of that name, which pytest's module import would confuse).
    if collection_path.name == SCENE_TEST and _is_build_dir(collection_path.parent):
        return True
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A BuildFile for the ``kernel_config.py`` of a build directory; None for any other file."""
    if file_path.name == "kernel_config.py" and _is_build_dir(file_path.parent):
        return BuildFile.from_parent(parent, path=file_path)
    return None


def _load_scene(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"tilescope_scene_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildFile(pytest.File):
    """The cases of one build directory."""

    def collect(self):
        """``saved_data`` when the build has ``data/``, then one case per entry of ``scene_test.CASES``."""
        work = self.path.parent
        if inside(work, DATA_DIR).is_dir():
            yield BuildCase.from_parent(self, name="saved_data", case=None)
        scene_path = inside(work, SCENE_TEST)
        if not scene_path.is_file():
            return
        scene = _load_scene(scene_path)
        for i, case in enumerate(getattr(scene, "CASES", [])):
            if not isinstance(case, dict):
                raise pytest.UsageError(f"{scene_path}: CASES[{i}] must be a dict, got {case!r}")
            yield BuildCase.from_parent(self, name=str(case.get("name", f"case{i}")), case=case, scene=scene)


class BuildCase(pytest.Item):
    """One case of a build, compared with its golden: its saved data (``case`` None) or a scene case."""

    def __init__(self, *, case: dict | None, scene: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.case = case
        self.scene = scene

    def _runtime_cfg(self) -> dict[str, Any]:
        opt = self.config.getoption
        cfg: dict[str, Any] = {"platform": opt("--platform")}
        if opt("--dump-tensor"):
            cfg["enable_dump_tensor"] = opt("--dump-tensor")
        if opt("--enable-dep-gen"):
            cfg["enable_dep_gen"] = True
        return cfg

    def runtest(self) -> None:
        """Run the case (hand edits rebuilt first); a BuildCaseFailure with the report if it fails."""
        work = self.path.parent
        if self.case is None:
            from tilescope.harness.replay import replay_compiled

            result = replay_compiled(work, **self._runtime_cfg())
        else:
            result = self._run_scene_case(work)
        if not result.passed:
            details = [result.error] if result.error else []
            for rep in result.comparisons:
                if not rep.passed:
                    details += rep.lines(result.rtol, result.atol)
            raise BuildCaseFailure("\n".join(details) or "outputs differ from the golden")

    def _run_scene_case(self, work: Path):
        from tilescope.analysis.compare import check_tolerances
        from tilescope.errors import TilescopeError
        from tilescope.harness.run_jit import (
            Execution,
            Expected,
            Phases,
            RunResult,
            execute,
            finish,
            golden_outputs,
        )
        from tilescope.launch.program import CompiledProgram
        from tilescope.runtime.run_config import RunConfig

        try:
            compiled = CompiledProgram.from_dir(work)
        except TilescopeError as e:
            raise BuildCaseFailure(str(e)) from None
        try:
            args = self.scene.generate_args(self.case)
        except NotImplementedError as e:
            raise BuildCaseFailure(
                f"{work}/{SCENE_TEST}: generate_args is not written yet ({e})"
            ) from None
        missing = [a.name for a in compiled.args if a.name not in args]
        if missing:
            raise BuildCaseFailure(f"scene_test.py generate_args returned no value for: {', '.join(missing)}")
        outputs = [a.name for a in compiled.args if a.is_output]

        def golden(values: dict[str, Any]) -> None:
            try:
                self.scene.compute_golden(values)
            except NotImplementedError as e:
                raise BuildCaseFailure(
                    f"{work}/{SCENE_TEST}: compute_golden is not written yet ({e})"
                ) from None

        cfg = self._runtime_cfg()
        result = RunResult(False, work_dir=work, platform=cfg["platform"])
        rtol, atol = self.case.get("rtol", 1e-5), self.case.get("atol", 1e-5)
        try:
            check_tolerances(rtol, atol)
        except TilescopeError as e:
            raise BuildCaseFailure(f"{inside(work, SCENE_TEST)}: case {self.name!r}: {e}") from None
        try:
            run = Execution(compiled, RunConfig.from_keywords(cfg), Expected(golden_outputs(golden, outputs), rtol, atol))
            execute(Phases(None), result, run, dict(args))
        except TilescopeError as e:
            result.error = str(e)
        return finish(result, compiled.name)

    def repr_failure(self, excinfo, style=None):
        """A BuildCaseFailure's report alone, without a traceback."""
        if isinstance(excinfo.value, BuildCaseFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        """Name the case ``<build>::<case>`` at the build directory."""
        return self.path.parent, None, f"{self.path.parent.name}::{self.name}"


class BuildCaseFailure(Exception):
    """A build case failed: the message is the report, no traceback needed."""
