"""Integer arithmetic never wraps and never dies of SIGFPE: an integer scalar's ``+ - *`` that its
dtype cannot hold, a division or modulo by a zero known only at run time and ``-2**63 // -1`` are
errors naming the expression, its DSL line and the operands, the same on sim and on interp."""

import pytest
import torch
from helpers import line_of

import tilescope as ts

F = ts.f32


@ts.kernel
def rows_at(x: ts.Tensor[[8, 8], F], y: ts.Out[[4, 8], F], r: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [r * r, 0], [4, 8]))  # squared offset


@ts.jit
def squared_offset(x: ts.Tensor[[8, 8], F], y: ts.Out[[4, 8], F], r: ts.Scalar[ts.i32]):
    rows_at(x, y, r)


@ts.kernel
def copy_block(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 8]))


@ts.jit
def blocks_of(x: ts.Tensor[[16, 8], F], y: ts.Out[[16, 8], F], n: ts.Scalar[ts.i64], d: ts.Scalar[ts.i64]):
    q = n // d  # blocks per part
    for b in ts.range(0, q):
        copy_block(x[b * 4 : b * 4 + 4, :], y[b * 4 : b * 4 + 4, :])


PLATFORMS = ["sim", "interp"]


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_an_i32_product_past_its_range_is_an_error_not_a_wrap(platform):
    prog = squared_offset.compile()
    x, y = torch.randn(8, 8), torch.zeros(4, 8)
    prog.run(x, y, 2, platform=platform)
    torch.testing.assert_close(y, x[4:8])
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, 65536, platform=platform)
    where = f"{__file__}:{line_of(rows_at, '# squared offset')}"
    assert (
        f"i32 overflow: r * r at {where} (65536 * 65536 = 4294967296) is outside i32's range "
        "[-2147483648, 2147483647]"
    ) in str(info.value)
    assert "rows_at" in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_division_by_a_zero_read_at_run_time_names_the_line_and_values(platform):
    prog = blocks_of.compile()
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    prog.run(x, y, 8, 2, platform=platform)
    torch.testing.assert_close(y, x)
    where = f"{__file__}:{line_of(blocks_of, '# blocks per part')}"
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, 5, 0, platform=platform)
    assert f"integer division by zero: n // d at {where} (5 // 0)" in str(info.value)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, -(2**63), -1, platform=platform)
    assert (
        f"i64 overflow: n // d at {where} (-9223372036854775808 // -1 = 9223372036854775808) is outside "
        "i64's range [-9223372036854775808, 9223372036854775807]"
    ) in str(info.value)


@pytest.mark.slow
def test_an_isolated_run_reports_the_division_rather_than_a_signal():
    prog = blocks_of.compile()
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, 5, 0, isolate=True)
    assert "integer division by zero: n // d" in str(info.value) and "SIGFPE" not in str(info.value)


@ts.kernel
def rows_before(x: ts.Tensor[[8, 8], F], y: ts.Out[[4, 8], F], r: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [r - 2, 0], [4, 8]))  # two rows up


@ts.jit
def shifted_up(x: ts.Tensor[[8, 8], F], y: ts.Out[[4, 8], F], r: ts.Scalar[ts.i32]):
    rows_before(x, y, r)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_load_outside_its_tensor_names_the_kernel_op_tensor_and_line_on_both_platforms(platform):
    prog = shifted_up.compile()
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(torch.randn(8, 8), torch.zeros(4, 8), 0, platform=platform)
    msg = str(info.value)
    assert "kernel rows_before: load of x" in msg and f"test_checked_arith.py:{line_of(rows_before, '# two rows')}" in msg
    assert "offset [-2, 0] + tile [4, 8] is outside x's shape [8, 8] (dim 0: -2 < 0)" in msg


@ts.jit
def picked(x: ts.Tensor[[16, 8], F], y: ts.Out[[4, 8], F], r: ts.Scalar[ts.i64]):
    copy_block(x[r : r + 4, :], y)  # picked rows


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_slice_out_of_its_tensor_names_the_parameter_and_the_call(platform):
    prog = picked.compile()
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(torch.randn(16, 8), torch.zeros(4, 8), 14, platform=platform)
    msg = str(info.value)
    assert "tensor_arg(" not in msg and f"test_checked_arith.py:{line_of(picked, '# picked rows')}" in msg
    assert ("slice [14:18, 0:8] of x[0:16, 0:8]" if platform == "sim" else "slice x[14:18] of dim 0") in msg


@ts.jit
def runaway(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], c: ts.Scalar[ts.i64]):
    for _i in ts.range(0, c):  # one task per count
        copy_block(x, y)


@ts.jit
def nested_runaway(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], c: ts.Scalar[ts.i64]):
    for _i in ts.range(0, c):
        for _j in ts.range(0, c):
            copy_block(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_runaway_loop_is_refused_naming_the_loop_and_its_bounds_before_memory_runs_out(platform):
    prog = runaway.compile()
    x, y = torch.randn(4, 8), torch.zeros(4, 8)
    prog.run(x, y, 3, platform=platform)
    torch.testing.assert_close(y, x)
    where = f"test_checked_arith.py:{line_of(runaway, '# one task per count')}"
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, 2**40, platform=platform)
    msg = str(info.value)
    assert f"ts.range(0, c, 1) at {__file__.rsplit('/', 1)[0]}/{where} (start 0, stop 1099511627776, step 1) runs " \
           "1099511627776 times, each submitting tasks: more than max_tasks = 4000000 (TILESCOPE_MAX_TASKS)" in msg
    with pytest.raises(ts.RuntimeFailure, match="runs 20 times, each submitting tasks: more than max_tasks = 10"):
        prog.run(x, y, 20, platform=platform, max_tasks=10)
    nested = nested_runaway.compile()
    with pytest.raises(ts.RuntimeFailure) as info:  # each loop fits; together they pass the cap
        nested.run(x, y, 5, platform=platform, max_tasks=10)
    assert "the orchestration submitted 10 tasks, the most a run may hold (max_tasks = 10" in str(info.value)
    nested.run(x, y, 5, platform=platform, max_tasks=0)  # no cap


@ts.kernel
def gather_rows(x: ts.Tensor[[16, 8], F], idx: ts.Tensor[[4], ts.i32], y: ts.Out[[4, 8], F], n: ts.Scalar[ts.i32]):
    i = ts.load(idx, [0], [4])
    ts.store(y, [0, 0], ts.load_rows(x, i, 8, valid=n))  # some rows


@ts.jit
def gathered(x: ts.Tensor[[16, 8], F], idx: ts.Tensor[[4], ts.i32], y: ts.Out[[4, 8], F], n: ts.Scalar[ts.i32]):
    gather_rows(x, idx, y, n)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_gather_with_a_wrong_row_count_says_rows_of_its_tile(platform):
    prog = gathered.compile()
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(torch.randn(16, 8), torch.arange(4, dtype=torch.int32), torch.zeros(4, 8), 6, platform=platform)
    assert "load_rows of a [4, 8] tile with valid rows 6: valid rows must be within [0, 4]" in str(info.value)
