"""Bad inputs at the command line, in a build's files and at a jit call: each is a clear error that
names the thing, what was expected and what to do, or the right behaviour; never a traceback from
tilescope's internals, nor a silently wrong answer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import private_copy, vector_dag_build

import tilescope as ts
from tilescope.cli import main as cli
from tilescope.harness import replay
from tilescope.launch.task import replay_task
from tilescope.tools.dump_data import DumpError, load_dump

import vector_dag

ROOT = Path(__file__).resolve().parents[2]
R, C = vector_dag.R, vector_dag.C


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One vector_dag build with saved data, a full tensor dump, deps, a trace and a saved task 0."""
    runtime_cfg = {"enable_dump_tensor": 2, "enable_dep_gen": True, "enable_trace": True}
    return vector_dag_build(tmp_path_factory.mktemp("pristine"), runtime_cfg)


@pytest.fixture
def build(pristine, tmp_path):
    """A private copy of the pristine build, free to break."""
    return private_copy(pristine, tmp_path)


def python_m(*argv, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", *argv], env=env, text=True, timeout=900, **kwargs)


# -- the command line ------------------------------------------------------------------------------


@pytest.mark.slow
def test_python_m_tilescope_runs_the_command():
    out = python_m("tilescope", "--version", capture_output=True)  # was "No module named tilescope.__main__"
    assert out.returncode == 0 and out.stdout.strip() == f"tilescope {ts.__version__}", out.stderr


@pytest.mark.slow
def test_output_into_a_reader_that_stops_early_ends_quietly(build):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tilescope", "trace", str(build)],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # `tilescope trace BUILD | head -0`: the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=900) == 1
    assert err == "", err  # was a BrokenPipeError traceback


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_onto_a_full_disk_is_one_line_naming_standard_output(build):
    with open("/dev/full", "w") as full:  # `tilescope builds BASE > /dev/full`
        proc = subprocess.run(
            [sys.executable, "-m", "tilescope", "builds", str(build.parent)],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=900,
        )
    assert proc.returncode == 1
    assert proc.stderr == (  # was an OSError traceback
        "tilescope builds: cannot write to standard output: [Errno 28] No space left on device\n"
    )


@pytest.mark.slow
def test_builds_and_clean_given_a_build_directory_name_its_base(build, capsys):
    for argv in (["builds", str(build)], ["clean", "--keep", "0", str(build)]):
        assert cli(argv) == 1  # was "0 build(s)" and a "not a build, left alone" line per file in it
        captured = capsys.readouterr()
        assert captured.err.strip() == (
            f"tilescope {argv[0]}: error: {build} is a build directory, not a build base (the directory "
            f"holding _jit_<program>_<time> builds): pass its base, {build.parent}"
        )
    assert (build / "kernel_config.py").is_file()


def replay_cfg(monkeypatch, argv):
    """The runtime options ``tilescope replay`` passes on for ``argv``."""
    seen = {}

    def fake(work_dir, **kwargs):
        seen.update(kwargs)
        return replay.RunResult(True)

    monkeypatch.setattr(replay, "replay_compiled", fake)
    assert cli(["replay", *argv]) == 0
    return {k: v for k, v in seen.items() if k not in ("golden_data", "rtol", "atol")}


@pytest.mark.slow
def test_replay_isolates_by_default_unless_the_environment_says_otherwise(build, monkeypatch):
    assert replay_cfg(monkeypatch, [str(build)]) == {"isolate": True}
    assert replay_cfg(monkeypatch, [str(build), "--no-isolate"]) == {"isolate": False}
    monkeypatch.setenv("TILESCOPE_ISOLATE", "0")  # was ignored: the replay isolated anyway
    assert replay_cfg(monkeypatch, [str(build)]) == {}
    monkeypatch.setenv("TILESCOPE_PLATFORM", "interp")  # was isolate=True, refused on interp
    monkeypatch.delenv("TILESCOPE_ISOLATE")
    assert replay_cfg(monkeypatch, [str(build)]) == {}


@pytest.mark.slow
def test_replay_reports_an_invalid_isolate_variable(build, monkeypatch, capsys):
    monkeypatch.setenv("TILESCOPE_ISOLATE", "maybe")  # was ignored silently
    assert cli(["replay", str(build)]) == 1
    err = capsys.readouterr().err
    assert "environment variable TILESCOPE_ISOLATE='maybe' (isolate): expected a bool" in err


@pytest.mark.slow
def test_replay_on_the_platform_the_environment_names_says_so(build, monkeypatch, capsys):
    monkeypatch.setenv("TILESCOPE_PLATFORM", "interp")
    # was "runtime_cfg 'isolate': implemented on the sim platform only", and last_run.json said sim
    assert cli(["replay", str(build)]) == 0
    out = capsys.readouterr().out
    assert "[RUN] run on interp" in out and f"[PASS] vector_dag on interp ({build})" in out
    assert json.loads((build / "last_run.json").read_text())["platform"] == "interp"


# -- files in a build directory ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "other, problem",
    [
        ({"status": "failed"}, "otherData 'status' is \"failed\", expected an integer"),
        ([], "otherData is [], expected an object"),
        ({"skipped_tasks": 3}, "otherData 'skipped_tasks' is 3, expected a list of task ids"),
    ],
)
def test_a_trace_with_a_wrong_typed_summary_is_reported(build, capsys, other, problem):
    trace = build / "dfx_outputs" / "trace.json"
    data = json.loads(trace.read_text())
    data["otherData"] = other
    trace.write_text(json.dumps(data))
    assert cli(["trace", str(build)]) == 1  # was a ValueError / AttributeError traceback
    err = capsys.readouterr().err
    assert err.strip() == (
        f"tilescope trace: error: {trace} is not a trace tilescope wrote: {problem}; re-run with --trace to "
        "write it again"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, file, message",
    [
        (["trace"], "trace.json", "is a directory, not a trace file: remove it (a run writes the file there) and "
                                  "re-run with --trace"),
        (["deps"], "deps.json", "is a directory, not a deps file: remove it (a run writes the file there) and "
                                "re-run with --enable-dep-gen"),
        (["dump"], "tensor_dump/tensor_dump.json", "is a directory, not a dump manifest: remove it (a run writes "
                                                   "the file there) and re-run with --dump-tensor"),
    ],
)  # fmt: skip
def test_an_output_file_replaced_by_a_directory_is_named_as_such(build, capsys, argv, file, message):
    path = build / "dfx_outputs" / file
    path.unlink()
    path.mkdir()
    assert cli([*argv, str(build)]) == 1  # was "no trace.json in ...: run with --trace to write one"
    err = capsys.readouterr().err
    assert f"{path} {message}" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "tasks, edges, problem",
    [
        ([{"id": 0}], [{"pred": 0, "succ": 5}], "the edge 0 -> 5 names a task that is not in its 1 task(s)"),
        ([{"id": 0}, {"id": 0}], [], "tasks[1] has id 0 (a run lists its tasks by id: 0, 1, 2, ...)"),
    ],
)
def test_a_deps_json_whose_edges_or_ids_do_not_form_a_graph_is_reported(build, capsys, tasks, edges, problem):
    deps = build / "dfx_outputs" / "deps.json"
    deps.write_text(json.dumps({"tasks": tasks, "edges": edges}))
    assert cli(["deps", str(build)]) == 1  # was a summary of the nonsense ("critical path: ... -> 1 ?")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"tilescope deps: {deps} is not a tilescope deps.json: {problem}; run again to rewrite it"
    )


@pytest.mark.slow
def test_a_dump_rewritten_by_another_run_while_it_is_read_is_refused_not_mixed(build):
    prog = ts.CompiledProgram.from_dir(build)
    x, y = torch.randn(R, C), torch.randn(R, C)
    prog.run(x, y, torch.zeros(R, C), enable_dump_tensor=2)
    dump = load_dump(build)
    assert torch.equal(dump.tensor(0), x)
    prog.run(x + 1, y, torch.zeros(R, C), enable_dump_tensor=2)  # another run of the build, meanwhile
    with pytest.raises(DumpError) as info:  # was record 0 of the first run showing x + 1
        dump.tensor(0)
    bin_file = build / "dfx_outputs" / "tensor_dump" / "tensor_dump.bin"
    assert str(info.value) == (
        f"{bin_file} was rewritten by another run after {bin_file.with_suffix('.json')} was read, so its bytes "
        "are not this manifest's records: run the command again (it reads the new dump)"
    )
    assert torch.equal(load_dump(build).tensor(0), x + 1)


@pytest.mark.slow
def test_a_dump_is_read_while_no_run_writes_its_outputs(build):
    import threading

    from tilescope.build.lock import outputs_lock

    writing, loaded = threading.Event(), []

    def a_run_writing_outputs():
        with outputs_lock(build):
            writing.set()
            threading.Event().wait(0.3)
            loaded.append(("released", len(loaded)))

    t = threading.Thread(target=a_run_writing_outputs)
    t.start()
    writing.wait()
    load_dump(build)  # waits until the run has written all of its outputs
    loaded.append(("loaded", len(loaded)))
    t.join()
    assert loaded == [("released", 0), ("loaded", 1)]


# -- the Python API --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_an_output_that_requires_grad_is_refused_with_what_to_pass(platform):
    x, y = torch.randn(R, C), torch.randn(R, C)
    out = torch.zeros(R, C, requires_grad=True)
    # was written silently on sim, and a RuntimeError from inside the interpreter on interp
    with pytest.raises(ts.ArgumentError) as info:
        vector_dag.vector_dag(x, y, out, platform=platform)
    assert str(info.value) == (
        "1 argument(s) of vector_dag do not match the compiled program:\n"
        "  argument 'out': requires grad (a run writes its outputs in place, which autograd cannot record: "
        "pass out.detach(), which shares its memory, or call under torch.no_grad())"
    )
    vector_dag.vector_dag(x, y, out.detach(), platform=platform)
    expected = {"x": x, "y": y, "out": torch.zeros(R, C)}
    vector_dag.golden(expected)
    torch.testing.assert_close(out.detach(), expected["out"])


@pytest.mark.slow
def test_inputs_that_require_grad_give_outputs_without_a_graph_on_both_platforms():
    x, y = torch.randn(R, C, requires_grad=True), torch.randn(R, C)
    for platform in ("sim", "interp"):
        out = torch.zeros(R, C)
        vector_dag.vector_dag(x, y, out, platform=platform)
        assert not out.requires_grad and out.grad_fn is None, platform  # interp's had a CopySlices graph


@pytest.mark.slow
def test_a_sparse_tensor_is_named_by_its_layout():
    x, y = torch.randn(R, C), torch.randn(R, C)
    with pytest.raises(ts.ArgumentError) as info:  # was "a non-contiguous tensor (... pass .contiguous())"
        vector_dag.vector_dag(x.to_sparse(), y, torch.zeros(R, C))
    assert str(info.value).endswith(
        "argument 'x': layout torch.sparse_coo (expected a dense tensor, torch.strided: pass .to_dense())"
    )


@pytest.mark.slow
def test_a_build_directory_that_is_not_a_path_is_an_argument_error(build):
    expected = (
        "a build directory is given as a path (a str or os.PathLike), got {}; pass the directory a compile "
        "wrote, e.g. prog.work_dir"
    )
    with pytest.raises(ts.ArgumentError) as info:  # was a TypeError from inside pathlib
        ts.CompiledProgram.from_dir(123)
    assert str(info.value) == expected.format("int 123")
    with pytest.raises(ts.ArgumentError) as info:
        ts.CompiledProgram(None)
    assert str(info.value) == expected.format("NoneType")
    with pytest.raises(ts.ArgumentError) as info:
        ts.replay_compiled(None)
    assert str(info.value) == expected.format("NoneType")


@pytest.mark.slow
@pytest.mark.parametrize("task_id", ["0", True, 0.0])
def test_a_task_id_that_is_not_an_int_is_named(build, task_id):
    with pytest.raises(ts.TilescopeError) as info:  # '0' was "holds task 0, not task 0"; True "task_True"
        replay_task(build, task_id, platform="interp")
    assert str(info.value) == (
        f"task_id is {task_id!r} ({type(task_id).__name__}), expected an int: the task's id, as the failure "
        "report names it (task 3 -> 3)"
    )
    assert replay_task(build, 0, platform="interp").passed


HUGE = 1 << 31


@ts.kernel
def copy8(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 8]))


@ts.jit
def through_a_huge_tensor(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    t = ts.create_tensor([HUGE, HUGE], ts.f32)  # 16 EiB
    copy8(x, t[0:8, 0:8])
    copy8(t[0:8, 0:8], y)


@pytest.mark.slow
def test_an_intermediate_too_large_to_allocate_is_a_run_failure_on_interp():
    with pytest.raises(ts.RuntimeFailure) as info:  # was torch's RuntimeError from inside the interpreter
        through_a_huge_tensor(torch.randn(8, 8), torch.zeros(8, 8), platform="interp")
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# 16 EiB" in text)
    msg = str(info.value)
    assert msg == (
        f"orchestration through_a_huge_tensor: create_tensor at {__file__}:{line} of [{HUGE}, {HUGE}] float32 needs {HUGE * HUGE * 4} bytes, which cannot be allocated (task 0); "
        "use a smaller intermediate tensor"
    )
    with pytest.raises(ts.RuntimeFailure, match=r"create_tensor: shape \[2147483648, 2147483648\]"):
        through_a_huge_tensor(torch.randn(8, 8), torch.zeros(8, 8))  # sim, for comparison
