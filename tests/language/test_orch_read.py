"""Orchestration reads: ``n = counts[e]`` on an integer tensor, a run-time scalar for slices, loop
bounds and kernel scalars; the read waits for the tasks that write the element (sim) and is
recorded, drawn in the trace and the dependency graph; errors for an Out never written, an index
outside the tensor and a float tensor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from helpers import dsl_error, headless_page, line_of, needs_chromium
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilescope as ts
from tilescope.analysis.shuffle import shuffle_runs
from tilescope.errors import RuntimeFailure, VerifyError
from tilescope.harness import TensorSpec, run_jit
from tilescope.ir.nodes import Assign, BinOp, Const, For, TensorRead
from tilescope.ir.printer import program_str
from tilescope.ir.types import INDEX
from tilescope.ir.verifier import verify_program
from tilescope.language.frontend import load_source
from tilescope.launch.program import CompiledProgram
from tilescope.tools import deps as deps_tool
from tilescope.tools.trace import format_summary, summarize_trace

E, H = 4, 256  # experts, tokens per expert at most
I32, F = ts.i32, ts.f32


@ts.kernel
def count(lens: ts.Tensor[[E], I32], counts: ts.Out[[E], I32]):
    ts.store(counts, [0], ts.load(lens, [0], [E]) * 64)


@ts.kernel
def scale(x: ts.Tensor[[1, 64], F], y: ts.Out[[1, 64], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [1, 64]) * 2.0)


@ts.kernel
def put(y: ts.Out[[1, 64], F], v: ts.Scalar[I32]):
    ts.store(y, [0, 0], ts.full([1, 64], 1.0, F) * v)


@ts.jit
def routed(lens: ts.Tensor[[E], I32], x: ts.Tensor[[E, H], F], y: ts.InOut[[E, H], F], counts: ts.Out[[E], I32]):
    count(lens, counts)
    for e in ts.range(0, E):
        n = counts[e]  # the read
        for t in ts.range(0, n, 64):
            scale(x[e : e + 1, t : t + 64], y[e : e + 1, t : t + 64])


@ts.jit
def paged(table: ts.Tensor[[2, 3], I32], cache: ts.Tensor[[8, 64], F], out: ts.Out[[6, 64], F], ids: ts.Out[[6, 64], F]):
    for b in ts.range(0, 2):
        for i in ts.range(0, 3):
            blk = table[b, i]
            scale(cache[blk : blk + 1, :], out[b * 3 + i : b * 3 + i + 1, :])
            put(ids[b * 3 + i : b * 3 + i + 1, :], table[b, i] + 1)  # a read inside an expression


@ts.kernel
def bump(c: ts.InOut[[2], I32]):
    ts.store(c, [0], ts.load(c, [0], [2]) + 1)


@ts.jit
def rewritten(lens: ts.Tensor[[E], I32], y: ts.Out[[2, 64], F]):
    tmp = ts.create_tensor([E], I32)
    count(lens, tmp)  # task 0 writes tmp[0:4]
    bump(tmp[2:4])  # task 1 rewrites tmp[2:4]
    first = tmp[0]
    last = tmp[3]
    put(y[0:1, :], first)
    put(y[1:2, :], last)


@ts.jit
def early(lens: ts.Tensor[[E], I32], x: ts.Tensor[[E, H], F], y: ts.InOut[[E, H], F], counts: ts.Out[[E], I32]):
    n = counts[3]  # read before any task writes counts
    count(lens, counts)
    for t in ts.range(0, n, 64):
        scale(x[0:1, t : t + 64], y[0:1, t : t + 64])


@ts.jit
def indexed(
    lens: ts.Tensor[[E], I32],
    x: ts.Tensor[[E, H], F],
    y: ts.InOut[[E, H], F],
    counts: ts.Out[[E], I32],
    k: ts.Scalar[I32],
):
    count(lens, counts)
    n = counts[k]  # k comes from the caller
    for t in ts.range(0, n, 64):
        scale(x[0:1, t : t + 64], y[0:1, t : t + 64])


@ts.kernel
def spin_count(lens: ts.Tensor[[E], I32], x: ts.Tensor[[1, 64], F], counts: ts.Out[[E], I32], y: ts.Out[[1, 64], F]):
    acc = ts.load(x, [0, 0], [1, 64])
    for _ in ts.range(0, 1000000000000):
        acc = acc * 1.0000001
    ts.store(y, [0, 0], acc)
    ts.store(counts, [0], ts.load(lens, [0], [E]))


@ts.jit
def hangs(lens: ts.Tensor[[E], I32], x: ts.Tensor[[E, H], F], y: ts.InOut[[E, H], F], counts: ts.Out[[E], I32]):
    spin_count(lens, x[0:1, 0:64], counts, y[0:1, 0:64])
    n = counts[0]
    for t in ts.range(0, n, 64):
        scale(x[1:2, t : t + 64], y[1:2, t : t + 64])


LENS = torch.tensor([1, 4, 0, 3], dtype=torch.int32)


def _routed_args():
    return LENS.clone(), torch.randn(E, H), torch.zeros(E, H), torch.zeros(E, dtype=torch.int32)


def _routed_expected(x):
    y = torch.zeros(E, H)
    for e, n in enumerate((LENS * 64).tolist()):
        y[e, :n] = x[e, :n] * 2.0
    return y


def _failure_text(fn, args, platform, **cfg) -> str:
    with pytest.raises(RuntimeFailure) as info:
        fn.compile().run(*args, platform=platform, **cfg)
    return str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_a_read_bounds_a_loop_and_slices_its_regions(platform):
    lens, x, y, counts = _routed_args()
    info = routed.compile().run(lens, x, y, counts, platform=platform)
    torch.testing.assert_close(counts, LENS * 64)
    torch.testing.assert_close(y, _routed_expected(x))
    assert info.num_tasks == 1 + int(LENS.sum())


@pytest.mark.slow
def test_each_read_is_recorded_with_the_producer_it_waited_for():
    prog = routed.compile()
    lens, x, y, counts = _routed_args()
    report = prog.run(lens, x, y, counts, enable_dep_gen=True, enable_trace=True).report
    line = line_of(routed, "n = counts[e]")
    assert [r.label for r in report.reads] == [f"counts[{e}] = {n}" for e, n in enumerate((LENS * 64).tolist())]
    assert all(r.where == f"test_orch_read.py:{line}" and r.waited_for == (0,) for r in report.reads)
    assert [r.next_task for r in report.reads] == [1, 2, 6, 6]  # 1 + the tasks of the experts before
    assert all(r.wait_end_ns >= r.wait_start_ns > 0 for r in report.reads)
    producer = next(t for t in report.tasks if t.task_id == 0)
    assert report.reads[0].wait_end_ns >= producer.end_ns  # it read after its producer finished

    dfx = prog.work_dir / "dfx_outputs"
    deps = json.loads((dfx / "deps.json").read_text())
    assert deps["counts"]["reads"] == 4 and all(e["succ"] > e["pred"] for e in deps["edges"])
    read = deps["reads"][1]
    counts_id = next(t["id"] for t in deps["tensors"] if t["name"] == "counts")
    assert read["label"] == "read counts[1] = 256" and read["tensor"] == counts_id
    assert read["element"] == [[1, 2]] and read["waited_for"] == [0] and read["next_task"] == 2
    assert read["producers"] == [{"task": 0, "arg": 1, "region": [[0, 4]]}]
    html = (dfx / "deps_graph.html").read_text()
    assert '"label":"read counts[3] = 192"' in html
    view = deps_tool.task_view(deps_tool.load_deps(dfx / "deps.json"), 0)
    assert f"the orchestration waited for it: read counts[1] = 256 at test_orch_read.py:{line} waited" in view

    events = json.loads((dfx / "trace.json").read_text())["traceEvents"]
    spans = [e for e in events if e.get("cat") == "read" and e["ph"] == "X"]
    assert [s["name"] for s in spans][:2] == [
        "read counts[0] = 64 (waited for task 0)",
        "read counts[1] = 256 (waited for task 0)",
    ]
    assert all(s["tid"] == 0 and s["args"]["where"] == f"test_orch_read.py:{line}" for s in spans)
    starts = [e for e in events if e.get("cat") == "read" and e["ph"] == "s"]
    ends = [e for e in events if e.get("cat") == "read" and e["ph"] == "f"]
    assert [(s["args"]["pred"], s["args"]["read"]) for s in starts] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert [e["id"] for e in ends] == [s["id"] for s in starts] and all(e["tid"] == 0 for e in ends)
    summary = summarize_trace(dfx)
    assert summary.num_reads == 4 and summary.num_tasks == 9  # read flows are not task dependencies
    assert "orchestration reads: 4" in format_summary(summary)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_reads_of_an_in_param_need_no_producer(platform):
    table = torch.tensor([[5, 0, 7], [2, 2, 1]], dtype=torch.int32)
    cache = torch.randn(8, 64)
    out, ids = torch.zeros(6, 64), torch.zeros(6, 64)
    info = paged.compile().run(table, cache, out, ids, platform=platform)
    torch.testing.assert_close(out, cache[table.flatten().long()] * 2.0)
    torch.testing.assert_close(ids, (table.flatten() + 1).float()[:, None].expand(6, 64))
    if platform == "sim":
        assert [r.value for r in info.report.reads] == [v for v in table.flatten().tolist() for _ in (0, 1)]
        assert all(r.waited_for == () for r in info.report.reads)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_a_read_of_an_intermediate_waits_for_the_last_writer_of_its_element(platform):
    y = torch.zeros(2, 64)
    info = rewritten.compile().run(LENS.clone(), y, platform=platform)
    torch.testing.assert_close(y[:, 0], torch.tensor([1 * 64, 3 * 64 + 1], dtype=torch.float32))
    if platform == "sim":
        assert [(r.label, r.waited_for) for r in info.report.reads] == [("tmp[0] = 64", (0,)), ("tmp[3] = 193", (1,))]


@pytest.mark.slow
def test_the_read_is_ir_dsl_and_cpp_as_written():
    prog = paged.compile()
    text = program_str(paged.program())
    assert "blk = table[b, i]" in text and "table_read = table[b, i]" in text
    cpp = (prog.work_dir / "orchestration" / "paged.cpp").read_text()
    line = line_of(paged, "blk = table[b, i]")
    assert (
        f'int32_t blk = orch.read<int32_t>(table, {{b, i}}, "table", "test_orch_read.py:{line}");'
        f"  // @ " in cpp
    )


@pytest.mark.parametrize("fn", [routed, paged, rewritten])
def test_printed_reads_parse_back_to_the_same_program(fn):
    program = fn.program()
    text = program_str(program)
    assert load_source(text, f"<roundtrip {fn.name}>") == program
    assert program_str(load_source(text, f"<roundtrip2 {fn.name}>")) == text


def test_the_verifier_keeps_reads_whole_statements():
    program = routed.program()
    loop = next(s for s in program.body if isinstance(s, For))
    read = next(s for s in loop.body if isinstance(s, Assign) and isinstance(s.value, TensorRead))
    nested = Assign(read.target, BinOp("add", read.value, read.value, read.value.type), read.loc)
    broken = program.__class__(
        program.name, program.params, (*program.body[:-1], For(loop.var, loop.start, loop.stop, loop.step,
        (nested, *loop.body[1:]), loop.loc)), program.kernels, program.loc,
    )  # fmt: skip
    with pytest.raises(VerifyError, match="the read of counts is part of a larger expression"):
        verify_program(broken)
    far = TensorRead(read.value.tensor, (Const(4, INDEX),), read.value.type, read.loc)
    with pytest.raises(VerifyError, match=r"index 0 of counts\[4\] reaches \[4, 4\], outside the tensor"):
        verify_program(program.__class__(program.name, program.params, (*program.body[:-1],
            For(loop.var, loop.start, loop.stop, loop.step, (Assign(read.target, far, read.loc), *loop.body[1:]),
                loop.loc)), program.kernels, program.loc))  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_reading_an_out_no_task_wrote_is_an_error(platform):
    line = line_of(early, "n = counts[3]")
    text = _failure_text(early, _routed_args(), platform)
    assert (
        f"orchestration reads counts[3] at test_orch_read.py:{line}, but counts is an Out of the program "
        "and no task submitted before the read writes it (0 task(s) submitted before the read)"
    ) in text
    assert "declare it ts.InOut" in text


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_an_index_outside_the_tensor_is_an_error(platform):
    line = line_of(indexed, "n = counts[k]")
    text = _failure_text(indexed, (*_routed_args(), 7), platform)
    assert (
        f"orchestration reads counts[7] at test_orch_read.py:{line}, outside the tensor's shape [4] "
        "(1 task(s) submitted before the read)"
    ) in text


def test_a_float_tensor_is_not_read():
    @ts.jit
    def reads_floats(x: ts.Tensor[[E, H], F], y: ts.Out[[1, 64], F]):
        v = x[0, 3]
        put(y, v)

    err = dsl_error(reads_floats)
    assert "reads an element of x (tensor[4, 256] f32): only integer tensors (i32, i8, u8, i64) can be read" in str(
        err
    )
    assert err.hint is not None and "pass x to a kernel" in err.hint


def test_a_constant_index_outside_the_tensor_is_a_compile_error():
    @ts.jit
    def past_the_end(lens: ts.Tensor[[E], I32], x: ts.Tensor[[E, H], F], y: ts.Out[[1, 64], F]):
        n = lens[4]
        scale(x[0:1, n : n + 64], y)

    assert "index 4 of lens dim 0 is outside the tensor's shape [4]" in str(dsl_error(past_the_end))


@pytest.mark.slow
def test_serial_and_shuffled_schedules_agree():
    prog = routed.compile()
    lens, x, y, counts = _routed_args()
    prog.run(lens, x, y, counts, serial=True)
    torch.testing.assert_close(y, _routed_expected(x))
    rep = shuffle_runs(prog, dict(zip(("lens", "x", "y", "counts"), _routed_args())), 4, seed=2)
    assert rep.deterministic and rep.first is None


@pytest.mark.slow
def test_a_read_waiting_for_a_task_that_hangs_ends_with_the_timeout():
    prog = hangs.compile()
    with pytest.raises(RuntimeFailure) as info:
        prog.run(*_routed_args(), task_timeout_s=0.3)
    assert info.value.failure.kind == "timeout" and info.value.failure.task_id == 0


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import time
    import torch
    import tilescope as ts
    from tilescope.errors import RunInterrupted
    from tilescope.runtime import library

    @ts.kernel
    def spin(lens: ts.Tensor[[4], ts.i32], x: ts.Tensor[[8, 16], ts.f32], counts: ts.Out[[4], ts.i32],
             y: ts.Out[[8, 16], ts.f32]):
        t = ts.load(x, [0, 0], [8, 16])
        for i in ts.range(0, 1 << 40):
            t = t * 1.0000001
        ts.store(y, [0, 0], t)
        ts.store(counts, [0], ts.load(lens, [0], [4]))

    @ts.jit
    def waits(lens: ts.Tensor[[4], ts.i32], x: ts.Tensor[[8, 16], ts.f32], counts: ts.Out[[4], ts.i32],
              y: ts.Out[[8, 16], ts.f32]):
        spin(lens, x, counts, y)
        n = counts[0]

    library.load_core()
    prog = waits.compile()
    print("running", flush=True)
    try:
        prog.run(torch.ones(4, dtype=torch.int32), torch.randn(8, 16), torch.zeros(4, dtype=torch.int32),
                 torch.zeros(8, 16), task_timeout_s=0, num_workers=2)
        print("returned", flush=True)
    except RunInterrupted as e:
        print(f"interrupted: {e.failure.kind} {e.failure.message}", flush=True)
    """
)


@pytest.mark.slow
def test_ctrl_c_while_a_read_waits_stops_the_producer(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(CTRL_C_SCRIPT)
    env = dict(os.environ, TILESCOPE_BUILD_DIR=str(tmp_path / "builds"))
    proc = subprocess.Popen(
        [sys.executable, "-u", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "running\n"
    time.sleep(1.0)  # the read waits for the spinning producer
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    line = out.splitlines()[0]
    assert line.startswith("interrupted: interrupted Ctrl-C (SIGINT): stopped task 0 (kernel spin) on worker "), out
    assert line.endswith("; the tasks not yet run were skipped"), out  # told once: no "later error(s)"


@pytest.mark.slow
def test_a_read_whose_producer_can_never_run_is_a_deadlock():
    prog = routed.compile()
    src = prog.work_dir / "orchestration" / "routed.cpp"
    text = src.read_text()
    old = f'orch.task(FUNC_COUNT, "count", "test_orch_read.py:{line_of(routed, "count(")}");'
    assert old in text
    src.write_text(text.replace(old, old + " task.depends_on(9);", 1))
    prog = CompiledProgram.from_dir(prog.work_dir)
    with pytest.raises(RuntimeFailure) as info:
        prog.run(*_routed_args(), task_timeout_s=30)
    f = info.value.failure
    assert f.kind == "deadlock"
    line = line_of(routed, "n = counts[e]")
    assert f.message == (
        f"deadlock: the orchestration reads counts[0] at test_orch_read.py:{line} and waits for task 0 "
        "(kernel count), which can never run; 1 of 1 task(s) can never run "
        "(task 0 waits for task 9, which was never submitted)"
    )
    assert "task 0 (kernel count) waits for task 9, which was never submitted (explicit dep)" in f.details


def _routed_golden(t):
    t["counts"][:] = t["lens"] * 64
    t["y"][:] = _routed_expected(t["x"])


@pytest.mark.slow
def test_saved_data_replays_and_dumps_with_reads():
    specs = [
        TensorSpec("lens", [E], torch.int32, init_value=LENS),
        TensorSpec("x", [E, H], torch.float32, init_value=torch.randn),
        TensorSpec("y", [E, H], torch.float32, is_output=True, init_value=0.0),
        TensorSpec("counts", [E], torch.int32, is_output=True),
    ]
    first = run_jit(routed, specs, golden_fn=_routed_golden, save_data=True, runtime_cfg={"enable_dump_tensor": 2})
    assert first.passed, first.error
    dump = json.loads((first.work_dir / "dfx_outputs" / "tensor_dump" / "tensor_dump.json").read_text())
    assert {r["task_id"] for r in dump["records"]} == set(range(1 + int(LENS.sum())))
    for platform in ("sim", "interp"):
        again = ts.replay_compiled(first.work_dir, platform=platform)
        assert again.passed and torch.equal(again.outputs["y"], first.outputs["y"]), platform


@pytest.mark.slow
def test_an_isolated_run_reads_too():
    lens, x, y, counts = _routed_args()
    routed.compile().run(lens, x, y, counts, isolate=True)
    torch.testing.assert_close(y, _routed_expected(x))


@pytest.mark.slow
@needs_chromium
def test_the_graph_page_draws_read_nodes():
    prog = routed.compile()
    prog.run(*_routed_args(), enable_dep_gen=True)
    with headless_page(prog.work_dir / "dfx_outputs" / "deps_graph.html") as (page, errors, _):
        page.wait_for_selector("g.read")
        assert page.locator("g.read").count() == 4
        assert page.locator("path.read-edge.kind-RAW").count() == 4
        page.click("g.read[data-read-id='1']")
        assert page.inner_text("#sel-title") == "orchestration read counts[1] = 256"
        assert "0 count" in page.inner_text("#sel-in")
    assert errors == []


# -- a property: on any plan of writes and reads, sim reads what interp reads -----------------------

K, SPAN = 12, 40  # plan steps; the buffer's elements


@ts.kernel
def write8(src: ts.Tensor[[8], I32], dst: ts.Out[[8], I32]):
    ts.store(dst, [0], ts.load(src, [0], [8]))


@ts.kernel
def record8(dst: ts.Out[[8], I32], v: ts.Scalar[I32]):
    ts.store(dst, [0], ts.full([8], 0, I32) + v)


@ts.jit
def planned(plan: ts.Tensor[[K, 2], I32], vals: ts.Tensor[[K, 8], I32], buf: ts.InOut[[SPAN], I32],
            seen: ts.Out[[K, 8], I32]):  # fmt: skip
    for k in ts.range(0, K):
        at = plan[k, 1]
        if plan[k, 0] == 0:
            write8(vals[k, :], buf[at : at + 8])
        else:
            v = buf[at]
            record8(seen[k, :], v)


plans = st.lists(st.tuples(st.integers(0, 1), st.integers(0, SPAN - 8)), min_size=K, max_size=K)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=plans)
def test_any_plan_reads_the_last_write_of_each_element(steps):
    plan = torch.tensor(steps, dtype=torch.int32)
    vals = torch.arange(K * 8, dtype=torch.int32).reshape(K, 8) + 100
    prog = planned.compile()
    outs = {}
    for platform in ("sim", "interp"):
        buf, seen = torch.arange(SPAN, dtype=torch.int32), torch.full((K, 8), -1, dtype=torch.int32)
        info = prog.run(plan, vals, buf, seen, platform=platform)
        outs[platform] = (buf, seen, info)
    assert torch.equal(outs["sim"][0], outs["interp"][0]) and torch.equal(outs["sim"][1], outs["interp"][1])
    # the producer each read waited for: the task of the last earlier write covering the element
    last: dict[int, int] = {}
    expected = []
    for task, (kind, at) in enumerate(steps):
        if kind == 0:
            last.update(dict.fromkeys(range(at, at + 8), task))
        else:
            expected.append((at, (last[at],) if at in last else ()))
    reads = outs["sim"][2].report.reads
    assert [(r.index[0], r.waited_for) for r in reads if r.name == "buf"] == expected
    assert all(r.waited_for == () for r in reads if r.name == "plan")  # an In param: no producer
