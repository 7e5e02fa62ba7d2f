"""Compiling, loading and calling programs: build directories, the build cache, kernel_config.py,
and every bad input a caller can make."""

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import tilescope as ts
from tilescope.language.frontend import kernel_ir
from tilescope.toolchain import compiler as toolchain

import rms_norm

F = ts.f32


def args_for_rms(rows=512, cols=512):
    return torch.randn(rows, cols), torch.rand(1, cols), torch.zeros(rows, cols), 1e-6


@pytest.mark.slow
def test_call_compiles_once_and_writes_outputs_in_place(tmp_path):
    x, g, y, eps = args_for_rms()
    fn = rms_norm.build()
    fn(x, g, y, eps)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    builds = list((tmp_path / "build_output").iterdir())
    y2 = torch.zeros_like(y)
    fn(x, g, y2, eps)
    assert list((tmp_path / "build_output").iterdir()) == builds  # cached in memory
    torch.testing.assert_close(y2, y, rtol=0, atol=0)


@pytest.mark.slow
def test_build_directory_layout_and_kernel_config(tmp_path):
    prog = rms_norm.build().compile(dump_passes=True)
    w = prog.work_dir
    assert re.fullmatch(r"_jit_rms_norm_\d{8}_\d{6}(_\d+)?", w.name)
    for rel in [
        "kernels/vec/rms_rows.cpp",
        "kernels/vec/rms_rows.so",
        "orchestration/rms_norm.cpp",
        "orchestration/rms_norm.so",
        "kernel_config.py",
        "ir/rms_norm.py",
        "report/summary.txt",
        "report/report.json",
        "passes_dump/00_after_FrontEnd.py",
        "passes_dump/03_after_EliminateDeadCode.py",
    ]:
        assert (w / rel).is_file(), rel
    import runpy

    cfg = runpy.run_path(str(w / "kernel_config.py"))
    D = ts.ArgDirection
    assert cfg["ORCHESTRATION"]["signature"] == [D.IN, D.IN, D.OUT, D.SCALAR]
    assert cfg["KERNELS"][0]["signature"] == [D.IN, D.IN, D.OUT, D.SCALAR]
    assert cfg["KERNELS"][0]["name"] == "rms_rows" and cfg["KERNELS"][0]["core"] == "vec"
    assert cfg["CALLABLE"] == {"orchestration": cfg["ORCHESTRATION"], "incores": cfg["KERNELS"]}
    assert cfg["ARGS"][0] == {"name": "x", "direction": "in", "shape": [512, 512], "dtype": "f32"}
    assert cfg["ARGS"][3] == {"name": "eps", "direction": "scalar", "shape": None, "dtype": "f32"}
    orch = (w / "orchestration/rms_norm.cpp").read_text()
    assert "task.add_input(x.slice({{r, r + 64}, {0, 512}}), {64, 512});" in orch
    assert "task.add_output(y.slice({{r, r + 64}, {0, 512}}), {64, 512});" in orch
    assert "task.add_scalar(TS_F32, eps);" in orch and "orch.submit(task);" in orch
    kernel = (w / "kernels/vec/rms_rows.cpp").read_text()
    assert re.search(r"acc = acc \+ row_sum\(fuse\(t\) \* t\);  // @ .*rms_norm\.py:\d+", kernel)
    summary = (w / "report/summary.txt").read_text()
    assert "program rms_norm: 8 tasks per run" in summary and "rms_rows" in summary


@pytest.mark.slow
def test_loaded_build_runs_on_both_platforms():
    prog = rms_norm.build().compile()
    loaded = ts.CompiledProgram.from_dir(prog.work_dir)
    x, g, _, eps = args_for_rms()
    outs = []
    for platform in ("sim", "interp"):
        y = torch.zeros(512, 512)
        info = loaded.run(x, g, y, eps, platform=platform)
        assert info.platform == platform and info.num_tasks == 8
        outs.append(y)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_second_compile_runs_no_compiler():
    fn = rms_norm.build(rows=128, cols=256, block=32, chunk=128)
    fn.compile()
    toolchain.reset_stats()
    second = fn.compile()
    assert toolchain.stats()["compiles"] == 0
    assert toolchain.stats()["cache_hits"] == 2
    assert (second.work_dir / "kernels/vec/rms_rows.so").is_file()


@pytest.mark.slow
def test_builds_started_in_the_same_second_get_distinct_directories():
    fn = rms_norm.build(rows=128, cols=256, block=32, chunk=128)
    dirs = {fn.compile().work_dir for _ in range(3)}
    assert len(dirs) == 3


@pytest.mark.slow
def test_wrong_arguments_are_all_listed_by_name():
    prog = rms_norm.build().compile()
    x = torch.randn(512, 256)  # wrong shape
    g = torch.rand(1, 512, dtype=torch.float64)  # wrong dtype
    y = torch.zeros(512, 1024)[:, ::2]  # non-contiguous
    with pytest.raises(ts.ArgumentError) as info:
        prog.run(x, g, y, 1e-6)
    msg = str(info.value)
    assert "3 argument(s) of rms_norm do not match" in msg
    assert "argument 'x': shape [512, 256] (expected [512, 512])" in msg
    assert "argument 'gamma': dtype torch.float64 (expected torch.float32)" in msg
    assert "argument 'y': a non-contiguous tensor (expected contiguous: pass .contiguous())" in msg
    with pytest.raises(ts.ArgumentError, match=r"argument 'x': device meta \(a meta tensor has a shape but no data; "
                                               r"expected a CPU tensor holding the values\)"):  # fmt: skip
        prog.run(torch.empty(512, 512, device="meta"), torch.rand(1, 512), torch.zeros(512, 512), 1e-6)
    with pytest.raises(ts.ArgumentError, match=r"rms_norm\(x, gamma, y, eps\) takes 4 arguments, got 2"):
        prog.run(x, g)
    with pytest.raises(ts.ArgumentError, match=r"argument 'eps': expected a Python number"):
        prog.run(*args_for_rms()[:3], "small")


@pytest.mark.slow
def test_later_runs_still_check_arguments_and_options_and_run_without_the_dfx_directory():
    prog = rms_norm.build(8, 16, block=1, chunk=16).compile()
    x, g, y = torch.randn(8, 16), torch.rand(1, 16), torch.zeros(8, 16)
    for _ in range(2):
        prog.run(x, g, y, 1e-6, num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"argument 'x': shape \[8, 8\] \(expected \[8, 16\]\)"):
        prog.run(torch.randn(8, 8), g, y, 1e-6, num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"argument 'y': a non-contiguous tensor"):
        prog.run(x, g, torch.zeros(8, 32)[:, ::2], 1e-6, num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"argument 'gamma': dtype torch.float64"):
        prog.run(x, g.double(), y, 1e-6, num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"argument 'y': requires grad"):
        prog.run(x, g, torch.zeros(8, 16, requires_grad=True), 1e-6, num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"argument 'eps': expected a Python number"):
        prog.run(x, g, y, "small", num_workers=2)
    with pytest.raises(ts.ArgumentError, match=r"takes 4 arguments, got 5"):
        prog.run(x, g, y, 1e-6, 1e-6, num_workers=2)
    with pytest.raises(ts.ConfigError, match=r"runtime_cfg\['num_workers'\] = -1"):
        prog.run(x, g, y, 1e-6, num_workers=-1)
    shutil.rmtree(prog.work_dir / "dfx_outputs")  # a crash would make it again (test_isolate.py)
    y2 = torch.zeros(8, 16)
    prog.run(x, g, y2, 1e-6, num_workers=2)
    torch.testing.assert_close(y2, y, rtol=0, atol=0)


@pytest.mark.slow
def test_unknown_runtime_and_compile_keys_list_the_known_ones():
    prog = rms_norm.build().compile()
    with pytest.raises(
        ts.ConfigError, match=r"unknown runtime_cfg key\(s\): workers; known keys: .*num_workers"
    ):
        prog.run(*args_for_rms(), workers=2)
    with pytest.raises(ts.ConfigError, match=r"unknown compile_cfg key\(s\): opt; known keys: .*dump_passes"):
        rms_norm.build().compile(opt=3)
    with pytest.raises(
        ts.ConfigError, match=r"runtime_cfg\['platform'\] = 'npu': expected one of sim, interp"
    ):
        prog.run(*args_for_rms(), platform="npu")


@ts.kernel
def copy_rows(x: ts.Tensor[[16, 8], F], y: ts.Out[[16, 8], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [16, 8]))


@ts.jit
def ragged(x: ts.Tensor[[64, 8], F], y: ts.Out[[64, 8], F], n: ts.Scalar[ts.i32]):
    for r in ts.range(0, 64, 16):
        copy_rows(x[r : r + n, :], y[r : r + 16, :])


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_region_shape_mismatch_at_run_time_names_task_kernel_and_argument(platform):
    prog = ragged.compile()
    x, y = torch.randn(64, 8), torch.zeros(64, 8)
    prog.run(x, y, 16, platform=platform)
    torch.testing.assert_close(y, x)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, 12, platform=platform)
    msg = str(info.value)
    assert "copy_rows" in msg and "[12, 8]" in msg and "[16, 8]" in msg
    assert "argument 0" in msg or "arg 0" in msg


def test_missing_compiler_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(ts.ToolchainError) as info:
        rms_norm.build(rows=64, cols=128, block=32, chunk=128).compile()
    msg = str(info.value)
    assert "/nonexistent/g++" in msg and "apt-get install g++" in msg


# -- tracebacks end at the user's call ----------------------------------------------------------


@ts.kernel
def squares(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    t = ts.load(x, [0, 0], [4, 4])
    ts.store(y, [0, 0], t**2)  # squares: the DSL error


@ts.jit
def calls_squares(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    squares(x, y)


def traceback_of(call) -> tuple[BaseException, str, int]:
    """The exception ``call`` raises, its printed traceback and how many frames of it are
    tilescope's own."""
    import traceback

    with pytest.raises(ts.TilescopeError) as info:
        call()
    text = "".join(traceback.format_exception(info.value))
    package = str(Path(ts.__file__).parent)
    return info.value, text, len(re.findall(rf'File "{re.escape(package)}/', text))


def test_dsl_error_traceback_ends_at_the_users_call(monkeypatch):
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(lines, 1) if s.rstrip().endswith("# squares: the DSL error"))
    x, y = torch.zeros(4, 4), torch.zeros(4, 4)
    for call in (lambda: calls_squares(x, y), lambda: calls_squares.compile(), lambda: kernel_ir(squares)):
        err, text, internal = traceback_of(call)
        assert isinstance(err, ts.DSLError) and f"{__file__}:{line}: operator ** (Pow)" in str(err)
        assert internal == 1, text  # the entry point that re-raises it, nothing below
        assert "contextlib.py" not in text and "concurrent" not in text, text  # nor the stdlib it calls
        assert 'File "' + __file__ in text  # the user's call
        assert text.rstrip().endswith(
            "(tilescope's internal frames are hidden; TILESCOPE_TRACEBACK=full shows them)"
        )
    monkeypatch.setenv("TILESCOPE_TRACEBACK", "full")
    _, text, internal = traceback_of(lambda: calls_squares(x, y))
    assert internal > 10 and "frontend.py" in text and "internal frames are hidden" not in text


@pytest.mark.slow
def test_run_errors_hide_internal_frames_too(tmp_path):
    prog = rms_norm.build().compile()
    x, g, y, eps = args_for_rms()
    err, text, internal = traceback_of(lambda: prog.run(x[:4], g, y, eps))
    assert isinstance(err, ts.ArgumentError) and "argument 'x': shape [4, 512]" in str(err)
    assert internal == 1, text
    err, text, internal = traceback_of(lambda: ts.CompiledProgram.from_dir(tmp_path / "missing"))
    assert f"build directory {tmp_path / 'missing'} does not exist" in str(err) and internal == 1, text


def _read_only(path: Path, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor over a np.memmap of ``path`` opened read-only (torch warns once that it is not writable)."""
    np.zeros(shape, np.float32).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.from_numpy(np.memmap(path, dtype=np.float32, mode="r", shape=shape))


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True])
def test_an_output_in_read_only_memory_is_refused_before_the_run_not_a_segfault(tmp_path, isolate):
    import triage_programs as tp

    x, g, _, eps = args_for_rms()
    prog = rms_norm.build().compile()
    with pytest.raises(ts.ArgumentError) as info:
        prog.run(x, g, _read_only(tmp_path / "y.bin", (512, 512)), eps, isolate=isolate)
    assert str(info.value) == (
        "1 argument(s) of rms_norm cannot be written:\n  argument 'y' (out tensor [512, 512] f32): its memory is "
        "mapped read-only (a tensor made from a np.memmap opened with mode='r', or from another read-only buffer), "
        "and a run writes its out parameters in place: open the memmap with mode='r+' (writes reach the file) or "
        "mode='c' (copy on write), or pass a copy (y.clone())")
    # an InOut too; a read-only input is fine (a run never writes it)
    acc = tp.running_sum.compile(build_dir=str(tmp_path))
    with pytest.raises(ts.ArgumentError, match=r"argument 'acc' \(inout tensor \[64, 64\] f32\): its memory is "
                                               r"mapped read-only .* writes its inout parameters in place"):  # fmt: skip
        acc.run(torch.randn(4 * tp.B, tp.C), _read_only(tmp_path / "acc.bin", (tp.B, tp.C)), isolate=isolate)
    y = torch.zeros(512, 512)
    prog.run(_read_only(tmp_path / "x.bin", (512, 512)), g, y, eps, isolate=isolate)
    assert not y.any()  # x is all zeros: so is y
    writable = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="w+", shape=(512, 512))
    prog.run(x, g, torch.from_numpy(writable), eps, isolate=isolate)
    torch.testing.assert_close(torch.from_numpy(np.array(writable)), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                                                       + eps) * g)  # fmt: skip


@pytest.mark.slow
def test_numpy_arrays_and_meta_scalars_are_refused_with_what_to_pass(tmp_path):
    x, g, y, eps = args_for_rms()
    prog = rms_norm.build().compile()
    np.zeros((512, 512), np.float32).tofile(tmp_path / "y.bin")
    read_only = np.memmap(tmp_path / "y.bin", dtype=np.float32, mode="r", shape=(512, 512))
    with pytest.raises(ts.ArgumentError) as info:
        prog.run(x.numpy(), g, read_only, torch.tensor(eps, device="meta"))
    msg = str(info.value)
    assert msg.startswith("3 argument(s) of rms_norm do not match the compiled program:")
    assert ("argument 'x': expected a torch.Tensor (in tensor [512, 512] f32), got ndarray: pass torch.from_numpy(x), "
            "which shares its memory") in msg  # fmt: skip
    assert ("argument 'y': expected a torch.Tensor (out tensor [512, 512] f32), got memmap that is read-only (a "
            "np.memmap opened with mode='r', or writeable=False), and a run writes its out parameters: pass "
            "torch.from_numpy of a writable array (a memmap opened with mode='r+' or 'c', or y.copy())") in msg
    assert ("argument 'eps': a meta tensor, which has no value (expected a Python number, scalar f32): pass the "
            "value itself") in msg  # fmt: skip
    prog.run(x, g, y, torch.tensor(eps))  # a 0-d CPU tensor is a scalar's value


def test_a_traceback_entry_without_a_line_number_is_kept_with_its_frames_line():
    """A Ctrl-C between two lines (inside the import machinery) leaves an entry whose tb_lineno is
    None: the filtered traceback takes the frame's line instead of failing."""
    import sys
    import types

    from tilescope._tracebacks import filter_traceback

    frame = sys._getframe()
    entry = types.SimpleNamespace(tb_frame=frame, tb_lasti=0, tb_lineno=None, tb_next=None)
    kept = filter_traceback(entry)
    assert kept is not None and kept.tb_frame is frame and isinstance(kept.tb_lineno, int) and kept.tb_lineno > 0
