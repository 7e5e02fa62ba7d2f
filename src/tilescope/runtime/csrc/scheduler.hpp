// The scheduler: long-lived worker threads that run ready tasks while the orchestration is still
// submitting, reused by one run after another.
//
// Invariants:
//  - Worker `i` keeps index `i` in [0, num_workers) for its whole life; workers exist from
//    start_workers() until the scheduler is destroyed (which wakes and joins them).
//  - Runs are sequential: begin() ... finish(). finish() returns once every task submitted in
//    the run has completed and the run has ended: exactly one party (the worker completing the
//    last task, or finish() if they all completed before it) ends it, by one atomic countdown.
//    From then on no worker touches a task, the run context or the run's end state, and the
//    ready queue is empty, so the caller may free the run's tasks and begin the next run.
//  - A task runs exactly once, on one worker, after every predecessor it was given has finished.
//  - After `*context.failed` becomes true, tasks that have not started are finished without
//    running their kernel (worker stays -1), so the graph drains quickly and nothing waits forever.
//  - A worker that finishes a task runs one newly ready successor itself (no queue round trip);
//    other ready successors go to the shared queue.
//  - Idle workers spin briefly while a run is active (at most max(1, workers / 2) at a time, so
//    the orchestration keeps a core) and then sleep; between runs they only sleep (parked on
//    `queue_cv_`). A push wakes a sleeper only when nobody is spinning, and a worker that takes
//    a task while more are queued wakes the next sleeper.
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

class TensorDump;

using Clock = std::chrono::steady_clock;

// What the workers need from the run in progress; fixed from begin() until finish() returns.
struct RunContext {
    const ts_kernel_fn *kernels = nullptr;
    bool record_times = false;
    Clock::time_point t0{};
    const std::atomic<bool> *failed = nullptr;
    TensorDump *dump = nullptr;  // nullptr: no tensor dump (the per-task cost is this one test)
};

class Scheduler {
public:
    explicit Scheduler(int32_t num_workers);
    ~Scheduler();
    Scheduler(const Scheduler &) = delete;
    Scheduler &operator=(const Scheduler &) = delete;

    int32_t num_workers() const { return num_workers_; }

    // Start the workers that are not running yet (all of them the first time). Throws
    // std::system_error if a thread cannot be started; those already started stay parked.
    void start_workers();

    // Before the first seal of a run: the workers' view of the run (no run may be in progress).
    void begin(const RunContext &context);
    // Nanoseconds since the current run's t0.
    int64_t now_ns() const;

    // Orchestration thread: order `succ` after `pred` (a no-op if pred has already finished).
    void add_dependency(Task &pred, Task &succ);
    // Orchestration thread: all of `t`'s dependencies are added; it may run once they finish.
    void seal(Task &t);
    // After the orchestration returned: wait until all `submitted` tasks of the run finished.
    // The workers stay alive, parked until the next run's tasks arrive.
    void finish(int64_t submitted);

private:
    void worker_main(int32_t index);
    void execute(Task &t, int32_t worker);
    Task *complete(Task &t);
    void end_run();
    Task *acquire();
    Task *pop_locked();
    void push(Task *t);
    void stop_workers();

    const int32_t num_workers_;
    const int32_t max_spinners_;
    std::vector<std::thread> workers_;
    RunContext context_;

    std::mutex queue_mu_;  // guards ready_, sleepers_, stop_
    std::condition_variable queue_cv_;
    std::deque<Task *> ready_;
    int32_t sleepers_ = 0;
    bool stop_ = false;
    std::atomic<int64_t> queued_{0};  // ready_.size(), readable without the lock
    std::atomic<int32_t> spinners_{0};
    std::atomic<bool> run_active_{false};  // spinning is worth it only while a run is active
    std::atomic<bool> stopping_{false};

    // kUnknownCount - completed until finish() learns the run's task count, then submitted -
    // completed: whoever brings it to 0 (the last task's worker, or finish()) ends the run.
    std::atomic<int64_t> remaining_{0};
    std::mutex done_mu_;  // guards ended_
    std::condition_variable done_cv_;
    bool ended_ = false;
};

}  // namespace ts::rt
