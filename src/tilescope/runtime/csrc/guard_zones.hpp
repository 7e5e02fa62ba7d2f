// Guard zones: bytes of a known value (TS_GUARD_BYTE) just before and just after every tensor
// the runtime allocates, and every program argument allocated with them (ts_run_config::
// guard_zones), checked after each task that takes the tensor as an argument and once more at the
// end of the run, so that a kernel writing outside a tensor is named instead of corrupting memory.
//
// Invariants:
//  - An intermediate tensor lives in a mapping of its own: [guard pages][kHeadBytes zone][data]
//    [tail zone to the page's end, at least kMinTailBytes][guard pages], each run of guard pages as
//    large as the tensor (at least a page; address space only). They cannot be touched, so a write
//    past a zone by up to the tensor's size faults at once on the writing thread (the crash report
//    names its task), and no such write reaches another tensor or the runtime's heap. Where the
//    mapping cannot be made (mmap or mprotect refused: vm.max_map_count), the tensor is heap
//    memory with the same zones and no guard pages. Mappings are kept between the runs of one
//    runtime (GuardPool) and handed out again zero-filled, their zones filled afresh.
//  - Zones are made on the orchestration thread (program arguments before it starts); a task's
//    zones are listed when it is submitted (attach), so workers never look zones up.
//  - before(t) checks the zones of t's tensor arguments too: damage found then was made by a task
//    still running with that tensor as an argument, or through a pointer no task was given.
//  - after(t) checks the zones of t's tensor arguments. The first damage seen fails the run
//    (TS_FAILURE_GUARD); the report names the tensor, the side, the byte range, and the tasks that
//    may have written it: the task that found it and the tasks then running with that tensor as
//    an argument (a task's own writes are seen by its own check, so the writer is among them; a
//    task that finds the damage too waits for that report still listed as running).
//    Exact when that is one task: always with `serial`, and in a replay of one task.
//  - check_all() runs after every task has finished: damage no task's check saw was made by a
//    task that did not take the tensor as an argument.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "block_arena.hpp"
#include "task.hpp"
#include "task_observer.hpp"
#include "tilescope/runtime_api.h"

namespace ts::rt {

struct GuardZone {
    unsigned char *data = nullptr;  // the tensor's first byte
    int64_t bytes = 0;              // the tensor's size
    int64_t head_bytes = 0;         // zone just before `data`
    int64_t tail_bytes = 0;         // zone just after `data + bytes`
    int32_t program_arg = -1;       // >= 0: that program argument; -1: an intermediate
    int64_t ordinal = 0;            // an intermediate's creation index (0 first)
    ts_tensor tensor{};             // its dtype and shape, for reports
    std::string label;              // an intermediate's orchestration variable, or ""
    void *map = nullptr;            // the intermediate's own mapping, or heap block, to free
    size_t map_bytes = 0;           // 0: `map` is a heap block
    int64_t reach = 0;              // a program argument's inaccessible bytes beyond each zone
};

// What a damaged zone looked like: the side and the changed bytes, relative to the tensor's first
// byte (head, negative offsets) or to its end (tail).
struct GuardDamage {
    bool tail = false;
    int64_t first = 0;  // nearest changed byte's distance: tail, 0 for the byte just past the end; head, 1 for the byte just before the start
    int64_t last = 0;   // farthest
    int64_t changed = 0;
};

// The mappings of intermediates a runtime keeps between its runs (at most kMaxKeptBytes of address
// space, guard pages included), so that a run does not map, fault in and unmap them afresh. Runs
// of one runtime are serialized, so a mapping is reused only after the run that freed it ended.
class GuardPool {
public:
    static constexpr size_t kMaxKeptBytes = size_t{1} << 30;

    GuardPool() = default;
    ~GuardPool();
    GuardPool(const GuardPool &) = delete;
    GuardPool &operator=(const GuardPool &) = delete;

    // A kept mapping of exactly `map_bytes` (the same layout: see GuardZones::allocate), or nullptr.
    void *take(size_t map_bytes);
    // Keep `map` for a later run, or unmap it when the pool is full.
    void give(void *map, size_t map_bytes);

private:
    std::mutex mu_;
    std::multimap<size_t, void *> free_;
    size_t kept_bytes_ = 0;
};

// What the Run does when a zone is damaged: fail with `message`, naming `t` (null at the end of
// the run) on `worker`; `exact`: `t` is the only task that can have written it.
class GuardHooks {
public:
    virtual ~GuardHooks() = default;
    // `arg`: the argument of `t` on the damaged tensor (-1: not known).
    virtual void guard_damaged(const Task *t, int32_t worker, bool exact, int32_t arg, const std::string &message) = 0;
};

class GuardZones final : public TaskObserver {
public:
    static constexpr int64_t kHeadBytes = 64;
    static constexpr int64_t kMinTailBytes = 64;

    // Intermediates' mappings come from `pool` and go back to it when the GuardZones is destroyed.
    GuardZones(int32_t workers, GuardHooks &hooks, const std::vector<std::string> &kernel_names, GuardPool &pool);
    ~GuardZones() override;
    GuardZones(const GuardZones &) = delete;
    GuardZones &operator=(const GuardZones &) = delete;

    // Zero-filled memory for an intermediate tensor `desc` (its data pointer unset) of `bytes`
    // bytes, 64-byte aligned, with zones; nullptr when out of memory.
    void *allocate(const ts_tensor &desc, size_t bytes);
    // Program argument `index` (`t`) was allocated with zones `z` by the caller; an empty string,
    // or why they cannot be used (not that argument's buffer, the zones do not hold TS_GUARD_BYTE).
    std::string adopt(int32_t index, const ts_tensor &t, const ts_guard_zone &z);
    // Name the intermediate at `data` (on the orchestration thread, before a task takes it).
    void name(const void *data, const char *label);
    // List on `t` the zones of its tensor arguments (distinct), from `arena`.
    void attach(Task &t, BlockArena<GuardZone *> &arena) const;

    void before(Task &t, int32_t worker) override;
    void after(Task &t, int32_t worker) override;
    // After every task has finished: the first damaged zone of any tensor, reported with no task.
    void check_all();

private:
    static bool scan(const GuardZone &z, GuardDamage &out);
    // `starting`: found by `t`'s check before its kernel ran (so `t` is not the writer).
    void report(const GuardZone &z, const GuardDamage &d, const Task *t, int32_t worker, bool starting);
    std::string name(const GuardZone &z) const;

    const int32_t workers_;
    GuardHooks &hooks_;
    const std::vector<std::string> &kernel_names_;
    GuardPool &pool_;
    std::unique_ptr<std::atomic<Task *>[]> running_;  // per worker: its task between before and after
    std::mutex report_mu_;  // held while the first damage is reported
    bool reported_ = false;
    BlockArena<GuardZone> zones_{16, 1024};
    std::vector<GuardZone *> all_;
    std::unordered_map<const void *, GuardZone *> by_data_;
    int64_t intermediates_ = 0;
    std::vector<void *> plain_;  // TS_RUNTIME_NO_GUARD_ZONES (benchmarks only): tensors without zones
};

}  // namespace ts::rt
