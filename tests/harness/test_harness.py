"""The harness: specs, phase lines, comparison reports, compare_fn, compile_only, errors."""

import argparse
import re
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope.analysis.compare import compare_tensor
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit

import rms_norm
import vector_dag


def test_init_value_forms_and_inout_outputs():
    calls = []

    def init(shape, dtype):
        calls.append((shape, dtype))
        return torch.ones(shape, dtype=dtype)

    assert torch.equal(TensorSpec("a", [2, 3], torch.float32, init_value=init).make(), torch.ones(2, 3))
    assert calls == [((2, 3), torch.float32)]
    assert torch.equal(
        TensorSpec("a", [2], torch.int32, init_value=7).make(), torch.full((2,), 7, dtype=torch.int32)
    )
    src = torch.arange(4.0)
    made = TensorSpec("a", [4], torch.float32, init_value=src).make()
    assert torch.equal(made, src) and made.data_ptr() != src.data_ptr()
    assert torch.equal(TensorSpec("o", [3], torch.float32, is_output=True).make(), torch.zeros(3))
    with pytest.raises(Exception, match=r"init_value produced \(5,\), expected shape \[4\]"):
        TensorSpec("a", [4], torch.float32, init_value=lambda s, dtype: torch.zeros(5)).make()


@pytest.mark.slow
def test_failing_comparison_reports_counts_coordinates_and_first_mismatches(capsys):
    def wrong_golden(t):
        vector_dag.golden(t)
        t["out"][5, 7] += 1.0
        t["out"][9, 100] = float("nan")

    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=wrong_golden, rtol=1e-5, atol=1e-6)
    out = capsys.readouterr().out
    assert not result.passed and result.error is None
    rep = result.comparisons[0]
    assert rep.mismatches == 2 and rep.numel == 64 * 128
    assert rep.max_abs_at in ((5, 7), (9, 100))
    assert rep.nan_expected == 1 and rep.nan_actual == 0
    assert [c for c, _, _ in rep.first] == [(5, 7), (9, 100)]
    assert "[COMPARE] out: FAIL  2 of 8192 elements mismatch" in out
    assert "first mismatches:" in out and "[5, 7]: got" in out
    assert "NaN: 0 got / 1 expected" in out
    assert "[FAIL] vector_dag on sim" in out


def test_compare_tensor_coordinates():
    a = torch.zeros(3, 4)
    e = torch.zeros(3, 4)
    e[2, 1] = 0.5
    rep = compare_tensor("t", a, e, rtol=0, atol=0.1)
    assert not rep.passed and rep.mismatches == 1
    assert rep.max_abs_at == (2, 1) and rep.max_abs_diff == 0.5
    assert rep.first == [((2, 1), 0.0, 0.5)]


def test_a_golden_nan_no_output_matches_is_said_on_its_own_line():
    a, e = torch.zeros(3, 4), torch.zeros(3, 4)
    e[1, 2], a[2, 0], e[2, 0] = float("nan"), float("nan"), float("nan")  # the second: NaN against NaN matches
    rep = compare_tensor("y", a, e, rtol=0, atol=0.1)
    assert (rep.mismatches, rep.golden_nan, rep.to_json()["golden_nan"]) == (1, 1, 1)
    lines = rep.lines(0, 0.1)
    assert lines[3] == ("    the golden holds NaN at 1 of the mismatching elements, which no output value matches: check "
                        "golden_fn there (tilescope triage names the line of it that made them)")  # fmt: skip
    assert not any("golden holds" in x for x in compare_tensor("y", a, a, rtol=0, atol=0.1).lines(0, 0.1))


@pytest.mark.slow
def test_compare_fn_replaces_the_tolerance_check(capsys):
    seen = []

    def compare(actual, expected):
        seen.append(actual.shape)
        return False, "custom check says no"

    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, compare_fn=compare)
    assert not result.passed and seen == [torch.Size([512, 512])]
    assert "[COMPARE] y: FAIL  custom check says no" in capsys.readouterr().out


@pytest.mark.slow
def test_compile_only_and_no_golden(capsys):
    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), compile_only=True)
    assert result.passed and result.work_dir.is_dir() and result.num_tasks == 0
    out = capsys.readouterr().out
    assert "run on" not in out and "[PASS]" not in out  # nothing ran, so nothing passed
    assert out.splitlines()[-1] == (
        f"[COMPILED] rms_norm: compiled OK, not run (compile only): {result.work_dir}"
    )
    again = run_jit(rms_norm.rms_norm, rms_norm.specs(), compile_only=True, runtime_dir=str(result.work_dir))
    assert again.passed and again.work_dir == result.work_dir
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[COMPILED] rms_norm: loaded OK, not run (compile only): {result.work_dir}"
    )
    result = run_jit(rms_norm.rms_norm, rms_norm.specs())
    assert result.passed and result.outputs["y"].abs().sum() > 0
    assert "no golden_fn: outputs are not checked" in capsys.readouterr().out


@pytest.mark.slow
def test_errors_end_the_run_with_a_report(capsys):
    specs = rms_norm.specs()
    swapped = [specs[1], specs[0], *specs[2:]]
    result = run_jit(rms_norm.rms_norm, swapped, golden_fn=rms_norm.golden)
    assert not result.passed
    assert (
        "specs must follow the program's parameters in order: expected ['x', 'gamma', 'y', 'eps']"
        in result.error
    )
    captured = capsys.readouterr()
    assert "[ERROR] specs must follow" in captured.err and "[FAIL] rms_norm" in captured.out


@pytest.mark.slow
def test_inputs_are_reproducible_from_the_seed():
    a = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, seed=5)
    b = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, seed=5)
    assert torch.equal(a.outputs["y"], b.outputs["y"])


def test_cli_flags_map_onto_run_jit_kwargs():
    parser = add_harness_args(argparse.ArgumentParser())
    kw = harness_kwargs(
        parser.parse_args(
            [
                "-p",
                "interp",
                "--log-level",
                "v0",
                "--dump-passes",
                "--workers",
                "3",
                "--float64",
                "--seed",
                "9",
                "--dump-args",
            ]
        )
    )
    assert kw["runtime_cfg"] == {  # only the flags given: the rest is left to the knobs' defaults
        "platform": "interp",
        "num_workers": 3,
        "log_level": "v0",
        "enable_dump_tensor": 2,
        "float64": True,
    }
    assert kw["compile_cfg"] == {"dump_passes": True} and kw["seed"] == 9
    assert harness_kwargs(parser.parse_args(["--dump-tensor", "1"]))["runtime_cfg"]["enable_dump_tensor"] == 1


@pytest.mark.slow
def test_log_level_silences_phase_lines(capsys):
    result = run_jit(
        rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, runtime_cfg={"log_level": "error"}
    )
    out = capsys.readouterr().out
    assert result.passed
    assert "[RUN]" not in out and "[COMPARE]" not in out
    assert "[PASS] rms_norm on sim" in out


def test_scalar_spec():
    assert ScalarSpec("eps", torch.float32, 1e-6).make() == 1e-6


@pytest.mark.slow
def test_invalid_log_level_in_the_environment_is_a_failed_run(monkeypatch, capsys):
    monkeypatch.setenv("TILESCOPE_LOG_LEVEL", "verbose")
    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden)
    assert not result.passed and result.work_dir is None
    assert (
        "environment variable TILESCOPE_LOG_LEVEL='verbose' (log_level): expected one of debug"
        in result.error
    )
    captured = capsys.readouterr()
    assert "[ERROR] environment variable TILESCOPE_LOG_LEVEL='verbose'" in captured.err
    assert "[FAIL] rms_norm on sim" in captured.out
    monkeypatch.setenv("TILESCOPE_LOG_LEVEL", "error")  # a valid one still applies
    try:
        result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden)
        assert result.passed and "[RUN]" not in capsys.readouterr().out
    finally:
        from tilescope._logging import DEFAULT_LEVEL, configure

        configure(DEFAULT_LEVEL)


def test_matching_infinities_are_equal():
    inf, nan = float("inf"), float("nan")
    e = torch.tensor([[inf, -inf, 1.0], [nan, 2.0, -3.0]])
    rep = compare_tensor("t", e.clone(), e, rtol=1e-5, atol=1e-5)
    assert rep.passed and rep.mismatches == 0
    assert rep.max_abs_diff == 0.0 and rep.max_rel_diff == 0.0
    assert rep.inf_actual == rep.inf_expected == 2 and rep.nan_actual == rep.nan_expected == 1
    assert "max abs diff 0 at [0, 0]; max rel diff 0 at [0, 0]" in rep.lines(1e-5, 1e-5)[1]
    a = e.clone()
    a[0, 1] = inf  # -inf expected
    a[1, 2] = -3.5
    rep = compare_tensor("t", a, e, rtol=1e-5, atol=1e-5)
    assert not rep.passed and rep.mismatches == 2
    assert (rep.max_abs_diff, rep.max_abs_at) == (inf, (0, 1))
    assert (rep.max_rel_diff, rep.max_rel_at) == (inf, (0, 1))
    assert rep.first == [((0, 1), inf, -inf), ((1, 2), -3.5, -3.0)]


@pytest.mark.slow
def test_log_levels_filter_runtime_messages_and_log_dir_collects_them(tmp_path, monkeypatch, capsys):
    import rms_norm as model

    prog = model.build(rows=128, cols=256, block=32, chunk=128).compile()
    x, g, y = torch.randn(128, 256), torch.rand(1, 256), torch.zeros(128, 256)
    prog.run(x, g, y, 1e-6, log_level="v5")
    assert "[runtime]" not in capsys.readouterr().err  # a v3 message: below the default
    prog.run(x, g, y, 1e-6, log_level="v0")
    err = capsys.readouterr().err
    assert re.search(r"\[v3\] \[runtime\] rms_norm: 4 tasks on \d+ workers, \d+ dependencies", err)
    monkeypatch.setenv("TILESCOPE_LOG_DIR", str(tmp_path / "logs"))
    prog.run(x, g, y, 1e-6, log_level="debug")
    logs = list((tmp_path / "logs").glob("tilescope_*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} v3 +\[runtime\] rms_norm: 4 tasks", text, re.M)
    prog.run(x, g, y, 1e-6, log_level="error")
    assert logs[0].read_text() == text  # filtered out at the error level
    monkeypatch.delenv("TILESCOPE_LOG_DIR")
    with ts.knobs.override(log_dir=str(tmp_path / "logs2")):  # the knob set by a block, not the environment
        prog.run(x, g, y, 1e-6, log_level="debug")
    (log,) = (tmp_path / "logs2").glob("tilescope_*.log")
    assert re.search(r" v3 +\[runtime\] rms_norm: 4 tasks", log.read_text())


def _missing_input(t):
    return t["x"] * t["no_such_input"]  # golden helper: raises


@pytest.mark.slow
def test_a_golden_fn_that_raises_is_an_error_line_at_the_users_frame(capsys):
    def golden(t):
        t["y"][:] = _missing_input(t)

    source = Path(__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if s.rstrip().endswith("# golden helper: raises"))
    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=golden)
    assert not result.passed
    assert result.error == (
        f"golden_fn test_a_golden_fn_that_raises_is_an_error_line_at_the_users_frame.<locals>.golden raised at "
        f"{__file__}:{line}: KeyError: 'no_such_input'\n"
        '    return t["x"] * t["no_such_input"]  # golden helper: raises'
    )
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    assert f"[ERROR] {result.error}\n" in captured.err
    assert "[RUN] golden … FAILED" in captured.out and "[FAIL] rms_norm on sim" in captured.out

    def torch_raises(t):
        t["y"][:] = t["x"] @ t["x"][:3]  # a torch error: the user's line, not torch's

    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=torch_raises)
    torch_line = next(i for i, s in enumerate(source, 1) if "# a torch error: the user's line" in s)
    assert result.error.startswith(
        f"golden_fn test_a_golden_fn_that_raises_is_an_error_line_at_the_users_frame.<locals>.torch_raises raised "
        f"at {__file__}:{torch_line}: RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    )


@pytest.mark.slow
def test_golden_data_run_says_the_golden_came_from_the_data(capsys):
    first = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, save_data=True)
    data = first.work_dir / "data"
    capsys.readouterr()
    result = run_jit(
        rms_norm.rms_norm,
        rms_norm.specs(),
        golden_fn=lambda t: pytest.fail("golden_fn must not run with golden data"),
        golden_data=str(data),
    )
    assert result.passed
    lines = capsys.readouterr().out.splitlines()
    assert f"[RUN] golden … from {data / 'out'} (saved, not computed)" in lines
    assert not any(line.startswith("[RUN] golden … done") for line in lines)
    replayed = ts.replay_compiled(first.work_dir)
    assert replayed.passed
    assert f"[RUN] golden … from {data / 'out'} (saved, not computed)" in capsys.readouterr().out.splitlines()


@ts.kernel
def take_rows(x: ts.Tensor[[256, 128], ts.f32], y: ts.Out[[8, 128], ts.f32], row: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [row, 0], [8, 128]))


@ts.jit
def gather(x: ts.Tensor[[256, 128], ts.f32], y: ts.Out[[32, 128], ts.f32], start: ts.Scalar[ts.i32]):
    for i in ts.range(0, 32, 8):
        take_rows(x, y[i : i + 8, :], start + i)


@pytest.mark.slow
def test_a_runtime_failure_is_printed_once(capfd):
    specs = [
        TensorSpec("x", [256, 128], torch.float32),
        TensorSpec("y", [32, 128], torch.float32, is_output=True),
        ScalarSpec("start", torch.int32, 232),  # task 3 reads rows 256..264
    ]
    for isolate in (False, True):
        result = run_jit(
            gather,
            specs,
            golden_fn=lambda t: None,
            compile_cfg={"check_bounds": True},
            runtime_cfg={"isolate": isolate, "log_level": "v5"},  # the default level
        )
        assert not result.passed and result.failure.kind == "kernel_error"
        captured = capfd.readouterr()
        both = captured.out + captured.err
        assert both.count("is outside x's shape [256, 128]") == 1, both
        assert "[ERROR] [kernel_error] task 3 (kernel take_rows) on worker" in captured.err


def test_mismatch_lines_print_enough_digits_and_the_differences():
    got = torch.tensor([[25559.78, 1.0], [0.0, float("nan")]])  # f32: differ in the 7th digit
    want = torch.tensor([[25559.79, 1.0000001], [1e-3, 1.0]])
    lines = compare_tensor("y", got, want, rtol=1e-9, atol=0).lines(1e-9, 0)
    assert lines[-4:] == [
        "      [0, 0]: got 25559.78, expected 25559.79 (abs diff 0.009766, rel diff 3.82e-07)",
        "      [0, 1]: got 1, expected 1.0000001 (abs diff 1.192e-07, rel diff 1.19e-07)",
        "      [1, 0]: got 0, expected 0.001 (abs diff 0.001, rel diff 1)",
        "      [1, 1]: got nan, expected 1 (abs diff inf, rel diff inf)",
    ]
    # f64 prints up to 17 digits, integers exactly; agreeing digits stop at the first difference
    f64 = torch.float64
    lines = compare_tensor(
        "y", torch.tensor([3.0], dtype=f64), torch.tensor([3.000000000001], dtype=f64), 0, 0
    )
    lines = lines.lines(0, 0)
    assert lines[-1] == "      [0]: got 3, expected 3.000000000001 (abs diff 1e-12, rel diff 3.33e-13)"
    ints = compare_tensor(
        "i", torch.tensor([1234567], dtype=torch.int32), torch.tensor([1234568], dtype=torch.int32), 0, 0
    )
    assert ints.lines(0, 0)[-1] == "      [0]: got 1234567, expected 1234568 (abs diff 1, rel diff 8.1e-07)"


@pytest.mark.slow
def test_a_ctrl_c_outside_the_run_names_its_phase_and_its_traceback_ends_at_the_users_call(tmp_path, capsys):
    import traceback

    def pressed(shape, dtype):
        raise KeyboardInterrupt

    specs = [s if s.name != vector_dag.SPECS[0].name else TensorSpec(s.name, s.shape, s.dtype, init_value=pressed)
             for s in vector_dag.SPECS]  # fmt: skip
    with pytest.raises(KeyboardInterrupt) as e:
        run_jit(vector_dag.vector_dag, specs, golden_fn=vector_dag.golden)
    err = capsys.readouterr().err
    assert err.strip() == (
        "[INTERRUPTED] run_jit stopped in its phase 'generate inputs' (Ctrl-C); the build and any data saved before "
        "stay as they were"
    )
    # the user's frames, and the entry point's `raise e  # the error from your call above, ...`
    frames = [(Path(f.filename).name, f.line) for f in traceback.extract_tb(e.value.__traceback__)]
    inner = [f for f in frames if f[0] != "test_harness.py"]
    assert inner == [("_tracebacks.py", "raise e  # the error from your call above, with tilescope's own frames left out")]


@ts.kernel
def _loss_rows(x: ts.Tensor[[4, 8], ts.f32], loss: ts.Out[[], ts.f32]):
    ts.store(loss, [], ts.row_sum(ts.col_sum(ts.load(x, [0, 0], [4, 8]))))


@ts.jit
def _loss_program(x: ts.Tensor[[4, 8], ts.f32], loss: ts.Out[[], ts.f32]):
    _loss_rows(x, loss)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_a_0_dim_output_is_a_spec_of_shape_empty_compared_and_replayed(platform, capsys):
    specs = [TensorSpec("x", [4, 8], torch.float32), TensorSpec("loss", [], torch.float32, is_output=True)]
    assert specs[1].make().shape == ()

    def golden(t):
        t["loss"].copy_(t["x"].sum())

    result = run_jit(_loss_program, specs, golden_fn=golden, save_data=True, runtime_cfg={"platform": platform})
    out = capsys.readouterr().out
    assert result.passed, out
    assert "[COMPARE] loss: PASS  1 elements match" in out
    assert torch.load(result.work_dir / "data" / "out" / "loss.pt").shape == ()
    replay = run_jit(_loss_program, specs, golden_data=result.work_dir / "data", runtime_cfg={"platform": platform})
    assert replay.passed, capsys.readouterr().out

    def far(t):
        t["loss"].fill_(1e3)

    wrong = run_jit(_loss_program, specs, golden_fn=far, runtime_cfg={"platform": platform})
    out = capsys.readouterr().out
    assert not wrong.passed and "[COMPARE] loss: FAIL  1 of 1 elements mismatch" in out
    assert "\n      []: got " in out
