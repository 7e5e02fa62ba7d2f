"""Property: compiled kernels (sim) agree with the reference interpreter (interp) on random
elementwise programs — tile library vs torch semantics, broadcasting and scalar handling."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilescope.language.frontend import load_source
from tilescope.launch.program import compile_program

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

LEAVES = ["a", "b", "r", "c", "s", "0.5", "2.0"]  # a, b: [8, 16]; r: [8, 1]; c: [1, 16]; s: scalar


@st.composite
def exprs(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["a", "b", "r", "c"]))
    kind = draw(st.sampled_from(["bin", "bin", "bin", "fn", "mm", "where", "leaf"]))
    x = draw(exprs(depth=depth - 1))
    if kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*"]))
        return f"({x} {op} {draw(exprs(depth=depth - 1))})"
    if kind == "fn":
        fn = draw(st.sampled_from(["ts.tanh", "ts.sigmoid", "ts.abs", "ts.silu", "ts.neg", "ts.exp"]))
        return f"{fn}({x})" if fn != "ts.exp" else f"ts.exp(ts.tanh({x}))"
    if kind == "mm":
        fn = draw(st.sampled_from(["ts.maximum", "ts.minimum"]))
        return f"{fn}({x}, {draw(exprs(depth=depth - 1))})"
    if kind == "where":
        return f"ts.where({x} > {draw(exprs(depth=depth - 1))}, {x}, -{x})"
    return f"({x} * {draw(st.sampled_from(LEAVES))})"


TEMPLATE = """import tilescope as ts


@ts.kernel
def k(x: ts.Tensor[[8, 16], ts.f32], v: ts.Tensor[[8, 1], ts.f32], w: ts.Tensor[[1, 16], ts.f32],
      y: ts.Out[[8, 16], ts.f32], s: ts.Scalar[ts.f32]):
    a = ts.load(x, [0, 0], [8, 16])
    b = ts.exp(a) - 1.0
    r = ts.load(v, [0, 0], [8, 1])
    c = ts.load(w, [0, 0], [1, 16])
    ts.store(y, [0, 0], a + {expr})


@ts.jit
def p(x: ts.Tensor[[8, 16], ts.f32], v: ts.Tensor[[8, 1], ts.f32], w: ts.Tensor[[1, 16], ts.f32],
      y: ts.Out[[8, 16], ts.f32], s: ts.Scalar[ts.f32]):
    k(x, v, w, y, s)
"""


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(exprs())
def test_sim_equals_interp(expr):
    prog = compile_program(load_source(TEMPLATE.format(expr=expr), f"<sim-vs-interp {abs(hash(expr))}>"))
    gen = torch.Generator().manual_seed(0)
    x, v, w = (torch.rand(shape, generator=gen) * 2 - 1 for shape in ([8, 16], [8, 1], [1, 16]))
    outs = {}
    for platform in ("sim", "interp"):
        y = torch.zeros(8, 16)
        prog.run(x, v, w, y, 0.75, platform=platform)
        outs[platform] = y
    torch.testing.assert_close(outs["sim"], outs["interp"], rtol=1e-5, atol=1e-5, equal_nan=True, msg=expr)


BF16_SOURCE = """import tilescope as ts


@ts.kernel
def k(x: ts.Tensor[[16, 32], ts.bf16], y: ts.Out[[16, 32], ts.bf16], s: ts.Scalar[ts.bf16]):
    t = ts.load(x, [0, 0], [16, 32])
    u = t * 0.1 + s
    ts.store(y, [0, 0], ts.maximum(u, t * 0.3) - ts.exp(t) / 3.0 + ts.cast(ts.row_sum(ts.cast(u, ts.f32)), ts.bf16))


@ts.jit
def p(x: ts.Tensor[[16, 32], ts.bf16], y: ts.Out[[16, 32], ts.bf16], s: ts.Scalar[ts.bf16]):
    k(x, y, s)
"""


def test_bf16_scalars_adopt_the_tile_dtype_identically_on_sim_and_interp():
    prog = compile_program(load_source(BF16_SOURCE, "<bf16 scalars>"))
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    outs = {}
    for platform in ("sim", "interp"):
        y = torch.zeros(16, 32, dtype=torch.bfloat16)
        prog.run(x, y, 0.7, platform=platform)
        outs[platform] = y
    # each op rounds to bf16 in both; only the row sum's summation order may differ (f32)
    diff = (outs["sim"].float() - outs["interp"].float()).abs()
    assert (diff <= outs["interp"].float().abs() * 2**-7).all()
    assert (diff == 0).float().mean() > 0.9


CAST_SOURCE = """import tilescope as ts


@ts.kernel
def k(x: ts.Tensor[[1, 64], ts.f32], h: ts.Tensor[[1, 64], ts.bf16], yi: ts.Out[[5, 64], ts.i32],
      y8: ts.Out[[5, 64], ts.u8], yh: ts.Out[[5, 64], ts.i8]):
    t = ts.load(x, [0, 0], [1, 64])
    b = ts.load(h, [0, 0], [1, 64])
{stores}

@ts.jit
def p(x: ts.Tensor[[1, 64], ts.f32], h: ts.Tensor[[1, 64], ts.bf16], yi: ts.Out[[5, 64], ts.i32],
      y8: ts.Out[[5, 64], ts.u8], yh: ts.Out[[5, 64], ts.i8]):
    k(x, h, yi, y8, yh)
"""
CAST_MODES = ("rint", "round", "floor", "ceil", "trunc")


@functools.cache
def _cast_program():
    stores = "\n".join(
        f"    ts.store(yi, [{r}, 0], ts.cast(t, ts.i32, mode={m!r}))\n"
        f"    ts.store(y8, [{r}, 0], ts.cast(t, ts.u8, mode={m!r}))\n"
        f"    ts.store(yh, [{r}, 0], ts.cast(b, ts.i8, mode={m!r}))"
        for r, m in enumerate(CAST_MODES)
    )
    return compile_program(load_source(CAST_SOURCE.format(stores=stores), "<casts>"))


halves = st.integers(-300, 300).map(lambda n: n + 0.5)
near_halves = halves.map(lambda v: float(np.nextafter(np.float32(v), np.float32(0))))
floats = st.one_of(
    halves,
    near_halves,
    st.floats(-(2.0**40), 2.0**40, width=32),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 2.0**31, -(2.0**31), 2.0**31 - 128]),
)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(floats, min_size=64, max_size=64))
def test_float_to_int_casts_agree_at_halves_and_on_overflow(values):
    prog = _cast_program()
    x = torch.tensor([values], dtype=torch.float32)
    outs = {}
    for platform in ("sim", "interp"):
        args = [
            x,
            x.to(torch.bfloat16),
            *(torch.zeros(5, 64, dtype=d) for d in (torch.int32, torch.uint8, torch.int8)),
        ]
        prog.run(*args, platform=platform)
        outs[platform] = args[2:]
    for sim, interp in zip(outs["sim"], outs["interp"]):
        assert torch.equal(sim, interp), (sim != interp).nonzero().tolist()


SIGNED_ZERO_SOURCE = """import tilescope as ts


@ts.kernel
def k(a: ts.Tensor[[4, 8], ts.f32], b: ts.Tensor[[8, 16], ts.f32], acc: ts.Tensor[[4, 16], ts.f32],
      mm: ts.Out[[4, 16], ts.f32], rows: ts.Out[[4, 1], ts.f32], cols: ts.Out[[1, 16], ts.f32]):
    c = ts.load(acc, [0, 0], [4, 16])
    ts.store(mm, [0, 0], ts.matmul(ts.load(a, [0, 0], [4, 8]), ts.load(b, [0, 0], [8, 16]), acc=c))
    ts.store(rows, [0, 0], ts.row_sum(c))
    ts.store(cols, [0, 0], ts.col_sum(c))


@ts.jit
def p(a: ts.Tensor[[4, 8], ts.f32], b: ts.Tensor[[8, 16], ts.f32], acc: ts.Tensor[[4, 16], ts.f32],
      mm: ts.Out[[4, 16], ts.f32], rows: ts.Out[[4, 1], ts.f32], cols: ts.Out[[1, 16], ts.f32]):
    k(a, b, acc, mm, rows, cols)
"""


def test_sums_and_matmuls_of_negative_zeros_keep_the_sign_interp_gives():
    # every term -0.0 and every product a zero (some -0.0): torch's sums start from +0.0
    prog = compile_program(load_source(SIGNED_ZERO_SOURCE, "<signed zeros>"))
    a = torch.tensor([[-1.0, 2.0] * 4] * 4)
    b, acc = torch.full((8, 16), -0.0), torch.full((4, 16), -0.0)
    outs = {}
    for platform in ("sim", "interp"):
        ys = [torch.full((4, 16), 7.0), torch.full((4, 1), 7.0), torch.full((1, 16), 7.0)]
        prog.run(a, b, acc, *ys, platform=platform)
        outs[platform] = ys
    for sim, interp in zip(outs["sim"], outs["interp"]):
        assert torch.equal(sim, interp) and torch.equal(torch.signbit(sim), torch.signbit(interp))
        assert not torch.signbit(sim).any()  # +0.0 everywhere
