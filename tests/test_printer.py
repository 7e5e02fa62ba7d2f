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
    "vector_dag": vector_dag.vector_dag,
}


def roundtrip(text: str, name: str) -> str:
    return program_str(load_source(text, f"<roundtrip {name}>").program())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_roundtrip_is_stable(name):
    program = MODELS[name].program()
    first = program_str(program)
    second = roundtrip(first, name)
    assert second == first
    reparsed = load_source(first, f"<roundtrip2 {name}>").program()
    assert reparsed == program  # structural equality (locations ignored)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_pass_dump_reparses(name, tmp_path):
    final, report = PassManager(DEFAULT_PIPELINE, dump_dir=tmp_path).run(MODELS[name].program())
    assert [p.name for p in report.dumps] == [
        "00_after_FrontEnd.py",
        "01_after_FoldConstants.py",
        "02_after_FuseMatmulAccumulate.py",
        "03_after_EliminateDeadCode.py",
    ]
    for path in report.dumps:
        text = path.read_text()
        assert text.startswith("# tilescope IR of")
        assert load_source(text, str(path)).program() is not None
    assert load_source(report.dumps[-1].read_text(), "<final>").program() == final


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
    first = program_str(load_source(source, "<random>").program())
    assert roundtrip(first, "random") == first
