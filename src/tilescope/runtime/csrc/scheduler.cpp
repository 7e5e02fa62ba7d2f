#include "scheduler.hpp"

#include <algorithm>

namespace ts::rt {

namespace {

constexpr auto kSpinTime = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

Scheduler::Scheduler(const ts_kernel_fn *kernels, int32_t num_workers, bool record_times,
                     Clock::time_point t0, const std::atomic<bool> &failed)
    : kernels_(kernels),
      num_workers_(num_workers),
      max_spinners_(std::max(1, num_workers / 2)),
      record_times_(record_times),
      t0_(t0),
      failed_(failed) {}

Scheduler::~Scheduler() { stop_workers(); }

void Scheduler::start() {
    workers_.reserve(static_cast<size_t>(num_workers_));
    for (int32_t i = 0; i < num_workers_; ++i) workers_.emplace_back(&Scheduler::worker_main, this, i);
}

int64_t Scheduler::now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
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
    target_.store(submitted, std::memory_order_release);
    {
        std::unique_lock<std::mutex> lock(done_mu_);
        done_cv_.wait(lock, [&] { return completed_.load(std::memory_order_acquire) == submitted; });
    }
    stop_workers();
}

void Scheduler::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        stop_ = true;
    }
    stopping_.store(true, std::memory_order_release);
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
    if (failed_.load(std::memory_order_acquire)) return;
    if (record_times_) t.start_ns = now_ns();
    kernels_[t.func_id](t.args);
    if (record_times_) t.end_ns = now_ns();
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
    const int64_t completed = completed_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (completed == target_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(done_mu_);
        done_cv_.notify_all();
    }
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
    if (spinners_.fetch_add(1, std::memory_order_seq_cst) < max_spinners_) {
        const auto deadline = Clock::now() + kSpinTime;
        for (uint32_t i = 1; !stopping_.load(std::memory_order_acquire); ++i) {
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
