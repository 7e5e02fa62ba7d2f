"""Recomputed tiles: a tile of a few cheap elementwise ops that is only read by fused expressions,
row reductions and stores is emitted as an expression computed again where it is read (its
reductions and other parts once, into tiles), not stored into a tile on the stack; the bits are
those of the build with the tile stored."""

import re

import pytest
import torch
from helpers import generated_and_edited

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
    lines = [line.split("  // @")[0].strip() for line in src.splitlines() if re.match(r"\s+(auto|Tile<|TileView<|float )", line)]
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
        d = t - ts.row_mean(t)  # inside a loop: recomputed, its part on every pass
        ts.store(y, [0, c], d * ts.row_sum(d))


@ts.kernel
def read_in_an_inner_loop(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    for r in ts.range(0, R, 4):
        t = ts.load(x, [r, 0], [4, C])
        d = t * ts.row_max(t)
        for _ in ts.range(0, 2, 1):  # each pass reads the d of the outer pass
            ts.store(y, [r, 0], d + ts.row_sum(d))


@ts.kernel
def loop_carried(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    acc = ts.zeros([R, 32], F)
    for c in ts.range(0, C, 32):
        t = ts.load(x, [0, c], [R, 32])
        d = t - acc  # acc changes after it, on every pass: stored
        acc = acc + t
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
        (_one_kernel(loop_carried), ["Tile<float, 8, 32> d = t - acc"]),
    ],
    ids=["centred", "exp", "four ops", "five reads", "a leaf reassigned", "copied", "a loop-carried leaf"],
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
    prog, stored = generated_and_edited(normed, tmp_path, lambda text: text.replace(
        "Tile<float, 8, 1> d_0 = row_mean(t); auto d = fuse(t) - d_0;", "Tile<float, 8, 64> d = t - row_mean(t);"))
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


def test_a_tile_recomputed_in_a_loop_gives_the_bits_of_the_stored_tile(tmp_path):
    prog, stored = generated_and_edited(_one_kernel(in_a_loop), tmp_path, lambda text: text.replace(
        "Tile<float, 8, 1> d_0 = row_mean(t); auto d = fuse(t) - d_0;", "Tile<float, 8, 32> d = t - row_mean(t);"))
    torch.manual_seed(0)
    x = torch.randn(R, C) * 100 + 3
    a, b = torch.zeros(R, C), torch.zeros(R, C)
    prog.run(x, a)
    stored.run(x, b)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    assert not torch.equal(a[:, :32], a[:, 32:])  # each pass computed its own part


@ts.inline
def spread(a, m):
    return (a - m) * (a + m)


@ts.inline
def sq(a):
    return a * a


@ts.kernel
def shared_part(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    d = spread(t, ts.row_mean(t))  # one row_mean node, read twice
    ts.store(y, [0, 0], d * ts.row_sum(d))


@ts.kernel
def nested_helper(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F]):
    t = ts.load(x, [0, 0], [R, C])
    d = sq(sq(t - 1.0))  # three nodes, seven ops where they are read: stored
    ts.store(y, [0, 0], d * ts.row_sum(d))


@ts.kernel
def scalar_part(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F], eps: ts.Scalar[F]):
    t = ts.load(x, [0, 0], [R, C])
    d = t * (eps * 2.0)
    ts.store(y, [0, 0], d * ts.row_sum(d))


@ts.jit
def scalar_scaled(x: ts.Tensor[[R, C], F], y: ts.Out[[R, C], F], eps: ts.Scalar[F]):
    scalar_part(x, y, eps)


@pytest.mark.parametrize(
    "program, expected",
    [
        (_one_kernel(shared_part), ["Tile<float, 8, 1> d_0 = row_mean(t);", "auto d = (fuse(t) - d_0) * (fuse(t) + d_0);"]),
        (_one_kernel(nested_helper), ["Tile<float, 8, 64> d = "]),
        (scalar_scaled, ["float d_0 = eps * 2.0f;", "auto d = fuse(t) * d_0;"]),
        (_one_kernel(in_a_loop), ["Tile<float, 8, 1> d_0 = row_mean(t);", "auto d = fuse(t) - d_0;"]),
        (_one_kernel(read_in_an_inner_loop), ["Tile<float, 4, 1> d_0 = row_max(t);", "auto d = fuse(t) * d_0;"]),
    ],
    ids=["a part read twice", "seven ops where read", "a scalar part", "in a loop", "read in an inner loop"],
)
def test_parts_are_computed_once_and_ops_counted_where_read(tmp_path, program, expected):
    prog = program.compile(build_dir=str(tmp_path))  # g++ builds it
    decls = declarations(kernel_source(prog))
    for line in expected:
        assert sum(d.startswith(line) for d in decls) == 1, f"{line!r} not once among {decls}"
    for k in prog.program().kernels:  # the IR dump read back (its shared nodes apart) gives the same C++
        assert kernel_sites(prog, k)[1] is None
        assert edited_lines(prog, k) == []
    x = torch.randn(R, C)
    args = (x, torch.zeros(R, C)) + ((0.25,) if program is scalar_scaled else ())
    want = (x, torch.zeros(R, C)) + args[2:]
    prog.run(*args)
    prog.run(*want, platform="interp")
    torch.testing.assert_close(args[1], want[1], rtol=1e-5, atol=1e-5)


def test_the_probe_build_probes_a_recomputed_tile_not_its_part(tmp_path):
    from tilescope.analysis.localize.probe_build import compile_probe_build, instrument
    from tilescope.analysis.localize.source_map import kernel_text

    prog = scalar_scaled.compile(build_dir=str(tmp_path))
    (kernel,) = prog.program().kernels
    sites, why = kernel_sites(prog, kernel)
    assert why is None
    text = instrument(kernel_text(prog, kernel.name)[0], sites)
    assert "auto d = fuse(t) * d_0; probe(probe_sink, 1, d);" in text
    assert compile_probe_build(prog, kernel.name, text).is_file()  # a probe of the expression compiles
