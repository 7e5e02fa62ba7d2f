"""Operands of an int8 matmul read in place: a plain load the matmul does not transpose, assigned
to a name or not, is a view (``view<K, N>(w, {c, j}, ...)``), which the tile library's int8 matmul
packs from where the tensor holds it instead of copying it first; a transposed operand, a float
matmul's operand and a load of a tensor the kernel stores into stay loads. The results are
exact, against interp, with weights whose rows lie wider apart than the tile (a slice of a wider
matrix)."""

import re

import pytest
import torch

import tilescope as ts

pytestmark = pytest.mark.slow  # g++ builds

M, K, N, W = 32, 256, 64, 96  # the weights are the first N of W columns: rows W bytes apart
KC = 64  # K taken KC at a time


def _program(kernel):
    @ts.jit
    def program(x: ts.Tensor[[M, K], ts.i8], w: ts.Tensor[[K, W], ts.i8], y: ts.Out[[M, N], ts.i32]):
        kernel(x, w[:, 0:N], y)

    return program


@ts.kernel
def inline_loads(x: ts.Tensor[[M, K], ts.i8], w: ts.Tensor[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
    acc = ts.zeros([M, N], ts.i32)
    for c in ts.range(0, K, KC):
        acc = ts.matmul(ts.load(x, [0, c], [M, KC]), ts.load(w, [c, 0], [KC, N]), acc=acc)
    ts.store(y, [0, 0], acc)


@ts.kernel
def named_loads(x: ts.Tensor[[M, K], ts.i8], w: ts.Tensor[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
    acc = ts.zeros([M, N], ts.i32)
    for c in ts.range(0, K, KC):
        q = ts.load(x, [0, c], [M, KC])
        b = ts.load(w, [c, 0], [KC, N])
        acc = ts.matmul(q, b, acc=acc)
    ts.store(y, [0, 0], acc)


@ts.kernel
def transposed(x: ts.Tensor[[M, K], ts.i8], w: ts.Tensor[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
    acc = ts.zeros([M, N], ts.i32)
    for c in ts.range(0, K, KC):
        xt = ts.load(x, [0, c], [M, KC])
        acc = ts.matmul(ts.transpose(ts.transpose(xt)), ts.load(w, [c, 0], [KC, N]), acc=acc)
    ts.store(y, [0, 0], acc)


def _matmul_lines(prog) -> list[str]:
    """The kernel body's matmul and view lines, without their comments and check sites."""
    (k,) = prog.kernels
    text = (prog.work_dir / k["source"]).read_text()
    body = text[text.index("kernel_entry(") :].splitlines()
    lines = [re.sub(r", ::check_sites\[\d+\]", "", ln.split("  // @")[0].strip()) for ln in body]
    return [ln for ln in lines if ln.startswith("matmul") or " = view<" in ln or "matmul(" in ln]


def _check_exact(prog):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (K, W), generator=g, dtype=torch.int8)
    got, ref = torch.zeros(M, N, dtype=torch.int32), torch.zeros(M, N, dtype=torch.int32)
    prog.run(x, w, got)
    prog.run(x, w, ref, platform="interp")
    assert torch.equal(got, (x.long() @ w[:, :N].long()).to(torch.int32))
    assert torch.equal(got, ref)


def test_inline_operands_are_views(tmp_path):
    prog = _program(inline_loads).compile(build_dir=str(tmp_path))
    (line,) = _matmul_lines(prog)
    assert re.fullmatch(
        r"matmul_acc\(acc, view<32, 64>\(x, \{0, c\}, \{extent\(y\)\}\), view<64, 64>\(w, \{c, 0\}, \{extent\(y\)\}\)\);",
        line,
    ), line
    _check_exact(prog)


def test_named_operands_are_views(tmp_path):
    prog = _program(named_loads).compile(build_dir=str(tmp_path))
    assert _matmul_lines(prog) == [
        "TileView<int8_t, 32, 64> q = view<32, 64>(x, {0, c}, {extent(y)});",
        "TileView<int8_t, 64, 64> b = view<64, 64>(w, {c, 0}, {extent(y)});",
        "matmul_acc(acc, q, b);",
    ]
    _check_exact(prog)


def test_a_transposed_operand_is_a_tile(tmp_path):
    prog = _program(transposed).compile(build_dir=str(tmp_path))
    lines = _matmul_lines(prog)
    assert lines[-1].startswith("matmul_acc(acc, transpose(transpose(xt)), view<64, 64>(w, {c, 0}, ")
    assert not any("xt = view<" in ln for ln in lines)
    _check_exact(prog)


def test_float_matmuls_and_stored_tensors_keep_their_loads(tmp_path):
    @ts.kernel
    def f32_and_stored(
        a: ts.Tensor[[16, 16], ts.f32], q: ts.InOut[[16, 16], ts.i8], y: ts.Out[[16, 16], ts.f32]
    ):
        ts.store(y, [0, 0], ts.matmul(ts.load(a, [0, 0], [16, 16]), ts.load(a, [0, 0], [16, 16])))
        p = ts.matmul(ts.load(q, [0, 0], [16, 16]), ts.load(q, [0, 0], [16, 16]))
        ts.store(q, [0, 0], ts.cast(p, ts.i8))

    @ts.jit
    def program(a: ts.Tensor[[16, 16], ts.f32], q: ts.InOut[[16, 16], ts.i8], y: ts.Out[[16, 16], ts.f32]):
        f32_and_stored(a, q, y)

    prog = program.compile(build_dir=str(tmp_path), build_cpp=False)
    text = "\n".join(_matmul_lines(prog))
    assert "view<" not in text
    assert text.count("load<16, 16>(a, {0, 0})") == 2 and text.count("load<16, 16>(q, {0, 0})") == 2
