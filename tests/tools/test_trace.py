"""The run trace: trace.json written by a traced sim run, its summary and ``tilescope trace``."""

import argparse
import json
from collections import Counter

import pytest
import torch

from tilescope.debug.trace_json import write_trace
from tilescope.harness import run_jit
from tilescope.runtime import graph, records
from tilescope.runtime.run_config import Recording, RunConfig
from tilescope.tools.trace import TraceError, register, summarize_trace

import rms_norm
import vector_dag

R, C = vector_dag.R, vector_dag.C
# func_id order of vector_dag's kernels is the compiler's; names are checked through program.kernels
VECTOR_DAG_KERNELS = Counter({"add": 1, "mul": 1, "silu": 1, "maximum": 1, "combine": 1})


def _vector_dag_args():
    return torch.randn(R, C), torch.randn(R, C), torch.empty(R, C)


def _load(path):
    return json.loads(path.read_text())


def _cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="tilescope")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    capsys.readouterr()  # drop what earlier steps (the run's log) printed
    rc = args.fn(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _check_structure(data, program, num_workers):
    events = data["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    (proc,) = [e for e in meta if e["name"] == "process_name"]
    assert proc["args"]["name"] == f"tilescope sim: {program.name}"
    lanes = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert lanes == {0: "orchestration", **{w + 1: f"worker {w}" for w in range(num_workers)}}
    slices = [e for e in events if e["ph"] == "X"]
    names = [k["name"] for k in program.kernels]
    for e in slices:
        assert e["dur"] >= 0 and e["ts"] >= 0
        assert e["tid"] in lanes and e["tid"] != 0
        assert lanes[e["tid"]] == f"worker {e['args']['worker']}"
        assert e["name"] == names[e["args"]["func_id"]]
        assert set(e["args"]) == {"task_id", "func_id", "task", "worker"}
    submits = [e for e in events if e["ph"] == "i"]
    assert all(e["tid"] == 0 for e in submits)
    assert sorted(e["args"]["task_id"] for e in submits) == sorted(e["args"]["task_id"] for e in slices)
    return slices


@pytest.mark.slow
def test_traced_run_writes_one_slice_per_task_on_worker_lanes():
    prog = vector_dag.vector_dag.compile()
    prog.run(*_vector_dag_args(), enable_trace=True, num_workers=2)
    path = prog.work_dir / "dfx_outputs" / "trace.json"
    data = _load(path)
    slices = _check_structure(data, prog, num_workers=2)
    assert sorted(e["args"]["task_id"] for e in slices) == [0, 1, 2, 3, 4]
    assert Counter(e["name"] for e in slices) == VECTOR_DAG_KERNELS
    assert data["otherData"]["skipped_tasks"] == [] and data["otherData"]["status"] == 0
    assert not [e for e in data["traceEvents"] if e["ph"] in "sf"]  # no edges recorded

    s = summarize_trace(prog.work_dir)  # a build dir finds dfx_outputs/trace.json
    assert s.path == path and s.program == "vector_dag" and s.num_tasks == 5
    assert Counter({k.name: k.tasks for k in s.kernels}) == VECTOR_DAG_KERNELS
    assert [k.total_us for k in s.kernels] == sorted((k.total_us for k in s.kernels), reverse=True)
    assert sum(k.share for k in s.kernels) == pytest.approx(1.0)
    assert [w.worker for w in s.workers] == [0, 1] and sum(w.tasks for w in s.workers) == 5
    assert all(0 <= w.utilisation <= 1 for w in s.workers)
    assert s.critical_path_us is None and s.num_flows == 0


@pytest.mark.slow
def test_trace_through_run_jit_and_the_command(capsys):
    result = run_jit(
        rms_norm.rms_norm,
        rms_norm.specs(),
        golden_fn=rms_norm.golden,
        runtime_cfg={"enable_trace": True, "num_workers": 2},
    )
    assert result.passed, result
    path = result.work_dir / "dfx_outputs" / "trace.json"
    data = _load(path)
    from tilescope.launch.program import CompiledProgram

    prog = CompiledProgram.from_dir(result.work_dir)
    slices = _check_structure(data, prog, num_workers=2)
    tasks_per_kernel = Counter(e["name"] for e in slices)

    for where in (result.work_dir, result.work_dir / "dfx_outputs", path):
        rc, out, err = _cli(["trace", str(where)], capsys)
        assert rc == 0 and err == ""
        assert f"trace {path}" in out
        for name, n in tasks_per_kernel.items():
            (row,) = [line for line in out.splitlines() if line.split()[:1] == [name]]
            assert int(row.split()[1]) == n
        rows = {
            line.split()[0]: line.split()[1:]
            for line in out.splitlines()
            if line.split()[:1] in (["0"], ["1"], ["all"])
        }
        assert set(rows) >= {"0", "1", "all"} and int(rows["all"][0]) == len(slices)
        assert "critical path: unknown" in out
        assert "https://ui.perfetto.dev" in out and "--enable-dep-gen" in out
    s = summarize_trace(path)
    assert {k.name: k.tasks for k in s.kernels} == dict(tasks_per_kernel)
    assert s.num_tasks == len(slices) == sum(tasks_per_kernel.values())


@pytest.mark.slow
def test_no_trace_without_enable_trace():
    prog = vector_dag.vector_dag.compile()
    prog.run(*_vector_dag_args(), num_workers=2)
    assert not (prog.work_dir / "dfx_outputs" / "trace.json").exists()
    prog.run(*_vector_dag_args(), enable_trace=False, num_workers=2)
    assert not (prog.work_dir / "dfx_outputs" / "trace.json").exists()


def _run_with_edges(prog, args, num_workers=2):
    """A sim run of ``prog`` with dependency and task recording on (what enable_dep_gen will do)."""
    loaded = prog.binaries()
    cargs = [
        graph.scalar_arg(a, spec.dtype) if spec.shape is None else graph.tensor_arg(a, spec.direction)
        for spec, a in zip(prog.args, args)
    ]
    return graph.run_graph(
        loaded.orchestration,
        loaded.kernels,
        [k["name"] for k in prog.kernels],
        cargs,
        RunConfig(num_workers=num_workers),
        Recording(record_edges=True, record_task_times=True),
    )


@pytest.mark.slow
def test_flow_arrows_for_every_dependency_and_the_critical_path(tmp_path, capsys):
    prog = vector_dag.vector_dag.compile()
    report = _run_with_edges(prog, _vector_dag_args())
    assert report.edges
    (path,) = write_trace(tmp_path, prog, report)
    assert path == tmp_path / "trace.json"
    data = _load(path)
    slices = {e["args"]["task_id"]: e for e in _check_structure(data, prog, num_workers=2)}
    starts = {e["id"]: e for e in data["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in data["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    pairs = {(e.pred, e.succ) for e in report.edges}
    assert {(e["args"]["pred"], e["args"]["succ"]) for e in starts.values()} == pairs
    # vector_dag: c<-a, d<-b, d<-c, out<-d, out<-a (by data), as task ids 0..4 in submission order
    assert {(0, 2), (1, 3), (2, 3), (3, 4), (0, 4)} <= pairs
    for fid, s in starts.items():
        pred, succ = slices[s["args"]["pred"]], slices[s["args"]["succ"]]
        f = ends[fid]
        # each end lies inside its task's slice, on that task's lane, so the viewer binds it
        assert s["tid"] == pred["tid"] and pred["ts"] <= s["ts"] <= pred["ts"] + pred["dur"]
        assert f["tid"] == succ["tid"] and succ["ts"] <= f["ts"] <= succ["ts"] + succ["dur"]
        assert f["bp"] == "e" and s["name"] == f["name"] and s["cat"] == f["cat"]

    s = summarize_trace(path)
    assert s.num_flows == len(pairs)
    # longest path by task duration: add -> silu -> maximum -> combine or mul -> maximum -> combine
    assert s.critical_path in ((0, 2, 3, 4), (1, 3, 4))
    assert s.critical_path_us == pytest.approx(sum(slices[t]["dur"] for t in s.critical_path))
    rc, out, _ = _cli(["trace", str(path)], capsys)
    assert rc == 0
    assert f"over {len(s.critical_path)} task(s)" in out and f"{len(pairs)} dependency arrow(s)" in out
    assert "--enable-dep-gen" not in out


@pytest.mark.slow
def test_skipped_tasks_are_listed_not_drawn(tmp_path):
    prog = vector_dag.vector_dag.compile()
    report = _run_with_edges(prog, _vector_dag_args())
    t3 = report.tasks[3]
    report.tasks[3] = records.TaskRecord(t3.task_id, t3.func_id, t3.name, -1, 0, 0, 0)
    report.status, report.error = 1, "injected failure"
    (path,) = write_trace(tmp_path, prog, report)
    data = _load(path)
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert 3 not in {e["args"]["task_id"] for e in slices} and len(slices) == 4
    kernel = prog.kernels[t3.func_id]["name"]
    assert data["otherData"]["skipped_tasks"] == [
        {"task_id": 3, "func_id": t3.func_id, "kernel": kernel, "task": t3.name}
    ]
    flows = [e for e in data["traceEvents"] if e["ph"] == "s"]
    assert all(3 not in (e["args"]["pred"], e["args"]["succ"]) for e in flows)
    assert (
        data["otherData"]["flows_not_drawn"]
        == len(
            {(e.pred, e.succ) for e in report.edges} - {(e["args"]["pred"], e["args"]["succ"]) for e in flows}
        )
        > 0
    )
    s = summarize_trace(path)
    assert s.skipped == 1 and s.status == 1 and s.num_tasks == 4


def test_missing_and_corrupt_traces_are_one_line_errors(tmp_path, capsys):
    rc, out, err = _cli(["trace", str(tmp_path / "nope")], capsys)
    assert rc == 1 and out == ""
    assert err.strip() == f"tilescope trace: error: {tmp_path / 'nope'} does not exist"

    rc, _, err = _cli(["trace", str(tmp_path)], capsys)  # a dir with no trace
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "enable_trace=True" in err

    bad = tmp_path / "dfx_outputs" / "trace.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [')
    rc, out, err = _cli(["trace", str(tmp_path)], capsys)
    assert rc == 1 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and f"{bad} is not a readable trace" in err

    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k"}]}))  # no ts/tid
    rc, _, err = _cli(["trace", str(bad)], capsys)
    assert rc == 1 and "malformed trace event" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(TraceError, match="no traceEvents list"):
        bad.write_text('{"foo": 1}')
        summarize_trace(bad)


@pytest.mark.slow
def test_dep_gen_and_trace_together_draw_the_recorded_edges():
    pytest.importorskip("tilescope.tools.deps", reason="enable_dep_gen's writer is not in this checkout yet")
    prog = vector_dag.vector_dag.compile()
    prog.run(*_vector_dag_args(), enable_trace=True, enable_dep_gen=True, num_workers=2)
    data = _load(prog.work_dir / "dfx_outputs" / "trace.json")
    flows = {(e["args"]["pred"], e["args"]["succ"]) for e in data["traceEvents"] if e["ph"] == "s"}
    assert {(0, 2), (1, 3), (2, 3), (3, 4), (0, 4)} <= flows
    assert summarize_trace(prog.work_dir).critical_path in ((0, 2, 3, 4), (1, 3, 4))
