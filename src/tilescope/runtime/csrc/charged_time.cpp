#include "charged_time.hpp"

#include <cstdio>

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ts::rt {

namespace {

int64_t ns_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

std::string seconds(int64_t ns) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f s", static_cast<double>(ns) / 1e9);
    return text;
}

const char *state_name(char state) {
    switch (state) {
        case 'S': return "sleeping";
        case 'D': return "in an uninterruptible wait";
        case 'T': return "stopped by a signal";
        case 't': return "stopped by a debugger";
        default: return "not runnable";
    }
}

}  // namespace

ThreadClock ThreadClock::of_this_thread() {
    ThreadClock clock;
    clock.tid = static_cast<pid_t>(::syscall(SYS_gettid));
    clock.has_cpu = pthread_getcpuclockid(pthread_self(), &clock.cpu) == 0;
    return clock;
}

int64_t cpu_time_ns(const ThreadClock &clock) {
    timespec ts{};
    if (!clock.has_cpu || clock_gettime(clock.cpu, &ts) != 0) return -1;
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

char thread_state(pid_t tid) {
    if (tid <= 0) return 0;
    char path[48];
    std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    // NOTE: "tid (comm) S ...": comm is at most 15 bytes but may hold ')' or spaces, so the state
    // follows the last ')' of the first bytes (nothing after the state is a ')').
    char buf[96];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    ::close(fd);
    if (n <= 0) return 0;
    const char *close_paren = nullptr;
    for (ssize_t i = 0; i < n; ++i)
        if (buf[i] == ')') close_paren = buf + i;
    if (close_paren == nullptr || close_paren + 2 >= buf + n || close_paren[1] != ' ') return 0;
    return close_paren[2];
}

std::string Charge::words() const {
    const std::string wall = " (" + seconds(wall_ns) + " wall)";
    if (wall_only) return "has run for " + seconds(wall_ns) + " (wall time: its thread's CPU time could not be read)";
    const std::string cpu = seconds(cpu_ns) + " of CPU";
    const std::string blocked = std::string("blocked (") + state_name(blocked_state) + ") for " + seconds(blocked_ns);
    // NOTE: the larger part first; the other only when it shows in two decimals.
    if (blocked_ns > cpu_ns) return "has been " + blocked + (cpu_ns >= 5000000 ? " and used " + cpu : "") + wall;
    return "has used " + cpu + (blocked_ns >= 5000000 ? " and been " + blocked : "") + wall;
}

void ChargeMeter::start(uint64_t seq, Clock::time_point now, const ThreadClock &clock) {
    seq_ = seq;
    since_ = last_ = now;
    charge_ = Charge{};
    cpu_start_ = cpu_last_ = cpu_time_ns(clock);
    charge_.wall_only = cpu_start_ < 0;
}

void ChargeMeter::poll(Clock::time_point now, const ThreadClock &clock) {
    const int64_t wall_gained = ns_between(last_, now);
    last_ = now;
    charge_.wall_ns = ns_between(since_, now);
    if (charge_.wall_only) return;
    const int64_t cpu = cpu_time_ns(clock);
    if (cpu < 0) {
        charge_.wall_only = true;
        return;
    }
    const int64_t off_cpu = wall_gained - (cpu - cpu_last_);
    cpu_last_ = cpu;
    charge_.cpu_ns = cpu - cpu_start_;
    if (off_cpu <= 0) return;  // it ran the whole interval: there is nothing else to charge
    const char state = thread_state(clock.tid);
    if (state == 0) {
        charge_.wall_only = true;
    } else if (state != 'R') {
        charge_.blocked_ns += off_cpu;
        charge_.blocked_state = state;
    }
}

}  // namespace ts::rt
