// The scheduler: worker threads that run ready tasks while the orchestration is still submitting.
//
// Invariants:
//  - A task runs exactly once, on one worker, after every predecessor it was given has finished.
//  - After `failed` becomes true, tasks that have not started are finished without running their
//    kernel (worker stays -1), so the graph drains quickly and nothing waits forever.
//  - A worker that finishes a task runs one newly ready successor itself (no queue round trip);
//    other ready successors go to the shared queue.
//  - Idle workers spin briefly (at most max(1, workers / 2) at a time, so the orchestration
//    thread keeps a core) and then sleep; a push wakes a sleeper only when nobody is spinning,
//    and a worker that takes a task while more are queued wakes the next sleeper.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "task.hpp"
#include "tilescope/abi.h"

namespace ts::rt {

using Clock = std::chrono::steady_clock;

class Scheduler {
public:
    Scheduler(const ts_kernel_fn *kernels, int32_t num_workers, bool record_times, Clock::time_point t0,
              const std::atomic<bool> &failed);
    ~Scheduler();
    Scheduler(const Scheduler &) = delete;
    Scheduler &operator=(const Scheduler &) = delete;

    void start();
    int32_t num_workers() const { return num_workers_; }
    int64_t now_ns() const;

    // Orchestration thread: order `succ` after `pred` (a no-op if pred has already finished).
    void add_dependency(Task &pred, Task &succ);
    // Orchestration thread: all of `t`'s dependencies are added; it may run once they finish.
    void seal(Task &t);
    // After the orchestration returned: wait until all `submitted` tasks finished, stop workers.
    void finish(int64_t submitted);

private:
    void worker_main(int32_t index);
    void execute(Task &t, int32_t worker);
    Task *complete(Task &t);
    Task *acquire();
    Task *pop_locked();
    void push(Task *t);
    void stop_workers();

    const ts_kernel_fn *kernels_;
    const int32_t num_workers_;
    const int32_t max_spinners_;
    const bool record_times_;
    const Clock::time_point t0_;
    const std::atomic<bool> &failed_;
    std::vector<std::thread> workers_;

    std::mutex queue_mu_;  // guards ready_, sleepers_, stop_
    std::condition_variable queue_cv_;
    std::deque<Task *> ready_;
    int32_t sleepers_ = 0;
    bool stop_ = false;
    std::atomic<int64_t> queued_{0};  // ready_.size(), readable without the lock
    std::atomic<int32_t> spinners_{0};
    std::atomic<bool> stopping_{false};

    std::atomic<int64_t> completed_{0};
    std::atomic<int64_t> target_{INT64_MAX};  // total tasks, known once the orchestration returns
    std::mutex done_mu_;
    std::condition_variable done_cv_;
};

}  // namespace ts::rt
