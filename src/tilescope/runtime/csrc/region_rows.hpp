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

// The last dim of a Rows view: its rows run along it.
constexpr int kRowDim = TS_MAX_DIMS - 1;

// A view padded with leading unit dims to TS_MAX_DIMS; rows run along the last dim (kRowDim).
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
    for (int d = 0; d < kRowDim; ++d)
        if (r.shape[d] <= 0) return;
    int64_t at[kRowDim] = {};  // the row's index in each leading dim (an odometer, last dim fastest)
    int64_t index = 0;
    while (true) {
        int64_t offset = 0;
        for (int d = 0; d < kRowDim; ++d) offset += at[d] * r.strides[d];
        if (!row(r.base + offset * r.itemsize, index)) return;
        index += r.shape[kRowDim];
        int d = kRowDim - 1;
        while (d >= 0 && ++at[d] == r.shape[d]) at[d--] = 0;
        if (d < 0) return;
    }
}

// Bytes of the region's elements, contiguous.
inline int64_t region_bytes(const ts_tensor &t) {
    int64_t bytes = dtype_itemsize(t.dtype);
    for (int32_t d = 0; d < t.ndim; ++d) bytes *= t.shape[d];
    return bytes;
}

}  // namespace ts::rt
