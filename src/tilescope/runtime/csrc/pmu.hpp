// enable_pmu: per-task counters (ts_pmu_record) read around every task's kernel on its worker
// thread: wall and CPU time, page faults, context switches, and hardware cycles, instructions and
// cache misses where the machine exposes them.
//
// Invariants:
//  - Each worker opens its counters once per run, on its own thread, at its first task: one
//    perf_event_open group (PERF_FORMAT_GROUP, read with a single read() before and after a
//    kernel) of the events that opened. What did not open falls back: CPU time to
//    CLOCK_THREAD_CPUTIME_ID, page faults and context switches to getrusage(RUSAGE_THREAD);
//    hardware counters have no fallback and are -1.
//  - Every worker tries the same events, so the run's note (which counters came from where, and
//    why the others did not open: errno and perf_event_paranoid) is the first worker's.
//  - A worker writes only its own slot; fill() runs after every task finished.
//  - Just outside the task-times observer (which stays innermost, so a task's times exclude the
//    counter reads) and inside every other instrument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "run_result.hpp"
#include "task.hpp"
#include "task_observer.hpp"

namespace ts::rt {

class Pmu final : public TaskObserver {
public:
    // The events tried, in group order: task-clock, page-faults, context-switches, cycles,
    // instructions, cache-misses.
    static constexpr int kEvents = 6;

    explicit Pmu(int32_t workers);
    ~Pmu() override;
    Pmu(const Pmu &) = delete;
    Pmu &operator=(const Pmu &) = delete;

    void before(Task &t, int32_t worker) override;
    void after(Task &t, int32_t worker) override;

    // Move every record (by task id) and the note into `result`.
    void fill(ts_run_result &result);

private:
    struct alignas(64) Slot {
        bool opened = false;
        int fds[kEvents] = {-1, -1, -1, -1, -1, -1};
        int slot_of[kEvents] = {-1, -1, -1, -1, -1, -1};  // position in the group's read, -1: not open
        int errors[kEvents] = {};                         // errno of a failed open
        int nopen = 0;
        int leader = -1;  // the group's leader fd, -1: nothing opened
        bool rusage = false;  // page faults or context switches come from getrusage
        uint64_t group[kEvents + 1] = {};
        int64_t wall0 = 0;
        int64_t cpu0 = 0;
        struct rusage ru0 {};
        std::vector<ts_pmu_record> records;
    };

    void open(Slot &s);
    int64_t read_group(Slot &s, uint64_t *values);
    std::string note(const Slot &s) const;

    std::vector<Slot> slots_;
};

}  // namespace ts::rt
