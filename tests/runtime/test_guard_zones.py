"""Guard zones: a write just outside a tensor is a report naming the task that wrote it.

Seeded bugs, each asserting what the tool names:
  - DSL kernels in unchecked builds storing at a runtime row offset past the end of (or before)
    an intermediate tensor: a ``guard`` failure naming the task, kernel, argument, tensor, side and
    bytes, the writer as exact, its inputs saved; a replay of that task names it again;
  - a write far past the end: it faults in the guard pages, and the report says so (in process, on
    stderr; under --isolate, in the crash report's details);
  - the harness's tensors have zones too: a kernel writing past a program output is named;
  - hand-written C++: two tasks running together on one tensor are both named ("run again with
    --serial"), and a write through a pointer no task was given is found at the end of the run;
  - zones of program arguments that are already damaged before the run are refused.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import native_entries

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, run_jit
from tilescope.ir import dtypes
from tilescope.ir.types import Direction
from tilescope.launch.task import replay_task
from tilescope.runtime import graph, guarded
from tilescope.runtime.abi import GUARD_BYTE
from tilescope.runtime.graph import scalar_arg, tensor_arg
from tilescope.runtime.run_config import Recording, RunConfig

R, C = 64, 128


@ts.kernel
def scale(x: ts.Tensor[[R, C], ts.f32], out: ts.Out[[R, C], ts.f32]):
    ts.store(out, [0, 0], ts.load(x, [0, 0], [R, C]) * 2.0)


@ts.kernel
def put(x: ts.Tensor[[R, C], ts.f32], out: ts.Out[[R, C], ts.f32], row: ts.Scalar[ts.i32], col: ts.Scalar[ts.i32]):
    ts.store(out, [row, col], ts.load(x, [0, 0], [8, C]))


@ts.kernel
def add(a: ts.Tensor[[R, C], ts.f32], b: ts.Tensor[[R, C], ts.f32], out: ts.Out[[R, C], ts.f32]):
    ts.store(out, [0, 0], ts.load(a, [0, 0], [R, C]) + ts.load(b, [0, 0], [R, C]))


@ts.jit
def through_tmp(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32], row: ts.Scalar[ts.i32],
                col: ts.Scalar[ts.i32]):
    t = ts.create_tensor([R, C], ts.f32)
    u = ts.create_tensor([R, C], ts.f32)
    scale(x, t)
    put(x, u, row, col)
    add(t, u, y)


@ts.jit
def into_output(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32], row: ts.Scalar[ts.i32]):
    put(x, y, row, 0)


@pytest.fixture(scope="module")
def unchecked(tmp_path_factory):
    return through_tmp.compile(check_bounds=False, build_dir=str(tmp_path_factory.mktemp("guard")))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("row", "col", "side", "bytes_"),
    [(60, 0, "wrote past the end of", "0 to 2047 byte(s) past its end (element 8192 onwards of 8192)"),
     (0, -4, "wrote before the start of", "1 to 16 byte(s) before its start")],
)  # fmt: skip
def test_a_store_just_outside_an_intermediate_names_its_task(unchecked, row, col, side, bytes_):
    x = torch.full((R, C), 1.5)  # no byte of it is GUARD_BYTE: every byte written shows
    with pytest.raises(ts.RuntimeFailure) as info:
        unchecked(x, torch.zeros(R, C), row, col, serial=True)
    f = info.value.failure
    assert (f.kind, f.task_id, f.kernel) == ("guard", 1, "put")
    assert f.message.startswith(
        f"guard zone damaged: task 1 (kernel put) (arg 1) {side} intermediate tensor u (f32[64, 128], 32768 bytes): "
    )
    assert bytes_ in f.message
    assert f.message.endswith("no other task using that tensor was running, so it is the writer")
    assert "task 1's out is u[0:64, 0:128]" in f.details
    assert re.search(r"dfx_outputs/failure/task_1(_\d+)?$", f.saved_inputs)  # a suffix: saved before
    assert any("compiled with check_bounds=False" in step for step in f.next_steps)
    assert f"next: replay the task alone: tilescope replay {unchecked.work_dir} --task 1" in str(info.value)
    # the same build runs in-range calls correctly afterwards
    y = torch.zeros(R, C)
    unchecked(x, y, 0, 0)
    expected = x * 2
    expected[:8] += x[:8]
    torch.testing.assert_close(y, expected)


@pytest.mark.slow
def test_a_hand_edited_kernel_is_named_as_the_place_to_look(tmp_path):
    prog = through_tmp.compile(build_dir=str(tmp_path))  # checked
    (k,) = [k for k in prog.kernels if k["name"] == "put"]
    src = prog.work_dir / k["source"]
    text = src.read_text()
    edited = re.sub(r", ::check_sites\[\d+\]\);", ");", text.replace("store(out, {row, col}", "store(out, {row + 2, col}"))
    assert edited != text
    src.write_text(edited)  # the store moved down 2 rows, and its check dropped
    prog = ts.CompiledProgram.from_dir(prog.work_dir)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog(torch.full((R, C), 1.5), torch.zeros(R, C), 56, 0, serial=True)
    f = info.value.failure
    assert (f.kind, f.task_id, f.kernel) == ("guard", 1, "put")
    assert f"{k['source']} was edited by hand since it was generated: look there first" in f.details
    assert not any("check_bounds=False" in s or "please report" in s for s in f.next_steps)


@pytest.mark.slow
def test_the_saved_task_replayed_alone_names_the_same_write(unchecked):
    with pytest.raises(ts.RuntimeFailure):
        unchecked(torch.randn(R, C), torch.zeros(R, C), 60, 0)
    result = replay_task(unchecked.work_dir, 1, isolate=False)
    assert result.failure is not None and result.failure.kind == "guard"
    assert "(kernel put) (arg 1) wrote past the end of program argument 1 (f32[64, 128], 32768 bytes)" in (
        result.failure.message
    )
    assert "program argument 1 is out" in result.failure.details


FAR = textwrap.dedent(
    """
    import sys, torch
    sys.path[:0] = [{here!r}, {tests!r}]
    from test_guard_zones import through_tmp
    prog = through_tmp.compile(check_bounds=False, build_dir={base!r})
    prog(torch.randn(64, 128), torch.zeros(64, 128), 128, 0, isolate={isolate})
    """
)


# put's [8, 128] f32 tile stored at row 128 of a [64, 128] tensor covers bytes 32768 to 36863 past
# its end; which of them faults first depends on the order the compiler gave the stores (the AVX2
# and AVX-512 paths differ), so the report may name any of them.
FAR_PAST_END = range(R * C * 4, R * C * 4 + 8 * C * 4)


def _fault_distance(text: str, where: str) -> int:
    found = re.search(rf"that address is (\d+) byte\(s\) past the end of {re.escape(where)}, in the guard pages", text)
    assert found, text
    return int(found.group(1))


@pytest.mark.slow
def test_a_store_far_past_the_end_faults_in_the_guard_pages_naming_the_task(tmp_path):
    here = __import__("pathlib").Path(__file__).parent
    code = FAR.format(here=str(here), tests=str(here.parent), base=str(tmp_path), isolate=False)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0
    assert "task 1 (kernel put) on worker" in proc.stderr and "died of SIGSEGV" in proc.stderr
    assert _fault_distance(proc.stderr, "arg 1's tensor") in FAR_PAST_END


@pytest.mark.slow
def test_under_isolate_the_crash_report_says_which_tensor_the_address_is_outside(unchecked):
    with pytest.raises(ts.RuntimeFailure) as info:
        unchecked(torch.randn(R, C), torch.zeros(R, C), 128, 0, isolate=True)
    f = info.value.failure
    assert (f.kind, f.task_id, f.kernel) == ("crash", 1, "put")
    details = "\n".join(f.details)
    assert _fault_distance(details, "out (arg 1)") in FAR_PAST_END
    assert "in the guard pages around it: the kernel went outside that tensor" in details


@pytest.mark.slow
def test_the_harness_tensors_have_zones_so_a_write_past_an_output_is_named():
    specs = [
        TensorSpec("x", [R, C], torch.float32),
        TensorSpec("y", [R, C], torch.float32, is_output=True),
        ScalarSpec("row", torch.int32, 61),
    ]

    def golden(t):
        t["y"][:] = 0

    result = run_jit(into_output, specs, golden, runtime_cfg={"serial": True}, compile_cfg={"check_bounds": False})
    f = result.failure
    assert f is not None and (f.kind, f.task_id, f.kernel) == ("guard", 0, "put")
    assert "wrote past the end of program argument 1 (f32[64, 128], 32768 bytes)" in f.message
    assert "program argument 1 is y" in f.details


# -- hand-written C++: what the DSL cannot write ---------------------------------------------

KERNELS = {
    # args: tensor t, scalar i64 `flag`, scalar i64 `end`. Without flag: say it started, then wait
    # (up to 5 s) for the other task's write. With flag: wait (up to 5 s) until the other started,
    # write 8 bytes at t's byte `end` (just past its buffer), say so. Either way both tasks run
    # together while the zone changes.
    "pair": """
#include <atomic>
#include <chrono>
#include <cstring>
#include <tilescope/abi.h>
static std::atomic<int> started{0}, written{0};
static void wait_for(std::atomic<int> &flag) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (flag.load() == 0 && std::chrono::steady_clock::now() < until) {}
}
extern "C" void kernel_entry(const ts_arg *args) {
    if (args[1].u.s.v.i) {
        wait_for(started);
        std::memset(static_cast<char *>(args[0].u.t.data) + args[2].u.s.v.i, 0x11, 8);
        written.store(1);
    } else {
        started.store(1);
        wait_for(written);
    }
}
""",
    # args: tensor t, scalar i64 address: write 4 bytes just before that address
    "stray": """
#include <cstdint>
#include <cstring>
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    std::memset(reinterpret_cast<char *>(static_cast<intptr_t>(args[1].u.s.v.i)) - 4, 0x22, 4);
}
""",
    # args: tensor t (input): reads nothing, writes nothing
    "noop": """
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) { (void)args; }
""",
    # args: intermediate t (inout, i64[16, 64]), program output o (i64[1]): o = t's nonzero bytes
    # as the kernel found them; then t is filled with 0x5A
    "dirty": """
#include <cstdint>
#include <cstring>
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    auto *t = static_cast<unsigned char *>(args[0].u.t.data);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < 16 * 64 * 8; ++i) nonzero += t[i] != 0;
    static_cast<int64_t *>(args[1].u.t.data)[0] = nonzero;
    std::memset(t, 0x5A, 16 * 64 * 8);
}
""",
}

ORCHESTRATIONS = {
    # two readers of one intermediate run together; the second writes past its end
    "pair": """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle tmp = orch.create_tensor(TS_I64, {4, 8});
    for (int64_t flag = 0; flag < 2; ++flag) {
        ts::Task t = orch.task(0, flag ? "writer" : "reader");
        t.add_input(tmp, {4, 8});
        t.add_scalar(TS_I64, flag);
        t.add_scalar(TS_I64, int64_t{4 * 8 * 8});
        orch.submit(t);
    }
    return orch.status();
}
""",
    # a task given tensor a writes just before tensor b, which it was not given
    "stray": """
#include <cstdint>
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle a = orch.create_tensor(TS_F32, {8});
    ts::TensorHandle b = orch.create_tensor(TS_F32, {16});
    ts::Task t = orch.task(0, "stray");
    t.add_output(a, {8});
    t.add_scalar(TS_I64, static_cast<int64_t>(reinterpret_cast<intptr_t>(b.desc().data)));
    orch.submit(t);
    return orch.status();
}
""",
    "dirty": """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle t = orch.create_tensor(TS_I64, {16, 64});
    ts::Task task = orch.task(0, "dirty");
    task.add_inout(t, {16, 64});
    task.add_output(orch.tensor_arg(0), {1});
    orch.submit(task);
    return orch.status();
}
""",
    # task 0 (stray) writes just before b, which it was not given; task 1 reads b after it
    "stray_then_reader": """
#include <cstdint>
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle a = orch.create_tensor(TS_F32, {8});
    ts::TensorHandle b = orch.create_tensor(TS_F32, {16});
    ts::Task t = orch.task(0, "stray");
    t.add_output(a, {8});
    t.add_scalar(TS_I64, static_cast<int64_t>(reinterpret_cast<intptr_t>(b.desc().data)));
    const int64_t first = orch.submit(t);
    ts::Task r = orch.task(1, "reader");
    r.add_input(b, {16});
    r.depends_on(first);
    orch.submit(r);
    return orch.status();
}
""",
    "noop_on_arg": """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    return orch.status();
}
""",
}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return native_entries(tmp_path_factory.mktemp("guard_core"), KERNELS, ORCHESTRATIONS)


def run(libs, orch: str, kernel: str, args: list, **recording):
    return graph.run_graph(
        libs[f"o_{orch}"].address, [libs[f"k_{kernel}"].address], [kernel], args, recording=Recording(**recording)
    )


@pytest.mark.slow
def test_tasks_running_together_on_the_damaged_tensor_are_all_named(libs):
    with graph.Runtime(2) as rt:
        with pytest.raises(ts.RuntimeFailure) as info:
            rt.run(libs["o_pair"].address, [libs["k_pair"].address], ["pair"], [])
    message = str(info.value)
    assert "guard zone damaged: " in message
    assert "intermediate tensor 0 (i64[4, 8], 256 bytes): 8 byte(s) of the" in message
    assert "0 to 7 byte(s) past its end (element 32 onwards of 32)" in message
    assert "task 0 (kernel pair)" in message and "task 1 (kernel pair)" in message
    assert message.endswith(
        "(they were running together with that tensor as an argument): run again with --serial to name the one"
    )


@pytest.mark.slow
def test_a_write_through_a_pointer_no_task_was_given_is_found_at_the_end_of_the_run(libs):
    with pytest.raises(ts.RuntimeFailure) as info:
        run(libs, "stray", "stray", [])
    assert str(info.value) == (
        "guard zone damaged: at the end of the run, intermediate tensor 1 (f32[16], 64 bytes): 4 byte(s) of the "
        "64-byte guard zone before it changed, 1 to 4 byte(s) before its start; no task that takes it as an "
        "argument saw it change, so a task wrote there through a pointer it was not given"
    )
    assert info.value.report.failure.kind == "guard"
    assert info.value.report.failure.task_id == -1


@pytest.mark.slow
def test_a_runtime_reuses_an_intermediates_mapping_zero_filled_with_fresh_zones(libs):
    found = torch.full((1,), -1, dtype=torch.int64)
    with graph.Runtime(2) as rt:
        addresses = []
        for _ in range(3):
            report = rt.run(
                libs["o_dirty"].address, [libs["k_dirty"].address], ["dirty"],
                [tensor_arg(found, Direction.OUT)], recording=Recording(record_edges=True),
            )  # fmt: skip
            assert found.item() == 0  # the earlier run's 0x5A bytes are gone
            (tmp,) = [b for b in report.buffers if b.program_arg == -1]
            addresses.append(tmp.buffer_id)
    assert len(set(addresses)) == 1  # one mapping, kept between the runs


@pytest.mark.slow
def test_damage_a_task_finds_before_its_kernel_runs_is_not_blamed_on_it(libs):
    with pytest.raises(ts.RuntimeFailure) as info:
        graph.run_graph(
            libs["o_stray_then_reader"].address, [libs["k_stray"].address, libs["k_noop"].address],
            ["stray", "noop"], [], RunConfig(serial=True),
        )  # fmt: skip
    assert str(info.value) == (
        "guard zone damaged: found as task 1 (kernel noop) started, intermediate tensor 1 (f32[16], 64 bytes): "
        "4 byte(s) of the 64-byte guard zone before it changed, 1 to 4 byte(s) before its start; no task then "
        "running takes it as an argument, and each that had run checked it intact, so a task wrote there "
        "through a pointer it was not given"
    )
    assert info.value.report.failure.task_id == -1


def test_guarded_clone_copies_and_keeps_its_zones_until_freed():
    x = torch.randn(5, 7)
    g = guarded.guarded_clone(x)
    assert torch.equal(g, x) and g.is_contiguous()
    assert guarded.guard_zones([tensor_arg(x, Direction.IN)]) == []  # x itself has none
    address = g.untyped_storage().data_ptr()
    head = (ctypes.c_ubyte * guarded.HEAD_BYTES).from_address(address - guarded.HEAD_BYTES)
    tail = (ctypes.c_ubyte * guarded.MIN_TAIL_BYTES).from_address(address + 5 * 7 * 4)
    assert set(head) == {GUARD_BYTE} and set(tail) == {GUARD_BYTE}
    (zone,) = guarded.guard_zones([tensor_arg(g, Direction.IN)])
    assert (zone.program_arg, zone.bytes, zone.before) == (0, 140, 64) and zone.after >= 64
    del g, head, tail
    assert guarded.guard_zones([scalar_arg(1, dtypes.i32)]) == []
    assert address not in guarded._zones  # forgotten with its mapping: no later tensor inherits them


@pytest.mark.slow
def test_zones_already_damaged_before_the_run_are_refused(libs):
    g = guarded.guarded_clone(torch.zeros(4))
    ctypes.memset(g.untyped_storage().data_ptr() + 16, 0, 1)
    with pytest.raises(ts.RuntimeFailure, match=r"^guard_zones: program argument 0: its zones do not hold "):
        run(libs, "noop_on_arg", "stray", [tensor_arg(g, Direction.INOUT)])


@ts.kernel
def copy8(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 8]))


@ts.jit
def with_a_huge_intermediate(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    huge = ts.create_tensor([1 << 20, 1 << 20], ts.f32)  # 4 TiB, never used  # noqa: F841
    copy8(x, y)


@pytest.mark.slow
def test_an_intermediate_larger_than_memory_is_refused_not_killed_when_touched():
    with pytest.raises(ts.RuntimeFailure) as info:
        with_a_huge_intermediate(torch.randn(8, 8), torch.zeros(8, 8))
    assert "create_tensor: out of memory allocating 4398046511104 bytes" in str(info.value)


@ts.jit
def output_then_crash(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32], row: ts.Scalar[ts.i32]):
    scale(x, y)  # task 0 writes all of y
    u = ts.create_tensor([R, C], ts.f32)
    put(x, u, row, 0)  # task 1: far past u's end with row=128: it dies in u's guard pages


@pytest.mark.slow
def test_an_isolated_crash_keeps_the_outputs_earlier_tasks_wrote_and_zones_guard_program_arguments(tmp_path):
    prog = output_then_crash.compile(check_bounds=False, build_dir=str(tmp_path))
    x, y = torch.randn(R, C), torch.zeros(R, C)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog(x, y, 128, isolate=True, serial=True)
    assert (info.value.failure.kind, info.value.failure.task_id) == ("crash", 1)
    torch.testing.assert_close(y, x * 2)  # the kernels wrote the shared file itself, not a copy
    # the program's tensors in the shared file have guard zones too
    into = into_output.compile(check_bounds=False, build_dir=str(tmp_path))
    with pytest.raises(ts.RuntimeFailure) as info:
        into(torch.full((R, C), 1.5), torch.zeros(R, C), 60, isolate=True)
    f = info.value.failure
    assert (f.kind, f.task_id, f.kernel) == ("guard", 0, "put")
    assert "wrote past the end of program argument 1 (f32[64, 128], 32768 bytes)" in f.message


def test_a_guarded_copy_collected_while_the_zones_are_read_does_not_deadlock():
    # NOTE: a garbage collection can run a guarded copy's finalizer on the thread that holds the zones'
    # lock (guard_zones reading them); the finalizer takes the lock too. Run in a child, so that a
    # deadlock fails the test instead of hanging it.
    code = textwrap.dedent("""
        import gc, torch
        from tilescope.runtime import guarded
        t = guarded.guarded_clone(torch.ones(64))
        cycle = [t]
        cycle.append(cycle)  # freed only by a collection, as in a run
        del t, cycle
        with guarded._lock:  # what guard_zones holds
            gc.collect()
        print("no deadlock")
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(ts.__file__).parents[1])}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert child.returncode == 0 and child.stdout == "no deadlock\n", child.stderr
