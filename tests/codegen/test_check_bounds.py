"""Checked builds (compile_cfg check_bounds=True): every load/store checks its box at run time.

The dynamic index here is a real one: a kernel's ``ts.Scalar[ts.i32]`` parameter used as a
load (or store) offset, which the verifier cannot bound. Checked:
  - an unchecked build's kernel has no checks; a checked build's passes every load/store its
    entry of a table naming each op's kernel, tensor, argument and DSL line;
  - an out-of-range offset fails the run with a RuntimeFailure naming the task, kernel, op,
    tensor, DSL line, offsets, tile and shape; the same build then runs in-range calls
    correctly, and other programs run in the same process;
  - models compiled checked give the same results; a re-lowered IR edit stays checked;
  - check.hpp alone: the exact message of each kind of violation, and nothing is written.
"""

import re
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import header_program

import tilescope as ts
from tilescope.codegen.cpp_common import display_path

import rms_norm
import softmax

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run


def line_of(comment: str) -> int:
    """The line of this file that ends with ``comment`` (exactly one)."""
    lines = [i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if ln.endswith(comment)]
    assert len(lines) == 1, (comment, lines)
    return lines[0]


@ts.kernel
def take_rows(x: ts.Tensor[[256, 128], ts.f32], y: ts.Out[[8, 128], ts.f32], row: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [row, 0], [8, 128]))  # take_rows: load


@ts.jit
def gather(x: ts.Tensor[[256, 128], ts.f32], y: ts.Out[[32, 128], ts.f32], start: ts.Scalar[ts.i32]):
    for i in ts.range(0, 32, 8):
        take_rows(x, y[i : i + 8, :], start + i)


@ts.kernel
def put_rows(x: ts.Tensor[[8, 128], ts.f32], y: ts.Out[[64, 128], ts.f32], row: ts.Scalar[ts.i32]):
    ts.store(y, [row, 0], ts.load(x, [0, 0], [8, 128]) * 2.0)  # put_rows: store


@ts.jit
def scatter(x: ts.Tensor[[8, 128], ts.f32], y: ts.Out[[64, 128], ts.f32], row: ts.Scalar[ts.i32]):
    put_rows(x, y, row)


LOAD_AT = f"{display_path(__file__)}:{line_of('# take_rows: load')}"
STORE_AT = f"{display_path(__file__)}:{line_of('# put_rows: store')}"


def kernel_source(prog: ts.CompiledProgram, name: str) -> str:
    (k,) = [k for k in prog.kernels if k["name"] == name]
    return (prog.work_dir / k["source"]).read_text()


def failure_line(task: int, kernel: str, message: str) -> str:
    """The runtime's line for a kernel that threw, as a regex (any worker; with or without the
    task's display name, here the kernel's)."""
    return rf"task {task}( '{kernel}')? \(kernel {kernel}\) on worker \d+: " + re.escape(message)


def test_builds_are_checked_by_default():
    prog = gather.compile()
    assert prog.config["RUNTIME_CONFIG"]["check_bounds"] is True
    assert "#include <tilescope/check.hpp>" in kernel_source(prog, "take_rows")


def test_unchecked_build_has_no_checks():
    prog = gather.compile(check_bounds=False)
    src = kernel_source(prog, "take_rows")
    assert "store(y, {0, 0}, load<8, 128>(x, {row, 0}));" in src
    assert "check" not in re.sub(r"//.*", "", src)  # comments name this file
    assert prog.config["RUNTIME_CONFIG"]["check_bounds"] is False


def test_checked_build_checks_every_load_and_store():
    prog = gather.compile(check_bounds=True)
    src = kernel_source(prog, "take_rows")
    assert "#include <tilescope/check.hpp>" in src
    assert f'    {{"take_rows", "load", "x", 0, "{LOAD_AT}"}},  // 0\n' in src
    assert f'    {{"take_rows", "store", "y", 1, "{LOAD_AT}"}},  // 1\n' in src
    assert "store(y, {0, 0}, load<8, 128>(x, {row, 0}, ::check_sites[0]), ::check_sites[1]);" in src
    assert prog.config["RUNTIME_CONFIG"]["check_bounds"] is True


@pytest.mark.parametrize(
    ("start", "task", "detail"),
    [
        (230, 3, "offset [254, 0] + tile [8, 128] is outside x's shape [256, 128] (dim 0: 254 + 8 > 256)"),
        (-8, 0, "offset [-8, 0] + tile [8, 128] is outside x's shape [256, 128] (dim 0: -8 < 0)"),
    ],
)
def test_out_of_range_load_fails_the_run_and_the_build_keeps_working(start, task, detail):
    prog = gather.compile(check_bounds=True)
    x = torch.randn(256, 128)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog(x, torch.zeros(32, 128), start)
    expected = failure_line(task, "take_rows", f"kernel take_rows: load of x (arg 0) at {LOAD_AT}: {detail}")
    assert re.search(expected, str(info.value)), str(info.value)
    f = info.value.failure
    assert f.kind == "kernel_error" and f.task_id == task and f.kernel == "take_rows"
    # the fields a tool reads, set from the runtime's failure record, not from the message
    assert (f.cause, f.op, f.arg, f.tensor, f.dsl_line) == ("bounds", "load", 0, "x", LOAD_AT)
    assert f"task {task}'s x is x[0:256, 0:128]" in f.details  # the region the task was given
    saved = prog.work_dir / "dfx_outputs" / "failure" / f"task_{task}"
    assert torch.equal(torch.load(saved / "x.pt"), x)

    y = torch.zeros(32, 128)
    prog(x, y, 40)  # the same build, in range
    assert torch.equal(y, x[40:72])

    rx, gamma, ry = torch.randn(64, 128), torch.rand(1, 128), torch.zeros(64, 128)
    rms_norm.build(64, 128)(rx, gamma, ry, 1e-6)  # another program, same process
    torch.testing.assert_close(ry, rx * torch.rsqrt(rx.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_when_every_task_fails_the_first_submitted_is_reported_however_they_were_scheduled(seed):
    # seed 0 is the usual schedule; the others take ready tasks in a random order, so that a later
    # task often fails first: the earlier tasks still run, and the earliest failure is the report
    from tilescope.runtime.run_config import RunConfig

    prog = gather.compile(check_bounds=True)
    x = torch.randn(256, 128)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run_with(RunConfig(num_workers=4, shuffle_seed=seed or None), x, torch.zeros(32, 128), 250)
    detail = "offset [250, 0] + tile [8, 128] is outside x's shape [256, 128] (dim 0: 250 + 8 > 256)"
    expected = failure_line(0, "take_rows", f"kernel take_rows: load of x (arg 0) at {LOAD_AT}: {detail}")
    assert re.search(expected, str(info.value)), str(info.value)
    f = info.value.failure
    assert (f.kind, f.task_id, f.cause, f.op) == ("kernel_error", 0, "bounds", "load")
    assert torch.equal(torch.load(prog.work_dir / "dfx_outputs" / "failure" / "task_0" / "x.pt"), x)


def test_out_of_range_store_fails_the_run():
    prog = scatter.compile(check_bounds=True)
    x = torch.randn(8, 128)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog(x, torch.zeros(64, 128), 60)
    detail = "offset [60, 0] + tile [8, 128] is outside y's shape [64, 128] (dim 0: 60 + 8 > 64)"
    expected = failure_line(0, "put_rows", f"kernel put_rows: store of y (arg 1) at {STORE_AT}: {detail}")
    assert re.search(expected, str(info.value)), str(info.value)
    f = info.value.failure
    assert (f.cause, f.op, f.arg, f.tensor, f.dsl_line, f.task_id) == ("bounds", "store", 1, "y", STORE_AT, 0)
    y = torch.zeros(64, 128)
    prog(x, y, 56)
    assert torch.equal(y[56:], x * 2.0) and not y[:56].any()


def test_checked_rms_norm_gives_correct_results():
    prog = rms_norm.build().compile(check_bounds=True)
    src = kernel_source(prog, "rms_rows")
    assert "load<64, 128>(x, {0, h}, ::check_sites[0])" in src
    # gamma's tile, only read by the fused store, is a view of gamma: checked as a load is
    assert "TileView<float, 1, 128> g = view<1, 128>(gamma, {0, h}, {extent(y)}, ::check_sites[2]);" in src
    assert src.count("load<") + src.count("view<") + src.count("store(") == src.count(", ::check_sites[") == 4
    x, gamma, y, eps = torch.randn(512, 512), torch.rand(1, 512), torch.zeros(512, 512), 1e-6
    prog(x, gamma, y, eps)
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma)


def test_checked_softmax_gives_correct_results():
    prog = softmax.build().compile(check_bounds=True)
    x, y = torch.randn(512, 1024), torch.zeros(512, 1024)
    prog(x, y)
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_edited_ir_of_a_checked_build_is_relowered_checked():
    work = gather.compile(check_bounds=True).work_dir
    ir = work / "ir/gather.py"
    ir.write_text(ir.read_text().replace("ts.load(x, [row, 0]", "ts.load(x, [row + 8, 0]"))
    prog = ts.CompiledProgram.from_dir(work)
    assert "load<8, 128>(x, {row + 8, 0}, ::check_sites[0])" in kernel_source(prog, "take_rows")
    x, y = torch.randn(256, 128), torch.zeros(32, 128)
    prog(x, y, 40)
    assert torch.equal(y, x[48:80])
    with pytest.raises(ts.RuntimeFailure, match=re.escape("(dim 0: 256 + 8 > 256)")):
        prog(x, y, 224)


# ---------------------------------------------------------------------------------------------
# check.hpp alone

HEADER_MAIN = r"""
#include <tilescope/kernel.hpp>
#include <tilescope/check.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace ts;

// A contiguous float tensor of `shape` (ndim dims) over `buf`.
static ts_tensor tensor(float *buf, std::vector<int64_t> shape) {
    ts_tensor t{};
    t.data = buf;
    t.dtype = TS_F32;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        t.shape[d] = shape[d];
        t.strides[d] = stride;
        stride *= shape[d];
    }
    return t;
}

int main(int argc, char **argv) {
    static std::vector<float> buf(256 * 128, 1.0f);
    const std::string c = argc > 1 ? argv[1] : "";
    const CheckSite at{"gather_rows", "load", "x", 0, "model.py:41"};
    const CheckSite st{"scatter", "store", "y", 2, "model.py:7"};
    const TensorView<float> x(tensor(buf.data(), {256, 128}));
    try {
        if (c == "past_end") load<8, 128>(x, {250, 0}, at);
        if (c == "negative") load<8, 128>(x, {-3, 0}, at);
        if (c == "first_dim_named") load<8, 128>(x, {-1, 200}, at);
        if (c == "huge") load<8, 128>(x, {INT64_MAX, 0}, at);
        if (c == "last_dim") store(x, {0, 120}, full<float, 4, 16>(7.0f), st);
        if (c == "last_dim_negative") store(x, {8, -1}, full<float, 4, 16>(7.0f), st);
        if (c == "one_d") load<1, 64>(TensorView<float>(tensor(buf.data(), {128})), {100}, at);
        if (c == "leading_dim") load<8, 128>(TensorView<float>(tensor(buf.data(), {4, 8, 128})), {4, 0, 0}, at);
        if (c == "ndim") load<8, 128>(TensorView<float>(tensor(buf.data(), {2, 8, 128})), {0, 0}, at);
        if (c == "in_range") {
            store(x, {248, 112}, full<float, 8, 16>(7.0f), st);
            const Tile<float, 8, 16> t = load<8, 16>(x, {248, 112}, at);
            const Tile<float, 1, 64> u = load<1, 64>(TensorView<float>(tensor(buf.data(), {128})), {64}, at);
            std::printf("ok %g %g %g\n", t(0, 0), t(7, 15), u(0, 0));
            return 0;
        }
        std::printf("no error\n");
    } catch (const BoundsError &e) {
        const bool untouched = buf[120] == 1.0f && buf[8 * 128 - 1] == 1.0f;
        std::printf("%s%s\n", e.what(), untouched ? "" : " [memory was written]");
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def header_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """check.hpp's test program, built with the kernel flags (and -Werror: no warnings)."""
    return header_program(HEADER_MAIN, tmp_path_factory.mktemp("check_hpp"))


LOAD_X = "kernel gather_rows: load of x (arg 0) at model.py:41: "
STORE_Y = "kernel scatter: store of y (arg 2) at model.py:7: "


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "past_end",
            "offset [250, 0] + tile [8, 128] is outside x's shape [256, 128] (dim 0: 250 + 8 > 256)",
        ),
        ("negative", "offset [-3, 0] + tile [8, 128] is outside x's shape [256, 128] (dim 0: -3 < 0)"),
        (
            "first_dim_named",
            "offset [-1, 200] + tile [8, 128] is outside x's shape [256, 128] (dim 0: -1 < 0)",
        ),
        (
            "huge",
            "offset [9223372036854775807, 0] + tile [8, 128] is outside x's shape [256, 128] "
            "(dim 0: 9223372036854775807 + 8 > 256)",
        ),
        (
            "last_dim",
            "offset [0, 120] + tile [4, 16] is outside y's shape [256, 128] (dim 1: 120 + 16 > 128)",
        ),
        (
            "last_dim_negative",
            "offset [8, -1] + tile [4, 16] is outside y's shape [256, 128] (dim 1: -1 < 0)",
        ),
        ("one_d", "offset [100] + tile [64] is outside x's shape [128] (dim 0: 100 + 64 > 128)"),
        (
            "leading_dim",
            "offset [4, 0, 0] + tile [1, 8, 128] is outside x's shape [4, 8, 128] (dim 0: 4 + 1 > 4)",
        ),
        ("ndim", "2 offsets [0, 0] for x's 3-D shape [2, 8, 128]"),
    ],
)
def test_header_violation_message(header_exe, case, message):
    out = subprocess.run([str(header_exe), case], capture_output=True, text=True, check=True).stdout
    prefix = STORE_Y if case.startswith("last_dim") else LOAD_X
    assert out == prefix + message + "\n"


def test_header_in_range_boxes_pass(header_exe):
    out = subprocess.run([str(header_exe), "in_range"], capture_output=True, text=True, check=True).stdout
    assert out == "ok 7 7 1\n"
