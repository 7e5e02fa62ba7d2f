// Walking a tensor view's region row by row, shared by the dump's copies, the NaN/Inf scan and
// the crash report's payloads.
//
// Invariant: nothing here allocates, locks or throws, so the crash report's signal handler may
// use it.
#pragma once

#include <cstdint>

#include "dtype.hpp"
#include "tilescope/abi.h"

namespace ts::rt {

// A view padded with leading unit dims to TS_MAX_DIMS; rows run along the last dim.
struct Rows {
    int64_t shape[TS_MAX_DIMS];
    int64_t strides[TS_MAX_DIMS];  // in elements
    int64_t itemsize;
    const char *base;  // the region's first element
};

inline Rows rows_of(const ts_tensor &t) {
    Rows r{};
    r.itemsize = dtype_itemsize(t.dtype);
    const int32_t pad = TS_MAX_DIMS - t.ndim;
    for (int32_t d = 0; d < TS_MAX_DIMS; ++d) {
        r.shape[d] = d < pad ? 1 : t.shape[d - pad];
        r.strides[d] = d < pad ? 0 : t.strides[d - pad];
    }
    r.base = static_cast<const char *>(t.data) + t.offset * r.itemsize;
    return r;
}

// Call `row(const char *first, int64_t index)` for each row in row-major order (`index`: the
// row's first element, row-major within the region); stop early when it returns false.
template <class Row>
void for_each_row(const Rows &r, Row &&row) {
    int64_t index = 0;
    for (int64_t i0 = 0; i0 < r.shape[0]; ++i0)
        for (int64_t i1 = 0; i1 < r.shape[1]; ++i1)
            for (int64_t i2 = 0; i2 < r.shape[2]; ++i2) {
                const char *first = r.base + (i0 * r.strides[0] + i1 * r.strides[1] + i2 * r.strides[2]) * r.itemsize;
                if (!row(first, index)) return;
                index += r.shape[3];
            }
}

// Bytes of the region's elements, contiguous.
inline int64_t region_bytes(const ts_tensor &t) {
    int64_t bytes = dtype_itemsize(t.dtype);
    for (int32_t d = 0; d < t.ndim; ++d) bytes *= t.shape[d];
    return bytes;
}

}  // namespace ts::rt
