"""The compile-time store-coverage check: an Out param a kernel cannot write whole is named with
the param, the region and the store's line (a warning; an error with compile_cfg strict)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import line_of

import tilescope as ts
from tilescope.errors import VerifyError
from tilescope.ir.unwritten import kernel_unwritten


def gaps_of(prog):
    """Every finding for ``prog``'s kernels, as (kernel, param, regions, elements, line)."""
    p = prog.program()
    return [(u.kernel, u.param, [u.region(b) for b in u.boxes], u.elements, u.loc.line) for k in p.kernels for u in kernel_unwritten(k)]


@ts.kernel
def short_rows(x: ts.Tensor[[64, 512], ts.f32], y: ts.Out[[64, 512], ts.f32]):
    for h in ts.range(0, 448, 64):  # stops one chunk early
        t = ts.load(x, [0, h], [64, 64])
        ts.store(y, [0, h], t * 2.0)


@ts.jit
def short_prog(x: ts.Tensor[[128, 512], ts.f32], y: ts.Out[[128, 512], ts.f32]):
    for r in ts.range(0, 128, 64):
        short_rows(x[r : r + 64, :], y[r : r + 64, :])



def test_a_store_loop_that_stops_one_chunk_early_names_param_region_and_line():
    (kernel, param, regions, elements, line), = gaps_of(short_prog)
    assert (kernel, param, regions, elements) == ("short_rows", "y", ["y[:, 448:512]"], 64 * 64)
    assert line == line_of(short_rows, "ts.store(y, [0, h], t * 2.0)")


@pytest.mark.slow
def test_the_compile_warns_and_the_report_keeps_the_finding(caplog):
    x = torch.randn(128, 512)
    y = torch.full((128, 512), 7.0)
    with caplog.at_level("WARNING", logger="tilescope"):
        short_prog(x, y)
    err = caplog.text
    assert "warning: " in err and "kernel short_rows: Out param y[64, 512] is never written at y[:, 448:512]" in err
    assert "(4096 of 32768 elements)" in err and "ts.store(y, [0, h], t * 2.0)" in err
    assert "strict=True" in err
    # the warning is true: those columns keep what was there
    assert torch.equal(y[:, 448:], torch.full((128, 64), 7.0)) and torch.equal(y[:, :448], x[:, :448] * 2)
    rep = json.loads((short_prog.compile().work_dir / "report" / "report.json").read_text())
    (found,) = rep["unwritten"]
    assert found["kernel"] == "short_rows" and found["regions"] == ["y[:, 448:512]"]
    assert found["boxes"] == [[[0, 64], [448, 512]]] and found["elements"] == 4096
    summary = (short_prog.compile().work_dir / "report" / "summary.txt").read_text()
    assert "never written at y[:, 448:512]" in summary


def test_strict_makes_it_a_compile_error_at_the_store(tmp_path):
    strict = ts.jit(strict=True)(short_prog.fn)
    with pytest.raises(VerifyError) as info:
        strict.compile(build_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # no half build left behind
    e = info.value
    assert e.loc.line == line_of(short_rows, "ts.store(y, [0, h], t * 2.0)")
    assert "never written at y[:, 448:512]" in e.message and "ts.InOut" in e.hint


@ts.kernel
def diag(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32], z: ts.Out[[64, 64], ts.f32]):
    for i in ts.range(0, 64, 8):
        t = ts.load(x, [i, i], [8, 8])
        ts.store(y, [i, i], t)


@ts.jit
def diag_prog(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32], z: ts.Out[[64, 64], ts.f32]):
    diag(x, y, z)


def test_dims_sharing_a_loop_are_enumerated_together_and_a_param_never_stored_is_named():
    (k1, p1, r1, n1, _), (k2, p2, r2, n2, line2) = gaps_of(diag_prog)
    assert (k1, p1, n1) == ("diag", "y", 64 * 64 - 8 * 64)
    assert r1[:3] == ["y[0:8, 8:64]", "y[8:16, 0:8]", "y[8:16, 16:64]"] and len(r1) == 14
    assert (k2, p2, r2, n2) == ("diag", "z", ["z[:, :]"], 4096)
    u = kernel_unwritten(diag_prog.program().kernels[0])[1]
    assert "the kernel has no ts.store to z" in u.message() and u.loc.line == line2


@ts.kernel
def whole(
    x: ts.Tensor[[64, 64], ts.f32],
    y: ts.Out[[64, 64], ts.f32],
    z: ts.Out[[64, 64], ts.f32],
    w: ts.Out[[8, 64], ts.f32],
    acc: ts.InOut[[64, 64], ts.f32],
    n: ts.Scalar[ts.i32],
):
    for i in ts.range(0, 64, 8):
        for j in ts.range(0, 4, 1):
            c = j * 16  # an index assigned once from a loop variable
            t = ts.load(x, [i, c], [8, 16])
            ts.store(y, [i, c], t)
    out = z  # a store through a tensor variable
    for k in ts.range(0, 16, 1):
        t = ts.load(x, [k // 2 * 8, k % 2 * 32], [8, 32])  # floordiv and mod
        ts.store(out, [k // 2 * 8, k % 2 * 32], t)
    ts.store(w, [0, n], ts.load(x, [0, 0], [8, 8]))  # an offset known only at run time: may reach anywhere
    ts.store(acc, [0, 0], ts.load(x, [0, 0], [8, 8]))  # InOut: the rest keeps its input


@ts.jit
def whole_prog(
    x: ts.Tensor[[64, 64], ts.f32],
    y: ts.Out[[64, 64], ts.f32],
    z: ts.Out[[64, 64], ts.f32],
    w: ts.Out[[8, 64], ts.f32],
    acc: ts.InOut[[64, 64], ts.f32],
    n: ts.Scalar[ts.i32],
):
    whole(x, y, z, w, acc, n)


def test_whole_writes_run_time_offsets_and_inout_params_are_not_reported():
    assert gaps_of(whole_prog) == []


@ts.kernel
def dynamic_loop(x: ts.Tensor[[8, 64], ts.f32], y: ts.Out[[8, 64], ts.f32], n: ts.Scalar[ts.i32]):
    for h in ts.range(0, n, 8):  # bounds known only at run time
        ts.store(y, [0, h], ts.load(x, [0, h], [8, 8]))


@ts.kernel
def huge(x: ts.Tensor[[1, 1 << 17], ts.f32], y: ts.Out[[1, 1 << 17], ts.f32]):
    for h in ts.range(0, (1 << 17) - 1, 1):  # misses the last element, but too many to enumerate
        ts.store(y, [0, h], ts.load(x, [0, h], [1, 1]))


@ts.jit
def unknown_prog(
    x: ts.Tensor[[8, 64], ts.f32],
    y: ts.Out[[8, 64], ts.f32],
    n: ts.Scalar[ts.i32],
    a: ts.Tensor[[1, 1 << 17], ts.f32],
    b: ts.Out[[1, 1 << 17], ts.f32],
):
    dynamic_loop(x, y, n)
    huge(a, b)


def test_what_cannot_be_enumerated_is_never_reported():
    assert gaps_of(unknown_prog) == []


@ts.kernel
def endless(x: ts.Tensor[[64, 8], ts.f32], y: ts.Out[[64, 8], ts.f32]):
    for i in ts.range(-(1 << 62), 1 << 62, 1):  # more iterations than a Python range can count
        ts.store(y, [i % 64, 0], ts.load(x, [0, 0], [1, 8]))


@ts.jit
def endless_prog(x: ts.Tensor[[64, 8], ts.f32], y: ts.Out[[64, 8], ts.f32]):
    endless(x, y)


def test_a_loop_too_long_to_count_is_not_enumerated():
    assert gaps_of(endless_prog) == []


@ts.kernel
def phases(x: ts.Tensor[[4, 3, 8], ts.f32], y: ts.Out[[4, 6, 16], ts.f32], z: ts.Out[[4, 6, 16], ts.f32]):
    for r in ts.range(0, 6):
        for p in ts.range(0, 2):  # columns p, p + 2, ...: every column, one phase at a time
            ts.store(y, [0, r, p], ts.load(x, [0, 0, 0], [4, 1, 8], dims=[0, 2]), dims=[0, 2], strides=[1, 1, 2])
        ts.store(z, [0, r, 0], ts.load(x, [0, 0, 0], [4, 1, 8], dims=[0, 2]), dims=[0, 2], strides=[1, 1, 2])


@ts.jit
def phases_prog(x: ts.Tensor[[4, 3, 8], ts.f32], y: ts.Out[[4, 6, 16], ts.f32], z: ts.Out[[4, 6, 16], ts.f32]):
    phases(x, y, z)


def test_a_store_covers_its_dims_every_stride_elements():
    # y: the tile's rows run along dim 0 and its columns along every other element of dim 2
    (kernel, param, regions, elements, line), = gaps_of(phases_prog)
    assert (kernel, param, elements) == ("phases", "z", 4 * 6 * 8)  # z's odd columns only
    assert regions == [f"z[:, :, {c}:{c + 1}]" for c in range(1, 16, 2)]
    assert line == line_of(phases, "ts.store(z, [0, r, 0]")
