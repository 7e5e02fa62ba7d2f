// Keeps a runtime's waiting workers on CPUs of their own.
//
// Between runs (and briefly inside one) a worker waits for tasks awake, yielding its CPU. Two
// workers that wait on one CPU yield to each other every few microseconds, so to the kernel both
// have always just run ("cache hot"), and its load balancer never moves either, even to an idle
// CPU: the next run's tasks then all run on that one CPU, one worker at a time, and the run
// takes twice as long. Seen on 2-CPU VMs: once both workers landed on one CPU they stayed there
// for good, and a 0.2 ms run took 0.35-0.4 ms.
//
// So a waiting worker notes the CPU it is on, and when a worker of lower index waits or runs on
// the same CPU while a CPU this thread may use has no worker of this runtime, it moves there
// (sched_setaffinity to the free CPUs, which migrates it at once, then back to the mask it had,
// so the kernel stays free to move it again). The kernel decides everything else.
//
// The orchestration thread (which queues a run's tasks) is a third thread on such a machine. A
// worker that would spin on the CPU it works on slows the queueing of every task (a 100k-task
// chain ran 20% slower once the workers were apart), so the scheduler asks beside_caller() and
// lets such a worker sleep instead while the orchestration queues a batch of tasks (serial and
// shuffled runs queue theirs one by one and never mark it); the scheduler asks for moves only
// while no run is active.
//
// Invariants:
//  - Nothing is pinned: a worker's affinity mask is what it was before, but for the instant of a
//    move; a failed move leaves it where it is, and if the mask could not be set back (the
//    cpuset changed in between), it is tried once more and moves stop for good.
//  - A worker moves at most once per `move_every` (1 ms), so it never fights the kernel (or
//    another process's threads) over a CPU in a tight loop.
//  - With more workers than CPUs there is no CPU to give each, and nothing is done.
//  - The slots are read without locks: a stale CPU costs at most one move that was not needed.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace ts::rt {

// The CPUs of `allowed` that neither `cpu` nor any of `cpu_of(0 .. n-1)` (-1: none) is: where a
// worker on `cpu` may move to have a CPU to itself.
template <class CpuOf>
cpu_set_t free_cpus(const cpu_set_t &allowed, int cpu, int32_t n, CpuOf cpu_of) {
    cpu_set_t out = allowed;
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_CLR(cpu, &out);
    for (int32_t i = 0; i < n; ++i) {
        const int other = cpu_of(i);
        if (other >= 0 && other < CPU_SETSIZE) CPU_CLR(other, &out);
    }
    return out;
}

class CpuSpread {
public:
    explicit CpuSpread(int32_t workers, std::chrono::nanoseconds move_every = std::chrono::milliseconds(1))
        : n_(workers), move_every_(move_every), slots_(new Slot[static_cast<size_t>(workers)]) {
        cpu_set_t allowed;
        enabled_ = workers >= 2 && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= workers;
    }
    CpuSpread(const CpuSpread &) = delete;
    CpuSpread &operator=(const CpuSpread &) = delete;

    // Worker `me` waits for a task: note its CPU, and (if `may_move`) move it to a free CPU if a
    // worker of lower index is on the same one (see the header). Returns whether it moved.
    bool waiting(int32_t me, bool may_move = true) {
        if (!enabled_.load(std::memory_order_relaxed)) return false;
        const int cpu = sched_getcpu();
        Slot &mine = slots_[me];
        mine.cpu.store(cpu, std::memory_order_relaxed);
        if (cpu < 0 || !may_move) return false;
        bool shared = false;
        for (int32_t i = 0; i < me && !shared; ++i) shared = slots_[i].cpu.load(std::memory_order_relaxed) == cpu;
        if (!shared) return false;
        const auto now = std::chrono::steady_clock::now();
        if (now < mine.next_move) return false;
        mine.next_move = now + move_every_;
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
        const cpu_set_t to = free_cpus(allowed, cpu, n_, [&](int32_t i) {
            return i == me ? -1 : slots_[i].cpu.load(std::memory_order_relaxed);
        });
        if (CPU_COUNT(&to) == 0 || sched_setaffinity(0, sizeof to, &to) != 0) return false;
        // the mask it had again: the kernel may move it on
        if (sched_setaffinity(0, sizeof allowed, &allowed) != 0 && sched_setaffinity(0, sizeof allowed, &allowed) != 0)
            enabled_.store(false, std::memory_order_relaxed);
        mine.cpu.store(sched_getcpu(), std::memory_order_relaxed);
        return true;
    }

    // Worker `me` goes to sleep: its CPU is free for the others.
    void sleeping(int32_t me) { slots_[me].cpu.store(-1, std::memory_order_relaxed); }

    // The orchestration thread is at work (true: on the CPU it is on now) or asleep (false).
    void orchestrating(bool awake) {
        if (enabled_.load(std::memory_order_relaxed)) caller_cpu_.store(awake ? sched_getcpu() : -1, std::memory_order_relaxed);
    }

    // Whether worker `me` last waited on the CPU the orchestration thread works on: it should
    // yield that CPU rather than spin on it.
    bool beside_caller(int32_t me) const {
        const int32_t cpu = slots_[me].cpu.load(std::memory_order_relaxed);
        return cpu >= 0 && cpu == caller_cpu_.load(std::memory_order_relaxed);
    }

private:
    struct alignas(64) Slot {
        std::atomic<int32_t> cpu{-1};  // where the worker last waited; -1: asleep, or not yet seen
        std::chrono::steady_clock::time_point next_move{};  // the worker's own: no move before it
    };

    const int32_t n_;
    const std::chrono::nanoseconds move_every_;
    std::unique_ptr<Slot[]> slots_;
    std::atomic<int32_t> caller_cpu_{-1};  // where the orchestration thread works; -1: asleep, or unknown
    std::atomic<bool> enabled_{false};
};

}  // namespace ts::rt
