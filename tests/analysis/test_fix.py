"""`tilescope triage --fix`: for each seeded bug, the edit proposed (its `after` text) and that it
was verified on the saved data; the user's source files are byte-identical after every test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import fix_programs as F
import localize_programs as P
import pytest
import torch
import triage_programs as tp
from helpers import line_of

from tilescope.analysis.data import save_snapshot
from tilescope.analysis.report import Fix
from tilescope.analysis.triage.triage_command import triage
from tilescope.harness import run_jit

SOURCES = [Path(m.__file__) for m in (F, P, tp)]


@pytest.fixture(autouse=True)
def _sources_untouched():
    """No test may change a user's DSL file."""
    before = {p: p.read_bytes() for p in SOURCES}
    yield
    assert {p: p.read_bytes() for p in SOURCES} == before


def saved(fn, specs, golden, rtol=1e-5, atol=1e-6):
    result = run_jit(fn, specs, golden_fn=golden, rtol=rtol, atol=atol, save_data=True)
    assert result.work_dir is not None and (result.work_dir / "data" / "in").is_dir(), result.error
    return result.work_dir


def fixed(work, **kw) -> Fix:
    """triage --fix of ``work``: its ``fix``, checked to be the one report.json holds."""
    rep = triage(work, fix=True, **kw)
    on_disk = json.loads((work / "dfx_outputs" / "triage" / "report.json").read_text())
    assert Fix.from_json(on_disk["fix"]) == rep.fix
    return rep.fix


def verified(fix, fn, line_text, after, two_sets=False):
    """The fix is verified (``two_sets``: on the saved data and the second input set), edits
    ``fn``'s line holding ``line_text``, and makes it ``after``."""
    assert fix.verified is True, fix
    if two_sets:
        assert fix.verified_on == "the saved data and a second input set (seed 1)", fix.verified_on
    assert fix.kind == "dsl"
    e = fix.edit
    assert e.line == line_of(fn, line_text) and Path(e.file).name == Path(sys.modules[fn.fn.__module__].__file__).name
    assert e.after.strip() == after
    assert fix.comparison.startswith("every output within rtol=")


@pytest.mark.slow
def test_a_store_loop_one_chunk_short_gets_the_bound_that_covers_the_out_param(tmp_path):
    prog = tp.short_store.compile(build_dir=str(tmp_path))
    inputs = tp.short_store_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"z": tp.short_store_golden(inputs["x"])},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    rep = triage(prog.work_dir, fix=True)
    assert rep.category == "uninitialized"
    verified(rep.fix, tp.scale_rows_short, "for h in ts.range", "for h in ts.range(0, W, 64):  # the bug: one chunk short")
    assert "fix (verified on the saved data)" in rep.render()
    # the verified copy and its build are kept for the user to look at, under the build's dfx_outputs
    kept = rep.fix.comparison.rpartition("the fixed build is ")[2]
    assert Path(kept).is_dir() and "dfx_outputs/triage/fix/run_" in kept


@pytest.mark.slow
def test_variance_by_cancellation_gets_the_mean_of_squared_deviations(tmp_path):
    prog = F.standardize.compile(build_dir=str(tmp_path))
    inputs = {**F.standardize_inputs(), "y": torch.zeros(32, 256)}
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, F.standardize_golden(inputs),
                  {"rtol": 1e-2, "atol": 1e-2})  # fmt: skip
    rep = triage(prog.work_dir, fix=True)
    assert rep.category == "nan" and rep.culprit.kernel == "standardize_rows"
    verified(rep.fix, F.standardize_rows, "var = ",
             "var = ts.row_sum((t - m) * (t - m)) * (1.0 / 256)  # the defect: cancellation when the mean is large")  # fmt: skip


@pytest.mark.slow
def test_an_out_param_that_is_read_gets_inout_through_the_harness(capsys):
    result = run_jit(F.accumulate, F.ACCUMULATE, golden_fn=F.accumulate_golden, fix=True)
    assert not result.passed and result.triage is not None and result.triage.category == "compile_error"
    verified(result.triage.fix, F.accumulate_rows, "def accumulate_rows",
             "def accumulate_rows(x: ts.Tensor[[16, 64], ts.f32], y: ts.InOut[[16, 64], ts.f32]):")  # fmt: skip
    assert "fix (verified on this run's inputs)" in capsys.readouterr().out


@pytest.mark.slow
def test_an_unfixable_case_says_what_was_screened_and_how_close_the_best_came():
    rep = triage(saved(F.unit, F.UNIT, F.unit_golden), fix=True)
    fix = rep.fix
    assert rep.category == "algorithm" and fix.edit is None and fix.verified is False
    assert fix.why_none.startswith("no candidate edit made the outputs match the golden on the interpreter (")
    assert fix.tried == []  # nothing matched on the interpreter: nothing was compiled
    s = fix.search
    assert s.screened > 3 and s.compiled == 0 and s.rules["sibling op"] >= 3
    assert len(s.best) == 3 and all(b.endswith("of 1024 elements still outside tolerance") for b in s.best)
    assert s.check[0] == f"the line the culprit names ({rep.culprit.dsl_line})"
    text = rep.render()
    assert "fix: none: no candidate edit made the outputs match the golden" in text
    assert "best on the interpreter: fix_programs.py:" in text and "check: an edit no catalogue rule makes" in text


@pytest.mark.slow
def test_a_nan_whose_op_no_rule_answers_is_repaired_by_the_wider_search(tmp_path):
    prog = tp.log_rows.compile(build_dir=str(tmp_path))
    inputs = tp.log_rows_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"y": torch.log(inputs["x"] * 2 + 1) + 1},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    rep = triage(prog.work_dir, fix=True)
    fix = rep.fix
    assert rep.category == "nan" and fix.verified is True and fix.rule == "sibling op"
    assert fix.edit.before.replace("ts.log(u - 1.0)", "ts.log(u + 1.0)", 1) == fix.edit.after
    assert fix.search.rules and fix.search.screened >= sum(v for k, v in fix.search.rules.items() if k != "two-line pairs")
    assert fix.verified_on == "the saved data"  # saved here without a second input set: the notes say so
    assert any(n.startswith("verified on the saved data alone: ") for n in fix.notes)


@pytest.mark.slow
def test_a_passing_build_has_nothing_to_fix(tmp_path):
    prog = tp.split_kv.compile(build_dir=str(tmp_path))
    inputs = tp.attention_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs,
                  {"out": tp.attention_golden(inputs["q"], inputs["k"], inputs["v"])}, {"rtol": 1e-4, "atol": 1e-4})  # fmt: skip
    rep = triage(prog.work_dir, fix=True)
    assert rep.category == "pass" and rep.fix.edit is None
    assert rep.fix.why_none == "the build passes: there is nothing to fix"


@pytest.mark.slow
def test_a_hand_edited_kernel_line_gets_the_line_as_generated():
    work = saved(P.affine, P.AFFINE, P.affine_golden)
    cpp = work / "kernels" / "vec" / "affine_rows.cpp"
    text = cpp.read_text()
    cpp.write_text(text.replace("0.5f", "0.25f"))
    edited = cpp.read_bytes()
    rep = triage(work, fix=True)
    assert rep.category == "codegen"
    fix = rep.fix
    assert fix.verified is True and fix.kind == "build"
    e = fix.edit
    assert e.file == "kernels/vec/affine_rows.cpp" and "0.25f" in e.before and "0.5f" in e.after
    assert e.after in text.splitlines()  # exactly the line the generator wrote
    assert cpp.read_bytes() == edited  # the build's own file is not touched either
    assert "fix (verified on the saved data and a second input set (seed 1)): the build's kernels/vec/affine_rows.cpp" in rep.render()


@pytest.mark.slow
def test_a_race_from_a_hand_edit_gets_the_load_that_orders_it_back(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"y": golden_y, "z": tp.pipeline_golden(inputs["x"])},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    source = tp.edit_kernel(prog, "consume", "view<64, 64>(y, {0, 0}", "view<64, 64>(y, {32, 0}")
    rep = triage(prog.work_dir, fix=True)
    assert rep.category == "race"
    e = rep.fix.edit
    assert rep.fix.verified is True and e.file == source
    assert "{32, 0}" in e.before and "view<64, 64>(y, {0, 0}" in e.after
    assert e.line == int(rep.culprit.cpp_line.rpartition(":")[2])


@pytest.mark.slow
def test_a_line_added_by_hand_that_crashes_is_removed_and_no_candidate_changes_nothing(tmp_path):
    from tilescope.analysis.fix.candidates import Candidate
    from tilescope.analysis.fix.edit import Edit
    from tilescope.analysis.fix.verify import verify_candidate

    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    golden = {"y": golden_y, "z": tp.pipeline_golden(inputs["x"])}
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, golden, {"rtol": 1e-5, "atol": 1e-5})
    (source,) = [k["source"] for k in prog.kernels if k["name"] == "consume"]
    cpp = prog.work_dir / source
    cpp.write_text(cpp.read_text().replace("    store(z, {0, 0}", "    *(volatile float *)nullptr = 1.0f;\n    store(z, {0, 0}"))
    rep = triage(prog.work_dir, fix=True)
    assert rep.category == "crash"
    e = rep.fix.edit
    assert rep.fix.verified is True and rep.fix.kind == "build" and e.file == source
    assert "nullptr" in e.before and e.after == "" and "added to the build's C++ by hand" in e.why
    assert all(t.before.split() != t.after.split() for t in rep.fix.tried)
    # B and C are both 64: exchanged, they compile to the very program the build holds
    line = line_of(tp.consume, "t = ts.load(y")
    before = Path(tp.__file__).read_text().splitlines()[line - 1]
    swap = Candidate(Edit(tp.__file__, line, before, before.replace("[B, C]", "[C, B]"), "swapped"), "dsl")
    ok, why = verify_candidate(prog, swap, inputs, golden, None, 1e-5, 1e-5, tmp_path / "swap", 1e9)
    assert not ok and "compiles to the program the build already holds" in why and source in why, why
    assert not (tmp_path / "swap").exists()


def _module(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


NORMALIZE_SOURCE = Path(P.__file__).read_text().split("# -- algorithm, found by a probe")[1].split("# -- algorithm: a loop")[0]


@pytest.mark.slow
@pytest.mark.parametrize("change", ["edited", "gone"])
def test_a_source_changed_or_gone_since_the_build_gets_the_edit_on_the_ir_dump(tmp_path, change):
    text = "import torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n" + NORMALIZE_SOURCE.split("\n", 1)[1]
    path, m = _module(tmp_path, f"normalize_{change}", text)
    work = saved(m.normalize, m.NORMALIZE, m.normalize_golden)
    if change == "edited":
        path.write_text("# a line added since the build\n" + text)
    else:
        path.unlink()
    fix = fixed(work)
    assert fix.verified is True and fix.kind == "build"
    assert fix.edit.file == "ir/normalize.py" and fix.edit.after.strip() == "total = ts.row_sum(t)"
    said = "has changed since the build" if change == "edited" else "is gone"
    assert any(said in n and "ir/normalize.py" in n for n in fix.notes)


@pytest.mark.slow
def test_a_candidate_that_does_not_compile_is_listed_and_the_next_one_verifies(monkeypatch):
    from dataclasses import replace

    from tilescope.analysis.data import load_snapshot
    from tilescope.analysis.fix import candidates as fix_candidates
    from tilescope.analysis.fix import search
    from tilescope.analysis.fix.catalogue import CATALOGUE
    from tilescope.analysis.fix.edit import Edit
    from tilescope.launch.program import CompiledProgram

    work = saved(P.normalize, P.NORMALIZE, P.normalize_golden)
    rep = triage(work)  # the culprit: row_max at the probe's line

    def with_a_broken_one(real):
        def edits(src, lines, op):
            line = lines[0]
            broken = Edit(src.file, line, src.line(line), src.line(line).replace("ts.row_max(t)", "ts.row_max(t, t)"), "x")
            return [broken, *real(src, lines, op)]

        return edits

    broken = tuple(replace(r, edits=with_a_broken_one(r.edits)) if r.name == "sibling op" else r for r in CATALOGUE)
    monkeypatch.setattr(fix_candidates, "CATALOGUE", broken)
    build = CompiledProgram.from_dir(work)
    inputs, golden = load_snapshot(work / "data", list(build.args))
    # screened on the interpreter, the broken edit is screened out and never compiled
    fix = search.propose(build, rep, search.FixData(inputs, golden), deadline=float("inf"))
    assert fix.verified is True and fix.edit.after.strip().startswith("total = ts.row_sum(t)")
    assert not any("row_max(t, t)" in t.after for t in fix.tried) and fix.search.compiled == 1
    # unranked (the interpreter cannot screen), it is compiled, listed with its error, and the next one verifies
    monkeypatch.setattr(search.Screen, "useful", property(lambda self: False))
    fix = search.propose(build, rep, search.FixData(inputs, golden), deadline=float("inf"))
    bad = next(t for t in fix.tried if "row_max(t, t)" in t.after)
    assert bad.verified is False and "ts.row_max takes at most 1 arguments" in bad.result
    assert fix.verified is True and fix.edit.after.strip().startswith("total = ts.row_sum(t)")
    assert any("the interpreter does not reproduce the failure" in n for n in fix.notes)


@pytest.mark.slow
def test_a_candidate_that_hangs_is_stopped_within_the_budget(monkeypatch):
    import time

    from tilescope.analysis.data import load_snapshot
    from tilescope.analysis.fix import search
    from tilescope.analysis.fix.edit import Edit
    from tilescope.launch.program import CompiledProgram

    work = saved(P.normalize, P.NORMALIZE, P.normalize_golden)
    rep = triage(work)
    cpp = "kernels/vec/normalize_rows.cpp"
    lines = (work / cpp).read_text().splitlines()
    no = next(i for i, line in enumerate(lines, 1) if "row_max(" in line)
    spin = Edit(cpp, no, lines[no - 1], "for (volatile long i = 0; ; i = i + 1) {} " + lines[no - 1], "spins")
    from tilescope.analysis.fix import candidates as fix_candidates

    monkeypatch.setattr(fix_candidates, "restored_cpp", lambda build, cpp_line: [spin])
    build = CompiledProgram.from_dir(work)
    inputs, golden = load_snapshot(work / "data", list(build.args))
    t0 = time.perf_counter()
    fix = search.propose(build, rep, search.FixData(inputs, golden), deadline=time.perf_counter() + 2)
    took = time.perf_counter() - t0
    assert fix.tried[0].after.startswith("for (volatile long i")
    assert fix.tried[0].verified is False and "RuntimeFailure" in fix.tried[0].result
    assert fix.why_none == "the budget was spent before every candidate was tried"
    print(f"a hanging candidate was stopped after {took:.1f}s: {fix.tried[0].result}")
    assert (work / cpp).read_text().splitlines() == lines  # the build's own file is untouched


@pytest.mark.slow
def test_a_running_min_for_a_running_max_is_found_on_the_line_that_feeds_the_nan():
    rep = triage(saved(F.online_softmax, F.ONLINE_SOFTMAX, F.online_softmax_golden), fix=True)
    assert rep.category == "nan"
    # the -inf the program starts its running max from is on purpose: the NaN is made where -inf - -inf is taken
    assert rep.culprit.dsl_line.endswith(f":{line_of(F.online_softmax_rows, 's = s * ts.exp(m - m_new)')}")
    verified(rep.fix, F.online_softmax_rows, "m_new = ts.minimum",
             "m_new = ts.maximum(m, ts.row_max(t))  # the defect: a running max", two_sets=True)  # fmt: skip
    assert rep.fix.rule == "sibling helper"


@pytest.mark.slow
def test_a_store_loop_bounded_by_names_gets_its_offset_dropped():
    rep = triage(saved(F.chunked_copy, F.CHUNKED_COPY, F.chunked_copy_golden), fix=True)
    assert rep.category == "uninitialized"
    verified(rep.fix, F.copy_chunks, "for c in ts.range",
             "for c in ts.range(0, COLS, CHUNK):  # the defect: the chunks run to COLS")  # fmt: skip


@pytest.mark.slow
def test_an_orchestration_direction_edited_by_hand_gets_the_generated_line_back():
    work = saved(P.affine, P.AFFINE, P.affine_golden, atol=1e-5)
    cpp = work / "orchestration" / "affine.cpp"
    text = cpp.read_text()
    assert "task.add_output(y.slice" in text
    cpp.write_text(text.replace("task.add_output(y.slice", "task.add_inout(y.slice"))
    rep = triage(work, fix=True)
    assert rep.category == "signature"
    e = rep.fix.edit
    assert rep.fix.verified is True and rep.fix.kind == "build" and e.file == "orchestration/affine.cpp"
    assert "add_inout(y.slice" in e.before and e.after in text.splitlines()


@pytest.mark.slow
def test_a_source_in_another_encoding_is_read_in_it_and_the_verdict_stands(tmp_path):
    text = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + "import torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n" + NORMALIZE_SOURCE.split("\n", 1)[1]
    path = tmp_path / "normalize_latin.py"
    path.write_bytes(text.encode("latin-1"))
    spec = importlib.util.spec_from_file_location("normalize_latin", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    before = path.read_bytes()
    rep = triage(saved(m.normalize, m.NORMALIZE, m.normalize_golden), fix=True)
    assert rep.category == "algorithm" and rep.fix.verified is True
    assert rep.fix.edit.after.strip().startswith("total = ts.row_sum(t)")
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_relative_source_path_is_the_build_s_file_whatever_the_working_directory(tmp_path, monkeypatch):
    text = "import torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n" + NORMALIZE_SOURCE.split("\n", 1)[1]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    path, m = _module(tmp_path / "a", "normmod", text)
    work = saved(m.normalize, m.NORMALIZE, m.normalize_golden)
    (tmp_path / "b" / "normmod.py").write_text("# another file of the same name\n" * 40)
    monkeypatch.chdir(tmp_path / "b")
    fix = fixed(work)
    assert fix.verified is True and Path(fix.edit.file) == path.resolve()


def test_a_module_that_cannot_be_imported_twice_fails_its_candidate_not_the_run(tmp_path):
    text = ("import uuid\n\nimport torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n"
            "if globals().get('__spec__') and __spec__.name.startswith('_tilescope_fix_'):\n"
            "    raise RuntimeError('this module registers something once per process')\n\n"
            + Path(F.__file__).read_text().split("# -- compile error: an Out param")[1].split("# -- unfixable")[0].split("\n", 1)[1])  # fmt: skip
    _, m = _module(tmp_path, "accmod", text)
    result = run_jit(m.accumulate, m.ACCUMULATE, golden_fn=m.accumulate_golden, fix=True,
                     compile_cfg={"build_dir": str(tmp_path / "mine")})  # fmt: skip
    fix = result.triage.fix
    assert fix.verified is False and fix.tried[0].result.startswith("RuntimeError: this module registers")
    assert fix.why_none == "no candidate edit made the program compile and match the golden"
    # the candidates went under the run's own build directory, and the failed one left nothing
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["_fix_accumulate"]
    assert [list(run.iterdir()) for run in (tmp_path / "mine" / "_fix_accumulate").iterdir()] == [[]]


@pytest.mark.slow
def test_two_proposals_in_one_process_keep_their_own_fixed_builds():
    from tilescope.analysis.data import load_snapshot
    from tilescope.analysis.fix.search import FixData, propose
    from tilescope.launch.program import CompiledProgram

    work = saved(P.normalize, P.NORMALIZE, P.normalize_golden)
    rep = triage(work)
    build = CompiledProgram.from_dir(work)
    inputs, golden = load_snapshot(work / "data", list(build.args))
    kept = [propose(build, rep, FixData(inputs, golden), float("inf")).comparison.rpartition("the fixed build is ")[2]
            for _ in range(2)]  # fmt: skip
    assert kept[0] != kept[1] and all(Path(k).is_dir() for k in kept)


@pytest.mark.slow
def test_a_drifting_variance_by_cancellation_is_not_called_innocent_and_gets_the_stable_form():
    rep = triage(saved(F.layernorm, F.LAYERNORM, F.layernorm_golden, rtol=1e-3, atol=1e-3), fix=True)
    assert (rep.category, rep.verdict) == ("precision", "guilty")
    assert "infinite error bound" in rep.summary
    verified(rep.fix, F.layernorm_rows, "var = ",
             "var = ts.row_sum((t - mean) * (t - mean)) * (1.0 / 256)  # the defect: cancellation", two_sets=True)  # fmt: skip
    assert rep.fix.rule == "variance by cancellation"


@pytest.mark.slow
def test_a_model_script_without_a_main_guard_is_imported_without_running_again(tmp_path):
    text = ("import sys\n\nimport torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec, run_jit\n\n"
            + NORMALIZE_SOURCE.split("\n", 1)[1]
            + "\n\nRESULT = run_jit(normalize, NORMALIZE, golden_fn=normalize_golden, save_data=True)\n")
    _, m = _module(tmp_path, "noguard", text)
    work = m.RESULT.work_dir
    builds = sorted(p.name for p in work.parent.iterdir())
    fix = fixed(work)
    assert fix.verified is True and fix.edit.after.strip().startswith("total = ts.row_sum(t)")
    assert sorted(p.name for p in work.parent.iterdir()) == builds  # the import ran no program


@pytest.mark.slow
def test_a_module_that_exits_when_imported_fails_its_candidate_and_the_verdict_stands(tmp_path):
    text = ("import sys\n\nimport torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n"
            + NORMALIZE_SOURCE.split("\n", 1)[1]
            + "\n\nif '_tilescope_fix_' in __name__:\n    sys.exit(2)  # as argparse does on arguments it does not know\n")  # fmt: skip
    _, m = _module(tmp_path, "exits", text)
    rep = triage(saved(m.normalize, m.NORMALIZE, m.normalize_golden), fix=True)
    assert rep.category == "algorithm" and rep.culprit.op == "row_max"
    assert rep.fix.verified is False
    assert all(t.result.startswith("SystemExit(2): the module exits when it is imported") for t in rep.fix.tried)


@pytest.mark.slow
def test_an_orchestration_loop_one_block_short_gets_its_bound():
    rep = triage(saved(F.double_all, F.DOUBLE_ALL, F.double_all_golden), fix=True)
    assert rep.category == "uninitialized"
    verified(rep.fix, F.double_all, "for r in ts.range", "for r in ts.range(0, 32, 8):  # the defect: the blocks run to 32")


@pytest.mark.slow
def test_a_literal_store_bound_with_a_named_step_gets_the_extent():
    rep = triage(saved(F.chunked_copy_192, F.CHUNKED_COPY, F.chunked_copy_golden), fix=True)
    assert rep.category == "uninitialized"
    verified(rep.fix, F.copy_chunks_to_192, "for c in ts.range",
             "for c in ts.range(0, 256, CHUNK):  # the defect: the chunks run to COLS")  # fmt: skip


@pytest.mark.slow
def test_a_program_built_inside_a_function_gets_its_edit_on_the_ir_dump(tmp_path):
    body = NORMALIZE_SOURCE.split("\n", 1)[1]
    inner = "\n".join("    " + line if line.strip() else line for line in body.splitlines())
    text = ("import torch\n\nimport tilescope as ts\nfrom tilescope.harness import TensorSpec\n\n\ndef make():\n" + inner
            + "\n    return normalize, NORMALIZE, normalize_golden\n")  # fmt: skip
    _, m = _module(tmp_path, "builder", text)
    fix = fixed(saved(*m.make()))
    assert fix.verified is True and fix.kind == "build"
    assert fix.edit.file == "ir/normalize.py" and fix.edit.after.strip() == "total = ts.row_sum(t)"
    # the user's file cannot give the program, so the IR dump's edits are screened on the interpreter
    # and only the one that matches there is compiled
    assert [t.target for t in fix.tried] == ["build"] and fix.search.screened > 0 and fix.search.compiled == 1
    assert any("built inside a function" in n and "ir/normalize.py" in n for n in fix.notes), fix.notes
    assert not any("has no @ts.jit program named" in n for n in fix.notes), fix.notes


@pytest.mark.slow
def test_sin_and_cos_exchanged_in_two_statements_get_a_two_line_repair():
    rep = triage(saved(F.rotate, F.ROTATE, F.rotate_golden), fix=True)
    fix = rep.fix
    assert rep.category == "algorithm" and fix.verified is True and fix.rule == "swapped names + swapped names"
    edits = sorted([fix.edit, *fix.also], key=lambda e: e.line)
    assert [e.line for e in edits] == [line_of(F.rotate_rows, "x1 * s - x2 * c"), line_of(F.rotate_rows, "x2 * s + x1 * c")]
    first, second = (e.after.split("#")[0].strip() for e in edits)
    assert first == "ts.store(y, [0, 0], x1 * c - x2 * s)"
    # the same sum, whichever pair of names the repair exchanged
    assert second in ("ts.store(y, [0, HALF], x2 * c + x1 * s)", "ts.store(y, [0, HALF], x1 * s + x2 * c)")
    assert fix.verified_on == "the saved data and a second input set (seed 1)"
    assert fix.search.rules["two-line pairs"] > 0
    # the diff holds both lines, and the printed fix shows both
    assert fix.diff.count("\n-    ts.store(") == 2 and fix.diff.count("\n+    ts.store(") == 2
    text = rep.render()
    assert "x1 * c - x2 * s" in text and second.removeprefix("ts.store(y, [0, HALF], ").rstrip(")") in text


@pytest.mark.slow
def test_a_gemm_accumulator_overwritten_in_its_k_loop_is_added_to():
    rep = triage(saved(F.gemm, F.GEMM, F.gemm_golden, rtol=1e-4, atol=1e-4), fix=True)
    assert rep.category == "algorithm" and rep.fix.rule == "accumulator"
    verified(rep.fix, F.gemm_block, "acc = ts.matmul(",
             "acc = acc + ts.matmul(ts.load(a, [0, k], [16, 16]), ts.load(b, [k, 0], [16, 16]))  # the defect: overwritten",
             two_sets=True)  # fmt: skip
