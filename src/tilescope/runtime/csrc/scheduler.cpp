#include "scheduler.hpp"

#include <algorithm>

#include "tensor_dump.hpp"

namespace ts::rt {

namespace {

constexpr auto kSpinTime = std::chrono::microseconds(50);
constexpr int64_t kUnknownCount = INT64_MAX / 2;  // more tasks than any run can submit

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

Scheduler::Scheduler(int32_t num_workers)
    : num_workers_(num_workers), max_spinners_(std::max(1, num_workers / 2)) {}

Scheduler::~Scheduler() { stop_workers(); }

void Scheduler::start_workers() {
    workers_.reserve(static_cast<size_t>(num_workers_));
    // NOTE: reserved, so a thread that fails to start leaves the vector as it was and a later
    // call starts the missing workers with the right indices.
    while (static_cast<int32_t>(workers_.size()) < num_workers_) {
        const int32_t index = static_cast<int32_t>(workers_.size());
        workers_.emplace_back(&Scheduler::worker_main, this, index);
    }
}

void Scheduler::begin(const RunContext &context) {
    context_ = context;
    remaining_.store(kUnknownCount, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(done_mu_);
        ended_ = false;
    }
    run_active_.store(true, std::memory_order_relaxed);
}

int64_t Scheduler::now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - context_.t0).count();
}

void Scheduler::add_dependency(Task &pred, Task &succ) {
    std::lock_guard<std::mutex> lock(pred.mu);
    if (pred.done) return;
    succ.pending.fetch_add(1, std::memory_order_acq_rel);
    pred.successors.push_back(&succ);
}

void Scheduler::seal(Task &t) {
    if (t.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) push(&t);
}

void Scheduler::finish(int64_t submitted) {
    const int64_t unknown = kUnknownCount - submitted;
    if (remaining_.fetch_sub(unknown, std::memory_order_acq_rel) == unknown) {
        run_active_.store(false, std::memory_order_relaxed);  // every task had completed already
        return;
    }
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait(lock, [&] { return ended_; });
}

void Scheduler::end_run() {
    // NOTE: before ended_, so that no worker spins for a run that is over, and so that this
    // store cannot land after the next run's begin().
    run_active_.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(done_mu_);
    ended_ = true;
    done_cv_.notify_one();
}

void Scheduler::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        stop_ = true;
    }
    run_active_.store(false, std::memory_order_relaxed);
    queue_cv_.notify_all();
    for (std::thread &w : workers_)
        if (w.joinable()) w.join();
    workers_.clear();
}

void Scheduler::worker_main(int32_t index) {
    Task *next = nullptr;
    for (;;) {
        Task *t = next ? next : acquire();
        if (t == nullptr) return;
        execute(*t, index);
        next = complete(*t);
    }
}

void Scheduler::execute(Task &t, int32_t worker) {
    if (context_.failed->load(std::memory_order_acquire)) return;
    // NOTE: TS_RUNTIME_NO_DUMP builds the core without the dump hooks, only so that
    // benchmarks/dump_throughput.py can show the hooks cost nothing measurable when off.
#ifndef TS_RUNTIME_NO_DUMP
    if (context_.dump != nullptr) context_.dump->before_dispatch(t, worker);
#endif
    if (context_.record_times) t.start_ns = now_ns();
    context_.kernels[t.func_id](t.args);
    if (context_.record_times) t.end_ns = now_ns();
#ifndef TS_RUNTIME_NO_DUMP
    if (context_.dump != nullptr) context_.dump->after_completion(t, worker);
#endif
    t.worker = worker;
}

Task *Scheduler::complete(Task &t) {
    std::vector<Task *> successors;
    {
        std::lock_guard<std::mutex> lock(t.mu);
        t.done = true;
        successors.swap(t.successors);
    }
    Task *next = nullptr;
    for (Task *s : successors) {
        if (s->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
        if (next == nullptr)
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
        ready_.push_back(t);
        queued_.store(static_cast<int64_t>(ready_.size()), std::memory_order_relaxed);
        wake = sleepers_ > 0;
    }
    // NOTE: a spinner re-checks the queue under the lock before it sleeps, so skipping the
    // (syscall-priced) notify while one is spinning cannot strand the task.
    if (wake && spinners_.load(std::memory_order_seq_cst) == 0) queue_cv_.notify_one();
}

Task *Scheduler::pop_locked() {
    Task *t = ready_.front();
    ready_.pop_front();
    queued_.store(static_cast<int64_t>(ready_.size()), std::memory_order_relaxed);
    if (!ready_.empty() && sleepers_ > 0 && spinners_.load(std::memory_order_seq_cst) == 0)
        queue_cv_.notify_one();
    return t;
}

Task *Scheduler::acquire() {
    if (run_active_.load(std::memory_order_relaxed)) {
        if (spinners_.fetch_add(1, std::memory_order_seq_cst) < max_spinners_) {
            const auto deadline = Clock::now() + kSpinTime;
            for (uint32_t i = 1; run_active_.load(std::memory_order_relaxed); ++i) {
                if (queued_.load(std::memory_order_relaxed) > 0) {
                    std::lock_guard<std::mutex> lock(queue_mu_);
                    if (!ready_.empty()) {
                        spinners_.fetch_sub(1, std::memory_order_seq_cst);
                        return pop_locked();
                    }
                }
                cpu_relax();
                if (i % 64 == 0 && Clock::now() > deadline) break;
            }
        }
        spinners_.fetch_sub(1, std::memory_order_seq_cst);
    }
    std::unique_lock<std::mutex> lock(queue_mu_);
    while (ready_.empty() && !stop_) {
        ++sleepers_;
        queue_cv_.wait(lock);
        --sleepers_;
    }
    if (ready_.empty()) return nullptr;
    return pop_locked();
}

}  // namespace ts::rt
