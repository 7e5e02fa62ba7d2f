"""Bad input in the DSL and the harness: each is a clear error (what, what was expected, what to
do; DSL errors at the user's file:line) or a correct report, never a raw traceback from
tilescope's internals nor a silently wrong value."""

import inspect

import pytest

import tilescope as ts
from tilescope.errors import DSLError

F = ts.f32
T64 = ts.Tensor[[64, 64], F]
O64 = ts.Out[[64, 64], F]


def line_of(fn, text: str) -> int:
    """The line of ``fn``'s source (a DSL function or a plain one) that contains ``text``."""
    lines, start = inspect.getsourcelines(getattr(fn, "fn", fn))
    return start + next(i for i, line in enumerate(lines) if text in line)


def dsl_error(jit) -> DSLError:
    """The DSLError compiling ``jit`` raises."""
    with pytest.raises(DSLError) as info:
        jit.program()
    return info.value


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
