// What the watchdog charges a run of user code (a kernel, or orchestration code between two
// runtime calls) against task_timeout_s: the CPU time its thread used plus the time the thread
// was blocked in the kernel (sleeping, waiting on a lock or I/O), but not the time it was
// runnable and waited for a core. A task on a machine loaded by other processes is slowed down,
// not hung: only a spinning or a blocked one uses up its budget.
//
// Invariants:
//  - A ThreadClock is taken by the thread it describes (ThreadClock::of_this_thread); another
//    thread reads it through cpu_time_ns() and thread_state(), which report a failed read (the
//    thread is gone, /proc is not mounted) instead of throwing.
//  - A ChargeMeter follows one run of user code from one watchdog poll to the next. At the first
//    poll it only reads the CPU clock; later polls read the CPU clock and, only when the thread
//    did not run for the whole interval, its state in /proc/self/task/<tid>/stat.
//  - Blocked time is sampled: the interval's wall time not spent on the CPU counts as blocked
//    when the thread is seen in a state other than R (running or runnable) at the poll, and as
//    waiting for a core (not charged) when it is seen in R.
//  - Once a read fails, the meter charges wall time for the rest of that run of user code (the
//    old watchdog's rule): a failed read never stops a task sooner than wall time would.
#pragma once

#include <cstdint>
#include <string>

#include <sys/types.h>
#include <time.h>

#include "task.hpp"

namespace ts::rt {

// How the watchdog reads one thread's CPU time and scheduler state.
struct ThreadClock {
    pid_t tid = 0;          // the kernel's thread id (names /proc/self/task/<tid>)
    clockid_t cpu{};        // the thread's CPU-time clock
    bool has_cpu = false;   // false: pthread_getcpuclockid failed

    // The calling thread's clock.
    static ThreadClock of_this_thread();
};

// The thread's CPU time in nanoseconds, or -1 if it cannot be read.
int64_t cpu_time_ns(const ThreadClock &clock);

// The thread's state letter in /proc/self/task/<tid>/stat ('R' running or runnable, 'S' sleeping,
// 'D' uninterruptible wait, ...), or 0 if it cannot be read.
char thread_state(pid_t tid);

// What one run of user code has been charged so far, from the watchdog's first sight of it.
struct Charge {
    int64_t wall_ns = 0;     // wall time since the watchdog first saw it running
    int64_t cpu_ns = 0;      // its thread's CPU time over that span
    int64_t blocked_ns = 0;  // time its thread was seen blocked in the kernel (not R)
    char blocked_state = 0;  // the state it was last seen blocked in; 0: never
    bool wall_only = false;  // a read failed: wall time is charged

    int64_t charged_ns() const { return wall_only ? wall_ns : cpu_ns + blocked_ns; }
    // What it did, for a failure message: "has used 0.31 s of CPU (0.92 s wall)", "has been
    // blocked (sleeping) for 0.30 s (0.31 s wall)", or (wall_only) "has run for 0.31 s (...)".
    std::string words() const;
};

// The watchdog's meter of one ThreadSlot (see the invariants).
class ChargeMeter {
public:
    // The run of user code the meter follows (0: none yet).
    uint64_t seq() const { return seq_; }
    // A new run of user code `seq`, first seen at `now`.
    void start(uint64_t seq, Clock::time_point now, const ThreadClock &clock);
    // The same run seen again at `now`: charge what it did since the last poll.
    void poll(Clock::time_point now, const ThreadClock &clock);
    const Charge &charge() const { return charge_; }

private:
    uint64_t seq_ = 0;
    Clock::time_point since_{};
    Clock::time_point last_{};
    int64_t cpu_start_ = 0;
    int64_t cpu_last_ = 0;
    Charge charge_;
};

}  // namespace ts::rt
