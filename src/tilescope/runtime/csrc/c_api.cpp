// The extern "C" surface of runtime_api.h: runtime handles, argument checks, result lifetime and
// accessors.
#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "run_result.hpp"
#include "runtime.hpp"
#include "tilescope/runtime_api.h"
#include "validation.hpp"

static_assert(sizeof(ts_task_arg_record) == 184, "ts_task_arg_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_buffer_record) == 168, "ts_buffer_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_dump_record) == 224, "ts_dump_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_run_config) == 112, "ts_run_config layout changed: update runtime/abi.py");
static_assert(sizeof(ts_failure_record) == 576, "ts_failure_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_wait_record) == 208, "ts_wait_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_orch_read_record) == 136, "ts_orch_read_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_nan_record) == 64, "ts_nan_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_pmu_record) == 72, "ts_pmu_record layout changed: update runtime/abi.py");
static_assert(sizeof(ts_arg) == 168, "ts_arg layout changed: update the Python ctypes mirror in runtime/abi.py");
static_assert(sizeof(ts_run_summary) == 152, "ts_run_summary layout changed: update runtime/abi.py");

struct ts_runtime {
    explicit ts_runtime(int32_t num_workers) : impl(num_workers) {}
    ts::rt::Runtime impl;
};

namespace {

// Returned, never freed, when even the result object cannot be allocated.
const ts_run_result kOutOfMemory = [] {
    ts_run_result r;
    r.status = 1;
    r.error = "out of memory: cannot allocate a run result";
    return r;
}();

std::string check_inputs(ts_orch_fn orch, const ts_kernel_fn *kernels, const char *const *kernel_names,
                         int32_t nkernels, const ts_arg *args, int32_t nargs) {
    if (orch == nullptr) return "no orchestration entry point (orchestration_entry is NULL)";
    if (nkernels < 0 || (nkernels > 0 && kernels == nullptr)) return "invalid kernel table (nkernels " + std::to_string(nkernels) + ")";
    for (int32_t i = 0; i < nkernels; ++i) {
        if (kernels[i] == nullptr) {
            const std::string name = kernel_names != nullptr && kernel_names[i] != nullptr ? kernel_names[i] : "?";
            return "kernel " + std::to_string(i) + " ('" + name + "') has no entry point (kernel_entry is NULL)";
        }
    }
    if (nargs < 0 || (nargs > 0 && args == nullptr)) return "invalid program argument list (nargs " + std::to_string(nargs) + ")";
    for (int32_t i = 0; i < nargs; ++i) {
        const std::string why = ts::rt::validate_arg(args[i]);
        if (!why.empty()) return "program argument " + std::to_string(i) + ": " + why;
    }
    return "";
}

template <class T>
int64_t copy_out(const std::vector<T> &from, T *out, int64_t capacity) {
    if (out == nullptr || capacity <= 0) return 0;
    const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(from.size()));
    std::copy(from.begin(), from.begin() + n, out);
    return n;
}

// Check the inputs and run them on `runtime`, or on a runtime of its own when that is NULL.
ts_run_result *checked_run(const char *caller, ts::rt::Runtime *runtime, const ts_run_config *config,
                           ts_orch_fn orch, const ts_kernel_fn *kernels, const char *const *kernel_names,
                           int32_t nkernels, const ts_arg *args, int32_t nargs) {
    auto *result = new (std::nothrow) ts_run_result;
    if (result == nullptr) return const_cast<ts_run_result *>(&kOutOfMemory);
    try {
        const ts_run_config cfg = config != nullptr ? *config : ts_run_config{};
        std::string why = check_inputs(orch, kernels, kernel_names, nkernels, args, nargs);
        if (why.empty() && runtime != nullptr && cfg.num_workers > 0 && cfg.num_workers != runtime->num_workers())
            why = "the config asks for " + std::to_string(cfg.num_workers) + " worker(s) but the runtime has " +
                  std::to_string(runtime->num_workers());
        const int32_t workers = runtime != nullptr ? runtime->num_workers() : cfg.num_workers;
        if (why.empty() && cfg.serial && workers != 1)
            why = "a serial run needs a runtime of exactly 1 worker, not " + std::to_string(workers);
        // NOTE: the budget becomes int64 nanoseconds: past 1e9 s (or NaN, or inf) it would overflow
        if (why.empty() && !(cfg.task_timeout_s >= 0 && cfg.task_timeout_s <= 1e9))
            why = "task_timeout_s must be a number of seconds in [0, 1e9] (0: no budget)";
        if (why.empty() && cfg.worker_stack_mib < 0)
            why = "worker_stack_mib must be >= 0 (0: the default stack), not " + std::to_string(cfg.worker_stack_mib);
        if (why.empty() && cfg.poison != 0 && (cfg.poison & ~0xFF) != 0x100)
            why = "poison must be 0 (off) or 0x100 | the fill byte, not " + std::to_string(cfg.poison);
        if (why.empty() && cfg.shuffle_seed != 0 && cfg.serial) why = "a shuffled run cannot be serial";
        if (why.empty() && cfg.max_tasks < 0)
            why = "max_tasks must be >= 0 (0: no cap), not " + std::to_string(cfg.max_tasks);
        if (!why.empty()) {
            result->status = 1;
            result->error = std::string(caller) + ": " + why;
            return result;
        }
        std::vector<std::string> names;
        names.reserve(static_cast<size_t>(nkernels));
        for (int32_t i = 0; i < nkernels; ++i)
            names.emplace_back(kernel_names != nullptr && kernel_names[i] != nullptr ? kernel_names[i]
                                                                                    : "kernel" + std::to_string(i));
        if (runtime != nullptr) {
            runtime->run(cfg, orch, kernels, std::move(names), args, nargs, *result);
        } else {
            ts::rt::Runtime own(cfg.num_workers);
            own.run(cfg, orch, kernels, std::move(names), args, nargs, *result);
        }
    } catch (const ts::rt::WorkerStartError &e) {
        result->status = 1;
        result->error = e.what();
    } catch (const std::exception &e) {
        result->status = 1;
        result->error = std::string("runtime internal error: ") + e.what();
    }
    return result;
}

}  // namespace

extern "C" {

ts_runtime *ts_runtime_create(int32_t num_workers) {
    try {
        return new ts_runtime(num_workers);
    } catch (const std::exception &) {
        return nullptr;
    }
}

int32_t ts_runtime_num_workers(const ts_runtime *rt) { return rt->impl.num_workers(); }

ts_run_result *ts_runtime_run(ts_runtime *rt, const ts_run_config *config, ts_orch_fn orch,
                              const ts_kernel_fn *kernels, const char *const *kernel_names, int32_t nkernels,
                              const ts_arg *args, int32_t nargs) {
    if (rt == nullptr) {
        auto *result = new (std::nothrow) ts_run_result;
        if (result == nullptr) return const_cast<ts_run_result *>(&kOutOfMemory);
        result->status = 1;
        result->error = "ts_runtime_run: no runtime (NULL)";
        return result;
    }
    return checked_run("ts_runtime_run", &rt->impl, config, orch, kernels, kernel_names, nkernels, args, nargs);
}

void ts_runtime_destroy(ts_runtime *rt) { delete rt; }

ts_run_result *ts_run(const ts_run_config *config, ts_orch_fn orch, const ts_kernel_fn *kernels,
                      const char *const *kernel_names, int32_t nkernels, const ts_arg *args, int32_t nargs) {
    return checked_run("ts_run", nullptr, config, orch, kernels, kernel_names, nkernels, args, nargs);
}

void ts_run_summarize(const ts_run_result *r, ts_run_summary *out) {
    ts_run_summary s{};
    s.status = r->status;
    s.num_workers = r->num_workers;
    s.dump_level = r->dump.level;
    s.failure_kind = r->failure.kind;
    s.wall_seconds = r->wall_seconds;
    s.error_bytes = static_cast<int64_t>(r->error.size());
    s.num_tasks = r->num_tasks;
    s.num_dependencies = r->num_dependencies;
    s.num_edges = static_cast<int64_t>(r->edges.size());
    s.num_task_args = static_cast<int64_t>(r->task_args.size());
    s.num_buffers = static_cast<int64_t>(r->buffers.size());
    s.num_dump_tags = static_cast<int64_t>(r->dump_tags.size());
    s.num_orch_reads = static_cast<int64_t>(r->orch_reads.size());
    s.num_dump_records = static_cast<int64_t>(r->dump.records.size());
    s.num_waits = static_cast<int64_t>(r->waits.size());
    s.num_nan = static_cast<int64_t>(r->nan.size());
    s.nan_total = r->nan_total;
    s.num_saved = static_cast<int64_t>(r->saved.size());
    s.num_nan_saved = static_cast<int64_t>(r->nan_saved.size());
    s.num_pmu = static_cast<int64_t>(r->pmu.size());
    s.pmu_note_bytes = static_cast<int64_t>(r->pmu_note.size());
    *out = s;
}

int32_t ts_run_status(const ts_run_result *r) { return r->status; }
const char *ts_run_error(const ts_run_result *r) { return r->error.c_str(); }
int64_t ts_run_num_tasks(const ts_run_result *r) { return r->num_tasks; }
int64_t ts_run_num_dependencies(const ts_run_result *r) { return r->num_dependencies; }
int64_t ts_run_num_edges(const ts_run_result *r) { return static_cast<int64_t>(r->edges.size()); }
int32_t ts_run_num_workers(const ts_run_result *r) { return r->num_workers; }
double ts_run_wall_seconds(const ts_run_result *r) { return r->wall_seconds; }

int64_t ts_run_copy_tasks(const ts_run_result *r, ts_task_record *out, int64_t capacity) {
    return copy_out(r->tasks, out, capacity);
}

int64_t ts_run_copy_edges(const ts_run_result *r, ts_edge_record *out, int64_t capacity) {
    return copy_out(r->edges, out, capacity);
}

int64_t ts_run_num_pmu(const ts_run_result *r) { return static_cast<int64_t>(r->pmu.size()); }
int64_t ts_run_copy_pmu(const ts_run_result *r, ts_pmu_record *out, int64_t capacity) {
    return copy_out(r->pmu, out, capacity);
}
const char *ts_run_pmu_note(const ts_run_result *r) { return r->pmu_note.c_str(); }

int64_t ts_run_num_task_args(const ts_run_result *r) { return static_cast<int64_t>(r->task_args.size()); }

int64_t ts_run_copy_task_args(const ts_run_result *r, ts_task_arg_record *out, int64_t capacity) {
    return copy_out(r->task_args, out, capacity);
}

int64_t ts_run_num_buffers(const ts_run_result *r) { return static_cast<int64_t>(r->buffers.size()); }

int64_t ts_run_copy_buffers(const ts_run_result *r, ts_buffer_record *out, int64_t capacity) {
    return copy_out(r->buffers, out, capacity);
}

const char *ts_run_buffer_name(const ts_run_result *r, int64_t index) {
    if (index < 0 || index >= static_cast<int64_t>(r->buffer_names.size())) return "";
    return r->buffer_names[static_cast<size_t>(index)].c_str();
}

int64_t ts_run_num_dump_tags(const ts_run_result *r) { return static_cast<int64_t>(r->dump_tags.size()); }

int64_t ts_run_copy_dump_tags(const ts_run_result *r, ts_dump_tag_record *out, int64_t capacity) {
    return copy_out(r->dump_tags, out, capacity);
}

int64_t ts_run_num_orch_reads(const ts_run_result *r) { return static_cast<int64_t>(r->orch_reads.size()); }

int64_t ts_run_copy_orch_reads(const ts_run_result *r, ts_orch_read_record *out, int64_t capacity) {
    return copy_out(r->orch_reads, out, capacity);
}

const char *ts_run_orch_read_name(const ts_run_result *r, int64_t index) {
    if (index < 0 || index >= static_cast<int64_t>(r->orch_read_names.size())) return "";
    return r->orch_read_names[static_cast<size_t>(index)].c_str();
}

const char *ts_run_orch_read_where(const ts_run_result *r, int64_t index) {
    if (index < 0 || index >= static_cast<int64_t>(r->orch_read_wheres.size())) return "";
    return r->orch_read_wheres[static_cast<size_t>(index)].c_str();
}

int64_t ts_run_num_orch_read_waits(const ts_run_result *r) {
    return static_cast<int64_t>(r->orch_read_waits.size());
}

int64_t ts_run_copy_orch_read_waits(const ts_run_result *r, int64_t *out, int64_t capacity) {
    return copy_out(r->orch_read_waits, out, capacity);
}

int32_t ts_run_dump_level(const ts_run_result *r) { return r->dump.level; }
int64_t ts_run_num_dump_records(const ts_run_result *r) { return static_cast<int64_t>(r->dump.records.size()); }

int64_t ts_run_copy_dump_records(const ts_run_result *r, ts_dump_record *out, int64_t capacity) {
    return copy_out(r->dump.records, out, capacity);
}

int64_t ts_run_dump_payload_size(const ts_run_result *r) { return r->dump.payload_bytes; }

int64_t ts_run_copy_dump_payload(const ts_run_result *r, void *out, int64_t capacity) {
    if (out == nullptr || capacity < r->dump.payload_bytes) return 0;
    r->dump.copy_payload(static_cast<char *>(out));
    return r->dump.payload_bytes;
}

int64_t ts_run_dump_dropped(const ts_run_result *r) { return r->dump.dropped; }

void ts_probe_record(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols) {
    ts::rt::TensorDump::record_probe(probe_id, data, dtype, rows, cols);
}

const char *ts_run_task_name(const ts_run_result *r, int64_t task_id) {
    if (task_id < 0 || task_id >= static_cast<int64_t>(r->task_names.size())) return nullptr;
    return r->task_names[static_cast<size_t>(task_id)].c_str();
}

int64_t ts_run_copy_task_names(const ts_run_result *r, const int64_t *task_ids, int64_t n, char *out, int64_t capacity) {
    int64_t needed = 0;
    for (int64_t i = 0; i < n; ++i) {
        const char *name = ts_run_task_name(r, task_ids[i]);
        needed += static_cast<int64_t>(name != nullptr ? std::strlen(name) : 0) + 1;
    }
    if (out == nullptr || capacity < needed) return needed;
    for (int64_t i = 0; i < n; ++i) {
        const char *name = ts_run_task_name(r, task_ids[i]);
        const size_t len = name != nullptr ? std::strlen(name) : 0;
        std::memcpy(out, name != nullptr ? name : "", len + 1);
        out += len + 1;
    }
    return needed;
}

int32_t ts_run_failure(const ts_run_result *r, ts_failure_record *out) {
    if (out != nullptr) *out = r->failure;
    return r->failure.kind;
}

int64_t ts_run_num_waits(const ts_run_result *r) { return static_cast<int64_t>(r->waits.size()); }

int64_t ts_run_copy_waits(const ts_run_result *r, ts_wait_record *out, int64_t capacity) {
    return copy_out(r->waits, out, capacity);
}

int64_t ts_run_num_nan(const ts_run_result *r) { return static_cast<int64_t>(r->nan.size()); }
int64_t ts_run_nan_total(const ts_run_result *r) { return r->nan_total; }

int64_t ts_run_copy_nan(const ts_run_result *r, ts_nan_record *out, int64_t capacity) {
    return copy_out(r->nan, out, capacity);
}

int64_t ts_run_saved_task(const ts_run_result *r) { return r->saved_task; }
int64_t ts_run_num_saved(const ts_run_result *r) { return static_cast<int64_t>(r->saved.size()); }

int64_t ts_run_copy_saved(const ts_run_result *r, ts_dump_record *out, int64_t capacity) {
    return copy_out(r->saved, out, capacity);
}

int64_t ts_run_saved_payload_size(const ts_run_result *r) { return static_cast<int64_t>(r->saved_payload.size()); }

int64_t ts_run_copy_saved_payload(const ts_run_result *r, void *out, int64_t capacity) {
    const int64_t n = static_cast<int64_t>(r->saved_payload.size());
    if (out == nullptr || capacity < n) return 0;
    std::copy(r->saved_payload.begin(), r->saved_payload.end(), static_cast<char *>(out));
    return n;
}

int64_t ts_run_num_nan_saved(const ts_run_result *r) { return static_cast<int64_t>(r->nan_saved.size()); }

int64_t ts_run_copy_nan_saved(const ts_run_result *r, ts_dump_record *out, int64_t capacity) {
    return copy_out(r->nan_saved, out, capacity);
}

int64_t ts_run_nan_saved_payload_size(const ts_run_result *r) {
    return static_cast<int64_t>(r->nan_saved_payload.size());
}

int64_t ts_run_copy_nan_saved_payload(const ts_run_result *r, void *out, int64_t capacity) {
    const int64_t n = static_cast<int64_t>(r->nan_saved_payload.size());
    if (out == nullptr || capacity < n) return 0;
    std::copy(r->nan_saved_payload.begin(), r->nan_saved_payload.end(), static_cast<char *>(out));
    return n;
}

int ts_single_task_orchestration(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    return api->submit(ctx, 0, args, nargs, nullptr, 0, nullptr) < 0 ? 1 : 0;
}

void ts_run_free(ts_run_result *r) {
    if (r != &kOutOfMemory) delete r;
}

uint32_t ts_core_abi_version(void) { return TS_ABI_VERSION; }
int32_t ts_core_sizeof_arg(void) { return static_cast<int32_t>(sizeof(ts_arg)); }

}  // extern "C"
