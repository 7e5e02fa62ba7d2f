// What one run leaves behind for the caller: status, error and the recorded instrumentation.
//
// Invariant: filled once by Run::execute (or by ts_run on an early error), immutable afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor_dump.hpp"
#include "tilescope/runtime_api.h"

struct ts_run_result {
    int32_t status = 0;
    std::string error;
    int64_t num_tasks = 0;
    int64_t num_dependencies = 0;
    int32_t num_workers = 0;
    double wall_seconds = 0.0;
    std::vector<ts_task_record> tasks;     // only with record_task_times
    std::vector<std::string> task_names;   // with record_task_times or a dump
    std::vector<ts_pmu_record> pmu;        // only with pmu, by task id
    std::string pmu_note;                  // only with pmu
    std::vector<ts_edge_record> edges;     // only with record_edges
    std::vector<ts_task_arg_record> task_args;  // only with record_edges
    std::vector<ts_buffer_record> buffers;
    std::vector<std::string> buffer_names;  // one per buffer: an intermediate's name, or ""      // with record_edges or a dump
    std::vector<ts_dump_tag_record> dump_tags;
    std::vector<ts_orch_read_record> orch_reads;  // every orchestration read, in program order
    std::vector<std::string> orch_read_names;     // one per read: its tensor's name
    std::vector<std::string> orch_read_wheres;    // one per read: its source line
    std::vector<int64_t> orch_read_waits;         // the tasks each read waited for (first_wait, num_waits)
    ts::rt::DumpResult dump;               // level 0 (empty) unless a dump was asked for
    ts_failure_record failure{};           // kind TS_FAILURE_NONE unless the run failed
    std::vector<ts_wait_record> waits;     // TS_FAILURE_DEADLOCK
    std::vector<ts_nan_record> nan;        // nan_check, at most kMaxNanRecords
    int64_t nan_total = 0;
    int64_t saved_task = -1;
    std::vector<ts_dump_record> saved;
    std::vector<char> saved_payload;
    std::vector<ts_dump_record> nan_saved;  // nan_check: inputs of the tasks that made NaN/Inf, by task id
    std::vector<char> nan_saved_payload;
};
