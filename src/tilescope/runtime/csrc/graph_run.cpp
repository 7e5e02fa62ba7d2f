#include "graph_run.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include <tilescope/index.hpp>

#include "dtype.hpp"
#include "orchestration_call.hpp"
#include "saved_inputs.hpp"
#include "validation.hpp"

namespace ts::rt {

Run::Run(const ts_run_config &config, ts_orch_fn orch, const ts_kernel_fn *kernels,
         std::vector<std::string> kernel_names, const ts_arg *args, int32_t nargs, Scheduler &scheduler,
         GuardPool &pool, RunMemory &memory)
    : config_(config),
      orch_(orch),
      kernels_(kernels),
      kernel_names_(std::move(kernel_names)),
      args_(args),
      nargs_(nargs),
      t0_(Clock::now()),
      memory_(memory),
      guard_zones_(scheduler.num_workers(), *this, kernel_names_, pool),
      scheduler_(scheduler) {
    tasks_.swap(memory_.tasks);  // NOTE: empty, with the last run's capacity
    api_.abi_version = TS_ABI_VERSION;
    api_.create_tensor = &Run::api_create_tensor;
    api_.submit = &Run::api_submit;
    api_.dump_tag = &Run::api_dump_tag;
    api_.dump_in_next_task = &Run::api_dump_in_next_task;
    api_.fail = &Run::api_fail;
    api_.fail_region = &Run::api_fail_region;
    api_.fail_region_at = &Run::api_fail_region_at;
    api_.name_tensor = &Run::api_name_tensor;
    api_.read = &Run::api_read;
    api_.max_tasks = &Run::api_max_tasks;
    for (const std::string &name : kernel_names_) kernel_cnames_.push_back(name.c_str());
    const int32_t workers = scheduler_.num_workers();
    if ((config_.dump_level >= 1 && config_.dump_level <= 3) || config_.probes)
        dump_ = std::make_unique<TensorDump>(config_.dump_level >= 1 && config_.dump_level <= 3 ? config_.dump_level : 0,
                                             workers, config_.dump_arena_bytes, config_.dump_max_records,
                                             config_.probes != 0);
    if (config_.nan_check) nan_check_ = std::make_unique<NanCheck>(workers);
    if (config_.print_intermediates == 3)
        task_lines_ = std::make_unique<TaskLines>(workers, kernel_cnames_.data(), config_.kernel_filter);
    if (config_.pmu) pmu_ = std::make_unique<Pmu>(workers);
    if (config_.record_task_times) task_times_ = std::make_unique<TaskTimes>(t0_);
    failure_.task_id = -1;
    failure_.func_id = -1;
    failure_.worker = -1;
    for (int32_t i = 0; i < nargs_; ++i) {
        if (args_[i].kind != TS_ARG_TENSOR) continue;
        tensor_map_.register_buffer(args_[i].u.t);
        buffers_.push_back(ts_buffer_record{args_[i].u.t, i, 0});
        buffer_names_.emplace_back();
    }
    for (int32_t k = 0; k < config_.num_guard_zones && config_.guard_zones != nullptr; ++k) {
        const ts_guard_zone &zone = config_.guard_zones[k];
        const int32_t i = zone.program_arg;
        std::string why = i < 0 || i >= nargs_ || args_[i].kind != TS_ARG_TENSOR
                              ? "guard_zones: " + std::to_string(i) + " is not a tensor program argument"
                              : guard_zones_.adopt(i, args_[i].u.t, zone);
        if (!why.empty()) {
            fail(std::move(why));
            break;
        }
    }
}

Run::~Run() {
    tasks_.clear();
    // NOTE: a list past the bound (a huge or runaway run) is freed rather than kept for the runtime's life
    if (tasks_.capacity() * sizeof(Task *) <= RunMemory::kKeptTaskBytes) memory_.tasks.swap(tasks_);
}

void Run::execute(ts_run_result &result) {
    RunContext context;
    context.kernels = kernels_;
    context.failed = &failed_;
    context.run_before = &run_before_;
    context.observers = observers();
    context.hooks = this;
    context.serial = config_.serial != 0;
    context.shuffle_seed = config_.shuffle_seed;
    context.kernel_names = kernel_cnames_.data();
    context.crash_report_path = config_.crash_report_path;
    context.timeout_ns = config_.task_timeout_s > 0 ? static_cast<int64_t>(config_.task_timeout_s * 1e9) : 0;
    scheduler_.begin(context);
    try {
        orchestrate();
    } catch (...) {
        // NOTE: only a failure to record an error gets here; the tasks already sealed must still
        // drain before this Run (their storage) can go away, and what was dumped is kept.
        failed_.store(true, std::memory_order_release);
        if (!scheduler_.finish(static_cast<int64_t>(tasks_.size()))) report_deadlock();
        flush_dump(result);
        throw;
    }
    if (!scheduler_.finish(static_cast<int64_t>(tasks_.size()))) report_deadlock();
    if (interrupt_pending() && !failed_.load()) interrupted({});  // Ctrl-C after the last task
    if (!failed_.load()) guard_zones_.check_all();
    flush_dump(result);
    fill_result(result);
}

TaskObservers Run::observers() {
    TaskObservers list;
    list.add(&guard_zones_);
    if (dump_) list.add(dump_.get());
    if (nan_check_) list.add(nan_check_.get());
    if (task_lines_) list.add(task_lines_.get());
    if (pmu_) list.add(pmu_.get());
    if (task_times_) list.add(task_times_.get());
    return list;
}

void Run::fill_result(ts_run_result &result) {
    result.wall_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    std::lock_guard<std::mutex> lock(fail_mu_);
    result.status = failed_.load() ? 1 : 0;
    result.error = error_;
    if (suppressed_errors_ > 0) result.error += " (" + std::to_string(suppressed_errors_) + " later error(s) not shown)";
    result.failure = failure_;
    result.waits = std::move(waits_);
    result.saved_task = saved_task_;
    result.saved = std::move(saved_);
    result.saved_payload = std::move(saved_payload_);
    if (nan_check_) nan_check_->fill(result);
    if (pmu_) pmu_->fill(result);
    result.num_tasks = static_cast<int64_t>(tasks_.size());
    result.num_dependencies = num_dependencies_;
    result.num_workers = scheduler_.num_workers();
    if (config_.record_task_times) {
        result.tasks.reserve(tasks_.size());
        for (const Task *t : tasks_)
            result.tasks.push_back(ts_task_record{t->id, t->func_id, t->worker, t->submit_ns, t->start_ns, t->end_ns});
    }
    result.task_names = std::move(task_names_);
    result.edges = std::move(edges_);
    result.task_args = std::move(task_args_);
    result.buffers = std::move(buffers_);
    result.buffer_names = std::move(buffer_names_);
    result.dump_tags = std::move(dump_tags_);
    fill_reads(result);
}

void Run::flush_dump(ts_run_result &result) {
    // NOTE: every worker's buffer, whichever workers ran tasks (Scheduler::finish has returned,
    // so no worker touches them any more).
    if (dump_) dump_->flush(result.dump);
}

void Run::orchestrate() {
    ThreadSlot &slot = scheduler_.orch_slot();
    ThreadSlot *const outer = current_slot();
    set_current_slot(&slot);
    slot.task = nullptr;
    slot.kernel_name = "orchestration";
    // NOTE: unlike kernels, orchestration code allocates; it is stopped only inside its own module.
    if (!module_code_range(reinterpret_cast<const void *>(orch_), &slot.code_lo, &slot.code_hi))
        slot.code_lo = slot.code_hi = 0;
    volatile int rc = 0;
    slot.seq.fetch_add(1, std::memory_order_release);  // odd: orchestration code runs
    if (sigsetjmp(slot.jump, 0) == 0) {
        slot.armed = 1;
        try {
            rc = orch_(&api_, this, args_, nargs_);
            slot.armed = 0;
        } catch (const ts::ArithmeticError &e) {  // a checked division or overflow: its message names the line
            slot.armed = 0;
            fail(e.what());
        } catch (const std::exception &e) {
            slot.armed = 0;
            fail(std::string("the orchestration threw a C++ exception: ") + e.what());
        } catch (...) {
            slot.armed = 0;
            fail("the orchestration threw a C++ exception of unknown type");
        }
    } else {
        stopped(nullptr, -1, slot.frames, slot.nframes);
    }
    slot.seq.fetch_add(1, std::memory_order_release);
    set_current_slot(outer);
    if (rc != 0 && !failed_.load() && read_deadlock_.empty())
        fail("the orchestration returned " + std::to_string(rc) + " without reporting an error");
}

int Run::create_tensor(int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out) {
    scheduler_.flush_batch();  // NOTE: a large tensor (poisoned, guarded) takes long to make
    if (failed_.load(std::memory_order_relaxed)) return 1;
    std::string why = out == nullptr ? "no output descriptor" : validate_new_tensor(dtype, ndim, shape);
    if (!why.empty()) {
        fail("create_tensor: " + why);
        return 1;
    }
    size_t bytes = static_cast<size_t>(dtype_itemsize(dtype));
    for (int32_t d = 0; d < ndim; ++d) bytes *= static_cast<size_t>(shape[d]);
    ts_tensor desc{};
    desc.dtype = dtype;
    desc.ndim = ndim;
    std::copy(shape, shape + ndim, desc.shape);
    void *data = guard_zones_.allocate(desc, bytes);
    if (data == nullptr) {
        fail("create_tensor: out of memory allocating " + std::to_string(bytes) + " bytes");
        return 1;
    }
    if (config_.poison != 0) std::memset(data, config_.poison & (dtype == TS_BOOL ? 0x01 : 0xFF), bytes);

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
    buffers_.push_back(ts_buffer_record{*out, -1, 0});
    buffer_names_.emplace_back();
    return 0;
}

int64_t Run::submit(const SubmitRequest &req) {
    if (failed_.load(std::memory_order_relaxed)) return -1;
    if (config_.max_tasks > 0 && req.task_id >= config_.max_tasks) {
        const char *kernel = req.func_id >= 0 && static_cast<size_t>(req.func_id) < kernel_names_.size()
                                 ? kernel_names_[static_cast<size_t>(req.func_id)].c_str()
                                 : "?";
        fail("the orchestration submitted " + std::to_string(req.task_id) + " tasks, the most a run may hold " +
             "(max_tasks = " + std::to_string(config_.max_tasks) + ", TILESCOPE_MAX_TASKS), and submits more (" +
             kernel + "): a loop runs far longer than meant (a bound read as a huge value?); raise max_tasks if " +
             "the program means it");
        return -1;
    }
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
    guard_zones_.attach(*task, zone_list_arena_);
    if (dump_) select_dump(*task, args, req.nargs);
    if (task_times_) task->submit_ns = task_times_->now_ns();
    if (config_.record_task_times || dump_) {
        task_names_.emplace_back(req.name != nullptr ? req.name : kernel_names_[static_cast<size_t>(req.func_id)]);
    }

    tensor_map_.add_task(id, args, req.nargs, found_);
    explicit_.assign(req.deps, req.deps + req.ndeps);
    std::sort(explicit_.begin(), explicit_.end());
    explicit_.erase(std::unique(explicit_.begin(), explicit_.end()), explicit_.end());
    if (!found_.empty()) {
        FoundEdge *found = found_arena_.allocate(found_.size());
        std::copy(found_.begin(), found_.end(), found);
        task->found = found;
        task->nfound = static_cast<int32_t>(found_.size());
    }
    if (!explicit_.empty()) {
        int64_t *deps = deps_arena_.allocate(explicit_.size());
        std::copy(explicit_.begin(), explicit_.end(), deps);
        task->deps = deps;
        task->ndeps = static_cast<int32_t>(explicit_.size());
    }
    if (config_.record_edges) {
        record_edges(id);
        for (int32_t i = 0; i < req.nargs; ++i) task_args_.push_back(ts_task_arg_record{id, i, 0, args[i]});
    }

    preds_.clear();
    for (const FoundEdge &e : found_) preds_.push_back(e.pred);
    for (int64_t d : explicit_) {
        if (d < id) {
            preds_.push_back(d);
        } else {  // a forward dep: counted now, linked when task d is submitted
            task->pending.fetch_add(1, std::memory_order_relaxed);
            forward_waiters_[d].push_back(id);
        }
    }
    std::sort(preds_.begin(), preds_.end());
    preds_.erase(std::unique(preds_.begin(), preds_.end()), preds_.end());
    if (!preds_.empty()) {
        SuccessorEdge *edges = edge_arena_.allocate(preds_.size());
        for (size_t i = 0; i < preds_.size(); ++i)
            scheduler_.add_dependency(*tasks_[static_cast<size_t>(preds_[i])], *task, &edges[i]);
    }
    num_dependencies_ += static_cast<int64_t>(preds_.size());

    // NOTE: the forward edges' nodes before the task joins tasks_: out of memory here must not
    // leave a task counted that is never sealed (a deadlock reported after the real error)
    const auto waiting = forward_waiters_.empty() ? forward_waiters_.end() : forward_waiters_.find(id);
    SuccessorEdge *forward =
        waiting != forward_waiters_.end() ? edge_arena_.allocate(waiting->second.size()) : nullptr;
    tasks_.push_back(task);
    if (forward != nullptr) {
        for (size_t i = 0; i < waiting->second.size(); ++i) {
            const int64_t w = waiting->second[i];
            scheduler_.link(*task, *tasks_[static_cast<size_t>(w)], &forward[i]);
            if (config_.record_edges) edges_.push_back(ts_edge_record{id, w, -1, TS_EDGE_ORDER, TS_EDGE_EXPLICIT, 0});
        }
        num_dependencies_ += static_cast<int64_t>(waiting->second.size());
        forward_waiters_.erase(waiting);
    }
    scheduler_.seal(*task);
    return id;
}

void Run::select_dump(Task &task, const ts_arg *args, int32_t nargs) {
    if (dump_->level() == 0) return;  // probes only: no argument is dumped
    if (dump_->level() != 1) {
        if (config_.kernel_filter == nullptr || config_.kernel_filter[task.func_id]) task.dump = kDumpAll;
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
    for (int64_t p : explicit_)
        if (p < succ) edges_.push_back(ts_edge_record{p, succ, -1, TS_EDGE_ORDER, TS_EDGE_EXPLICIT, 0});
}

// NOTE: the trampolines below are called from orchestration code that may be plain C, so no
// exception may unwind through them: a failure inside the runtime becomes a recorded error.

int Run::api_create_tensor(void *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
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
    const OrchestrationCall call(run);
    try {
        const SubmitRequest req{static_cast<int64_t>(run->tasks_.size()), func_id, args, nargs, deps, ndeps, name};
        return run->submit(req);
    } catch (const std::bad_alloc &) {
        run->fail("out of memory holding the task graph after " + std::to_string(run->tasks_.size()) +
                  " tasks: a loop submits far more tasks than meant (a bound read as a huge value?), or the "
                  "machine (or ulimit -v) allows less; lower max_tasks (TILESCOPE_MAX_TASKS) to stop such a run "
                  "sooner");
        return -1;
    } catch (const std::exception &e) {
        run->fail(std::string("submit: runtime internal error: ") + e.what());
        return -1;
    }
}

void Run::api_dump_tag(void *ctx, const ts_tensor *t) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
    try {
        run->dump_tag(t);
    } catch (const std::exception &e) {
        run->fail(std::string("dump_tag: runtime internal error: ") + e.what());
    }
}

int64_t Run::api_max_tasks(void *ctx) { return static_cast<Run *>(ctx)->config_.max_tasks; }

void Run::api_name_tensor(void *ctx, const ts_tensor *t, const char *name) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
    if (t == nullptr || name == nullptr) return;
    try {
        // NOTE: the tensor was just created: search from the newest buffer.
        for (size_t i = run->buffers_.size(); i-- > 0;) {
            if (run->buffers_[i].program_arg < 0 && run->buffers_[i].tensor.data == t->data) {
                run->buffer_names_[i] = name;
                run->guard_zones_.name(t->data, name);
                return;
            }
        }
    } catch (const std::exception &) {
        // out of memory for a name: the tensor stays unnamed
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
    const OrchestrationCall call(run);
    try {
        run->dump_in_next_task(t);
    } catch (const std::exception &e) {
        run->fail(std::string("dumps=: runtime internal error: ") + e.what());
    }
}

}  // namespace ts::rt
