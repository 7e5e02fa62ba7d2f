"""tilescope sweep on the local engine: the grid's cases and their errors, a sweep of a model
script over platforms and seeds whose one failing case is triaged in the report, a case that
dies, a case past its timeout, --resume, an interrupted sweep, and the offline page."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tilescope.cli import main
from tilescope.harness.sweep.grid import GridError, cases

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''
import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, run_jit


def build(scale):
    @ts.kernel
    def scaled(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * scale)

    @ts.jit
    def twice(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]):
        for r in ts.range(0, 16, 8):
            scaled(x[r : r + 8, :], y[r : r + 8, :])

    return twice


def golden(t):
    t["y"][:] = t["x"] * 2.0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("-p", default="sim")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    prog = build(2.5 if a.seed == 3 else 2.0)  # the seed-3 case carries a defect
    specs = [TensorSpec("x", [16, 16], torch.float32), TensorSpec("y", [16, 16], torch.float32, is_output=True)]
    r = run_jit(prog, specs, golden_fn=golden, seed=a.seed, save_data=True, runtime_cfg={"platform": a.p})
    raise SystemExit(0 if r.passed else 1)
'''


def test_the_grid_is_the_product_of_its_dimensions_in_order():
    got = cases(["platform=sim,interp", "seed=0:3"], ["python", "m.py", "-p", "{platform}", "--seed={seed}"])
    assert [c.id for c in got] == [f"c{i:04d}" for i in range(6)]
    assert [c.label for c in got[:4]] == ["platform=sim seed=0", "platform=sim seed=1", "platform=sim seed=2",
                                          "platform=interp seed=0"]  # fmt: skip
    assert got[4].argv == ("python", "m.py", "-p", "interp", "--seed=1")
    assert cases(["n=8:0:-4"], ["echo", "{n}", "{{literal}}"])[1].argv == ("echo", "4", "{literal}")


@pytest.mark.parametrize(
    ("grids", "command", "message"),
    [
        (["seed"], ["echo", "{seed}"], "--grid 'seed': expected NAME=VALUES"),
        (["seed=a:b"], ["echo", "{seed}"], "--grid 'seed=a:b': START:STOP[:STEP] takes integers"),
        (["seed=0:4:0"], ["echo", "{seed}"], "a range is START:STOP or START:STOP:STEP, STEP not 0"),
        (["seed=4:0"], ["echo", "{seed}"], "--grid 'seed=4:0' gives no values"),
        (["seed=1,,2"], ["echo", "{seed}"], "--grid 'seed=1,,2' gives no values"),
        (["seed=0:2", "seed=3"], ["echo", "{seed}"], "--grid seed is given twice"),
        (["seed=0:2"], ["echo", "{seeds}"], "the command uses {seeds}, which no --grid names: add --grid seeds=..."),
        (["seed=0:2", "p=sim"], ["echo", "{seed}"], "--grid p is not used by the command"),
        (["seed=0:2"], ["echo", "{seed"], "is not a template"),
        (["seed=0:2"], [], "no command: give it after --"),
    ],
)
def test_a_bad_grid_is_an_error_naming_it(grids, command, message):
    with pytest.raises(GridError, match=None) as e:
        cases(grids, command)
    assert message in str(e.value)


def test_bad_arguments_exit_2_and_nothing_is_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "--grid", "seed=0:2", "--out", str(out), "--", sys.executable, "-c", "print({seed})"]) == 0
    before = (out / "sweep.json").read_text()
    assert main(["sweep", "--grid", "seed=0:2", "--out", str(out), "--", sys.executable, "-c", "print({seed})"]) == 2
    assert "already holds a sweep: add --resume to finish it" in capsys.readouterr().err
    assert main(["sweep", "--resume", "--grid", "seed=0:3", "--out", str(out), "--", sys.executable, "-c",
                 "print({seed})"]) == 2  # fmt: skip
    assert "holds the sweep of another command or grid" in capsys.readouterr().err
    assert (out / "sweep.json").read_text() == before
    assert main(["sweep", "--resume", "--grid", "seed=0:2", "--out", str(tmp_path / "none"), "--", "echo", "{seed}"]) == 2
    assert "holds no sweep.json to resume" in capsys.readouterr().err
    assert main(["sweep", "--grid", "seed=0:2", "--out", str(tmp_path / "o2"), "--", "echo", "{sed}"]) == 2
    assert "the command uses {sed}, which no --grid names" in capsys.readouterr().err


@pytest.mark.slow  # g++ builds and a triage
def test_a_model_sweep_names_the_failing_cases_culprit(tmp_path):
    script = tmp_path / "scaled_model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "sweep"
    rc = main(["sweep", "--grid", "platform=sim,interp", "--grid", "seed=0:4", "--out", str(out), "-j", "2", "--",
               sys.executable, str(script), "-p", "{platform}", "--seed", "{seed}"])  # fmt: skip
    assert rc == 1
    data = json.loads((out / "sweep.json").read_text())
    assert data["summary"] == {"pass": 6, "fail": 2, "pending": 0}
    by = {(c["values"]["platform"], c["values"]["seed"]): c for c in data["cases"]}
    assert {k for k, c in by.items() if c["status"] == "fail"} == {("sim", "3"), ("interp", "3")}
    t = by[("sim", "3")]["triage"]
    assert t["ran"] and t["category"] == "algorithm" and t["kernel"] == "scaled", t
    assert t["line"].endswith(f"{script.name}:{SCRIPT.splitlines().index(next(x for x in SCRIPT.splitlines() if '* scale)' in x)) + 1}")
    report = json.loads((out / t["report"]).read_text())
    assert report["culprit"]["kernel"] == "scaled" and Path(out, t["build"], "data").is_dir()
    assert by[("sim", "0")]["triage"] is None and by[("sim", "0")]["builds"]
    page = (out / "sweep.html").read_text()
    assert "6 pass, 2 fail" in page and f'href="{t["report"]}"' in page and "algorithm" in page
    assert (out / by[("sim", "3")]["log"]).read_text().count("[FAIL]") == 1


def test_a_dying_case_and_a_hanging_one_are_reported_and_resume_reruns_only_what_did_not_finish(tmp_path):
    out = tmp_path / "out"
    marker = tmp_path / "second_time"
    code = ("import os, signal, sys, time, pathlib; n = {n}; m = pathlib.Path(sys.argv[1]); "
            "n == 1 and not m.exists() and os.kill(os.getpid(), signal.SIGKILL); "
            "n == 2 and time.sleep(600); sys.exit(0)")  # fmt: skip
    argv = ["sweep", "--grid", "n=0:4", "--out", str(out), "--timeout", "90", "--no-triage", "--", sys.executable,
            "-c", code, str(marker)]  # fmt: skip
    assert main(argv) == 1
    cases_ = {c["values"]["n"]: c for c in json.loads((out / "sweep.json").read_text())["cases"]}
    assert [cases_[n]["status"] for n in "0123"] == ["pass", "error", "timeout", "pass"]
    assert cases_["1"]["why"] == "exit status -9 (signal 9)"
    assert cases_["2"]["why"] == "still running after 90 s: its process group was killed"
    # the dead case runs again (the marker lets it pass now); the timeout is a result and is kept
    marker.write_text("x")
    assert main(["sweep", "--resume", *argv[1:]]) == 1
    again = {c["values"]["n"]: c for c in json.loads((out / "sweep.json").read_text())["cases"]}
    assert [again[n]["status"] for n in "0123"] == ["pass", "pass", "timeout", "pass"]
    assert again["0"] == cases_["0"] and again["2"] == cases_["2"]


def test_what_a_case_writes_to_its_result_path_is_its_records_result(tmp_path, capsys):
    out = tmp_path / "out"
    code = ("import json, os, sys; n = {n}; p = os.environ['TILESCOPE_SWEEP_RESULT']; "
            "n < 2 and open(p, 'w').write(json.dumps({{'n': n, 'err': n / 4}}) if n == 0 else '{{not json'); "
            "sys.exit(0)")  # fmt: skip
    assert main(["sweep", "--grid", "n=0:3", "--out", str(out), "--no-triage", "--", sys.executable, "-c", code]) == 0
    got = {c["values"]["n"]: c for c in json.loads((out / "sweep.json").read_text())["cases"]}
    assert got["0"]["result"] == {"n": 0, "err": 0.0} and "result_error" not in got["0"]
    assert "result" not in got["1"] and got["1"]["result_error"].startswith("result.json cannot be read: ")
    assert "result" not in got["2"] and "result_error" not in got["2"]  # it wrote none
    capsys.readouterr()
    assert main(["sweep", "--engine", "local", "--ray-shared", "--grid", "n=0:1", "--out", str(tmp_path / "o2"), "--",
                 "echo", "{n}"]) == 2  # fmt: skip
    assert "--ray-shared is for --engine ray (the engine is local)" in capsys.readouterr().err


def test_a_case_leaves_nothing_running_and_a_users_folder_is_never_a_sweeps_out(tmp_path, capsys):
    pid_file = tmp_path / "orphan.pid"
    # each case starts a child that outlives it (its pid written before the case exits), then writes its result
    code = (
        "import os, subprocess, sys, time, pathlib\n"
        "p = pathlib.Path(sys.argv[1] + '{n}')\n"
        "child = 'import os, sys, time, pathlib; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(600)'\n"
        "subprocess.Popen([sys.executable, '-c', child, str(p)])\n"
        "while not (p.exists() and p.read_text()):\n"
        "    time.sleep(0.05)\n"
        "open(os.environ['TILESCOPE_SWEEP_RESULT'], 'w').write('NaN' if {n} else '{{}}')\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", "--grid", "n=0:2", "--out", str(out), "--no-triage", "--", sys.executable, "-c", code,
                 str(pid_file)]) == 0  # fmt: skip
    got = {c["values"]["n"]: c for c in json.loads((out / "sweep.json").read_text())["cases"]}
    assert got["0"]["result"] == {} and got["1"]["result_error"].startswith("result.json cannot be read: ValueError: NaN")
    for n in "01":  # the child the case left was killed with its process group when the case ended
        pid = int(Path(f"{pid_file}{n}").read_text())
        assert _dead(pid), f"case {n}'s child {pid} outlived it"
    mine = tmp_path / "mine"
    (mine / "cases" / "c0000").mkdir(parents=True)
    (mine / "cases" / "c0000" / "output.log").write_text("precious")
    capsys.readouterr()
    assert main(["sweep", "--grid", "n=0:1", "--out", str(mine), "--", "echo", "{n}"]) == 2
    assert f"--out {mine} is not empty and holds no sweep: choose a new folder" in capsys.readouterr().err
    assert (mine / "cases" / "c0000" / "output.log").read_text() == "precious"


def _dead(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie not yet reaped), waiting while SIGKILL lands."""
    for _ in range(600):  # NOTE: a killed process ends at its next scheduling; a live one sleeps 600 s
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


def test_two_runs_into_one_out_the_second_is_refused(tmp_path, capsys):
    from tilescope.harness.sweep.sweep_report import Claimed

    out = tmp_path / "out"
    held = Claimed(out)  # a sweep (or problems --engine) running into it
    try:
        assert main(["sweep", "--grid", "n=0:1", "--out", str(out), "--", "echo", "{n}"]) == 2
        assert f"another run is writing into --out {out}: wait for it to end" in capsys.readouterr().err
        assert main(["problems", str(ROOT / "problems"), "--problem", "level1/relu", "--engine", "local", "--out",
                     str(out)]) == 1  # fmt: skip
        assert f"another run is writing into --out {out}" in capsys.readouterr().err
        assert list(out.iterdir()) == []
    finally:
        held.release()
    assert main(["sweep", "--grid", "n=0:1", "--out", str(out), "--no-triage", "--", "echo", "{n}"]) == 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_sweep_keeps_what_ended_and_says_how_to_finish(tmp_path, stop):
    out = tmp_path / "out"
    code = "import sys, time; time.sleep(0 if {n} == 0 else 600)"
    p = subprocess.Popen([sys.executable, "-m", "tilescope", "sweep", "--grid", "n=0:2", "--out", str(out), "-j", "2",
                          "--", sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)  # fmt: skip
    for _ in range(6000):  # the first case has ended and the second is running
        done = json.loads((out / "sweep.json").read_text())["cases"] if (out / "sweep.json").is_file() else []
        if done and (out / "cases" / "c0001" / "output.log").exists():
            break
        time.sleep(0.1)
    os.kill(p.pid, stop)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "interrupted: finish it with tilescope sweep --resume" in err
    data = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in data["cases"]] == ["pass", "interrupted"]


@pytest.mark.slow  # a local Ray cluster, g++ builds and a triage
@pytest.mark.serial  # one local Ray on the machine at a time
def test_the_same_sweep_on_a_local_ray_cluster_brings_the_failures_files_back(tmp_path):
    script = tmp_path / "scaled_model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "sweep"
    rc = main(["sweep", "--engine", "ray", "--grid", "platform=sim,interp", "--grid", "seed=0:4", "--out", str(out),
               "--", sys.executable, str(script), "-p", "{platform}", "--seed", "{seed}"])  # fmt: skip
    assert rc == 1
    data = json.loads((out / "sweep.json").read_text())
    assert data["engine"] == "ray" and data["summary"] == {"pass": 6, "fail": 2, "pending": 0}
    assert data["ray_nodes"] == ["127.0.0.1"]  # the local Ray the sweep started lives on the loopback
    by = {(c["values"]["platform"], c["values"]["seed"]): c for c in data["cases"]}
    t = by[("interp", "3")]["triage"]
    assert t["ran"] and (t["category"], t["kernel"], t["op"]) == ("algorithm", "scaled", "mul"), t
    # the failure's build, its data and its triage report came back through the object store
    assert Path(out, t["build"], "data", "in").is_dir() and json.loads((out / t["report"]).read_text())["culprit"]
    assert sorted(p.name for p in (out / "cases" / by[("sim", "0")]["id"]).iterdir()) == ["output.log"]


@pytest.mark.slow  # a local Ray cluster
@pytest.mark.serial  # one local Ray on the machine at a time
def test_a_ray_worker_killed_mid_sweep_is_reported_and_the_sweep_finishes(tmp_path):
    out = tmp_path / "out"
    code = "import os, sys; {n} == 2 and os.kill(os.getppid(), 9); sys.exit(0)"  # case 2 kills its Ray worker
    rc = main(["sweep", "--engine", "ray", "--grid", "n=0:4", "--out", str(out), "--", sys.executable, "-c", code])
    assert rc == 1
    got = {c["values"]["n"]: c for c in json.loads((out / "sweep.json").read_text())["cases"]}
    assert [got[n]["status"] for n in "0123"] == ["pass", "pass", "error", "pass"]
    assert got["2"]["why"] == "the Ray worker running it died (its process was killed or crashed)"


def test_the_ray_engine_without_a_cluster_to_reach_says_so(tmp_path, capsys):
    rc = main(["sweep", "--engine", "ray", "--ray-address", "ray://127.0.0.1:9", "--grid", "n=0:2", "--out",
               str(tmp_path / "out"), "--", "echo", "{n}"])  # fmt: skip
    assert rc == 2
    assert "cannot start or reach the Ray cluster at ray://127.0.0.1:9" in capsys.readouterr().err
    rc = main(["sweep", "--engine", "ray", "--ray-address", "127.0.0.1:9", "--grid", "n=0:2", "--out",
               str(tmp_path / "out2"), "--", "echo", "{n}"])  # fmt: skip
    assert rc == 2  # nothing listens there: said at once, not after Ray's minutes of retries
    assert "cannot reach the Ray cluster at 127.0.0.1:9: Connection refused" in capsys.readouterr().err


def test_a_case_that_starts_while_the_sweep_stops_is_killed_as_it_starts(tmp_path):
    # Ctrl-C between a case's log being made and its process being started: stop_all() found
    # nothing to kill, and the sweep waited for the case to end on its own
    from tilescope.harness.sweep import case_run

    case_run.stop_all()
    try:
        rc = case_run.run_in_group([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "log",
                                   dict(os.environ), 120, None)  # fmt: skip
    finally:
        case_run.resume_all()
    assert rc == -signal.SIGKILL  # killed as it started, not after the 120 s bound (None)
