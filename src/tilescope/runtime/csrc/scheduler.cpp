#include "scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <system_error>

#include <pthread.h>

namespace ts::rt {

namespace {

constexpr auto kSpinTime = std::chrono::microseconds(50);
// How long a worker stays awake (yielding) after a run ended, so that the next run of a caller
// that runs graphs back to back finds it awake: waking a sleeping thread costs tens of us (50-70
// on a 2-CPU VM). At least kLingerMin; longer when the caller's last gap between two runs says
// the next run comes later than that, up to kLingerMax (a gap longer than that: kLingerMin).
constexpr int64_t kLingerMin = 200'000;  // ns
constexpr int64_t kLingerMax = 1'000'000;  // ns

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// The linger that covers a gap of `gap_ns` between one run's end and the next one's start.
int64_t linger_for(int64_t gap_ns) {
    if (gap_ns < 0 || gap_ns > kLingerMax) return kLingerMin;
    return std::clamp<int64_t>(gap_ns + gap_ns / 2 + 100'000, kLingerMin, kLingerMax);
}
constexpr int64_t kUnknownCount = INT64_MAX / 2;  // more tasks than any run can submit
// Batched submission (see the header): at most this many ready tasks; past this age the batch goes
// at the next seal.
constexpr size_t kBatchTasks = 32;
constexpr auto kBatchWait = std::chrono::microseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

bool later_id(const Task *a, const Task *b) { return a->id > b->id; }  // std heaps: min id on top

// How often the watchdog samples for a budget of `timeout_ns`: a tenth of it, within 1 to 100 ms.
std::chrono::nanoseconds watch_interval(int64_t timeout_ns) {
    return std::chrono::nanoseconds(std::clamp<int64_t>(timeout_ns / 10, 1000000, 100000000));
}

}  // namespace

Scheduler::Scheduler(int32_t num_workers)
    : num_workers_(num_workers),
      max_spinners_(std::max(1, num_workers / 2)),
      states_(new WorkerState[static_cast<size_t>(num_workers)]),
      spread_(num_workers) {
    install_guards();
}

Scheduler::~Scheduler() { stop_workers(); }

namespace {

// While it lives, threads created without attributes (std::thread) get stacks of `bytes` (0: as
// they were). NOTE: process-wide, so a thread another library starts meanwhile gets the larger
// stack too: harmless, it is only reserved address space.
class DefaultStack {
public:
    explicit DefaultStack(int64_t bytes) {
        if (bytes <= 0 || pthread_getattr_default_np(&old_) != 0) return;
        pthread_attr_t attr;
        if (pthread_getattr_default_np(&attr) != 0) return;
        set_ = pthread_attr_setstacksize(&attr, static_cast<size_t>(bytes)) == 0 &&
               pthread_setattr_default_np(&attr) == 0;
        pthread_attr_destroy(&attr);
    }
    ~DefaultStack() {
        if (set_) pthread_setattr_default_np(&old_);
    }
    DefaultStack(const DefaultStack &) = delete;
    DefaultStack &operator=(const DefaultStack &) = delete;

private:
    pthread_attr_t old_{};
    bool set_ = false;
};

std::mutex default_stack_mu;  // one DefaultStack at a time (several runtimes start workers at once)

}  // namespace

void Scheduler::start_workers(int64_t stack_bytes) {
    if (stack_bytes > stack_bytes_) {
        if (!workers_.empty()) stop_workers();  // restarted with the larger stacks below
        stack_bytes_ = stack_bytes;
    }
    try {
        if (!watchdog_.joinable()) watchdog_ = std::thread(&Scheduler::watchdog_main, this);
        workers_.reserve(static_cast<size_t>(num_workers_));
        std::lock_guard<std::mutex> lock(default_stack_mu);
        const DefaultStack stacks(workers_.size() < static_cast<size_t>(num_workers_) ? stack_bytes_ : 0);
        while (static_cast<int32_t>(workers_.size()) < num_workers_) {
            const int32_t index = static_cast<int32_t>(workers_.size());
            workers_.emplace_back(&Scheduler::worker_main, this, index);
        }
    } catch (const std::system_error &e) {
        const size_t started = workers_.size();
        stop_workers();  // joins every thread this scheduler started: a failed start leaks none
        // NOTE: stacks larger than the default hold a build's local memory: a smaller one is the other way out
        const std::string stacks = stack_bytes_ > 0 ? " with a stack of " + std::to_string(stack_bytes_ >> 20) +
                                                          " MiB each (twice the build's local_memory_bytes, plus 4 MiB)"
                                                    : "";
        throw WorkerStartError("cannot start worker thread " + std::to_string(started + 1) + " of " +
                                 std::to_string(num_workers_) + stacks + " (" + e.what() +
                                 "); run with fewer workers (num_workers / --workers)" +
                                 (stack_bytes_ > 0 ? ", or compile with a smaller local_memory_bytes" : ""));
    }
}

void Scheduler::begin(const RunContext &context) {
    context_ = context;
    const int64_t ended = last_end_ns_.load(std::memory_order_relaxed);
    if (ended != 0) linger_ns_.store(linger_for(now_ns() - ended), std::memory_order_relaxed);
    remaining_.store(kUnknownCount, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(done_mu_);
        ended_ = false;
    }
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        released_ = !context_.serial;
        if (context_.shuffle_seed != 0) shuffle_rng_.seed(context_.shuffle_seed);
    }
    // NOTE: only shuffled runs draw from the generators; seeding a Mersenne twister per worker
    // was the costliest step of starting a run
    if (context_.shuffle_seed != 0)
        for (int32_t i = 0; i < num_workers_; ++i) states_[i].delays.seed(context_.shuffle_seed * 1000003ULL + i);
    interrupt_told_ = false;
    orch_slot_.take(-1);  // NOTE: the orchestration runs on the thread that calls begin()
    for (int32_t i = 0; i < num_workers_; ++i) {
        states_[i].slot.crash_report_path = context_.crash_report_path;
    }
    run_active_.store(true, std::memory_order_relaxed);
    if (context_.timeout_ns > 0) {
        const auto poll = watch_interval(context_.timeout_ns);
        std::lock_guard<std::mutex> lock(wd_mu_);
        wd_run_ = true;
        // NOTE: a watchdog still polling from the runs before (back-to-back runs) takes this one up
        // at its next poll; it is woken (a futex wake and a context switch, every run) only when
        // parked, or when this run's budget needs a shorter poll than it keeps
        const bool wake = !wd_polling_ || poll < wd_poll_;
        wd_poll_ = poll;
        if (wake) wd_cv_.notify_one();
    }
}

namespace {

// Appends `succ` to `pred`'s successors through `edge` (under pred.mu).
void append_successor(Task &pred, Task &succ, SuccessorEdge *edge) {
    edge->task = &succ;
    edge->next = nullptr;
    if (pred.last_successor != nullptr)
        pred.last_successor->next = edge;
    else
        pred.successors = edge;
    pred.last_successor = edge;
}

// Marks `t` done and takes its successor list (the caller walks it without the lock).
SuccessorEdge *finish_task(Task &t) {
    std::lock_guard<std::mutex> lock(t.mu);
    t.done = true;
    SuccessorEdge *first = t.successors;
    t.successors = t.last_successor = nullptr;
    return first;
}

}  // namespace

void Scheduler::add_dependency(Task &pred, Task &succ, SuccessorEdge *edge) {
    std::lock_guard<std::mutex> lock(pred.mu);
    if (pred.done) return;
    succ.pending.fetch_add(1, std::memory_order_acq_rel);
    append_successor(pred, succ, edge);
}

void Scheduler::link(Task &pred, Task &succ, SuccessorEdge *edge) {
    std::lock_guard<std::mutex> lock(pred.mu);
    append_successor(pred, succ, edge);
}

void Scheduler::seal(Task &t) {
    if (t.pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
        submit_ready(&t);
    else if (!batch_.empty() && Clock::now() - batch_since_ >= kBatchWait)
        flush_batch();  // NOTE: a task sealed waiting does not hold back those ready before it
}

void Scheduler::submit_ready(Task *t) {
    if (context_.serial || context_.shuffle_seed != 0) {
        push(t);
        return;
    }
    const Clock::time_point now = Clock::now();
    if (batch_.empty()) batch_since_ = now;
    batch_.push_back(t);
    if (batch_.size() >= kBatchTasks || now - batch_since_ >= kBatchWait) flush_batch();
}

void Scheduler::flush_batch() {
    if (batch_.empty()) return;
    spread_.orchestrating(true);
    int32_t wake;
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        for (Task *t : batch_) ready_.push_back(t);
        queued_.store(static_cast<int64_t>(ready_.size()), std::memory_order_relaxed);
        wake = std::min<int32_t>(sleepers_, static_cast<int32_t>(batch_.size()));
    }
    batch_.clear();
    // NOTE: as in push(): a spinner re-checks the queue under the lock before it sleeps.
    if (wake > 0 && spinners_.load(std::memory_order_seq_cst) == 0) {
        if (wake == 1)
            queue_cv_.notify_one();
        else
            queue_cv_.notify_all();
    }
}

bool Scheduler::finish(int64_t submitted) {
    flush_batch();
    spread_.orchestrating(false);  // every task is queued: the orchestration only waits from here
    if (context_.serial) {
        std::lock_guard<std::mutex> lock(queue_mu_);
        released_ = true;
        for (Task *t : held_) {
            serial_heap_.push_back(t);
            std::push_heap(serial_heap_.begin(), serial_heap_.end(), later_id);
        }
        held_.clear();
        queued_.store(static_cast<int64_t>(serial_heap_.size()), std::memory_order_relaxed);
        queue_cv_.notify_all();
    }
    bool ended = true;
    const int64_t unknown = kUnknownCount - submitted;
    if (remaining_.fetch_sub(unknown, std::memory_order_acq_rel) == unknown) {
        run_active_.store(false, std::memory_order_relaxed);  // every task had completed already
    } else {
        // NOTE: a small graph ends within microseconds: wait for it awake before sleeping (a
        // sleeping caller is woken tens of us after the last task), yielding the core to a
        // worker that shares it.
        const auto deadline = Clock::now() + kSpinTime;
        while (remaining_.load(std::memory_order_acquire) != 0 && Clock::now() < deadline) std::this_thread::yield();
        std::unique_lock<std::mutex> lock(done_mu_);
        // NOTE: the poll is only for deadlocks; a run that ends wakes this wait at once.
        while (!done_cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return ended_; })) {
            lock.unlock();
            if (interrupt_pending()) {  // Ctrl-C: stop what runs (again at each poll), skip the rest
                interrupt_running(!interrupt_told_);
                interrupt_told_ = true;
            }
            const bool stuck = quiescent();
            lock.lock();
            if (stuck && !ended_) {
                ended = false;
                break;
            }
        }
    }
    if (ended) {
        std::lock_guard<std::mutex> lock(wd_mu_);
        wd_run_ = false;  // from here on the watchdog does not touch this run
    }
    return ended;
}

bool Scheduler::wait_until(const std::function<bool()> &done) {
    auto hold = [&](bool released) {
        std::lock_guard<std::mutex> lock(queue_mu_);
        released_ = released;
        if (!released) return;
        for (Task *t : held_) {
            serial_heap_.push_back(t);
            std::push_heap(serial_heap_.begin(), serial_heap_.end(), later_id);
        }
        held_.clear();
        queued_.store(static_cast<int64_t>(serial_heap_.size()), std::memory_order_relaxed);
        queue_cv_.notify_all();
    };
    flush_batch();
    spread_.orchestrating(false);  // it waits: its CPU is the workers' until it queues again
    if (context_.serial) hold(true);
    bool ok = false;
    auto next_check = Clock::now() + std::chrono::milliseconds(5);
    for (int64_t spin = 0;; ++spin) {
        // NOTE: a serial run returns only once every task that can run has run (quiescent), so
        // how far the worker got when `done` first held does not change the schedule.
        if (!context_.serial && done()) {
            ok = true;
            break;
        }
        if (context_.failed->load(std::memory_order_acquire)) break;
        const bool check = Clock::now() >= next_check;
        if (check) {
            next_check = Clock::now() + std::chrono::milliseconds(5);
            if (interrupt_pending()) {  // as in finish(): the run is told once
                interrupt_running(!interrupt_told_);
                interrupt_told_ = true;
            }
        }
        if ((check || context_.serial) && quiescent()) {
            ok = done();
            break;
        }
        if (spin < 64)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(200, spin - 63)));
    }
    if (context_.serial) hold(false);
    return ok && !context_.failed->load(std::memory_order_acquire);
}

void Scheduler::interrupt_running(bool first) {
    std::vector<std::pair<const Task *, int32_t>> running;
    std::vector<std::pair<ThreadSlot *, uint64_t>> stop;
    for (int32_t i = 0; i < num_workers_; ++i) {
        ThreadSlot &slot = states_[i].slot;
        const uint64_t seq = slot.seq.load(std::memory_order_acquire);
        if ((seq & 1) == 0) continue;
        const Task *t = slot.task;
        if (t == nullptr || slot.seq.load(std::memory_order_acquire) != seq) continue;  // it moved on
        running.emplace_back(t, i);
        stop.emplace_back(&slot, seq);
    }
    if (first) context_.hooks->interrupted(running);  // the run fails: no task starts any more
    for (auto &[slot, seq] : stop) request_stop(*slot, seq);
}

bool Scheduler::quiescent() {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!ready_.empty() || !serial_heap_.empty() || !held_.empty()) return false;
    for (int32_t i = 0; i < num_workers_; ++i)
        if (states_[i].holding.load(std::memory_order_acquire)) return false;
    return remaining_.load(std::memory_order_acquire) > 0;
}

void Scheduler::abandon(const std::vector<Task *> &blocked) {
    for (Task *t : blocked) finish_task(*t);
    const int64_t n = static_cast<int64_t>(blocked.size());
    if (remaining_.fetch_sub(n, std::memory_order_acq_rel) == n) end_run();
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait(lock, [&] { return ended_; });
    std::lock_guard<std::mutex> wd(wd_mu_);
    wd_run_ = false;
}

void Scheduler::end_run() {
    last_end_ns_.store(now_ns(), std::memory_order_relaxed);
    // NOTE: before ended_, so that no worker spins for a run that is over, and so that this
    // store cannot land after the next run's begin().
    run_active_.store(false, std::memory_order_relaxed);
    bool wake;
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        ++runs_ended_;
        wake = sleepers_ > 0;
    }
    if (wake) queue_cv_.notify_all();  // every worker lingers awake for the next run (acquire)
    std::lock_guard<std::mutex> lock(done_mu_);
    ended_ = true;
    done_cv_.notify_one();
}

void Scheduler::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(wd_mu_);
        wd_stop_ = true;
        wd_cv_.notify_all();
    }
    if (watchdog_.joinable()) watchdog_.join();
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        stop_ = true;
    }
    stopping_.store(true, std::memory_order_relaxed);  // lingering spinners go to the lock and see stop_
    run_active_.store(false, std::memory_order_relaxed);
    queue_cv_.notify_all();
    for (std::thread &w : workers_)
        if (w.joinable()) w.join();
    workers_.clear();
    // NOTE: no thread of this scheduler is left, so the flags are reset: a later start_workers()
    // (after a failed start) starts every worker afresh.
    {
        std::lock_guard<std::mutex> lock(wd_mu_);
        wd_stop_ = false;
    }
    stopping_.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = false;
}

void Scheduler::worker_main(int32_t index) {
    ThreadSlot &slot = states_[index].slot;
    slot.take(index);
    set_current_slot(&slot);
    ensure_alt_stack();
    Task *next = nullptr;
    for (;;) {
        Task *t = next ? next : acquire(index);
        if (t == nullptr) return;
        execute(*t, index);
        next = complete(*t);
        // NOTE: after complete() queued what `t` made ready (see the header's invariants).
        if (next == nullptr) states_[index].holding.store(false, std::memory_order_release);
    }
}

void Scheduler::execute(Task &t, int32_t worker) {
    if (context_.failed->load(std::memory_order_acquire) &&
        t.id >= context_.run_before->load(std::memory_order_acquire))
        return;
    if (context_.shuffle_seed != 0) {
        const uint64_t r = states_[worker].delays();
        if (r & 1)
            std::this_thread::sleep_for(std::chrono::microseconds((r >> 1) % 201));
        else
            std::this_thread::yield();
    }
    // NOTE: TS_RUNTIME_NO_OBSERVERS builds the core without the observer calls, only so that
    // benchmarks/dump_throughput.py can show an empty observer list costs nothing measurable.
#ifndef TS_RUNTIME_NO_OBSERVERS
    context_.observers.before(t, worker);
#endif
    run_kernel(t, worker);
#ifndef TS_RUNTIME_NO_OBSERVERS
    context_.observers.after(t, worker);
#endif
    t.worker = worker;
}

void Scheduler::run_kernel(Task &t, int32_t worker) {
#ifdef TS_RUNTIME_NO_GUARDS
    // NOTE: only so that benchmarks/watchdog.py can compare against a core with no per-task guard.
    context_.kernels[t.func_id](t.args);
    (void)worker;
    return;
#endif
    ThreadSlot &slot = states_[worker].slot;
    slot.task = &t;
    slot.kernel_name = context_.kernel_names != nullptr ? context_.kernel_names[t.func_id] : "";
    slot.seq.fetch_add(1, std::memory_order_release);  // odd: user code runs
    // NOTE: savemask 0 keeps sigsetjmp free of syscalls; the interrupt handler runs with
    // SA_NODEFER, so jumping out of it leaves no signal blocked.
    if (sigsetjmp(slot.jump, 0) == 0) {
        slot.armed = 1;
        try {
            context_.kernels[t.func_id](t.args);
            slot.armed = 0;
        } catch (const ts::BoundsError &e) {
            slot.armed = 0;
            context_.hooks->kernel_threw(t, worker, e.what(), &e.site);
        } catch (const std::exception &e) {
            slot.armed = 0;
            context_.hooks->kernel_threw(t, worker, e.what(), nullptr);
        } catch (...) {
            slot.armed = 0;
            context_.hooks->kernel_threw(t, worker, "the kernel threw a C++ exception of unknown type", nullptr);
        }
    } else {
        context_.hooks->stopped(&t, worker, slot.frames, slot.nframes);
    }
    slot.seq.fetch_add(1, std::memory_order_release);  // even: idle
    slot.task = nullptr;
}

Task *Scheduler::complete(Task &t) {
    if (context_.serial) {
        // NOTE: no successor shortcut: the lowest ready id runs next, whoever made it ready.
        for (SuccessorEdge *e = finish_task(t); e != nullptr; e = e->next)
            if (e->task->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) push(e->task);
        if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) end_run();
        return nullptr;
    }
    Task *next = nullptr;
    for (SuccessorEdge *e = finish_task(t); e != nullptr; e = e->next) {
        Task *s = e->task;
        if (s->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
        if (next == nullptr && context_.shuffle_seed == 0)  // NOTE: shuffled: every successor is queued
            next = s;
        else
            push(s);
    }
    // NOTE: past this decrement the run may be over and its tasks freed: touch no task below.
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) end_run();
    return next;
}

void Scheduler::push(Task *t) {
    bool wake;
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        if (context_.serial) {
            if (!released_) {
                held_.push_back(t);
                return;
            }
            serial_heap_.push_back(t);
            std::push_heap(serial_heap_.begin(), serial_heap_.end(), later_id);
            queued_.store(static_cast<int64_t>(serial_heap_.size()), std::memory_order_relaxed);
        } else {
            ready_.push_back(t);
            queued_.store(static_cast<int64_t>(ready_.size()), std::memory_order_relaxed);
        }
        wake = sleepers_ > 0;
    }
    // NOTE: a spinner re-checks the queue under the lock before it sleeps, so skipping the
    // (syscall-priced) notify while one is spinning cannot strand the task.
    if (wake && spinners_.load(std::memory_order_seq_cst) == 0) queue_cv_.notify_one();
}

Task *Scheduler::pop_locked(int32_t worker) {
    Task *t;
    if (context_.serial) {
        std::pop_heap(serial_heap_.begin(), serial_heap_.end(), later_id);
        t = serial_heap_.back();
        serial_heap_.pop_back();
    } else if (context_.shuffle_seed != 0) {
        const auto pick = ready_.begin() + static_cast<std::ptrdiff_t>(shuffle_rng_() % ready_.size());
        t = *pick;
        ready_.erase(pick);
    } else {
        t = ready_.front();
        ready_.pop_front();
    }
    states_[worker].holding.store(true, std::memory_order_relaxed);  // NOTE: under the queue lock
    const size_t left = context_.serial ? serial_heap_.size() : ready_.size();
    queued_.store(static_cast<int64_t>(left), std::memory_order_relaxed);
    if (left > 0 && sleepers_ > 0 && spinners_.load(std::memory_order_seq_cst) == 0) queue_cv_.notify_one();
    return t;
}

Task *Scheduler::acquire(int32_t worker) {
    // NOTE: spin while a run is active (at most max_spinners_ at a time), and linger after it
    // ended (every worker: end_run() wakes the sleepers for it), yielding the core to any other
    // thread that wants it, so that the next run finds its workers awake: waking a sleeper on a
    // busy machine costs tens of us, and a task it takes finishes that much later. A lingering
    // worker keeps yielding when the next run starts (the orchestration keeps its core). No
    // spin while the workers are being stopped.
    for (;;) {
        const bool linger = !run_active_.load(std::memory_order_relaxed);
        // NOTE: a worker on the CPU the orchestration works on leaves it that CPU while the run is
        // active: it sleeps at once, and a push or another worker wakes it when there is work for
        // it (see the header's invariants).
        const bool spin = linger || !spread_.beside_caller(worker);
        if (spin && spinners_.fetch_add(1, std::memory_order_seq_cst) < (linger ? num_workers_ : max_spinners_)) {
            const auto deadline = Clock::now() + (linger ? std::chrono::nanoseconds(linger_ns_.load(std::memory_order_relaxed))
                                                         : std::chrono::nanoseconds(kSpinTime));
            for (uint32_t i = 1; !stopping_.load(std::memory_order_relaxed); ++i) {
                if (queued_.load(std::memory_order_relaxed) > 0) {
                    std::lock_guard<std::mutex> lock(queue_mu_);
                    if (queued_.load(std::memory_order_relaxed) > 0) {
                        spinners_.fetch_sub(1, std::memory_order_seq_cst);
                        return pop_locked(worker);
                    }
                }
                const bool between_runs = !run_active_.load(std::memory_order_relaxed);
                const bool yield = linger || between_runs;  // no run to serve
                if (yield)
                    std::this_thread::yield();
                else
                    cpu_relax();
                if (yield || i % 64 == 0) {
                    spread_.waiting(worker, between_runs);  // moves only between runs
                    if (!linger && spread_.beside_caller(worker)) break;
                    if (Clock::now() > deadline) break;
                }
            }
        }
        if (spin) spinners_.fetch_sub(1, std::memory_order_seq_cst);  // only a worker that spins counts itself
        std::unique_lock<std::mutex> lock(queue_mu_);
        auto empty = [&] { return context_.serial ? serial_heap_.empty() : ready_.empty(); };
        const uint64_t ended = runs_ended_;
        while (empty() && !stop_ && runs_ended_ == ended) {
            ++sleepers_;
            spread_.sleeping(worker);
            queue_cv_.wait(lock);
            --sleepers_;
        }
        if (!empty()) return pop_locked(worker);
        if (stop_) return nullptr;
        // a run ended meanwhile: linger with the others
    }
}

}  // namespace ts::rt
