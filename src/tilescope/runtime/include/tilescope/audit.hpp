// The access audit: a kernel compiled with TS_AUDIT_ACCESSES (the build's own C++, hand edits
// included; `tilescope triage` makes it) reports every box its loads and stores touch, so that
// what a task actually read and wrote can be checked against the regions it declared.
//
// Invariants:
//  - Only load and store, load_valid/store_valid and load_rows (tile_core.hpp, and the checked
//    overloads of check.hpp) touch a tensor; each call hands one record to `audit::sink` before
//    touching an element (a ragged access: of its valid box only, and none when that is empty;
//    load_rows: one record, of 1 x C, per row it reads). In a
//    checked build the bounds check comes first: an access it refuses is reported by the check
//    (a kernel_error naming the op and line), not recorded.
//  - A record is one int64 row handed to the sink as probe id kAuditProbe (the core's
//    ts_probe_record keeps it with its task, like a probe): [op (kLoad, kStore), the C++ line
//    of the call, the view's data address, element bytes, ndim, rows, cols, offsets[ndim],
//    strides[ndim]] (strides in elements).
//  - The kernel library exports ts_audit_install, through which the runtime points the sink at
//    ts_probe_record for an audited run, and back at null after; with the sink null a load or a
//    store costs one well-predicted branch more.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tilescope/abi.h"

namespace ts::audit {

using Sink = void (*)(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols);

constexpr int32_t kAuditProbe = -1;
constexpr int64_t kLoad = 0;
constexpr int64_t kStore = 1;

inline Sink sink = nullptr;

/// Hands one access record to the sink (see the invariants); nothing when it is null.
inline void record(int64_t op, const void *data, std::size_t elem_bytes, const int64_t *offsets,
                   const int64_t *strides, int ndim, int rows, int cols, int line) {
    if (__builtin_expect(sink == nullptr, 1)) return;
    const int n = ndim < 0 ? 0 : (ndim > TS_MAX_DIMS ? TS_MAX_DIMS : ndim);
    int64_t row[7 + 2 * TS_MAX_DIMS] = {
        op, line, static_cast<int64_t>(reinterpret_cast<uintptr_t>(data)), static_cast<int64_t>(elem_bytes), n, rows,
        cols};
    for (int d = 0; d < n; ++d) {
        row[7 + d] = offsets[d];
        row[7 + n + d] = strides[d];
    }
    sink(kAuditProbe, row, TS_I64, 1, 7 + 2 * n);
}

}  // namespace ts::audit

// NOTE: defined (not inline) so that every kernel library exports it; one kernel file includes this.
extern "C" __attribute__((visibility("default"), used)) void ts_audit_install(ts::audit::Sink s) {
    ts::audit::sink = s;
}
