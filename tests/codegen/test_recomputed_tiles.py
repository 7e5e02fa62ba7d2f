"""Recomputed tiles: a tile of a few cheap elementwise ops that is only read by fused expressions,
row reductions and stores is emitted as an expression computed again where it is read (its
reductions and other parts once, into tiles), not stored into a tile on the stack; the bits are
those of the build with the tile stored."""

import re

import pytest
import torch

import tilescope as ts
from tilescope.analysis.localize.source_map import edited_lines, kernel_sites

R, C = 8, 64
F = ts.f32


def kernel_source(prog: ts.CompiledProgram) -> str:
    (k,) = prog.kernels
    return (prog.work_dir / k["source"]).read_text()


def declarations(src: str) -> list[str]:
    """The kernel body's declarations of tiles and expressions, without their line markers (a
    recomputed tile's parts and its expression, on one line, one each)."""
    lines = [line.split("  // @")[0].strip() for line in src.splitlines() if re.match(r"\s+(auto|Tile<|TileView<)", line)]
    return [d.strip() + ";" for line in lines for d in line.split(";") if d.strip()]


@ts.kernel
def centred(x: ts.Tensor[[R, C], F], g: ts.Tensor[[1, C], F], y: ts.Out[[R, C], F], eps: ts.Scalar[F]):
    t = ts.load(x, [0, 0], [R, C])
    d = t - ts.row_mean(t)
    inv = ts.rsqrt(ts.row_mean(d * d) + eps)
    ts.store(y, [0, 0], d * inv * ts.load(g, [0, 0], [1, C]))


@ts.jit
def normed(x: ts.Tensor[[R, C], F], g: ts.Tensor[[1, C], F], y: ts.Out[[R, C], F], eps: ts.Scalar[F]):
    centred(x, g, y, eps)


@ts.kernel
def exp_twice(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    e = ts.exp(t - ts.row_max(t))  # exp is not cheap: stored once
    ts.store(y, [0, 0], e / ts.row_sum(e))


@ts.kernel
def long_chain(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    d = ((t - 1.0) * 2.0 + 3.0) * t  # four ops: stored
    ts.store(y, [0, 0], d * ts.row_sum(d))


@ts.kernel
def read_often(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    d = t * 2.0
    ts.store(y, [0, 0], d * ts.row_sum(d) + d * ts.row_max(d) + d)  # five reads: stored


@ts.kernel
def reassigned_leaf(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    a = ts.load(x, [0, 0], [R, C], pad=0.0)
    d = a + 1.0
    a = a * 3.0  # d read after this must see the old a: stored
    ts.store(y, [0, 0], d * ts.row_sum(a))


@ts.kernel
def copied_out(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    d = t - ts.row_mean(t)
    u = d  # a copy needs the tile: stored
    ts.store(y, [0, 0], u * ts.row_sum(d))


@ts.kernel
def in_a_loop(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    for c in ts.range(0, C, 32):
        t = ts.load(x, [0, c], [R, 32])
        d = t - ts.row_mean(t)  # inside a loop: stored
        ts.store(y, [0, c], d * ts.row_sum(d))


def _one_kernel(kernel):
    @ts.jit
    def program(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
        kernel(x, y)

    return program


@pytest.mark.parametrize(
    "program, expected",
    [
        (normed, ["TileView<float, 8, 64> t = view<8, 64>(x, {0, 0}, {extent(y)}, ::check_sites[0])",
                  "Tile<float, 8, 1> d_0 = row_mean(t)", "auto d = fuse(t) - d_0",
                  "Tile<float, 8, 1> inv = rsqrt(fuse(row_mean(fuse(d) * d)) + eps)"]),
        (_one_kernel(exp_twice), ["Tile<float, 8, 64> e = exp(fuse(t) - row_max(t))"]),
        (_one_kernel(long_chain), ["Tile<float, 8, 64> d = ((fuse(t) - 1.0f) * 2.0f + 3.0f) * t"]),
        (_one_kernel(read_often), ["Tile<float, 8, 64> d = t * 2.0f"]),
        (_one_kernel(reassigned_leaf), ["Tile<float, 8, 64> a = load_pad<8, 64>(x, {0, 0}, 0.0f, ::check_sites[0])",
                                        "Tile<float, 8, 64> d = a + 1.0f"]),
        (_one_kernel(copied_out), ["Tile<float, 8, 64> d = t - row_mean(t)", "Tile<float, 8, 64> u = d"]),
        (_one_kernel(in_a_loop), ["Tile<float, 8, 32> d = t - row_mean(t)"]),
    ],
    ids=["centred", "exp", "four ops", "five reads", "a leaf reassigned", "copied", "in a loop"],
)
def test_which_tiles_are_recomputed(tmp_path, program, expected):
    prog = program.compile(build_dir=str(tmp_path), build_cpp=False)
    decls = declarations(kernel_source(prog))
    for line in expected:
        assert any(d.startswith(line) for d in decls), f"{line!r} not among {decls}"
    for k in prog.program().kernels:  # localize pairs each statement with its line, and regenerates the text
        assert kernel_sites(prog, k)[1] is None
        assert edited_lines(prog, k) == []


def test_a_recomputed_tile_gives_the_bits_of_the_stored_tile(tmp_path):
    prog = normed.compile(build_dir=str(tmp_path / "recomputed"))
    stored = normed.compile(build_dir=str(tmp_path / "stored"))
    (k,) = stored.kernels
    source = stored.work_dir / k["source"]
    text = source.read_text()
    edited = text.replace("Tile<float, 8, 1> d_0 = row_mean(t); auto d = fuse(t) - d_0;",
                          "Tile<float, 8, 64> d = t - row_mean(t);")
    assert edited != text
    source.write_text(edited)
    stored = ts.CompiledProgram.from_dir(stored.work_dir)
    torch.manual_seed(0)
    x, g = torch.randn(R, C) * 100 + 3, torch.rand(1, C)
    for eps in (1e-5, 0.0):
        a, b = torch.zeros(R, C), torch.zeros(R, C)
        prog.run(x, g, a, eps)
        stored.run(x, g, b, eps)
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    interp = torch.zeros(R, C)
    prog.run(x, g, interp, 1e-5, platform="interp")
    torch.testing.assert_close(a, interp, rtol=1e-5, atol=1e-5)
