"""The access audit and the race proof over a run's graph: what tasks actually loaded and stored
against what they declared, and every overlapping pair with a write that no path orders."""

from __future__ import annotations

import pytest
import torch
from helpers import line_of
from triage_programs import B, C, consume, edit_kernel, pipeline
from triage_programs import pipeline_inputs as inputs

import tilescope as ts
from tilescope.analysis.audit import audit_run
from tilescope.analysis.hazards import Order, Span, dead_writes, hazards


@pytest.mark.slow
def test_a_correct_program_is_proved_race_free_and_every_access_is_inside_its_region(tmp_path):
    prog = pipeline.compile(build_dir=str(tmp_path))
    a = audit_run(prog, inputs())
    assert a.failure is None and a.strays == [] and a.hazards == []
    # 8 tasks, each one load and one store, all audited, each inside its own declared region
    assert len(a.audited) == 16 and {s.op for s in a.audited} == {"load", "store"}
    assert len(a.declared) == 16
    assert (prog.work_dir / "dfx_outputs" / "triage" / "audit" / "consume.so").is_file()


@pytest.mark.slow
def test_a_load_half_a_block_past_its_region_into_an_unordered_neighbour_is_named(tmp_path):
    prog = pipeline.compile(build_dir=str(tmp_path))
    edit_kernel(prog, "consume", "view<64, 64>(y, {0, 0}", "view<64, 64>(y, {32, 0}")
    prog = ts.CompiledProgram.from_dir(prog.work_dir)
    a = audit_run(prog, inputs())
    # consume task 4 reads y[32:96): its own block and half of the next, which task 5 (produce) writes
    stray = next(st for st in a.strays if st.access.task == 4)
    assert stray.access.op == "load" and a.region(stray.access) == "y[32:96, 0:64]"
    assert a.region(stray.declared) == "y[0:64, 0:64]"
    text = a.stray_text(stray)
    assert text.startswith("task 4 (kernel consume): load of y[32:96, 0:64] at kernels/vec/consume.cpp:")
    assert f"triage_programs.py:{line_of(consume, 't = ts.load(y')}" in text and "outside its declared in y[0:64, 0:64]" in text
    # the race: task 1 (produce, block 1) writes y[64:128) and nothing orders it with task 4
    races = [h for h in a.hazards if {h.first.task, h.second.task} == {1, 4}]
    assert len(races) == 1
    h = races[0]
    assert (h.first.task, h.first.op, h.second.task, h.second.op) == (1, "out", 4, "load")
    assert a.region(h.first, h.overlap) == "y[64:96, 0:64]"
    assert "are not ordered by any path of dependencies (write/read)" in a.hazard_text(h)
    # task 7 (the last consume) reads rows nobody writes, but no task races with it there
    assert not any(7 in (h.first.task, h.second.task) for h in a.hazards)


@pytest.mark.slow
def test_a_store_through_an_input_is_a_write_the_graph_never_saw(tmp_path):
    prog = pipeline.compile(build_dir=str(tmp_path))
    # through a copy of the view, which the signature check (a reading of the C++) cannot follow
    edit_kernel(prog, "consume", "store(z, {0, 0}, fuse(t) + 1.0f", "TensorView<float> w = y; store(w, {0, 0}, fuse(t) + 1.0f")
    prog = ts.CompiledProgram.from_dir(prog.work_dir)
    a = audit_run(prog, inputs())
    stray = next(st for st in a.strays if st.access.task == 4)
    assert stray.access.op == "store" and "(declared In, written)" in a.stray_text(stray)
    # it writes y[0:64) which task 0 wrote before it (ordered): no race there, but the graph was wrong
    assert not any({h.first.task, h.second.task} == {0, 4} for h in a.hazards)


@ts.kernel
def shift(a: ts.Tensor[[B, C], ts.f32], b: ts.Out[[B, C], ts.f32]):
    ts.store(b, [0, 0], ts.load(a, [0, 0], [B, C]) + 1.0)


@ts.jit
def aliased(a: ts.Tensor[[4 * B, C], ts.f32], b: ts.Out[[4 * B, C], ts.f32]):
    for r in ts.range(0, 3 * B, B):
        shift(a[r : r + B, :], b[r + B : r + 2 * B, :])  # b's block r+1 from a's block r


@pytest.mark.slow
def test_one_tensor_passed_as_input_and_output_is_ordered_by_address(tmp_path):
    prog = aliased.compile(build_dir=str(tmp_path))
    t = torch.arange(4 * B * C, dtype=torch.float32).reshape(4 * B, C)
    expected = t.clone()
    for r in range(0, 3 * B, B):  # sequential semantics: each task sees the one before it
        expected[r + B : r + 2 * B] = expected[r : r + B] + 1
    got = t.clone()
    prog(got, got, enable_dep_gen=True)  # the same storage as In and Out
    torch.testing.assert_close(got, expected)
    deps = (prog.work_dir / "dfx_outputs" / "deps.json").read_text()
    assert '"kind": "RAW"' in deps
    a = audit_run(prog, {"a": t, "b": t})
    assert a.hazards == [] and a.strays == []
    assert [(e.pred, e.succ) for e in a.report.edges if e.kind == "RAW"] == [(0, 1), (1, 2)]


def _span(task, write, rows, op=None):
    return Span(task, 1, op or ("out" if write else "in"), write, ((rows[0], rows[1]), (0, 8)), rows[0] * 32, rows[1] * 32)


def test_the_proof_follows_paths_not_just_edges_and_ignores_reads_against_reads():
    spans = [_span(0, True, (0, 8)), _span(1, False, (0, 8)), _span(2, False, (4, 12)), _span(3, True, (8, 16))]
    # 0 -> 1 -> 3, and 2 stands alone: 2 reads rows 4..12, which 0 and 3 write
    order = Order(4, [(0, 1), (1, 3)])
    found = [(h.first.task, h.second.task, h.kind) for h in hazards(spans, order)]
    assert found == [(0, 2, "write/read"), (2, 3, "read/write")]
    assert hazards(spans, Order(4, [(0, 1), (1, 3), (0, 2), (2, 3)])) == []
    # two reads never race, whatever the order
    assert hazards([_span(0, False, (0, 8)), _span(1, False, (0, 8))], Order(2, [])) == []


def test_a_write_wholly_overwritten_before_any_read_is_dead_and_a_read_between_saves_it():
    # rows 0..8 written by tasks 0, 1 and 2 in turn (2 writes rows 0..16), then 3 reads them
    spans = [_span(0, True, (0, 8)), _span(1, True, (0, 8)), _span(2, True, (0, 16)), _span(3, False, (0, 16))]
    assert [(a.task, b.task) for a, b in dead_writes(spans)] == [(0, 1), (1, 2)]
    # a read between the writes: the first write was used
    used = [_span(0, True, (0, 8)), _span(1, False, (0, 8)), _span(2, True, (0, 8))]
    assert dead_writes(used) == []
    # a partial overwrite keeps the rest of the first write alive; an inout reads what it overwrites
    assert dead_writes([_span(0, True, (0, 8)), _span(1, True, (4, 8))]) == []
    assert dead_writes([_span(0, True, (0, 8)), _span(1, True, (0, 8), op="inout")]) == []
    # disjoint writes, each read later: nothing is lost
    assert dead_writes([_span(0, True, (0, 8)), _span(1, True, (8, 16)), _span(2, False, (0, 16))]) == []


def test_views_outside_the_index_space_are_compared_by_bytes():
    a = Span(0, 1, "out", True, None, 0, 64)
    b = Span(1, 1, "in", False, ((0, 1), (0, 4)), 60, 76)
    c = Span(2, 1, "in", False, ((0, 1), (0, 4)), 64, 80)
    found = [(h.first.task, h.second.task) for h in hazards([a, b, c], Order(3, []))]
    assert found == [(0, 1)]


def test_boxes_are_the_runtimes_so_column_halves_of_one_storage_never_overlap():
    from tilescope.analysis.hazards import layout_box, layout_of

    base = torch.zeros(64, 128)
    a, b = base[:, :64], base[:, 64:]  # two arguments, one storage; the first defines the layout
    layout = layout_of(a.shape, a.stride())
    assert layout == (128, 1)
    box_a = layout_box(a.shape, a.stride(), a.storage_offset(), layout)
    box_b = layout_box(b.shape, b.stride(), b.storage_offset(), layout)
    assert (box_a, box_b) == (((0, 64), (0, 64)), ((0, 64), (64, 128)))
    write = Span(0, 1, "out", True, box_a, 0, (63 * 128 + 64) * 4)
    read = Span(1, 1, "in", False, box_b, 64 * 4, (63 * 128 + 128) * 4)
    assert hazards([write, read], Order(2, [])) == []  # their byte ranges interleave; their boxes do not
    # a view whose addresses would repeat in the layout is not a box: compared by bytes instead
    assert layout_box((4, 200), (128, 1), 0, layout) is None
