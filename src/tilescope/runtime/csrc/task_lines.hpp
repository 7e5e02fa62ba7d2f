// print_intermediates level 3: a line on stderr as each task starts and finishes, for the tasks
// of kernel_filter's kernels only.
//
// Invariants:
//  - Each line goes out in one write(2), so lines of concurrent workers never interleave.
//  - A task's "done" line follows its "start" line, on the same worker, and gives the time in
//    between; the observers after this one in a run's list (task times) run inside it.
//  - Worker `w` only touches its own start time (cache-line aligned, no locks).
#pragma once

#include <cstdint>
#include <vector>

#include "task.hpp"
#include "task_observer.hpp"

namespace ts::rt {

class TaskLines final : public TaskObserver {
public:
    // `kernel_names` (one per func_id) and `kernel_filter` (NULL: every kernel; else one flag per
    // func_id) outlive the observer.
    TaskLines(int32_t num_workers, const char *const *kernel_names, const uint8_t *kernel_filter);

    void before(Task &t, int32_t worker) override;
    void after(Task &t, int32_t worker) override;

private:
    struct alignas(64) Started {
        Clock::time_point at;
    };

    bool shown(const Task &t) const { return kernel_filter_ == nullptr || kernel_filter_[t.func_id]; }
    void write_line(const Task &t, int32_t worker, const char *what, int64_t ns) const;

    const char *const *const kernel_names_;
    const uint8_t *const kernel_filter_;
    std::vector<Started> started_;  // per worker
};

}  // namespace ts::rt
