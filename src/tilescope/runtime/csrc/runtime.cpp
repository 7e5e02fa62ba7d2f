#include "runtime.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "signal_guard.hpp"
#include "graph_run.hpp"

namespace ts::rt {

namespace {

int32_t resolve_workers(int32_t requested) {
    if (requested > 0) return requested;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? static_cast<int32_t>(hw) : 1;
}

}  // namespace

Runtime::Runtime(int32_t num_workers) : scheduler_(resolve_workers(num_workers)) {}

Runtime::~Runtime() {
    // Wait for a run in progress; the scheduler's destructor then joins the parked workers.
    std::lock_guard<std::mutex> lock(run_mu_);
}

void Runtime::run(const ts_run_config &config, ts_orch_fn orch, const ts_kernel_fn *kernels,
                  std::vector<std::string> kernel_names, const ts_arg *args, int32_t nargs,
                  ts_run_result &result) {
    std::lock_guard<std::mutex> lock(run_mu_);
    scheduler_.start_workers(static_cast<int64_t>(std::max(config.worker_stack_mib, 0)) << 20);
    const RunInFlight in_flight;
    Run run(config, orch, kernels, std::move(kernel_names), args, nargs, scheduler_, guard_pool_, run_memory_);
    run.execute(result);
}

}  // namespace ts::rt
