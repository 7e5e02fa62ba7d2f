"""Every op of ``ir.op_registry`` has everything it names: the tile library's functor and tile
function (and its fused form), the interpreter's function, localize's bound, its torch
reference, its row in docs/dsl.md and its ``ts.<name>`` stub; and the package's stubs are the
registry's ``ts`` ops, no more and no fewer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope.analysis.localize.bound import Bounded, run_kernel_bound
from tilescope.ir import op_registry as reg
from tilescope.ir.nodes import UnOp
from tilescope.ir.printer import program_str
from tilescope.ir.traverse import walk_exprs
from tilescope.language.frontend import load_source
from tilescope.language.ops import DSLOp
from tilescope.runtime import interp

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "src" / "tilescope" / "runtime" / "include" / "tilescope"
HEADERS = "\n".join(p.read_text() for p in sorted(INCLUDE.glob("*.hpp")))
DSL_DOC = (ROOT / "docs" / "dsl.md").read_text()
UNARY = [reg.OPS[n] for n in reg.unary_ops()]
FLOAT_UNARY = [d for d in UNARY if d.dtypes == reg.FLOAT]


def test_names_are_unique_and_fields_are_known():
    assert len(reg.OPS) == len({d.name for d in reg.OPS.values()})
    for d in reg.OPS.values():
        assert d.kind in ("kernel", "orch", "both"), d.name
        assert d.surface in ("ts", "operator", "form"), d.name
        assert d.dtypes in (reg.FLOAT, reg.NUMBER, reg.BOOL, reg.ANY), d.name
        assert d.interp in ("torch", "f32", "f64", "own"), d.name
        assert (d.surface == "form") == (d.spelled is not None), d.name
        if d.spelled:
            owner = reg.OPS[d.spelled.op]
            assert owner.keyword and owner.keyword[0] == d.spelled.keyword, d.name
            assert reg.forms_of(owner.name)[d.spelled.value] == d.name
        if d.fusable:
            assert d.elementwise and d.functor, d.name


def test_the_package_exports_one_stub_per_ts_op_and_nothing_else():
    stubs = {n for n in dir(ts) if isinstance(getattr(ts, n), DSLOp)}
    assert stubs == {d.name for d in reg.dsl_ops()}
    assert stubs <= set(ts.__all__)
    for d in reg.dsl_ops():
        stub = getattr(ts, d.name)
        assert stub.op is d and stub.__doc__ == d.doc and stub.signature == d.signature
    with pytest.raises(ts.TilescopeError, match=re.escape('ts.gelu(x, approximate="none") can only be used inside')):
        ts.gelu(torch.zeros(2))


@pytest.mark.parametrize("op", [d for d in reg.OPS.values() if d.functor], ids=lambda d: d.name)
def test_elementwise_ops_have_their_functor_tile_function_and_fused_form(op):
    assert re.search(rf"struct {op.functor}\b", HEADERS), f"no struct detail::{op.functor} in the tile library"
    if op.cpp:
        calls = rf"detail::(map|zip|binary)<detail::{op.functor}>"
        assert re.search(rf"inline [^;{{}}]*\b{op.cpp}\([^;{{}}]*\)\s*{{[^}}]*{calls}", HEADERS), (
            f"no tile function {op.cpp}() calling detail::{op.functor}"
        )
    if op.fusable and op.arity == 1:
        assert f"TS_FUSED_UNARY({op.cpp}, {op.functor})" in HEADERS
    elif op.fusable:
        assert f"fused_binary<detail::{op.functor}>" in HEADERS


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda d: d.name)
def test_float_math_calls_its_function_of_tile_math(op):
    body = re.search(rf"struct {op.functor} {{(.*?)\n}};", HEADERS, re.S)
    assert body, op.functor
    if op.interp != "own":  # sqrt and rsqrt are std::sqrt, exact
        assert f"fmath::{op.cpp}(a)" in body.group(1)
        math = (INCLUDE / "tile_math.hpp").read_text()
        assert re.search(rf"inline float {op.cpp}\(float x\)", math) and re.search(
            rf"inline double {op.cpp}\(double x\)", math
        ), f"tile_math.hpp has no float and double {op.cpp}"


@pytest.mark.parametrize(
    "op", [d for d in reg.OPS.values() if d.elementwise or d.category == reg.REDUCE], ids=lambda d: d.name
)
def test_computing_ops_have_a_torch_reference(op):
    assert callable(reg.torch_reference(op))


@pytest.mark.parametrize("op", [reg.OPS[n] for n in reg.reduce_ops()], ids=lambda d: d.name)
def test_a_reduction_s_reference_reduces_its_side(op):
    x = torch.arange(12.0).reshape(3, 4)
    assert reg.torch_reference(op)(x).shape == ((3, 1) if op.name.startswith("row_") else (1, 4))


@pytest.mark.parametrize("op", UNARY, ids=lambda d: d.name)
def test_interp_computes_each_unary_op_with_its_reference(op):
    x = torch.linspace(-3.0, 3.0, 101) if op.dtypes != reg.BOOL else torch.rand(101) > 0.5
    if op.name in ("log", "log2", "sqrt", "rsqrt"):
        x = x.abs() + 0.25
    got, want = interp.unary_fn(op.name)(x), reg.torch_reference(op)(x)
    assert got.dtype == want.dtype
    wide = reg.torch_reference(op)(x.double()).float() if op.dtypes == reg.FLOAT else want
    if op.interp == "own":  # correctly rounded, as the tile library
        assert torch.allclose(got.double(), wide.double(), rtol=2.0**-22, atol=0)
    elif op.interp == "f64":  # the reference in float64, rounded once
        torch.testing.assert_close(got, wide, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if op.interp in ("f32", "f64"):
        half = x.to(torch.bfloat16)
        wider = torch.float32 if op.interp == "f32" else torch.float64
        torch.testing.assert_close(
            interp.unary_fn(op.name)(half),
            reg.torch_reference(op)(half.to(wider)).float().to(torch.bfloat16),
            rtol=0,
            atol=0,
            equal_nan=True,
        )


def _unary_program(ops: list[reg.OpDef], dtype: str) -> str:
    def call(d: reg.OpDef, arg: str) -> str:
        form = f', {d.spelled.keyword}="{d.spelled.value}"' if d.spelled else ""
        return f"ts.{d.dsl_name}({arg}{form})"

    outs = "".join(f", {d.name}_out: ts.Out[[4, 8], ts.{dtype}]" for d in ops)
    stores = "".join(f"    ts.store({d.name}_out, [0, 0], {call(d, 't')})\n" for d in ops)
    params = f"x: ts.Tensor[[4, 8], ts.{dtype}]{outs}"
    names = ", ".join(["x", *(f"{d.name}_out" for d in ops)])
    return (
        f"import tilescope as ts\n\n@ts.kernel\ndef k({params}):\n    t = ts.load(x, [0, 0], [4, 8])\n{stores}\n"
        f"@ts.jit\ndef p({params}):\n    k({names})\n"
    )


def test_every_unary_op_lowers_prints_as_written_and_reparses():
    floats = [d for d in UNARY if d.dtypes != reg.BOOL]
    text = _unary_program(floats, "f32")
    printed = program_str(load_source(text, "<registry unary>"))
    reparsed = load_source(printed, "<registry unary reprint>")
    assert program_str(reparsed) == printed
    assert [e.op for e in walk_exprs(reparsed.kernels[0].body) if isinstance(e, UnOp)] == [d.name for d in floats]
    assert 'ts.gelu(t, approximate="tanh")' in printed
    bools = [d for d in UNARY if d.dtypes == reg.BOOL]
    assert "ts.logical_not(t)" in program_str(load_source(_unary_program(bools, "bool_"), "<registry bool>"))


def test_localize_bounds_every_unary_op():
    floats = [d for d in UNARY if d.dtypes != reg.BOOL]
    kernel = load_source(_unary_program(floats, "f32"), "<registry bound>").kernels[0]
    x = torch.linspace(0.25, 3.0, 32, dtype=torch.float64).reshape(4, 8)
    args = [Bounded(x, torch.full_like(x, 1e-7))]
    args += [Bounded(torch.zeros(4, 8, dtype=torch.float64), torch.zeros(4, 8, dtype=torch.float64)) for _ in floats]
    run_kernel_bound(kernel, args)
    for d, out in zip(floats, args[1:]):
        assert d.error is not None, d.name
        assert torch.equal(out.v, interp.unary_fn(d.name)(x)), d.name
        assert bool(torch.isfinite(out.e).all()) and bool((out.e > 0).all()), d.name


@pytest.mark.parametrize("op", reg.dsl_ops(), ids=lambda d: d.name)
def test_every_ts_op_has_a_row_in_the_dsl_doc(op):
    rows = [line for line in DSL_DOC.splitlines() if line.startswith("|")]
    assert any(re.search(rf"\bts\.{op.name}[`(]", r) for r in rows), (
        f"docs/dsl.md has no table row naming ts.{op.name}"
    )


@pytest.mark.parametrize("op", [d for d in reg.OPS.values() if d.spelled], ids=lambda d: d.name)
def test_every_keyword_form_is_in_the_dsl_doc(op):
    assert f'{op.spelled.keyword}="{op.spelled.value}"' in DSL_DOC
