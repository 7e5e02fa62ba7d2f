"""localize on the shapes and values that are easy to get wrong: bool tiles and outputs, 1-D
tiles, float64 overflowing too, unbounded results, NaN intermediates, probes named like the
runtime's own identifiers, and a level-3 dump with probes on."""

import json

import pytest
import torch
from helpers import line_of

import tilescope as ts
from tilescope.analysis.localize.localize_command import localize
from tilescope.harness import TensorSpec, run_jit


def fill(expr):
    """A golden_fn setting y to ``expr(t)`` in place."""

    def golden(t):
        t["y"][:] = expr(t)

    return golden


def saved(fn, specs, golden, rtol=1e-5, atol=1e-6):
    result = run_jit(fn, specs, golden_fn=golden, rtol=rtol, atol=atol, save_data=True)
    assert (result.work_dir / "data" / "in").is_dir(), result.error
    return result


@ts.kernel
def pick(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.bool_]):
    t = ts.load(x, [0, 0], [8, 16])
    ts.store(y, [0, 0], ts.where(t > 0.0, t > 0.5, t < -0.5))


@ts.jit
def picks(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.bool_]):
    for r in ts.range(0, 16, 8):
        pick(x[r : r + 8, :], y[r : r + 8, :])


PICKS = [TensorSpec("x", [16, 16], torch.float32), TensorSpec("y", [16, 16], torch.bool, is_output=True)]


@pytest.mark.slow
def test_bool_tiles_and_a_bool_output_are_localized():
    ok = saved(picks, PICKS, fill(lambda t: torch.where(t["x"] > 0, t["x"] > 0.5, t["x"] < -0.5)))
    assert localize(ok.work_dir).category == "pass"
    wrong = saved(picks, PICKS, fill(lambda t: t["x"] > 0.4))
    rep = localize(wrong.work_dir)
    assert rep.category == "algorithm"


@ts.kernel
def axpy_tile(x: ts.Tensor[[64], ts.f32], y: ts.Out[[64], ts.f32]):
    ts.store(y, [0], ts.load(x, [0], [64]) * 2.0 + 1.0)


@ts.jit
def axpy(x: ts.Tensor[[256], ts.f32], y: ts.Out[[256], ts.f32]):
    for i in ts.range(0, 256, 64):
        axpy_tile(x[i : i + 64], y[i : i + 64])


@pytest.mark.slow
def test_op_level_on_1d_tiles_quotes_the_element_it_names(monkeypatch):
    from tilescope.analysis.localize import codegen_check

    specs = [TensorSpec("x", [256], torch.float32), TensorSpec("y", [256], torch.float32, is_output=True)]
    work = saved(axpy, specs, fill(lambda t: t["x"] * 2.0 + 1.0)).work_dir
    cpp = work / "kernels" / "vec" / "axpy_tile.cpp"
    cpp.write_text(cpp.read_text().replace("2.0f + 1.0f", "2.0f + 1.5f"))
    monkeypatch.setattr(codegen_check, "edited_lines", lambda build, kernel: [])
    rep = localize(work)
    assert (rep.category, rep.culprit.op) == ("codegen", "store")
    op = next(e for e in rep.evidence if e.startswith("op by op in task 0"))
    x = torch.load(work / "data" / "in" / "x.pt", weights_only=True)
    index = int(op.split(" at [0, ")[1].split("]")[0])
    want = float(x[index] * 2.0 + 1.0)
    assert f"interp in the program's dtypes {want:.9g}" in op


@ts.kernel
def exp_rows(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    e = ts.exp(ts.load(x, [0, 0], [4, 8]))
    ts.store(y, [0, 0], e / ts.row_sum(e))


@ts.jit
def soft(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    for r in ts.range(0, 8, 4):
        exp_rows(x[r : r + 4, :], y[r : r + 4, :])


@pytest.mark.slow
def test_an_exp_past_float64s_range_is_still_an_overflow():
    specs = [
        TensorSpec("x", [8, 8], torch.float32, init_value=lambda shape, dtype: 800 + torch.randn(shape, dtype=dtype)),
        TensorSpec("y", [8, 8], torch.float32, is_output=True),
    ]
    rep = localize(saved(soft, specs, fill(lambda t: torch.softmax(t["x"], dim=-1))).work_dir)
    assert (rep.category, rep.verdict, rep.culprit.op) == ("precision", "guilty", "exp")
    assert "infinite from finite operands even in float64" in rep.summary


@ts.kernel
def recip(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    t = ts.load(x, [0, 0], [4, 8])
    ts.store(y, [0, 0], 1.0 / (t - 0.1))


@ts.jit
def recips(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    for r in ts.range(0, 8, 4):
        recip(x[r : r + 4, :], y[r : r + 4, :])


@pytest.mark.slow
def test_an_unbounded_result_is_guilty_with_no_tolerance_proposed():
    def init(shape, dtype):
        x = torch.rand(shape, dtype=dtype) + 1.0
        x[5, 3] = 0.1
        return x

    specs = [TensorSpec("x", [8, 8], torch.float32, init_value=init), TensorSpec("y", [8, 8], torch.float32, is_output=True)]
    rep = localize(saved(recips, specs, fill(lambda t: (1.0 / (t["x"].double() - 0.1)).float())).work_dir)
    assert (rep.category, rep.verdict, rep.tolerance) == ("precision", "guilty", None)
    assert "no tolerance passes" in rep.summary
    assert (rep.culprit.task, rep.culprit.op) == (1, "store")
    assert rep.culprit.dsl_line.endswith(f":{line_of(recip, '1.0 / (t - 0.1)')}")


@ts.kernel
def half(x: ts.Tensor[[8, 8], ts.f32], h: ts.Out[[8, 8], ts.f32]):
    t = ts.load(x, [0, 0], [8, 8])
    ts.store(h, [0, 0], ts.sqrt(t - 0.5))


@ts.kernel
def copy8(h: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    ts.store(y, [0, 0], ts.load(h, [0, 0], [8, 8]))


@ts.jit
def two_step(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    h = ts.create_tensor([8, 8], ts.f32)
    half(x, h)
    copy8(h, y)


@pytest.mark.slow
def test_nan_written_into_an_intermediate_leaves_its_reference():
    def golden(t):
        t["h"] = torch.sqrt((t["x"] - 0.5).abs())
        t["y"][:] = t["h"]

    specs = [TensorSpec("x", [8, 8], torch.float32), TensorSpec("y", [8, 8], torch.float32, is_output=True)]
    rep = localize(saved(two_step, specs, golden).work_dir)
    assert rep.category == "algorithm" and rep.culprit.task == 0
    assert any(e.startswith("intermediate h leaves its reference first where task 0 (kernel half) wrote it") for e in rep.evidence)


@ts.kernel
def named_probe(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    probe = ts.load(x, [0, 0], [8, 8])
    ts.probe(probe, "probe")
    ts.store(y, [0, 0], probe)


@ts.jit
def probe_named(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    named_probe(x, y)


@pytest.mark.slow
def test_a_variable_named_like_the_probe_call_compiles_and_a_level_3_dump_keeps_no_payloads():
    prog = probe_named.compile()
    x, y = torch.randn(8, 8), torch.zeros(8, 8)
    prog.run(x, y, probes=True, enable_dump_tensor=3)
    assert torch.equal(x, y)
    m = json.loads((prog.work_dir / "dfx_outputs" / "tensor_dump" / "tensor_dump.json").read_text())
    args = [r for r in m["records"] if r["stage"] != "probe"]
    probes = [r for r in m["records"] if r["stage"] == "probe"]
    assert args and all(r["bin_size"] == 0 for r in args)
    assert len(probes) == 1 and probes[0]["bin_size"] == 256


@pytest.mark.parametrize("name", ["a.b", "1x"])
def test_a_probe_name_must_be_an_identifier(name):
    from tilescope.errors import DSLError
    from tilescope.language.frontend import load_source
    from tilescope.launch.program import compile_program

    src = f"""
import tilescope as ts

@ts.kernel
def k(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    t = ts.load(x, [0, 0], [8, 8])
    ts.probe(t, {name!r})
    ts.store(y, [0, 0], t)

@ts.jit
def p(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    k(x, y)
"""
    with pytest.raises(DSLError, match=f"ts.probe name {name!r} is not a name"):
        compile_program(load_source(src, "<probe-name>"))


@pytest.mark.slow
def test_op_level_through_a_row_sum_pairs_every_statement(monkeypatch):
    import localize_programs as P

    from tilescope.analysis.localize import codegen_check

    work = saved(P.long_sum, P.LONG_SUM, P.long_sum_golden, rtol=1e-4, atol=1e-4).work_dir
    cpp = work / "kernels" / "vec" / "row_total.cpp"
    cpp.write_text(cpp.read_text().replace("row_sum(t)", "row_sum(t) * 1.01f"))
    monkeypatch.setattr(codegen_check, "edited_lines", lambda build, kernel: [])
    rep = localize(work)
    assert (rep.category, rep.culprit.task, rep.culprit.op) == ("codegen", 0, "store")
    assert rep.culprit.dsl_line.endswith(f":{line_of(P.row_total, 'ts.store(y, [0, 0], ts.row_sum(t))')}")
    assert any("compared 2 statement values with outputs bit-identical" in e for e in rep.evidence)
    assert [x for x in rep.limitations if not x.startswith("kernels/vec/row_total.cpp changed since")] == []


@ts.kernel
def _epilogue(x: ts.Tensor[[4, 8], ts.f32], b: ts.Tensor[[1, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    ts.store(y, [0, 0], ts.exp(ts.load(x, [0, 0], [4, 8]) * 0.5 + ts.load(b, [0, 0], [1, 8])))


@pytest.mark.parametrize(
    ("generated", "now", "op"),
    [
        ("t * 0.5f + b", "t * 0.25f + b", "mul"),  # a constant: the operator beside it
        ("t * 0.5f + b", "t * 0.5f + c", "add"),
        ("t * 0.5f + b", "t * 0.5f - b", "add"),  # the operator the edit replaced, mapped back
        ("store(y, {0, 0}, exp(t * 0.5f + b));", "store(y, {0, 0}, exp(t * 0.5f + b + 1.0f));", "add"),  # one put in
        ("store(y, {0, 0}, exp(u));", "store(y, {0, 0}, exp(v));", "exp"),  # an argument: the call around it
        ("store(y, {0, 0}, exp(u));", "store(y, {1, 0}, exp(u));", "store"),
        # an offset of a load read in place inside the store's expression: the load's
        ("store(y, {0, 0}, t * view<1, 16>(b, {0, 0}, {extent(y)}));", "store(y, {0, 0}, t * view<1, 16>(b, {1, 0}, {extent(y)}));", "load"),
        ("store(y, {0, 0}, exp(u));", "store(y, {0, 0}, log(u));", "exp"),  # the op the edit replaced
        ("a = 1e-5f;", "a = 1e-6f;", "store"),  # nothing around it is an op of the statement: the statement's
    ],
)
def test_a_hand_edit_names_the_op_it_changed(generated, now, op):
    from tilescope.analysis.localize.op_naming import edited_op
    from tilescope.language.frontend import kernel_ir

    stmt = kernel_ir(_epilogue).body[0]
    assert edited_op(stmt, generated, now) == op
