// The tensor/scalar dump of one run (dump_level; read by enable_dump_tensor, and by
// print_intermediates 1 and 2 at level 2): a task observer that fills per-worker record buffers
// and payload rings, flushed into the run result after the run.
//
// Invariants:
//  - Owned by one Run and destroyed with it, so nothing a dump collects outlives its run (the
//    scheduler's workers, which outlive runs, never hold dump state between runs).
//  - Worker `w` only touches buffer `w` (cache-line aligned, no locks); flush() runs after
//    Scheduler::finish() returned, when no worker touches any buffer, and reads every worker's.
//  - Bounded: a worker keeps at most `max_records` records (later ones are counted as dropped)
//    and `arena_bytes` of payload in a ring; a payload larger than the ring is cut to it
//    (TS_DUMP_TRUNCATED), and a payload the ring reuses is marked TS_DUMP_OVERWRITTEN. Nothing
//    is lost without being counted.
//  - A record never claims more than TS_MAX_DIMS dims; an argument with a bad ndim or dtype gets
//    a record without a payload.
//  - Probes (ts_run_config::probes): between before() and after() of a task, the worker's
//    thread knows its task and buffer, so a kernel's ts.probe (ts_probe_record) lands in that
//    worker's buffer as a TS_DUMP_PROBE record, numbered in execution order within the task.
//    Outside that window (or with probes off) a probe does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "task.hpp"
#include "task_observer.hpp"
#include "tilescope/abi.h"
#include "tilescope/runtime_api.h"

namespace ts::rt {

// The record of argument `arg_index` of `t` at `stage` on `worker`, without a payload
// (bin_offset -1): a scalar's value, or a tensor's view with its ndim clamped to TS_MAX_DIMS.
ts_dump_record describe_arg(const Task &t, int32_t arg_index, int32_t stage, int32_t worker);

// Copy the first `limit` bytes of view `t`, row-major over its shape, to `dst`; returns the bytes
// copied. `t` must have 1..TS_MAX_DIMS dims and a valid dtype.
int64_t copy_region(char *dst, const ts_tensor &t, int64_t itemsize, int64_t limit);


// A worker's payload ring: anonymous memory, uninitialized (a page costs nothing until a payload
// lands on it), with transparent huge pages asked for so filling it takes few page faults.
class PayloadRing {
public:
    PayloadRing() = default;
    explicit PayloadRing(size_t bytes);
    ~PayloadRing();
    PayloadRing(PayloadRing &&o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; o.bytes_ = 0; }
    PayloadRing &operator=(PayloadRing &&o) noexcept;
    PayloadRing(const PayloadRing &) = delete;
    PayloadRing &operator=(const PayloadRing &) = delete;

    char *get() const { return data_; }

private:
    char *data_ = nullptr;
    size_t bytes_ = 0;
};

constexpr int64_t kDefaultDumpArenaBytes = int64_t{64} << 20;
constexpr int64_t kDefaultDumpMaxRecords = int64_t{1} << 20;

// What a run hands back: every worker's records, sorted, and the rings their payloads live in.
struct DumpResult {
    int32_t level = 0;
    std::vector<ts_dump_record> records;  // sorted by (task_id, stage, arg_index); bin_offset set
    std::vector<int64_t> ring_offsets;    // per record: its payload's offset in its worker's ring
    std::vector<PayloadRing> rings;       // per worker
    int64_t payload_bytes = 0;
    int64_t dropped = 0;

    // Copy every kept payload, in record order, to `out` (payload_bytes long).
    void copy_payload(char *out) const;
};

class TensorDump final : public TaskObserver {
public:
    TensorDump(int32_t level, int32_t num_workers, int64_t arena_bytes, int64_t max_records, bool probes = false);
    TensorDump(const TensorDump &) = delete;
    TensorDump &operator=(const TensorDump &) = delete;

    int32_t level() const { return level_; }

    // Just before `t`'s kernel runs: its inputs, inouts and scalars (TS_DUMP_BEFORE_DISPATCH).
    void before(Task &t, int32_t worker) override;
    // Just after `t`'s kernel returned: its outputs and inouts (TS_DUMP_AFTER_COMPLETION).
    void after(Task &t, int32_t worker) override;

    // Move every worker's records and payloads into `out` (every worker must be idle).
    void flush(DumpResult &out);

    // ts_probe_record: a probe of the task the calling worker thread runs (nothing if none).
    static void record_probe(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols) noexcept;

private:
    struct alignas(64) WorkerBuffer {
        std::vector<ts_dump_record> records;
        PayloadRing ring;
        int64_t head = 0;    // where the next payload goes
        size_t oldest = 0;   // first record whose payload may still be live
        int64_t dropped = 0;
    };

    void capture(WorkerBuffer &w, const Task &t, int32_t arg_index, int32_t stage, int32_t worker);
    void store_payload(WorkerBuffer &w, ts_dump_record &rec, const ts_tensor &t);
    // Make room for `n` payload bytes at the worker's head (giving up what the ring reuses).
    void make_room(WorkerBuffer &w, int64_t n);
    void probe(WorkerBuffer &w, const Task &t, int32_t worker, int32_t seq, int32_t probe_id, const void *data,
               int32_t dtype, int64_t rows, int64_t cols);

    const int32_t level_;
    const bool probes_;
    const int64_t arena_bytes_;
    const int64_t max_records_;
    std::vector<WorkerBuffer> workers_;
};

}  // namespace ts::rt
