#include "signal_guard.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include "guard_zones.hpp"
#include "region_rows.hpp"
#include "task.hpp"

namespace ts::rt {

namespace {

thread_local ThreadSlot *tls_slot = nullptr;

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction previous_actions[sizeof(kFatalSignals) / sizeof(kFatalSignals[0])];
std::once_flag install_once;
std::atomic<int> runs_in_flight{0};
std::mutex in_flight_mu;           // guards the SIGINT handler's installation
struct sigaction previous_sigint;  // the handler before the first run in flight
bool sigint_installed = false;
std::atomic<int> sigints{0};       // SIGINTs since the first run in flight began


int interrupt_signal() { return SIGRTMIN + 3; }

// -- async-signal-safe output ----------------------------------------------------------------

class Out {
public:
    explicit Out(int fd) : fd_(fd) {}
    ~Out() { flush(); }

    Out &str(const char *s) {
        while (s != nullptr && *s) put(*s++);
        return *this;
    }
    Out &dec(int64_t v) {
        char tmp[24];
        int n = 0;
        const bool neg = v < 0;
        uint64_t u = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        do {
            tmp[n++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u);
        if (neg) put('-');
        while (n) put(tmp[--n]);
        return *this;
    }
    Out &hex(uint64_t v) {
        str("0x");
        char tmp[16];
        int n = 0;
        do {
            tmp[n++] = "0123456789abcdef"[v & 15];
            v >>= 4;
        } while (v);
        while (n) put(tmp[--n]);
        return *this;
    }
    Out &bytes(const void *p, int64_t n) {
        flush();
        const char *c = static_cast<const char *>(p);
        while (n > 0) {
            const ssize_t w = ::write(fd_, c, static_cast<size_t>(n));
            if (w <= 0) return *this;
            c += w;
            n -= w;
        }
        return *this;
    }
    void flush() {
        if (len_ == 0) return;
        const int64_t n = len_;
        len_ = 0;
        bytes(buf_, n);
    }

private:
    void put(char c) {
        if (len_ == sizeof(buf_)) flush();
        buf_[len_++] = c;
    }
    int fd_;
    char buf_[512];
    int64_t len_ = 0;
};

const char *signal_name(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGFPE: return "SIGFPE";
        case SIGILL: return "SIGILL";
        case SIGABRT: return "SIGABRT";
        default: return "signal";
    }
}

const char *dir_name(int32_t dir) {
    switch (dir) {
        case TS_IN: return "in";
        case TS_OUT: return "out";
        case TS_INOUT: return "inout";
        default: return "scalar";
    }
}

uint64_t context_pc(void *uc) {
#if defined(__x86_64__)
    return static_cast<uint64_t>(static_cast<ucontext_t *>(uc)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    return static_cast<uint64_t>(static_cast<ucontext_t *>(uc)->uc_mcontext.pc);
#else
    (void)uc;
    return 0;
#endif
}

// frames[0] = pc, then the return addresses above the interrupted frame.
int32_t capture_frames(uint64_t pc, uint64_t *frames) {
    void *raw[TS_MAX_FRAMES + 4];
    const int n = ::backtrace(raw, TS_MAX_FRAMES + 4);
    int start = -1;
    for (int i = 0; i < n; ++i)
        if (reinterpret_cast<uint64_t>(raw[i]) == pc) start = i + 1;  // the unwinder repeats the pc
    if (start < 0) start = n < 3 ? n : 3;                              // handler, trampoline, pc
    int32_t k = 0;
    frames[k++] = pc;
    for (int i = start; i < n && k < TS_MAX_FRAMES; ++i) frames[k++] = reinterpret_cast<uint64_t>(raw[i]);
    return k;
}

void write_payload(Out &out, const ts_tensor &t) {
    const Rows r = rows_of(t);
    char buf[4096];
    int64_t used = 0;
    for_each_row(r, [&](const char *row, int64_t) {
        if (r.strides[kRowDim] == 1) {
            if (used) out.bytes(buf, used), used = 0;
            out.bytes(row, r.shape[kRowDim] * r.itemsize);
            return true;
        }
        for (int64_t j = 0; j < r.shape[kRowDim]; ++j) {
            if (used + r.itemsize > static_cast<int64_t>(sizeof(buf))) out.bytes(buf, used), used = 0;
            std::memcpy(buf + used, row + j * r.strides[kRowDim] * r.itemsize, static_cast<size_t>(r.itemsize));
            used += r.itemsize;
        }
        return true;
    });
    if (used) out.bytes(buf, used);
}

// Where a fault address lies in the guard pages around one of task `t`'s tensors.
struct FaultNear {
    int32_t arg = -1;      // the task's first argument in that tensor; -1: none
    bool after = false;    // past its end (else before its start)
    int64_t distance = 0;  // bytes from its end (after) or its start (before)
};

FaultNear fault_near(const Task &t, uint64_t addr) {
    FaultNear near;
    for (int32_t i = 0; i < t.nzones; ++i) {
        const GuardZone &z = *t.zones[i];
        const auto data = reinterpret_cast<uint64_t>(z.data);
        // an intermediate's own mapping; a program argument's zones and the space it says is beyond them
        const auto around = static_cast<uint64_t>(z.head_bytes + z.reach);
        const uint64_t lo = z.map_bytes ? reinterpret_cast<uint64_t>(z.map) : data - std::min(data, around);
        const uint64_t hi = z.map_bytes ? lo + z.map_bytes
                                        : data + static_cast<uint64_t>(z.bytes + z.tail_bytes + z.reach);
        if ((z.map_bytes == 0 && z.reach == 0) || addr < lo || addr >= hi) continue;
        for (int32_t a = 0; a < t.nargs && near.arg < 0; ++a)
            if (t.args[a].kind == TS_ARG_TENSOR && t.args[a].u.t.data == z.data) near.arg = a;
        near.after = addr >= data + static_cast<uint64_t>(z.bytes);
        near.distance = static_cast<int64_t>(near.after ? addr - data - static_cast<uint64_t>(z.bytes) : data - addr);
        return near;
    }
    return near;
}

// Opens the crash report for writing, first making its directory if it was removed since the
// program's first run made it (that directory only: the build itself is where it was). The path
// comes resolved (run_config.core_config), so a directory or a report that is a symbolic link by
// now was put there since, and is refused (-1): a crash writes only where the run was told.
// Async-signal-safe calls only.
int open_crash_report(const char *path) {
    const char *slash = std::strrchr(path, '/');
    if (slash == nullptr) return ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    char dir[4096];
    const size_t n = slash == path ? 1 : static_cast<size_t>(slash - path);  // "/name": the root
    if (n >= sizeof(dir)) return -1;
    std::memcpy(dir, path, n);
    dir[n] = '\0';
    constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int dfd = ::open(dir, kDirFlags);
    if (dfd < 0 && errno == ENOENT) {
        if (::mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;  // NOTE: the umask applies, as to Python's mkdir
        dfd = ::open(dir, kDirFlags);
    }
    if (dfd < 0) return -1;  // a link, a file in the way, or no access
    const int fd = ::openat(dfd, slash + 1, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    ::close(dfd);
    return fd;
}

// Writes the crash report to `fd` (open_crash_report's) and closes it.
void write_crash_report(int fd, const ThreadSlot &s, int sig, const siginfo_t *info, uint64_t pc) {
    {
        Out out(fd);
        const Task &t = *s.task;
        out.str("TSCRASH 1\nsignal ").dec(sig).str(" ").str(signal_name(sig)).str("\ncode ").dec(info->si_code);
        out.str("\nfault_addr ").hex(reinterpret_cast<uint64_t>(info->si_addr));
        out.str("\ntask ").dec(t.id).str("\nfunc_id ").dec(t.func_id).str("\nworker ").dec(s.worker);
        out.str("\nkernel ").str(s.kernel_name);
        const FaultNear near = fault_near(t, reinterpret_cast<uint64_t>(info->si_addr));
        if (near.arg >= 0) out.str("\nfault_near ").dec(near.arg).str(near.after ? " after " : " before ").dec(near.distance);
        out.str("\nframes");
        uint64_t frames[TS_MAX_FRAMES];
        const int32_t nframes = capture_frames(pc, frames);
        for (int32_t i = 0; i < nframes; ++i) out.str(" ").hex(frames[i]);
        out.str("\nnargs ").dec(t.nargs).str("\n");
        for (int32_t i = 0; i < t.nargs; ++i) {
            const ts_arg &a = t.args[i];
            out.str("arg ").dec(i);
            if (a.kind == TS_ARG_SCALAR) {
                out.str(" scalar ").dec(a.u.s.dtype).str(" ").hex(static_cast<uint64_t>(a.u.s.v.i)).str("\n");
                continue;
            }
            const ts_tensor &x = a.u.t;
            out.str(" tensor ").str(dir_name(a.dir)).str(" ").dec(x.dtype).str(" ").dec(x.ndim);
            for (int32_t d = 0; d < x.ndim; ++d) out.str(" ").dec(x.shape[d]);
            out.str(" ;");
            for (int32_t d = 0; d < x.ndim; ++d) out.str(" ").dec(x.strides[d]);
            out.str(" ; ").dec(x.offset).str(" ").dec(region_bytes(x)).str("\n");
        }
        out.str("maps_begin\n");
        const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
        if (maps >= 0) {
            char buf[4096];
            ssize_t n;
            while ((n = ::read(maps, buf, sizeof(buf))) > 0) out.bytes(buf, n);
            ::close(maps);
        }
        out.str("maps_end\n");
        // NOTE: last, because reading the task's memory may fault again (the kernel may have been
        // handed a bad pointer); everything above is on disk by then.
        for (int32_t i = 0; i < t.nargs; ++i) {
            const ts_arg &a = t.args[i];
            if (a.kind != TS_ARG_TENSOR || a.dir == TS_OUT) continue;
            out.str("payload ").dec(i).str(" ").dec(region_bytes(a.u.t)).str("\n");
            out.flush();
            write_payload(out, a.u.t);
            out.str("\n");
        }
        out.str("end\n");
    }
    ::close(fd);
}

void on_interrupt(int, siginfo_t *, void *uc) {
    ThreadSlot *s = tls_slot;
    if (s == nullptr || !s->armed) return;
    if (s->seq.load(std::memory_order_relaxed) != s->stop_seq.load(std::memory_order_relaxed)) return;
    const uint64_t pc = context_pc(uc);
    if (s->code_lo != 0 && (pc < s->code_lo || pc >= s->code_hi)) return;  // NOTE: the watchdog asks again
    s->nframes = capture_frames(pc, s->frames);
    s->armed = 0;
    siglongjmp(s->jump, 1);
}

// SIGINT while a run is in flight (see the header's invariants).
void on_sigint(int, siginfo_t *, void *uc) {
    if (sigints.fetch_add(1, std::memory_order_acq_rel) >= 1) {
        Out err(2);
        err.str("\n[tilescope] second interrupt: exiting now (status 130)\n");
        err.flush();
        ::_exit(130);
    }
    {
        Out err(2);
        err.str("\n[tilescope] interrupt: stopping the run (Ctrl-C again exits at once)\n");
    }
    // NOTE: on the orchestration's thread, inside its own code, the orchestration stops here (as
    // the watchdog stops it); tasks are stopped by finish()'s poll.
    ThreadSlot *s = tls_slot;
    if (s == nullptr || !s->armed || s->worker != -1 || s->code_lo == 0) return;
    const uint64_t pc = context_pc(uc);
    if (pc < s->code_lo || pc >= s->code_hi) return;
    s->nframes = capture_frames(pc, s->frames);
    s->armed = 0;
    siglongjmp(s->jump, 1);
}

// atexit: exit() while a run is in flight (see the header's invariants).
void on_exit_in_run() {
    if (runs_in_flight.load(std::memory_order_acquire) == 0) return;
    const ThreadSlot *s = tls_slot;
    Out err(2);
    err.str("\n[tilescope] exit() was called ");
    if (s != nullptr && s->armed && s->task != nullptr) {
        err.str("by task ").dec(s->task->id).str(" (kernel ").str(s->kernel_name).str(") on worker ").dec(s->worker);
    } else if (s != nullptr && s->armed) {
        err.str("by the orchestration");
    } else {
        err.str("while a run was in flight");
    }
    err.str(": the run did not finish and its outputs are not valid; the process exits with status 1, "
            "not the status exit() was given\n");
    err.flush();
    ::_exit(1);
}

// Set by the first kernel thread that reports a fatal signal: the crash report is its alone.
std::atomic<bool> crash_reported{false};

void on_fatal(int sig, siginfo_t *info, void *uc) {
    const int saved_errno = errno;
    ThreadSlot *s = tls_slot;
    if (s != nullptr && s->armed && s->task != nullptr) {
        s->armed = 0;
        bool first = false;
        if (!crash_reported.compare_exchange_strong(first, true)) {
            // NOTE: another kernel thread crashed at the same time and is writing its report: this one
            // waits for the process to end with that one, so the report is never two reports mixed
            for (;;) pause();
        }
        Out err(2);
        err.str("\n[tilescope] task ").dec(s->task->id).str(" (kernel ").str(s->kernel_name).str(") on worker ");
        err.dec(s->worker).str(" died of ").str(signal_name(sig)).str(" at address ");
        err.hex(reinterpret_cast<uint64_t>(info->si_addr)).str(" (pc ").hex(context_pc(uc)).str(")\n");
        const FaultNear near = fault_near(*s->task, reinterpret_cast<uint64_t>(info->si_addr));
        if (near.arg >= 0) {
            err.str("[tilescope] that address is ").dec(near.distance).str(near.after ? " byte(s) past the end" : " byte(s) before the start");
            err.str(" of arg ").dec(near.arg).str("'s tensor, in the guard pages around it: the kernel went outside it\n");
        }
        // NOTE: opened first, so that the path is named only when the report can be written there
        const int fd = s->crash_report_path != nullptr ? open_crash_report(s->crash_report_path) : -1;
        if (fd >= 0) {
            err.str("[tilescope] crash report: ").str(s->crash_report_path).str("\n");
        } else {
            err.str("[tilescope] run with isolate=True (--isolate) to survive this and get the C++/DSL line\n");
        }
        err.flush();
        if (fd >= 0) write_crash_report(fd, *s, sig, info, context_pc(uc));
    }
    // Hand the signal on: restore what was installed before us. A fault re-executes the faulting
    // instruction on return; a sent signal (abort, kill) is raised again.
    for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(kFatalSignals[0]); ++i)
        if (kFatalSignals[i] == sig) sigaction(sig, &previous_actions[i], nullptr);
    if (info->si_code <= 0) raise(sig);
    errno = saved_errno;
}

struct RangeQuery {
    uint64_t addr;
    uint64_t lo = 0;
    uint64_t hi = 0;
};

int find_module(struct dl_phdr_info *info, size_t, void *data) {
    auto *q = static_cast<RangeQuery *>(data);
    uint64_t lo = UINT64_MAX, hi = 0;
    bool holds = false;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        const uint64_t start = info->dlpi_addr + ph.p_vaddr;
        const uint64_t end = start + ph.p_memsz;
        if (q->addr >= start && q->addr < end) holds = true;
        if (ph.p_flags & PF_X) {
            lo = std::min(lo, start);
            hi = std::max(hi, end);
        }
    }
    if (!holds || hi == 0) return 0;
    q->lo = lo;
    q->hi = hi;
    return 1;
}

}  // namespace

bool module_code_range(const void *addr, uint64_t *lo, uint64_t *hi) {
    static std::mutex mu;
    static std::map<uint64_t, std::pair<uint64_t, uint64_t>> cache;
    const uint64_t key = reinterpret_cast<uint64_t>(addr);
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) {
        RangeQuery q{key};
        dl_iterate_phdr(&find_module, &q);
        it = cache.emplace(key, std::make_pair(q.lo, q.hi)).first;
    }
    *lo = it->second.first;
    *hi = it->second.second;
    return *lo != 0;
}

void ThreadSlot::take(int32_t worker_index) {
    thread = pthread_self();
    worker = worker_index;
    clock = ThreadClock::of_this_thread();
}

ThreadSlot *current_slot() { return tls_slot; }
void set_current_slot(ThreadSlot *slot) { tls_slot = slot; }

void ensure_alt_stack() {
    thread_local bool done = false;
    if (done) return;
    done = true;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;  // has one
    constexpr size_t kSize = 64 * 1024;
    void *mem = std::malloc(kSize);  // NOTE: kept for the thread's life
    if (mem == nullptr) return;
    stack_t st{};
    st.ss_sp = mem;
    st.ss_size = kSize;
    sigaltstack(&st, nullptr);
}

void install_guards() {
    std::call_once(install_once, [] {
        void *warm[2];
        ::backtrace(warm, 2);  // NOTE: loads the unwinder now, not inside a signal handler
        struct sigaction sa {};
        sa.sa_sigaction = &on_interrupt;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(interrupt_signal(), &sa, nullptr);
        struct sigaction fatal {};
        fatal.sa_sigaction = &on_fatal;
        fatal.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&fatal.sa_mask);
        for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(kFatalSignals[0]); ++i)
            sigaction(kFatalSignals[i], &fatal, &previous_actions[i]);
        std::atexit(on_exit_in_run);
    });
}

bool interrupt_pending() { return sigints.load(std::memory_order_acquire) > 0; }

RunInFlight::RunInFlight() {
    std::lock_guard<std::mutex> lock(in_flight_mu);
    if (runs_in_flight.fetch_add(1, std::memory_order_acq_rel) == 0) {
        sigints.store(0, std::memory_order_release);
        struct sigaction current {};
        if (sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) {
            struct sigaction sa {};
            sa.sa_sigaction = &on_sigint;
            sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
            sigemptyset(&sa.sa_mask);
            sigint_installed = sigaction(SIGINT, &sa, &previous_sigint) == 0;
        }
    }
}

RunInFlight::~RunInFlight() {
    std::lock_guard<std::mutex> lock(in_flight_mu);
    if (runs_in_flight.fetch_sub(1, std::memory_order_acq_rel) == 1 && sigint_installed) {
        sigaction(SIGINT, &previous_sigint, nullptr);
        sigint_installed = false;
    }
}

bool request_stop(ThreadSlot &slot, uint64_t seq) {
    slot.stop_seq.store(seq, std::memory_order_relaxed);
    return pthread_kill(slot.thread, interrupt_signal()) == 0;
}

}  // namespace ts::rt
