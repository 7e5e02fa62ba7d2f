"""Verifier errors name the op, the shapes/dtypes and the user's source line."""

import inspect

import pytest

import tilescope as ts
from tilescope.ir.verifier import verify_program

F = ts.f32


def verify(fn, **kw):
    verify_program(fn.program(), **kw)


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@ts.kernel
def writes_input(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    ts.store(x, [0, 0], ts.load(x, [0, 0], [4, 4]))


@ts.jit
def p_writes_input(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    writes_input(x, y)


def test_writing_an_in_param():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_writes_input)
    e = info.value
    assert "kernel writes_input: ts.store writes the In param 'x'" in e.message
    assert e.loc.line == line_of(writes_input, "ts.store(x")
    assert "ts.Out[...] or ts.InOut[...]" in e.hint


@ts.kernel
def reads_output(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    ts.store(y, [0, 0], ts.load(y, [0, 0], [4, 4]) + ts.load(x, [0, 0], [4, 4]))


@ts.jit
def p_reads_output(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    reads_output(x, y)


def test_reading_an_out_param():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_reads_output)
    assert "ts.load reads the Out param 'y'" in info.value.message
    assert "declare y as ts.InOut[...]" in info.value.hint
    assert info.value.out_read == ("reads_output", "y")  # as data, for --fix (declare it InOut)


@ts.kernel
def out_of_bounds(x: ts.Tensor[[8, 64], F], y: ts.Out[[8, 64], F]):
    for c in ts.range(0, 64, 16):
        ts.store(y, [0, c], ts.load(x, [0, c + 8], [8, 16]))


@ts.jit
def p_oob(x: ts.Tensor[[8, 64], F], y: ts.Out[[8, 64], F]):
    out_of_bounds(x, y)


def test_load_region_out_of_bounds_is_found_through_the_loop_range():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_oob)
    msg = info.value.message
    assert "ts.load: region out of bounds of x[8, 64] in dim 1" in msg
    assert "offset in [8, 56] + size 16 reaches 72 (dim size 64)" in msg
    assert info.value.loc.line == line_of(out_of_bounds, "ts.load(x, [0, c + 8]")


@ts.kernel
def starts_before(x: ts.Tensor[[8, 64], F], y: ts.Out[[8, 64], F]):
    for c in ts.range(0, 64, 16):
        ts.store(y, [0, c], ts.load(x, [0, c - 1], [8, 16]))


@ts.jit
def p_before(x: ts.Tensor[[8, 64], F], y: ts.Out[[8, 64], F]):
    starts_before(x, y)


def test_a_region_starting_before_the_tensor_names_its_negative_start():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_before)
    assert info.value.message == (
        "kernel starts_before: ts.load: region out of bounds of x[8, 64] in dim 1: offset in [-1, 47] starts at -1, "
        "before the tensor's first element (0)"
    )
    assert info.value.hint == "keep offsets >= 0, or read what lies outside as a constant with pad="
    assert info.value.loc.line == line_of(starts_before, "ts.load(x, [0, c - 1]")


@ts.kernel
def big(x: ts.Tensor[[256, 256], F], y: ts.Out[[256, 256], F]):
    t = ts.load(x, [0, 0], [256, 256])
    ts.store(y, [0, 0], ts.exp(t) + t)


@ts.jit
def p_big(x: ts.Tensor[[256, 256], F], y: ts.Out[[256, 256], F]):
    big(x, y)


def test_local_memory_over_capacity_names_the_tiles():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_big)
    msg = info.value.message
    assert "kernel big: local memory 768.0 KiB exceeds the per-core capacity of 256.0 KiB" in msg
    assert "t tile[256, 256] f32 (256.0 KiB)" in msg and "512.0 KiB of temporaries" in msg
    assert info.value.loc.line == line_of(big, "ts.store(y")
    assert "local_memory_bytes" in info.value.hint
    verify(p_big, local_memory_bytes=1 << 20)  # the capacity is configurable


@ts.kernel
def copy4(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 4]))


@ts.jit
def p_in_as_out(x: ts.Tensor[[4, 4], F], y: ts.Tensor[[4, 4], F]):
    copy4(x, y)


def test_orchestration_passing_an_in_param_to_an_out_param():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_in_as_out)
    assert "kernel copy4 writes its out param 'y', but it is given the In param 'y'" in info.value.message
    assert info.value.loc.line == line_of(p_in_as_out, "copy4(x, y)")


@ts.jit
def p_slice_oob(x: ts.Tensor[[16, 4], F], y: ts.Out[[16, 4], F]):
    for r in ts.range(0, 16, 4):
        copy4(x[r + 2 : r + 6, :], y[r : r + 4, :])


def test_orchestration_slice_out_of_bounds_through_the_loop_range():
    with pytest.raises(
        ts.VerifyError, match=r"slice of x\[16, 4\] dim 0 reaches \[2, 18\), outside the tensor"
    ):
        verify(p_slice_oob)


@ts.jit
def p_copy(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    copy4(x, y)


def test_verifier_catches_a_pass_that_breaks_types():
    import dataclasses

    from tilescope.ir.nodes import Assign, Const, Full
    from tilescope.ir.types import ScalarType, TileType
    from tilescope.passes.manager import Pass, PassManager

    def broken(p):
        k = p.kernels[0]
        zero = Const(0.0, ScalarType(F))
        body = (
            Assign("z", Full(zero, TileType((4, 4), F))),
            Assign("z", Full(zero, TileType((2, 2), F))),
            *k.body,
        )
        return dataclasses.replace(p, kernels=(dataclasses.replace(k, body=body),))

    with pytest.raises(
        ts.VerifyError,
        match=r"'z' changes type from tile\[4, 4\] f32 to tile\[2, 2\] f32"
        r"[\s\S]*after pass Broken",
    ) as info:
        PassManager([Pass("Broken", broken, "")]).run(p_copy.program())
    assert info.value.pass_name == "Broken"  # as data, for tools (triage names the pass)


# -- loop variables, scoped ranges, names reused with other types --------------------------------


def _with_kernel_body(program, body):
    import dataclasses

    k = program.kernels[0]
    return dataclasses.replace(program, kernels=(dataclasses.replace(k, body=body),))


@ts.kernel
def rows4(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    for i in ts.range(0, 3):
        ts.store(y, [i, 0], ts.load(x, [i + 1, 0], [1, 4]))


@ts.jit
def p_rows4(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    rows4(x, y)


def test_assigning_a_loop_variable_is_rejected():
    import dataclasses

    from tilescope.ir.nodes import Assign, BinOp, Const, Var
    from tilescope.ir.types import INDEX

    program = p_rows4.program()
    loop = program.kernels[0].body[0]
    i = Var("i", INDEX)
    bump = Assign("i", BinOp("add", i, Const(1, INDEX), INDEX), loop.loc)
    broken = _with_kernel_body(program, (dataclasses.replace(loop, body=(bump, *loop.body)),))
    with pytest.raises(ts.VerifyError) as info:
        verify_program(broken)
    assert "kernel rows4: assigns to the loop variable 'i' inside its loop" in info.value.message
    assert "assign to a new name" in info.value.hint


@ts.kernel
def shifted_far(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    for i in ts.range(0, 4):
        i = i + 100
        ts.store(y, [0, 0], ts.load(x, [i, 0], [1, 4]))


@ts.jit
def p_shifted_far(x: ts.Tensor[[4, 4], F], y: ts.Out[[4, 4], F]):
    shifted_far(x, y)


def test_bounds_follow_an_index_assigned_from_the_loop_variable():
    with pytest.raises(ts.VerifyError) as info:
        verify(p_shifted_far)
    assert "ts.load: region out of bounds of x[4, 4] in dim 0: offset in [100, 103]" in info.value.message
    assert info.value.loc.line == line_of(shifted_far, "ts.load(x, [i, 0]")


def test_a_nested_loop_of_the_same_name_hides_the_outer_range_only_inside():
    import dataclasses

    from tilescope.ir.nodes import Const, For, Store
    from tilescope.ir.types import INDEX

    program = p_rows4.program()
    outer = program.kernels[0].body[0]  # i in [0, 2]; the store reads row i + 1 <= 3
    widened = dataclasses.replace(outer, stop=Const(4, INDEX))  # i + 1 reaches 4: out of bounds
    store = widened.body[0]
    assert isinstance(store, Store)
    inner = For("i", Const(0, INDEX), Const(1, INDEX), Const(1, INDEX), (), outer.loc)
    with pytest.raises(ts.VerifyError, match=r"offset in \[1, 4\] \+ size 1 reaches 5"):
        verify_program(_with_kernel_body(program, (dataclasses.replace(widened, body=(inner, store)),)))


@ts.kernel
def reuses_t(x: ts.Tensor[[96, 512], F], y: ts.Out[[96, 512], F]):
    for _ in ts.range(0, 1):
        t = ts.load(x, [0, 0], [96, 512])
        ts.store(y, [0, 0], t * 2.0)
    for _ in ts.range(0, 1):
        t = ts.load(x, [0, 0], [1, 8])
        ts.store(y, [0, 0], t)


@ts.jit
def p_reuses_t(x: ts.Tensor[[96, 512], F], y: ts.Out[[96, 512], F]):
    reuses_t(x, y)


def test_local_memory_uses_the_type_of_each_assignment_of_a_name():
    from tilescope.ir.analysis import local_memory_peak

    assert local_memory_peak(p_reuses_t.program().kernels[0]).bytes == 2 * 96 * 512 * 4
    with pytest.raises(ts.VerifyError) as info:
        verify(p_reuses_t)
    assert "local memory 384.0 KiB exceeds" in info.value.message
    assert "t tile[96, 512] f32 (192.0 KiB)" in info.value.message
    assert info.value.loc.line == line_of(reuses_t, "t * 2.0")


def test_a_pass_that_fills_a_u8_tile_with_300_is_caught():
    from tilescope.ir.nodes import Assign, Const, Full
    from tilescope.ir.types import ScalarType, TileType

    program = p_copy.program()
    fill = Assign("z", Full(Const(300, ScalarType(ts.u8)), TileType((4, 4), ts.u8)))
    broken = _with_kernel_body(program, (fill, *program.kernels[0].body))
    with pytest.raises(
        ts.VerifyError, match=r"ts.full: integer literal 300 is out of range for u8 \[0, 255\]"
    ):
        verify_program(broken)
