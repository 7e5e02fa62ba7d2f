"""tilescope localize on kernels whose stores run along chosen dims (dims=) every few elements
(strides=): alignment compares a store with the golden where it really wrote, the statements of
the C++ pair up with the IR, and the probe build probes the elements each such store wrote."""

from __future__ import annotations

import pytest
import torch
from seeded_bugs import dsl

import tilescope as ts
from tilescope.analysis.localize.localize_command import localize
from tilescope.harness import TensorSpec, run_jit

pytestmark = pytest.mark.slow  # g++ builds and localize runs

R, W = 8, 16


@ts.kernel
def interleave_rows(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, 2 * W], ts.f32]):
    t = ts.load(x, [0, 0], [R, W])
    ts.store(y, [0, 0], t * 2.0, strides=[1, 2])  # the even columns
    ts.store(y, [0, 1], t + 1.5, strides=[1, 2])  # the odd columns; the defect: the golden adds 1


@ts.jit
def interleave(x: ts.Tensor[[2 * R, W], ts.f32], y: ts.Out[[2 * R, 2 * W], ts.f32]):
    for r in ts.range(0, 2 * R, R):
        interleave_rows(x[r : r + R, :], y[r : r + R, :])


def interleave_golden(t):
    x = t["x"]
    t["y"][:] = torch.stack((x * 2.0, x + 1.0), dim=-1).reshape(x.shape[0], -1)


@ts.kernel
def planes_rows(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, 2, W], ts.f32]):
    t = ts.load(x, [0, 0], [R, W])
    ts.store(y, [0, 0, 0], t * 2.0, dims=[0, 2])  # y[:, 0, :]
    ts.store(y, [0, 1, 0], t + 1.5, dims=[0, 2])  # y[:, 1, :]; the defect: the golden adds 1


@ts.jit
def planes(x: ts.Tensor[[2 * R, W], ts.f32], y: ts.Out[[2 * R, 2, W], ts.f32]):
    for r in ts.range(0, 2 * R, R):
        planes_rows(x[r : r + R, :], y[r : r + R, :, :])


def planes_golden(t):
    x = t["x"]
    t["y"][:] = torch.stack((x * 2.0, x + 1.0), dim=1)


def _saved(fn, out_shape, golden):
    specs = [TensorSpec("x", [2 * R, W], torch.float32), TensorSpec("y", out_shape, torch.float32, is_output=True)]
    result = run_jit(fn, specs, golden_fn=golden, rtol=1e-5, atol=1e-6, save_data=True)
    assert (result.work_dir / "data" / "in").is_dir(), result.error
    return result


def _localized(fn, out_shape, golden):
    result = _saved(fn, out_shape, golden)
    assert not result.passed
    return result.work_dir, localize(result.work_dir)


def test_a_strided_store_is_compared_where_it_wrote_and_its_line_is_named():
    work, rep = _localized(interleave, [2 * R, 2 * W], interleave_golden)
    c = rep.culprit
    # the even columns' store matches the golden at y[:, 0::2]: the add of the odd ones is the culprit
    assert (rep.category, c.task, c.kernel, c.op) == ("algorithm", 0, "interleave_rows", "add"), rep.evidence
    assert c.dsl_line == dsl(interleave_rows, "t + 1.5")
    assert c.cpp_line is not None and c.cpp_line.startswith("kernels/")
    assert not any("pair up" in x or "defect" in x for x in rep.limitations), rep.limitations


def test_a_store_along_chosen_dims_is_compared_where_it_wrote():
    work, rep = _localized(planes, [2 * R, 2, W], planes_golden)
    c = rep.culprit
    assert (rep.category, c.task, c.kernel, c.op) == ("algorithm", 0, "planes_rows", "add"), rep.evidence
    assert c.dsl_line == dsl(planes_rows, "t + 1.5")
    assert not any("pair up" in x or "defect" in x for x in rep.limitations), rep.limitations


def test_the_probe_build_probes_what_a_strided_store_wrote(monkeypatch):
    """The C++ of a right program made wrong (no edit to find): the probe build of the culprit
    task probes each store's elements along its axes, and names the statement."""
    from tilescope.analysis.localize import codegen_check

    def golden(t):  # the program's own algorithm: it passes
        x = t["x"]
        t["y"][:] = torch.stack((x * 2.0, x + 1.5), dim=-1).reshape(x.shape[0], -1)

    result = _saved(interleave, [2 * R, 2 * W], golden)
    assert result.passed
    cpp = result.work_dir / "kernels" / "vec" / "interleave_rows.cpp"
    text = cpp.read_text()
    assert "store<Axes<0, 1, 1, 2>>(y, {0, 1}, fuse(t) + 1.5f, ::check_sites[2]);" in text
    cpp.write_text(text.replace("fuse(t) + 1.5f", "fuse(t) + 1.25f"))
    monkeypatch.setattr(codegen_check, "edited_lines", lambda build, kernel: [])
    rep = localize(result.work_dir)
    c = rep.culprit
    assert (rep.category, c.task, c.kernel, c.op) == ("codegen", 0, "interleave_rows", "store"), rep.evidence
    assert c.dsl_line == dsl(interleave_rows, "t + 1.5")
    probe_cpp = (result.work_dir / "dfx_outputs" / "localize" / "probe" / "interleave_rows.cpp").read_text()
    assert "probe_box<8, 16, Axes<0, 1, 1, 2>>(probe_sink, 2, y, {0, 1});" in probe_cpp


@ts.kernel
def ragged_planes(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, 2, W], ts.f32], n: ts.Scalar[ts.i32]):
    t = ts.load(x, [0, 0], [R, W])
    ts.store(y, [0, 0, 0], t, valid=(n, W), dims=[0, 2])
    ts.store(y, [0, 1, 0], t * 2.0, dims=[0, 2], strides=[1, 1, 1])
    ts.store(y, [0, 0, 0], t, valid=(n, W))


@ts.jit
def ragged(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, 2, W], ts.f32], n: ts.Scalar[ts.i32]):
    ragged_planes(x, y, n)


def test_every_store_form_pairs_with_its_statement():
    from tilescope.analysis.localize.source_map import kernel_sites
    from tilescope.build.manifest import Build

    build = Build(ragged.compile().work_dir)
    kernel = build.program().kernel("ragged_planes")
    sites, why = kernel_sites(build, kernel)
    assert why is None
    stores = sorted((s for s in sites.values() if s.text.startswith("store")), key=lambda s: s.cpp_line)
    assert [s.text.split("(")[0] for s in stores] == ["store_valid<Axes<0, 2, 1, 1>>", "store<Axes<0, 2, 1, 1>>",
                                                      "store_valid"]  # fmt: skip
    texts = ["valid=(n, W), dims=[0, 2])", "t * 2.0, dims=", "t, valid=(n, W))"]
    assert [s.dsl_line for s in stores] == [dsl(ragged_planes, text) for text in texts]
    # a statement edited into something else is named by its line
    cpp = build.work_dir / stores[1].cpp_file
    cpp.write_text(cpp.read_text().replace("store<Axes<0, 2, 1, 1>>(y,", "keep<Axes<0, 2, 1, 1>>(y,"))
    assert kernel_sites(build, kernel) == ({}, (
        f"{stores[1].cpp_file}'s statements no longer pair up with kernel ragged_planes's IR: line "
        f"{stores[1].cpp_line} (`{stores[1].text.replace('store<', 'keep<')}`) is not the store the IR has there: "
        "it was edited by hand"))  # fmt: skip
