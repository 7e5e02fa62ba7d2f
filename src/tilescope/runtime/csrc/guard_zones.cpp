#include "guard_zones.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dtype.hpp"

namespace ts::rt {
namespace {

constexpr uint64_t kGuardWord = 0x0101010101010101ull * TS_GUARD_BYTE;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Whether `n` bytes at `p` all hold TS_GUARD_BYTE (a branch-free loop the compiler vectorizes).
bool intact(const unsigned char *p, int64_t n) {
    uint64_t diff = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        std::memcpy(&word, p + i, 8);
        diff |= word ^ kGuardWord;
    }
    for (; i < n; ++i) diff |= static_cast<uint64_t>(p[i] ^ TS_GUARD_BYTE);
    return diff == 0;
}

bool holds(const Task &t, const GuardZone *z) {
    for (int32_t i = 0; i < t.nzones; ++i)
        if (t.zones[i] == z) return true;
    return false;
}

// The argument of `t` through which it can have written `z`'s tensor: its first output or inout
// in that tensor, else its first argument in it; -1 if none.
int32_t arg_in(const Task &t, const GuardZone &z) {
    int32_t any = -1;
    for (int32_t i = 0; i < t.nargs; ++i) {
        const ts_arg &a = t.args[i];
        if (a.kind != TS_ARG_TENSOR || a.u.t.data != z.data) continue;
        if (a.dir == TS_OUT || a.dir == TS_INOUT) return i;
        if (any < 0) any = i;
    }
    return any;
}

}  // namespace

GuardPool::~GuardPool() {
    for (const auto &[bytes, map] : free_) munmap(map, bytes);
}

void *GuardPool::take(size_t map_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = free_.find(map_bytes);
    if (it == free_.end()) return nullptr;
    void *map = it->second;
    free_.erase(it);
    kept_bytes_ -= map_bytes;
    return map;
}

void GuardPool::give(void *map, size_t map_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_bytes_ + map_bytes > kMaxKeptBytes) {
        munmap(map, map_bytes);
        return;
    }
    free_.emplace(map_bytes, map);
    kept_bytes_ += map_bytes;
}

GuardZones::GuardZones(int32_t workers, GuardHooks &hooks, const std::vector<std::string> &kernel_names,
                       GuardPool &pool)
    : workers_(workers),
      hooks_(hooks),
      kernel_names_(kernel_names),
      pool_(pool),
      running_(new std::atomic<Task *>[workers]) {
    for (int32_t w = 0; w < workers_; ++w) running_[w].store(nullptr);
}

GuardZones::~GuardZones() {
    for (void *p : plain_) std::free(p);
    for (GuardZone *z : all_) {
        if (z->map == nullptr) continue;
        if (z->map_bytes > 0) {
            pool_.give(z->map, z->map_bytes);
        } else {
            std::free(z->map);
        }
    }
}

void *GuardZones::allocate(const ts_tensor &desc, size_t bytes) {
#ifdef TS_RUNTIME_NO_GUARD_ZONES
    // NOTE: only so that benchmarks/guard_zones.py can compare against a core without zones.
    (void)desc;
    void *plain = std::aligned_alloc(64, round_up(std::max<size_t>(bytes, 1), 64));
    if (plain != nullptr) std::memset(plain, 0, round_up(std::max<size_t>(bytes, 1), 64));
    plain_.push_back(plain);
    return plain;
#endif
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t body = round_up(kHeadBytes + bytes + kMinTailBytes, page);
    // NOTE: the guard pages are address space only; the body is charged against the system's commit
    // limit when it becomes writable (no MAP_NORESERVE), so an intermediate larger than memory is
    // refused here (out of memory), not killed when first touched.
    const size_t guard = std::max(page, round_up(bytes, page));
    size_t map_bytes = guard + body + guard;
    unsigned char *start = nullptr;  // the head zone's first byte
    size_t usable = body;            // head zone, data and tail zone
    void *map = pool_.take(map_bytes);
    if (map != nullptr) {  // an earlier run's mapping of this size: its data zeroed again
        start = static_cast<unsigned char *>(map) + guard;
        std::memset(start + kHeadBytes, 0, bytes);
    } else {
        map = mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map != MAP_FAILED && mprotect(static_cast<char *>(map) + guard, body, PROT_READ | PROT_WRITE) == 0) {
            start = static_cast<unsigned char *>(map) + guard;  // zero-filled by the kernel
        } else {
            // NOTE: no guard pages (the mapping limit is reached): heap memory, the zones still checked.
            if (map != MAP_FAILED) munmap(map, map_bytes);
            map_bytes = 0;
            usable = round_up(kHeadBytes + bytes + kMinTailBytes, 64);
            map = std::aligned_alloc(64, usable);
            if (map == nullptr) return nullptr;
            start = static_cast<unsigned char *>(map);
            std::memset(start, 0, usable);
        }
    }
    GuardZone *z = zones_.allocate(1);
    z->data = start + kHeadBytes;
    z->bytes = static_cast<int64_t>(bytes);
    z->head_bytes = kHeadBytes;
    z->tail_bytes = static_cast<int64_t>(usable - kHeadBytes - bytes);
    z->ordinal = intermediates_++;
    z->tensor = desc;
    z->tensor.data = z->data;
    z->map = map;
    z->map_bytes = map_bytes;
    std::memset(start, TS_GUARD_BYTE, kHeadBytes);
    std::memset(z->data + bytes, TS_GUARD_BYTE, static_cast<size_t>(z->tail_bytes));
    all_.push_back(z);
    by_data_.emplace(z->data, z);
    return z->data;
}

std::string GuardZones::adopt(int32_t index, const ts_tensor &t, const ts_guard_zone &zone) {
    const std::string which = "guard_zones: program argument " + std::to_string(index);
    if (zone.bytes < 0 || zone.before < 0 || zone.after < 0 || zone.reach < 0)
        return which + ": bytes, before, after and reach must be >= 0";
    if (by_data_.count(t.data) != 0) return which + ": its buffer already has guard zones";
    auto *data = static_cast<unsigned char *>(t.data);
    if (!intact(data - zone.before, zone.before) || !intact(data + zone.bytes, zone.after))
        return which + ": its zones do not hold TS_GUARD_BYTE before the run";
    GuardZone *z = zones_.allocate(1);
    z->data = data;
    z->bytes = zone.bytes;
    z->head_bytes = zone.before;
    z->tail_bytes = zone.after;
    z->program_arg = index;
    z->reach = zone.reach;
    z->tensor = t;
    all_.push_back(z);
    by_data_.emplace(z->data, z);
    return "";
}

void GuardZones::name(const void *data, const char *label) {
    const auto it = by_data_.find(data);
    if (it != by_data_.end()) it->second->label = label;
}

void GuardZones::attach(Task &t, BlockArena<GuardZone *> &arena) const {
    if (by_data_.empty()) return;
    GuardZone *found[TS_MAX_DIMS * 4];
    int32_t n = 0;
    std::vector<GuardZone *> more;  // NOTE: only for tasks with more guarded tensors than `found` holds
    for (int32_t i = 0; i < t.nargs; ++i) {
        if (t.args[i].kind != TS_ARG_TENSOR) continue;
        const auto it = by_data_.find(t.args[i].u.t.data);
        if (it == by_data_.end()) continue;
        bool seen = false;
        for (int32_t k = 0; k < n && !seen; ++k) seen = found[k] == it->second;
        for (GuardZone *m : more) seen = seen || m == it->second;
        if (seen) continue;
        if (n < static_cast<int32_t>(sizeof(found) / sizeof(found[0]))) {
            found[n++] = it->second;
        } else {
            more.push_back(it->second);
        }
    }
    const size_t total = static_cast<size_t>(n) + more.size();
    if (total == 0) return;
    GuardZone **zones = arena.allocate(total);
    std::copy(found, found + n, zones);
    std::copy(more.begin(), more.end(), zones + n);
    t.zones = zones;
    t.nzones = static_cast<int32_t>(total);
}

void GuardZones::before(Task &t, int32_t worker) {
#ifndef TS_RUNTIME_NO_GUARD_ZONES
    running_[worker].store(&t);
    GuardDamage damage;
    for (int32_t i = 0; i < t.nzones; ++i) {
        if (scan(*t.zones[i], damage)) {  // damaged before `t` ran: `t` did not write it
            report(*t.zones[i], damage, &t, worker, true);
            break;
        }
    }
#else
    (void)t;
    (void)worker;
#endif
}

void GuardZones::after(Task &t, int32_t worker) {
#ifdef TS_RUNTIME_NO_GUARD_ZONES
    (void)t;
    (void)worker;
    return;
#endif
    GuardDamage damage;
    for (int32_t i = 0; i < t.nzones; ++i) {
        if (scan(*t.zones[i], damage)) {
            report(*t.zones[i], damage, &t, worker, false);
            break;
        }
    }
    running_[worker].store(nullptr);
}

void GuardZones::check_all() {
    GuardDamage damage;
    for (const GuardZone *z : all_) {
        if (scan(*z, damage)) {
            report(*z, damage, nullptr, -1, false);
            return;
        }
    }
}

bool GuardZones::scan(const GuardZone &z, GuardDamage &out) {
    const unsigned char *head = z.data - z.head_bytes;
    const unsigned char *tail = z.data + z.bytes;
    const bool head_ok = intact(head, z.head_bytes);
    if (head_ok && intact(tail, z.tail_bytes)) return false;
    out = GuardDamage{};
    out.tail = head_ok;
    const unsigned char *p = out.tail ? tail : head;
    const int64_t n = out.tail ? z.tail_bytes : z.head_bytes;
    int64_t lo = -1, hi = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (p[i] == TS_GUARD_BYTE) continue;
        if (lo < 0) lo = i;
        hi = i;
        ++out.changed;
    }
    // Distances from the tensor: the tail's byte i is i past its end, the head's byte i is n - i before
    // its start (as a fault address is).
    out.first = out.tail ? lo : n - hi;
    out.last = out.tail ? hi : n - lo;
    return true;
}

std::string GuardZones::name(const GuardZone &z) const {
    std::string s = z.program_arg >= 0 ? "program argument " + std::to_string(z.program_arg)
                    : z.label.empty()  ? "intermediate tensor " + std::to_string(z.ordinal)
                                       : "intermediate tensor " + z.label;
    s += std::string(" (") + dtype_name(z.tensor.dtype) + "[";
    for (int32_t d = 0; d < z.tensor.ndim && d < TS_MAX_DIMS; ++d) s += (d ? ", " : "") + std::to_string(z.tensor.shape[d]);
    return s + "], " + std::to_string(z.bytes) + " bytes)";
}

void GuardZones::report(const GuardZone &z, const GuardDamage &d, const Task *t, int32_t worker, bool starting) {
    // NOTE: a task that finds the damage too waits here with its `running_` entry set, so the
    // first report names it.
    std::lock_guard<std::mutex> lock(report_mu_);
    if (reported_) return;
    reported_ = true;
    const int32_t item = std::max(dtype_itemsize(z.tensor.dtype), 1);
    std::string where = std::to_string(d.changed) + " byte(s) of the " +
                        std::to_string(d.tail ? z.tail_bytes : z.head_bytes) + "-byte guard zone " +
                        (d.tail ? "after" : "before") + " it changed, " + std::to_string(d.first) + " to " +
                        std::to_string(d.last) + " byte(s) " + (d.tail ? "past its end" : "before its start");
    if (d.tail) {
        where += " (element " + std::to_string((z.bytes + d.first) / item) + " onwards of " +
                 std::to_string(z.bytes / item) + ")";
    }
    if (t == nullptr) {
        hooks_.guard_damaged(nullptr, -1, false, -1,
                             "guard zone damaged: at the end of the run, " + name(z) + ": " + where +
                                 "; no task that takes it as an argument saw it change, so a task wrote "
                                 "there through a pointer it was not given");
        return;
    }
    auto label = [&](const Task &o) {
        return "task " + std::to_string(o.id) + " (kernel " + kernel_names_[static_cast<size_t>(o.func_id)] + ")";
    };
    std::vector<const Task *> others;
    int32_t other_worker = -1;
    for (int32_t w = 0; w < workers_; ++w) {
        const Task *o = running_[w].load();
        if (o != nullptr && o != t && holds(*o, &z)) {
            others.push_back(o);
            other_worker = w;
        }
    }
    if (starting) {  // found as `t` started: the writer is a task then running on it, or a stray pointer
        std::string message = "guard zone damaged: found as " + label(*t) + " started, " + name(z) + ": " + where;
        if (others.empty()) {
            message += "; no task then running takes it as an argument, and each that had run checked it "
                       "intact, so a task wrote there through a pointer it was not given";
            hooks_.guard_damaged(nullptr, -1, false, -1, message);
            return;
        }
        message += "; the writer is " + label(*others.front());
        for (size_t i = 1; i < others.size(); ++i) message += " or " + label(*others[i]);
        message += " (running with that tensor as an argument)";
        if (others.size() > 1) message += ": run again with --serial to name the one";
        // NOTE: the writer is still running: its inputs are not saved.
        const Task *writer = others.size() == 1 ? others.front() : nullptr;
        hooks_.guard_damaged(writer, writer != nullptr ? other_worker : -1, false,
                             writer != nullptr ? arg_in(*writer, z) : -1, message);
        return;
    }
    const int32_t arg = arg_in(*t, z);
    std::string message = "guard zone damaged: " + label(*t) + " (arg " + std::to_string(arg) + ") wrote " +
                          (d.tail ? "past the end of " : "before the start of ") + name(z) + ": " + where;
    if (others.empty()) {
        message += "; no other task using that tensor was running, so it is the writer";
    } else {
        message += "; the writer is " + label(*t);
        for (const Task *o : others) message += " or " + label(*o);
        message += " (they were running together with that tensor as an argument): run again with --serial to "
                   "name the one";
    }
    hooks_.guard_damaged(t, worker, others.empty(), arg, message);
}

}  // namespace ts::rt
