"""Printed IR is valid DSL source: print -> parse -> print is stable, on every model and on
random expression trees."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilescope.ir.printer import program_str
from tilescope.language.frontend import load_source
from tilescope.passes.manager import PassManager
from tilescope.passes.pipeline import DEFAULT_PIPELINE

import matmul
import rms_norm
import softmax
import vector_dag

MODELS = {
    "rms_norm": rms_norm.rms_norm,
    "softmax": softmax.softmax,
    "matmul": matmul.matmul,
    "matmul_bf16": matmul.matmul_bf16,
    "matmul_ragged": matmul.matmul_ragged,
    "vector_dag": vector_dag.vector_dag,
}


def roundtrip(text: str, name: str) -> str:
    return program_str(load_source(text, f"<roundtrip {name}>"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_roundtrip_is_stable(name):
    program = MODELS[name].program()
    first = program_str(program)
    second = roundtrip(first, name)
    assert second == first
    reparsed = load_source(first, f"<roundtrip2 {name}>")
    assert reparsed == program  # structural equality (locations ignored)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_pass_dump_reparses(name, tmp_path):
    program = MODELS[name].program()
    final, report = PassManager(DEFAULT_PIPELINE, dump_dir=tmp_path).run(program)
    assert [p.name for p in report.dumps] == [
        "00_after_FrontEnd.py",
        "01_after_FoldConstants.py",
        "02_after_FuseMatmulAccumulate.py",
        "03_after_EliminateDeadCode.py",
    ]
    stages = [program]
    for p in DEFAULT_PIPELINE:
        stages.append(p.fn(stages[-1]))
    assert stages[-1] == final
    for path, stage in zip(report.dumps, stages, strict=True):
        text = path.read_text()
        assert text.startswith("# tilescope IR of")
        assert load_source(text, str(path)) == stage  # structural equality


TILES = ["a", "b", "r", "c"]  # a, b: [4, 8]; r: [4, 1]; c: [1, 8]


@st.composite
def tile_exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(TILES))
    kind = draw(st.sampled_from(["bin", "bin", "fn", "neg", "const", "where", "scalar"]))
    x = draw(tile_exprs(depth=depth - 1))
    if kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        return f"({x} {op} {draw(tile_exprs(depth=depth - 1))})"
    if kind == "fn":
        fn = draw(st.sampled_from(["ts.exp", "ts.tanh", "ts.abs", "ts.sigmoid", "ts.silu"]))
        return f"{fn}({x})"
    if kind == "neg":
        return f"-{x}"
    if kind == "const":
        v = draw(st.floats(-4, 4, allow_nan=False).map(lambda f: round(f, 3)))
        return f"({x} * {v!r})"
    if kind == "scalar":
        return f"({x} + s)"
    y = draw(tile_exprs(depth=depth - 1))
    return f"ts.where({x} > {y}, {x}, ts.maximum({y}, a))"


@settings(max_examples=60, deadline=None)
@given(tile_exprs())
def test_random_expressions_roundtrip(expr):
    source = f"""import tilescope as ts


@ts.kernel
def k(x: ts.Tensor[[4, 8], ts.f32], v: ts.Tensor[[4, 1], ts.f32], w: ts.Tensor[[1, 8], ts.f32],
      y: ts.Out[[4, 8], ts.f32], s: ts.Scalar[ts.f32]):
    a = ts.load(x, [0, 0], [4, 8])
    b = a * 2.0
    r = ts.load(v, [0, 0], [4, 1])
    c = ts.load(w, [0, 0], [1, 8])
    ts.store(y, [0, 0], a + {expr})


@ts.jit
def p(x: ts.Tensor[[4, 8], ts.f32], v: ts.Tensor[[4, 1], ts.f32], w: ts.Tensor[[1, 8], ts.f32],
      y: ts.Out[[4, 8], ts.f32], s: ts.Scalar[ts.f32]):
    k(x, v, w, y, s)
"""
    first = program_str(load_source(source, "<random>"))
    assert roundtrip(first, "random") == first


ROUNDTRIP_SOURCES = {
    "negative zero fill": """import tilescope as ts


@ts.kernel
def k(y: ts.Out[[1, 8], ts.f32]):
    z = ts.full([1, 8], -0.0, ts.f32)
    w = ts.zeros([1, 8], ts.f32)
    ts.store(y, [0, 0], 1.0 / z + w * -0.0)


@ts.jit
def p(y: ts.Out[[1, 8], ts.f32]):
    k(y)
""",
    "renamed loops, swaps and helper parameters": """import tilescope as ts


@ts.inline
def bump(x):
    for i in ts.range(0, 2):
        x = x + 1.0
    return x


@ts.kernel
def k(a: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    p = ts.load(a, [0, 0], [1, 8])
    q = ts.load(a, [1, 0], [1, 8])
    for i in ts.range(0, 4):
        for i in ts.range(0, 2):
            p, q = q, bump(p)
        i = i + 0
        ts.store(y, [i, 0], p + q)


@ts.jit
def prog(a: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    k(a, y)
""",
    "tensor handles and task chains": """import tilescope as ts


@ts.kernel
def inc(a: ts.Tensor[[4, 8], ts.f32], b: ts.Out[[4, 8], ts.f32]):
    ts.store(b, [0, 0], ts.load(a, [0, 0], [4, 8]) + 1.0)


@ts.jit
def prog(x: ts.InOut[[4, 8], ts.f32], y: ts.InOut[[4, 8], ts.f32]):
    src, dst = x, y
    t = inc(src, dst)
    for i in ts.range(0, 3):
        t = ts.submit(inc, src, dst, deps=[t], name='step "i"')
        src, dst = dst, src
        if i == 1:
            tmp = src
            src = tmp
""",
    "real-kernel ops": """import tilescope as ts


@ts.kernel
def k(x: ts.Tensor[[64, 128], ts.f32], v: ts.Tensor[[32], ts.f32], i: ts.Tensor[[8, 1], ts.i32], q: ts.Tensor[[16, 16], ts.i8], y: ts.InOut[[64, 128], ts.f32], n: ts.Scalar[ts.i32]):
    a = ts.load(x, [0, 0], [8, 16], valid=(n, 16), fill=float('-inf'))
    b = ts.load(v, [0], [32], valid=(ts.minimum(n, 32),))
    c = ts.load(x, [8, 0], [8, 16], valid=(4, n))
    col = ts.iota([8, 16], ts.f32)
    row = ts.iota([8, 16], ts.i32, dim=0)
    r = ts.load(i, [0, 0], [8, 1])
    g = ts.load_rows(x, r, 16) + ts.load_rows(x, r, (n, 16), valid=n, fill=-1.0)
    s = ts.matmul(a, c, transpose_b=True)
    s2 = ts.matmul(a, c, transpose_a=True)
    s2 = ts.matmul(c, a, acc=s2, transpose_a=True)
    w = ts.load(q, [0, 0], [16, 16])
    z = ts.matmul(w, w, transpose_a=True)
    e = ts.gelu(a[0:4, 8:16], approximate="tanh") + ts.gelu(a[4:8, 0:8]) + ts.erf(a[0:4, 0:8])
    x2 = ts.load(x, [0, 0], [16, 16])
    f = ts.exp2(b[16:]) + ts.log2(b[:16]) + ts.reciprocal(b[0:16]) + ts.pow(b[0:16], 2.0) + col[3] + x2[:, 2]
    h = ts.maximum(ts.minimum(a, 1.0), -1.0) + ts.row_mean(a) + ts.col_mean(c) + ts.col_min(c)
    for j in ts.range(0, ts.maximum(n - 4, 0), 8):
        ts.store(y, [j, 0], h + g + e[0, 0:1] + f[0:1] + ts.cast(z[0:8, :] + row, ts.f32) + s[:, 0:1] + s2[0:8, :], valid=(n - j, 16))


@ts.jit
def p(x: ts.Tensor[[64, 128], ts.f32], v: ts.Tensor[[32], ts.f32], i: ts.Tensor[[8, 1], ts.i32], q: ts.Tensor[[16, 16], ts.i8], y: ts.InOut[[64, 128], ts.f32], n: ts.Scalar[ts.i32]):
    for b in ts.range(0, min(n, 64), 8):
        k(x, v, i, q, y, max(n - b, 0))
""",
}


@pytest.mark.parametrize("name", sorted(ROUNDTRIP_SOURCES))
def test_printed_ir_reparses_to_the_same_ir(name):
    program = load_source(ROUNDTRIP_SOURCES[name], f"<{name}>")
    first = program_str(program)
    assert load_source(first, f"<{name} printed>") == program
    assert roundtrip(first, name) == first


def test_negative_zero_prints_as_itself():
    text = program_str(load_source(ROUNDTRIP_SOURCES["negative zero fill"], "<-0.0>"))
    assert "z = ts.full([1, 8], -0.0, ts.f32)" in text
    assert "w = ts.zeros([1, 8], ts.f32)" in text
    assert "w * -0.0" in text
