// Orchestration reads (ts_orch_api::read): one element of an integer tensor, read on the
// orchestration thread once the tasks submitted so far that write it have finished.
//
// Invariants:
//  - A read waits for exactly the last writer the tensor map knows for its element (writers_of:
//    the others are ordered before it), and for nothing else. It never enters the map, so tasks
//    submitted after it are not ordered after it: they are submitted only once it has returned.
//  - The element is read after every task it waits for is `done` (set under the task's mutex by
//    the worker that ran it), so the read sees what they wrote.
//  - An index outside the view, an Out program argument no submitted task writes and a run failing
//    during the wait each fail the run once (a read that finds the run failed records nothing more);
//    a producer that can never run is named first by the deadlock report once the orchestration
//    has returned. The read then returns nonzero.
//  - Every completed read is recorded, in program order, with the tasks it waited for.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>

#include "dtype.hpp"
#include "orchestration_call.hpp"
#include "graph_run.hpp"

namespace ts::rt {

namespace {

bool readable_dtype(int32_t dtype) {
    return dtype == TS_I32 || dtype == TS_I64 || dtype == TS_I8 || dtype == TS_U8;
}

int64_t load_element(const ts_tensor &t, int64_t element) {
    const char *at = static_cast<const char *>(t.data) + element * dtype_itemsize(t.dtype);
    switch (t.dtype) {
        case TS_I32: { int32_t v; std::memcpy(&v, at, sizeof v); return v; }
        case TS_I8: { int8_t v; std::memcpy(&v, at, sizeof v); return v; }
        case TS_U8: { uint8_t v; std::memcpy(&v, at, sizeof v); return v; }
        default: { int64_t v; std::memcpy(&v, at, sizeof v); return v; }
    }
}

std::string list(const int64_t *values, int32_t n) {
    std::string out;
    for (int32_t d = 0; d < n; ++d) out += (d ? ", " : "") + std::to_string(values[d]);
    return out;
}

}  // namespace

int Run::read(const ts_tensor *t, const int64_t *index, int32_t nindex, const char *name, const char *where,
              int64_t *value) {
    if (failed_.load(std::memory_order_relaxed)) return 1;
    const std::string tensor = name != nullptr && *name ? name : "the tensor";
    const std::string what = "orchestration read";
    if (t == nullptr || value == nullptr || (index == nullptr && nindex > 0)) {
        fail(what + ": no tensor, index or result given");
        return 1;
    }
    ts_arg probe{};
    probe.kind = TS_ARG_TENSOR;
    probe.u.t = *t;
    std::string why = validate_arg(probe);
    if (!why.empty()) {
        fail(what + " of " + tensor + ": " + why);
        return 1;
    }
    const std::string at = where != nullptr && *where ? std::string(" at ") + where : "";
    const std::string site = tensor + "[" + list(index, nindex) + "]" + at;
    const std::string shape = "[" + list(t->shape, t->ndim) + "]";
    const std::string so_far = " (" + std::to_string(tasks_.size()) + " task(s) submitted before the read)";
    if (!readable_dtype(t->dtype)) {
        fail("orchestration reads " + site + ", but " + tensor + " is a " + dtype_name(t->dtype) +
             " tensor: only i32, i64, i8 and u8 tensors can be read");
        return 1;
    }
    if (nindex != t->ndim) {
        fail("orchestration reads " + site + " with " + std::to_string(nindex) + " index(es), but " + tensor +
             " has shape " + shape);
        return 1;
    }
    int64_t element = t->offset;
    for (int32_t d = 0; d < nindex; ++d) {
        if (index[d] < 0 || index[d] >= t->shape[d]) {
            FailureCause cause;
            cause.cause = TS_CAUSE_REGION;
            cause.op = "read";
            cause.where = where;
            fail_with(TS_FAILURE_ERROR, nullptr, -1,
                      "orchestration reads " + site + ", outside the tensor's shape " + shape + so_far, cause);
            return 1;
        }
        element += index[d] * t->strides[d];
    }
    ts_tensor one = *t;
    one.ndim = 1;
    std::fill(one.shape, one.shape + TS_MAX_DIMS, int64_t{0});
    std::fill(one.strides, one.strides + TS_MAX_DIMS, int64_t{0});
    one.shape[0] = one.strides[0] = 1;
    one.offset = element;
    tensor_map_.writers_of(one, read_writers_);
    // NOTE: the writers overlapping one element are ordered by WAW edges (each one's region overlaps
    // the earlier ones' wherever the element is), so the last one finishes after all the others and
    // wrote the value the read sees: it is the one producer to wait for.
    if (read_writers_.size() > 1) read_writers_.erase(read_writers_.begin(), read_writers_.end() - 1);
    if (read_writers_.empty()) {
        for (int32_t i = 0; i < nargs_; ++i) {
            if (args_[i].kind != TS_ARG_TENSOR || args_[i].dir != TS_OUT || args_[i].u.t.buffer_id != t->buffer_id)
                continue;
            fail("orchestration reads " + site + ", but " + tensor +
                 " is an Out of the program and no task submitted before the read writes it" + so_far +
                 "; write it in a task first, or declare it ts.InOut if the caller provides its value");
            return 1;
        }
    }
    ts_orch_read_record rec{};
    rec.wait_start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    if (!read_writers_.empty()) {
        const bool ok = scheduler_.wait_until([this] {
            for (int64_t id : read_writers_) {
                Task &task = *tasks_[static_cast<size_t>(id)];
                std::lock_guard<std::mutex> lock(task.mu);
                if (!task.done) return false;
            }
            return true;
        });
        if (!ok) {
            // NOTE: a producer that can never run: the run does not fail here; the orchestration
            // returns, and the deadlock report (which tasks wait for what) begins with this read.
            if (!failed_.load())
                read_deadlock_ = "the orchestration reads " + site + " and waits for " +
                                 describe(*tasks_[static_cast<size_t>(read_writers_.back())]) + ", which can never run";
            return 1;
        }
    }
    rec.wait_end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    rec.buffer_id = t->buffer_id;
    rec.element = element;
    std::copy(index, index + nindex, rec.index);
    rec.ndim = nindex;
    rec.dtype = t->dtype;
    rec.value = load_element(*t, element);
    rec.next_task = static_cast<int64_t>(tasks_.size());
    rec.first_wait = static_cast<int64_t>(read_waits_.size());
    rec.num_waits = static_cast<int64_t>(read_writers_.size());
    read_waits_.insert(read_waits_.end(), read_writers_.begin(), read_writers_.end());
    reads_.push_back(rec);
    read_names_.emplace_back(name != nullptr ? name : "");
    read_wheres_.emplace_back(where != nullptr ? where : "");
    *value = rec.value;
    return 0;
}

int Run::api_read(void *ctx, const ts_tensor *t, const int64_t *index, int32_t nindex, const char *name,
                  const char *where, int64_t *value) {
    Run *run = static_cast<Run *>(ctx);
    const OrchestrationCall call(run);
    try {
        return run->read(t, index, nindex, name, where, value);
    } catch (const std::exception &e) {
        run->fail(std::string("orchestration read: runtime internal error: ") + e.what());
        return 1;
    }
}

void Run::fill_reads(ts_run_result &result) {
    result.orch_reads = std::move(reads_);
    result.orch_read_names = std::move(read_names_);
    result.orch_read_wheres = std::move(read_wheres_);
    result.orch_read_waits = std::move(read_waits_);
}

}  // namespace ts::rt
