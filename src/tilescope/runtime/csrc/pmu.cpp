#include "pmu.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ts::rt {

namespace {

struct EventSpec {
    uint32_t type;
    uint64_t config;
    const char *name;
};

constexpr EventSpec kSpecs[Pmu::kEvents] = {
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "task-clock"},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "page-faults"},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "context-switches"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "cycles"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "instructions"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "cache-misses"},
};
constexpr int kTaskClock = 0, kPageFaults = 1, kCtxSwitches = 2;

int64_t clock_ns(clockid_t id) {
    timespec ts{};
    clock_gettime(id, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The calling thread's event `spec`, in the group led by `leader` (-1: it leads); -errno on failure.
int open_event(const EventSpec &spec, int leader, bool user_only) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = spec.type;
    attr.config = spec.config;
    attr.read_format = PERF_FORMAT_GROUP;
    attr.exclude_kernel = user_only ? 1 : 0;
    attr.exclude_hv = 1;
    const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, leader, PERF_FLAG_FD_CLOEXEC);
    return fd >= 0 ? static_cast<int>(fd) : -errno;
}

std::string paranoid() {
    std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
    std::string level;
    return in >> level ? level : "unknown";
}

}  // namespace

Pmu::Pmu(int32_t workers) : slots_(static_cast<size_t>(workers)) {}

Pmu::~Pmu() {
    for (Slot &s : slots_)
        for (int fd : s.fds)
            if (fd >= 0) close(fd);
}

void Pmu::open(Slot &s) {
    s.opened = true;
    int &leader = s.leader;
    for (int e = 0; e < kEvents; ++e) {
        // NOTE: counting kernel time is what task-clock and context switches need; a paranoid
        // level that forbids it still allows the user-space part, so that is tried second.
        int fd = open_event(kSpecs[e], leader, false);
        if (fd == -EACCES || fd == -EPERM) fd = open_event(kSpecs[e], leader, true);
        if (fd < 0) {
            s.errors[e] = -fd;
            continue;
        }
        s.fds[e] = fd;
        s.slot_of[e] = s.nopen++;
        if (leader < 0) leader = fd;
    }
    s.rusage = s.slot_of[kPageFaults] < 0 || s.slot_of[kCtxSwitches] < 0;
}

int64_t Pmu::read_group(Slot &s, uint64_t *values) {
    if (s.nopen == 0) return 0;
    const ssize_t want = static_cast<ssize_t>(sizeof(uint64_t)) * (s.nopen + 1);
    return read(s.leader, values, static_cast<size_t>(want)) == want ? s.nopen : 0;
}

void Pmu::before(Task &, int32_t worker) {
    Slot &s = slots_[static_cast<size_t>(worker)];
    if (!s.opened) open(s);
    // NOTE: wall time brackets the counters' reads, so a task's CPU time is never above it.
    s.wall0 = clock_ns(CLOCK_MONOTONIC);
    if (s.rusage) getrusage(RUSAGE_THREAD, &s.ru0);
    if (s.slot_of[kTaskClock] < 0) s.cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    read_group(s, s.group);
}

void Pmu::after(Task &t, int32_t worker) {
    Slot &s = slots_[static_cast<size_t>(worker)];
    uint64_t now[kEvents + 1] = {};
    const bool counted = read_group(s, now) > 0;
    ts_pmu_record r{};
    r.task_id = t.id;
    r.worker = worker;
    int64_t *fields[kEvents] = {&r.cpu_ns, &r.page_faults, &r.ctx_switches, &r.cycles, &r.instructions, &r.cache_misses};
    for (int e = 0; e < kEvents; ++e) {
        const int i = s.slot_of[e];
        *fields[e] = i >= 0 && counted ? static_cast<int64_t>(now[1 + i] - s.group[1 + i]) : -1;
    }
    if (s.slot_of[kTaskClock] < 0) r.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - s.cpu0;
    if (s.rusage) {
        struct rusage ru {};
        getrusage(RUSAGE_THREAD, &ru);
        if (s.slot_of[kPageFaults] < 0) r.page_faults = (ru.ru_minflt + ru.ru_majflt) - (s.ru0.ru_minflt + s.ru0.ru_majflt);
        if (s.slot_of[kCtxSwitches] < 0) r.ctx_switches = (ru.ru_nvcsw + ru.ru_nivcsw) - (s.ru0.ru_nvcsw + s.ru0.ru_nivcsw);
    }
    r.wall_ns = clock_ns(CLOCK_MONOTONIC) - s.wall0;
    s.records.push_back(r);
}

std::string Pmu::note(const Slot &s) const {
    std::string perf, fallback, missing;
    for (int e = 0; e < kEvents; ++e) {
        if (s.slot_of[e] >= 0) {
            perf += (perf.empty() ? "" : ", ") + std::string(kSpecs[e].name);
            continue;
        }
        const char *why = s.errors[e] == ENOENT || s.errors[e] == EOPNOTSUPP ? "not exposed by this machine"
                          : s.errors[e] == EACCES || s.errors[e] == EPERM   ? "not permitted"
                                                                            : "failed";
        std::string item = std::string(kSpecs[e].name) + " (" + why + ": " + std::strerror(s.errors[e]) + ")";
        if (e == kTaskClock) fallback += (fallback.empty() ? "" : ", ") + std::string("cpu time from CLOCK_THREAD_CPUTIME_ID");
        else if (e == kPageFaults || e == kCtxSwitches) fallback += (fallback.empty() ? "" : ", ") + std::string(kSpecs[e].name) + " from getrusage";
        missing += (missing.empty() ? "" : "; ") + item;
    }
    std::string out = "perf_event_open: " + (perf.empty() ? std::string("none") : perf);
    if (!fallback.empty()) out += "; fallback: " + fallback;
    if (!missing.empty()) out += "; unavailable via perf: " + missing;
    return out + "; perf_event_paranoid=" + paranoid();
}

void Pmu::fill(ts_run_result &result) {
    size_t total = 0;
    for (const Slot &s : slots_) total += s.records.size();
    result.pmu.reserve(total);
    for (Slot &s : slots_) {
        if (s.opened && result.pmu_note.empty()) result.pmu_note = note(s);
        result.pmu.insert(result.pmu.end(), s.records.begin(), s.records.end());
        s.records.clear();
    }
    std::sort(result.pmu.begin(), result.pmu.end(),
              [](const ts_pmu_record &a, const ts_pmu_record &b) { return a.task_id < b.task_id; });
}

}  // namespace ts::rt
