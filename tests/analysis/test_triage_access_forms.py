"""triage on the bugs of convolution, pooling, scan and epilogue kernels: a padded load's pad
that is not the identity of the reduction after it, a window one element off, a per-channel
vector read as a row, an inclusive scan for an exclusive one, rows a store never reaches, and a
kernel built inside a function (a factory's), whose repair is found in the build's IR dump and
named at the user's line."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from seeded_bugs import dsl

import tilescope as ts
from tilescope.analysis.triage.triage_command import triage
from tilescope.harness import TensorSpec, run_jit

pytestmark = pytest.mark.slow  # g++ builds and triage runs

H, W, OH, OW = 17, 20, 9, 10  # a 3x3 max pool, stride 2, padding 1


@ts.kernel
def pool_rows(x: ts.Tensor[[H, W], ts.f32], y: ts.Out[[OH, OW], ts.f32]):
    m = ts.full([OH, OW], float("-inf"), ts.f32)
    for i in ts.range(0, 3):
        for j in ts.range(0, 3):
            m = ts.maximum(m, ts.load(x, [i - 1, j - 1], [OH, OW], pad=0.0, strides=[2, 2]))  # the defect: pad=0.0
    ts.store(y, [0, 0], m)


@ts.jit
def max_pool(x: ts.Tensor[[2, H, W], ts.f32], y: ts.Out[[2, OH, OW], ts.f32]):
    for n in ts.range(0, 2):
        pool_rows(x[n, :, :], y[n, :, :])


def max_pool_golden(t):
    t["y"][:] = torch.nn.functional.max_pool2d(t["x"][:, None], 3, stride=2, padding=1)[:, 0]


R, C = 8, 32  # a 3-tap convolution along rows, padding 1


@ts.kernel
def taps(x: ts.Tensor[[R, C], ts.f32], w: ts.Tensor[[3], ts.f32], y: ts.Out[[R, C], ts.f32]):
    acc = ts.zeros([R, C], ts.f32)
    for j in ts.range(0, 3):
        acc = acc + ts.load(x, [0, j], [R, C], pad=0.0) * ts.load(w, [j], [1])  # the defect: j for j - 1
    ts.store(y, [0, 0], acc)


@ts.jit
def conv_rows(x: ts.Tensor[[2 * R, C], ts.f32], w: ts.Tensor[[3], ts.f32], y: ts.Out[[2 * R, C], ts.f32]):
    for r in ts.range(0, 2 * R, R):
        taps(x[r : r + R, :], w, y[r : r + R, :])


def conv_golden(t):
    x, w = t["x"], t["w"]
    t["y"][:] = torch.nn.functional.conv1d(x[:, None], w.view(1, 1, 3), padding=1)[:, 0]


def _triaged(fn, specs, golden):
    result = run_jit(fn, specs, golden_fn=golden, rtol=1e-5, atol=1e-5, save_data=True)
    assert not result.passed and (result.work_dir / "data" / "in").is_dir(), result.error
    return triage(result.work_dir, budget=600)


def test_a_pad_that_is_not_the_identity_of_the_max_after_it_is_named():
    rep = _triaged(max_pool, [TensorSpec("x", [2, H, W], torch.float32),
                              TensorSpec("y", [2, OH, OW], torch.float32, is_output=True)], max_pool_golden)  # fmt: skip
    c = rep.culprit
    assert (rep.category, c.kernel, c.op) == ("algorithm", "pool_rows", "load"), rep.evidence
    assert c.dsl_line == dsl(pool_rows, "pad=0.0, strides=[2, 2]")
    assert any("padded elements as -inf (pad=-inf)" in e and "the load's pad is the wrong value" in e
               for e in rep.evidence), rep.evidence  # fmt: skip


def test_a_window_one_element_off_is_named():
    specs = [TensorSpec("x", [2 * R, C], torch.float32), TensorSpec("w", [3], torch.float32),
             TensorSpec("y", [2 * R, C], torch.float32, is_output=True)]  # fmt: skip
    rep = _triaged(conv_rows, specs, conv_golden)
    c = rep.culprit
    assert (rep.category, c.task, c.kernel, c.op) == ("algorithm", 0, "taps", "load"), rep.evidence
    assert c.dsl_line == dsl(taps, "ts.load(x, [0, j]")
    assert any("reading at its offset 1 - 1" in e for e in rep.evidence), rep.evidence


@ts.kernel
def scale_bias(x: ts.Tensor[[C, C], ts.f32], b: ts.Tensor[[C], ts.f32], y: ts.Out[[C, C], ts.f32]):
    bc = ts.load(b, [0], [C], dims=[None, 0])  # the defect: a row where the per-channel column bc[:, None] belongs
    ts.store(y, [0, 0], ts.relu(ts.load(x, [0, 0], [C, C]) * 2.0 + bc))


@ts.jit
def channel_bias(x: ts.Tensor[[2, C, C], ts.f32], b: ts.Tensor[[C], ts.f32], y: ts.Out[[2, C, C], ts.f32]):
    for n in ts.range(0, 2):
        scale_bias(x[n, :, :], b, y[n, :, :])


@ts.kernel
def scale_bias_row(x: ts.Tensor[[C, C], ts.f32], b: ts.Tensor[[C], ts.f32], y: ts.Out[[C, C], ts.f32]):
    bc = ts.load(b, [0], [C])  # the defect: a 1-D tensor loads as a row; the column needs dims=[0, None]
    ts.store(y, [0, 0], ts.relu(ts.load(x, [0, 0], [C, C]) * 2.0 + bc))


@ts.jit
def channel_bias_row(x: ts.Tensor[[2, C, C], ts.f32], b: ts.Tensor[[C], ts.f32], y: ts.Out[[2, C, C], ts.f32]):
    for n in ts.range(0, 2):
        scale_bias_row(x[n, :, :], b, y[n, :, :])


def channel_bias_golden(t):
    t["y"][:] = torch.relu(t["x"] * 2.0 + t["b"][None, :, None])


@ts.kernel
def prefix_rows(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    ts.store(y, [0, 0], ts.cumsum(ts.load(x, [0, 0], [R, C]), dim=-1))  # the defect: inclusive


@ts.jit
def exclusive_prefix(x: ts.Tensor[[2 * R, C], ts.f32], y: ts.Out[[2 * R, C], ts.f32]):
    for r in ts.range(0, 2 * R, R):
        prefix_rows(x[r : r + R, :], y[r : r + R, :])


def exclusive_golden(t):
    x = t["x"]
    t["y"][:] = torch.cumsum(x, dim=-1) - x


@ts.kernel
def pairs(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    for i in ts.range(0, R // 2):
        ts.store(y, [i, 0], ts.load(x, [2 * i, 0], [2, C]))  # the defect: row i where 2 * i belongs


@ts.jit
def copy_pairs(x: ts.Tensor[[2, R, C], ts.f32], y: ts.Out[[2, R, C], ts.f32]):
    for n in ts.range(0, 2):
        pairs(x[n, :, :], y[n, :, :])


def copy_golden(t):
    t["y"][:] = t["x"]


@pytest.mark.parametrize(("prog", "kernel", "text"), [(channel_bias, scale_bias, "dims=[None, 0]"),
                                                     (channel_bias_row, scale_bias_row, "ts.load(b, [0], [C])")])
def test_a_1d_tensor_read_along_the_wrong_axis_is_named(prog, kernel, text):
    specs = [TensorSpec("x", [2, C, C], torch.float32), TensorSpec("b", [C], torch.float32),
             TensorSpec("y", [2, C, C], torch.float32, is_output=True)]  # fmt: skip
    rep = _triaged(prog, specs, channel_bias_golden)
    c = rep.culprit
    assert (rep.category, c.kernel, c.op) == ("algorithm", kernel.name, "load"), rep.evidence
    assert c.dsl_line == dsl(kernel, text)
    assert any("other axis (dims=[0, None])" in e for e in rep.evidence), rep.evidence


def test_an_inclusive_scan_where_an_exclusive_one_belongs_is_named():
    specs = [TensorSpec("x", [2 * R, C], torch.float32), TensorSpec("y", [2 * R, C], torch.float32, is_output=True)]
    rep = _triaged(exclusive_prefix, specs, exclusive_golden)
    c = rep.culprit
    assert (rep.category, c.kernel, c.op) == ("algorithm", "prefix_rows", "cumsum"), rep.evidence
    assert c.dsl_line == dsl(prefix_rows, "ts.cumsum(")
    assert any("with exclusive=True in the cumsum" in e for e in rep.evidence), rep.evidence


def test_rows_a_store_never_reaches_name_the_store():
    specs = [TensorSpec("x", [2, R, C], torch.float32), TensorSpec("y", [2, R, C], torch.float32, is_output=True)]
    rep = _triaged(copy_pairs, specs, copy_golden)
    c = rep.culprit
    assert (rep.category, c.kernel, c.op) == ("uninitialized", "pairs", "store"), rep.evidence
    assert c.dsl_line == dsl(pairs, "ts.store(y, [i, 0]")


FACTORY = '''
import torch

import tilescope as ts


def build(rows=8, cols=32, k=3):
    """A k-tap convolution along rows (padding k // 2), as torch's conv1d."""
    half = k // 2

    @ts.kernel
    def taps(x: ts.Tensor[[rows, cols], ts.f32], w: ts.Tensor[[k], ts.f32], y: ts.Out[[rows, cols], ts.f32]):
        acc = ts.zeros([rows, cols], ts.f32)
        for j in ts.range(0, k):
            acc = acc + ts.load(x, [0, j + half], [rows, cols], pad=0.0) * ts.load(w, [j], [1])
        ts.store(y, [0, 0], acc)

    @ts.jit
    def conv_rows(x: ts.Tensor[[2 * rows, cols], ts.f32], w: ts.Tensor[[k], ts.f32], y: ts.Out[[2 * rows, cols], ts.f32]):
        for r in ts.range(0, 2 * rows, rows):
            taps(x[r : r + rows, :], w, y[r : r + rows, :])

    return conv_rows
'''


def test_a_factory_built_kernel_is_repaired_in_its_ir_dump_and_named_at_the_users_line(tmp_path):
    path = tmp_path / "factory_conv.py"
    path.write_text(FACTORY)
    spec = importlib.util.spec_from_file_location("factory_conv", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["factory_conv"] = module
    try:
        spec.loader.exec_module(module)
        specs = [TensorSpec("x", [2 * R, C], torch.float32), TensorSpec("w", [3], torch.float32),
                 TensorSpec("y", [2 * R, C], torch.float32, is_output=True)]  # fmt: skip
        rep = _triaged(module.build(R, C, 3), specs, conv_golden)
    finally:
        sys.modules.pop("factory_conv", None)
    c = rep.culprit
    line = FACTORY.splitlines().index(next(t for t in FACTORY.splitlines() if "j + half" in t)) + 1
    assert (rep.category, c.kernel, c.op) == ("algorithm", "taps", "add"), rep.evidence
    assert c.dsl_line.endswith(f"factory_conv.py:{line}"), c.dsl_line
    repair = next(e for e in rep.evidence if "smallest catalogue repair" in e)
    assert "made in the build's IR dump ir/conv_rows.py:" in repair
    assert "[0, j + 1]" in repair and "[0, j - 1]" in repair, repair


@ts.kernel
def block_sum(x: ts.Tensor[[R, C], ts.f32], p: ts.Out[[1, 1], ts.f32]):
    ts.store(p, [0, 0], ts.row_sum(ts.col_sum(ts.load(x, [0, 0], [R, C]))))


@ts.kernel
def total(p: ts.Tensor[[4, 1], ts.f32], loss: ts.Out[[], ts.f32]):
    ts.store(loss, [], ts.col_sum(ts.load(p, [0, 0], [4, 1])))


@ts.jit
def summed(x: ts.Tensor[[4 * R, C], ts.f32], loss: ts.Out[[], ts.f32]):
    p = ts.create_tensor([4, 1], ts.f32)
    for b in ts.range(0, 3):  # the defect: 3 blocks of 4
        block_sum(x[b * R : b * R + R, :], p[b : b + 1, :])
    total(p, loss)


def sum_golden(t):
    t["loss"].copy_(t["x"].sum())


def test_a_0_dim_loss_that_reads_memory_nothing_wrote_is_uninitialized():
    specs = [TensorSpec("x", [4 * R, C], torch.float32), TensorSpec("loss", [], torch.float32, is_output=True)]
    rep = _triaged(summed, specs, sum_golden)
    assert rep.category == "uninitialized" and not any("defect" in x for x in rep.limitations), rep.limitations
    assert any("elements of output loss depend on memory nothing wrote: loss" in e for e in rep.evidence), rep.evidence
    # the loop one step longer writes every block: the culprit is the orchestration's loop
    assert (rep.culprit.op, rep.culprit.dsl_line) == ("range", dsl(summed, "for b in ts.range(0, 3)")), rep.evidence


@ts.kernel
def ragged_copy(x: ts.Tensor[[20, C], ts.f32], y: ts.Out[[20, C], ts.f32]):
    for r in ts.range(0, 20, 8):
        n = ts.minimum(20 - r, 8) - 1  # the defect: one row short of each block
        ts.store(y, [r, 0], ts.load(x, [r, 0], [8, C], valid=(n, C)), valid=(n, C))


@ts.jit
def ragged(x: ts.Tensor[[2, 20, C], ts.f32], y: ts.Out[[2, 20, C], ts.f32]):
    for b in ts.range(0, 2):
        ragged_copy(x[b, :, :], y[b, :, :])


def test_rows_a_run_time_count_leaves_unwritten_name_the_kernels_one_store():
    specs = [TensorSpec("x", [2, 20, C], torch.float32), TensorSpec("y", [2, 20, C], torch.float32, is_output=True)]
    rep = _triaged(ragged, specs, copy_golden)
    c = rep.culprit
    # the compile cannot see a gap behind a run-time count: the kernel's one store into y is named
    assert (rep.category, c.kernel, c.op) == ("uninitialized", "ragged_copy", "store"), rep.evidence
    assert c.dsl_line == dsl(ragged_copy, "ts.store(y, [r, 0]")
