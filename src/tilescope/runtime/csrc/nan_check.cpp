// nan_check's scans and saved inputs (see nan_check.hpp for their invariants).
#include "nan_check.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "dtype.hpp"
#include "finite.hpp"
#include "region_rows.hpp"
#include "tensor_dump.hpp"

namespace ts::rt {

namespace {

constexpr size_t kMaxNanRecords = 256;
constexpr size_t kMaxNanSaved = 64;  // tasks whose inputs nan_check saves

}  // namespace

NanCheck::NanCheck(int32_t num_workers) : scratch_(static_cast<size_t>(num_workers)) {}

void NanCheck::before(Task &t, int32_t worker) {
    Scratch &s = scratch_[static_cast<size_t>(worker)];
    s.inouts.offsets.assign(static_cast<size_t>(t.nargs), -1);
    s.dirty_in.assign(static_cast<size_t>(t.nargs), 0);
    s.inouts.data.clear();
    const bool snapshot = t.id < saved_below_.load(std::memory_order_relaxed);
    for (int32_t i = 0; i < t.nargs; ++i) {
        const ts_arg &a = t.args[i];
        if (a.kind != TS_ARG_TENSOR || a.dir != TS_INOUT) continue;
        s.dirty_in[static_cast<size_t>(i)] = !scan_finite(a.u.t).clean();
        if (!snapshot) continue;
        const int64_t bytes = region_bytes(a.u.t);
        s.inouts.offsets[static_cast<size_t>(i)] = static_cast<int64_t>(s.inouts.data.size());
        s.inouts.data.resize(s.inouts.data.size() + static_cast<size_t>(bytes));
        copy_region(s.inouts.data.data() + s.inouts.offsets[static_cast<size_t>(i)], a.u.t, dtype_itemsize(a.u.t.dtype),
                    bytes);
    }
}

void NanCheck::after(Task &t, int32_t worker) {
    const Scratch &s = scratch_[static_cast<size_t>(worker)];
    int32_t input_arg = -2;  // -2: not looked at yet; -1: every input finite
    for (int32_t i = 0; i < t.nargs; ++i) {
        const ts_arg &a = t.args[i];
        if (a.kind != TS_ARG_TENSOR || a.dir == TS_IN) continue;
        const FiniteScan scan = scan_finite(a.u.t);
        if (scan.clean()) continue;
        if (input_arg == -2) {
            input_arg = -1;
            for (int32_t j = 0; j < t.nargs && input_arg < 0; ++j) {
                const ts_arg &b = t.args[j];
                if (b.kind != TS_ARG_TENSOR) continue;
                if ((b.dir == TS_IN && !scan_finite(b.u.t).clean()) || (b.dir == TS_INOUT && s.dirty_in[static_cast<size_t>(j)]))
                    input_arg = j;
            }
        }
        ts_nan_record rec{};
        rec.task_id = t.id;
        rec.func_id = t.func_id;
        rec.worker = worker;
        rec.arg_index = i;
        rec.origin = input_arg >= 0 ? 1 : 0;
        rec.first_index = scan.first;
        rec.nan_count = scan.nan;
        rec.inf_count = scan.inf;
        rec.input_arg = input_arg;
        rec.producer = -1;
        for (int32_t k = 0; k < t.nfound; ++k)
            if (t.found[k].arg_index == input_arg && t.found[k].kind == TS_EDGE_RAW)
                rec.producer = std::max(rec.producer, t.found[k].pred);
        std::lock_guard<std::mutex> lock(mu_);
        if (records_.size() < kMaxNanRecords) records_.push_back(rec);
    }
    if (input_arg == -2) return;  // every output finite
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++total_;
    }
    if (input_arg == -1) save_inputs(t, worker, s);
}

void NanCheck::save_inputs(const Task &t, int32_t worker, const Scratch &snapshot) {
    if (t.id >= saved_below_.load(std::memory_order_relaxed)) return;  // enough lower ids kept
    SavedTask saved;
    save_task_inputs(t, worker, &snapshot.inouts, saved.records, saved.payload);
    std::lock_guard<std::mutex> lock(mu_);
    if (saved_.size() >= kMaxNanSaved) {
        auto highest = std::prev(saved_.end());
        if (highest->first < t.id) return;
        saved_.erase(highest);
    }
    saved_.emplace(t.id, std::move(saved));
    if (saved_.size() >= kMaxNanSaved) saved_below_.store(std::prev(saved_.end())->first, std::memory_order_relaxed);
}

void NanCheck::fill(ts_run_result &result) {
    std::lock_guard<std::mutex> lock(mu_);
    result.nan = std::move(records_);
    result.nan_total = total_;
    for (auto &[id, saved] : saved_) {  // in task id order, one payload
        const int64_t base = static_cast<int64_t>(result.nan_saved_payload.size());
        result.nan_saved_payload.insert(result.nan_saved_payload.end(), saved.payload.begin(), saved.payload.end());
        for (ts_dump_record rec : saved.records) {
            if (rec.bin_offset >= 0) rec.bin_offset += base;
            result.nan_saved.push_back(rec);
        }
    }
    saved_.clear();
}

}  // namespace ts::rt
