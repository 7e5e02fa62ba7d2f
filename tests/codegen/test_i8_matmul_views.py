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
    return [ln for ln in lines if " = view<" in ln or "matmul(" in ln or "matmul_acc(" in ln]


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


S = 32


@ts.inline
def gram(a):
    return ts.matmul(a, a, transpose_b=True)


@ts.inline
def gram_t(a):
    return ts.matmul(a, a, transpose_a=True)


@ts.kernel
def shared_unnamed(x: ts.Tensor[[S, S], ts.i8], y: ts.Out[[S, S], ts.i32], z: ts.Out[[S, S], ts.i32]):
    ts.store(y, [0, 0], gram(ts.load(x, [0, 0], [S, S])))
    ts.store(z, [0, 0], gram_t(ts.load(x, [0, 0], [S, S])))


@ts.kernel
def shared_named(x: ts.Tensor[[S, S], ts.i8], y: ts.Out[[S, S], ts.i32], z: ts.Out[[S, S], ts.i32]):
    q = ts.load(x, [0, 0], [S, S])
    ts.store(y, [0, 0], ts.matmul(q, q, transpose_b=True))
    ts.store(z, [0, 0], ts.matmul(q, q, transpose_a=True))


@pytest.mark.parametrize("kernel", [shared_unnamed, shared_named], ids=["unnamed", "named"])
def test_one_tile_on_both_sides_with_one_transposed_stays_a_tile(tmp_path, kernel):
    """``ts.matmul(q, q, transpose_b=True)``: the same node on both sides, one transposed, is a
    tile (a view there would drop the transpose, or not compile)."""

    @ts.jit
    def program(x: ts.Tensor[[S, S], ts.i8], y: ts.Out[[S, S], ts.i32], z: ts.Out[[S, S], ts.i32]):
        kernel(x, y, z)

    prog = program.compile(build_dir=str(tmp_path))
    text = "\n".join(_matmul_lines(prog))
    # the transposed side is a tile: a load (unnamed) or the named tile q; the other side of an
    # unnamed pair may still be a view
    if kernel is shared_unnamed:
        assert text.count("transpose(load<32, 32>(x, {0, 0}))") == 2, text
    else:
        assert " = view<" not in text and text.count("transpose(q)") == 2, text
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-128, 128, (S, S), generator=g, dtype=torch.int8)
    y, z = torch.zeros(S, S, dtype=torch.int32), torch.zeros(S, S, dtype=torch.int32)
    prog.run(x, y, z)
    assert torch.equal(y, (x.long() @ x.long().T).to(torch.int32))
    assert torch.equal(z, (x.long().T @ x.long()).to(torch.int32))


@ts.kernel
def acc_as_a_value(x: ts.Tensor[[M, K], ts.i8], w: ts.Tensor[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
    acc = ts.full([M, N], 7, ts.i32)
    ts.store(y, [0, 0], ts.matmul(ts.load(x, [0, 0], [M, K]), ts.load(w, [0, 0], [K, N]), acc=acc))


def test_an_accumulator_not_updated_in_place_takes_views(tmp_path):
    """``ts.matmul(a, b, acc=acc)`` as a value (kernel.hpp's three-operand matmul) with views."""
    prog = _program(acc_as_a_value).compile(build_dir=str(tmp_path))
    (line,) = _matmul_lines(prog)
    assert line.startswith(
        "store(y, {0, 0}, matmul(view<32, 256>(x, {0, 0}, {extent(y)}), view<256, 64>(w, {0, 0}, {extent(y)}), acc));"
    ), line
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (K, W), generator=g, dtype=torch.int8)
    got = torch.zeros(M, N, dtype=torch.int32)
    prog.run(x, w, got)
    assert torch.equal(got, (x.long() @ w[:, :N].long() + 7).to(torch.int32))


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
