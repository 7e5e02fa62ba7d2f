// One run of an orchestration: the ts_orch_api it serves, the task graph it builds, its errors.
//
// Invariants:
//  - A Run is built for one run and destroyed after it: everything a run accumulates (tensor
//    map, tasks, records, dump tags, intermediates, errors) lives here, never in the Scheduler
//    it borrows, so nothing leaks from one run into the next.
//  - The orchestration runs on the thread that calls execute(), concurrently with the workers.
//    The ts_orch_api callbacks run on that thread only, so the tensor map, the task table, the
//    records and the error state need no locks; workers only see sealed tasks and the `failed_`
//    flag.
//  - execute() returns (normally or by exception) only after every submitted task has finished,
//    so the tasks and intermediates may be freed when the Run is destroyed.
//  - The first error is kept verbatim; after it, submit returns -1 and records nothing, and
//    workers skip tasks that have not started.
//  - The tensor dump (dump_) is collected by the workers into per-worker buffers owned by this Run
//    and flushed for every worker into the result after the run, a failed run included.
//  - The first failure is kept (kind, task, worker, message): an orchestration error, a deadlock,
//    a timeout, or a kernel that threw; workers and the watchdog report through the RunHooks
//    methods, which take `fail_mu_`. The inputs of the task worth replaying alone are saved once.
//  - The run's task observers (task_observer.hpp), one per instrument that is on, are built
//    from the config when the Run is, owned by it, and handed to the scheduler in that order:
//    guard zones, tensor dump, nan check, task lines, pmu, task times (innermost, so it times the
//    kernel alone).
//  - An explicit dep on a later task id (a forward dep) is counted in the waiter's `pending` at
//    submission and linked when that id is submitted; one never submitted leaves the waiter
//    blocked, which finish() reports as a deadlock (ts_wait_record, pred_state 1).
//  - An orchestration read (orch_read.cpp) waits, inside its runtime call, for the tasks that
//    write its element (Scheduler::wait_until), and is recorded whether or not it waited.
//  - Intermediate tensors are zero-filled, 64-byte aligned, identified by their base address,
//    each with guard zones (guard_zones.hpp), and freed when the Run is destroyed. The guard
//    zones' observer is always first in the list: it brackets every other instrument.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "block_arena.hpp"
#include "guard_zones.hpp"
#include "nan_check.hpp"
#include "pmu.hpp"
#include "run_memory.hpp"
#include "run_result.hpp"
#include "scheduler.hpp"
#include "task.hpp"
#include "task_lines.hpp"
#include "task_observer.hpp"
#include "task_times.hpp"
#include "tensor_dump.hpp"
#include "tensor_map.hpp"
#include "tilescope/abi.h"
#include "tilescope/runtime_api.h"
#include "validation.hpp"

namespace ts::rt {

// What a failure was, beyond its kind (ts_failure_record's cause and the fields after it): set by
// the place that made the failure, so reports need not read its message.
struct FailureCause {
    int32_t cause = TS_CAUSE_NONE;
    int32_t func_id = -1;    // the kernel, when no task is (a region given to a task being built)
    int32_t arg_index = -1;  // the kernel argument
    const char *op = nullptr;
    const char *tensor = nullptr;
    const char *where = nullptr;
};

class Run final : public RunHooks, public GuardHooks {
public:
    // `scheduler` has its workers started and no run in progress; it is used until execute() returns.
    // Intermediates' mappings come from `pool`, the arenas' blocks and the task list's storage from
    // `memory`; both go back when the Run is destroyed.
    Run(const ts_run_config &config, ts_orch_fn orch, const ts_kernel_fn *kernels, std::vector<std::string> kernel_names,
        const ts_arg *args, int32_t nargs, Scheduler &scheduler, GuardPool &pool, RunMemory &memory);
    ~Run() override;
    Run(const Run &) = delete;
    Run &operator=(const Run &) = delete;

    // Run the orchestration and every task it submits to completion, then fill `result`.
    void execute(ts_run_result &result);

    void kernel_threw(const Task &t, int32_t worker, const char *what, const ts::CheckSite *site) override;
    void timed_out(const Task *t, int32_t worker, const Charge &charge) override;
    void stopped(const Task *t, int32_t worker, const uint64_t *frames, int32_t nframes) override;
    void interrupted(const std::vector<std::pair<const Task *, int32_t>> &running) override;
    void guard_damaged(const Task *t, int32_t worker, bool exact, int32_t arg, const std::string &message) override;

private:
    class OrchestrationCall;  // pauses the orchestration's watchdog arming inside a callback

    static int api_create_tensor(void *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out);
    static int64_t api_submit(void *ctx, int32_t func_id, const ts_arg *args, int32_t nargs, const int64_t *deps,
                              int32_t ndeps, const char *name);
    static void api_dump_tag(void *ctx, const ts_tensor *t);
    static void api_dump_in_next_task(void *ctx, const ts_tensor *t);
    static void api_fail(void *ctx, const char *message);
    static void api_fail_region(void *ctx, int32_t func_id, int32_t arg_index, const char *message);
    static void api_fail_region_at(void *ctx, int32_t func_id, int32_t arg_index, const char *where,
                                   const char *message);
    static void api_name_tensor(void *ctx, const ts_tensor *t, const char *name);
    static int64_t api_max_tasks(void *ctx);
    static int api_read(void *ctx, const ts_tensor *t, const int64_t *index, int32_t nindex, const char *name,
                        const char *where, int64_t *value);  // orch_read.cpp

    void orchestrate();
    int create_tensor(int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out);
    int64_t submit(const SubmitRequest &req);
    void dump_tag(const ts_tensor *t);
    void dump_in_next_task(const ts_tensor *t);
    int read(const ts_tensor *t, const int64_t *index, int32_t nindex, const char *name, const char *where,
             int64_t *value);
    void fill_reads(ts_run_result &result);
    bool valid_dump_tensor(const char *what, const ts_tensor *t);
    void record_edges(int64_t succ);
    void select_dump(Task &task, const ts_arg *args, int32_t nargs);
    void flush_dump(ts_run_result &result);
    void fail(std::string message);  // the orchestration thread only (its own errors)
    bool fail_with(int32_t kind, const Task *t, int32_t worker, const std::string &message,
                   const FailureCause &cause = FailureCause{});
    std::string describe(const Task &t) const;
    TaskObservers observers();
    void save_inputs(const Task &t, int32_t worker);
    void report_deadlock();
    void fill_result(ts_run_result &result);

    const ts_run_config config_;
    const ts_orch_fn orch_;
    const ts_kernel_fn *const kernels_;
    const std::vector<std::string> kernel_names_;
    const ts_arg *const args_;
    const int32_t nargs_;
    const Clock::time_point t0_;
    ts_orch_api api_{};

    std::atomic<bool> failed_{false};
    // Tasks with a lower id still run after failed_ is set: the id of the task whose kernel
    // error is recorded (an earlier task's error replaces it), 0 for every other failure.
    std::atomic<int64_t> run_before_{0};
    std::mutex fail_mu_;  // guards error_, suppressed_errors_, failure_, saved_*
    std::string error_;
    int64_t suppressed_errors_ = 0;
    ts_failure_record failure_{};
    int64_t saved_task_ = -1;
    std::vector<ts_dump_record> saved_;
    std::vector<char> saved_payload_;
    std::vector<ts_wait_record> waits_;

    std::vector<const char *> kernel_cnames_;
    std::unordered_map<int64_t, std::vector<int64_t>> forward_waiters_;  // later id -> waiting ids
    RunMemory &memory_;  // before the arenas, which take their blocks from it
    BlockArena<FoundEdge> found_arena_{64, 4096, &memory_.blocks};
    BlockArena<int64_t> deps_arena_{64, 1024, &memory_.blocks};

    TensorMap tensor_map_{memory_.map_nodes, memory_.blocks};
    BlockArena<Task> task_arena_{16, 1024, &memory_.blocks};
    BlockArena<SuccessorEdge> edge_arena_{64, 4096, &memory_.blocks};  // the tasks' successor lists
    BlockArena<ts_arg> arg_arena_{64, 8192, &memory_.blocks};
    std::vector<Task *> tasks_;
    int64_t num_dependencies_ = 0;
    std::vector<FoundEdge> found_;       // scratch: tensor-map edges of the task being submitted
    std::vector<int64_t> explicit_;      // scratch: its explicit predecessors
    std::vector<int64_t> preds_;         // scratch: its distinct predecessors

    std::vector<ts_edge_record> edges_;
    std::vector<ts_task_arg_record> task_args_;
    std::vector<ts_buffer_record> buffers_;
    std::vector<std::string> buffer_names_;  // one per buffers_ entry: an intermediate's name, or ""
    std::vector<std::string> task_names_;
    std::vector<ts_dump_tag_record> dump_tags_;
    std::vector<ts_orch_read_record> reads_;  // orchestration reads (orch_read.cpp), in program order
    std::vector<std::string> read_names_;
    std::vector<std::string> read_wheres_;
    std::vector<int64_t> read_waits_;
    std::vector<int64_t> read_writers_;  // scratch: the writers the read in progress waits for
    std::string read_deadlock_;  // a read whose producer can never run: report_deadlock names it first
    std::unordered_set<int64_t> dump_tagged_buffers_;  // level 1: buffers dumped from now on
    std::unordered_set<int64_t> dump_next_buffers_;    // level 1: buffers dumped in the next task only
    BlockArena<uint8_t> dump_args_arena_{64, 8192, &memory_.blocks};
    std::unique_ptr<TensorDump> dump_;       // nullptr unless config_.dump_level is 1..3
    std::unique_ptr<NanCheck> nan_check_;    // nullptr unless config_.nan_check
    std::unique_ptr<TaskLines> task_lines_;  // nullptr unless config_.print_intermediates is 3
    std::unique_ptr<Pmu> pmu_;               // nullptr unless config_.pmu
    std::unique_ptr<TaskTimes> task_times_;  // nullptr unless config_.record_task_times
    GuardZones guard_zones_;  // after the arenas: tasks point into its zones
    BlockArena<GuardZone *> zone_list_arena_{64, 4096, &memory_.blocks};

    Scheduler &scheduler_;
};

}  // namespace ts::rt
