// The inputs of one task copied out for `tilescope replay --task`: of the task a failure names
// (Run) and of the tasks nan_check blames (NanCheck).
//
// Invariants:
//  - One ts_dump_record per argument, in argument order, each with stage TS_DUMP_BEFORE_DISPATCH;
//    inputs, inouts and scalars carry their value (a tensor's region copied contiguous, row-major,
//    to `payload` at bin_offset), outputs only their view (bin_offset -1).
//  - An inout comes from `snapshot` when it holds one (the region as it was before the kernel);
//    otherwise it is read as the kernel left it and marked TS_SAVED_PARTIAL.
#pragma once

#include <cstdint>
#include <vector>

#include "task.hpp"
#include "tilescope/runtime_api.h"

namespace ts::rt {

// Inouts of one task as they were before its kernel ran.
struct InoutSnapshot {
    std::vector<char> data;
    std::vector<int64_t> offsets;  // per argument: where its snapshot starts in `data`, or -1
};

// Append `t`'s arguments, run on `worker`, to `records` and their values to `payload`.
void save_task_inputs(const Task &t, int32_t worker, const InoutSnapshot *snapshot,
                      std::vector<ts_dump_record> &records, std::vector<char> &payload);

}  // namespace ts::rt
