#include "region.hpp"

#include <algorithm>

#include "dtype.hpp"

namespace ts::rt {

namespace {

// Insertion sort for the few (<= kMaxLayoutDims) entries a layout has; std::sort on such tiny
// fixed arrays trips GCC 12's -Warray-bounds false positive.
template <class T, class Less>
void small_sort(T *first, int32_t n, Less less) {
    for (int32_t i = 1; i < n; ++i)
        for (int32_t j = i; j > 0 && less(first[j], first[j - 1]); --j) std::swap(first[j], first[j - 1]);
}

}  // namespace

BufferLayout layout_of(const ts_tensor &t) {
    BufferLayout layout;
    int64_t strides[kMaxLayoutDims];
    int32_t n = 0;
    for (int32_t d = 0; d < t.ndim; ++d) {
        if (t.shape[d] <= 1) continue;  // a unit dim's stride says nothing about the buffer
        if (t.strides[d] <= 0) return layout;
        strides[n++] = t.strides[d];
    }
    small_sort(strides, n, [](int64_t a, int64_t b) { return a > b; });
    if (std::adjacent_find(strides, strides + n) != strides + n) return layout;  // self-overlapping
    if (n == 0 || strides[n - 1] != 1) strides[n++] = 1;
    layout.itemsize = dtype_itemsize(t.dtype);
    layout.rank = n;
    std::copy(strides, strides + n, layout.strides);
    return layout;
}

namespace {

// Whether the non-unit dims of `t` tile a contiguous element range without gaps or repeats.
bool is_dense(const ts_tensor &t) {
    int32_t dims[TS_MAX_DIMS];
    int32_t n = 0;
    for (int32_t d = 0; d < t.ndim; ++d)
        if (t.shape[d] > 1) dims[n++] = d;
    small_sort(dims, n, [&](int32_t a, int32_t b) { return t.strides[a] < t.strides[b]; });
    int64_t expected = 1;
    for (int32_t i = 0; i < n; ++i) {
        if (t.strides[dims[i]] != expected) return false;
        expected *= t.shape[dims[i]];
    }
    return true;
}

// Fill r.start/r.stop with t's box in `layout`; false if t does not fit the layout.
bool fit_box(const ts_tensor &t, const BufferLayout &layout, Region &r) {
    if (layout.itemsize == 0 || layout.itemsize != dtype_itemsize(t.dtype) || t.offset < 0) return false;
    int64_t extent[kMaxLayoutDims];
    bool used[kMaxLayoutDims] = {};
    std::fill(extent, extent + layout.rank, int64_t{1});
    for (int32_t d = 0; d < t.ndim; ++d) {
        if (t.shape[d] <= 1) continue;
        const int64_t *match = std::find(layout.strides, layout.strides + layout.rank, t.strides[d]);
        const auto k = match - layout.strides;
        if (k == layout.rank || used[k]) return false;
        used[k] = true;
        extent[k] = t.shape[d];
    }
    int64_t rest = t.offset;
    for (int32_t k = 0; k < layout.rank; ++k) {
        r.start[k] = rest / layout.strides[k];
        rest %= layout.strides[k];
    }
    // NOTE: an address has one representation within these bounds only if, at every level, the
    // largest offset the inner dims reach stays below the next outer stride.
    int64_t inner = 0;
    for (int32_t k = layout.rank - 1; k >= 1; --k) {
        inner += (r.start[k] + extent[k] - 1) * layout.strides[k];
        if (inner >= layout.strides[k - 1]) return false;
    }
    for (int32_t k = 0; k < layout.rank; ++k) r.stop[k] = r.start[k] + extent[k];
    r.rank = layout.rank;
    return true;
}

}  // namespace

Region region_of(const ts_tensor &t, const BufferLayout &layout) {
    Region r;
    int64_t first = t.offset;
    int64_t last = t.offset;
    for (int32_t d = 0; d < t.ndim; ++d) {
        if (t.shape[d] == 0) return r;
        const int64_t reach = (t.shape[d] - 1) * t.strides[d];
        (reach < 0 ? first : last) += reach;
    }
    const int64_t itemsize = dtype_itemsize(t.dtype);
    r.lo = first * itemsize;
    r.hi = (last + 1) * itemsize;
    r.dense = is_dense(t);
    r.boxed = fit_box(t, layout, r);
    return r;
}

bool overlaps(const Region &a, const Region &b) {
    if (a.empty() || b.empty() || a.hi <= b.lo || b.hi <= a.lo) return false;
    if (a.boxed && b.boxed) {
        for (int32_t k = 0; k < a.rank; ++k)
            if (a.stop[k] <= b.start[k] || b.stop[k] <= a.start[k]) return false;
    }
    return true;
}

bool covers(const Region &outer, const Region &inner) {
    if (outer.boxed && inner.boxed) {
        for (int32_t k = 0; k < outer.rank; ++k)
            if (inner.start[k] < outer.start[k] || inner.stop[k] > outer.stop[k]) return false;
        return true;
    }
    return outer.dense && inner.lo >= outer.lo && inner.hi <= outer.hi;
}

}  // namespace ts::rt
