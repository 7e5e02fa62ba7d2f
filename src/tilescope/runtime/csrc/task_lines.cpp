// print_intermediates level 3's task lines (see task_lines.hpp for their invariants).
#include "task_lines.hpp"

#include <algorithm>
#include <cstdio>

#include <unistd.h>

namespace ts::rt {

TaskLines::TaskLines(int32_t num_workers, const char *const *kernel_names, const uint8_t *kernel_filter)
    : kernel_names_(kernel_names), kernel_filter_(kernel_filter), started_(static_cast<size_t>(num_workers)) {}

void TaskLines::before(Task &t, int32_t worker) {
    if (!shown(t)) return;
    write_line(t, worker, "start", -1);
    started_[static_cast<size_t>(worker)].at = Clock::now();
}

void TaskLines::after(Task &t, int32_t worker) {
    if (!shown(t)) return;
    const Clock::duration took = Clock::now() - started_[static_cast<size_t>(worker)].at;
    write_line(t, worker, "done", std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
}

void TaskLines::write_line(const Task &t, int32_t worker, const char *what, int64_t ns) const {
    char line[256];
    const char *name = kernel_names_[t.func_id];
    int n = ns < 0 ? std::snprintf(line, sizeof(line), "[tilescope] task %lld %s: kernel %s on worker %d\n",
                                   static_cast<long long>(t.id), what, name, worker)
                   : std::snprintf(line, sizeof(line), "[tilescope] task %lld %s: kernel %s on worker %d (%.3f ms)\n",
                                   static_cast<long long>(t.id), what, name, worker, ns / 1e6);
    n = std::min<int>(n, static_cast<int>(sizeof(line)) - 1);
    if (n > 0 && ::write(2, line, static_cast<size_t>(n)) < 0) return;  // NOTE: one write: whole lines
}

}  // namespace ts::rt
