#include "run.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "dtype.hpp"
#include "validation.hpp"

namespace ts::rt {

Run::Run(const ts_run_config &config, ts_orch_fn orch, const ts_kernel_fn *kernels,
         std::vector<std::string> kernel_names, const ts_arg *args, int32_t nargs, Scheduler &scheduler)
    : config_(config),
      orch_(orch),
      kernels_(kernels),
      kernel_names_(std::move(kernel_names)),
      args_(args),
      nargs_(nargs),
      t0_(Clock::now()),
      scheduler_(scheduler) {
    if (config_.dump_level >= 1 && config_.dump_level <= 3)
        dump_ = std::make_unique<TensorDump>(config_.dump_level, scheduler_.num_workers(), config_.dump_arena_bytes,
                                             config_.dump_max_records);
    api_.abi_version = TS_ABI_VERSION;
    api_.create_tensor = &Run::api_create_tensor;
    api_.submit = &Run::api_submit;
    api_.dump_tag = &Run::api_dump_tag;
    api_.dump_in_next_task = &Run::api_dump_in_next_task;
    api_.fail = &Run::api_fail;
    for (int32_t i = 0; i < nargs_; ++i) {
        if (args_[i].kind != TS_ARG_TENSOR) continue;
        tensor_map_.register_buffer(args_[i].u.t);
        if (config_.record_edges || dump_) buffers_.push_back(ts_buffer_record{args_[i].u.t, i, 0});
    }
}

void Run::execute(ts_run_result &result) {
    scheduler_.begin(RunContext{kernels_, config_.record_tasks != 0, t0_, &failed_, dump_.get()});
    try {
        orchestrate();
    } catch (...) {
        // NOTE: only a failure to record an error gets here; the tasks already sealed must still
        // drain before this Run (their storage) can go away, and what was dumped is kept.
        failed_.store(true, std::memory_order_release);
        scheduler_.finish(static_cast<int64_t>(tasks_.size()));
        flush_dump(result);
        throw;
    }
    scheduler_.finish(static_cast<int64_t>(tasks_.size()));
    flush_dump(result);

    result.wall_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    result.status = failed_.load() ? 1 : 0;
    result.error = error_;
    if (suppressed_errors_ > 0) result.error += " (" + std::to_string(suppressed_errors_) + " later error(s) not shown)";
    result.num_tasks = static_cast<int64_t>(tasks_.size());
    result.num_dependencies = num_dependencies_;
    result.num_workers = scheduler_.num_workers();
    if (config_.record_tasks) {
        result.tasks.reserve(tasks_.size());
        for (const Task *t : tasks_)
            result.tasks.push_back(ts_task_record{t->id, t->func_id, t->worker, t->submit_ns, t->start_ns, t->end_ns});
    }
    result.task_names = std::move(task_names_);
    result.edges = std::move(edges_);
    result.task_args = std::move(task_args_);
    result.buffers = std::move(buffers_);
    result.dump_tags = std::move(dump_tags_);
}

void Run::flush_dump(ts_run_result &result) {
    // NOTE: every worker's buffer, whichever workers ran tasks (Scheduler::finish has returned,
    // so no worker touches them any more).
    if (dump_) dump_->flush(result.dump);
}

void Run::orchestrate() {
    int rc = 0;
    try {
        rc = orch_(&api_, this, args_, nargs_);
    } catch (const std::exception &e) {
        fail(std::string("the orchestration threw a C++ exception: ") + e.what());
        return;
    } catch (...) {
        fail("the orchestration threw a C++ exception of unknown type");
        return;
    }
    if (rc != 0 && !failed_.load())
        fail("the orchestration returned " + std::to_string(rc) + " without reporting an error");
}

void Run::fail(std::string message) {
    if (failed_.load()) {
        ++suppressed_errors_;
        return;
    }
    error_ = std::move(message);
    failed_.store(true, std::memory_order_release);
}

int Run::create_tensor(int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out) {
    if (failed_.load(std::memory_order_relaxed)) return 1;
    std::string why = out == nullptr ? "no output descriptor" : validate_new_tensor(dtype, ndim, shape);
    if (!why.empty()) {
        fail("create_tensor: " + why);
        return 1;
    }
    constexpr size_t kAlign = 64;
    size_t bytes = static_cast<size_t>(dtype_itemsize(dtype));
    for (int32_t d = 0; d < ndim; ++d) bytes *= static_cast<size_t>(shape[d]);
    const size_t padded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    void *data = std::aligned_alloc(kAlign, padded);
    if (data == nullptr) {
        fail("create_tensor: out of memory allocating " + std::to_string(padded) + " bytes");
        return 1;
    }
    std::memset(data, 0, padded);
    intermediates_.emplace_back(data);

    *out = ts_tensor{};
    out->data = data;
    out->buffer_id = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data));
    out->dtype = dtype;
    out->ndim = ndim;
    int64_t stride = 1;
    for (int32_t d = ndim - 1; d >= 0; --d) {
        out->shape[d] = shape[d];
        out->strides[d] = stride;
        stride *= std::max<int64_t>(shape[d], 1);
    }
    tensor_map_.register_buffer(*out);
    if (config_.record_edges || dump_) buffers_.push_back(ts_buffer_record{*out, -1, 0});
    return 0;
}

int64_t Run::submit(const SubmitRequest &req) {
    if (failed_.load(std::memory_order_relaxed)) return -1;
    std::string why = validate_submission(req, kernel_names_);
    if (!why.empty()) {
        fail(std::move(why));
        return -1;
    }

    const int64_t id = req.task_id;
    Task *task = task_arena_.allocate(1);
    ts_arg *args = arg_arena_.allocate(static_cast<size_t>(std::max(req.nargs, 1)));
    std::copy(req.args, req.args + req.nargs, args);
    task->id = id;
    task->func_id = req.func_id;
    task->nargs = req.nargs;
    task->args = args;
    if (dump_) select_dump(*task, args, req.nargs);
    if (config_.record_tasks) task->submit_ns = scheduler_.now_ns();
    if (config_.record_tasks || dump_) {
        task_names_.emplace_back(req.name != nullptr ? req.name : kernel_names_[static_cast<size_t>(req.func_id)]);
    }

    tensor_map_.add_task(id, args, req.nargs, found_);
    explicit_.assign(req.deps, req.deps + req.ndeps);
    std::sort(explicit_.begin(), explicit_.end());
    explicit_.erase(std::unique(explicit_.begin(), explicit_.end()), explicit_.end());
    if (config_.record_edges) {
        record_edges(id);
        for (int32_t i = 0; i < req.nargs; ++i) task_args_.push_back(ts_task_arg_record{id, i, 0, args[i]});
    }

    preds_.clear();
    for (const FoundEdge &e : found_) preds_.push_back(e.pred);
    preds_.insert(preds_.end(), explicit_.begin(), explicit_.end());
    std::sort(preds_.begin(), preds_.end());
    preds_.erase(std::unique(preds_.begin(), preds_.end()), preds_.end());
    for (int64_t p : preds_) scheduler_.add_dependency(*tasks_[static_cast<size_t>(p)], *task);
    num_dependencies_ += static_cast<int64_t>(preds_.size());

    tasks_.push_back(task);
    scheduler_.seal(*task);
    return id;
}

void Run::select_dump(Task &task, const ts_arg *args, int32_t nargs) {
    if (dump_->level() != 1) {
        task.dump = kDumpAll;
        return;
    }
    if (dump_tagged_buffers_.empty() && dump_next_buffers_.empty()) return;
    uint8_t *chosen = nullptr;
    for (int32_t i = 0; i < nargs; ++i) {
        if (args[i].kind != TS_ARG_TENSOR) continue;
        const int64_t buffer = args[i].u.t.buffer_id;
        if (dump_tagged_buffers_.count(buffer) == 0 && dump_next_buffers_.count(buffer) == 0) continue;
        if (chosen == nullptr) chosen = dump_args_arena_.allocate(static_cast<size_t>(nargs));
        chosen[i] = 1;
    }
    dump_next_buffers_.clear();  // they applied to this task only
    if (chosen == nullptr) return;
    for (int32_t i = 0; i < nargs; ++i)
        if (args[i].kind == TS_ARG_SCALAR) chosen[i] = 1;  // the scalars of a task with a tagged tensor
    task.dump = kDumpSelected;
    task.dump_args = chosen;
}

void Run::record_edges(int64_t succ) {
    for (const FoundEdge &e : found_)
        edges_.push_back(ts_edge_record{e.pred, succ, e.arg_index, e.kind, TS_EDGE_TENSORMAP, 0});
    for (int64_t p : explicit_) edges_.push_back(ts_edge_record{p, succ, -1, TS_EDGE_ORDER, TS_EDGE_EXPLICIT, 0});
}

// NOTE: the trampolines below are called from orchestration code that may be plain C, so no
// exception may unwind through them: a failure inside the runtime becomes a recorded error.

int Run::api_create_tensor(void *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out) {
    Run *run = static_cast<Run *>(ctx);
    try {
        return run->create_tensor(dtype, ndim, shape, out);
    } catch (const std::exception &e) {
        run->fail(std::string("create_tensor: runtime internal error: ") + e.what());
        return 1;
    }
}

int64_t Run::api_submit(void *ctx, int32_t func_id, const ts_arg *args, int32_t nargs, const int64_t *deps,
                        int32_t ndeps, const char *name) {
    Run *run = static_cast<Run *>(ctx);
    try {
        const SubmitRequest req{static_cast<int64_t>(run->tasks_.size()), func_id, args, nargs, deps, ndeps, name};
        return run->submit(req);
    } catch (const std::exception &e) {
        run->fail(std::string("submit: runtime internal error: ") + e.what());
        return -1;
    }
}

void Run::api_dump_tag(void *ctx, const ts_tensor *t) {
    Run *run = static_cast<Run *>(ctx);
    try {
        run->dump_tag(t);
    } catch (const std::exception &e) {
        run->fail(std::string("dump_tag: runtime internal error: ") + e.what());
    }
}

void Run::api_fail(void *ctx, const char *message) {
    Run *run = static_cast<Run *>(ctx);
    try {
        run->fail(message != nullptr && *message ? message : "the orchestration failed (no message given)");
    } catch (const std::exception &) {
        run->failed_.store(true, std::memory_order_release);  // out of memory for the message itself
    }
}

bool Run::valid_dump_tensor(const char *what, const ts_tensor *t) {
    if (failed_.load(std::memory_order_relaxed)) return false;
    ts_arg probe{};
    probe.kind = TS_ARG_TENSOR;
    probe.dir = TS_IN;
    if (t != nullptr) probe.u.t = *t;
    const std::string why = t == nullptr ? "no tensor given" : validate_arg(probe);
    if (!why.empty()) {
        fail(std::string(what) + ": " + why);
        return false;
    }
    return true;
}

void Run::dump_tag(const ts_tensor *t) {
    if (!valid_dump_tensor("dump_tag", t)) return;
    dump_tags_.push_back(ts_dump_tag_record{*t, static_cast<int64_t>(tasks_.size())});
    if (dump_) dump_tagged_buffers_.insert(t->buffer_id);
}

void Run::dump_in_next_task(const ts_tensor *t) {
    if (!valid_dump_tensor("dumps=", t)) return;
    if (dump_) dump_next_buffers_.insert(t->buffer_id);
}

void Run::api_dump_in_next_task(void *ctx, const ts_tensor *t) {
    Run *run = static_cast<Run *>(ctx);
    try {
        run->dump_in_next_task(t);
    } catch (const std::exception &e) {
        run->fail(std::string("dumps=: runtime internal error: ") + e.what());
    }
}

}  // namespace ts::rt
