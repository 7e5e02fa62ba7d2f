// Thread guards: what lets the watchdog stop a running kernel (or orchestration), and a fatal
// signal inside a kernel leave a report behind.
//
// Invariants:
//  - Each thread that runs kernels or an orchestration owns one ThreadSlot and points the
//    thread-local `current_slot()` at it; the slot outlives every use of it by that thread.
//  - The thread fills the slot's `thread`, `worker` and `clock` (its CPU clock and kernel tid,
//    charged_time.hpp) itself, by take(), before its `seq` first becomes odd: the watchdog reads
//    them only while `seq` is odd.
//  - `armed` is nonzero exactly while the thread executes user code (a kernel, or orchestration
//    code outside the runtime's callbacks), with `jump` set by sigsetjmp just before.
//  - The interrupt signal stops the thread only if it arrives while armed and while `seq` still
//    equals `stop_seq` (the run of user code the watchdog chose); otherwise it is ignored, so a
//    late signal never stops the next kernel.
//  - The fatal-signal handler only reads the slot and writes with write(2); afterwards it hands
//    the signal to the handler that was installed before ours (or the default action). Only the
//    first kernel thread to crash reports; one crashing at the same time waits (pause) for the
//    process to end, so a crash report is never two reports mixed.
//  - While a run is in flight (a RunInFlight exists), the core handles SIGINT (unless it was
//    ignored): the first one only marks an interrupt pending (interrupt_pending()), which the run
//    turns into a TS_FAILURE_INTERRUPTED failure; a second one exits the process at once (status
//    130). The previous handler is restored when the last run in flight ends.
//  - While a run is in flight (a RunInFlight exists), exit() from any thread — a kernel's
//    exit(0) included — is reported on stderr, naming the task that called it, and the process
//    exits with status 1: a run that did not finish never ends in a passing exit status.
#pragma once

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdint>

#include <pthread.h>

#include "charged_time.hpp"
#include "tilescope/abi.h"
#include "tilescope/runtime_api.h"

namespace ts::rt {

struct Task;

struct alignas(64) ThreadSlot {
    // Read by the watchdog (another thread).
    std::atomic<uint64_t> seq{0};  // odd while user code runs; bumped at each start and end
    std::atomic<uint64_t> stop_seq{0};
    pthread_t thread{};
    int32_t worker = -1;  // -1: the orchestration thread
    ThreadClock clock;    // what the watchdog charges the thread's user code by

    // Called by the thread that now uses the slot (a worker, or a run's orchestration thread).
    void take(int32_t worker_index);

    // Read by this thread's signal handlers.
    sigjmp_buf jump;
    volatile sig_atomic_t armed = 0;
    const Task *task = nullptr;          // the task being run (nullptr: orchestration)
    const char *kernel_name = "";
    const char *crash_report_path = nullptr;
    uint64_t frames[TS_MAX_FRAMES] = {};  // filled when stopped: frames[0] = interrupted pc
    int32_t nframes = 0;
    // Nonzero: stop only while the pc is in [code_lo, code_hi) (the orchestration's own module), so
    // that the thread is never abandoned inside malloc or the C++ library holding a lock.
    uint64_t code_lo = 0;
    uint64_t code_hi = 0;
};

// The executable segments' span of the loaded module holding `addr` (cached per address); false if
// none holds it.
bool module_code_range(const void *addr, uint64_t *lo, uint64_t *hi);

// The slot of the calling thread (nullptr if it has none).
ThreadSlot *current_slot();
void set_current_slot(ThreadSlot *slot);

// Install the interrupt and fatal-signal handlers once per process; give the calling thread an
// alternate signal stack (so a stack overflow in a kernel can still be reported). Idempotent.
void install_guards();
void ensure_alt_stack();

// Whether a SIGINT arrived since the runs now in flight began (see the invariants).
bool interrupt_pending();

// Marks a run in flight for its lifetime (see the invariants: SIGINT and exit() during a run).
class RunInFlight {
public:
    RunInFlight();
    ~RunInFlight();
    RunInFlight(const RunInFlight &) = delete;
    RunInFlight &operator=(const RunInFlight &) = delete;
};

// Ask `slot`'s thread to stop the user code it runs as run `seq` (see invariants); returns false
// if the signal could not be sent.
bool request_stop(ThreadSlot &slot, uint64_t seq);

}  // namespace ts::rt
