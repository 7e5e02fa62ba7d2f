"""Reproducing a run on its exact data: snapshots, golden-data replay, runtime-dir reuse with
hand-edited C++ or IR (only edited files rebuilt), re-runnable builds (replay, debug/run.py,
pytest on a build dir), and every bad build or data directory."""

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope.analysis.data import DataError
from tilescope.build.signature_check import SignatureMismatch
from tilescope.harness import run_jit
from tilescope.toolchain import compiler as toolchain

import vector_dag

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

ROOT = Path(__file__).resolve().parents[2]


def saved_build(platform="sim"):
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        save_data=True,
        runtime_cfg={"platform": platform},
    )
    assert result.passed, result.error
    return result


def test_snapshot_files_and_contents():
    result = saved_build()
    data = result.work_dir / "data"
    assert sorted(p.name for p in (data / "in").iterdir()) == ["x.pt", "y.pt"]
    assert sorted(p.name for p in (data / "out").iterdir()) == ["out.pt"]
    golden = torch.load(data / "out" / "out.pt", weights_only=True)
    assert torch.equal(golden, result.golden["out"])
    x = torch.load(data / "in" / "x.pt", weights_only=True)
    torch.testing.assert_close(x, torch.load(data / "in" / "x.pt", weights_only=True))
    assert (data / "meta.json").read_text().count('"rtol"') == 1


def test_inout_and_scalar_snapshots(tmp_path):
    import rms_norm

    specs = rms_norm.specs()
    result = run_jit(rms_norm.rms_norm, specs, golden_fn=rms_norm.golden, save_data=True)
    eps = torch.load(result.work_dir / "data/in/eps.pt", weights_only=True)
    assert eps.dim() == 0 and eps.dtype == torch.float32 and abs(eps.item() - 1e-6) < 1e-12

    from orchestration_programs import features

    def golden(t):
        t["out"][:] = t["out"] + 1  # any values: only the files are checked here
        t["idx"][:] = 0

    specs = [
        ts.harness.TensorSpec("x", [4, 8], torch.float32),
        ts.harness.TensorSpec("out", [4, 8], torch.float32, init_value=2.0, is_output=True),
        ts.harness.TensorSpec("idx", [6, 8], torch.float32, is_output=True),
        ts.harness.ScalarSpec("s", torch.float32, 0.5),
    ]
    result = run_jit(features, specs, golden_fn=golden, save_data=True)
    data = result.work_dir / "data"
    assert sorted(p.name for p in (data / "in").iterdir()) == ["out.pt", "s.pt", "x.pt"]  # inout in both
    assert sorted(p.name for p in (data / "out").iterdir()) == ["idx.pt", "out.pt"]
    assert torch.equal(torch.load(data / "in/out.pt", weights_only=True), torch.full((4, 8), 2.0))


@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_replay_gives_identical_outputs(platform):
    first = saved_build(platform)
    again = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=lambda t: pytest.fail("golden_fn must not run when replaying"),
        golden_data=str(first.work_dir / "data"),
        runtime_cfg={"platform": platform},
        seed=123,  # ignored: inputs come from the data
    )
    assert again.passed
    assert torch.equal(again.outputs["out"], first.outputs["out"])
    replayed = ts.replay_compiled(first.work_dir, platform=platform)
    assert replayed.passed and torch.equal(replayed.outputs["out"], first.outputs["out"])


def test_runtime_dir_reuse_rebuilds_only_the_edited_kernel(capsys):
    first = saved_build()
    work = first.work_dir
    capsys.readouterr()
    toolchain.reset_stats()
    same = run_jit(
        vector_dag.vector_dag, vector_dag.SPECS, runtime_dir=str(work), golden_data=str(work / "data")
    )
    assert same.passed and torch.equal(same.outputs["out"], first.outputs["out"])
    assert toolchain.stats()["compiles"] == 0
    assert "[cpp->.so] no edits since last build; reusing 6 binaries" in capsys.readouterr().err

    cpp = work / "kernels/vec/combine.cpp"
    cpp.write_text(cpp.read_text().replace("0.5f", "0.25f"))
    toolchain.reset_stats()
    edited = run_jit(
        vector_dag.vector_dag, vector_dag.SPECS, runtime_dir=str(work), golden_data=str(work / "data")
    )
    err = capsys.readouterr().err
    assert "[cpp->.so] 1 edited source: kernels/vec/combine.cpp; rebuilding 1 of 6" in err
    assert toolchain.stats()["compiles"] + toolchain.stats()["cache_hits"] == 1
    assert not edited.passed  # the kernel now computes d * 0.25 + tanh(a)
    x = torch.load(work / "data/in/x.pt", weights_only=True)
    y = torch.load(work / "data/in/y.pt", weights_only=True)
    a = x + y
    d = torch.maximum(x * y, torch.nn.functional.silu(a))
    torch.testing.assert_close(edited.outputs["out"], d * 0.25 + torch.tanh(a), rtol=1e-5, atol=1e-6)

    # touch alone rebuilds nothing; a copied-in older text is noticed
    os.utime(cpp)
    ts.CompiledProgram.from_dir(work)
    assert "no edits since last build" in capsys.readouterr().err
    shutil.copy(work / "kernels/vec/add.cpp", work / "kernels/vec/add.cpp.orig")
    add = work / "kernels/vec/add.cpp"
    add.write_text(add.read_text() + "\n// a comment\n")
    ts.CompiledProgram.from_dir(work)
    shutil.copy(work / "kernels/vec/add.cpp.orig", add)
    ts.CompiledProgram.from_dir(work)
    assert capsys.readouterr().err.count("1 edited source: kernels/vec/add.cpp") == 2


def test_edited_orchestration_is_rebuilt(capsys):
    work = saved_build().work_dir
    orch = work / "orchestration/vector_dag.cpp"
    text = orch.read_text()
    # submit the combine task on b instead of d
    start = text.index('orch.task(FUNC_COMBINE, "combine", ')
    orch.write_text(
        text[:start]
        + text[start:].replace("task.add_input(d, {64, 128});", "task.add_input(b, {64, 128});", 1)
    )
    result = ts.replay_compiled(work)
    assert (
        "[cpp->.so] 1 edited source: orchestration/vector_dag.cpp; rebuilding 1 of 6"
        in capsys.readouterr().err
    )
    x = torch.load(work / "data/in/x.pt", weights_only=True)
    y = torch.load(work / "data/in/y.pt", weights_only=True)
    torch.testing.assert_close(result.outputs["out"], (x * y) * 0.5 + torch.tanh(x + y), rtol=1e-5, atol=1e-6)


def test_edited_ir_is_relowered_into_its_kernel(capsys):
    work = saved_build().work_dir
    ir = work / "ir/vector_dag.py"
    ir.write_text(ir.read_text().replace("* 0.5 +", "* 2.0 +"))
    result = ts.replay_compiled(work, platform="sim")
    err = capsys.readouterr().err
    assert "[ir->cpp] ir/vector_dag.py edited: re-lowered kernels/vec/combine.cpp" in err
    assert "rebuilding 1 of 6" in err
    assert "2.0f" in (work / "kernels/vec/combine.cpp").read_text()
    interp = ts.replay_compiled(work, platform="interp")
    torch.testing.assert_close(result.outputs["out"], interp.outputs["out"], rtol=1e-5, atol=1e-6)
    assert not result.passed  # differs from the saved golden


def test_ir_edit_never_overwrites_a_hand_edited_cpp():
    work = saved_build().work_dir
    cpp = work / "kernels/vec/combine.cpp"
    cpp.write_text(cpp.read_text().replace("0.5f", "0.25f"))
    ts.CompiledProgram.from_dir(work)  # the hand edit is built
    ir = work / "ir/vector_dag.py"
    ir.write_text(ir.read_text().replace("* 0.5 +", "* 2.0 +"))
    hand = cpp.read_text()
    with pytest.raises(
        ts.TilescopeError,
        match=r"ir/vector_dag.py was edited, and so were the C\+\+ files it "
        r"would regenerate: kernels/vec/combine.cpp\. Nothing was overwritten",
    ):
        ts.CompiledProgram.from_dir(work)
    assert cpp.read_text() == hand


def test_signature_changing_edits_are_refused_with_the_fix():
    work = saved_build().work_dir
    cpp = work / "kernels/vec/add.cpp"
    original = cpp.read_text()
    cpp.write_text(original.replace("TensorView<float> out(args[2]);", "TensorView<float> out(args[3]);"))
    with pytest.raises(SignatureMismatch) as info:
        ts.CompiledProgram.from_dir(work)
    msg = str(info.value)
    line = next(i for i, t in enumerate(cpp.read_text().splitlines(), 1) if "out(args[3])" in t)
    assert f"kernels/vec/add.cpp:{line}: reads args[3], but kernel add has 3 arguments (D.IN, D.IN, D.OUT)" in msg
    assert "re-run without --runtime-dir" in msg
    first = info.value.problems[0]  # each mismatch as data: the file, line and kernel a tool points at
    assert (first.file, first.line, first.kernel) == ("kernels/vec/add.cpp", line, "add")
    assert first.where == f"kernels/vec/add.cpp:{line}"
    cpp.write_text(original.replace("store(out,", "store(a,"))
    with pytest.raises(
        SignatureMismatch, match=r"stores into a \(args\[0\]\), which the signature declares D.IN"
    ):
        ts.CompiledProgram.from_dir(work)
    cpp.write_text(original)
    orch = work / "orchestration/vector_dag.cpp"
    orch.write_text(
        orch.read_text().replace("task.add_output(a, {64, 128});", "task.add_inout(a, {64, 128});", 1)
    )
    with pytest.raises(
        SignatureMismatch,
        match=r"a add task is given \(D.IN, D.IN, D.INOUT\), but kernel add takes "
        r"\(D.IN, D.IN, D.OUT\)",
    ):
        ts.CompiledProgram.from_dir(work)
    ir = work / "ir/vector_dag.py"
    orch.write_text(
        orch.read_text().replace("task.add_inout(a, {64, 128});", "task.add_output(a, {64, 128});", 1)
    )
    text = ir.read_text()
    ir.write_text(
        text.replace(
            "b: ts.Tensor[[64, 128], ts.f32], out: ts.Out[",
            "b: ts.Tensor[[64, 128], ts.f32], out: ts.InOut[",
            1,
        )
    )
    assert ir.read_text() != text
    with pytest.raises(SignatureMismatch, match=r"kernel add's parameters changed"):
        ts.CompiledProgram.from_dir(work)


def test_bad_build_directories_are_reported_and_left_alone(tmp_path):
    work = saved_build().work_dir
    before = sorted(p.relative_to(work) for p in work.rglob("*"))

    (work / "kernels/vec/mul.cpp").rename(tmp_path / "mul.cpp")
    with pytest.raises(ts.TilescopeError, match=r"is missing kernels/vec/mul.cpp: the build is incomplete"):
        ts.CompiledProgram.from_dir(work)
    (tmp_path / "mul.cpp").rename(work / "kernels/vec/mul.cpp")

    config = work / "kernel_config.py"
    text = config.read_text()
    config.write_text(text.replace("BUILD_FORMAT = 1", "BUILD_FORMAT = 99"))
    with pytest.raises(ts.TilescopeError, match=r"build format 99\); this version reads format 1: compile"):
        ts.CompiledProgram.from_dir(work)
    config.rename(tmp_path / "kernel_config.py")
    with pytest.raises(ts.TilescopeError, match=r"has no kernel_config.py: .*compile was interrupted"):
        ts.CompiledProgram.from_dir(work)
    (tmp_path / "kernel_config.py").write_text(text)
    shutil.copy(tmp_path / "kernel_config.py", config)
    with pytest.raises(ts.TilescopeError, match=r"build directory .*nonexistent does not exist"):
        ts.CompiledProgram.from_dir(work.parent / "nonexistent")
    (work / "kernels/vec/mul.so").unlink()  # a missing binary is simply rebuilt
    assert ts.replay_compiled(work).passed
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before


def test_golden_data_problems_are_all_listed(tmp_path):
    work = saved_build().work_dir
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    (data / "in/y.pt").unlink()
    torch.save(torch.zeros(3, 3), data / "in/x.pt")
    torch.save(torch.zeros(64, 128, dtype=torch.float64), data / "out/out.pt")
    torch.save(torch.zeros(1), data / "in/extra.pt")
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_data=str(data))
    assert not result.passed
    msg = result.error
    assert "does not match the program (4 problem(s))" in msg
    assert re.search(r"in/x.pt: shape \[3, 3\], expected \[64, 128\] for argument 'x'", msg)
    assert re.search(r"in/y.pt: missing \(argument 'y', in\)", msg)
    assert re.search(r"out/out.pt: dtype torch.float64, expected torch.float32", msg)
    assert re.search(r"in/extra.pt: not an input of the program", msg)
    with pytest.raises(DataError, match="is a build directory; pass its data directory instead"):
        from tilescope.analysis.data import load_snapshot
        from tilescope.harness.run_jit import data_args

        load_snapshot(work, data_args(ts.CompiledProgram.from_dir(work)))


def test_saving_never_overwrites_a_snapshot():
    work = saved_build().work_dir
    again = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        save_data=True,
        runtime_dir=str(work),
    )
    assert not again.passed and "already holds a data snapshot; it is kept as it is" in again.error


def test_replay_compiled_with_tensors_and_without_data():
    prog = vector_dag.vector_dag.compile()
    x, y, out = torch.randn(64, 128), torch.randn(64, 128), torch.zeros(64, 128)
    result = ts.replay_compiled(prog.work_dir, x, y, out)
    assert result.passed and torch.equal(result.outputs["out"], out) and out.abs().sum() > 0
    missing = ts.replay_compiled(prog.work_dir)
    assert not missing.passed and "has no saved data" in missing.error and "--save-data" in missing.error
    # log_level applies to the replay only, as to a run: the caller's level is as it was
    logger = logging.getLogger("tilescope")
    before = logger.level
    assert ts.replay_compiled(prog.work_dir, x, y, out, log_level="error").passed
    assert logger.level == before and before != logging.ERROR


def _run(cmd, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "models")}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=900)


def test_debug_run_py_and_tilescope_replay_work_from_any_directory(tmp_path):
    work = saved_build().work_dir
    proc = _run([sys.executable, str(work / "debug/run.py"), "-p", "interp"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] vector_dag on interp" in proc.stdout
    proc = _run([sys.executable, "-m", "tilescope.cli", "replay", str(work)], cwd=tmp_path)
    assert proc.returncode == 0 and "[PASS] vector_dag on sim" in proc.stdout, proc.stderr
    cpp = work / "kernels/vec/combine.cpp"
    cpp.write_text(cpp.read_text().replace("0.5f", "0.25f"))
    proc = _run([sys.executable, str(work / "debug/run.py")], cwd=tmp_path)
    assert proc.returncode == 1 and "[COMPARE] out: FAIL" in proc.stdout
    assert "1 edited source: kernels/vec/combine.cpp" in proc.stderr


SCENE = """
import torch

CASES = [{"name": "ones", "value": 1.0}, {"name": "twos", "value": 2.0, "rtol": 1e-4}]


def generate_args(case):
    return {"x": torch.full((64, 128), case["value"]), "y": torch.ones(64, 128), "out": torch.zeros(64, 128)}


def compute_golden(args):
    a = args["x"] + args["y"]
    d = torch.maximum(args["x"] * args["y"], torch.nn.functional.silu(a))
    args["out"][:] = d * 0.5 + torch.tanh(a)
"""


def test_pytest_runs_a_build_directory(tmp_path):
    work = saved_build().work_dir
    template = (work / "scene_test.py").read_text()
    assert "def generate_args(case: dict) -> dict:" in template and "TODO" in template
    assert "#   x: in tensor [64, 128] f32" in template
    proc = _run([sys.executable, "-m", "pytest", str(work), "-q", "-p", "no:cacheprovider"], cwd=tmp_path)
    assert "1 passed" in proc.stdout, proc.stdout + proc.stderr
    (work / "scene_test.py").write_text(SCENE)
    proc = _run(
        [sys.executable, "-m", "pytest", str(work), "-v", "--platform", "interp", "-p", "no:cacheprovider"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for case in ("saved_data", "ones", "twos"):
        assert re.search(rf"::{case} PASSED", proc.stdout), proc.stdout
    (work / "scene_test.py").write_text(template.replace("CASES = [\n", 'CASES = [\n    {"name": "todo"},\n'))
    proc = _run([sys.executable, "-m", "pytest", str(work), "-q", "-p", "no:cacheprovider"], cwd=tmp_path)
    assert proc.returncode == 1 and "generate_args is not written yet" in proc.stdout


def test_a_replay_of_a_build_that_is_gone_or_incomplete_creates_nothing(tmp_path, capsys):
    from tilescope.cli import main

    # NOTE: compiled first: a compile in the same second would take the name of a build removed
    gone, kept, half = (vector_dag.vector_dag.compile().work_dir for _ in range(3))
    shutil.rmtree(gone)  # what `tilescope clean` does to a build
    for p in list(kept.iterdir()):  # a cleaned build that kept a user's file
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (kept / "results.csv").write_text("mine\n")
    (half / "kernel_config.py").unlink()  # an interrupted compile
    before = {d: sorted(p.relative_to(d) for p in d.rglob("*")) for d in (kept, half)}
    for argv in ([str(gone)], [str(kept)], [str(half)], [str(kept), "--task", "0"]):
        assert main(["replay", *argv]) == 1
    for work in (gone, kept, half):
        result = ts.replay_compiled(work)
        assert not result.passed and result.error
        result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden, runtime_dir=str(work))
        assert not result.passed and result.error
    err = capsys.readouterr().err
    assert f"[ERROR] build directory {gone} does not exist" in err
    assert f"[ERROR] {kept} has no kernel_config.py" in err
    assert not gone.exists()  # not even a stub directory holding last_run.json
    assert {d: sorted(p.relative_to(d) for p in d.rglob("*")) for d in (kept, half)} == before
    assert not (kept / "last_run.json").exists() and not (kept / ".lock").exists()
