// How a run fails: the first failure recorded (Run::fail_with, under fail_mu_) with what the place
// that made it knew (FailureCause), the hooks the scheduler and the guard zones call (a kernel
// that threw, a damaged guard zone, a task past its budget, a stopped thread, Ctrl-C), the
// deadlock report, and the orchestration's fail / fail_region.
#include "graph_run.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "orchestration_call.hpp"
#include "saved_inputs.hpp"

namespace ts::rt {

void Run::fail(std::string message) {
    // NOTE: called on the orchestration thread only (its own errors): the tasks it made ready
    // before the error are queued, as they were before they were batched
    scheduler_.flush_batch();
    fail_with(TS_FAILURE_ERROR, nullptr, -1, message);
}

namespace {

void copy_name(char *out, size_t size, const char *name) {
    if (name == nullptr) return;
    std::snprintf(out, size, "%s", name);
}

}  // namespace

bool Run::fail_with(int32_t kind, const Task *t, int32_t worker, const std::string &message,
                    const FailureCause &cause) {
    std::lock_guard<std::mutex> lock(fail_mu_);
    const bool kernel_error = kind == TS_FAILURE_KERNEL_ERROR && t != nullptr;
    if (failed_.load()) {
        ++suppressed_errors_;
        // NOTE: an earlier task's kernel error replaces a later one's (the earlier task was
        // still allowed to run, see run_before_): the report names the first task in submission
        // order that failed, as a serial run would.
        const bool earlier = kernel_error && failure_.kind == TS_FAILURE_KERNEL_ERROR && t->id < failure_.task_id;
        if (!earlier) return false;
        failure_ = ts_failure_record{};
    }
    error_ = message;
    failure_.kind = kind;
    failure_.worker = worker;
    failure_.task_id = t != nullptr ? t->id : -1;
    failure_.func_id = t != nullptr ? t->func_id : cause.func_id;
    failure_.cause = cause.cause;
    failure_.arg_index = cause.arg_index;
    copy_name(failure_.op, sizeof(failure_.op), cause.op);
    copy_name(failure_.tensor, sizeof(failure_.tensor), cause.tensor);
    copy_name(failure_.where, sizeof(failure_.where), cause.where);
    run_before_.store(kernel_error ? t->id : 0, std::memory_order_release);
    failed_.store(true, std::memory_order_release);
    return true;
}

void Run::interrupted(const std::vector<std::pair<const Task *, int32_t>> &running) {
    run_before_.store(0, std::memory_order_release);  // Ctrl-C: no task starts any more
    std::string message = "Ctrl-C (SIGINT): ";
    if (running.empty()) {
        message += "no task was running; the tasks not yet run were skipped";
    } else {
        message += "stopped ";
        for (size_t i = 0; i < running.size(); ++i) {
            if (i) message += ", ";
            message += describe(*running[i].first) + " on worker " + std::to_string(running[i].second);
        }
        message += "; the tasks not yet run were skipped";
    }
    fail_with(TS_FAILURE_INTERRUPTED, running.empty() ? nullptr : running.front().first,
              running.empty() ? -1 : running.front().second, message);
}

std::string Run::describe(const Task &t) const {
    return "task " + std::to_string(t.id) + " (kernel " + kernel_names_[static_cast<size_t>(t.func_id)] + ")";
}

void Run::kernel_threw(const Task &t, int32_t worker, const char *what, const ts::CheckSite *site) {
    FailureCause cause;
    if (site != nullptr) {
        cause.cause = TS_CAUSE_BOUNDS;
        cause.arg_index = site->arg;
        cause.op = site->op;
        cause.tensor = site->tensor;
        cause.where = site->where;
    }
    if (fail_with(TS_FAILURE_KERNEL_ERROR, &t, worker, describe(t) + " on worker " + std::to_string(worker) + ": " + what,
                  cause))
        save_inputs(t, worker);
}

void Run::guard_damaged(const Task *t, int32_t worker, bool exact, int32_t arg, const std::string &message) {
    // NOTE: the writer's inputs are saved only when it is known; an inout among them is partial.
    FailureCause cause;
    cause.arg_index = arg;
    if (fail_with(TS_FAILURE_GUARD, t, worker, message, cause) && t != nullptr && exact) save_inputs(*t, worker);
}

void Run::timed_out(const Task *t, int32_t worker, const Charge &charge) {
    char budget[32];
    std::snprintf(budget, sizeof(budget), "%g s", config_.task_timeout_s);
    std::string message;
    if (t != nullptr) {
        message = describe(*t) + " " + charge.words() + " on worker " + std::to_string(worker) +
                  ", past task_timeout_s (" + budget + "); it was stopped";
    } else {
        message = "the orchestration " + charge.words() + " without a runtime call (" +
                  std::to_string(tasks_.size()) + " task(s) submitted so far), past task_timeout_s (" + budget +
                  "); it was stopped";
    }
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (failed_.load()) return;  // NOTE: stopping it still proceeds (the watchdog retries)
    error_ = message;
    failure_.kind = TS_FAILURE_TIMEOUT;
    failure_.worker = worker;
    failure_.task_id = t != nullptr ? t->id : -1;
    failure_.func_id = t != nullptr ? t->func_id : -1;
    failure_.elapsed_ns = charge.charged_ns();
    failure_.wall_ns = charge.wall_ns;
    failure_.cpu_ns = charge.wall_only ? -1 : charge.cpu_ns;
    failure_.blocked_ns = charge.wall_only ? 0 : charge.blocked_ns;
    failed_.store(true, std::memory_order_release);
}

void Run::stopped(const Task *t, int32_t worker, const uint64_t *frames, int32_t nframes) {
    {
        std::lock_guard<std::mutex> lock(fail_mu_);
        const int64_t id = t != nullptr ? t->id : -1;
        if (t == nullptr && interrupt_pending() && !failed_.load()) {  // Ctrl-C in the orchestration
            error_ = "Ctrl-C (SIGINT): stopped the orchestration (" + std::to_string(tasks_.size()) +
                     " task(s) submitted so far); the tasks not yet run were skipped";
            failure_.kind = TS_FAILURE_INTERRUPTED;
            failure_.task_id = failure_.func_id = failure_.worker = -1;
            failed_.store(true, std::memory_order_release);
        }
        const bool stopped_kind = failure_.kind == TS_FAILURE_TIMEOUT || failure_.kind == TS_FAILURE_INTERRUPTED;
        if (stopped_kind && failure_.task_id == id && failure_.nframes == 0) {
            failure_.nframes = std::min<int32_t>(nframes, TS_MAX_FRAMES);
            std::copy(frames, frames + failure_.nframes, failure_.frames);
        }
    }
    if (t != nullptr) save_inputs(*t, worker);
}

void Run::save_inputs(const Task &t, int32_t worker) {
    std::lock_guard<std::mutex> lock(fail_mu_);
    // NOTE: the failure's own task replaces whatever task was saved first (a kernel error that
    // was replaced by an earlier task's, or a task stopped beside the one that failed).
    if (saved_task_ >= 0 && (t.id != failure_.task_id || saved_task_ == t.id)) return;
    saved_task_ = t.id;
    saved_.clear();
    saved_payload_.clear();
    save_task_inputs(t, worker, nullptr, saved_, saved_payload_);
}

void Run::report_deadlock() {
    std::vector<Task *> blocked;
    for (Task *t : tasks_) {
        std::lock_guard<std::mutex> lock(t->mu);
        if (!t->done) blocked.push_back(t);
    }
    auto done = [&](int64_t id) {
        std::lock_guard<std::mutex> lock(tasks_[static_cast<size_t>(id)]->mu);
        return tasks_[static_cast<size_t>(id)]->done;
    };
    std::vector<ts_wait_record> waits;
    const int64_t submitted = static_cast<int64_t>(tasks_.size());
    for (const Task *t : blocked) {
        for (int32_t k = 0; k < t->nfound; ++k) {
            const FoundEdge &e = t->found[k];
            if (done(e.pred)) continue;
            ts_wait_record w{};
            w.task = t->id;
            w.pred = e.pred;
            w.func_id = t->func_id;
            w.pred_func_id = tasks_[static_cast<size_t>(e.pred)]->func_id;
            w.kind = e.kind;
            w.source = TS_EDGE_TENSORMAP;
            w.arg_index = e.arg_index;
            w.arg = t->args[e.arg_index];
            waits.push_back(w);
        }
        for (int32_t k = 0; k < t->ndeps; ++k) {
            const int64_t d = t->deps[k];
            const bool missing = d >= submitted;
            if (!missing && done(d)) continue;
            ts_wait_record w{};
            w.task = t->id;
            w.pred = d;
            w.func_id = t->func_id;
            w.pred_func_id = missing ? -1 : tasks_[static_cast<size_t>(d)]->func_id;
            w.pred_state = missing ? 1 : 0;
            w.kind = TS_EDGE_ORDER;
            w.source = TS_EDGE_EXPLICIT;
            w.arg_index = -1;
            waits.push_back(w);
        }
    }
    std::string message = "deadlock: " + (read_deadlock_.empty() ? "" : read_deadlock_ + "; ") +
                          std::to_string(blocked.size()) + " of " + std::to_string(submitted) +
                          " task(s) can never run";
    for (const ts_wait_record &w : waits) {
        if (w.pred_state == 1) {
            message += " (task " + std::to_string(w.task) + " waits for task " + std::to_string(w.pred) +
                       ", which was never submitted)";
            break;
        }
    }
    if (fail_with(TS_FAILURE_DEADLOCK, blocked.empty() ? nullptr : blocked.front(), -1, message)) {
        std::lock_guard<std::mutex> lock(fail_mu_);
        waits_ = std::move(waits);
    }
    scheduler_.abandon(blocked);
}

void Run::api_fail(void *ctx, const char *message) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
    try {
        run->fail(message != nullptr && *message ? message : "the orchestration failed (no message given)");
    } catch (const std::exception &) {
        run->failed_.store(true, std::memory_order_release);  // out of memory for the message itself
    }
}

void Run::api_fail_region(void *ctx, int32_t func_id, int32_t arg_index, const char *message) {
    api_fail_region_at(ctx, func_id, arg_index, nullptr, message);
}

void Run::api_fail_region_at(void *ctx, int32_t func_id, int32_t arg_index, const char *where,
                             const char *message) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
    FailureCause cause;
    cause.cause = TS_CAUSE_REGION;
    cause.func_id = func_id >= 0 && func_id < static_cast<int32_t>(run->kernel_names_.size()) ? func_id : -1;
    cause.arg_index = arg_index;
    cause.op = "call";
    cause.where = where;
    try {
        run->fail_with(TS_FAILURE_ERROR, nullptr, -1,
                       message != nullptr && *message ? message : "the orchestration failed (no message given)", cause);
    } catch (const std::exception &) {
        run->failed_.store(true, std::memory_order_release);  // out of memory for the message itself
    }
}

}  // namespace ts::rt
