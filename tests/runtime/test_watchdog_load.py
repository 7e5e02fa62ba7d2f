"""The watchdog charges a task its CPU time and the time it is blocked, never the time it waits
for a core. Under a deterministic load (the run pinned to one CPU with busy-looping processes
pinned beside it, in a child process so that no pooled worker of this process escapes the pin),
a correct program whose tasks take several budgets of wall time runs to the end, and a spinning
kernel is still stopped; a kernel that sleeps or waits on a lock is stopped as blocked."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import tilescope as ts
from tilescope.errors import RuntimeFailure
from tilescope.launch.program import CompiledProgram
from tilescope.runtime import library

pytestmark = pytest.mark.serial  # it sizes its own CPU load: other tests running beside it would skew it

R, C = 8, 16
ROWS = 3  # tasks of the loaded run, one row each
HOGS = 8  # busy processes sharing the run's CPU: a task gets about 1/9 of it
BUDGET_S = 0.5  # the loaded run's task_timeout_s: each task needs well under it of CPU
TASK_CPU_S = 0.12  # what each task of the loaded run is sized to need


@ts.kernel
def churn(x: ts.Tensor[[1, C], ts.f32], y: ts.Out[[1, C], ts.f32], n: ts.Scalar[ts.i64]):
    acc = ts.load(x, [0, 0], [1, C])
    for _ in ts.range(0, n):
        acc = acc + 1.0 - 1.0  # exact for small integers, and not folded away (no fast-math)
    ts.store(y, [0, 0], acc * 2.0)


@ts.jit
def churns(x: ts.Tensor[[ROWS, C], ts.f32], y: ts.Out[[ROWS, C], ts.f32], n: ts.Scalar[ts.i64]):
    for r in ts.range(0, ROWS):
        churn(x[r : r + 1, :], y[r : r + 1, :], n)


@ts.kernel
def spin(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    acc = ts.load(x, [0, 0], [R, C])
    for _ in ts.range(0, 1000000000000):
        acc = acc * 1.0000001
    ts.store(y, [0, 0], acc)


@ts.jit
def spinner(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    spin(x, y)


# The child: pins itself to one CPU, sizes churn's tasks unloaded (one core to itself), starts
# the hogs on that CPU (each exits when the child does), runs, and prints one JSON line; churn's
# inputs and outputs go to `out`.
LOADED_RUN = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {{cpu}})
    import torch
    import tilescope as ts
    from tilescope.errors import RuntimeFailure

    prog = ts.CompiledProgram({work!r})

    def task_walls(info):
        return [(t.end_ns - t.start_ns) / 1e9 for t in info.report.tasks]

    result = {{}}
    if {mode!r} == "churn":
        x, y = torch.randint(-100, 100, ({rows}, {cols})).float(), torch.zeros({rows}, {cols})
        n0 = 20_000_000
        per_iter = min(task_walls(prog.run(x, y, n0, enable_trace=True, num_workers=1))) / n0
        result["n"] = n = max(1, int({task_cpu_s} / per_iter))
    hog = "import os\\nwhile os.getppid() == %d: pass" % os.getpid()
    hogs = [subprocess.Popen([sys.executable, "-S", "-c", hog]) for _ in range({hogs})]
    try:
        time.sleep(0.3)  # every hog is spinning
        if {mode!r} == "churn":
            info = prog.run(x, y, n, enable_trace=True, num_workers=1, task_timeout_s={budget})
            result["task_walls"] = task_walls(info)
            torch.save({{"x": x, "y": y}}, {out!r})
        else:
            try:
                prog.run(torch.randn({r}, {cols}), torch.zeros({r}, {cols}), num_workers=1, task_timeout_s=0.3)
            except RuntimeFailure as e:
                info = e.report.failure
                result["failure"] = e.failure.to_json()
                result["charged"] = [info.elapsed_ns, info.wall_ns, info.cpu_ns, info.blocked_ns]
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    print(json.dumps(result))
    """
)


def loaded_run(tmp_path, mode: str, prog: CompiledProgram) -> dict:
    """Run ``prog`` (``churns`` or ``spinner``) in a child pinned to one CPU beside HOGS busy loops."""
    library.load_core()  # NOTE: built here, once, not in the loaded child
    script = LOADED_RUN.format(
        mode=mode,
        work=str(prog.work_dir),
        out=str(tmp_path / "out.pt"),
        rows=ROWS,
        r=R,
        cols=C,
        hogs=HOGS,
        task_cpu_s=TASK_CPU_S,
        budget=BUDGET_S,
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_correct_program_on_a_loaded_cpu_is_not_stopped(tmp_path):
    got = loaded_run(tmp_path, "churn", churns.compile())
    saved = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(saved["y"], saved["x"] * 2.0, rtol=0, atol=0)
    walls = got["task_walls"]
    assert len(walls) == ROWS
    # the load was real: a task took longer than its budget in wall time, and was not stopped
    assert max(walls) > BUDGET_S, walls


def test_a_spinning_kernel_on_a_loaded_cpu_is_still_stopped(tmp_path):
    got = loaded_run(tmp_path, "spin", spinner.compile())
    assert "failure" in got, got  # the run was stopped
    f = got["failure"]
    assert (f["kind"], f["task_id"], f["kernel"]) == ("timeout", 0, "spin")
    m = re.match(
        r"task 0 \(kernel spin\) has used (\d+\.\d\d) s of CPU \((\d+\.\d\d) s wall\) on worker 0, "
        r"past task_timeout_s \(0\.3 s\); it was stopped$",
        f["message"],
    )
    assert m, f["message"]
    cpu_s, wall_s = float(m.group(1)), float(m.group(2))
    assert cpu_s >= 0.3
    charged, wall, cpu, blocked = got["charged"]
    assert charged == cpu + blocked and charged >= 0.3e9 and blocked < 0.05e9
    # it waited for a core most of the time, which was not charged
    assert wall_s > 2 * cpu_s, f["message"]
    assert f["details"][0].startswith(f"charged {charged / 1e9:.2f} s: {cpu / 1e9:.2f} s on the CPU + ")
    assert f"of {wall / 1e9:.2f} s wall" in f["details"][0]


SLEEPS = "sleep(3600);"
# NOTE: a normal mutex locked twice by one thread waits for itself, in the kernel (a futex)
WAITS_ON_A_LOCK = "static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; pthread_mutex_lock(&lock); pthread_mutex_lock(&lock);"


@pytest.mark.parametrize("blocking", [SLEEPS, WAITS_ON_A_LOCK], ids=["sleep", "lock"])
def test_a_blocked_kernel_is_stopped_as_blocked(blocking):
    prog = spinner.compile()
    src = prog.work_dir / "kernels" / "vec" / "spin.cpp"
    anchor = 'extern "C" void kernel_entry(const ts_arg *args) {\n'
    text = src.read_text()
    assert anchor in text
    src.write_text(
        "#include <pthread.h>\n#include <unistd.h>\n" + text.replace(anchor, anchor + f"    {blocking}\n")
    )
    prog = CompiledProgram.from_dir(prog.work_dir)
    x = torch.randn(R, C)
    library.load_core()
    with pytest.raises(RuntimeFailure) as e:
        prog.run(x, torch.zeros(R, C), task_timeout_s=0.3)
    f, info = e.value.failure, e.value.report.failure
    assert (f.kind, f.task_id, f.kernel) == ("timeout", 0, "spin")
    m = re.match(
        r"task 0 \(kernel spin\) has been blocked \(sleeping\) for (\d+\.\d\d) s \((\d+\.\d\d) s wall\) "
        r"on worker \d+, past task_timeout_s \(0\.3 s\); it was stopped$",
        f.message,
    )
    assert m, f.message
    assert float(m.group(1)) >= 0.3
    assert info.blocked_ns + info.cpu_ns == info.elapsed_ns >= 0.3e9 and info.cpu_ns < 0.005e9
    # what it was not charged (a busy machine may keep the thread from a core before it blocks)
    # is the wall time left over, and the failure says so
    waiting = info.wall_ns - info.elapsed_ns
    assert waiting >= 0, info
    assert f"not charged: {waiting / 1e9:.2f} s waiting for a core (of {info.wall_ns / 1e9:.2f} s wall)" in f.details[0]
    # the worker is reusable: a correct program runs right after
    x = torch.randint(-100, 100, (ROWS, C)).float()
    y = torch.zeros(ROWS, C)
    churns(x, y, 1000)
    torch.testing.assert_close(y, x * 2.0, rtol=0, atol=0)
