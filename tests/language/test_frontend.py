"""Front-end: DSL source -> IR, and every unsupported construct reported at its line."""

import inspect

import pytest

import tilescope as ts
from tilescope.ir.analysis import kernel_core
from tilescope.ir.nodes import Assign, BinOp, Evaluate, For, Load, MatMul, Reduce, Store, Submit, Var
from tilescope.ir.types import Direction, IndexType, TileType
from tilescope.language.frontend import kernel_ir

F = ts.f32


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(f"{text!r} not in source")


@ts.kernel
def scale_rows(x: ts.Tensor[[8, 16], F], y: ts.Out[[8, 16], F], s: ts.Scalar[F]):
    acc = ts.zeros([8, 1], F)
    for c in ts.range(0, 16, 8):
        t = ts.load(x, [0, c], [8, 8])
        acc = acc + ts.row_sum(t)
    for c in ts.range(0, 16, 8):
        ts.store(y, [0, c], ts.load(x, [0, c], [8, 8]) * acc * s)


def test_kernel_ir_structure():
    k = kernel_ir(scale_rows)
    assert [p.direction for p in k.params] == [Direction.IN, Direction.OUT, Direction.SCALAR]
    assert isinstance(k.body[0], Assign) and k.body[0].value.type == TileType((8, 1), F)
    loop = k.body[1]
    assert isinstance(loop, For) and loop.var == "c"
    load = loop.body[0].value
    assert isinstance(load, Load) and load.sizes == (8, 8) and load.type == TileType((8, 8), F)
    carried = loop.body[1]
    assert carried.target == "acc" and isinstance(carried.value, BinOp)
    assert isinstance(carried.value.rhs, Reduce) and carried.value.rhs.type == TileType((8, 1), F)
    store = k.body[2].body[0]
    assert isinstance(store, Store) and store.value.type == TileType((8, 8), F)
    assert k.body[0].loc.line == line_of(scale_rows, "acc = ts.zeros")
    assert kernel_core(k) == "vec"


@ts.kernel
def mm(a: ts.Tensor[[16, 32], F], b: ts.Tensor[[32, 8], F], c: ts.Out[[16, 8], F]):
    acc = ts.zeros([16, 8], F)
    for k in ts.range(0, 32, 16):
        acc = acc + ts.load(a, [0, k], [16, 16]) @ ts.load(b, [k, 0], [16, 8])
    ts.store(c, [0, 0], acc)


@ts.jit
def tiles(a: ts.Tensor[[32, 32], F], b: ts.Tensor[[32, 8], F], c: ts.Out[[32, 8], F]):
    for i in ts.range(0, 32, 16):
        mm(a[i : i + 16, :], b, c[i : i + 16, :])


def test_orchestration_ir_and_cube_kernel():
    p = tiles.program()
    assert [k.name for k in p.kernels] == ["mm"] and kernel_core(p.kernels[0]) == "cube"
    loop = p.body[0]
    sub = loop.body[0]
    assert isinstance(sub, Evaluate) and isinstance(sub.value, Submit)
    a_region = sub.value.args[0]
    assert a_region.type.shape == (16, 32)
    assert isinstance(p.kernels[0].body[1].body[0].value.rhs, MatMul)


N = 4


@ts.inline
def twice(t):
    u = t + t
    return u


@ts.kernel
def compile_time(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    n = N * 2  # folded
    t = ts.load(x, [0, 0], [4, 4])
    if n > 4:
        t = twice(t)
    else:
        t = t * 3.0
    ts.store(y, [0, 0], t)


def test_compile_time_values_and_inline_helpers():
    k = kernel_ir(compile_time)
    assigns = [s for s in k.body if isinstance(s, Assign)]
    assert [s.target for s in assigns] == ["t", "u", "t"]  # the helper's local keeps its name
    assert isinstance(assigns[1].value, BinOp) and assigns[1].value.op == "add"


@ts.kernel
def counter(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    k = 0
    acc = ts.zeros([4, 4], F)
    for _ in ts.range(0, 4):
        k = k + 1
        acc = acc + ts.load(x, [0, 0], [4, 4]) * k
    ts.store(y, [0, 0], acc)


def test_compile_time_variable_reassigned_in_loop_becomes_a_loop_carried_value():
    k = kernel_ir(counter)
    assert [getattr(s, "target", None) for s in k.body[:2]] == ["acc", "k"]  # k materialised before the loop
    assert isinstance(k.body[1].value.type, IndexType)
    inner = k.body[2].body
    assert inner[0].target == "k" and isinstance(inner[0].value, BinOp)
    assert isinstance(inner[0].value.lhs, Var) and inner[0].value.lhs.name == "k"


# -- unsupported constructs: each error names the user's file:line and says what to write ----


def _expect(fn, fragment: str, hint: str, getter=lambda f: kernel_ir(f)):
    with pytest.raises(ts.DSLError) as info:
        getter(fn)
    err = info.value
    assert fragment in err.message
    assert err.loc is not None and err.loc.file == __file__
    assert err.loc.line == line_of(fn, err.loc.source_line().strip()[:20])
    assert hint in (err.hint or "")
    assert f"{__file__}:{err.loc.line}" in str(err)
    return err


def test_while_loop():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        while True:
            pass

    err = _expect(k, "'while' loops are not supported", "ts.range")
    assert err.loc.line == line_of(k, "while True")


def test_python_range():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        for _ in range(4):
            pass

    _expect(k, "only 'for v in ts.range(...)' loops", "ts.range(start, stop, step)")


def test_runtime_if_in_kernel():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        if t > 0.0:
            ts.store(y, [0, 0], t)

    _expect(k, "'if' on a run-time value", "ts.where")


def test_return_in_kernel():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        return ts.load(x, [0, 0], [4, 4])

    _expect(k, "'return' is not supported", "ts.store")


def test_unknown_call():
    import math

    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], print(t))

    _expect(k, "calls to print are not supported", "@ts.inline")
    del math


def test_power_operator():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], t**2)

    err = _expect(
        k,
        "operator ** (Pow) is not supported on a tile[4, 4] f32 in a @ts.kernel: it is only folded when "
        "every operand is a compile-time constant",
        "x * x",
    )
    assert err.hint == (
        "write x * x, or ts.pow(x, y); run-time values support + - * / and @ on tiles, + - * / // % on scalars and "
        "indices, "
        "unary -, and == != < <= > >="
    )


BIG = 1 << 40


@ts.kernel
def folds_every_operator(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    offs = [
        (1 << 40) - BIG,
        (10**12) // 10**11,
        7 % 3,
        (6 & 3) + (6 | 1) + (6 ^ 3),
        ~5 + 10,
        (256 >> 4) + (-(2**3)),
        +2 * (3 / 2 == 1.5),
        int(not 0) + (2 in (1, 2)) + (None is None) + (N is not None) + (4 not in [4]),
        (0 <= N < 8) + (1 < N > 8),  # chained comparisons
        (0 or N) + (N and 0) + (1 and N),  # and/or give Python's values, with short-circuit
        (N > 10 and 1 // 0) + (N < 10 or 1 // 0),
    ]
    acc = ts.zeros([4, 4], F)
    for _ in ts.range(0, 1 << 40, 10**12):
        acc = acc + ts.load(x, [0, 0], [4, 4]) * offs[3]
    ts.store(y, [0, 0], acc)


@ts.jit
def orch_folds(x: ts.Tensor[[1 << 2, 4], F], y: ts.Out[[2**2, 4], F]):
    for _ in ts.range(0, (16 >> 2) ** 1, 1 << 1):
        if 1 < N <= 4 and (N & 1) == 0 or N is None:
            folds_every_operator(x, y)


def test_every_python_operator_folds_on_compile_time_constants():
    import ast as pyast

    k = kernel_ir(folds_every_operator)
    loop = next(s for s in k.body if isinstance(s, For))
    assert (loop.start.value, loop.stop.value, loop.step.value) == (0, 1 << 40, 10**12)
    tree = pyast.parse(inspect.getsource(folds_every_operator.fn)).body[0]
    offs = [pyast.unparse(e) for e in tree.body[0].value.elts]
    assert len(offs) == 11
    values = [eval(e, {"BIG": BIG, "N": N}) for e in offs]  # what Python computes
    assert values == [0, 10, 1, 14, 4, 8, 2, 4, 1, 4 + 0 + 4, 1]
    mul = loop.body[0].value.rhs
    assert isinstance(mul, BinOp) and mul.rhs.value == 14  # (6 & 3) + (6 | 1) + (6 ^ 3)
    p = orch_folds.program()
    assert [pa.type.shape for pa in p.params] == [(4, 4), (4, 4)]
    assert (p.body[0].stop.value, p.body[0].step.value) == (4, 2)
    assert isinstance(p.body[0].body[0].value, Submit)  # the compile-time `if` took its branch


def test_operators_on_run_time_values_say_what_is_supported():
    @ts.kernel
    def inverted(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], ts.where(~(t > 0.0), t, t))

    @ts.kernel
    def chained(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], ts.where(0.0 < t < 1.0, t, t))

    @ts.jit
    def shifted(x: ts.Tensor[[16, 4], F], y: ts.Out[[4, 4], F]):
        for i in ts.range(0, 4):
            folds_every_operator(x[i << 2 : (i << 2) + 4, :], y)

    err = _expect(
        inverted,
        "operator ~ (Invert) is not supported on a tile[4, 4] bool in a @ts.kernel: it is only folded when "
        "every operand is a compile-time constant",
        "use ts.logical_not on bool tiles; run-time values support + - * / and @ on tiles",
    )
    assert err.loc.line == line_of(inverted, "~(t > 0.0)")
    _expect(chained, "chained comparisons work on compile-time values only", "ts.logical_and")
    err = _expect(
        shifted,
        "operator << (LShift) is not supported on an index in a @ts.jit orchestration",
        "multiply by a power of two instead (i * 4)",
        getter=lambda f: f.program(),
    )
    assert err.loc.line == line_of(shifted, "i << 2")


def test_compile_time_integers_must_fit_an_index():
    @ts.kernel
    def too_big(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        for _ in ts.range(0, 1 << 63):
            ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]))

    @ts.kernel
    def enormous(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 10**10**10], ts.load(x, [0, 0], [4, 4]))

    err = _expect_at(too_big, "ts.range(0, 1 << 63)", "ts.range stop", ts.VerifyError)
    assert err.message == (
        "ts.range stop 9223372036854775808 does not fit a 64-bit index "
        "[-9223372036854775808, 9223372036854775807]"
    )
    err = _expect_at(enormous, "10**10**10", "", ts.VerifyError)
    assert err.message == (
        "the compile-time value 10 ** 10 ** 10 has about 33219280949 bits, more than the 4096 bits "
        "tilescope folds"
    )


KERNEL_OPS = (
    "ts.abs, ts.cast, ts.clamp, ts.col_argmax, ts.col_argmin, ts.col_logsumexp, ts.col_max, ts.col_mean, "
    "ts.col_min, ts.col_sum, ts.cumprod, ts.cumsum, ts.elu, ts.erf, ts.exp, ts.exp2, ts.expm1, ts.full, ts.gelu, "
    "ts.hardsigmoid, ts.hardswish, ts.hardtanh, ts.iota, ts.leaky_relu, ts.load, ts.load_rows, ts.log, ts.log1p, "
    "ts.log2, ts.logical_and, ts.logical_not, ts.logical_or, ts.logsigmoid, ts.matmul, ts.maximum, ts.minimum, "
    "ts.mish, ts.neg, ts.pow, ts.probe, ts.rand, ts.range, ts.reciprocal, ts.relu, ts.row_argmax, ts.row_argmin, "
    "ts.row_logsumexp, ts.row_max, ts.row_mean, ts.row_min, ts.row_sum, ts.rsqrt, ts.selu, ts.sigmoid, ts.silu, "
    "ts.softplus, ts.softsign, ts.sqrt, ts.store, ts.tanh, ts.transpose, ts.where, ts.zeros"
)


def test_unknown_op_names_the_ops_that_exist_and_close_matches():
    import math

    @ts.kernel
    def softmax(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 0], ts.softmax(ts.load(x, [0, 0], [4, 4])))

    @ts.kernel
    def arange(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        for _ in ts.arange(0, 4):
            ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]))

    @ts.jit
    def creates(y: ts.Out[[4, 4], F]):
        t = ts.create_tensr([4, 4], F)
        arange(t, y)

    @ts.kernel
    def sqroot(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]) * math.sqroot(2.0))

    err = _expect(softmax, "ts.softmax is not a tilescope op", "the ops in a @ts.kernel")
    assert err.message == "ts.softmax is not a tilescope op"
    assert err.hint == f"the ops in a @ts.kernel: {KERNEL_OPS} (see docs/dsl.md)"
    err = _expect(arange, "ts.arange is not a tilescope op", KERNEL_OPS)
    assert err.message == "ts.arange is not a tilescope op; did you mean ts.range?"
    err = _expect(creates, "", "", getter=lambda f: f.program())
    assert err.message == "ts.create_tensr is not a tilescope op; did you mean ts.create_tensor?"
    assert err.hint == (
        "the ops in a @ts.jit orchestration: ts.create_tensor, ts.dump_tag, ts.maximum, ts.minimum, ts.range, "
        "ts.submit (see docs/dsl.md)"
    )
    err = _expect(sqroot, "module 'math' has no attribute 'sqroot'", "did you mean math.sqrt or math.isqrt?")


def test_unknown_attribute_of_the_tilescope_module_lists_close_matches():
    every_op = (
        "ts.abs, ts.cast, ts.clamp, ts.col_argmax, ts.col_argmin, ts.col_logsumexp, ts.col_max, ts.col_mean, "
        "ts.col_min, ts.col_sum, ts.create_tensor, ts.cumprod, ts.cumsum, ts.dump_tag, ts.elu, ts.erf, ts.exp, "
        "ts.exp2, ts.expm1, ts.full, ts.gelu, ts.hardsigmoid, ts.hardswish, ts.hardtanh, ts.iota, ts.leaky_relu, "
        "ts.load, ts.load_rows, ts.log, ts.log1p, ts.log2, ts.logical_and, ts.logical_not, ts.logical_or, "
        "ts.logsigmoid, ts.matmul, ts.maximum, ts.minimum, ts.mish, ts.neg, ts.pow, ts.probe, ts.rand, ts.range, "
        "ts.reciprocal, ts.relu, ts.row_argmax, ts.row_argmin, ts.row_logsumexp, ts.row_max, ts.row_mean, "
        "ts.row_min, ts.row_sum, ts.rsqrt, ts.selu, ts.sigmoid, ts.silu, ts.softplus, ts.softsign, ts.sqrt, "
        "ts.store, ts.submit, ts.tanh, ts.transpose, ts.where, ts.zeros"
    )
    with pytest.raises(AttributeError) as e:
        ts.arange  # noqa: B018
    assert str(e.value) == (
        f"module 'tilescope' has no attribute 'arange'; did you mean ts.range? (the DSL ops: {every_op}; "
        "see docs/dsl.md)"
    )
    with pytest.raises(AttributeError) as e:
        ts.softmax  # noqa: B018
    assert (
        str(e.value)
        == f"module 'tilescope' has no attribute 'softmax' (the DSL ops: {every_op}; see docs/dsl.md)"
    )
    with pytest.raises(AttributeError) as e:
        ts.float32  # noqa: B018
    assert str(e.value).startswith("module 'tilescope' has no attribute 'float32'; did you mean ts.f32?")
    assert not hasattr(ts, "__wrapped__") and ts.CompiledProgram.__name__ == "CompiledProgram"


def test_lambda_and_comprehension():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        offs = [i for i in (0, 0)]
        ts.store(y, offs, ts.load(x, [0, 0], [4, 4]))

    _expect(k, "comprehensions are not supported", "ts.range")


def test_missing_annotation():
    @ts.kernel
    def k(x, y: ts.Out[[4, 4], F]):
        pass

    _expect(k, "parameter 'x' needs an annotation", "ts.Tensor[[64, 128], ts.f32]")


def test_slicing_inside_kernel():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 0], x[0:4, :])

    _expect(k, "tensors are not sliced inside kernels", "ts.load")


def test_variable_defined_in_loop_used_after():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        for _ in ts.range(0, 4):
            t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], t)

    _expect(k, "name 't' is not defined here", "assign it before the loop")


def test_loop_carried_value_changing_shape():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        acc = ts.zeros([4, 1], F)
        for _ in ts.range(0, 4):
            acc = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], acc)

    _expect(k, "'acc' changes type from tile[4, 1] f32 to tile[4, 4] f32", "keep its shape and dtype")


def test_dtype_mismatch_without_cast():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], w: ts.Tensor[[4, 4], ts.bf16], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]) + ts.load(w, [0, 0], [4, 4]))

    err = _expect(k, "dtype mismatch tile[4, 4] f32 vs tile[4, 4] bf16", "ts.cast")
    assert isinstance(err, ts.VerifyError)


def test_shape_mismatch():
    @ts.kernel
    def k(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
        a = ts.load(x, [0, 0], [4, 8])
        b = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], a * b)

    _expect(k, "shape mismatch [4, 8] vs [4, 4]", "broadcasting")


def test_kernel_called_with_wrong_region_shape():
    @ts.jit
    def prog(x: ts.Tensor[[32, 32], F], c: ts.Out[[32, 8], F]):
        for i in ts.range(0, 32, 16):
            mm(x[i : i + 8, :], x[:, 0:8], c[i : i + 16, :])

    err = _expect(
        prog,
        "kernel mm parameter 'a' expects a region of shape [16, 32], got [8, 32]",
        "slice the tensor",
        getter=lambda f: f.program(),
    )
    assert err.loc.line == line_of(prog, "mm(x[i")


def test_kernel_called_with_wrong_arg_count():
    @ts.jit
    def prog(a: ts.Tensor[[16, 32], F], b: ts.Tensor[[32, 8], F]):
        mm(a, b)

    with pytest.raises(ts.VerifyError, match=r"kernel mm\(a, b, c\) takes 3 arguments, got 2"):
        prog.program()


def test_calling_dsl_functions_from_python():
    with pytest.raises(ts.TilescopeError, match="runs as a task: call it from a @ts.jit"):
        mm(1, 2, 3)
    with pytest.raises(ts.TilescopeError, match=r"ts.exp\(x\) can only be used inside a @ts.kernel"):
        ts.exp(1.0)


def test_annotation_errors_are_clear():
    with pytest.raises(TypeError, match=r"ts.Tensor\[shape, dtype\]: shape must be a list of positive ints"):
        ts.Tensor[[0, 4], F]
    with pytest.raises(TypeError, match="dtype must be a tilescope dtype"):
        ts.Scalar[float]


# -- compile-time Python, literals, assignments --------------------------------------------------


def _expect_at(fn, text: str, fragment: str, error=ts.DSLError, getter=lambda f: kernel_ir(f)):
    with pytest.raises(error) as info:
        getter(fn)
    assert fragment in info.value.message
    assert info.value.loc is not None and info.value.loc.line == line_of(fn, text)
    return info.value


def test_errors_in_compile_time_python_point_at_the_line():
    import math

    @ts.kernel
    def shape_index(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        n = x.shape[2]
        ts.store(y, [0, n], ts.load(x, [0, 0], [4, 4]))

    @ts.kernel
    def domain(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]) * math.sqrt(-1.0))

    @ts.kernel
    def parse_int(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        ts.store(y, [0, int("x")], ts.load(x, [0, 0], [4, 4]))

    @ts.kernel
    def compare_list(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        if [1, 2] < 3:
            ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]))

    cases = [
        (shape_index, "n = x.shape[2]", "cannot evaluate x.shape[2] at compile time: IndexError"),
        (
            domain,
            "math.sqrt(-1.0)",
            "cannot evaluate math.sqrt(-1.0) at compile time: ValueError: math domain",
        ),
        (parse_int, 'int("x")', "cannot evaluate int('x') at compile time: ValueError: invalid literal"),
        (compare_list, "if [1, 2] < 3", "cannot evaluate [1, 2] < 3 at compile time: TypeError"),
    ]
    for fn, text, fragment in cases:
        err = _expect_at(fn, text, fragment)
        assert "while the program is compiled" in err.hint
    with pytest.raises(ts.VerifyError, match=r"division by zero in the compile-time expression 1 // 0"):

        @ts.kernel
        def div0(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
            ts.store(y, [0, 1 // 0], ts.load(x, [0, 0], [4, 4]))

        kernel_ir(div0)


def test_integer_literals_must_fit_the_dtype():
    @ts.kernel
    def fill_u8(y: ts.Out[[4, 8], ts.u8]):
        ts.store(y, [0, 0], ts.full([4, 8], 300, ts.u8))

    @ts.kernel
    def add_u8(a: ts.Tensor[[4, 8], ts.u8], y: ts.Out[[4, 8], ts.u8]):
        ts.store(y, [0, 0], ts.load(a, [0, 0], [4, 8]) + 300)

    @ts.kernel
    def where_i8(a: ts.Tensor[[4, 8], ts.i8], y: ts.Out[[4, 8], ts.i8]):
        t = ts.load(a, [0, 0], [4, 8])
        ts.store(y, [0, 0], ts.where(t > 0, t, -129))

    @ts.kernel
    def scalar_u8(y: ts.Out[[4, 8], ts.u8], s: ts.Scalar[ts.u8]):
        ts.store(y, [0, 0], ts.full([4, 8], 1, ts.u8) * s)

    @ts.jit
    def passes_256(y: ts.Out[[4, 8], ts.u8]):
        scalar_u8(y, 256)

    err = _expect_at(
        fill_u8,
        "ts.full([4, 8], 300",
        "ts.full value: integer literal 300 is out of range for u8 [0, 255]",
        ts.VerifyError,
    )
    assert "[0, 255]" in err.hint
    _expect_at(add_u8, "+ 300", "integer literal 300 is out of range for u8 [0, 255]", ts.VerifyError)
    _expect_at(where_i8, "-129", "integer literal -129 is out of range for i8 [-128, 127]", ts.VerifyError)
    _expect_at(
        passes_256,
        "scalar_u8(y, 256)",
        "kernel scalar_u8 parameter 's': integer literal 256 is out of range for u8",
        ts.VerifyError,
        getter=lambda f: f.program(),
    )


@ts.inline
def reassigns_its_param(x):
    x = x * 2.0
    return x


@ts.kernel
def calls_reassigning_helper(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    t = ts.load(a, [0, 0], [4, 4])
    u = reassigns_its_param(t)
    ts.store(y, [0, 0], t + u)


def test_helper_parameter_is_a_new_variable():
    body = kernel_ir(calls_reassigning_helper).body
    assert [s.target for s in body if isinstance(s, Assign)] == ["t", "x", "u"]
    assert body[1].value.lhs == Var("t", TileType((4, 4), F))


@ts.kernel
def swaps_three(a: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    p = ts.load(a, [0, 0], [4, 4])
    q = p * 2.0
    r = p * 3.0
    p, q, r = q, r, p
    ts.store(y, [0, 0], p + q * r)


def test_tuple_assignment_copies_only_values_an_earlier_name_overwrites():
    body = kernel_ir(swaps_three).body
    assigns = [(s.target, s.value) for s in body if isinstance(s, Assign)]
    # r's value (p) is overwritten by the first name: it alone is copied first
    assert [t for t, _ in assigns] == ["p", "q", "r", "r_1", "p", "q", "r"]
    assert assigns[3][1] == Var("p", TileType((4, 4), F))
    assert [v.name for _, v in assigns[4:]] == ["q", "r", "r_1"]


@ts.jit
def tuple_of_tasks(a: ts.Tensor[[32, 32], F], b: ts.Tensor[[32, 8], F], c: ts.Out[[32, 8], F]):
    t = mm(a[0:16, :], b, c[0:16, :])
    u = mm(a[16:32, :], b, c[16:32, :])
    t, u = mm(a[0:16, :], b, c[0:16, :], deps=[u]), mm(a[16:32, :], b, c[16:32, :], deps=[t])


def test_tuple_assignment_keeps_the_submission_order():
    body = tuple_of_tasks.program().body
    subs = [s.value for s in body if isinstance(s, Assign) and isinstance(s.value, Submit)]
    assert [s.args[0].ranges[0].start.value for s in subs] == [0, 16, 0, 16]
    assert [d.name for s in subs[2:] for d in s.deps] == ["u", "t"]  # both read the old handles


def test_kernel_tensor_reassigned_in_a_loop():
    @ts.kernel
    def k(x: ts.Tensor[[4, 4], F], z: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        src = x
        for _ in ts.range(0, 2):
            ts.store(y, [0, 0], ts.load(src, [0, 0], [4, 4]))
            src = z

    _expect_at(k, "for _ in", "'src' names a tensor parameter and is reassigned in a loop")


def test_floor_division_of_tiles_says_where_it_works_and_how_to_write_it():
    @ts.kernel
    def halved(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
        t = ts.load(x, [0, 0], [4, 4])
        ts.store(y, [0, 0], t // 2.0)

    _expect(
        halved,
        "is not supported on tiles (tile[4, 4] f32): tiles take + - * / and @; // and % are for scalars and indices",
        'q = ts.cast(a / b, ts.i32, mode="floor"), and write a % b as a - q * b',
    )
