"""Crash isolation end to end, on real builds with hand-edited C++: a kernel that dies of SIGSEGV
in an isolated child becomes a report (task, kernel, signal, the edited C++ line, its DSL line,
the task's inputs saved) and the caller goes on; isolated runs equal in-process ones; a crash
report cut short still reads; a crash outside a kernel and an idle child are reported; and
``tilescope replay --task`` runs one saved task alone on sim (isolated or not) and interp."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilescope import cli
from tilescope.debug.crash import parse_crash_report, read_crash_report
from tilescope.errors import RuntimeFailure, TilescopeError
from tilescope.launch import isolate
from tilescope.launch.program import CompiledProgram
from tilescope.launch.task import replay_task, saved_task_dirs

import rms_norm

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

ROWS, COLS, BLOCK = 128, 256, 32
STORE = "store(y, {0, h}, fuse(t) * inv * g);"
WILD_WRITE = "*reinterpret_cast<volatile float *>(16) = 1.0f; "
MARKER = re.compile(r"@ (\S+:\d+)\s*$")


def _compile(base: Path) -> CompiledProgram:
    # unchecked: the tests edit the kernel's plain store into a wild write
    return rms_norm.build(ROWS, COLS, BLOCK, 128).compile(build_dir=str(base), check_bounds=False)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, COLS, generator=g)
    gamma = torch.rand(1, COLS, generator=g)
    return x, gamma, torch.full((ROWS, COLS), 7.0), 1e-6


def _reference(x, gamma, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.tensor(eps, dtype=torch.float32)) * gamma


def _edit(path: Path, find: str, insert: str) -> tuple[int, str]:
    """Prefix the line holding ``find`` with ``insert``; its 1-based number and DSL marker."""
    lines = path.read_text().splitlines()
    (n,) = [i for i, line in enumerate(lines) if find in line]
    lines[n] = lines[n].replace(find, insert + find)
    path.write_text("\n".join(lines) + "\n")
    return n + 1, MARKER.search(lines[n])[1]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return _compile(tmp_path_factory.mktemp("good"))


@pytest.fixture(scope="module")
def crashing(tmp_path_factory):
    """rms_norm whose kernel writes through a wild pointer on the line of its store."""
    build = _compile(tmp_path_factory.mktemp("crashing")).work_dir
    line, dsl = _edit(build / "kernels/vec/rms_rows.cpp", STORE, WILD_WRITE)
    return CompiledProgram.from_dir(build), line, dsl


@pytest.fixture(scope="module")
def crashed(crashing):
    """The isolated run of the crashing build: its RuntimeFailure and arguments."""
    program, _, _ = crashing
    args = _inputs()
    with pytest.raises(RuntimeFailure) as info:
        program.run(*args, isolate=True, serial=True)
    return info.value, args


def test_isolated_run_equals_in_process(good):
    x, gamma, y, eps = _inputs()
    y_isolated = y.clone()
    local = good.run(x, gamma, y, eps)
    isolated = good.run(x, gamma, y_isolated, eps, isolate=True)
    assert (isolated.platform, isolated.num_tasks) == ("sim", local.num_tasks) == ("sim", ROWS // BLOCK)
    assert torch.equal(y_isolated, y)
    torch.testing.assert_close(y, _reference(x, gamma, eps))


def test_isolated_inout_and_aliased_arguments_equal_in_process():
    from orchestration_programs import features

    program = features.compile()
    x = torch.randn(4, 8)
    results = []
    for isolated in (False, True):
        both = x.clone()  # passed as the input x and the InOut out: one buffer, as the caller's
        idx = torch.zeros(6, 8)
        program.run(both, both, idx, 0.5, isolate=isolated)
        results.append((both, idx))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert not torch.equal(results[1][0], x)  # the InOut was written back


def test_kernel_crash_is_reported_and_the_caller_goes_on(crashing, crashed, good):
    program, line, dsl = crashing
    err, (x, gamma, y, eps) = crashed
    f = err.failure
    assert f.kind == "crash" and (f.task_id, f.kernel, f.task_name) == (0, "rms_rows", "rms_rows")
    assert f.message.startswith(
        "task 0 'rms_rows' (kernel rms_rows) on worker 0 died of SIGSEGV (address 0x10)"
    )
    assert f"at kernels/vec/rms_rows.cpp:{line} (DSL {dsl})" in f.message
    where = f.where()
    assert where.cpp == f"{program.work_dir / 'kernels/vec/rms_rows.cpp'}:{line}"
    assert (where.function, where.dsl, where.dsl_source) == (
        "kernel_entry",
        dsl,
        "ts.store(y, [0, h], t * inv * g)",
    )
    assert "signal SIGSEGV (11), code SEGV_MAPERR (address not mapped)" in f.details
    assert (
        f"  arg 0 x: in f32 [{BLOCK}, {COLS}] (strides [{COLS}, 1], from element 0 of its buffer, "
        in "\n".join(f.details)
    )
    assert "  arg 3 eps: scalar f32 = 1e-06" in f.details
    assert str(err) == f.render() and "next: tilescope replay" in str(err)
    assert torch.equal(y, torch.full_like(y, 7.0))  # serial: task 0 died before any store

    saved = Path(f.saved_inputs)
    assert saved == program.work_dir / "dfx_outputs/failure/task_0"
    meta = json.loads((saved / "task.json").read_text())
    assert (meta["task_id"], meta["kernel"], meta["kernel_index"]) == (0, "rms_rows", 0)
    assert [(a["name"], a["role"]) for a in meta["args"]] == [
        ("x", "input"), ("gamma", "input"), ("y", "output"), ("eps", "scalar")
    ]  # fmt: skip
    assert torch.equal(torch.load(saved / "x.pt", weights_only=True), x[:BLOCK])
    assert torch.equal(torch.load(saved / "gamma.pt", weights_only=True), gamma)
    assert f.next_steps[0] == f"tilescope replay {program.work_dir} --task 0"

    x2, gamma2, y2, eps2 = _inputs(seed=1)  # this process is fine: run another program in it
    good.run(x2, gamma2, y2, eps2)
    torch.testing.assert_close(y2, _reference(x2, gamma2, eps2))


def test_replay_task_reproduces_the_crash_in_isolation(crashing, crashed, capsys):
    program, line, dsl = crashing
    rc = cli.main(["replay", str(program.work_dir), "--task", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"[REPLAY] task 0 'rms_rows' (kernel rms_rows) alone on sim, inputs from {program.work_dir}" in out
    assert "[REPLAY] FAILED:" in out
    assert "[crash] task 0 'rms_rows' (kernel rms_rows) on worker 0 died of SIGSEGV (address 0x10) at " in out
    assert f"kernels/vec/rms_rows.cpp:{line} (DSL {dsl})" in out
    assert f"y [{BLOCK}, {COLS}] float32: min 0, max 0, mean 0, 0 NaN, 0 Inf" in out
    assert [d.name for d in saved_task_dirs(program.work_dir)] == ["task_0"]  # a replay saves nothing


def test_replay_task_runs_the_kernel_alone_on_sim_and_interp(crashing, crashed, good, capsys):
    x, gamma, _, eps = crashed[1]
    saved = crashing[0].work_dir / "dfx_outputs/failure/task_0"
    expected = _reference(x[:BLOCK], gamma, eps)
    outputs = {}
    for platform, isolated in (("sim", True), ("sim", False), ("interp", False)):
        result = replay_task(good.work_dir, from_dir=saved, platform=platform, isolate=isolated)
        assert result.passed and result.failure is None, result.error
        assert result.num_tasks == 1 and result.task.kernel["name"] == "rms_rows"
        outputs[platform, isolated] = result.outputs["y"]
        torch.testing.assert_close(result.outputs["y"], expected)
    assert torch.equal(outputs["sim", True], outputs["sim", False])
    rc = cli.main(["replay", str(good.work_dir), "--from", str(saved), "-p", "interp"])
    out = capsys.readouterr().out
    assert rc == 0 and "[REPLAY] ran to the end" in out
    assert re.search(rf"y \[{BLOCK}, {COLS}\] float32: min -?\d.*, 0 NaN, 0 Inf", out)


def test_replay_task_bad_inputs_are_clear_and_nothing_is_deleted(crashing, crashed, good, tmp_path, capsys):
    program = crashing[0]
    with pytest.raises(
        TilescopeError, match=r"task_5 does not exist; saved tasks of this build:\n  .*task_0  \(task 0"
    ):
        replay_task(program.work_dir, 5)
    with pytest.raises(TilescopeError, match="this build has no saved tasks"):
        replay_task(good.work_dir, 0)

    copy = tmp_path / "task_0"
    shutil.copytree(program.work_dir / "dfx_outputs/failure/task_0", copy)
    torch.save(torch.zeros(3, 3), copy / "gamma.pt")
    with pytest.raises(TilescopeError) as info:
        replay_task(program.work_dir, from_dir=copy)
    assert (
        f"{copy / 'gamma.pt'}: shape [3, 3] torch.float32, expected shape [1, {COLS}] torch.float32"
        in str(info.value)
    )

    (copy / "task.json").write_text('{"task_id": 0, "kernel": ')
    rc = cli.main(["replay", str(program.work_dir), "--from", str(copy)])
    err = capsys.readouterr().err
    assert rc == 1 and f"[ERROR] {copy / 'task.json'} is not a readable saved task (JSONDecodeError" in err
    assert (copy / "task.json").read_text() == '{"task_id": 0, "kernel": '
    assert sorted(p.name for p in copy.iterdir()) == ["gamma.pt", "task.json", "x.pt"]


def test_crash_report_cut_short_still_reads(crashing, crashed, tmp_path):
    """The report an in-process crash leaves in dfx_outputs, read whole and cut at every section."""
    program, line, dsl = crashing
    x, gamma, y, eps = crashed[1]
    script = (
        "import sys, torch\n"
        "from tilescope.launch.program import CompiledProgram\n"
        "p = CompiledProgram(sys.argv[1])\n"
        "x, g, y = (torch.load(f, weights_only=True) for f in sys.argv[2:5])\n"
        "p.run(x, g, y, 1e-6, serial=True)\n"
    )
    for name, t in (("x", x), ("g", gamma), ("y", y)):
        torch.save(t, tmp_path / f"{name}.pt")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(program.work_dir), *(str(tmp_path / f"{n}.pt") for n in "xgy")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -11, proc.stderr
    report = program.work_dir / "dfx_outputs/crash_report.txt"
    data = report.read_bytes()
    assert parse_crash_report(data).complete and not parse_crash_report(data).problems

    whole = read_crash_report(report, program, save_inputs=False)
    assert whole.where().cpp.endswith(f"rms_rows.cpp:{line}") and whole.where().dsl == dsl
    cuts = {
        "empty": (0, "the report is empty"),
        "mid-header": (data.index(b"\nframes") + 12, "the last line is cut short"),
        "mid-maps": (data.index(b"maps_end") - 7, "the memory map is cut short"),
        "mid-payload": (data.index(b"payload 1") - 100, "the payload of arg 0 is cut short"),
        "before end": (data.rindex(b"end\n"), "no `end` line"),
    }
    for what, (cut, problem) in cuts.items():
        path = tmp_path / f"cut_{what.replace(' ', '_')}.txt"
        path.write_bytes(data[:cut])
        f = read_crash_report(path, program)
        assert f.kind == "crash", what
        assert any(problem in d for d in f.details) or problem in f.message, (what, f.render())
        if what not in ("empty", "mid-header"):
            assert f.message.startswith("task 0 'rms_rows' (kernel rms_rows) on worker 0 died of SIGSEGV"), (
                what
            )
        if what == "mid-payload":
            assert not f.saved_inputs and any("the task's inputs are not saved" in d for d in f.details)
    assert [d.name for d in saved_task_dirs(program.work_dir)] == ["task_0", "task_0_1"]  # "before end" saved


@pytest.mark.parametrize("since", ["removed", "symlink"])
def test_a_crash_makes_dfx_outputs_again_when_it_was_removed_since_the_first_run(crashing, crashed, tmp_path, since):
    """A program run in a loop does not look for dfx_outputs on every run: the core makes it again
    when a crash finds it removed, and writes nothing through a link put in its place."""
    program, line, _ = crashing
    build = tmp_path / "build"
    shutil.copytree(program.work_dir, build, ignore=shutil.ignore_patterns("dfx_outputs"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (  # dfx_outputs changes once the run has its options, just before the core runs
        "import os, shutil, sys, torch\n"
        "import tilescope.runtime.graph as graph\n"
        "from tilescope.launch.program import CompiledProgram\n"
        "p = CompiledProgram(sys.argv[1])\n"
        "real = graph.core_config\n"
        "def changed_after(*args, **kwargs):\n"
        "    core = real(*args, **kwargs)\n"
        "    shutil.rmtree(p.work_dir / 'dfx_outputs')\n"
        "    if sys.argv[5] == 'symlink':\n"
        "        os.symlink(sys.argv[6], p.work_dir / 'dfx_outputs')\n"
        "    return core\n"
        "graph.core_config = changed_after\n"
        "x, g, y = (torch.load(f, weights_only=True) for f in sys.argv[2:5])\n"
        "p.run(x, g, y, 1e-6, serial=True)\n"
    )
    for name, t in zip("xgy", crashed[1][:3]):
        torch.save(t, tmp_path / f"{name}.pt")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(build), *(str(tmp_path / f"{n}.pt") for n in "xgy"), since, str(elsewhere)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -11, proc.stderr
    report = build / "dfx_outputs/crash_report.txt"
    if since == "symlink":
        assert "crash report:" not in proc.stderr and "run with isolate=True" in proc.stderr
        assert list(elsewhere.iterdir()) == []
        return
    assert f"crash report: {report}" in proc.stderr
    rep = read_crash_report(report, CompiledProgram(build), save_inputs=False)
    assert rep.where().cpp.endswith(f"rms_rows.cpp:{line}")


@pytest.fixture(scope="module")
def odd_orchestration(tmp_path_factory):
    """rms_norm whose orchestration crashes when eps < 0 and waits forever when eps > 100."""
    build = _compile(tmp_path_factory.mktemp("odd")).work_dir
    src = build / "orchestration/rms_norm.cpp"
    src.write_text("#include <unistd.h>\n" + src.read_text())
    _edit(
        src,
        "for (int64_t r = 0;",
        "if (eps < 0) *reinterpret_cast<volatile int *>(8) = 1; if (eps > 100) pause(); ",
    )
    return CompiledProgram.from_dir(build)


def test_crash_outside_a_kernel_names_the_signal(odd_orchestration):
    x, gamma, y, _ = _inputs()
    with pytest.raises(RuntimeFailure) as info:
        odd_orchestration.run(x, gamma, y, -1.0, isolate=True)
    f = info.value.failure
    assert f.kind == "crash"
    assert (
        f.message
        == "the isolated run of rms_norm died of SIGSEGV outside a kernel, so there is no crash report"
    )
    assert not f.saved_inputs and not list((odd_orchestration.work_dir).glob("dfx_outputs/failure/*"))


def test_idle_child_is_killed_and_reported(odd_orchestration, monkeypatch):
    monkeypatch.setattr(isolate, "MIN_IDLE_LIMIT_S", 2.0)
    x, gamma, y, _ = _inputs()
    with pytest.raises(RuntimeFailure) as info:
        odd_orchestration.run(x, gamma, y, 1000.0, isolate=True, task_timeout_s=0)
    f = info.value.failure
    assert f.kind == "timeout"
    assert (
        f.message
        == "the isolated run of rms_norm sat idle (no CPU time used, nothing printed) for 2s and was killed"
    )
