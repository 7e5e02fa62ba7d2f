#include "tensor_dump.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include <sys/mman.h>

#include "dtype.hpp"
#include "region_rows.hpp"

namespace ts::rt {

int64_t copy_region(char *dst, const ts_tensor &t, int64_t itemsize, int64_t limit) {
    const Rows r = rows_of(t);
    bool dense = true;
    int64_t expected = 1, total = itemsize;
    for (int32_t d = TS_MAX_DIMS - 1; d >= 0; --d) {
        if (r.shape[d] != 1 && r.strides[d] != expected) dense = false;
        expected *= r.shape[d];
        total *= r.shape[d];
    }
    if (total <= 0 || limit <= 0) return 0;
    if (dense) {
        const int64_t n = std::min(total, limit);
        std::memcpy(dst, r.base, static_cast<size_t>(n));
        return n;
    }
    const bool rows_dense = r.strides[kRowDim] == 1 || r.shape[kRowDim] == 1;
    const int64_t row_bytes = r.shape[kRowDim] * itemsize;
    int64_t written = 0;
    for_each_row(r, [&](const char *src, int64_t) {
        const int64_t n = std::min(row_bytes, limit - written);
        if (rows_dense) {
            std::memcpy(dst + written, src, static_cast<size_t>(n));
        } else {
            for (int64_t b = 0; b < n; b += itemsize)
                std::memcpy(dst + written + b, src + (b / itemsize) * r.strides[kRowDim] * itemsize,
                            static_cast<size_t>(std::min(itemsize, n - b)));
        }
        written += n;
        return written < limit;
    });
    return written;
}

namespace {

bool selected(const Task &t, int32_t arg_index) {
    return t.dump == kDumpAll || (t.dump == kDumpSelected && t.dump_args[arg_index] != 0);
}

}  // namespace

PayloadRing::PayloadRing(size_t bytes) : bytes_(bytes) {
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    // A hint past the first 2 MiB (the first huge page is the first whole 2 MiB after that): without
    // it a large dump takes more page faults, but a small one would have a whole huge page zeroed
    // (per worker, per run) for its few records.
    constexpr size_t kSmall = size_t{2} << 20;
    if (bytes > kSmall) madvise(static_cast<char *>(p) + kSmall, bytes - kSmall, MADV_HUGEPAGE);
#endif
    data_ = static_cast<char *>(p);
}

PayloadRing::~PayloadRing() {
    if (data_ != nullptr) munmap(data_, bytes_);
}

PayloadRing &PayloadRing::operator=(PayloadRing &&o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
}

void DumpResult::copy_payload(char *out) const {
    for (size_t i = 0; i < records.size(); ++i) {
        const ts_dump_record &r = records[i];
        if (r.bin_size <= 0) continue;
        std::memcpy(out + r.bin_offset, rings[static_cast<size_t>(r.worker)].get() + ring_offsets[i],
                    static_cast<size_t>(r.bin_size));
    }
}

namespace {

// The task a worker thread runs while probes are on (set by before(), cleared by after()).
struct ProbeScope {
    TensorDump *dump = nullptr;
    const Task *task = nullptr;
    int32_t worker = -1;
    int32_t seq = 0;  // the task's probes so far
};
thread_local ProbeScope tls_probe;

}  // namespace

TensorDump::TensorDump(int32_t level, int32_t num_workers, int64_t arena_bytes, int64_t max_records, bool probes)
    : level_(level),
      probes_(probes),
      arena_bytes_(level == 1 || level == 2 || probes ? (arena_bytes > 0 ? arena_bytes : kDefaultDumpArenaBytes) : 0),
      max_records_(max_records > 0 ? max_records : kDefaultDumpMaxRecords),
      workers_(static_cast<size_t>(num_workers)) {
    for (WorkerBuffer &w : workers_)
        if (arena_bytes_ > 0) w.ring = PayloadRing(static_cast<size_t>(arena_bytes_));
}

void TensorDump::before(Task &t, int32_t worker) {
    if (probes_) tls_probe = ProbeScope{this, &t, worker, 0};
    if (t.dump == kDumpNone) return;
    WorkerBuffer &w = workers_[static_cast<size_t>(worker)];
    for (int32_t i = 0; i < t.nargs; ++i) {
        const int32_t dir = t.args[i].dir;
        if ((dir == TS_IN || dir == TS_INOUT || dir == TS_SCALAR) && selected(t, i))
            capture(w, t, i, TS_DUMP_BEFORE_DISPATCH, worker);
    }
}

void TensorDump::after(Task &t, int32_t worker) {
    if (probes_) tls_probe = ProbeScope{};
    if (t.dump == kDumpNone) return;
    WorkerBuffer &w = workers_[static_cast<size_t>(worker)];
    for (int32_t i = 0; i < t.nargs; ++i) {
        const int32_t dir = t.args[i].dir;
        if ((dir == TS_OUT || dir == TS_INOUT) && selected(t, i)) capture(w, t, i, TS_DUMP_AFTER_COMPLETION, worker);
    }
}

ts_dump_record describe_arg(const Task &t, int32_t arg_index, int32_t stage, int32_t worker) {
    const ts_arg &a = t.args[arg_index];
    ts_dump_record rec{};
    rec.task_id = t.id;
    rec.func_id = t.func_id;
    rec.arg_index = arg_index;
    rec.role = a.dir;
    rec.stage = stage;
    rec.kind = a.kind;
    rec.bin_offset = -1;
    rec.worker = worker;
    if (a.kind == TS_ARG_SCALAR) {
        rec.dtype = a.u.s.dtype;
        rec.value = a.u.s;
        return rec;
    }
    const ts_tensor &tensor = a.u.t;
    rec.dtype = tensor.dtype;
    rec.ndim = std::clamp<int32_t>(tensor.ndim, 0, TS_MAX_DIMS);
    for (int32_t d = 0; d < rec.ndim; ++d) {
        rec.shape[d] = tensor.shape[d];
        rec.strides[d] = tensor.strides[d];
    }
    rec.start_offset = tensor.offset;
    rec.buffer_id = tensor.buffer_id;
    return rec;
}

void TensorDump::capture(WorkerBuffer &w, const Task &t, int32_t arg_index, int32_t stage, int32_t worker) {
    if (static_cast<int64_t>(w.records.size()) >= max_records_) {
        ++w.dropped;
        return;
    }
    ts_dump_record rec = describe_arg(t, arg_index, stage, worker);
    if (rec.kind == TS_ARG_SCALAR) {
        w.records.push_back(rec);
        return;
    }
    const ts_tensor &tensor = t.args[arg_index].u.t;
    const bool describable = tensor.ndim >= 1 && tensor.ndim <= TS_MAX_DIMS && dtype_valid(tensor.dtype);
    // NOTE: the arena may be there for probes alone: level 3 keeps no argument payload
    if (arena_bytes_ > 0 && describable && (level_ == 1 || level_ == 2)) store_payload(w, rec, tensor);
    w.records.push_back(rec);
}

void TensorDump::store_payload(WorkerBuffer &w, ts_dump_record &rec, const ts_tensor &t) {
    const int64_t itemsize = dtype_itemsize(t.dtype);
    int64_t bytes = itemsize;
    for (int32_t d = 0; d < t.ndim; ++d) bytes *= std::max<int64_t>(t.shape[d], 0);
    if (bytes <= 0) return;
    const int64_t n = std::min(bytes, arena_bytes_);
    if (n < bytes) rec.flags |= TS_DUMP_TRUNCATED;
    make_room(w, n);
    rec.bin_size = copy_region(w.ring.get() + w.head, t, itemsize, n);
    rec.bin_offset = w.head;  // the ring offset until flush() assigns the output offset
    w.head += rec.bin_size;
}

void TensorDump::make_room(WorkerBuffer &w, int64_t n) {
    if (w.head + n > arena_bytes_) {
        // NOTE: wrapping: payloads of the previous lap past the head are given up too, so the
        // live payloads always follow record order and `oldest` is all the bookkeeping needed.
        for (; w.oldest < w.records.size(); ++w.oldest) {
            ts_dump_record &old = w.records[w.oldest];
            if (old.bin_size == 0) continue;
            if (old.bin_offset < w.head) break;
            old.flags |= TS_DUMP_OVERWRITTEN;
            old.bin_size = 0;
            old.bin_offset = -1;
        }
        w.head = 0;
    }
    for (; w.oldest < w.records.size(); ++w.oldest) {
        ts_dump_record &old = w.records[w.oldest];
        if (old.bin_size == 0) continue;
        if (old.bin_offset >= w.head + n || old.bin_offset + old.bin_size <= w.head) break;
        old.flags |= TS_DUMP_OVERWRITTEN;
        old.bin_size = 0;
        old.bin_offset = -1;
    }
}

void TensorDump::record_probe(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols) noexcept {
    ProbeScope &scope = tls_probe;
    if (scope.dump == nullptr || scope.task == nullptr || data == nullptr) return;
    TensorDump &dump = *scope.dump;
    WorkerBuffer &w = dump.workers_[static_cast<size_t>(scope.worker)];
    try {
        dump.probe(w, *scope.task, scope.worker, scope.seq++, probe_id, data, dtype, rows, cols);
    } catch (...) {  // a full memory: the probe is lost, and counted
        ++w.dropped;
    }
}

void TensorDump::probe(WorkerBuffer &w, const Task &t, int32_t worker, int32_t seq, int32_t probe_id,
                       const void *data, int32_t dtype, int64_t rows, int64_t cols) {
    if (static_cast<int64_t>(w.records.size()) >= max_records_) {
        ++w.dropped;
        return;
    }
    ts_dump_record rec{};
    rec.task_id = t.id;
    rec.func_id = t.func_id;
    rec.arg_index = seq;
    rec.role = TS_DUMP_ROLE_PROBE;
    rec.stage = TS_DUMP_PROBE;
    rec.kind = TS_ARG_TENSOR;
    rec.dtype = dtype;
    rec.ndim = 2;
    rec.shape[0] = rows;
    rec.shape[1] = cols;
    rec.strides[0] = cols;
    rec.strides[1] = 1;
    rec.bin_offset = -1;
    rec.worker = worker;
    rec.value.dtype = TS_I32;
    rec.value.v.i = probe_id;
    const int64_t bytes = dtype_valid(dtype) && rows > 0 && cols > 0 ? rows * cols * dtype_itemsize(dtype) : 0;
    if (bytes > 0 && arena_bytes_ > 0) {
        const int64_t n = std::min(bytes, arena_bytes_);
        if (n < bytes) rec.flags |= TS_DUMP_TRUNCATED;
        make_room(w, n);
        std::memcpy(w.ring.get() + w.head, data, static_cast<size_t>(n));
        rec.bin_size = n;
        rec.bin_offset = w.head;
        w.head += n;
    }
    w.records.push_back(rec);
}

void TensorDump::flush(DumpResult &out) {
    out.level = level_;
    size_t total = 0;
    for (const WorkerBuffer &w : workers_) total += w.records.size();
    // The records in (task, stage, argument) order, a task's probes in their worker's order: the
    // keys are sorted with the position in the workers' concatenation as the last key (a stable
    // order), then each record is copied once to its place (sorting the 224-byte records
    // themselves moved each of them a dozen times).
    struct Key {
        int64_t task_id;
        int32_t stage, arg_index;
        uint32_t worker, index;
    };
    std::vector<Key> keys;
    keys.reserve(total);
    for (uint32_t wi = 0; wi < workers_.size(); ++wi) {
        const std::vector<ts_dump_record> &records = workers_[wi].records;
        for (uint32_t i = 0; i < records.size(); ++i)
            keys.push_back({records[i].task_id, records[i].stage, records[i].arg_index, wi, i});
    }
    std::sort(keys.begin(), keys.end(), [](const Key &a, const Key &b) {
        if (a.task_id != b.task_id) return a.task_id < b.task_id;
        if (a.stage != b.stage) return a.stage < b.stage;
        if (a.arg_index != b.arg_index) return a.arg_index < b.arg_index;
        return a.worker != b.worker ? a.worker < b.worker : a.index < b.index;
    });
    out.records.clear();
    out.records.reserve(total);
    for (const Key &k : keys) out.records.push_back(workers_[k.worker].records[k.index]);
    for (WorkerBuffer &w : workers_) {
        out.dropped += w.dropped;
        w.records.clear();
        w.records.shrink_to_fit();
        out.rings.push_back(std::move(w.ring));
    }
    out.ring_offsets.assign(out.records.size(), -1);
    int64_t offset = 0;
    for (size_t i = 0; i < out.records.size(); ++i) {
        ts_dump_record &r = out.records[i];
        if (r.bin_size <= 0) {
            r.bin_offset = -1;
            continue;
        }
        out.ring_offsets[i] = r.bin_offset;
        r.bin_offset = offset;
        offset += r.bin_size;
    }
    out.payload_bytes = offset;
}

}  // namespace ts::rt
