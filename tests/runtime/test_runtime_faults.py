"""Runtime faults that must become reports: worker threads the OS refuses, and what a run leaves
behind when it cannot start."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope import knobs

import vector_dag

ROOT = Path(__file__).resolve().parents[2]


def test_num_workers_is_bounded_with_the_reason():
    with pytest.raises(ts.ConfigError) as info:
        knobs.runtime_options({"num_workers": 100000})
    assert str(info.value) == (
        f"runtime_cfg['num_workers'] = 100000: expected an int in 0..{knobs.MAX_WORKERS} "
        "(each worker is an OS thread with its own stack; 0 = one per CPU)"
    )


LEAK_SCRIPT = textwrap.dedent(
    """
    import os, resource, sys
    sys.path.insert(0, {models!r})
    import torch
    import tilescope as ts
    import vector_dag

    dag = vector_dag.vector_dag.compile()
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    z = torch.zeros(vector_dag.R, vector_dag.C)
    dag.run(x, y, z, num_workers=2)
    expected = z.clone()
    threads = lambda: len(os.listdir("/proc/self/task"))
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
    before = threads()
    # room for a few 8 MiB thread stacks, not for 512
    resource.setrlimit(resource.RLIMIT_AS, (vm + 160 * 2**20, resource.RLIM_INFINITY))
    try:
        dag.run(x, y, z, num_workers=512)
        print("no error")
    except ts.RuntimeFailure as e:
        print("error:", str(e).splitlines()[0])
    print("threads left:", threads() - before)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    z.zero_()
    dag.run(x, y, z, num_workers=512)  # the same runtime starts every worker afresh
    print("retry:", "ok" if torch.equal(z, expected) else "wrong result")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_workers_the_os_refuses_are_a_report_and_leave_no_thread_behind(tmp_path):
    script = tmp_path / "leak.py"
    script.write_text(LEAK_SCRIPT.format(models=str(ROOT / "models")))
    env = dict(os.environ, TILESCOPE_BUILD_DIR=str(tmp_path / "builds"))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(
        line.startswith("error: [error] cannot start worker thread ")
        and line.endswith(" of 512 (Resource temporarily unavailable); run with fewer workers (num_workers / --workers)")
        for line in lines
    ), out.stdout
    # NOTE: no thread is left behind (a leak counts up); a thread of the first run's compile that
    # was still finishing when the count was taken may end meanwhile, which counts down.
    left = next(int(line.split(":")[1]) for line in lines if line.startswith("threads left:"))
    assert left <= 0 and "retry: ok" in lines, out.stdout


@pytest.mark.slow
def test_a_binary_copied_over_another_is_rebuilt_not_loaded(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path))
    prog = vector_dag.vector_dag.compile()
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    want = torch.zeros(vector_dag.R, vector_dag.C)
    prog.run(x, y, want)
    kernels = prog.work_dir / "kernels" / "vec"
    (kernels / "add.so").write_bytes((kernels / "combine.so").read_bytes())  # cp combine.so add.so
    capsys.readouterr()
    again = ts.CompiledProgram.from_dir(prog.work_dir)
    err = capsys.readouterr().err
    assert (
        "[cpp->.so] 1 binary not built from its source (replaced or corrupt): kernels/vec/add.so; rebuilding 1 of 6"
        in err
    ), err
    got = torch.zeros(vector_dag.R, vector_dag.C)
    again.run(x, y, got)
    assert torch.equal(got, want)
    capsys.readouterr()
    ts.CompiledProgram.from_dir(prog.work_dir)  # the rebuilt binary is recorded
    assert "no edits since last build; reusing 6 binaries" in capsys.readouterr().err


def _kernel_calls_exit(tmp_path) -> ts.CompiledProgram:
    """vector_dag with its first kernel (add, task 0) edited to call exit(0)."""
    prog = vector_dag.vector_dag.compile(build_dir=str(tmp_path / "builds"))
    src = prog.work_dir / "kernels" / "vec" / "add.cpp"
    text = src.read_text()
    anchor = "extern \"C\" void kernel_entry(const ts_arg *args) {\n"
    assert anchor in text
    src.write_text("#include <cstdlib>\n" + text.replace(anchor, anchor + "    std::exit(0);\n", 1))
    return ts.CompiledProgram.from_dir(prog.work_dir)


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {models!r})
    import torch
    import tilescope as ts
    import vector_dag

    prog = ts.CompiledProgram.from_dir({work!r})
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    prog.run(x, y, torch.zeros(vector_dag.R, vector_dag.C))
    print("the run returned")
    """
)


@pytest.mark.slow
def test_a_kernel_calling_exit_0_ends_the_process_with_status_1_naming_the_task(tmp_path):
    prog = _kernel_calls_exit(tmp_path)
    script = tmp_path / "exits.py"
    script.write_text(EXIT_SCRIPT.format(models=str(ROOT / "models"), work=str(prog.work_dir)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert "the run returned" not in out.stdout
    assert (
        "[tilescope] exit() was called by task 0 (kernel add) on worker " in out.stderr
        and ": the run did not finish and its outputs are not valid; the process exits with status 1, "
        "not the status exit() was given" in out.stderr
    ), out.stderr[-2000:]


@pytest.mark.slow
def test_an_isolated_kernel_calling_exit_is_an_exit_failure_of_its_task(tmp_path):
    prog = _kernel_calls_exit(tmp_path)
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run(x, y, torch.zeros(vector_dag.R, vector_dag.C), isolate=True)
    f = info.value.failure
    assert (f.kind, f.task_id, f.kernel) == ("exit", 0, "add") and f.worker >= 0
    assert f.message == (
        "task 0 (kernel add) called exit() during the run: the run did not finish and its outputs are not valid"
    )


@pytest.mark.slow
def test_concurrent_runs_of_one_build_write_their_outputs_one_run_at_a_time(tmp_path, monkeypatch):
    import threading
    import time

    from tilescope.debug import observers

    prog = vector_dag.vector_dag.compile(build_dir=str(tmp_path / "builds"))
    spans: list[tuple[float, float, str]] = []
    real = {cls: cls.finish for cls in (observers.TensorDumpObserver, observers.DepsObserver)}

    def timed(cls):
        def finish(self, build, report, failed):
            t0 = time.perf_counter()
            time.sleep(0.01)  # widen the window a race would need
            made = real[cls](self, build, report, failed)
            spans.append((t0, time.perf_counter(), threading.current_thread().name))
            return made

        return finish

    for cls in real:
        monkeypatch.setattr(cls, "finish", timed(cls))
    errors: list[BaseException] = []

    def runs(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        x, y = (torch.randn(vector_dag.R, vector_dag.C, generator=g) for _ in range(2))
        try:
            for _ in range(6):
                prog.run(x, y, torch.zeros(vector_dag.R, vector_dag.C), enable_dump_tensor=2, enable_dep_gen=True)
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    threads = [threading.Thread(target=runs, args=(i,), name=f"t{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(spans) == 3 * 6 * 2
    # a run's outputs are written as one block: no two threads' writes overlap in time
    by_thread: dict[str, list[tuple[float, float]]] = {}
    for t0, t1, name in spans:
        by_thread.setdefault(name, []).append((t0, t1))
    blocks = sorted((min(a for a, _ in v[i : i + 2]), max(b for _, b in v[i : i + 2]), name)
                    for name, v in by_thread.items() for i in range(0, len(v), 2))  # fmt: skip
    for (_, end, first), (start, _, second) in zip(blocks, blocks[1:]):
        assert end <= start, f"{first} and {second} wrote dfx_outputs at the same time"


BIG = 1024


@ts.kernel
def big_tile(x: ts.Tensor[[BIG, BIG], ts.f32], y: ts.Out[[BIG, BIG], ts.f32]):
    t = ts.load(x, [0, 0], [BIG, BIG])  # 4 MiB, with temporaries past the 8 MiB default stack
    ts.store(y, [0, 0], ts.exp(t) * t + t)


@ts.jit(local_memory_bytes=16 << 20)
def big_tiles(x: ts.Tensor[[BIG, BIG], ts.f32], y: ts.Out[[BIG, BIG], ts.f32]):
    big_tile(x, y)


@pytest.mark.slow
def test_tiles_as_large_as_the_local_memory_allows_run_on_workers_sized_for_them():
    from tilescope.runtime.host_memory import worker_stack_mib

    assert worker_stack_mib(256 << 10) == 0 and worker_stack_mib(16 << 20) == 36
    x = torch.randn(BIG, BIG)
    small = torch.zeros(vector_dag.R, vector_dag.C)
    vector_dag.vector_dag(torch.ones_like(small), torch.ones_like(small), small, num_workers=2)  # default stacks
    for _ in range(2):  # the pooled workers are restarted with larger stacks, then reused
        y = torch.zeros(BIG, BIG)
        big_tiles(x, y, num_workers=2)
        torch.testing.assert_close(y, torch.exp(x) * x + x)


INTERRUPT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch
    import tilescope as ts
    from tilescope.errors import RunInterrupted
    from tilescope.runtime import library

    @ts.kernel
    def spin(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        t = ts.load(x, [0, 0], [8, 16])
        for i in ts.range(0, 1 << 40):
            t = t * 1.0000001
        ts.store(y, [0, 0], t)

    @ts.kernel
    def copy(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))

    @ts.jit
    def spins(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        spin(x, y)
        copy(x, y)

    @ts.jit
    def copies(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        copy(x, y)

    library.load_core()
    prog, again = spins.compile(), copies.compile()
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "spinning-orchestration":  # the orchestration spins in its own code after submitting
        src = prog.work_dir / "orchestration" / "spins.cpp"
        text = src.read_text()
        src.write_text(text.replace("    return orch.status();", "    for (volatile long i = 0;; i = i + 1) {} return orch.status();", 1))
        prog = ts.CompiledProgram.from_dir(prog.work_dir)
    if mode == "unstoppable-kernel":  # the kernel blocks the signal that stops it
        src = next((prog.work_dir / "kernels").rglob("spin.cpp"))
        entry = 'extern "C" void kernel_entry(const ts_arg *args) {\\n'
        block = "    sigset_t s; sigemptyset(&s); sigaddset(&s, SIGRTMIN + 3); pthread_sigmask(SIG_BLOCK, &s, nullptr);\\n"
        src.write_text("#include <csignal>\\n#include <pthread.h>\\n" + src.read_text().replace(entry, entry + block, 1))
        prog = ts.CompiledProgram.from_dir(prog.work_dir)
    x, y = torch.randn(8, 16), torch.zeros(8, 16)
    print("running", flush=True)
    t0 = time.perf_counter()
    try:
        prog.run(x, y, task_timeout_s=0, enable_trace=True, num_workers=2, isolate=mode == "isolate")
        print("returned", flush=True)
    except RunInterrupted as e:
        f = e.failure
        print(f"interrupted in {time.perf_counter() - t0:.1f}s: {f.kind} {f.task_id} {f.kernel}", flush=True)
    except KeyboardInterrupt:  # isolated: the caller's own Ctrl-C, the child stopped and reported
        print(f"interrupted in {time.perf_counter() - t0:.1f}s: KeyboardInterrupt", flush=True)
    z = torch.zeros(8, 16)
    again.run(x, z, num_workers=2)
    print("usable:", torch.equal(z, x), flush=True)
    """
)


def _child_spinning(pid: int) -> bool:
    """Whether a child of ``pid`` has used more than 4 s of CPU: past its start-up (torch's import
    alone takes over a second), so the isolated run spins in the kernel."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and int(fields[11]) > 4 * os.sysconf("SC_CLK_TCK"):  # ppid, utime
            return True
    return False


def _interrupted(tmp_path, signals: int, *argv: str) -> subprocess.CompletedProcess:
    import signal
    import time

    script = tmp_path / "spins.py"
    script.write_text(INTERRUPT_SCRIPT)
    env = dict(os.environ, TILESCOPE_BUILD_DIR=str(tmp_path / "builds"))
    proc = subprocess.Popen(
        [sys.executable, "-u", str(script), *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline() == "running\n"
    time.sleep(1.0)  # inside the spinning kernel
    if "isolate" in argv:  # wait for the isolated child to spin in the kernel (its start-up takes a while)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not _child_spinning(proc.pid):
            time.sleep(0.2)
    for _ in range(signals):
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        time.sleep(0.5)
    out, err = proc.communicate(timeout=600)  # only a stop that never lands reaches it
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
def test_ctrl_c_stops_a_spinning_run_with_a_report_and_leaves_the_build_usable(tmp_path):
    done = _interrupted(tmp_path, 1)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("interrupted in ") and lines[0].endswith("s: interrupted 0 spin"), done.stdout
    assert float(lines[0].split()[2][:-2]) < 2.0  # stopped within a second or so, not at the end
    assert lines[1] == "usable: True"
    assert "[tilescope] interrupt: stopping the run (Ctrl-C again exits at once)" in done.stderr
    assert (
        "[INTERRUPTED] Ctrl-C (SIGINT): stopped task 0 (kernel spin) on worker " in done.stderr
        and "; the tasks not yet run were skipped" in done.stderr
    ), done.stderr
    assert "dfx_outputs/trace.json" in done.stderr  # what was recorded is written


@pytest.mark.slow
def test_ctrl_c_stops_an_orchestration_spinning_in_its_own_code(tmp_path):
    done = _interrupted(tmp_path, 1, "spinning-orchestration")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[1] == "usable: True", done.stdout
    assert "[INTERRUPTED] Ctrl-C (SIGINT): stopped the orchestration (2 task(s) submitted so far)" in done.stderr


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once(tmp_path):
    # a kernel that blocks the stop signal cannot be stopped: the second Ctrl-C exits
    done = _interrupted(tmp_path, 2, "unstoppable-kernel")
    assert done.returncode == 130, (done.returncode, done.stderr[-3000:])
    assert "[tilescope] second interrupt: exiting now (status 130)" in done.stderr
    assert "usable" not in done.stdout


@pytest.mark.slow
def test_ctrl_c_stops_an_isolated_run_and_its_child(tmp_path):
    done = _interrupted(tmp_path, 1, "isolate")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("interrupted in ") and lines[0].endswith("s: KeyboardInterrupt"), done.stdout
    assert lines[1] == "usable: True", done.stdout
    assert "[INTERRUPTED] Ctrl-C (SIGINT): stopped task 0 (kernel spin) on worker " in done.stderr
    assert "Traceback" not in done.stderr


@ts.jit(local_memory_bytes=knobs.MAX_LOCAL_MEMORY_BYTES)
def huge_tiles(x: ts.Tensor[[BIG, BIG], ts.f32], y: ts.Out[[BIG, BIG], ts.f32]):
    big_tile(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True])
def test_local_memory_the_machine_cannot_give_is_refused_before_a_thread_starts(isolate):
    # 2 TiB stacks: more than this machine's memory, which the OS would refuse as "cannot start worker thread"
    x, y = torch.randn(BIG, BIG), torch.zeros(BIG, BIG)
    with pytest.raises(ts.ConfigError) as info:
        huge_tiles(x, y, num_workers=2, isolate=isolate)
    said = str(info.value)
    assert said.startswith("local_memory_bytes=1099511627776 (1 TiB) of build huge_tiles: each of the 2 worker(s) "
                           "reserves a stack of 2 TiB (twice the local memory, plus 4 MiB), 4 TiB in all, more than "
                           "this machine's ")  # fmt: skip
    assert "compile with a smaller compile_cfg local_memory_bytes (at most " in said
    assert not y.any()


@pytest.mark.slow
def test_a_build_edited_to_an_overflowing_local_memory_is_refused_not_run_on_cut_stacks():
    # 2**62 bytes made a stack of 2**43 + 4 MiB, which the core's 32-bit field cut to 4 MiB: a segfault
    prog = big_tiles.compile()
    config = prog.work_dir / "kernel_config.py"
    text = config.read_text()
    assert f"'local_memory_bytes': {16 << 20}" in text
    config.write_text(text.replace(f"'local_memory_bytes': {16 << 20}", f"'local_memory_bytes': {2**62}"))
    edited = ts.CompiledProgram.from_dir(prog.work_dir)
    x, y = torch.randn(BIG, BIG), torch.zeros(BIG, BIG)
    for isolate in (False, True):
        with pytest.raises(ts.ConfigError, match=r"^local_memory_bytes=4611686018427387904 \(4\.194e\+06 TiB\) of "
                                                 r"build big_tiles: more than the 1 TiB the runtime can give a worker"):
            edited.run(x, y, num_workers=2, isolate=isolate)
    assert not y.any()


STACKS_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    sys.path.insert(0, {tests!r})
    import torch
    import tilescope as ts
    from test_runtime_faults import BIG, big_tiles

    x, y = torch.randn(BIG, BIG), torch.zeros(BIG, BIG)
    big_tiles(x, y, num_workers=1)  # compiled and loaded
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 160 * 2**20, resource.RLIM_INFINITY))  # room for 4 stacks of 36 MiB
    try:
        big_tiles(x, y, num_workers=16)
        print("no error")
    except ts.RuntimeFailure as e:
        print("error:", str(e).splitlines()[0])
    """
)


@pytest.mark.slow
def test_workers_the_os_refuses_their_enlarged_stacks_name_the_stack_and_the_local_memory(tmp_path):
    script = tmp_path / "stacks.py"
    script.write_text(STACKS_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = dict(os.environ, TILESCOPE_BUILD_DIR=str(tmp_path / "builds"), PYTHONPATH=os.pathsep.join(
        [str(ROOT / "models"), os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("error:"))
    assert line.startswith("error: [error] cannot start worker thread ") and line.endswith(
        " of 16 with a stack of 36 MiB each (twice the build's local_memory_bytes, plus 4 MiB) (Resource temporarily "
        "unavailable); run with fewer workers (num_workers / --workers), or compile with a smaller local_memory_bytes"
    ), out.stdout
