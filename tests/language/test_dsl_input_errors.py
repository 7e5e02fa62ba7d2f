"""Bad input in the DSL and the harness: each is a clear error (what, what was expected, what to
do; DSL errors at the user's file:line) or a correct report, never a raw traceback from
tilescope's internals nor a silently wrong value."""

import importlib.util
import math
import sys

import pytest
import torch
from helpers import dsl_error, line_of

import tilescope as ts
from tilescope.errors import DSLError
from tilescope.harness import ScalarSpec, TensorSpec, run_jit
from tilescope.ir.traverse import MAX_EXPR_DEPTH

import vector_dag

F = ts.f32
T64 = ts.Tensor[[64, 64], F]
O64 = ts.Out[[64, 64], F]


# -- IR values in messages print as DSL source ------------------------------------------------


@ts.kernel
def sizes_at_run_time(x: T64, n: ts.Scalar[ts.i32], y: O64):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [n, 32]))  # sizes: run time


@ts.jit
def p_sizes_at_run_time(x: T64, n: ts.Scalar[ts.i32], y: O64):
    sizes_at_run_time(x, n, y)


@ts.kernel
def load_from_a_tile(x: T64, y: O64):
    t = ts.load(x, [0, 0], [64, 64])
    ts.store(y, [0, 0], ts.load(t, [0, 0], [64, 64]))  # a tile is no tensor


@ts.jit
def p_load_from_a_tile(x: T64, y: O64):
    load_from_a_tile(x, y)


@ts.jit
def p_dump_tag_region(x: T64, n: ts.Scalar[ts.i32], y: O64):
    ts.dump_tag(x[0:n, :])  # a region, not a tensor


def test_messages_show_ir_values_as_dsl_source_not_as_node_reprs():
    e = dsl_error(p_sizes_at_run_time)
    assert str(e.loc) == f"{__file__}:{line_of(sizes_at_run_time, '# sizes: run time')}"
    assert e.message == (
        "ts.load sizes must be a list of compile-time ints, got [n, 32]: n is a scalar i32, known only at run time"
    )
    e = dsl_error(p_load_from_a_tile)
    assert e.message == "ts.load's tensor must be a tensor parameter of the kernel, got t (tile[64, 64] f32)"
    e = dsl_error(p_dump_tag_region)
    assert e.message == "ts.dump_tag tags a whole tensor, got the region x[0:n, :]"
    assert e.hint == "tag the tensor itself: ts.dump_tag(x)"
    for err in (dsl_error(p_sizes_at_run_time), dsl_error(p_load_from_a_tile), dsl_error(p_dump_tag_region)):
        assert "Var(" not in str(err) and "Type(" not in str(err)


@ts.kernel
def full_of_a_list(x: T64, n: ts.Scalar[ts.i32], y: O64):
    ts.store(y, [0, 0], ts.full([64, 64], [n, 1], F))  # a list is no value


@ts.jit
def p_full_of_a_list(x: T64, n: ts.Scalar[ts.i32], y: O64):
    full_of_a_list(x, n, y)


def test_a_value_that_is_no_number_is_an_error_at_its_line():
    e = dsl_error(p_full_of_a_list)  # was a raw TypeError from float()
    assert str(e.loc) == f"{__file__}:{line_of(full_of_a_list, '# a list is no value')}"
    assert e.message == "ts.full value: [n, 1] (list) cannot be used as a value here"


# -- literals must fit the dtype they are used as; indices must fit 64 bits --------------------


@ts.kernel
def full_beyond_f32(y: O64):
    ts.store(y, [0, 0], ts.full([64, 64], 1e39, F))  # beyond f32


@ts.jit
def p_full_beyond_f32(y: O64):
    full_beyond_f32(y)


@ts.kernel
def tile_times_huge(x: ts.Tensor[[64, 64], ts.f16], y: ts.Out[[64, 64], ts.f16]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 64]) * 70000.0)  # beyond f16


@ts.jit
def p_tile_times_huge(x: ts.Tensor[[64, 64], ts.f16], y: ts.Out[[64, 64], ts.f16]):
    tile_times_huge(x, y)


@ts.kernel
def scalar_times_huge(x: T64, eps: ts.Scalar[F], y: O64):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 64]) * (eps * 1e39))  # beyond f32


@ts.jit
def p_scalar_times_huge(x: T64, eps: ts.Scalar[F], y: O64):
    scalar_times_huge(x, eps, y)


@ts.kernel
def carried_beyond_f32(x: T64, y: O64):
    m = 1e39
    for _i in ts.range(0, 2):  # m becomes an f32 variable
        m = m * 0.5
    ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 64]) * m)


@ts.jit
def p_carried_beyond_f32(x: T64, y: O64):
    carried_beyond_f32(x, y)


@ts.kernel
def full_of_a_huge_int(y: O64):
    ts.store(y, [0, 0], ts.full([64, 64], 10**400, F))


@ts.jit
def p_full_of_a_huge_int(y: O64):
    full_of_a_huge_int(y)


@ts.kernel
def masks_with_inf(x: T64, y: O64):
    t = ts.load(x, [0, 0], [64, 64])
    lo = ts.full([64, 64], float("-inf"), F)
    ts.store(y, [0, 0], ts.where(t > 0.0, t, lo) + ts.minimum(t, math.inf))


@ts.jit
def p_masks_with_inf(x: T64, y: O64):
    masks_with_inf(x, y)


@ts.kernel
def huge_loop_step(x: T64, y: O64):
    for _i in ts.range(0, 64, 10**30):  # step beyond 64 bits
        ts.store(y, [0, 0], ts.load(x, [0, 0], [64, 64]))


@ts.jit
def p_huge_loop_step(x: T64, y: O64):
    huge_loop_step(x, y)


@ts.jit
def p_loop_past_the_index_range(x: T64, y: O64):
    for _i in ts.range(0, 2**63 - 1, 2**62):  # i += step overflows
        huge_loop_step(x, y)


@ts.kernel
def full_of_two_bools(y: ts.Out[[64, 64], ts.bool_]):
    ts.store(y, [0, 0], ts.full([64, 64], 2, ts.bool_))  # not a bool


@ts.jit
def p_full_of_two_bools(y: ts.Out[[64, 64], ts.bool_]):
    full_of_two_bools(y)


def test_a_literal_beyond_its_dtypes_range_is_an_error_naming_it_and_the_range():
    e = dsl_error(p_full_beyond_f32)  # was inf, with a g++ warning
    assert str(e.loc) == f"{__file__}:{line_of(full_beyond_f32, '# beyond f32')}"
    assert e.message == (
        "ts.full value: float literal 1e+39 is out of range for f32 [-3.4028235e+38, 3.4028235e+38]"
    )
    assert e.hint == (
        "use a value in [-3.4028235e+38, 3.4028235e+38] (write float('inf') if you mean infinity), "
        "or cast to a wider dtype first (ts.cast(t, ts.f64))"
    )
    e = dsl_error(p_tile_times_huge)
    assert (
        e.message
        == "'*' with a tile[64, 64] f16 operand: float literal 70000 is out of range for f16 [-65504, 65504]"
    )
    e = dsl_error(p_scalar_times_huge)
    assert e.message == (
        "'*' with a scalar f32 operand: float literal 1e+39 is out of range for f32 [-3.4028235e+38, 3.4028235e+38]"
    )
    e = dsl_error(p_full_of_a_huge_int)  # was a raw OverflowError in the front-end
    assert e.message == (
        "ts.full value: integer literal 100000000000... (401 digits) is out of range for f32 "
        "[-3.4028235e+38, 3.4028235e+38]"
    )
    e = dsl_error(p_carried_beyond_f32)
    assert str(e.loc) == f"{__file__}:{line_of(carried_beyond_f32, '# m becomes an f32 variable')}"
    assert e.message == (
        "'m', carried by this loop or branch as a scalar f32: float literal 1e+39 is out of range for f32 "
        "[-3.4028235e+38, 3.4028235e+38]"
    )
    e = dsl_error(p_full_of_two_bools)
    assert e.message == "ts.full value: integer literal 2 is out of range for bool [0, 1]"
    p_masks_with_inf.program()  # an explicit infinity is a value every float dtype holds


def test_loop_steps_and_ends_must_stay_inside_64_bit_indices():
    e = dsl_error(p_huge_loop_step)  # was INT64_C(10**30) in the C++, a warning, and a loop that spins
    assert str(e.loc) == f"{__file__}:{line_of(huge_loop_step, '# step beyond 64 bits')}"
    assert e.message == (
        "ts.range step 1000000000000000000000000000000 does not fit a 64-bit index "
        "[-9223372036854775808, 9223372036854775807]"
    )
    e = dsl_error(p_loop_past_the_index_range)
    assert str(e.loc) == f"{__file__}:{line_of(p_loop_past_the_index_range, '# i += step overflows')}"
    assert e.message == (
        "ts.range(0, 2 ** 63 - 1, 2 ** 62): the loop variable would pass the largest 64-bit index "
        "(9223372036854775807) after its last iteration (4611686018427387904 + step 4611686018427387904)"
    )


# -- scalar arguments must fit their dtype at call time -----------------------------------------


@ts.kernel
def add_scalars(
    x: ts.Tensor[[4, 8], ts.i32], n: ts.Scalar[ts.i32], h: ts.Scalar[ts.f16], y: ts.Out[[4, 8], ts.i32]
):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 8]) + n)


@ts.jit
def p_add_scalars(
    x: ts.Tensor[[4, 8], ts.i32], n: ts.Scalar[ts.i32], h: ts.Scalar[ts.f16], y: ts.Out[[4, 8], ts.i32]
):
    add_scalars(x, n, h, y)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_a_scalar_argument_out_of_its_dtypes_range_is_refused_before_the_run(platform):
    x = torch.ones(4, 8, dtype=torch.int32)
    y = torch.full((4, 8), -7, dtype=torch.int32)
    prog = p_add_scalars.compile()
    with pytest.raises(ts.ArgumentError) as info:  # sim ran with n == 0, interp raised a torch overflow
        prog.run(x, 2**40, 70000.0, y, platform=platform)
    assert str(info.value) == (
        "2 argument(s) of p_add_scalars do not match the compiled program:\n"
        "  argument 'n': 1099511627776 does not fit a scalar i32 [-2147483648, 2147483647]; pass a value in "
        "that range, or declare the parameter ts.Scalar[ts.i64]\n"
        "  argument 'h': 70000 does not fit a scalar f16 [-65504, 65504]; pass a value in that range, or "
        "declare the parameter ts.Scalar[ts.f32]"
    )
    assert (y == -7).all()  # nothing ran
    prog.run(x, -(2**31), float("inf"), y, platform=platform)  # the ends of the range and inf are fine
    assert (y == 1 - 2**31).all()


# -- deeply nested expressions ----------------------------------------------------------------


def _module(tmp_path, name: str, source: str):
    """Import ``source`` as the module ``name`` from a file under ``tmp_path``; (module, path)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _deep_module(tmp_path, terms: int):
    """A module whose kernel stores ``t + t + ... + t`` (``terms`` terms) and its @ts.jit."""
    return _module(
        tmp_path,
        f"deep_sum_{terms}",
        "import tilescope as ts\n\n\n"
        "@ts.kernel\n"
        "def deep(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):\n"
        "    t = ts.load(x, [0, 0], [4, 8])\n"
        f"    ts.store(y, [0, 0], {' + '.join(['t'] * terms)})\n\n\n"
        "@ts.jit\n"
        "def p_deep(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):\n"
        "    deep(x, y)\n",
    )


@pytest.mark.slow
def test_a_700_term_expression_compiles_and_runs_on_both_platforms(tmp_path):
    module, _ = _deep_module(tmp_path, 700)  # was a RecursionError from the IR walks
    x = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    prog = module.p_deep.compile()
    for platform in ("sim", "interp"):
        y = torch.zeros(4, 8)
        prog.run(x, y, platform=platform)
        assert torch.equal(y, x * 700), platform
    again = ts.CompiledProgram.from_dir(prog.work_dir)  # the IR dump parses back
    y = torch.zeros(4, 8)
    again.run(x, y, platform="interp")
    assert torch.equal(y, x * 700)
    assert sys.getrecursionlimit() < 5000  # the room made for the compile is given back


def test_an_expression_nested_beyond_the_limit_is_an_error_with_the_depth_and_a_hint(tmp_path):
    module, path = _deep_module(tmp_path, MAX_EXPR_DEPTH + 2)
    e = dsl_error(module.p_deep)
    assert str(e.loc) == f"{path}:7"
    assert e.message == (
        f"this expression is nested more than {MAX_EXPR_DEPTH} levels deep (counting the @ts.inline helpers "
        "it calls), more than tilescope compiles"
    )
    assert e.hint == "split it into temporaries: a = x + x + ... (a few hundred terms); b = a + x + ..."


# -- decorators on what they cannot read, and a shadowed ``ts`` ---------------------------------


def _plain(x):
    return x


def _generator():
    yield 1


@pytest.mark.parametrize(
    ("decorate", "message", "hint"),
    [
        (
            lambda: ts.kernel(3),
            "@ts.kernel decorates a function, got 3 (int)",
            "write @ts.kernel on the line above 'def name(...):'",
        ),
        (
            lambda: ts.jit("abc"),
            "@ts.jit decorates a function, got 'abc' (str)",
            "write @ts.jit on the line above 'def name(...):'",
        ),
        (
            lambda: ts.inline(print),
            "@ts.inline decorates a function, got the builtin print",
            "write @ts.inline on the line above 'def name(...):'",
        ),
        (lambda: ts.kernel(lambda x: x), "@ts.kernel decorates a plain 'def' function, got a lambda", None),
        (
            lambda: ts.jit(_generator),
            "@ts.jit decorates a plain 'def' function, got a generator (_generator)",
            None,
        ),
        (
            lambda: ts.jit(ts.kernel(_plain)),
            "@ts.jit decorates a plain function, got the @ts.kernel _plain",
            "a function is one of @ts.kernel, @ts.jit or @ts.inline: keep one decorator",
        ),
        (
            lambda: ts.inline(),
            "@ts.inline takes no arguments",
            "write @ts.inline, without parentheses, on the line above 'def name(...):'",
        ),
        (
            lambda: ts.kernel(block=128),
            "@ts.kernel has no option block=; its only option is name=",
            'write @ts.kernel, or @ts.kernel(name="...") to name the kernel',
        ),
        (
            lambda: ts.kernel("mm_128"),
            "@ts.kernel decorates a function, got 'mm_128' (str)",
            "to name the kernel, write @ts.kernel(name='mm_128')",
        ),
        (
            lambda: ts.kernel(name="mm")(3),
            "@ts.kernel decorates a function, got 3 (int)",
            "write @ts.kernel on the line above 'def name(...):'",
        ),
    ],
)
def test_a_decorator_on_something_it_cannot_read_is_an_error_at_the_decorating_line(decorate, message, hint):
    with pytest.raises(DSLError) as info:  # was AttributeError: 'int' object has no attribute '__name__'
        decorate()
    assert info.value.message.startswith(message)
    assert (
        str(info.value.loc) == f"{__file__}:{decorate.__code__.co_firstlineno}"
    )  # the line that applied the decorator
    if hint:
        assert info.value.hint == hint


def test_an_unknown_jit_option_is_refused_when_it_decorates():
    with pytest.raises(ts.ConfigError) as info:  # was accepted, and refused at the first compile
        ts.jit(dump_pass=True)
    assert str(info.value) == (
        f"@ts.jit at {__file__}:{line_of(test_an_unknown_jit_option_is_refused_when_it_decorates, 'dump_pass=True')}: "
        "unknown compile_cfg key(s): dump_pass; known keys: bf16_matmul, build_dir, check_bounds, dump_passes, local_memory_bytes, "
        "strict, verify"
    )


SHADOWED = """\
{future}import tilescope as ts


@ts.kernel
def copy(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 8]))


@ts.jit
def p_copy(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):
    copy(x, y)


ts = 3
"""


def test_a_shadowed_ts_module_is_named_as_such(tmp_path):
    module, path = _module(tmp_path, "shadowed_ts", SHADOWED.format(future=""))
    e = dsl_error(module.p_copy)  # was "3 has no attribute 'store'"
    assert str(e.loc) == f"{path}:6"
    assert e.message == "ts is 3 (int) here, not the tilescope module, so ts.store does not exist"
    assert (
        e.hint
        == "a module-level assignment, parameter or variable of that name hides 'import tilescope as ts'; rename it"
    )
    module, path = _module(
        tmp_path, "shadowed_ts_annotations", SHADOWED.format(future="from __future__ import annotations\n")
    )
    e = dsl_error(
        module.p_copy
    )  # was "cannot evaluate its annotation: 'int' object has no attribute 'Tensor'"
    assert str(e.loc) == f"{path}:11"
    assert (
        e.message
        == "parameter 'x': ts is 3 (int) here, not the tilescope module, so ts.Tensor does not exist"
    )


# -- the harness: user functions that raise or answer wrongly, bad specs, bad tolerances -------


def _init_raises(shape, dtype):
    raise ValueError(f"no data for {shape}")  # init_value: raises


def _compare_raises(actual, expected):
    return actual.sub(expected, alpha="x")  # compare_fn: raises


def _run_error(capsys, result) -> str:
    """The run failed with an [ERROR] line and no traceback; its message."""
    captured = capsys.readouterr()
    assert not result.passed and result.error
    assert f"[ERROR] {result.error}\n" in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert "[FAIL] vector_dag on sim" in captured.out
    return result.error


@pytest.mark.slow
def test_an_init_value_function_that_raises_ends_the_run_with_an_error_at_the_users_line(capsys):
    specs = [TensorSpec("x", [64, 128], torch.float32, init_value=_init_raises), *vector_dag.SPECS[1:]]
    result = run_jit(vector_dag.vector_dag, specs, golden_fn=vector_dag.golden)  # was a raw ValueError
    line = line_of(_init_raises, "# init_value: raises")
    assert _run_error(capsys, result) == (
        f"TensorSpec 'x': init_value _init_raises raised at {__file__}:{line} (called with shape [64, 128], "
        "dtype=torch.float32): ValueError: no data for (64, 128)\n"
        '    raise ValueError(f"no data for {shape}")  # init_value: raises'
    )


@pytest.mark.slow
def test_a_compare_fn_that_raises_ends_the_run_with_an_error_at_the_users_line(capsys):
    result = run_jit(
        vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden, compare_fn=_compare_raises
    )
    line = line_of(_compare_raises, "# compare_fn: raises")
    error = _run_error(capsys, result)  # was a raw TypeError
    assert error.startswith(
        f"compare_fn _compare_raises raised at {__file__}:{line} comparing output 'out': TypeError: "
    )
    assert error.endswith('\n    return actual.sub(expected, alpha="x")  # compare_fn: raises')


@pytest.mark.slow
def test_a_compare_fn_must_answer_a_bool(capsys):
    def says_false_as_a_string(actual, expected):
        return "False"

    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        compare_fn=says_false_as_a_string,
    )  # was a PASS: "False" is truthy
    assert _run_error(capsys, result) == (
        "compare_fn test_a_compare_fn_must_answer_a_bool.<locals>.says_false_as_a_string returned 'False' (str) "
        "for output 'out'; it must return a bool (True: the output matches), or a (bool, message) tuple"
    )
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        compare_fn=lambda a, e: (torch.isclose(a, e, rtol=1e-4, atol=1e-5).all(), "within 1e-4"),
    )
    assert (
        result.passed and result.comparisons[0].message == "within 1e-4"
    )  # a one-element bool tensor is a bool
    assert "[COMPARE] out: PASS  within 1e-4" in capsys.readouterr().out


def test_bad_specs_are_refused_when_they_are_made():
    with pytest.raises(ts.ArgumentError) as info:  # was a torch RuntimeError inside run_jit
        TensorSpec("x", [-64, 128], torch.float32)
    assert str(info.value) == (
        "TensorSpec 'x': shape must be a list of 0 to 8 positive ints (the program parameter's shape; "
        "[] for a 0-dim tensor), got [-64, 128]"
    )
    with pytest.raises(ts.ArgumentError, match=r"shape must be a list of 0 to 8 positive ints .* got \[1, 1, 1, 1, 1, 1, 1, 1, 1\]"):
        TensorSpec("x", [1] * 9, torch.float32)
    assert TensorSpec("loss", [], torch.float32, is_output=True).make().shape == ()
    with pytest.raises(ts.ArgumentError) as info:  # was AttributeError: 'str' object has no attribute ...
        TensorSpec("x", [64, 128], "float32")
    assert str(info.value) == (
        "TensorSpec 'x': dtype must be a torch dtype (such as torch.float32) or a tilescope dtype (ts.f32), "
        "got 'float32' (str); did you mean torch.float32?"
    )
    with pytest.raises(
        ts.ArgumentError, match=r"ScalarSpec 'eps': value must be a Python number, got '1e-6' \(str\)"
    ):
        ScalarSpec("eps", torch.float32, "1e-6")
    with pytest.raises(
        ts.ArgumentError, match=r"TensorSpec 'x': dtype torch.complex64 has no tilescope equivalent"
    ):
        TensorSpec("x", [4], torch.complex64)
    assert (
        TensorSpec("x", [4], ts.f16).dtype == torch.float16
    )  # a tilescope dtype is taken as its torch dtype
    with pytest.raises(ts.ArgumentError, match=r"TensorSpec 'x': init_value 300 does not fit torch.int8"):
        TensorSpec("x", [4], torch.int8, init_value=300).make()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"rtol": -1e-5},
            "rtol -1e-05: expected a finite number >= 0 (an output matches where |actual - expected| <= atol + "
            "rtol * |expected|)",
        ),
        ({"atol": float("nan")}, "atol nan: expected a finite number >= 0 "),
        (
            {"fn": vector_dag.add},
            "run_jit runs a @ts.jit program, got the @ts.kernel add, which runs as one task: pass the @ts.jit "
            "function that submits it (a kernel alone has no task graph)",
        ),
        (
            {"fn": vector_dag.golden},
            "run_jit runs a @ts.jit program, got the function golden, which is not decorated: put @ts.jit on the "
            "line above 'def golden(...):'",
        ),
        (
            {"specs": [("x", [64, 128], torch.float32)]},
            "specs[0] is ('x', [64, 128], torch.float32) (tuple); expected TensorSpec(name, shape, dtype, ...) or "
            "ScalarSpec(name, dtype, value)",
        ),
    ],
)
def test_harness_misuse_is_an_error_before_anything_compiles_or_runs(capsys, kwargs, message):
    args = {"fn": vector_dag.vector_dag, "specs": vector_dag.SPECS, "golden_fn": vector_dag.golden, **kwargs}
    result = run_jit(args.pop("fn"), args.pop("specs"), **args)  # was a raw RuntimeError / AttributeError
    captured = capsys.readouterr()
    assert not result.passed and result.error.startswith(message)
    assert isinstance(result.error, str) and result.work_dir is None  # nothing was compiled
    assert "[RUN]" not in captured.out and "Traceback" not in captured.err
    assert f"[ERROR] {result.error}\n" in captured.err


# -- further probes -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_golden_fn_that_returns_its_result_or_leaves_a_non_tensor_is_told_what_to_do(capsys):
    def returns_instead(t):
        return t["x"] + t["y"]

    result = run_jit(
        vector_dag.vector_dag, vector_dag.SPECS, golden_fn=returns_instead
    )  # was 100% mismatches
    assert _run_error(capsys, result) == (
        "golden_fn test_a_golden_fn_that_returns_its_result_or_leaves_a_non_tensor_is_told_what_to_do.<locals>."
        "returns_instead returned a Tensor, which is not used: a golden_fn fills the outputs in place "
        "(t['out'][:] = ...) and returns None"
    )

    def leaves_numpy(t):
        vector_dag.golden(t)
        t["out"] = t["out"].numpy()

    result = run_jit(
        vector_dag.vector_dag, vector_dag.SPECS, golden_fn=leaves_numpy
    )  # was a raw AttributeError
    assert _run_error(capsys, result).endswith(
        "leaves_numpy left t['out'] as a ndarray: the golden of an output must be a torch tensor "
        "(fill it in place: t['out'][:] = ...)"
    )
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden, seed="1")
    assert _run_error(capsys, result) == (
        "seed '1': expected a whole number from -9223372036854775808 to 18446744073709551615"
    )


@pytest.mark.slow
def test_program_arguments_passed_by_keyword_are_an_argument_error_not_a_runtime_cfg_one():
    x, y, out = torch.randn(64, 128), torch.randn(64, 128), torch.zeros(64, 128)
    with pytest.raises(ts.ArgumentError) as info:  # was "unknown runtime_cfg key(s): out, x, y"
        vector_dag.vector_dag(x, y=y, out=out)
    assert str(info.value).startswith(
        "vector_dag(x, y, out) takes its arguments by position, got y=, out= as keyword(s): keywords are run "
        "options (platform=, num_workers=, ...); pass every argument in order"
    )


@ts.jit
def p_index_floordiv_zero(x: T64, n: ts.Scalar[ts.i32], y: O64):
    for _i in ts.range(0, 4 + n // 0):  # a division by zero
        load_from_a_tile(x, y)


def test_an_integer_division_by_a_constant_zero_is_refused_at_compile_time():
    e = dsl_error(
        p_index_floordiv_zero
    )  # was SIGILL of the whole process on sim, ZeroDivisionError on interp
    assert str(e.loc) == f"{__file__}:{line_of(p_index_floordiv_zero, '# a division by zero')}"
    assert e.message == "'//' by the constant 0: an integer division by zero (the generated code would crash)"


def test_a_torch_dtype_in_an_annotation_names_the_tilescope_one():
    with pytest.raises(TypeError) as e:  # a tilescope error too, its traceback ending at this line
        ts.Tensor[[4, 8], torch.float32]
    assert isinstance(e.value, ts.TilescopeError) and str(e.value).endswith("got torch.float32; write ts.f32")
    with pytest.raises(TypeError) as e:
        ts.Scalar[torch.bfloat16]
    assert str(e.value).endswith("got torch.bfloat16; write ts.bf16")
    with pytest.raises(TypeError, match=r"shape must be a list of positive ints \(\[\] for a 0-dim tensor\), got \[True, 8\]"):
        ts.Tensor[[True, 8], ts.f32]
