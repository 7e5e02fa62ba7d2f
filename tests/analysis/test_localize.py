"""tilescope localize on seeded wrong answers (tests/localize_programs.py): for each defect
class, the category, the verdict and the culprit (task, kernel, op, DSL and C++ lines) the report
names; the command line; and every bad input."""

import json
import re
import subprocess
import sys

import localize_programs as P
import pytest
import torch
from helpers import headless_page, line_of, needs_chromium
from seeded_bugs import dsl

import tilescope as ts
from tilescope.analysis.data import DataError
from tilescope.analysis.localize.localize_command import LocalizeError, localize
from tilescope.cli import main as cli
from tilescope.errors import DSLError
from tilescope.harness import run_jit


def saved(fn, specs, golden, rtol=1e-5, atol=1e-6, **kw):
    """A build of ``fn`` run once with --save-data; returns the run's result."""
    result = run_jit(fn, specs, golden_fn=golden, rtol=rtol, atol=atol, save_data=True, **kw)
    assert result.work_dir is not None and (result.work_dir / "data" / "in").is_dir(), result.error
    return result


def edit(path, old, new):
    """Replace ``old`` by ``new`` in ``path``; returns the 1-based line edited."""
    lines = path.read_text().splitlines(keepends=True)
    no = next(i for i, line in enumerate(lines) if old in line)
    lines[no] = lines[no].replace(old, new)
    path.write_text("".join(lines))
    return no + 1


@pytest.mark.slow
def test_codegen_constant_edited_in_kernel_cpp_names_task_op_and_lines(capsys):
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    cpp = work / "kernels" / "vec" / "affine_rows.cpp"
    line = edit(cpp, "0.5f", "0.25f")
    rep = localize(work)
    assert rep.category == "codegen" and rep.verdict is None
    c = rep.culprit
    assert (c.task, c.kernel, c.op) == (0, "affine_rows", "mul")  # the op whose constant was edited, not the add
    assert c.dsl_line == dsl(P.affine_rows, "h = t * 0.5 + 1.0")
    assert c.cpp_line == f"kernels/vec/affine_rows.cpp:{line}"
    assert any("0.25f" in e and "0.5f" in e and "edited by hand" in e for e in rep.evidence)
    assert any(e.startswith("4 of 4 tasks of kernel affine_rows leave their bound") for e in rep.evidence)
    # the report on disk is the one returned, and the culprit task was saved for replay --task
    on_disk = json.loads((work / "dfx_outputs" / "localize" / "report.json").read_text())
    assert on_disk["culprit"] == {"task": 0, "kernel": "affine_rows", "op": "mul", "dsl_line": c.dsl_line,
                                  "cpp_line": c.cpp_line}  # fmt: skip
    assert on_disk["category"] == "codegen" and on_disk["elapsed_s"] > 0
    assert f"tilescope replay {work} --task 0" in rep.next
    assert (work / "dfx_outputs" / "failure" / "task_0" / "task.json").is_file()
    assert cli(["replay", str(work), "--task", "0", "--no-isolate"]) == 0
    assert "in  x = x[0:16, 0:64]" in capsys.readouterr().out


@pytest.mark.slow
def test_codegen_orchestration_slice_edited_names_the_call_and_argument_line():
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    cpp = work / "orchestration" / "affine.cpp"
    line = edit(cpp, "task.add_input(x.slice({{r, r + 16}", "task.add_input(x.slice({{0, 16}")
    rep = localize(work)
    assert rep.category == "codegen"
    c = rep.culprit
    assert (c.task, c.kernel, c.op) == (1, "affine_rows", "call")
    assert c.dsl_line == dsl(P.affine, "affine_rows(x[r")
    assert c.cpp_line == f"orchestration/affine.cpp:{line}"
    assert "x = x[0:16, 0:64], where the program gives x[16:32, 0:64]" in rep.summary


@pytest.mark.slow
def test_a_passing_run_is_pass_and_the_command_exits_0(capsys):
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    capsys.readouterr()
    assert cli(["localize", str(work)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[localize] affine: pass")
    assert cli(["localize", str(work), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "tilescope-localize" and data["category"] == "pass"
    assert set(data) >= {"category", "verdict", "culprit", "summary", "evidence", "next", "elapsed_s"}
    rows = {(r["output"], r["pair"]) for r in data["fingerprint"]}
    assert ("y", "sim~golden") in rows and ("y", "golden~float64") in rows


@pytest.mark.slow
def test_the_command_exits_1_with_the_culprit(capsys):
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    edit(work / "kernels" / "vec" / "affine_rows.cpp", "1.0f", "1.5f")
    capsys.readouterr()
    assert cli(["localize", str(work)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("[localize] affine: codegen")
    assert "culprit: task 0, kernel affine_rows, op add at" in out


@pytest.mark.slow
def test_harness_localize_flag_localizes_a_failed_comparison(capsys):
    result = run_jit(P.blocks, P.BLOCKS, golden_fn=P.blocks_golden, localize=True)
    assert not result.passed
    assert result.localize is not None and result.localize.category == "algorithm"
    assert (result.work_dir / "dfx_outputs" / "localize" / "data" / "in" / "x.pt").is_file()
    assert "[localize] blocks: algorithm" in capsys.readouterr().out


@pytest.mark.slow
def test_harness_localize_flag_uses_the_data_this_run_saved():
    result = run_jit(P.blocks, P.BLOCKS, golden_fn=P.blocks_golden, localize=True, save_data=True)
    assert result.localize is not None and result.localize.data == str(result.work_dir / "data")
    assert not (result.work_dir / "dfx_outputs" / "localize" / "data").exists()


@pytest.mark.slow
def test_harness_localize_flag_does_nothing_when_the_run_passes():
    result = run_jit(P.affine, P.AFFINE, golden_fn=P.affine_golden, localize=True)
    assert result.passed and result.localize is None
    assert not (result.work_dir / "dfx_outputs" / "localize").exists()


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_build_without_saved_data_says_how_to_make_it(capsys):
    result = run_jit(P.affine, P.AFFINE, golden_fn=P.affine_golden)
    with pytest.raises(LocalizeError, match=r"has no saved data .* --save-data"):
        localize(result.work_dir)
    assert cli(["localize", str(result.work_dir)]) == 1
    assert "--save-data" in capsys.readouterr().err
    assert not (result.work_dir / "dfx_outputs" / "localize").exists()


@pytest.mark.slow
def test_data_of_another_program_are_refused_with_every_problem():
    other = saved(P.long_sum, P.LONG_SUM, P.long_sum_golden).work_dir
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    with pytest.raises(DataError) as info:
        localize(work, other / "data")
    text = str(info.value)
    assert "x.pt: shape [32, 4096], expected [64, 64]" in text and "y.pt: shape [32, 1], expected [64, 64]" in text


@pytest.mark.slow
def test_a_build_edited_since_the_data_were_saved_is_stated():
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    edit(work / "kernels" / "vec" / "affine_rows.cpp", "0.5f", "0.25f")
    rep = localize(work)
    assert any(
        x.startswith("kernels/vec/affine_rows.cpp changed since the data were saved") for x in rep.limitations
    )


def test_a_missing_build_and_a_bad_tolerance_are_clear_errors(tmp_path, capsys):
    assert cli(["localize", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["localize", str(tmp_path), "--rtol", "-1"])
    assert "expected a finite number >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_localize_runs_as_a_module_command(tmp_path):
    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    out = subprocess.run([sys.executable, "-m", "tilescope", "localize", str(work), "--json"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["category"] == "pass"
    assert torch.is_tensor(torch.load(work / "data" / "in" / "x.pt", weights_only=True))


@pytest.mark.slow
def test_algorithm_probe_with_its_reference_names_the_op_that_computed_it(capsys):
    result = saved(P.normalize, P.NORMALIZE, P.normalize_golden)
    assert (result.work_dir / "data" / "intermediates" / "total.pt").is_file()
    rep = localize(result.work_dir)
    assert rep.category == "algorithm"
    c = rep.culprit
    assert (c.task, c.kernel, c.op) == (0, "normalize_rows", "row_max")
    assert c.dsl_line == dsl(P.normalize_rows, "total = ts.row_max(t)")
    assert re.fullmatch(r"kernels/vec/normalize_rows\.cpp:\d+", c.cpp_line)
    probe_line = dsl(P.normalize_rows, 'ts.probe(total, "total")')
    assert any(e.startswith(f"probe total of kernel normalize_rows (at {probe_line}) leaves its reference first in task 0")
               for e in rep.evidence)  # fmt: skip
    # the next step it prints runs as printed, and shows the probe's values
    command = next(n for n in rep.next if n.startswith("tilescope dump "))
    assert command == f"tilescope dump {result.work_dir}/dfx_outputs/localize/tensor_dump --task 0 --stage probe --values"
    assert cli(command.split()[1:]) == 0
    out = capsys.readouterr().out
    assert "probe:total" in out and "# stats: " in out and "elements ([index] value, row-major): " in out, out


@pytest.mark.slow
def test_references_without_a_probe_or_of_the_wrong_shape_are_stated(tmp_path):
    result = saved(P.normalize, P.NORMALIZE, P.normalize_golden)
    refs = result.work_dir / "data" / "intermediates"
    torch.save(torch.zeros(3), refs / "totl.pt")
    torch.save(torch.zeros(5, 1), refs / "total.pt")
    rep = localize(result.work_dir)
    assert "reference 'totl' names no probe or intermediate of normalize (they are: total); it was not compared" in rep.limitations
    assert any(x.startswith("reference 'total' has shape [5, 1]; probe total of kernel normalize_rows captured 4 tile(s) of [8, 1]: give")
               and "[32, 1] (one after the other along the rows)" in x for x in rep.limitations)  # fmt: skip


def test_a_probe_name_used_twice_in_a_kernel_is_a_dsl_error():
    @ts.kernel
    def twice(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
        t = ts.load(x, [0, 0], [8, 8])
        ts.probe(t, "v")
        u = t * 2.0
        ts.probe(u, "v")
        ts.store(y, [0, 0], u)

    @ts.jit
    def prog(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
        twice(x, y)

    with pytest.raises(DSLError) as info:
        prog.compile()
    err = info.value
    assert "kernel twice: probe name 'v' is used twice (first at" in err.message
    assert err.loc.line == line_of(twice, 'ts.probe(u, "v")')


@pytest.mark.slow
def test_op_level_probe_build_names_the_statement_without_the_hand_edit_evidence(monkeypatch):
    """A kernel whose C++ the compiler itself got wrong (no edit to find): the probe build of the
    culprit task, replayed alone, names the first statement whose tile leaves its bound."""
    from tilescope.analysis.localize import codegen_check

    work = saved(P.affine, P.AFFINE, P.affine_golden).work_dir
    line = edit(work / "kernels" / "vec" / "affine_rows.cpp", "fuse(t) * 0.5f + 1.0f", "fuse(t) * 0.5f + 1.25f")
    monkeypatch.setattr(codegen_check, "edited_lines", lambda build, kernel: [])
    rep = localize(work)
    c = rep.culprit
    assert (rep.category, c.task, c.kernel, c.op) == ("codegen", 0, "affine_rows", "add")
    assert c.dsl_line == dsl(P.affine_rows, "h = t * 0.5 + 1.0")
    assert c.cpp_line == f"kernels/vec/affine_rows.cpp:{line}"
    assert any("replaying task 0 on it compared 2 statement values with outputs bit-identical to the build" in e
               for e in rep.evidence)  # fmt: skip
    op = next(e for e in rep.evidence if e.startswith("op by op in task 0"))
    assert "(`auto h = fuse(t) * 0.5f + 1.25f;`): 1024 of 1024 elements" in op  # h is computed where it is read
    probe_cpp = (work / "dfx_outputs" / "localize" / "probe" / "affine_rows.cpp").read_text()
    assert "probe(probe_sink, 0, t);" in probe_cpp and "probe_box<16, 64>(probe_sink, 2, y, {0, 0});" in probe_cpp


@pytest.mark.slow
@needs_chromium
def test_report_html_draws_the_error_with_the_task_regions_and_the_culprit():
    result = saved(P.blocks, P.BLOCKS, P.blocks_golden)
    rep = localize(result.work_dir)
    page_path = result.work_dir / "dfx_outputs" / "localize" / "report.html"
    html = page_path.read_text()
    assert "<script src" not in html and "<link" not in html and "https://" not in html
    with headless_page(page_path) as (page, errors, requests):
        page.wait_for_selector("div.map canvas")
        assert page.inner_text("#category") == "algorithm"
        assert page.inner_text("#dsl-line") == rep.culprit.dsl_line
        tasks = page.eval_on_selector_all("div.map svg rect", "rs => rs.map(r => Number(r.dataset.task))")
        assert sorted(tasks) == list(range(16))
        assert page.eval_on_selector_all("div.map svg rect.culprit", "rs => rs.map(r => Number(r.dataset.task))") == [1]
        # the diagonal blocks are right (white), the others coloured
        painted = page.evaluate(
            """() => { const c = document.querySelector('div.map canvas'); const x = c.getContext('2d');
                       const s = c.width / 64; const px = (r, k) => Array.from(x.getImageData(k * s + 1, r * s + 1, 1, 1).data);
                       return [px(0, 0), px(0, 20)]; }"""
        )
        assert painted[0][:3] == [255, 255, 255] and painted[1][:3] != [255, 255, 255]
        page.mouse.move(*_canvas_point(page, 2, 20))
        assert "task 1 (double_block) y[0:16, 16:32]" in page.inner_text("#tip")
        rows = page.eval_on_selector_all("#fingerprint tbody tr", "rs => rs.length")
        assert rows == 7
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests


def _canvas_point(page, row, col):
    box = page.locator("div.map canvas").bounding_box()
    scale = box["width"] / 64
    return box["x"] + (col + 0.5) * scale, box["y"] + (row + 0.5) * scale


@pytest.mark.slow
def test_algorithm_a_loop_that_stops_short_names_the_store_and_the_elements_never_stored():
    result = saved(P.copy, P.COPY, P.copy_golden)
    rep = localize(result.work_dir)
    assert rep.category == "algorithm"
    c = rep.culprit
    assert (c.task, c.kernel, c.op) == (0, "copy_cols", "store")
    assert c.dsl_line == dsl(P.copy_cols, "ts.store(y, [0, c]")
    assert any(e.startswith("2048 mismatching elements of y (within y[0:64, 96:128]) were never stored: tasks 0, 1, 2, 3")
               for e in rep.evidence)  # fmt: skip


@pytest.mark.slow
def test_precision_guilty_without_an_ulp_pattern_names_the_cast_op_by_op():
    result = saved(P.trunc_scale, P.TRUNC_SCALE, P.trunc_scale_golden, rtol=1e-3, atol=0.0)
    rep = localize(result.work_dir)
    assert (rep.category, rep.verdict) == ("precision", "guilty")
    c = rep.culprit
    assert (c.task, c.kernel, c.op) == (0, "trunc_scale_rows", "cast")
    assert c.dsl_line == dsl(P.trunc_scale_rows, 'mode="trunc"')
    assert any(e.startswith("op by op in task 0: the first statement whose tile leaves its bound is") for e in rep.evidence)


def test_the_command_called_in_process_leaves_the_log_level_as_it_found_it(tmp_path, capsys):
    import logging

    from tilescope._logging import configure

    configure("v5")
    before = logging.getLogger("tilescope").level
    assert cli(["localize", str(tmp_path / "nowhere")]) == 1  # logs at warn while it runs
    assert cli(["triage", str(tmp_path / "nowhere")]) == 1
    assert logging.getLogger("tilescope").level == before
    assert capsys.readouterr().err.count("[ERROR]") == 2
