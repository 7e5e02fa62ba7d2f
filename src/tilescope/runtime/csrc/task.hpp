// One submitted task and the state that orders it.
//
// Invariants:
//  - `pending` = unfinished predecessors + 1 until the orchestration seals the task (the
//    submission guard); the task is ready exactly when it drops to 0, which happens once.
//  - `done` and the successor list change only under `mu`: a predecessor either takes the edge
//    before it finishes (and will release the successor) or is seen as done (and the edge adds no
//    count). The list's nodes belong to the run (allocated by the orchestration thread, never
//    freed one by one): a finished task's list is dropped, not freed, so no worker frees memory.
//  - Fields above `mu` are written by the orchestration thread before the task is sealed and are
//    read-only afterwards; timing fields are written by the one worker that runs the task.
//  - Times are nanoseconds of `Clock` since the run started.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "tensor_map.hpp"
#include "tilescope/abi.h"

namespace ts::rt {

struct GuardZone;
struct Task;

// One edge out of a task: its successor, and the next edge in the order they were added.
struct SuccessorEdge {
    Task *task = nullptr;
    SuccessorEdge *next = nullptr;
};

using Clock = std::chrono::steady_clock;

// Task::dump: which arguments the tensor dump records.
constexpr int8_t kDumpNone = 0;
constexpr int8_t kDumpSelected = 1;  // those with a nonzero dump_args entry (level 1)
constexpr int8_t kDumpAll = 2;

struct Task {
    int64_t id = 0;
    int32_t func_id = 0;
    int32_t nargs = 0;
    const ts_arg *args = nullptr;
    int8_t dump = kDumpNone;
    const uint8_t *dump_args = nullptr;  // nargs entries, with kDumpSelected
    const FoundEdge *found = nullptr;    // the tensor-map edges that ordered it (why it waits)
    int32_t nfound = 0;
    int32_t ndeps = 0;
    const int64_t *deps = nullptr;       // its explicit deps, sorted and distinct
    GuardZone *const *zones = nullptr;   // the guard zones of its tensor arguments, distinct
    int32_t nzones = 0;

    std::mutex mu;
    bool done = false;
    SuccessorEdge *successors = nullptr;  // in the order they were added
    SuccessorEdge *last_successor = nullptr;
    std::atomic<int32_t> pending{1};

    int32_t worker = -1;  // -1 until run; stays -1 if skipped after a failure
    int64_t submit_ns = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
};

}  // namespace ts::rt
