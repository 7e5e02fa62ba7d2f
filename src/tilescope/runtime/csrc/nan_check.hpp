// nan_check: which tasks left NaN/Inf in their outputs, and the inputs of those that made them
// from finite inputs (for `tilescope replay --task`).
//
// Invariants:
//  - Owned by one Run and destroyed with it; fill() runs after Scheduler::finish() returned, when
//    no worker calls before() or after() any more.
//  - before() sees a task's inouts before its kernel runs: it notes which held NaN/Inf then and,
//    while the task may still be saved, snapshots them, so a saved inout is what the kernel read.
//  - Worker `w` only touches scratch `w`; the records and saved inputs are guarded by `mu_`.
//  - Bounded: at most kMaxNanRecords records (every task with a non-finite output is counted in
//    `total_` all the same) and the inputs of at most kMaxNanSaved tasks: the lowest task ids,
//    so the saved set does not depend on the schedule.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "run_result.hpp"
#include "saved_inputs.hpp"
#include "task.hpp"
#include "task_observer.hpp"
#include "tilescope/runtime_api.h"

namespace ts::rt {

class NanCheck final : public TaskObserver {
public:
    explicit NanCheck(int32_t num_workers);
    NanCheck(const NanCheck &) = delete;
    NanCheck &operator=(const NanCheck &) = delete;

    void before(Task &t, int32_t worker) override;
    void after(Task &t, int32_t worker) override;

    // Move the records, the count and the saved inputs (in task id order, one payload) into `result`.
    void fill(ts_run_result &result);

private:
    // One worker's view of the task it runs.
    struct Scratch {
        InoutSnapshot inouts;
        std::vector<uint8_t> dirty_in;  // per argument: an inout held NaN/Inf before the kernel
    };
    struct SavedTask {
        std::vector<ts_dump_record> records;
        std::vector<char> payload;
    };

    void save_inputs(const Task &t, int32_t worker, const Scratch &snapshot);

    std::mutex mu_;  // guards records_, total_, saved_
    std::vector<ts_nan_record> records_;
    int64_t total_ = 0;
    // Once kMaxNanSaved tasks are kept, only a lower id replaces the highest, and `saved_below_`
    // (the highest kept) says which tasks are still worth a snapshot.
    std::map<int64_t, SavedTask> saved_;
    std::atomic<int64_t> saved_below_{std::numeric_limits<int64_t>::max()};
    std::vector<Scratch> scratch_;  // one per worker
};

}  // namespace ts::rt
