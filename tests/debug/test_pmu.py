"""Per-task counters (enable_pmu): dfx_outputs/pmu.csv, the counters on trace.json's task slices,
and the kernel ranking ``tilescope trace`` prints from them."""

import argparse
import csv
import json
import re
import subprocess
import sys

import pytest
import torch

from tilescope import knobs
from tilescope.debug.observers import PmuObserver, TraceObserver, observers_for, recording_of
from tilescope.errors import ConfigError
from tilescope.harness import add_harness_args, harness_kwargs, run_jit
from tilescope.runtime.run_config import RunConfig
from tilescope.tools.roofline import format_ranking, pmu_ranking
from tilescope.tools.trace import register, summarize_trace

import rms_norm
import vector_dag

R, C = vector_dag.R, vector_dag.C
TENSOR_BYTES = R * C * 4  # every vector_dag tensor is [R, C] float32
# kernel -> (bytes read, bytes written): add, mul, maximum and combine read two tensors, silu one
VECTOR_DAG_BYTES = {
    "add": (2 * TENSOR_BYTES, TENSOR_BYTES),
    "mul": (2 * TENSOR_BYTES, TENSOR_BYTES),
    "silu": (TENSOR_BYTES, TENSOR_BYTES),
    "maximum": (2 * TENSOR_BYTES, TENSOR_BYTES),
    "combine": (2 * TENSOR_BYTES, TENSOR_BYTES),
}
HARDWARE = ("cycles", "instructions", "cache_misses")


def _args():
    return torch.randn(R, C), torch.randn(R, C), torch.empty(R, C)


def _rows(work_dir):
    with open(work_dir / "dfx_outputs" / "pmu.csv", newline="") as f:
        return list(csv.DictReader(f))


def _check_counters(row):
    wall, cpu = int(row["wall_ns"]), int(row["cpu_ns"])
    assert wall > 0 and 0 < cpu <= wall * 1.01 + 1000, row
    assert int(row["page_faults"]) >= 0 and int(row["ctx_switches"]) >= 0
    hw = [row[h] for h in HARDWARE]
    assert all(v == "" for v in hw) or all(int(v) >= 0 for v in hw), row


@pytest.mark.slow
def test_pmu_run_writes_one_row_per_task_and_counters_on_the_trace_slices():
    prog = vector_dag.vector_dag.compile()
    report = prog.run(*_args(), enable_pmu=True, num_workers=2).report
    rows = _rows(prog.work_dir)
    assert list(rows[0]) == [
        "task_id", "kernel", "task", "worker", "wall_ns", "cpu_ns", "page_faults", "ctx_switches",
        *HARDWARE, "bytes_read", "bytes_written",
    ]  # fmt: skip
    assert [int(r["task_id"]) for r in rows] == [0, 1, 2, 3, 4]
    assert sorted(r["kernel"] for r in rows) == sorted(VECTOR_DAG_BYTES)
    for r in rows:
        _check_counters(r)
        assert (int(r["bytes_read"]), int(r["bytes_written"])) == VECTOR_DAG_BYTES[r["kernel"]]
        assert int(r["worker"]) in (0, 1)
    # the note says which counters there are; the hardware cells are empty exactly when it says so
    assert report.pmu_note.startswith("perf_event_open: ") and "perf_event_paranoid=" in report.pmu_note
    for h, name in zip(HARDWARE, ("cycles", "instructions", "cache-misses")):
        missing = f"{name} (" in report.pmu_note
        assert all((r[h] == "") == missing for r in rows)

    data = json.loads((prog.work_dir / "dfx_outputs" / "trace.json").read_text())  # written too
    slices = {e["args"]["task_id"]: e for e in data["traceEvents"] if e["ph"] == "X"}
    for r in rows:
        e = slices[int(r["task_id"])]
        assert e["name"] == r["kernel"] and e["args"]["worker"] == int(r["worker"])
        pmu = e["args"]["pmu"]
        assert (pmu["wall_ns"], pmu["cpu_ns"]) == (int(r["wall_ns"]), int(r["cpu_ns"]))
        assert (pmu["bytes_read"], pmu["bytes_written"]) == VECTOR_DAG_BYTES[r["kernel"]]
    other = data["otherData"]["pmu"]
    assert other["note"] == report.pmu_note and other["copy_limit_gbs"] > 0 and other["copy_bytes"] == 64 << 20

    s = summarize_trace(prog.work_dir)
    assert s.pmu is not None and s.pmu.copy_limit_gbs == other["copy_limit_gbs"]
    by_name = {k.name: k for k in s.pmu.kernels}
    assert set(by_name) == set(VECTOR_DAG_BYTES)
    for r in rows:
        k = by_name[r["kernel"]]
        assert (k.calls, k.wall_ns, k.cpu_ns) == (1, int(r["wall_ns"]), int(r["cpu_ns"]))
        assert k.bytes == sum(VECTOR_DAG_BYTES[k.name])
        assert k.gbs == pytest.approx(k.bytes / k.wall_ns) and k.roof == pytest.approx(k.gbs / s.pmu.copy_limit_gbs)
    assert [k.wall_ns for k in s.pmu.kernels] == sorted((k.wall_ns for k in s.pmu.kernels), reverse=True)
    assert sum(k.share for k in s.pmu.kernels) == pytest.approx(1.0)


@pytest.mark.slow
def test_the_harness_flag_and_tilescope_trace_print_the_ranking(capsys):
    parser = add_harness_args(argparse.ArgumentParser())
    kwargs = harness_kwargs(parser.parse_args(["--enable-pmu", "--workers", "2"]))
    assert kwargs["runtime_cfg"]["enable_pmu"] is True
    result = run_jit(rms_norm.rms_norm, rms_norm.specs(), golden_fn=rms_norm.golden, runtime_cfg=kwargs["runtime_cfg"])
    assert result.passed, result
    rows = _rows(result.work_dir)
    calls = {}
    for r in rows:
        _check_counters(r)
        calls[r["kernel"]] = calls.get(r["kernel"], 0) + 1

    cmd = argparse.ArgumentParser(prog="tilescope")
    register(cmd.add_subparsers(dest="command", required=True))
    args = cmd.parse_args(["trace", str(result.work_dir)])
    capsys.readouterr()
    assert args.fn(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("kernels by time"))
    limit = float(re.search(r"copy limit ([0-9.]+) GB/s", lines[head]).group(1))
    assert limit > 0 and lines[head + 1].split()[:3] == ["kernel", "calls", "wall"]
    table = {line.split()[0]: line.split()[1:] for line in lines[head + 2 : head + 2 + len(calls)]}
    assert {k: int(v[0]) for k, v in table.items()} == calls
    for name, cells in table.items():
        wall_ms = sum(int(r["wall_ns"]) for r in rows if r["kernel"] == name) / 1e6
        moved = sum(int(r["bytes_read"]) + int(r["bytes_written"]) for r in rows if r["kernel"] == name)
        assert float(cells[1]) == pytest.approx(wall_ms, abs=1e-3)
        assert float(cells[4]) == pytest.approx(moved / 1e6, abs=1e-3) and moved > 0
        assert float(cells[5]) == pytest.approx(moved / (wall_ms * 1e6), rel=0.01, abs=0.01)
    assert "kernels by GB/s (share of the copy limit): " in out
    assert "counters: perf_event_open: " in out


@pytest.mark.slow
def test_no_counters_without_the_knob():
    assert not [o for o in observers_for(RunConfig(enable_trace=True)) if isinstance(o, PmuObserver)]
    assert recording_of(observers_for(RunConfig(enable_trace=True))).pmu is False
    on = observers_for(RunConfig(enable_pmu=True))
    assert [type(o) for o in on] == [TraceObserver, PmuObserver] and recording_of(on).pmu is True
    prog = vector_dag.vector_dag.compile()
    report = prog.run(*_args(), enable_trace=True, num_workers=2).report
    assert report.pmu == [] and report.pmu_note == ""
    assert not (prog.work_dir / "dfx_outputs" / "pmu.csv").exists()
    data = json.loads((prog.work_dir / "dfx_outputs" / "trace.json").read_text())
    assert all("pmu" not in e["args"] for e in data["traceEvents"] if e["ph"] == "X")
    assert "pmu" not in data["otherData"] and summarize_trace(prog.work_dir).pmu is None


@pytest.mark.slow
def test_bad_values_of_the_knob_are_rejected(monkeypatch):
    monkeypatch.setenv("TILESCOPE_ENABLE_PMU", "maybe")
    with pytest.raises(ConfigError, match=r"TILESCOPE_ENABLE_PMU='maybe' \(enable_pmu\): expected a bool"):
        knobs.runtime_options({})
    monkeypatch.delenv("TILESCOPE_ENABLE_PMU")
    with pytest.raises(ConfigError, match=r"enable_pmu.*expected a bool"):
        knobs.runtime_options({"enable_pmu": "yes"})
    with pytest.raises(ConfigError, match=r"'enable_pmu'.*sim platform only; run with platform='sim'"):
        vector_dag.vector_dag.compile().run(*_args(), enable_pmu=True, platform="interp")


def test_the_ranking_shows_instructions_per_cycle_only_where_counted():
    def task(name, wall, moved, cycles=None):
        counters = {"wall_ns": wall, "cpu_ns": wall, "page_faults": 1, "ctx_switches": 0, "bytes_read": moved,
                    "bytes_written": 0, "cycles": cycles, "instructions": None if cycles is None else 2 * cycles}
        return {"name": name, "args": {"pmu": counters}}  # fmt: skip

    other = {"pmu": {"note": "n", "copy_limit_gbs": 10.0}}
    r = pmu_ranking([task("a", 1000, 4000), task("b", 3000, 3000), task("a", 1000, 4000)], other)
    assert [(k.name, k.calls, k.wall_ns, k.bytes) for k in r.kernels] == [("b", 1, 3000, 3000), ("a", 2, 2000, 8000)]
    assert [k.name for k in r.by_rate()] == ["a", "b"] and r.kernels[1].roof == pytest.approx(0.4)
    assert r.kernels[0].instructions is None and not any("per cycle" in line for line in format_ranking(r))
    hw = pmu_ranking([task("a", 1000, 0, cycles=500)], other)
    assert "instructions per cycle: a 2.00" in format_ranking(hw)
    assert pmu_ranking([{"name": "a", "args": {}}], other) is None


FALLBACK_RUN = """
import dataclasses, json, os, resource, sys
import torch
from tilescope.launch.program import CompiledProgram
from tilescope.runtime import graph
from tilescope.runtime.run_config import Recording, RunConfig

prog = CompiledProgram.from_dir(sys.argv[1])
loaded = prog.binaries()
tensors = [torch.randn(*spec.shape) for spec in prog.args]  # alive for as long as the runs use them
args = [graph.tensor_arg(t, spec.direction) for t, spec in zip(tensors, prog.args)]
run = [loaded.orchestration, loaded.kernels, [k["name"] for k in prog.kernels], args]
pmu = {"config": RunConfig(num_workers=2), "recording": Recording(record_task_times=True, pmu=True)}
graph.run_graph(*run, **pmu)  # the pooled workers, and what collecting imports, exist before the limit
lowest_free = os.open(os.devnull, os.O_RDONLY)  # the kernel hands out the lowest free fd
os.close(lowest_free)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
try:
    report = graph.run_graph(*run, **pmu)
finally:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(json.dumps({"note": report.pmu_note, "pmu": [dataclasses.asdict(r) for r in report.pmu]}))
"""


@pytest.mark.slow
def test_counters_fall_back_to_the_thread_clock_and_getrusage_where_perf_cannot_open():
    """No fd can be opened during the run (RLIMIT_NOFILE at the lowest free fd, in a child process
    so the limit touches nothing else), so every perf_event_open fails: CPU time, page faults and
    context switches come from the fallbacks, the hardware counters are None, the note says why."""
    prog = vector_dag.vector_dag.compile()
    child = subprocess.run(
        [sys.executable, "-c", FALLBACK_RUN, str(prog.work_dir)], capture_output=True, text=True, timeout=900
    )
    assert child.returncode == 0, child.stderr
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got["note"].startswith(
        "perf_event_open: none; fallback: cpu time from CLOCK_THREAD_CPUTIME_ID, page-faults from getrusage, "
        "context-switches from getrusage; unavailable via perf: task-clock (failed: Too many open files)"
    ), got["note"]
    assert [r["task_id"] for r in got["pmu"]] == [0, 1, 2, 3, 4]
    for r in got["pmu"]:
        assert r["wall_ns"] > 0 and 0 < r["cpu_ns"] <= r["wall_ns"] * 1.01 + 1000, r
        assert r["page_faults"] >= 0 and r["ctx_switches"] >= 0
        assert (r["cycles"], r["instructions"], r["cache_misses"]) == (None, None, None)
