"""Never-written memory found by poisoning it: two runs with two patterns, compared task by task."""

from __future__ import annotations

import pytest
import torch
import triage_programs as tp

from tilescope.analysis.poison import mask_boxes, poison_run, raw_poison


@pytest.mark.slow
def test_a_store_loop_one_chunk_short_names_the_task_its_region_and_the_compile_finding(tmp_path):
    prog = tp.short_store.compile(build_dir=str(tmp_path))
    p = poison_run(prog, tp.short_store_inputs())
    rep = p.report
    # the output columns fed by the unstored chunk depend on the poison: rows of both tasks, cols 448:512
    n, total, where = rep.outputs["z"]
    assert (n, total, where) == (2 * 64 * 64, 2 * 64 * 512, "z[:, 448:512]")
    assert [(u.task, u.kernel, u.param, u.region, u.where, u.elements) for u in rep.unstored] == [
        (0, "scale_rows_short", "y", "y[0:64, 0:512]", "y[:, 448:512]", 64 * 64),
        (1, "scale_rows_short", "y", "y[64:128, 0:512]", "y[:, 448:512]", 64 * 64),
    ]
    assert all(u.read_later for u in rep.unstored)
    assert [(r.task, r.kernel, r.param, r.where, r.writers) for r in rep.reads] == [
        (2, "add_one", "y", "y[:, 448:512]", [0]),
        (3, "add_one", "y", "y[:, 448:512]", [1]),
    ]
    lines = p.lines()
    assert lines[0] == "8192 of 65536 elements of output z depend on memory nothing wrote: z[:, 448:512]"
    assert lines[1].startswith(
        "task 0 (kernel scale_rows_short) declared y = y[0:64, 0:512] as its output but did not store y[:, 448:512] "
        "(4096 of 32768 elements); the same in task(s) 1; the compile saw it: kernel scale_rows_short: Out param "
        "y[64, 512] is never written"
    )
    assert "triage_programs.py:" in lines[1]


@pytest.mark.slow
def test_split_kv_attention_missing_a_store_blames_the_partial_kernel_not_the_combine(tmp_path):
    prog = tp.split_kv_missing_store.compile(build_dir=str(tmp_path))
    rep = poison_run(prog, tp.attention_inputs()).report
    assert {u.kernel for u in rep.unstored} == {"attn_partial_no_l"}
    assert [(u.task, u.param, u.where) for u in rep.unstored] == [(t, "rowsum", "rowsum[:, :]") for t in range(4)]
    assert all(u.read_later for u in rep.unstored)
    (read,) = rep.reads
    assert (read.task, read.kernel, read.param, read.elements, read.writers) == (4, "attn_combine", "rowsum", 64, [0, 1, 2, 3])
    assert rep.outputs["out"][0] == 16 * 64


@pytest.mark.slow
def test_a_correct_program_is_clean(tmp_path):
    prog = tp.split_kv.compile(build_dir=str(tmp_path))
    p = poison_run(prog, tp.attention_inputs())
    assert p.report.clean and p.lines() == []


def test_raw_poison_and_boxes():
    a = torch.full((4, 6), 1.0)
    b = a.clone()
    a[1:3, 2:5] = torch.tensor(0xA5A5A5A5, dtype=torch.int64).to(torch.int32).view(torch.float32)
    b[1:3, 2:5] = torch.tensor(0x5A5A5A5A, dtype=torch.int32).view(torch.float32)
    raw = raw_poison(a, b)
    assert int(raw.sum()) == 6 and mask_boxes(raw) == [((1, 3), (2, 5))]
    m = torch.zeros(3, 5, dtype=torch.bool)
    m[0, 0] = m[2, 4] = True
    assert mask_boxes(m) == [((0, 1), (0, 1)), ((2, 3), (4, 5))]
    assert mask_boxes(m, limit=1) == [((0, 3), (0, 5))]
