// A long-lived runtime: worker threads started once and reused by every run it serves.
//
// Invariants:
//  - One run at a time: run() holds `run_mu_` from start to end, so a concurrent caller waits
//    for the run in progress (callers that want parallel runs use several runtimes).
//  - Each run builds a fresh Run (tensor map, tasks, records, dump tags, intermediates, errors)
//    and destroys it before run() returns; only the scheduler's parked workers carry over, and
//    between runs they hold no task and no pointer into a run.
//  - The workers start on the first run (a failure to start one is that run's error, and the
//    next run tries again) and are joined when the runtime is destroyed, which first waits for a
//    run in progress.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "guard_zones.hpp"
#include "run_memory.hpp"
#include "run_result.hpp"
#include "scheduler.hpp"
#include "tilescope/abi.h"
#include "tilescope/runtime_api.h"

namespace ts::rt {

class Runtime {
public:
    // `num_workers` <= 0: one per hardware thread.
    explicit Runtime(int32_t num_workers);
    ~Runtime();
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;

    int32_t num_workers() const { return scheduler_.num_workers(); }

    // Run `orch` and every task it submits to completion, then fill `result`. Inputs must have
    // been checked (see c_api.cpp); `config.num_workers` is ignored (the runtime's count is used).
    void run(const ts_run_config &config, ts_orch_fn orch, const ts_kernel_fn *kernels,
             std::vector<std::string> kernel_names, const ts_arg *args, int32_t nargs, ts_run_result &result);

private:
    std::mutex run_mu_;
    Scheduler scheduler_;
    GuardPool guard_pool_;  // intermediates' mappings, kept between runs
    RunMemory run_memory_;  // arena blocks and the task list's storage, kept between runs
};

}  // namespace ts::rt
