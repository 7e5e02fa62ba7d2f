"""Regressions found in review, end to end: each program runs on sim and interp and both are
compared with torch (or with exact expected values)."""

import inspect
import struct
import subprocess

import pytest
import torch

import tilescope as ts
from tilescope.codegen.kernel_cpp import kernel_cpp
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.ir.nodes import Assign, For
from tilescope.ir.traverse import walk_stmts
from tilescope.language.frontend import kernel_ir
from tilescope.toolchain.compiler import BuildJob, compile_command, find_cxx

F = ts.f32


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def run_both(jit, make_args, **compile_cfg):
    """Compile ``jit`` once and run it on sim and on interp; the arguments after each run."""
    prog = jit.compile(**compile_cfg)
    out = {}
    for platform in ("sim", "interp"):
        args = make_args()
        prog.run(*args, platform=platform)
        out[platform] = args
    return prog, out


def assert_both(out, index, expected, **tol):
    for platform, args in out.items():
        torch.testing.assert_close(args[index], expected, msg=platform, **tol)


# -- 1: ts.log stays the DSL op after the harness imports the logging module ------------------


@ts.kernel
def log_rows(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    ts.store(y, [0, 0], ts.log(ts.load(a, [0, 0], [4, 8])))


@ts.jit
def p_log(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    log_rows(a, y)


@pytest.mark.slow
def test_ts_log_is_the_op_once_the_harness_is_imported():
    import tilescope._logging  # noqa: F401 - what the harness and the runtime binding import
    import tilescope.harness  # noqa: F401
    from tilescope.language import ops

    assert ts.log is ops.STUBS["log"]
    a = torch.rand(4, 8) + 0.5
    _, out = run_both(p_log, lambda: [a.clone(), torch.zeros(4, 8)])
    assert_both(out, 1, torch.log(a))


# -- 2: tuple assignment takes every value before assigning -----------------------------------


@ts.kernel
def swap_rows(a: ts.Tensor[[2, 8], F], y: ts.Out[[2, 8], F]):
    p = ts.load(a, [0, 0], [1, 8])
    q = ts.load(a, [1, 0], [1, 8])
    p, q = q, p
    ts.store(y, [0, 0], p)
    ts.store(y, [1, 0], q)


@ts.jit
def p_swap(a: ts.Tensor[[2, 8], F], y: ts.Out[[2, 8], F]):
    swap_rows(a, y)


@pytest.mark.slow
def test_tuple_assignment_swaps():
    a = torch.randn(2, 8)
    _, out = run_both(p_swap, lambda: [a.clone(), torch.zeros(2, 8)])
    assert_both(out, 1, a.flip(0))


# -- 3: an inline helper's parameter is local to it -------------------------------------------


@ts.inline
def plus_one(x):
    x = x + 1.0
    return x


@ts.kernel
def helper_param(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], z: ts.Out[[4, 8], F]):
    t = ts.load(a, [0, 0], [4, 8])
    u = plus_one(t)
    ts.store(y, [0, 0], t)
    ts.store(z, [0, 0], u)


@ts.jit
def p_helper_param(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], z: ts.Out[[4, 8], F]):
    helper_param(a, y, z)


@ts.inline
def count_up(x):
    for _ in ts.range(0, 3):
        x = x + 1.0
    return x


@ts.kernel
def helper_param_in_loop(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], z: ts.Out[[4, 8], F]):
    t = ts.load(a, [0, 0], [4, 8])
    u = count_up(t)
    ts.store(y, [0, 0], t)
    ts.store(z, [0, 0], u)


@ts.jit
def p_helper_param_in_loop(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], z: ts.Out[[4, 8], F]):
    helper_param_in_loop(a, y, z)


@pytest.mark.slow
@pytest.mark.parametrize(("jit", "added"), [(p_helper_param, 1.0), (p_helper_param_in_loop, 3.0)])
def test_inline_helper_assigning_its_parameter_leaves_the_callers_variable(jit, added):
    a = torch.randn(4, 8)
    _, out = run_both(jit, lambda: [a.clone(), torch.zeros(4, 8), torch.zeros(4, 8)])
    assert_both(out, 1, a)
    assert_both(out, 2, a + added)


# -- 4: loop variables get their own IR names; interp scopes them like C++ ---------------------


@ts.inline
def row_total(x, r):
    acc = ts.zeros([1, 1], F)
    for i in ts.range(0, 4):
        acc = acc + ts.load(x, [r, i], [1, 1])
    return acc


@ts.kernel
def totals(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 1], F]):
    for i in ts.range(0, 4):
        ts.store(y, [i, 0], row_total(a, i))


@ts.jit
def p_totals(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 1], F]):
    totals(a, y)


@pytest.mark.slow
def test_helper_loop_variable_does_not_capture_the_callers():
    a = torch.arange(16.0).reshape(4, 4)
    _, out = run_both(p_totals, lambda: [a.clone(), torch.zeros(4, 1)])
    assert_both(out, 1, a.sum(1, keepdim=True))


@ts.kernel
def nested_same_name(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    for i in ts.range(0, 4):
        t = ts.zeros([1, 4], F)
        for i in ts.range(0, 2):  # the inner loop hides the outer i
            t = t + ts.load(a, [i, 0], [1, 4])
        ts.store(y, [i, 0], t)


@ts.jit
def p_nested_same_name(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    nested_same_name(a, y)


@pytest.mark.slow
def test_nested_loops_of_the_same_name():
    loops = [s for s in walk_stmts(kernel_ir(nested_same_name).body) if isinstance(s, For)]
    assert [f.var for f in loops] == ["i", "i_1"]
    a = torch.arange(16.0).reshape(4, 4)
    _, out = run_both(p_nested_same_name, lambda: [a.clone(), torch.zeros(4, 4)])
    assert_both(out, 1, (a[0] + a[1]).expand(4, 4))


@pytest.mark.slow
def test_interp_scopes_a_shadowing_loop_variable_like_the_cpp():
    import dataclasses

    from tilescope.launch.program import compile_program

    program = p_nested_same_name.program()
    k = program.kernels[0]
    outer = k.body[0]
    inner = outer.body[1]
    # IR as a hand edit may write it: the inner loop reuses the name i
    renamed = dataclasses.replace(inner, var="i", body=tuple(s for s in _rename_var(inner.body, "i_1", "i")))
    shadowing = dataclasses.replace(outer, body=(outer.body[0], renamed, *outer.body[2:]))
    program = dataclasses.replace(program, kernels=(dataclasses.replace(k, body=(shadowing,)),))
    prog = compile_program(program)
    assert (
        "for (int64_t i = 0; i < 2; i += 1)" in next((prog.work_dir / "kernels").rglob("*.cpp")).read_text()
    )
    a = torch.arange(16.0).reshape(4, 4)
    for platform in ("sim", "interp"):
        y = torch.zeros(4, 4)
        prog.run(a, y, platform=platform)
        torch.testing.assert_close(y, (a[0] + a[1]).expand(4, 4), msg=platform)


def _rename_var(body, old, new):
    from tilescope.ir.nodes import Var
    from tilescope.ir.traverse import map_exprs

    def f(e):
        return Var(new, e.type, e.loc) if isinstance(e, Var) and e.name == old else e

    return map_exprs(body, f)


# -- 5: rebinding a loop variable makes a new variable -----------------------------------------


@ts.kernel
def shifted_rows(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    for i in ts.range(0, 3):
        i = i + 1
        ts.store(y, [i, 0], ts.load(a, [i, 0], [1, 4]))


@ts.jit
def p_shifted_rows(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    shifted_rows(a, y)


@pytest.mark.slow
def test_assigning_the_loop_variable_binds_a_new_variable():
    loop = kernel_ir(shifted_rows).body[0]
    assert loop.var == "i" and isinstance(loop.body[0], Assign) and loop.body[0].target == "i_1"
    a = torch.arange(1.0, 17.0).reshape(4, 4)
    _, out = run_both(p_shifted_rows, lambda: [a.clone(), torch.zeros(4, 4)])
    expected = a.clone()
    expected[0] = 0
    assert_both(out, 1, expected)


@ts.kernel
def counts_in_inner_loop(y: ts.Out[[1, 64], F]):
    for i in ts.range(0, 2):
        for _ in ts.range(0, 3):
            i = i + 10
        ts.store(y, [0, i], ts.full([1, 1], 1.0, F))


@ts.jit
def p_counts_in_inner_loop(y: ts.Out[[1, 64], F]):
    counts_in_inner_loop(y)


@pytest.mark.slow
def test_loop_variable_reassigned_in_an_inner_loop_is_carried_as_in_python():
    _, out = run_both(p_counts_in_inner_loop, lambda: [torch.zeros(1, 64)])
    expected = torch.zeros(1, 64)
    expected[0, 30:32] = 1.0  # i = 0 -> 30, i = 1 -> 31
    assert_both(out, 0, expected)


# -- 6: C++ names are one-to-one per function --------------------------------------------------


@ts.kernel
def exp_names(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    exp_ = ts.zeros([4, 8], F)
    for _ in ts.range(0, 3):
        exp = ts.load(a, [0, 0], [4, 8])
        exp_ = exp_ + exp
    ts.store(y, [0, 0], exp_)


@ts.jit
def p_exp_names(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    exp_names(a, y)


@pytest.mark.slow
def test_reserved_name_next_to_its_mangled_spelling():
    from tilescope.codegen.cpp_common import CppNames

    names = CppNames(["exp", "exp_", "exp_1_", "x", "task"])
    assert [names(n) for n in ("exp", "exp_", "exp_1_", "x", "task")] == [
        "exp_2_",
        "exp_",
        "exp_1_",
        "x",
        "task_",
    ]
    a = torch.randn(4, 8)
    _, out = run_both(p_exp_names, lambda: [a.clone(), torch.zeros(4, 8)])
    assert_both(out, 1, a * 3)


# -- 7: no in-place matmul_acc when the product reads the accumulator --------------------------


@ts.kernel
def self_matmul(a: ts.Tensor[[16, 64], F], w: ts.Tensor[[64, 64], F], y: ts.Out[[16, 64], F]):
    acc = ts.load(a, [0, 0], [16, 64])
    wt = ts.load(w, [0, 0], [64, 64])
    acc = acc + ts.matmul(acc, wt)
    ts.store(y, [0, 0], acc)


@ts.jit
def p_self_matmul(a: ts.Tensor[[16, 64], F], w: ts.Tensor[[64, 64], F], y: ts.Out[[16, 64], F]):
    self_matmul(a, w, y)


@ts.kernel
def self_matmul_acc(a: ts.Tensor[[16, 64], F], w: ts.Tensor[[64, 64], F], y: ts.Out[[16, 64], F]):
    acc = ts.load(a, [0, 0], [16, 64])
    acc = ts.matmul(acc, ts.load(w, [0, 0], [64, 64]), acc=acc)
    ts.store(y, [0, 0], acc)


@ts.jit
def p_self_matmul_acc(a: ts.Tensor[[16, 64], F], w: ts.Tensor[[64, 64], F], y: ts.Out[[16, 64], F]):
    self_matmul_acc(a, w, y)


@pytest.mark.slow
@pytest.mark.parametrize("jit", [p_self_matmul, p_self_matmul_acc])
def test_accumulating_a_product_of_the_accumulator(jit):
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(16, 64, generator=g), torch.randn(64, 64, generator=g) * 0.1
    prog, out = run_both(jit, lambda: [a.clone(), w.clone(), torch.zeros(16, 64)])
    assert_both(out, 2, a + a @ w, rtol=1e-5, atol=1e-5)
    assert "matmul_acc(" not in kernel_cpp(prog.program().kernels[0])


# -- 8: tensor variables and task handles reassigned in orchestration loops --------------------


@ts.kernel
def inc(a: ts.Tensor[[4, 8], F], b: ts.Out[[4, 8], F]):
    ts.store(b, [0, 0], ts.load(a, [0, 0], [4, 8]) + 1.0)


@ts.jit
def p_ping_pong(x: ts.InOut[[4, 8], F], y: ts.InOut[[4, 8], F]):
    src = x
    dst = y
    for _ in ts.range(4):
        inc(src, dst)
        tmp = src
        src = dst
        dst = tmp


@ts.jit
def p_ping_pong_tuple(x: ts.InOut[[4, 8], F], y: ts.InOut[[4, 8], F]):
    src, dst = x, y
    for _ in ts.range(5):
        inc(src, dst)
        src, dst = dst, src
    inc(src, dst)


@pytest.mark.slow
@pytest.mark.parametrize(("jit", "expected"), [(p_ping_pong, (4.0, 3.0)), (p_ping_pong_tuple, (6.0, 5.0))])
def test_tensor_variables_swapped_in_a_loop(jit, expected):
    _, out = run_both(jit, lambda: [torch.zeros(4, 8), torch.zeros(4, 8)])
    for i, value in enumerate(expected):
        assert_both(out, i, torch.full((4, 8), value))


@ts.jit
def p_task_chain(x: ts.Tensor[[4, 8], F], y: ts.Out[[16, 8], F]):
    t = inc(x, y[0:4, :])
    for i in ts.range(1, 4):
        t = ts.submit(inc, x, y[i * 4 : i * 4 + 4, :], deps=[t])


@pytest.mark.slow
def test_task_handle_carried_across_iterations():
    body = p_task_chain.program().body
    assert [s.target for s in walk_stmts(body) if isinstance(s, Assign)] == ["t", "t"]
    x = torch.randn(4, 8)
    prog, out = run_both(p_task_chain, lambda: [x.clone(), torch.zeros(16, 8)])
    assert_both(out, 1, (x + 1).repeat(4, 1))
    cpp = orchestration_cpp(prog.program())
    assert cpp.count("int64_t t = -1;") == 1
    assert "if (t >= 0) task.depends_on(t);" in cpp and "t = orch.submit(task);" in cpp


@ts.jit
def p_through_in(x: ts.Tensor[[4, 8], F], y: ts.InOut[[4, 8], F]):
    src = y
    for _ in ts.range(2):
        inc(y, src)
        src = x


def test_writing_through_a_tensor_variable_that_may_hold_an_in_param():
    with pytest.raises(ts.VerifyError) as info:
        p_through_in.compile()
    assert (
        "kernel inc writes its out param 'b', but it is given the In param 'x' "
        "(through the tensor variable 'src')" in info.value.message
    )
    assert info.value.loc.line == line_of(p_through_in, "inc(y, src)")


# -- 10: bf16 scalar arithmetic in kernels -------------------------------------------------------


@ts.kernel
def bf16_scalars(a: ts.Tensor[[4, 8], ts.bf16], y: ts.Out[[4, 8], ts.bf16], s: ts.Scalar[ts.bf16]):
    s2 = s * 3.0
    lo = s
    for _ in ts.range(0, 2):
        lo = 0.5  # a literal assigned to a bf16 variable
        s2 = ts.maximum(s2, lo)
    s3 = -(s2 + s)
    ts.store(y, [0, 0], ts.load(a, [0, 0], [4, 8]) * s3)


@ts.jit
def p_bf16_scalars(a: ts.Tensor[[4, 8], ts.bf16], y: ts.Out[[4, 8], ts.bf16], s: ts.Scalar[ts.bf16]):
    s1 = s * 1.1
    bf16_scalars(a, y, s1)


@pytest.mark.slow
def test_bf16_scalar_arithmetic_rounds_after_every_op():
    bf = torch.bfloat16
    a = torch.randn(4, 8).to(bf)
    s = (torch.tensor(1.3, dtype=bf).float() * torch.tensor(1.1)).to(bf)
    s3 = -((s.float() * 3.0).to(bf).float() + s.float()).to(bf)
    _, out = run_both(p_bf16_scalars, lambda: [a.clone(), torch.zeros(4, 8, dtype=bf), 1.3])
    assert_both(out, 1, a * s3, rtol=0, atol=0)


@ts.kernel
def half_literal(y: ts.Out[[1, 8], ts.bf16], s: ts.Scalar[ts.bf16]):
    lo = s
    for _ in ts.range(0, 1):
        lo = 0.0117  # bf16 0.01171875
    ts.store(y, [0, 0], ts.full([1, 8], 1.0, ts.bf16) * (s + lo))


@ts.jit
def p_half_literal(y: ts.Out[[1, 8], ts.bf16], s: ts.Scalar[ts.bf16]):
    half_literal(y, s)


@pytest.mark.slow
def test_bf16_literal_assigned_to_a_scalar_is_rounded_first():
    # 1 + bf16(0.0117) = 1.01171875 is a tie that rounds to even: 1.015625 (1 + 0.0117 -> 1.0078125)
    _, out = run_both(p_half_literal, lambda: [torch.zeros(1, 8, dtype=torch.bfloat16), 1.0])
    assert_both(out, 0, torch.full((1, 8), 1.015625, dtype=torch.bfloat16), rtol=0, atol=0)


# -- 11: float -> int casts round at .5 and saturate identically -------------------------------


@ts.kernel
def casts(
    a: ts.Tensor[[1, 8], F],
    b: ts.Tensor[[1, 8], ts.bf16],
    yr: ts.Out[[1, 8], ts.i32],
    yb: ts.Out[[1, 8], ts.i32],
    ys: ts.Out[[1, 8], ts.i32],
    y8: ts.Out[[1, 8], ts.u8],
):
    t = ts.load(a, [0, 0], [1, 8])
    ts.store(yr, [0, 0], ts.cast(t, ts.i32, mode="round"))
    ts.store(yb, [0, 0], ts.cast(ts.load(b, [0, 0], [1, 8]), ts.i32, mode="round"))
    ts.store(ys, [0, 0], ts.cast(t * 1e10, ts.i32))
    ts.store(y8, [0, 0], ts.cast(t * 100.0, ts.u8, mode="floor"))


@ts.jit
def p_casts(
    a: ts.Tensor[[1, 8], F],
    b: ts.Tensor[[1, 8], ts.bf16],
    yr: ts.Out[[1, 8], ts.i32],
    yb: ts.Out[[1, 8], ts.i32],
    ys: ts.Out[[1, 8], ts.i32],
    y8: ts.Out[[1, 8], ts.u8],
):
    casts(a, b, yr, yb, ys, y8)


@pytest.mark.slow
def test_casts_round_half_and_saturate_like_the_tile_library():
    below_half = struct.unpack("f", struct.pack("I", 0x3EFFFFFF))[0]  # 0.49999997
    a = torch.tensor([[below_half, -below_half, 2.5, -2.5, float("nan"), 1.0, -1.0, 3.0]])
    b = torch.tensor([[0.498046875, 2.5, -0.498046875, 127.5, 1.5, 0.25, 3.5, -3.5]]).to(torch.bfloat16)
    i32 = torch.int32

    def args():
        return [
            a.clone(),
            b.clone(),
            *(torch.zeros(1, 8, dtype=i32) for _ in range(3)),
            torch.zeros(1, 8, dtype=torch.uint8),
        ]

    _, out = run_both(p_casts, args)
    big, small = 2**31 - 1, -(2**31)
    assert_both(out, 2, torch.tensor([[0, 0, 3, -3, 0, 1, -1, 3]], dtype=i32))
    assert_both(out, 3, torch.tensor([[0, 3, 0, 128, 2, 0, 4, -4]], dtype=i32))
    assert_both(out, 4, torch.tensor([[big, small, big, small, 0, big, small, big]], dtype=i32))
    assert_both(out, 5, torch.tensor([[49, 0, 250, 0, 0, 100, 0, 255]], dtype=torch.uint8))


# -- 14: ts.full(-0.0) keeps its sign through printing and C++ ---------------------------------


@ts.kernel
def negative_zero(y: ts.Out[[1, 8], F]):
    z = ts.full([1, 8], -0.0, F)
    ts.store(y, [0, 0], 1.0 / z)


@ts.jit
def p_negative_zero(y: ts.Out[[1, 8], F]):
    negative_zero(y)


@pytest.mark.slow
def test_negative_zero_fill():
    prog, out = run_both(p_negative_zero, lambda: [torch.zeros(1, 8)])
    assert_both(out, 0, torch.full((1, 8), float("-inf")))
    assert "ts.full([1, 8], -0.0, ts.f32)" in (prog.work_dir / "ir" / "p_negative_zero.py").read_text()
    reloaded = ts.CompiledProgram.from_dir(prog.work_dir)  # interp runs the printed IR
    y = torch.zeros(1, 8)
    reloaded.run(y, platform="interp")
    assert torch.equal(y, torch.full((1, 8), float("-inf")))


# -- 17, 18, 19: func ids, task names, unused task handles in the orchestration C++ --------------


@ts.kernel
def copy(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    ts.store(y, [0, 0], ts.load(a, [0, 0], [4, 8]))


@ts.kernel
def Copy(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):  # differs from copy only by case
    ts.store(y, [0, 0], ts.load(a, [0, 0], [4, 8]) * 2.0)


@ts.jit
def p_copies(a: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], z: ts.Out[[4, 8], F]):
    t = copy(a, y)
    task = ts.submit(Copy, a, z, name='copy "rows"\\n\tü', deps=[t])
    never_read = copy(a, y, deps=[task])
    copied = never_read  # noqa: F841 - a copy of a task handle that nothing reads
    offset = 2 * 3  # noqa: F841
    for i in ts.range(0, 2):
        row = i + 1  # noqa: F841 - an index nothing reads


@pytest.mark.slow
def test_kernels_named_apart_by_case_and_task_names_with_quotes():
    from tilescope.codegen.cpp_common import string_literal
    from tilescope.codegen.orchestration_cpp import func_id_names

    assert func_id_names(["copy", "Copy", "copy_1"]) == {
        "copy": "FUNC_COPY",
        "Copy": "FUNC_COPY_2",
        "copy_1": "FUNC_COPY_1",
    }
    a = torch.randn(4, 8)
    prog, out = run_both(p_copies, lambda: [a.clone(), torch.zeros(4, 8), torch.zeros(4, 8)])
    assert_both(out, 1, a)
    assert_both(out, 2, a * 2)
    cpp = next((prog.work_dir / "orchestration").glob("*.cpp")).read_text()
    assert "constexpr int32_t FUNC_COPY = 0;" in cpp and "constexpr int32_t FUNC_COPY_1 = 1;" in cpp
    assert 'orch.task(FUNC_COPY_1, "copy \\"rows\\"\\\\n\\t\\303\\274", "test_dsl_semantics_end_to_end.py:' in cpp
    assert string_literal('a"b\\c\n') == '"a\\"b\\\\c\\n"'


@pytest.mark.slow
def test_generated_orchestration_compiles_without_warnings(tmp_path):
    cpp = orchestration_cpp(p_copies.compile().program())
    assert "int64_t task_ = -1;" in cpp and "if (task_ >= 0) task.depends_on(task_);" in cpp
    assert "never_read" not in cpp and "copied" not in cpp and "int64_t row" not in cpp
    src = tmp_path / "orch.cpp"
    src.write_text(cpp)
    out = tmp_path / "orch.so"
    cmd = [*compile_command(find_cxx(), BuildJob(src, out), out), "-Werror"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
