// The "records" list of a tensor dump manifest (tensor_dump.json), written as JSON text straight
// from the runtime's ts_dump_record array: a run with many small records spends no per-record
// Python work writing its dump.
//
// Invariants:
//  - Every record is one JSON object, with the fields, order and values the manifest format
//    (docs/dump.md, version 1) gives: names from the caller's tables (kernels by func_id, task
//    names by task id, NUL-separated, buffers by id with their layout, probes by (func_id, probe
//    id)); what a table lacks is `kernel<func_id>`, the kernel's name, `buffer@0x<id>` or
//    `probe<id>`. A region is the box the record's view covers in its buffer's index space, found
//    as debug/deps_json.py region_box finds it (keep the two alike; test_dump checks the texts), else
//    `name(offset N, shape [..])`.
//  - Floats print with the shortest text that reads back to the same double (NaN, Infinity and
//    -Infinity as Python's json module writes them), always with a `.` or an exponent.
//  - Output goes to `fd` in large blocks; a failing write returns its errno and writes nothing more.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "dtype.hpp"
#include "tilescope/runtime_api.h"

static_assert(sizeof(ts_dump_buffer_name) == 160, "ts_dump_buffer_name layout changed: update runtime/abi.py");
static_assert(sizeof(ts_dump_probe_name) == 24, "ts_dump_probe_name layout changed: update runtime/abi.py");

namespace {

constexpr std::string_view kStages[] = {"before_dispatch", "after_completion", "probe"};
constexpr std::string_view kRoles[] = {"input", "output", "inout", "scalar", "probe"};
// A buffer small enough to stay in the caches and in malloc's heap: a 1 MiB one took fresh pages
// from the kernel (zeroed) on every call.
constexpr size_t kFlushBytes = size_t{128} << 10;

bool float_dtype(int32_t dtype) { return dtype == TS_F32 || dtype == TS_F16 || dtype == TS_BF16 || dtype == TS_F64; }

class Out {
public:
    explicit Out(int fd) : fd_(fd), buf_(new char[kFlushBytes + 4096]), size_(kFlushBytes + 4096) {}
    void put(const char *s, size_t n) {
        if (len_ + n > size_) grow(len_ + n);
        std::memcpy(buf_.get() + len_, s, n);
        len_ += n;
    }
    void put(std::string_view s) { put(s.data(), s.size()); }
    template <size_t N>
    void put(const char (&literal)[N]) {
        put(literal, N - 1);
    }
    void put(char c) { put(&c, 1); }
    void put(int64_t v) {
        char tmp[24];
        const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
        put(tmp, static_cast<size_t>(r.ptr - tmp));
    }
    void put_double(double v) {
        if (std::isnan(v)) return put("NaN");
        if (std::isinf(v)) return put(v > 0 ? std::string_view("Infinity") : std::string_view("-Infinity"));
        char tmp[40];
        const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
        put(tmp, static_cast<size_t>(r.ptr - tmp));
        if (std::find_if(tmp, r.ptr, [](char c) { return c == '.' || c == 'e'; }) == r.ptr) put(".0");
    }
    void put_list(const int64_t *v, int32_t n) {
        put('[');
        for (int32_t i = 0; i < n; ++i) {
            if (i) put(", ");
            put(v[i]);
        }
        put(']');
    }
    // `"<escaped>"`: the tables' strings come JSON-escaped, without their quotes.
    void put_str(std::string_view escaped) {
        put('"');
        put(escaped);
        put('"');
    }
    int flush_if_full() { return len_ >= kFlushBytes ? flush() : 0; }
    int flush() {
        size_t done = 0;
        while (done < len_) {
            const ssize_t n = ::write(fd_, buf_.get() + done, len_ - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                return errno;
            }
            done += static_cast<size_t>(n);
        }
        len_ = 0;
        return 0;
    }

private:
    void grow(size_t need) {  // a record longer than the slack (its names are that long): not zeroed
        const size_t size = std::max(size_ * 2, need);
        std::unique_ptr<char[]> bigger(new char[size]);
        std::memcpy(bigger.get(), buf_.get(), len_);
        buf_ = std::move(bigger);
        size_ = size;
    }

    int fd_;
    std::unique_ptr<char[]> buf_;  // NOTE: not a vector: its bytes need no zeroing
    size_t size_;
    size_t len_ = 0;
};

// debug/deps_json.py region_box: the [lo, hi) box per buffer dim that record `r` covers, or false.
bool region_box(const ts_dump_record &r, const ts_dump_buffer_name &b, int64_t lo[TS_MAX_DIMS],
                int64_t hi[TS_MAX_DIMS]) {
    if (b.ndim < 0 || b.ndim > TS_MAX_DIMS) return false;
    int64_t rest = r.start_offset - b.offset;
    if (rest < 0) return false;
    for (int32_t d = 0; d < r.ndim; ++d)
        if (r.shape[d] == 0) return false;
    int32_t order[TS_MAX_DIMS];
    for (int32_t k = 0; k < b.ndim; ++k) order[k] = k;
    std::stable_sort(order, order + b.ndim, [&](int32_t x, int32_t y) { return b.strides[x] > b.strides[y]; });
    int64_t start[TS_MAX_DIMS] = {}, extent[TS_MAX_DIMS];
    for (int32_t i = 0; i < b.ndim; ++i) {
        const int32_t k = order[i];
        if (b.strides[k] > 0) {
            start[k] = rest / b.strides[k];
            rest %= b.strides[k];
        }
    }
    if (rest != 0) return false;
    bool used[TS_MAX_DIMS] = {};
    for (int32_t k = 0; k < b.ndim; ++k) extent[k] = 1;
    for (int32_t d = 0; d < r.ndim; ++d) {
        if (r.shape[d] <= 1) continue;
        int32_t k = 0;
        while (k < b.ndim && (used[k] || b.shape[k] <= 1 || b.strides[k] != r.strides[d])) ++k;
        if (k == b.ndim) return false;
        used[k] = true;
        extent[k] = r.shape[d];
    }
    for (int32_t k = 0; k < b.ndim; ++k) {
        if (start[k] + extent[k] > b.shape[k]) return false;
        lo[k] = start[k];
        hi[k] = start[k] + extent[k];
    }
    return true;
}

void put_region(Out &o, const ts_dump_record &r, std::string_view name, const ts_dump_buffer_name *b) {
    int64_t lo[TS_MAX_DIMS], hi[TS_MAX_DIMS];
    o.put('"');
    o.put(name);
    if (b != nullptr && region_box(r, *b, lo, hi)) {
        o.put('[');
        for (int32_t k = 0; k < b->ndim; ++k) {
            if (k) o.put(", ");
            o.put(lo[k]);
            o.put(':');
            o.put(hi[k]);
        }
        o.put(']');
    } else {
        o.put("(offset ");
        o.put(r.start_offset);
        o.put(", shape ");
        o.put_list(r.shape, r.ndim);
        o.put(')');
    }
    o.put('"');
}

void put_value(Out &o, const ts_dump_record &r) {
    if (r.stage == TS_DUMP_PROBE) return o.put(r.value.v.i);
    if (r.kind != TS_ARG_SCALAR || !ts::rt::dtype_valid(r.dtype)) return o.put("null");
    if (r.dtype == TS_BOOL) return o.put(std::string_view(r.value.v.i != 0 ? "true" : "false"));
    if (float_dtype(r.dtype)) return o.put_double(r.value.v.f);
    o.put(r.value.v.i);
}

}  // namespace

extern "C" {

void ts_dump_count_records(const ts_dump_record *records, int64_t n, int64_t *counts) {
    std::fill(counts, counts + TS_DUMP_COUNTS, int64_t{0});
    for (int64_t i = 0; i < n; ++i) {
        const ts_dump_record &r = records[i];
        if (r.stage >= 0 && r.stage < 3 && r.role >= 0 && r.role < 5) ++counts[r.stage * 5 + r.role];
        if (r.flags & TS_DUMP_TRUNCATED) ++counts[15];
        if (r.flags & TS_DUMP_OVERWRITTEN) ++counts[16];
    }
}

int32_t ts_dump_write_records_json(int32_t fd, const ts_dump_record *records, int64_t n,
                                   const char *const *kernels, int32_t nkernels, const int64_t *task_ids,
                                   const char *task_names, int64_t ntasks, const ts_dump_buffer_name *buffers,
                                   int32_t nbuffers, const ts_dump_probe_name *probes, int32_t nprobes) {
    try {
        std::unordered_map<int64_t, const ts_dump_buffer_name *> by_id;
        by_id.reserve(static_cast<size_t>(nbuffers));
        for (int32_t i = 0; i < nbuffers; ++i) by_id.emplace(buffers[i].buffer_id, &buffers[i]);
        std::vector<std::string_view> kernel(static_cast<size_t>(std::max(nkernels, 0)));
        for (int32_t i = 0; i < nkernels; ++i) kernel[static_cast<size_t>(i)] = kernels[i];
        std::vector<std::string_view> task;  // by task id; empty: the kernel's name
        const char *next = task_names;
        for (int64_t i = 0; i < ntasks; ++i) {
            const std::string_view name(next);
            next += name.size() + 1;
            if (task_ids[i] < 0 || name.empty()) continue;
            if (static_cast<size_t>(task_ids[i]) >= task.size()) task.resize(static_cast<size_t>(task_ids[i]) + 1);
            task[static_cast<size_t>(task_ids[i])] = name;
        }
        Out o(fd);
        char tmp[64];
        for (int64_t i = 0; i < n; ++i) {
            const ts_dump_record &r = records[i];
            const bool known_func = r.func_id >= 0 && r.func_id < nkernels;
            const std::string_view kernel_name =
                known_func ? kernel[static_cast<size_t>(r.func_id)]
                           : std::string_view(tmp, static_cast<size_t>(std::snprintf(tmp, sizeof tmp, "kernel%" PRId32, r.func_id)));
            o.put(i ? ",\n  {\"index\": " : "\n  {\"index\": ");
            o.put(i);
            o.put(", \"task_id\": ");
            o.put(r.task_id);
            o.put(", \"kernel\": ");
            o.put_str(kernel_name);
            o.put(", \"func_id\": ");
            o.put(int64_t{r.func_id});
            o.put(", \"task_name\": ");
            const bool named = r.task_id >= 0 && static_cast<size_t>(r.task_id) < task.size() && !task[static_cast<size_t>(r.task_id)].empty();
            o.put_str(named ? task[static_cast<size_t>(r.task_id)] : kernel_name);
            o.put(", \"arg_index\": ");
            o.put(int64_t{r.arg_index});
            o.put(", \"role\": ");
            o.put_str(r.role >= 0 && r.role < 5 ? kRoles[r.role] : "invalid");
            o.put(", \"stage\": ");
            o.put_str(r.stage >= 0 && r.stage < 3 ? kStages[r.stage] : "invalid");
            o.put(r.kind == TS_ARG_SCALAR ? std::string_view(", \"kind\": \"scalar\", \"dtype\": ")
                                          : std::string_view(", \"kind\": \"tensor\", \"dtype\": "));
            if (ts::rt::dtype_valid(r.dtype)) {
                o.put_str(ts::rt::dtype_name(r.dtype));
            } else {
                o.put("\"invalid(");
                o.put(int64_t{r.dtype});
                o.put(")\"");
            }
            o.put(", \"shape\": ");
            o.put_list(r.shape, r.ndim);
            o.put(", \"strides\": ");
            o.put_list(r.strides, r.ndim);
            o.put(", \"start_offset\": ");
            o.put(r.start_offset);
            const bool probe = r.stage == TS_DUMP_PROBE;
            if (r.kind == TS_ARG_SCALAR || probe) {
                o.put(", \"tensor\": null, \"region\": null");
            } else {
                const auto it = by_id.find(r.buffer_id);
                const ts_dump_buffer_name *b = it == by_id.end() ? nullptr : it->second;
                char fallback[40];
                if (b == nullptr)
                    std::snprintf(fallback, sizeof fallback, r.buffer_id < 0 ? "buffer@-0x%" PRIx64 : "buffer@0x%" PRIx64,
                                  static_cast<uint64_t>(r.buffer_id < 0 ? -r.buffer_id : r.buffer_id));
                const char *name = b == nullptr ? fallback : b->name;
                o.put(", \"tensor\": ");
                o.put_str(name);
                o.put(", \"region\": ");
                put_region(o, r, name, b);
            }
            if (probe) {
                const ts_dump_probe_name *p = nullptr;
                for (int32_t k = 0; known_func && k < nprobes && p == nullptr; ++k)
                    if (probes[k].func_id == r.func_id && probes[k].probe_id == r.value.v.i) p = &probes[k];
                o.put(", \"probe\": ");
                if (p != nullptr) {
                    o.put_str(p->name);
                } else {
                    o.put("\"probe");
                    o.put(r.value.v.i);
                    o.put('"');
                }
                o.put(", \"probe_id\": ");
                o.put(r.value.v.i);
                o.put(", \"line\": ");
                if (p != nullptr && p->line != nullptr) o.put_str(p->line);
                else o.put("null");
            }
            o.put(", \"value\": ");
            put_value(o, r);
            o.put(", \"bin_offset\": ");
            if (r.bin_size > 0) o.put(r.bin_offset);
            else o.put("null");
            o.put(", \"bin_size\": ");
            o.put(r.bin_size > 0 ? r.bin_size : int64_t{0});
            o.put(r.flags & TS_DUMP_TRUNCATED ? std::string_view(", \"truncated\": true") : std::string_view(", \"truncated\": false"));
            o.put(r.flags & TS_DUMP_OVERWRITTEN ? std::string_view(", \"overwritten\": true}") : std::string_view(", \"overwritten\": false}"));
            if (const int err = o.flush_if_full()) return err;
        }
        return o.flush();
    } catch (...) {  // out of memory for the output block or the tables
        return ENOMEM;
    }
}

}  // extern "C"
