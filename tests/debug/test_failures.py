"""Failures that explain themselves: deadlocks, stalls, NaN/Inf, bad input, and the tools to pin
them down (serial runs, the intermediate value printer). Each case runs a real program that
fails, asserts on the report's task, kernel, tensor and line, and checks the caller goes on."""

import json
import re

import pytest
import torch

import tilescope as ts
from tilescope.errors import ArgumentError, ConfigError, RuntimeFailure
from tilescope.launch.program import CompiledProgram

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

R, C = 8, 16
T = ts.Tensor[[R, C], ts.f32]
OUT = ts.Out[[R, C], ts.f32]


@ts.kernel
def divide(x: T, z: T, y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [R, C]) / ts.load(z, [0, 0], [R, C]))


@ts.kernel
def twice(x: T, y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [R, C]) * 2.0)


@ts.jit
def two_step(x: T, z: T, y: OUT):
    t = ts.create_tensor([R, C], ts.f32)
    divide(x, z, t)
    twice(t, y)


@ts.kernel
def spin(x: T, y: OUT):
    acc = ts.load(x, [0, 0], [R, C])
    for _ in ts.range(0, 1000000000000):
        acc = acc * 1.0000001  # the line a stopped spin is found on
    ts.store(y, [0, 0], acc)


@ts.jit
def spinner(x: T, y: OUT):
    spin(x, y)


SPIN_LINE = next(i for i, line in enumerate(open(__file__), 1) if "the line a stopped spin" in line)


def inputs():
    x = torch.randn(R, C)
    z = torch.rand(R, C) + 0.5
    return x, z, torch.zeros(R, C)


def expected(x, z):
    return x / z * 2.0


def edited(prog: CompiledProgram, old: str, new: str) -> CompiledProgram:
    """The build with its orchestration C++ edited by hand (``old`` replaced once by ``new``)."""
    src = prog.work_dir / "orchestration" / f"{prog.name}.cpp"
    text = src.read_text()
    assert old in text
    src.write_text(text.replace(old, new, 1))
    return CompiledProgram.from_dir(prog.work_dir)


def task_line(text: str, func: str, name: str) -> str:
    """The generated line that starts a task of ``func`` named ``name``: ``ts::Task task =
    orch.task(FUNC_DIVIDE, "divide", "test_failures.py:41");``."""
    return re.search(rf'orch\.task\({func}, "{name}", "[^"]*"\);', text).group(0)


def with_dep(prog: CompiledProgram, func: str, name: str, dep: int) -> CompiledProgram:
    """The build with an explicit dependency on task ``dep`` added by hand to the task ``name``."""
    src = prog.work_dir / "orchestration" / f"{prog.name}.cpp"
    old = task_line(src.read_text(), func, name)
    return edited(prog, old, f"{old} task.depends_on({dep});")


def failure_of(prog, *args, **cfg):
    with pytest.raises(RuntimeFailure) as e:
        prog.run(*args, **cfg)
    return e.value.failure


def goes_on():
    """The caller continues: the same process runs a healthy program right after."""
    x, z, y = inputs()
    two_step(x, z, y)
    torch.testing.assert_close(y, expected(x, z))


# -- deadlocks ----------------------------------------------------------------------------------


def test_missing_producer_is_reported_at_once_with_the_blocked_tasks():
    prog = with_dep(two_step.compile(), "FUNC_DIVIDE", "divide", 7)
    f = failure_of(prog, *inputs(), task_timeout_s=30)
    assert f.kind == "deadlock"  # found when nothing can run, not by the watchdog's timeout
    assert "2 of 2 task(s) can never run" in f.message
    assert "task 0 waits for task 7, which was never submitted" in f.message
    assert "task 0 (kernel divide) waits for task 7, which was never submitted (explicit dep)" in f.details
    assert "task 1 (kernel twice) waits for task 0 (kernel divide): RAW on x = t[0:8, 0:16]" in f.details
    assert any("task(s) 7 were never submitted" in s for s in f.next_steps)
    goes_on()


def test_explicit_deps_cycle_is_named():
    prog = with_dep(two_step.compile(), "FUNC_DIVIDE", "divide", 1)
    f = failure_of(prog, *inputs())
    assert f.kind == "deadlock"
    assert f.message.startswith("deadlock: a dependency cycle through 2 task(s)")
    assert (
        "dependency cycle: task 0 (kernel divide) -> task 1 (kernel twice) -> task 0 (kernel divide)"
        in f.details
    )
    assert "task 0 (kernel divide) waits for task 1 (kernel twice) (explicit dep)" in f.details
    goes_on()


def test_a_task_waiting_for_itself_is_refused_at_submit():
    prog = with_dep(two_step.compile(), "FUNC_TWICE", "twice", 1)
    f = failure_of(prog, *inputs())
    assert f.kind == "error"
    assert (
        "task 1 'twice' (func_id 1, kernel 'twice'): explicit dependency 0 names the task itself" in f.message
    )
    goes_on()


def test_forward_explicit_dep_is_honoured(capfd):
    # task 0 waits for task 2, which is submitted after it: legal, and ordered
    prog = two_step.compile()
    src = prog.work_dir / "orchestration" / "two_step.cpp"
    text = src.read_text().replace(
        "    return orch.status();",
        "    ts::TensorHandle u = orch.create_tensor(TS_F32, {8, 16});\n"
        '    {\n        ts::Task task = orch.task(FUNC_TWICE, "late");\n        task.add_input(x, {8, 16});\n'
        "        task.add_output(u, {8, 16});\n        orch.submit(task);\n    }\n    return orch.status();",
    )
    src.write_text(text)
    prog = with_dep(prog, "FUNC_DIVIDE", "divide", 2)
    x, z, y = inputs()
    prog.run(x, z, y, serial=True, print_intermediates=3)
    torch.testing.assert_close(y, expected(x, z))
    starts = [s.split()[2] for s in capfd.readouterr().err.splitlines() if " start:" in s]
    assert starts == ["2", "0", "1"]  # serial: lowest ready id first; 0 became ready only after 2


# -- stalls ---------------------------------------------------------------------------------------


def test_a_spinning_kernel_is_stopped_with_its_line_and_inputs():
    prog = spinner.compile()
    x, y = torch.randn(R, C), torch.zeros(R, C)
    f = failure_of(prog, x, y, task_timeout_s=0.3)
    assert f.kind == "timeout" and f.task_id == 0 and f.kernel == "spin" and f.worker >= 0
    assert re.match(
        r"task 0 \(kernel spin\) has used 0\.\d\d s of CPU \(\d+\.\d\d s wall\) on worker \d+, "
        r"past task_timeout_s \(0\.3 s\); it was stopped$",
        f.message,
    )
    where = f.where()
    # NOTE: the watchdog stops the loop wherever it is: in its body, or in its `for` line just above
    spin_lines = (f"test_failures.py:{SPIN_LINE}", f"test_failures.py:{SPIN_LINE - 1}")
    assert where is not None and where.dsl.rsplit("/", 1)[-1] in spin_lines
    assert where.cpp.startswith(str(prog.work_dir / "kernels" / "vec" / "spin.cpp"))
    saved = json.loads((prog.work_dir / "dfx_outputs" / "failure" / "task_0" / "task.json").read_text())
    assert saved["kernel"] == "spin" and [a["name"] for a in saved["args"]] == ["x", "y"]
    torch.testing.assert_close(torch.load(prog.work_dir / "dfx_outputs" / "failure" / "task_0" / "x.pt"), x)
    assert f"tilescope replay {prog.work_dir} --task 0" in "\n".join(f.next_steps)
    goes_on()
    # the stopped worker is reusable: a second spin is stopped the same way
    f2 = failure_of(prog, x, y, task_timeout_s=0.2)
    assert f2.kind == "timeout" and f2.where().dsl.rsplit("/", 1)[-1] in spin_lines


def test_an_orchestration_that_loops_is_stopped():
    prog = edited(
        two_step.compile(),
        "    return orch.status();",
        "    for (volatile long spin = 0;; spin = spin + 1) {\n    }\n    return orch.status();",
    )
    line = 1 + next(
        i
        for i, s in enumerate((prog.work_dir / "orchestration" / "two_step.cpp").read_text().splitlines())
        if "volatile" in s
    )
    f = failure_of(prog, *inputs(), task_timeout_s=0.3)
    assert f.kind == "timeout" and f.task_id == -1
    assert re.match(r"the orchestration has used 0\.\d\d s of CPU \(\d+\.\d\d s wall\) without a runtime call", f.message)
    assert "(2 task(s) submitted so far)" in f.message
    assert any(fr.cpp == f"{prog.work_dir / 'orchestration' / 'two_step.cpp'}:{line}" for fr in f.frames)
    goes_on()


# -- NaN / Inf ----------------------------------------------------------------------------------


def test_nan_check_names_the_task_that_made_inf_and_points_downstream_upstream():
    prog = two_step.compile()
    x, z, y = inputs()
    z[1, 7] = 0.0
    info = prog.run(x, z, y, nan_check=True)
    f = info.nan
    assert f.kind == "nan" and f.task_id == 0 and f.kernel == "divide"
    assert f.message == (
        "task 0 (kernel divide) made NaN/Inf from finite inputs: output y (arg 2) has 0 NaN and 1 Inf; "
        "the first at [1, 7]"
    )
    assert "task 1 (kernel twice): y is non-finite because input x already was (from task 0)" in f.details
    saved = prog.work_dir / "dfx_outputs" / "failure" / "task_0"
    torch.testing.assert_close(torch.load(saved / "z.pt"), z)
    assert json.loads((saved / "task.json").read_text())["why"] == "nan"
    # without the check: no report, same outputs
    y2 = torch.zeros(R, C)
    assert prog.run(x, z, y2).nan is None
    torch.testing.assert_close(y2, y, equal_nan=True)


@ts.jit
def blocks(
    x: ts.Tensor[[80 * R, C], ts.f32], z: ts.Tensor[[80 * R, C], ts.f32], y: ts.Out[[80 * R, C], ts.f32]
):
    t = ts.create_tensor([80 * R, C], ts.f32)
    for r in ts.range(0, 80 * R, R):
        divide(x[r : r + R, :], z[r : r + R, :], t[r : r + R, :])  # tasks 0..79
    for r in ts.range(0, 80 * R, R):
        twice(t[r : r + R, :], y[r : r + R, :])  # tasks 80..159


def test_nan_check_names_saves_and_replays_every_task_that_made_nan(capsys):
    from tilescope import cli

    prog = blocks.compile()
    failure_dir = prog.work_dir / "dfx_outputs" / "failure"
    x, z, y = torch.randn(80 * R, C), torch.rand(80 * R, C) + 0.5, torch.zeros(80 * R, C)
    z[R + 2, 3] = 0.0  # task 1 makes an Inf
    z[2 * R + 5, 0] = 0.0  # task 2 makes an Inf
    for run in range(3):  # whichever finishes first, the same tasks are named and saved
        f = prog.run(x, z, y, nan_check=True, num_workers=4).nan
        suffix = "" if run == 0 else f"_{run}"  # an earlier run's directories are kept
        assert f.task_id == 1 and f.message == (
            "task 1 (kernel divide) made NaN/Inf from finite inputs: output y (arg 2) has 0 NaN and 1 Inf; "
            "the first at [2, 3]"
        )
        assert f.details == [
            "task 2 (kernel divide) also made NaN/Inf: output y (arg 2) has 0 NaN and 1 Inf; the first at [5, 0]",
            "task 81 (kernel twice): y is non-finite because input x already was (from task 1)",
            "task 82 (kernel twice): y is non-finite because input x already was (from task 2)",
            "2 tasks made NaN/Inf from finite inputs: 1, 2",
        ]
        assert f.saved_inputs == str(failure_dir / f"task_1{suffix}")
        assert f.saved_tasks == [
            f"1: {failure_dir / f'task_1{suffix}'}",
            f"2: {failure_dir / f'task_2{suffix}'}",
        ]
        commands = [
            f"tilescope replay {prog.work_dir} --task {task}"
            + (f" --from {failure_dir / f'task_{task}{suffix}'}" if suffix else "")
            for task in (1, 2)
        ]
        assert f.next_steps == [f"replay the task alone: {c}" for c in commands]
        assert "  the inputs of these tasks are saved:\n    task 1: " in f.render()
    assert sorted(d.name for d in failure_dir.iterdir()) == [
        "task_1", "task_1_1", "task_1_2", "task_2", "task_2_1", "task_2_2"
    ]  # fmt: skip
    for task, row in ((1, R), (2, 2 * R)):
        saved = json.loads((failure_dir / f"task_{task}" / "task.json").read_text())
        assert saved["task_id"] == task and saved["kernel"] == "divide" and saved["why"] == "nan"
        torch.testing.assert_close(torch.load(failure_dir / f"task_{task}" / "z.pt"), z[row : row + R])
    capsys.readouterr()
    for command in [
        f"tilescope replay {prog.work_dir} --task 1",
        f"tilescope replay {prog.work_dir} --task 2",
        *commands,
    ]:
        assert cli.main(command.split()[1:]) == 0, command
        out = capsys.readouterr().out
        task = command.split("--task ")[1].split()[0]
        assert f"[REPLAY] task {task} 'divide' (kernel divide) alone on sim" in out
        assert "[REPLAY] ran to the end" in out and "  out y [8, 16] float32:" in out and "0 NaN, 1 Inf" in out
        header = out.split("[REPLAY] ran to the end")[0]  # the inputs are shown before the run
        rows = f"{int(task) * 8}:{int(task) * 8 + 8}"  # task k divides rows 8k..8k+8 of x and z
        assert f"  in  x = x[{rows}, 0:16] [8, 16] float32: min " in header  # param = the run's region
        assert f"  in  z = z[{rows}, 0:16] [8, 16] float32: min " in header


def test_nan_check_saves_the_lowest_64_tasks_that_made_nan():
    prog = blocks.compile()
    x, z, y = torch.randn(80 * R, C), torch.zeros(80 * R, C), torch.zeros(80 * R, C)  # every divide makes Inf
    f = prog.run(x, z, y, nan_check=True, num_workers=4).nan
    assert f.task_id == 0
    assert f"80 tasks made NaN/Inf from finite inputs: {', '.join(map(str, range(80)))}" in f.details
    assert (
        "the inputs of task(s) 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79 are not saved: "
        "nan_check saves those of the 64 lowest task ids"
    ) in f.details
    failure_dir = prog.work_dir / "dfx_outputs" / "failure"
    assert f.saved_tasks == [f"{i}: {failure_dir / f'task_{i}'}" for i in range(64)]
    assert sorted(int(d.name.removeprefix("task_")) for d in failure_dir.iterdir()) == list(range(64))


def test_nan_from_a_program_input_points_at_the_input():
    prog = two_step.compile()
    x, z, y = inputs()
    x[0, 3] = float("nan")
    f = prog.run(x, z, y, nan_check=True).nan
    assert f.message.startswith("2 task(s) produced NaN/Inf, each from a non-finite input")
    assert "task 1 (kernel twice): y is non-finite because input x already was (from task 0)" in f.details


# -- input guards ---------------------------------------------------------------------------------


def test_wrong_shape_input_lists_every_mismatch_and_the_caller_goes_on():
    prog = two_step.compile()
    x, z, y = inputs()
    with pytest.raises(ArgumentError) as e:
        prog.run(x[:4], z.double(), y)
    msg = str(e.value)
    assert "2 argument(s) of two_step do not match" in msg
    assert "argument 'x': shape [4, 16] (expected [8, 16])" in msg
    assert "argument 'z': dtype torch.float64 (expected torch.float32)" in msg
    goes_on()


# -- serial runs and the intermediate value printer ----------------------------------------------


def test_serial_runs_tasks_in_submission_order(capfd):
    import rms_norm

    prog = rms_norm.build().compile()
    x, g = torch.randn(512, 512), torch.rand(1, 512)
    outs = []
    for _ in range(2):
        y = torch.zeros(512, 512)
        prog.run(x, g, y, 1e-6, serial=True, print_intermediates=3)
        outs.append(y)
        lines = [s for s in capfd.readouterr().err.splitlines() if s.startswith("[tilescope] task")]
        starts = [int(s.split()[2]) for s in lines if " start:" in s]
        assert starts == list(range(8))
        assert all(" on worker 0" in s for s in lines)
        assert [s.split()[3] for s in lines] == ["start:", "done:"] * 8  # one at a time
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_print_intermediates_saves_and_prints_the_filtered_kernels(capsys):
    prog = two_step.compile()
    x, z, y = inputs()
    prog.run(x, z, y, print_intermediates=1, kernel_filter="twice")
    base = prog.work_dir / "dfx_outputs" / "intermediates"
    assert sorted(p.name for p in base.iterdir()) == ["task_1_twice"]
    torch.testing.assert_close(torch.load(base / "task_1_twice" / "in" / "x.pt"), x / z)
    torch.testing.assert_close(torch.load(base / "task_1_twice" / "out" / "y.pt"), y)
    prog.run(x, z, y, print_intermediates=2)
    out = capsys.readouterr().out
    assert "[intermediates] task 0 (kernel divide)" in out and "[intermediates] task 1 (kernel twice)" in out
    lo, hi = float(x.min()), float(x.max())
    assert f"  in  x = x[0:8, 0:16] [8, 16] float32 min {lo:.6g} max {hi:.6g}" in out  # param = region
    # a second level-1 run does not overwrite the first
    prog.run(x, z, y, print_intermediates=1)
    assert (prog.work_dir / "dfx_outputs" / "intermediates_1" / "task_0_divide").is_dir()


def test_every_instrument_in_one_run_covers_its_tasks(capfd):
    """The core's task observers all on at once (task lines, task times, tensor dump, NaN check):
    each records what it records alone, and kernel_filter narrows the lines and the dump."""
    prog = two_step.compile()
    x, z, y = inputs()
    z[1, 7] = 0.0
    info = prog.run(
        x,
        z,
        y,
        nan_check=True,
        enable_trace=True,
        enable_dep_gen=True,
        enable_dump_tensor=2,
        print_intermediates=3,
        kernel_filter="twice",
        num_workers=2,
    )
    assert (info.nan.task_id, info.nan.kernel) == (0, "divide")
    lines = [s for s in capfd.readouterr().err.splitlines() if s.startswith("[tilescope] task")]
    assert [s.split()[2:6] for s in lines] == [
        ["1", "start:", "kernel", "twice"],
        ["1", "done:", "kernel", "twice"],
    ]
    assert re.fullmatch(r".* on worker [01] \(\d+\.\d{3} ms\)", lines[1])
    dfx = prog.work_dir / "dfx_outputs"
    events = json.loads((dfx / "trace.json").read_text())["traceEvents"]
    assert sorted(e["args"]["task_id"] for e in events if e["ph"] == "X") == [0, 1]
    assert [e for e in events if e["ph"] in "sf"]  # the dependency is drawn
    dump = json.loads((dfx / "tensor_dump" / "tensor_dump.json").read_text())
    assert sorted((r["task_id"], r["arg_index"]) for r in dump["records"]) == [(1, 0), (1, 1)]


def test_bad_failure_options_are_clear_errors():
    prog = two_step.compile()
    with pytest.raises(ConfigError, match=r"'nope' is not a kernel of two_step; its kernels: divide, twice"):
        prog.run(*inputs(), print_intermediates=2, kernel_filter="twice,nope")
    with pytest.raises(ConfigError, match=r"'nan_check', 'serial': implemented on the sim platform only"):
        prog.run(*inputs(), platform="interp", nan_check=True, serial=True)
    with pytest.raises(ConfigError, match=r"task_timeout_s.*expected a number of seconds in 0\.\.604800 \(a week; 0 = no budget\)"):
        prog.run(*inputs(), task_timeout_s=-1)
    with pytest.raises(ConfigError, match=r"cannot be combined with enable_dump_tensor=1"):
        prog.run(*inputs(), print_intermediates=1, enable_dump_tensor=1)


def test_a_build_from_another_cpu_or_platform_says_so():
    prog = two_step.compile()
    cfg = prog.work_dir / "kernel_config.py"
    text = cfg.read_text()
    flags_start = text.index("'cpu_flags': [") if "'cpu_flags': [" in text else text.index('"cpu_flags": [')
    cfg.write_text(text[:flags_start] + text[flags_start:].replace("[", "['avx9000_imaginary', ", 1))
    with pytest.raises(
        ConfigError, match=r"on a CPU with avx9000_imaginary, which this CPU lacks.*platform='interp'"
    ):
        CompiledProgram(prog.work_dir).run(*inputs())
    x, z, y = inputs()
    CompiledProgram(prog.work_dir).run(x, z, y, platform="interp")  # the IR runs anywhere
    torch.testing.assert_close(y, expected(x, z))
    cfg.write_text(
        text.replace("'arch': '", "'arch': 'riscv64-", 1).replace('"arch": "', '"arch": "riscv64-', 1)
    )
    with pytest.raises(ConfigError, match=r"was compiled for riscv64-\w+ but this machine is"):
        CompiledProgram(prog.work_dir).run(*inputs())
    cfg.write_text(text.replace("'platforms': ['sim', 'interp']", "'platforms': ['interp']"))
    with pytest.raises(ConfigError, match=r"was compiled for platform\(s\) interp, not 'sim'"):
        CompiledProgram(prog.work_dir).run(*inputs())


def test_a_stopped_run_still_writes_its_dump_and_trace():
    prog = spinner.compile()
    x, y = torch.randn(R, C), torch.zeros(R, C)
    f = failure_of(prog, x, y, task_timeout_s=0.2, enable_dump_tensor=2, enable_trace=True)
    assert f.kind == "timeout"
    dfx = prog.work_dir / "dfx_outputs"
    trace = json.loads((dfx / "trace.json").read_text())
    assert any(e.get("name") == "spin" for e in trace["traceEvents"])
    manifest = json.loads((dfx / "tensor_dump" / "tensor_dump.json").read_text())
    inputs_of_0 = [r for r in manifest["records"] if r["task_id"] == 0 and r["stage"] == "before_dispatch"]
    assert [r["arg_index"] for r in inputs_of_0] == [0]  # the stalled task's input x


def test_an_orchestration_looping_through_malloc_is_stopped_in_its_own_code():
    # most of this loop's time is in malloc/free: the stop must wait for the orchestration's own
    # code, or the thread would be left holding the allocator's lock (and the next run would hang)
    prog = edited(
        two_step.compile(),
        "    return orch.status();",
        "    for (volatile long spin = 0;; spin = spin + 1) {\n"
        "        std::vector<std::string> v(64, std::string(100, 'x'));\n"
        "        static volatile char sink; sink = v[spin % 64][0];\n"
        "    }\n    return orch.status();",
    )
    for _ in range(3):
        f = failure_of(prog, *inputs(), task_timeout_s=0.2)
        # NOTE: the stop lands once a poll finds the thread in its own code (every 20 ms): well
        # under a second on an idle machine, several seconds on a loaded one
        assert f.kind == "timeout" and f.task_id == -1
        assert f.frames[0].module.endswith("two_step.so")  # stopped in its own code (maybe inlined std::)
        assert any("two_step.cpp" in fr.cpp for fr in f.frames)
        goes_on()
