// The scheduler: long-lived worker threads that run ready tasks while the orchestration is still
// submitting, reused by one run after another.
//
// Invariants:
//  - Worker `i` keeps index `i` in [0, num_workers) for its whole life; workers exist from
//    start_workers() until the scheduler is destroyed (which wakes and joins them). A start
//    that cannot create every thread joins the ones it made and throws: no thread is left
//    behind, and a later start_workers() tries again from none.
//  - Workers have stacks of at least the size the last start_workers() asked for (a kernel's
//    tiles live on its worker's stack); asking for more than they have restarts them first.
//  - Runs are sequential: begin() ... finish(). finish() returns once every task submitted in
//    the run has completed and the run has ended: exactly one party (the worker completing the
//    last task, or finish() if they all completed before it) ends it, by one atomic countdown.
//    From then on no worker touches a task, the run context or the run's end state, and the
//    ready queue is empty, so the caller may free the run's tasks and begin the next run.
//  - A task runs exactly once, on one worker, after every predecessor it was given has finished;
//    the run's task observers are called around its kernel (task_observer.hpp).
//  - After `*context.failed` becomes true, tasks that have not started are finished without
//    running their kernel (worker stays -1), so the graph drains quickly and nothing waits forever;
//    except tasks whose id is below `*context.run_before` (submitted before the task whose kernel
//    error failed the run), which still run, so that the earliest task in submission order that
//    fails is the one reported, however the tasks were scheduled (their predecessors have lower
//    ids, so they run too).
//  - A worker that finishes a task runs one newly ready successor itself (no queue round trip);
//    other ready successors go to the shared queue.
//  - Batched submission: a task ready at its seal joins the orchestration's batch, which goes to
//    the shared queue under one lock (one wake) once it holds kBatchTasks tasks, at the first
//    seal of any task kBatchWait after its first task joined, and whenever the orchestration
//    creates a tensor, fails, waits (an orchestration read) or returns (finish()); so the batch
//    is empty whenever a deadlock is looked for. A ready task waits in it no longer than the
//    orchestration runs its own code between two of those calls (beyond kBatchWait). Serial and
//    shuffled runs queue each task at its seal.
//  - Serial runs (RunContext::serial, one worker) hold every ready task until finish(), then run
//    them one at a time, lowest ready id first: the schedule depends on the graph only.
//  - Shuffled runs (RunContext::shuffle_seed nonzero) take a ready task at random (a generator
//    seeded from the seed, under the queue lock), queue every successor a task makes ready (none
//    is handed straight to the worker that readied it), and wait a random 0..200 us (or yield)
//    before each kernel, from a per-worker generator:
//    other interleavings than the usual schedule's, for finding races.
//  - Each worker's `holding` flag is set (under the queue lock) when it takes a task and cleared
//    only after the successors that task made ready are queued, so "queue empty and nobody
//    holding" read under the queue lock means no task can ever become ready again: finish()
//    reports that as a deadlock instead of waiting forever.
//  - With a time budget, the watchdog thread samples each worker's and the orchestration's
//    ThreadSlot (every tenth of the budget, between 1 ms and 100 ms; across back-to-back runs it
//    keeps polling, and parks after two polls in a row with no run) and stops user code whose
//    charged time reached it: its thread's CPU time plus the time it was blocked, never the time
//    it waited for a core (charged_time.hpp; wall time if those cannot be read). The stop goes
//    through RunHooks::timed_out, then the stopped thread reports RunHooks::stopped and goes on.
//    The watchdog touches the run only between begin() and the end of finish(), and reads /proc
//    only for user code it has already seen running at an earlier poll.
//  - An orchestration read waits in wait_until() (it polls `done`, backing off to sleeps of at
//    most 200 us, and checks for a failure, Ctrl-C or no progress every 5 ms).
//  - Idle workers spin briefly while a run is active (at most max(1, workers / 2) at a time, so
//    the orchestration keeps a core). When a run ends, every worker (end_run() wakes the
//    sleeping ones) lingers awake for a moment (200 us, up to 1 ms when the caller's last gap
//    between two runs was longer: linger_for), each yielding its core to any
//    thread that wants it, also once the next run started, so that a run following at once
//    finds its workers awake; then they sleep, parked on `queue_cv_`, and cost no CPU.
//    Between runs, a waiting worker that shares its CPU with a worker of lower index moves to a
//    CPU none of them is on, if the process may use one (cpu_spread.hpp): workers yielding to
//    each other on one CPU are never moved apart by the kernel's load balancer. During a run, a
//    worker on the CPU where the orchestration is queueing batches of tasks (flush_batch) does
//    not spin there: it sleeps until a push or another worker wakes it (finish() and
//    wait_until() mark the orchestration as waiting, so the workers have its CPU while it
//    waits; serial and shuffled runs, which queue one task at a time, never mark it).
//    Stopping the workers ends every spin. A push wakes a sleeper only when nobody is spinning,
//    and a worker that takes a task while more are queued wakes the next sleeper. finish() too
//    waits briefly awake (yielding) for the run's end before it sleeps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "charged_time.hpp"
#include "cpu_spread.hpp"
#include "signal_guard.hpp"
#include "task.hpp"
#include "task_observer.hpp"
#include "tilescope/abi.h"
#include "tilescope/bounds_error.hpp"

namespace ts::rt {

// The OS refused a worker thread (start_workers): the run reports it as the user's limit to
// lower, not as an internal error.
struct WorkerStartError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// What the run in progress does about failures; called from workers and the watchdog.
class RunHooks {
public:
    virtual ~RunHooks() = default;
    // `site` is the op a BoundsError names (bounds_error.hpp), else nullptr.
    virtual void kernel_threw(const Task &t, int32_t worker, const char *what, const ts::CheckSite *site) = 0;
    // Watchdog thread: `t` (nullptr: the orchestration) was charged `charge` (charged_time.hpp),
    // past its budget.
    virtual void timed_out(const Task *t, int32_t worker, const Charge &charge) = 0;
    // On the stopped thread, right after it was stopped.
    virtual void stopped(const Task *t, int32_t worker, const uint64_t *frames, int32_t nframes) = 0;
    // finish()'s thread: SIGINT arrived (signal_guard.hpp); `running` are the tasks then running, with
    // their workers (they are being stopped).
    virtual void interrupted(const std::vector<std::pair<const Task *, int32_t>> &running) = 0;
};

// What the workers need from the run in progress; fixed from begin() until finish() returns.
struct RunContext {
    const ts_kernel_fn *kernels = nullptr;
    const std::atomic<bool> *failed = nullptr;
    const std::atomic<int64_t> *run_before = nullptr;  // after a failure, tasks below this id still run
    TaskObservers observers;  // the instruments that are on
    RunHooks *hooks = nullptr;
    bool serial = false;
    uint32_t shuffle_seed = 0;  // nonzero: a randomized schedule (see the invariants)
    const char *const *kernel_names = nullptr;
    const char *crash_report_path = nullptr;
    int64_t timeout_ns = 0;  // 0: no budget
};

class Scheduler {
public:
    explicit Scheduler(int32_t num_workers);
    ~Scheduler();
    Scheduler(const Scheduler &) = delete;
    Scheduler &operator=(const Scheduler &) = delete;

    int32_t num_workers() const { return num_workers_; }

    // Start the workers that are not running yet (all of them the first time), with stacks of at
    // least `stack_bytes` (0: the default; more than the running workers have restarts them).
    // Throws WorkerStartError if a thread cannot be started, after joining those it started.
    void start_workers(int64_t stack_bytes = 0);

    // Before the first seal of a run: the workers' view of the run (no run may be in progress).
    void begin(const RunContext &context);

    // Orchestration thread: order `succ` after `pred` (a no-op if pred has already finished);
    // `edge` is a node of the run's for the edge (unused when pred has finished).
    void add_dependency(Task &pred, Task &succ, SuccessorEdge *edge);
    // Orchestration thread: all of `t`'s dependencies are added; it may run once they finish.
    void seal(Task &t);
    // Orchestration thread: queue the batch of ready tasks now (see the invariants), under one
    // lock, waking what it needs: before work that may take long (a large create_tensor) or a failure.
    void flush_batch();
    // Orchestration thread: like add_dependency for a `pred` that is not sealed yet, whose edge
    // was already counted in `succ.pending` when succ was submitted (a forward explicit dep).
    void link(Task &pred, Task &succ, SuccessorEdge *edge);
    // After the orchestration returned: wait until all `submitted` tasks of the run finished and
    // return true, or return false as soon as the run is deadlocked (tasks remain, none is ready
    // or running); the caller then reports and abandon()s the blocked tasks.
    bool finish(int64_t submitted);
    // Orchestration thread, inside a runtime call (an orchestration read): wait until `done()` holds
    // and return true, or return false once the run has failed or no task can make progress (the
    // orchestration, which waits here, submits nothing meanwhile). Serial runs release the tasks
    // they hold for the wait and run every task that can run before returning (lowest ready id
    // first), then hold again: the schedule still depends on the graph only. Ctrl-C stops the
    // running tasks as in finish().
    bool wait_until(const std::function<bool()> &done);
    // After finish() returned false: mark `blocked` (every unfinished task) finished without
    // running them, which ends the run.
    void abandon(const std::vector<Task *> &blocked);

    // The orchestration thread's slot (armed by the Run around orchestration code).
    ThreadSlot &orch_slot() { return orch_slot_; }

private:
    struct alignas(64) WorkerState {
        ThreadSlot slot;
        std::atomic<bool> holding{false};
        std::mt19937_64 delays;  // shuffled runs: this worker's delays before kernels
    };

    void worker_main(int32_t index);
    void execute(Task &t, int32_t worker);
    void run_kernel(Task &t, int32_t worker);
    bool quiescent();
    // SIGINT: tell the run which tasks are running (once) and ask each to stop (every call).
    void interrupt_running(bool first);
    void watchdog_main();
    void watch(std::vector<ChargeMeter> &meters, std::vector<uint64_t> &fired);
    Task *complete(Task &t);
    void end_run();
    Task *acquire(int32_t worker);
    Task *pop_locked(int32_t worker);
    void push(Task *t);
    // Orchestration thread: `t` became ready at its seal; queued with the batch (see the invariants).
    void submit_ready(Task *t);
    void stop_workers();

    const int32_t num_workers_;
    const int32_t max_spinners_;
    int64_t stack_bytes_ = 0;  // the workers' stack size (0: the default thread stack)
    std::vector<std::thread> workers_;
    std::unique_ptr<WorkerState[]> states_;
    CpuSpread spread_;  // waiting workers on CPUs of their own (cpu_spread.hpp)
    ThreadSlot orch_slot_;
    RunContext context_;

    std::mutex queue_mu_;  // guards ready_, serial_heap_, held_, released_, sleepers_, stop_, runs_ended_
    std::condition_variable queue_cv_;
    std::deque<Task *> ready_;
    std::vector<Task *> serial_heap_;  // serial runs: ready tasks, a min-heap by id
    std::vector<Task *> held_;         // serial runs: ready before finish()
    bool released_ = true;
    int32_t sleepers_ = 0;
    bool stop_ = false;
    uint64_t runs_ended_ = 0;  // end_run() calls: a sleeping worker wakes to linger after each
    std::atomic<int64_t> queued_{0};  // ready_.size(), readable without the lock
    std::mt19937_64 shuffle_rng_;     // shuffled runs: which ready task is taken (under queue_mu_)
    std::vector<Task *> batch_;       // orchestration thread: ready at their seal, not queued yet
    Clock::time_point batch_since_;   // when the batch's first task was sealed
    std::atomic<int32_t> spinners_{0};
    std::atomic<bool> run_active_{false};  // spinning is worth it only while a run is active
    std::atomic<int64_t> linger_ns_{200'000};  // how long workers stay awake after a run (linger_for)
    std::atomic<int64_t> last_end_ns_{0};  // when the last run ended (now_ns; 0: none yet)
    std::atomic<bool> stopping_{false};  // stop_workers() in progress: no spinning

    // kUnknownCount - completed until finish() learns the run's task count, then submitted -
    // completed: whoever brings it to 0 (the last task's worker, or finish()) ends the run.
    std::atomic<int64_t> remaining_{0};
    std::mutex done_mu_;  // guards ended_
    std::condition_variable done_cv_;
    bool ended_ = false;
    bool interrupt_told_ = false;  // Ctrl-C: the run was told which tasks ran (once per run)

    std::thread watchdog_;
    std::mutex wd_mu_;  // guards wd_run_, wd_stop_, wd_polling_, wd_poll_
    std::condition_variable wd_cv_;
    bool wd_run_ = false;
    bool wd_stop_ = false;
    bool wd_polling_ = false;  // the watchdog is in its polling loop (not parked)
    std::chrono::nanoseconds wd_poll_{100000000};  // its interval: the last run's (see begin())
};

}  // namespace ts::rt
