"""--triage, --poison and --shuffle N on a harness run: each on the exact data of the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import triage_programs as tp

import tilescope as ts
from tilescope.harness import run_jit
from tilescope.harness.specs import TensorSpec

SHORT = [TensorSpec("x", [2 * tp.R, tp.W], torch.float32), TensorSpec("z", [2 * tp.R, tp.W], torch.float32, is_output=True)]
ATTN = [
    TensorSpec("q", [tp.Q, tp.D], torch.float32),
    TensorSpec("k", [tp.S * tp.KV, tp.D], torch.float32),
    TensorSpec("v", [tp.S * tp.KV, tp.D], torch.float32),
    TensorSpec("out", [tp.Q, tp.D], torch.float32, is_output=True),
]


def short_golden(t):
    t["z"] = tp.short_store_golden(t["x"])


def attention_golden(t):
    t["out"] = tp.attention_golden(t["q"], t["k"], t["v"])


@pytest.mark.slow
def test_triage_names_the_kernel_that_left_its_output_unwritten(capsys):
    result = run_jit(tp.short_store, SHORT, golden_fn=short_golden, triage=True)
    assert not result.passed and result.triage is not None
    assert result.triage.category == "uninitialized" and result.triage.culprit.kernel == "scale_rows_short"
    out = capsys.readouterr().out
    # the loop that stops a chunk short (confirmed by running it one step longer), not the store inside it
    assert "[triage] short_store: uninitialized" in out and "culprit: task 0, kernel scale_rows_short, op range" in out
    # the run's data were saved for it under the build, nowhere else
    assert (result.work_dir / "dfx_outputs" / "triage" / "data" / "in" / "x.pt").is_file()
    assert (result.work_dir / "dfx_outputs" / "triage" / "report.json").is_file()
    # `tilescope triage BUILD` afterwards finds those data, as the report's next steps assume
    from tilescope.cli import main

    capsys.readouterr()
    assert main(["triage", str(result.work_dir)]) == 1
    captured = capsys.readouterr()
    assert "culprit: task 0, kernel scale_rows_short, op range" in captured.out, captured
    report = json.loads((result.work_dir / "dfx_outputs" / "triage" / "report.json").read_text())
    assert report["data"] == str(result.work_dir / "dfx_outputs" / "triage" / "data")


@pytest.mark.slow
def test_poison_and_shuffle_on_a_correct_run_say_so(capsys):
    result = run_jit(tp.split_kv, ATTN, golden_fn=attention_golden, rtol=1e-4, atol=1e-4, poison=True, shuffle=3,
                     triage=True)  # fmt: skip
    assert result.passed and result.poison.report.clean and result.shuffle.deterministic and result.triage is None
    out = capsys.readouterr().out
    assert "[triage] the run passed: nothing to triage" in out
    assert "[poison] no output depends on memory nothing wrote, and every task stored its whole output" in out
    assert "[shuffle] deterministic: all 3 shuffled runs gave the same outputs, bit for bit" in out


@pytest.mark.slow
def test_poison_on_a_run_with_a_missing_store_names_the_writer(capsys):
    result = run_jit(tp.split_kv_missing_store, ATTN, golden_fn=attention_golden, poison=True)
    assert not result.passed
    assert [u.kernel for u in result.poison.report.unstored] == ["attn_partial_no_l"] * 4
    out = capsys.readouterr().out
    assert "[poison] 1024 of 1024 elements of output out depend on memory nothing wrote" in out
    assert "  - task 0 (kernel attn_partial_no_l) declared rowsum = rowsum[0:16, 0:1] as its output but did not store" in out


@ts.kernel
def bad_slice(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    ts.store(y, [0, 4], ts.load(x, [0, 0], [8, 8]))  # the bug: past the end of y


@ts.jit
def bad_prog(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    bad_slice(x, y)


def test_triage_of_a_program_that_does_not_compile_is_a_compile_error_at_its_line(capsys):
    specs = [TensorSpec("x", [8, 8], torch.float32), TensorSpec("y", [8, 8], torch.float32, is_output=True)]
    result = run_jit(bad_prog, specs, golden_fn=lambda t: None, triage=True)
    assert result.triage is not None and result.triage.category == "compile_error"
    assert result.triage.culprit.dsl_line.endswith(f"test_triage_harness.py:{bad_slice.fn.__code__.co_firstlineno + 2}")
    assert "[triage] bad_prog: compile_error" in capsys.readouterr().out


@pytest.mark.slow
def test_the_flags_are_checked():
    import argparse

    from tilescope.harness.flags import add_harness_args

    p = add_harness_args(argparse.ArgumentParser())
    assert p.parse_args(["--shuffle", "4", "--poison", "--triage"]).shuffle == 4
    out = subprocess.run([sys.executable, "-c", "import argparse\nfrom tilescope.harness.flags import add_harness_args\n"
                          "add_harness_args(argparse.ArgumentParser()).parse_args(['--shuffle', '1'])"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "'1': expected 2..1000 runs" in out.stderr
    result = run_jit(tp.split_kv, ATTN, golden_fn=attention_golden, shuffle=1)
    assert not result.passed and "shuffle=1: one run compares with nothing" in result.error


PIPE = [
    TensorSpec("x", [5 * tp.B, tp.C], torch.float32),
    TensorSpec("y", [5 * tp.B, tp.C], torch.float32, is_output=True),
    TensorSpec("z", [4 * tp.B, tp.C], torch.float32, is_output=True),
]


def pipe_golden(t):
    t["y"][: 4 * tp.B] = t["x"][: 4 * tp.B] * 2
    t["z"][:] = tp.pipeline_golden(t["x"])


@pytest.mark.slow
def test_a_run_that_crashes_still_saves_its_data_and_triages(capsys):
    work = run_jit(tp.pipeline, PIPE, golden_fn=pipe_golden).work_dir
    tp.edit_kernel(ts.CompiledProgram(work), "consume", "store(z, {0, 0}", "*(volatile float *)nullptr = 1.0f; store(z, {0, 0}")
    result = run_jit(tp.pipeline, PIPE, golden_fn=pipe_golden, runtime_dir=str(work), save_data=True, triage=True)
    assert not result.passed and result.failure is not None and result.failure.kind == "crash"
    assert (work / "data" / "in" / "x.pt").is_file() and (work / "data" / "out" / "z.pt").is_file()
    assert result.triage is not None and result.triage.category == "crash"
    assert result.triage.culprit.kernel == "consume"
    assert "[triage] pipeline: crash" in capsys.readouterr().out


@pytest.mark.slow
def test_triage_of_arguments_the_program_refuses_is_bad_input(capsys):
    wrong = [TensorSpec("x", [3 * tp.B, tp.C], torch.float32), *PIPE[1:]]
    result = run_jit(tp.pipeline, wrong, golden_fn=pipe_golden, triage=True)
    assert result.triage is not None and result.triage.category == "bad_input"
    assert "[triage] pipeline: bad_input" in capsys.readouterr().out


@pytest.mark.slow
def test_shuffle_that_differs_names_the_accesses_no_dependency_orders(capsys):
    work = run_jit(tp.pipeline, PIPE, golden_fn=pipe_golden).work_dir
    tp.edit_kernel(ts.CompiledProgram(work), "consume", "view<64, 64>(y, {0, 0}", "view<64, 64>(y, {32, 0}")
    result = run_jit(tp.pipeline, PIPE, golden_fn=pipe_golden, runtime_dir=str(work), shuffle=10)
    assert result.shuffle is not None and not result.shuffle.deterministic
    out = capsys.readouterr().out
    assert "[shuffle] NOT deterministic: output z differs between runs" in out
    assert "  - access audit: task " in out and "(kernel consume): load of y[" in out
    assert "are not ordered by any path of dependencies" in out


def test_budget_is_triages_and_must_be_seconds():
    import argparse

    from tilescope.harness.checks import Checks
    from tilescope.harness.flags import add_harness_args, harness_kwargs

    assert Checks(triage=True, budget=30.0).problem() is None and Checks(triage=True).problem() is None
    assert "budget=0: expected a number of seconds > 0" in Checks(triage=True, budget=0).problem()
    assert "budget=True: expected a number of seconds" in Checks(triage=True, budget=True).problem()
    assert "is triage's budget: ask for triage" in Checks(budget=30.0).problem()
    p = add_harness_args(argparse.ArgumentParser())
    assert harness_kwargs(p.parse_args(["--triage", "--budget", "90"]))["budget"] == 90.0
    out = subprocess.run([sys.executable, "-c", "import argparse\nfrom tilescope.harness.flags import add_harness_args\n"
                          "add_harness_args(argparse.ArgumentParser()).parse_args(['--budget', '-3'])"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "expected a number of seconds > 0" in out.stderr
