// record_task_times: when each task started and ended (ts_task_record), read by enable_trace and
// enable_dep_gen.
//
// Invariants:
//  - Times are nanoseconds of `Clock` since `t0`, the run's start.
//  - Last in a run's observer list, so a task's times bracket its kernel and nothing else.
#pragma once

#include <chrono>
#include <cstdint>

#include "task.hpp"
#include "task_observer.hpp"

namespace ts::rt {

class TaskTimes final : public TaskObserver {
public:
    explicit TaskTimes(Clock::time_point t0) : t0_(t0) {}

    int64_t now_ns() const {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    }

    void before(Task &t, int32_t) override { t.start_ns = now_ns(); }
    void after(Task &t, int32_t) override { t.end_ns = now_ns(); }

private:
    const Clock::time_point t0_;
};

}  // namespace ts::rt
