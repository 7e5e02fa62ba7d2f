"""Shuffled schedules: runs with randomized ready order, worker counts and delays, compared bit for
bit, and the first task whose outputs differ."""

from __future__ import annotations

import pytest
import triage_programs as tp

import tilescope as ts
from tilescope.analysis.shuffle import shuffle_lines, shuffle_runs

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run


def test_a_correct_program_gives_the_same_bits_on_every_schedule(tmp_path):
    prog = tp.split_kv.compile(build_dir=str(tmp_path))
    rep = shuffle_runs(prog, tp.attention_inputs(), 5, seed=1)
    assert rep.deterministic and rep.first is None and len(rep.runs) == 5
    assert len({r.seed for r in rep.runs}) == 5 and {r.workers for r in rep.runs} >= {2, 3, 4}
    assert shuffle_lines(rep) == ["all 5 shuffled runs gave the same outputs, bit for bit"]


def test_a_read_outside_its_region_is_found_as_the_first_task_that_differs(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    tp.edit_kernel(prog, "consume", "view<64, 64>(y, {0, 0}", "view<64, 64>(y, {32, 0}")
    prog = ts.CompiledProgram.from_dir(prog.work_dir)
    rep = shuffle_runs(prog, tp.pipeline_inputs(), 10, seed=3)
    assert not rep.deterministic
    assert "z" in rep.differing_outputs
    first = rep.first
    assert first is not None and first.kernel == "consume" and first.task in range(4, 8) and first.param == "z"
    assert first.inputs_agree  # it read outside its declared input: what it was given agreed
    lines = shuffle_lines(rep)
    assert any(line.startswith(f"task {first.task} (kernel consume) is the first task whose output differs") for line in lines)


def test_a_shuffled_run_cannot_be_serial():
    from tilescope.runtime.run_config import RunConfig

    with pytest.raises(ts.ConfigError) as info:
        RunConfig.from_keywords({"serial": True}).replace(shuffle_seed=5)
    assert str(info.value) == (
        "a shuffled run (shuffle_seed=5) cannot be serial: shuffling reorders what serial runs in submission order; "
        "set serial=False for the shuffled runs (TILESCOPE_SERIAL applies to a program's own runs, not to an "
        "analysis's)")


def test_the_environments_schedule_never_reaches_the_shuffled_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCOPE_SERIAL", "1")
    monkeypatch.setenv("TILESCOPE_NUM_WORKERS", "1")
    prog = tp.split_kv.compile(build_dir=str(tmp_path))
    rep = shuffle_runs(prog, tp.attention_inputs(), 3, seed=1)
    assert rep.deterministic and rep.failures == [] and [r.report.num_workers for r in rep.runs] == [2, 3, 4]


def test_runs_that_all_fail_alike_compare_no_schedules_and_blame_none():
    from tilescope.analysis.shuffle import RunOutcome, compare

    said = "ts_runtime_run: a shuffled run cannot be serial"
    alike = compare([RunOutcome(s, 2, {}, [], None, said) for s in (1, 2, 3)], lambda f: [])
    assert alike.same_failure == said and not alike.deterministic and alike.first is None
    assert shuffle_lines(alike) == [f"every one of the 3 shuffled runs failed the same way, whatever its schedule: {said}"]
    apart = compare([RunOutcome(1, 2, {}, [], None, said), RunOutcome(2, 3, {}, [], None, "timeout")], lambda f: [])
    assert apart.same_failure is None and shuffle_lines(apart) == [f"run 0: {said}", "run 1: timeout"]
