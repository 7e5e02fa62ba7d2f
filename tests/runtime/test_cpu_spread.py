"""The runtime core's spreading of waiting workers over CPUs (csrc/cpu_spread.hpp): which CPUs a
worker may move to, that a worker sharing its CPU with a worker of lower index moves to a free
one and keeps its whole affinity mask, and that nothing moves where it should not (no other
worker on its CPU, more workers than CPUs, within the rate limit)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tilescope as ts

pytestmark = pytest.mark.slow  # g++ builds

CSRC = Path(__file__).resolve().parents[2] / "src" / "tilescope" / "runtime" / "csrc"

PROGRAM = r"""
#include "cpu_spread.hpp"
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
using ts::rt::CpuSpread;
using ts::rt::free_cpus;

static void show(const char *name, const cpu_set_t &s) {
    std::printf("%s", name);
    for (int c = 0; c < 8; ++c) if (CPU_ISSET(c, &s)) std::printf(" %d", c);
    std::printf("\n");
}

static cpu_set_t of(std::initializer_list<int> cpus) {
    cpu_set_t s;
    CPU_ZERO(&s);
    for (int c : cpus) CPU_SET(c, &s);
    return s;
}

static bool mask_is(const cpu_set_t &want) {
    cpu_set_t now;
    return sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &want);
}

static bool pin(int cpu) {
    const cpu_set_t one = of({cpu});
    return sched_setaffinity(0, sizeof one, &one) == 0 && sched_getcpu() == cpu;
}

int main() {
    const int32_t none[] = {-1, -1};
    const int32_t two[] = {3, 5};
    const int32_t odd[] = {-1, 9999};
    show("free_all", free_cpus(of({0, 1, 2, 3}), 1, none, 2));     // all but its own
    show("free_others", free_cpus(of({0, 1, 2, 3, 5}), 0, two, 2)); // nor the others'
    show("free_none", free_cpus(of({0, 3}), 0, two, 2));           // nothing left
    show("free_odd", free_cpus(of({0, 1}), -1, odd, 2));           // unknown CPUs are ignored

    cpu_set_t whole;
    sched_getaffinity(0, sizeof whole, &whole);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) if (CPU_ISSET(c, &whole)) cpus.push_back(c);
    const int a = cpus[0];
    const cpu_set_t pair = of({cpus[0], cpus[1]});

    // Two workers of a spread over the pair; worker 0 waits on a, then worker 1 comes to a.
    // The kernel could move worker 1 on its own in between: tried a few times.
    int moved = 0, elsewhere = 0, kept_mask = 0;
    for (int attempt = 0; attempt < 5 && !moved; ++attempt) {
        CpuSpread spread(2, std::chrono::nanoseconds(0));
        std::thread w0([&] { pin(a); spread.waiting(0); });
        w0.join();  // its slot says a
        std::thread w1([&] {
            if (!pin(a) || sched_setaffinity(0, sizeof pair, &pair) != 0) return;
            moved = spread.waiting(1);
            elsewhere = sched_getcpu() != a;
            kept_mask = mask_is(pair);
        });
        w1.join();
    }
    std::printf("moved %d %d %d\n", moved, elsewhere, kept_mask);

    // Each case below must not move: waiting() says so, and the mask is the pair's still.
    auto stays = [&](CpuSpread &spread, int32_t me, bool may_move) {
        int ok = 0;
        std::thread w([&] {
            if (!pin(a) || sched_setaffinity(0, sizeof pair, &pair) != 0) return;
            ok = !spread.waiting(me, may_move) && mask_is(pair);
        });
        w.join();
        return ok;
    };
    auto on_a = [&](CpuSpread &spread, int32_t me) {
        std::thread w([&] { pin(a); spread.waiting(me); });
        w.join();
    };
    {  // alone on its CPU (worker 0 is on the other one)
        CpuSpread spread(2, std::chrono::nanoseconds(0));
        std::thread w([&] { pin(cpus[1]); spread.waiting(0); });
        w.join();
        std::printf("alone %d\n", stays(spread, 1, true));
    }
    {  // within the rate limit: moved once, back on a at once, not moved again
        CpuSpread spread(2, std::chrono::hours(1));
        on_a(spread, 0);
        int first = 0, again = 0;
        std::thread w([&] {
            if (!pin(a) || sched_setaffinity(0, sizeof pair, &pair) != 0) return;
            first = spread.waiting(1);
            if (!pin(a) || sched_setaffinity(0, sizeof pair, &pair) != 0) return;
            again = !spread.waiting(1) && mask_is(pair);
        });
        w.join();
        std::printf("limited %d %d\n", first, again);
    }
    {  // worker 0: no worker of lower index
        CpuSpread spread(2, std::chrono::nanoseconds(0));
        on_a(spread, 1);
        std::printf("first %d\n", stays(spread, 0, true));
    }
    {  // more workers than CPUs: nothing to give each
        CpuSpread spread(static_cast<int32_t>(cpus.size()) + 1, std::chrono::nanoseconds(0));
        on_a(spread, 0);
        std::printf("crowded %d\n", stays(spread, 1, true));
    }
    {  // the worker on its CPU sleeps: its CPU is free
        CpuSpread spread(2, std::chrono::nanoseconds(0));
        on_a(spread, 0);
        spread.sleeping(0);
        std::printf("asleep %d\n", stays(spread, 1, true));
    }
    {  // not asked to move (during a run); the orchestration's CPU
        CpuSpread spread(2, std::chrono::nanoseconds(0));
        on_a(spread, 0);
        on_a(spread, 1);  // moves away (worker 0 is on a) or was moved by the kernel
        const int during = stays(spread, 1, false);  // back on a, not moved: its slot says a
        int beside = 0, apart = 0;
        std::thread o([&] {
            if (!pin(a)) return;
            spread.orchestrating(true);
            beside = spread.beside_caller(0) && spread.beside_caller(1);
            spread.orchestrating(false);
            apart = !spread.beside_caller(0) && !spread.beside_caller(1);
        });
        o.join();
        std::printf("during %d %d %d\n", during, beside, apart);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> dict[str, str]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("spreading workers needs at least 2 CPUs this process may use")
    work = tmp_path_factory.mktemp("cpu_spread")
    src, exe = work / "cpu_spread.cpp", work / "cpu_spread"
    src.write_text(PROGRAM)
    flags = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"]
    subprocess.run(["g++", *flags, "-I", str(CSRC), str(src), "-o", str(exe)], check=True, capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in lines)


def test_free_cpus_are_the_allowed_ones_no_worker_is_on(out):
    assert out["free_all"] == "0 2 3"
    assert out["free_others"] == "1 2"
    assert out["free_none"] == ""
    assert out["free_odd"] == "0 1"


def test_a_worker_sharing_a_cpu_moves_and_keeps_its_mask(out):
    moved, elsewhere, kept_mask = out["moved"].split()
    assert moved == "1", "the later worker on a shared CPU did not move"
    assert elsewhere == "1"
    assert kept_mask == "1", "the move left the worker pinned"


def test_nothing_moves_without_a_reason(out):
    assert out["alone"] == "1", "a worker alone on its CPU moved"
    assert out["limited"] == "1 1", "a second move came within the rate limit"
    assert out["first"] == "1", "worker 0 (no worker of lower index) moved"
    assert out["crowded"] == "1", "a worker moved with more workers than CPUs"
    assert out["asleep"] == "1", "a worker moved off the CPU of a sleeping one"


def test_during_a_run_nothing_moves_and_the_orchestrations_cpu_is_known(out):
    during, beside, apart = out["during"].split()
    assert during == "1", "a worker moved while told not to"
    assert beside == "1", "workers on the orchestration's CPU were not seen beside it"
    assert apart == "1", "a waiting orchestration still kept its CPU"


# The wiring, on a real runtime: a child process starts a 2-worker runtime, puts both workers on
# one CPU (pinned there, then given their whole mask back, which leaves them where they are), and
# runs a program in a loop; between its runs the workers wait awake, and the later one should move
# off the shared CPU. Prints the number of runs until the workers were apart (-1: never).
APART = textwrap.dedent(
    """
    import os, sys
    import torch
    import tilescope as ts

    def stat(tid):  # (CPU time in ticks, the CPU it last ran on), from /proc
        fields = open(f"/proc/self/task/{{tid}}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12]), int(fields[36])

    torch.set_num_threads(1)  # no OpenMP threads started beside the runtime's
    prog = ts.CompiledProgram({work!r})
    x, y = torch.randn({rows}, {cols}), torch.empty({rows}, {cols})
    before = set(os.listdir("/proc/self/task"))
    for _ in range(200):
        prog.run(x, y, num_workers=2)
    started = sorted(set(os.listdir("/proc/self/task")) - before, key=lambda t: -stat(t)[0])
    assert len(started) == 3, started  # two workers and the watchdog, which hardly runs
    workers = started[:2]
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    for tid in workers:
        os.sched_setaffinity(int(tid), {{cpu}})
    for _ in range(20):  # they run there (a sleeping thread moves when it wakes)
        prog.run(x, y, num_workers=2)
    together = all(stat(t)[1] == cpu for t in workers)
    for tid in workers:
        os.sched_setaffinity(int(tid), allowed)
    apart = -1
    for i in range(500):
        prog.run(x, y, num_workers=2)
        if len({{stat(t)[1] for t in workers}}) == 2:
            apart = i
            break
    print(int(together), apart)
    """
)

R, C = 64, 256


@ts.kernel
def scale_rows(x: ts.Tensor[[8, C], ts.f32], y: ts.Out[[8, C], ts.f32]):
    t = ts.load(x, [0, 0], [8, C])
    ts.store(y, [0, 0], t * 2.0)


@ts.jit
def scaled(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    for r in ts.range(0, R, 8):
        scale_rows(x[r : r + 8, :], y[r : r + 8, :])


def test_a_runtimes_workers_put_on_one_cpu_move_apart(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("spreading workers needs at least 2 CPUs this process may use")
    work = scaled.compile(build_dir=str(tmp_path / "build")).work_dir
    script = APART.format(work=str(work), rows=R, cols=C)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    together, apart = done.stdout.split()
    assert together == "1", "the child could not put both workers on one CPU"
    assert int(apart) >= 0, "the workers stayed on one CPU for 500 runs"
