"""The runtime core's spreading of waiting workers over CPUs (csrc/cpu_spread.hpp): which CPUs a
worker may move to, that a worker sharing its CPU with a worker of lower index moves to a free
one and keeps its whole affinity mask, and that nothing moves where it should not (no other
worker on its CPU, more workers than CPUs, within the rate limit)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "src" / "tilescope" / "runtime" / "csrc"

PROGRAM = r"""
#include "cpu_spread.hpp"
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
    // The kernel could move worker 1 on its own in between: tried a few times (past the rate limit).
    int moved = 0, elsewhere = 0, kept_mask = 0, unshared = 0, limited = 0;
    for (int attempt = 0; attempt < 5 && !moved; ++attempt) {
        CpuSpread spread(2);
        std::thread w0([&] { pin(a); spread.waiting(0); });
        w0.join();  // its slot says a
        std::thread w1([&] {
            if (!pin(a) || sched_setaffinity(0, sizeof pair, &pair) != 0) return;
            moved = spread.waiting(1);
            elsewhere = sched_getcpu() != a;
            cpu_set_t now;
            sched_getaffinity(0, sizeof now, &now);
            kept_mask = CPU_EQUAL(&now, &pair);
            // on a CPU of its own now: waiting again does not move it
            unshared = !spread.waiting(1);
            // back on a at once: the rate limit holds it there for now
            pin(a);
            sched_setaffinity(0, sizeof pair, &pair);
            limited = !spread.waiting(1) && sched_getcpu() == a;
        });
        w1.join();
    }
    std::printf("moved %d %d %d %d %d\n", moved, elsewhere, kept_mask, unshared, limited);

    // Worker 0 never moves: no worker of lower index.
    {
        CpuSpread spread(2);
        int stayed = 0;
        std::thread w([&] { pin(a); sched_setaffinity(0, sizeof pair, &pair); stayed = !spread.waiting(0) && sched_getcpu() == a; });
        w.join();
        std::printf("first %d\n", stayed);
    }
    // More workers than CPUs: nothing to give each, nothing done.
    {
        CpuSpread spread(static_cast<int32_t>(cpus.size()) + 1);
        int stayed = 0;
        std::thread w0([&] { pin(a); spread.waiting(0); });
        w0.join();
        std::thread w1([&] { pin(a); sched_setaffinity(0, sizeof pair, &pair); stayed = !spread.waiting(1) && sched_getcpu() == a; });
        w1.join();
        std::printf("crowded %d\n", stayed);
    }
    // Not asked to move (during a run): it stays, and its CPU is noted.
    {
        CpuSpread spread(2);
        int stayed = 0;
        std::thread w0([&] { pin(a); spread.waiting(0); });
        w0.join();
        std::thread w1([&] { pin(a); sched_setaffinity(0, sizeof pair, &pair); stayed = !spread.waiting(1, false) && sched_getcpu() == a; });
        w1.join();
        // the orchestration on a: worker 1 is beside it, until the orchestration waits
        int beside = 0, apart = 0;
        std::thread o([&] {
            pin(a);
            spread.orchestrating(true);
            beside = spread.beside_caller(1) && spread.beside_caller(0);
            spread.orchestrating(false);
            apart = !spread.beside_caller(1);
        });
        o.join();
        std::printf("during %d %d %d\n", stayed, beside, apart);
    }
    // Asleep: a worker that sleeps leaves its CPU to the others.
    {
        CpuSpread spread(2);
        int stayed = 0;
        std::thread w0([&] { pin(a); spread.waiting(0); spread.sleeping(0); });
        w0.join();
        std::thread w1([&] { pin(a); sched_setaffinity(0, sizeof pair, &pair); stayed = !spread.waiting(1) && sched_getcpu() == a; });
        w1.join();
        std::printf("asleep %d\n", stayed);
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
    moved, elsewhere, kept_mask, unshared, limited = out["moved"].split()
    assert moved == "1", "the later worker on a shared CPU did not move"
    assert elsewhere == "1"
    assert kept_mask == "1", "the move left the worker pinned"
    assert unshared == "1", "a worker alone on its CPU moved again"
    assert limited == "1", "a second move came within the rate limit"


def test_nothing_moves_without_a_reason(out):
    assert out["first"] == "1"  # worker 0 has no worker of lower index
    assert out["crowded"] == "1"  # more workers than CPUs
    assert out["asleep"] == "1"  # the worker on its CPU sleeps


def test_during_a_run_nothing_moves_and_the_orchestrations_cpu_is_known(out):
    stayed, beside, apart = out["during"].split()
    assert stayed == "1", "a worker moved while told not to"
    assert beside == "1", "workers on the orchestration's CPU were not seen beside it"
    assert apart == "1", "a waiting orchestration still kept its CPU"
