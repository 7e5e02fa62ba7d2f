"""Misuse of the real-kernel surface (iota, tile slices, valid=/fill=, load_rows, pow, gelu,
clamp, transposed and int8 matmul, run-time min/max) is a DSLError at the user's line that
says what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fuzz_programs import load_module_source
from helpers import line_of

import tilescope as ts

ARGS = (
    "x: ts.Tensor[[64, 128], ts.f32], i: ts.Tensor[[8, 1], ts.i32], q: ts.Tensor[[16, 16], ts.i8], "
    "y: ts.Out[[64, 128], ts.f32], n: ts.Scalar[ts.i32]"
)


def _error(tmp_path, body: str) -> ts.DSLError:
    """The DSLError compiling a kernel of ``body`` raises, with its line checked: the body's last line."""
    src = (
        "import tilescope as ts\n\n\n@ts.kernel\ndef k(" + ARGS + "):\n"
        + "\n".join("    " + line for line in body.strip("\n").splitlines())
        + "\n\n\n@ts.jit\ndef p(" + ARGS + "):\n    k(x, i, q, y, n)\n"
    )
    prog, path = load_module_source(src, "p", tmp_path)
    with pytest.raises(ts.DSLError) as info:
        prog.program()
    err = info.value
    assert err.loc is not None and err.loc.file == str(path)
    assert err.loc.line == 5 + len(body.strip("\n").splitlines()), err
    return err


CASES = {
    "valid_too_large": (
        "t = ts.load(x, [0, 0], [8, 16], valid=(9, 16))",
        "ts.load valid= [9, 16]: dim 0 count 9 is outside [0, 8] (the [8, 16] tile)",
    ),
    "valid_negative": (
        "t = ts.load(x, [0, 0], [8, 16], valid=(n, -1))",
        "dim 1 count -1 is outside [0, 16]",
    ),
    "valid_count_per_dim": (
        "t = ts.load(x, [0, 0], [8, 16], valid=(n,))",
        "ts.load valid= takes one count per tile dim (rows, cols) of the [8, 16] tile, got [n]",
    ),
    "valid_float": (
        "t = ts.load(x, [0, 0], [8, 16], valid=(n, 2.5))",
        "ts.load valid count of dim 1 must be an integer index, got 2.5 (float)",
    ),
    "fill_without_valid": (
        "t = ts.load(x, [0, 0], [8, 16], fill=0.0)",
        "ts.load fill= without valid=: every element of the tile is read",
    ),
    "store_valid_too_large": (
        "ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]), valid=(8, 17))",
        "ts.store valid= [8, 17]: dim 1 count 17 is outside [0, 16]",
    ),
    "slice_run_time": (
        "t = ts.load(x, [0, 0], [8, 16])\nu = t[0:n, :]",
        "tile slice bounds must be compile-time ints, got n (a scalar i32, known only at run time)",
    ),
    "slice_outside": (
        "t = ts.load(x, [0, 0], [8, 16])\nu = t[4:12, :]",
        "tile slice dim 0: [4, 12) is empty or outside the tile[8, 16] f32",
    ),
    "slice_one_element": (
        "t = ts.load(x, [0, 0], [8, 16])\nu = t[1, 2]",
        "indexing every dim of a tile[8, 16] f32 leaves a single element, not a tile",
    ),
    "iota_dim": ("t = ts.iota([8, 16], dim=2)", "ts.iota dim must be a compile-time int in [-2, 1], got 2"),
    "iota_overflow": (
        "t = ts.iota([4, 300], ts.i8)",
        "ts.iota of 300 along dim 1: integer literal 299 is out of range for i8",
    ),
    "load_rows_float_index": (
        "r = ts.load(x, [0, 0], [8, 1])\nt = ts.load_rows(x, r, 16)",
        "ts.load_rows's rows must be an integer tile of shape [N], [N, 1] or [1, N], got a tile[8, 1] f32",
    ),
    "load_rows_too_wide": (
        "r = ts.load(i, [0, 0], [8, 1])\nt = ts.load_rows(x, r, 200)",
        "ts.load_rows: 200 columns of x, which has 128",
    ),
    "pow_int": ("t = ts.load(i, [0, 0], [8, 1])\nu = ts.pow(t, 2)", "ts.pow on an integer tile (tile[8, 1] i32)"),
    "pow_numbers": ("u = ts.pow(2.0, 3.0)", "ts.pow needs a tile, got 2.0 and 3.0"),
    "gelu_form": (
        "t = ts.load(x, [0, 0], [8, 16])\nu = ts.gelu(t, approximate=\"fast\")",
        'ts.gelu approximate= must be "none" or "tanh" (as torch\'s), got \'fast\'',
    ),
    "clamp_nothing": ("t = ts.load(x, [0, 0], [8, 16])\nu = ts.clamp(t)", "ts.clamp needs min=, max= or both"),
    "matmul_inner": (
        "a = ts.load(x, [0, 0], [8, 16])\nu = ts.matmul(a, a, transpose_a=True, transpose_b=True)",
        "ts.matmul(transpose_a=True, transpose_b=True): inner dims differ: [16, 8] @ [16, 8]",
    ),
    "matmul_i32": (
        "a = ts.load(i, [0, 0], [8, 1])\nu = ts.matmul(a, a, transpose_b=True)",
        "ts.matmul supports f32, bf16, f16, i8 inputs, got i32",
    ),
    "matmul_int8_acc": (
        "a = ts.load(q, [0, 0], [16, 16])\nu = ts.matmul(a, a, acc=ts.zeros([16, 16], ts.f32))",
        "ts.matmul: acc must be a tile[16, 16] i32, got tile[16, 16] f32",
    ),
    "mean_int": ("a = ts.load(i, [0, 0], [8, 1])\nu = ts.row_mean(a)", "ts.row_mean needs a float tile, got tile[8, 1] i32"),
    "min_of_tiles": (
        "a = ts.load(x, [0, 0], [8, 16])\nu = min(a, a)",
        "min() of a tile[8, 16] f32: Python's min compares whole values",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_misuse_is_an_error_at_the_line(tmp_path, case):
    body, fragment = CASES[case]
    err = _error(tmp_path, body)
    assert fragment in str(err), str(err)



# --- run-time misuse: the run fails naming the task, kernel, op, tensor and line, on both platforms


@ts.kernel
def ragged(x: ts.Tensor[[64, 16], ts.f32], i: ts.Tensor[[8, 1], ts.i32], y: ts.Out[[8, 16], ts.f32], n: ts.Scalar[ts.i32]):
    t = ts.load(x, [0, 0], [8, 16], valid=(n, 16))  # valid rows
    r = ts.load(i, [0, 0], [8, 1])
    ts.store(y, [0, 0], t + ts.load_rows(x, r, 16))  # gather


@ts.jit
def p_ragged(x: ts.Tensor[[64, 16], ts.f32], i: ts.Tensor[[8, 1], ts.i32], y: ts.Out[[8, 16], ts.f32], n: ts.Scalar[ts.i32]):
    ragged(x, i, y, n)


@ts.kernel
def summed(x: ts.Tensor[[64, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], n: ts.Scalar[ts.i32]):
    acc = ts.zeros([8, 16], ts.f32)
    for j in ts.range(0, n, 8):  # kernel loop
        acc = acc + ts.load(x, [j, 0], [8, 16])
    ts.store(y, [0, 0], acc)


@ts.jit
def p_summed(x: ts.Tensor[[64, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], n: ts.Scalar[ts.i32]):
    summed(x, y, n)


@ts.jit
def p_repeats(x: ts.Tensor[[64, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], n: ts.Scalar[ts.i32]):
    for _b in ts.range(0, n - 1):  # orchestration loop
        summed(x, y, 8)


def _failure(prog, args, platform: str, check_bounds: bool) -> str:
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.compile(check_bounds=check_bounds).run(*args, platform=platform)
    return str(info.value)


def _where(fn, marker: str) -> str:
    return f"{Path(__file__).name}:{line_of(fn, marker)}"


ROWS = torch.arange(8, dtype=torch.int32).reshape(8, 1)


@pytest.mark.slow
@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_run_time_valid_count_larger_than_the_tile(platform, check_bounds):
    msg = _failure(p_ragged, (torch.randn(64, 16), ROWS, torch.zeros(8, 16), 9), platform, check_bounds)
    assert "task 0" in msg and "kernel ragged: load of x" in msg and _where(ragged, "# valid rows") in msg
    assert "load of a [8, 16] tile with valid [9, 16]: valid rows must be within [0, 8]" in msg


@pytest.mark.slow
@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_gather_index_outside_the_tensor_names_the_index_and_row(platform, check_bounds):
    rows = ROWS.clone()
    rows[3] = 64
    msg = _failure(p_ragged, (torch.randn(64, 16), rows, torch.zeros(8, 16), 8), platform, check_bounds)
    assert "task 0" in msg and "kernel ragged: load_rows of x" in msg and _where(ragged, "# gather") in msg
    assert "index 3 of the row tile is 64, outside x's 64 rows (shape [64, 16])" in msg


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_negative_run_time_loop_bound_in_a_kernel(platform):
    msg = _failure(p_summed, (torch.randn(64, 16), torch.zeros(8, 16), -3), platform, False)
    assert "task 0" in msg
    assert f"ts.range(0, n, 8) at {summed.fn.__code__.co_filename}:{line_of(summed, '# kernel loop')}: stop n is -3 " \
        "at run time; a run-time loop bound must be >= 0" in msg


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_negative_run_time_loop_bound_in_an_orchestration(platform):
    msg = _failure(p_repeats, (torch.randn(64, 16), torch.zeros(8, 16), -4), platform, False)
    assert f":{line_of(p_repeats, '# orchestration loop')}: stop n - 1 is -5 at run time" in msg
    assert "a run-time loop bound must be >= 0" in msg


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_a_loop_bound_of_zero_runs_no_iteration(platform):
    y = torch.full((8, 16), 5.0)
    p_summed.compile().run(torch.randn(64, 16), y, 0, platform=platform)
    assert torch.equal(y, torch.zeros(8, 16))
