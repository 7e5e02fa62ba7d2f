"""ts.load / ts.store forms: a tile over any two dims (dims=, None for a size-1 dim), strides=, pad=, 0-dim tensors and
tensors of up to 8 dims: the IR they make, how it prints, and each misuse's message and line."""

from __future__ import annotations

import pytest
from helpers import line_of

import tilescope as ts
from tilescope.ir.nodes import Load, Store
from tilescope.ir.printer import program_str
from tilescope.ir.traverse import walk_exprs, walk_stmts
from tilescope.language.frontend import kernel_ir, load_source

F = ts.f32


def _error(kernel, text: str) -> ts.DSLError:
    with pytest.raises(ts.DSLError) as info:
        kernel_ir(kernel)
    err = info.value
    assert err.loc is not None and err.loc.line == line_of(kernel, text)
    return err


def _loads(kernel) -> list[Load]:
    return [e for e in walk_exprs(kernel_ir(kernel).body) if isinstance(e, Load)]


def test_the_dims_above_one_are_the_tiles():
    @ts.kernel
    def k(x: ts.Tensor[[2, 3, 5, 6], F], y: ts.Out[[2, 5, 3, 6], F]):
        a = ts.load(x, [0, 0, 1, 0], [1, 3, 1, 6])  # x[0, :, 1, :]
        b = ts.load(x, [1, 0, 0, 0], [1, 1, 5, 6])  # the last two: the default
        c = ts.load(x, [0, 0, 0, 2], [2, 1, 1, 1], dims=[0, 3])  # a column
        ts.store(y, [0, 1, 0, 0], a, dims=[2, 3])
        ts.store(y, [0, 0, 0, 0], ts.transpose(c), dims=[0, 2], strides=[1, 1, 1, 1])
        ts.store(y, [1, 0, 0, 0], b[0:3, :], dims=[2, 3])

    a, b, c = _loads(k)
    assert (a.type.shape, a.dims) == ((3, 6), (1, 3))
    assert (b.type.shape, b.dims) == ((5, 6), ())
    assert (c.type.shape, c.dims) == ((2, 1), (0, 3))
    stores = [s for s in walk_stmts(kernel_ir(k).body) if isinstance(s, Store)]
    # the default dims and unit strides are kept as () so the default form compiles as always
    assert [(s.dims, s.strides) for s in stores] == [((), ()), ((0, 2), ()), ((), ())]


def test_strides_and_pad_print_as_dsl_and_parse_back():
    @ts.kernel
    def pool(x: ts.Tensor[[9, 9], F], y: ts.Out[[4, 4], F]):
        m = ts.load(x, [-1, -1], [4, 4], pad=float("-inf"), strides=[2, 2])
        ts.store(y, [0, 0], ts.maximum(m, ts.load(x, [0, 0], [4, 4], strides=[2, 2])))

    @ts.jit
    def prog(x: ts.Tensor[[9, 9], F], y: ts.Out[[4, 4], F]):
        pool(x, y)

    text = program_str(prog.program())
    assert "m = ts.load(x, [-1, -1], [4, 4], pad=float('-inf'), strides=[2, 2])" in text
    assert program_str(load_source(text, "<printed>")) == text


def test_an_ambiguous_tile_is_an_error_that_spells_both_meanings():
    @ts.kernel
    def k(x: ts.Tensor[[2, 3, 5, 6], F], y: ts.Out[[3, 1], F]):
        ts.store(y, [0, 0], ts.load(x, [0, 0, 0, 0], [1, 3, 1, 1]))

    err = _error(k, "ts.load(x, [0, 0, 0, 0], [1, 3, 1, 1])")
    assert err.message == (
        "ts.load: sizes [1, 3, 1, 1] are above 1 in dim 1 only, which is not one of the last two: "
        "which tile is meant is ambiguous"
    )
    assert err.hint == "say which dims the tile covers: dims=[1] for a [3] tile, dims=[1, 3] for a [3, 1] one"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("ts.load(x, [0, 0, 0, 0], [2, 3, 5, 1])", "ts.load: sizes [2, 3, 5, 1] are above 1 in 3 dims [0, 1, 2]; a tile has at most 2 dims"),
        ("ts.load(x, [0, 0, 0, 0], [1, 3, 5, 1], dims=[1, 3])", "ts.load: sizes [1, 3, 5, 1] with dims=[1, 3]: dim 2 is not a tile dim, so its size must be 1"),
        ("ts.load(x, [0, 0, 0, 0], [1, 3, 1, 6], dims=[3, 1])", "ts.load: dims= [3, 1]: the row dim must come before the column dim"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], dims=[4])", "ts.load: dims= [4]: dim 4 is outside the tensor's 4 dims"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], strides=[1, 2])", "ts.load: strides= takes one positive compile-time step per tensor dim (4), got [1, 2]"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], strides=[2, 1, 1, 1])", "ts.load: strides= [2, 1, 1, 1]: dim 0 is not one of the tile's dims [2, 3], so its step must be 1"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], strides=[1, 1, 0, 1])", "ts.load: strides= takes one positive compile-time step per tensor dim (4), got [1, 1, 0, 1]"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], pad=0.0, valid=(2, 3))", "ts.load takes pad= or valid=, not both"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 5, 6], pad=x)", "ts.load pad must be a scalar"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 1, 6], dims=[None, None])", "ts.load: dims= [None, None]: None adds a size-1 tile dim beside a tensor dim"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 1, 6], dims=[None])", "ts.load: dims= [None]: None adds a size-1 tile dim beside a tensor dim"),
        ("ts.load(x, [0, 0, 0, 0], [1, 1, 1, 6], dims=[3, 'x'])", "ts.load: dims= takes one or two compile-time tensor dims (or None), got [3, 'x']"),
    ],
)
def test_a_misused_access_keyword_names_itself(call, message):
    source = f"""
import tilescope as ts

@ts.kernel
def k(x: ts.Tensor[[2, 3, 5, 6], ts.f32], y: ts.Out[[5, 6], ts.f32]):
    t = {call}
    ts.store(y, [0, 0], ts.zeros([5, 6], ts.f32))

@ts.jit
def prog(x: ts.Tensor[[2, 3, 5, 6], ts.f32], y: ts.Out[[5, 6], ts.f32]):
    k(x, y)
"""
    with pytest.raises(ts.DSLError) as info:
        load_source(source, "<access>")
    assert info.value.message.startswith(message), info.value.message
    assert info.value.loc.line == 6


def test_a_stores_dims_name_one_dim_per_tile_dim():
    @ts.kernel
    def k(x: ts.Tensor[[4, 6], F], y: ts.Out[[2, 4, 3, 6], F]):
        ts.store(y, [0, 0, 0, 0], ts.load(x, [0, 0], [4, 6]), dims=[1])

    err = _error(k, "dims=[1]")
    assert err.message == "ts.store: dims= [1] names 1 dims; it takes 2, one per tile dim"


def test_none_in_dims_reads_and_writes_a_1d_tensor_as_a_column():
    @ts.kernel
    def k(b: ts.Tensor[[8], F], x: ts.Tensor[[8, 4], F], y: ts.Out[[8, 4], F], s: ts.Out[[8], F]):
        col = ts.load(b, [0], [8], dims=[0, None])  # b[:, None]
        row = ts.load(b, [0], [4], dims=[None, 0])  # b[None, :4]
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 4]) + col + row)
        ts.store(s, [0], ts.row_sum(ts.load(x, [0, 0], [8, 4])), dims=[0, None])

    @ts.jit
    def prog(b: ts.Tensor[[8], F], x: ts.Tensor[[8, 4], F], y: ts.Out[[8, 4], F], s: ts.Out[[8], F]):
        k(b, x, y, s)

    col, row = _loads(k)[:2]
    assert (col.type.shape, col.dims) == ((8, 1), (0, None))
    assert (row.type.shape, row.dims) == ((1, 4), (None, 0))
    text = program_str(prog.program())
    assert "col = ts.load(b, [0], [8], dims=[0, None])" in text
    assert "ts.store(s, [0], ts.row_sum(ts.load(x, [0, 0], [8, 4])), dims=[0, None])" in text
    assert program_str(load_source(text, "<printed>")) == text


def test_a_column_stored_into_a_1d_tensor_without_dims_points_at_none():
    @ts.kernel
    def k(x: ts.Tensor[[8, 4], F], s: ts.Out[[8], F]):
        ts.store(s, [0], ts.row_sum(ts.load(x, [0, 0], [8, 4])))

    err = _error(k, "ts.store(s, [0]")
    assert err.message == "ts.store: a tile[8, 1] f32 does not fit s: tensor[8] f32"
    assert err.hint == "dims=[0, None] stores the [8, 1] column along its one dim"

    @ts.kernel
    def wide(x: ts.Tensor[[8, 4], F], s: ts.Out[[8], F]):
        ts.store(s, [0], ts.load(x, [0, 0], [8, 4]), dims=[0, None])

    err = _error(wide, "dims=[0, None]")
    assert err.message == "ts.store: dims=[0, None]: None is a tile dim of size 1, but the tile is a tile[8, 4] f32"


def test_zero_dim_tensors_load_and_store_one_by_one_tiles():
    @ts.kernel
    def k(x: ts.Tensor[[], F], loss: ts.Out[[], F]):
        ts.store(loss, [], ts.load(x, [], []) * 2.0)

    (load,) = _loads(k)
    assert load.type.shape == (1, 1)

    @ts.kernel
    def wide(x: ts.Tensor[[4, 4], F], loss: ts.Out[[], F]):
        ts.store(loss, [], ts.load(x, [0, 0], [4, 4]))

    err = _error(wide, "ts.store(loss, [], ts.load(x, [0, 0], [4, 4]))")
    assert err.message == "ts.store: a tile[4, 4] f32 into the 0-dim loss: tensor[] f32"
    assert err.hint.startswith("store a [1, 1] tile")

    @ts.kernel
    def offsets(x: ts.Tensor[[], F], loss: ts.Out[[], F]):
        ts.store(loss, [0], ts.load(x, [], []))

    err = _error(offsets, "ts.store(loss, [0]")
    assert err.message == "ts.store: give one offset per dim of loss (0-D), got [0]"
    assert err.hint == "a 0-dim tensor takes [] offsets"


def test_tensors_have_up_to_eight_dims():
    ok = ts.Tensor[[1, 2, 1, 2, 1, 2, 3, 4], F]
    assert ok.shape == (1, 2, 1, 2, 1, 2, 3, 4)
    with pytest.raises(ts.DSLError, match="at most 8 dims are supported, got 9"):
        ts.Tensor[[1] * 9, F]
