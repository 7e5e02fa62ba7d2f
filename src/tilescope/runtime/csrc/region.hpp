// Regions: which part of a buffer one tensor argument touches, for dependency inference.
//
// Invariants:
//  - Every non-empty region has a conservative byte range [lo, hi) relative to its buffer's base
//    pointer: every byte the view touches lies inside it.
//  - A buffer has one BufferLayout, fixed when the buffer is first seen (a program argument, an
//    intermediate tensor, or else the first view submitted). Its strides are strictly decreasing
//    and end in 1.
//  - A region is `boxed` when it is a box [start, stop) in its buffer's layout and every element
//    of the box has a unique address (the mixed-radix check in region_of). Two boxed regions of
//    one buffer therefore share an element iff their boxes intersect; any other pair is compared
//    by byte range, which can only over-approximate (never miss) an overlap.
//  - Empty regions (a zero-sized dim) touch nothing and overlap nothing.
#pragma once

#include <cstdint>

#include "tilescope/abi.h"

namespace ts::rt {

// One more than TS_MAX_DIMS: a layout may need a trailing unit stride its tensor does not have.
constexpr int kMaxLayoutDims = TS_MAX_DIMS + 1;

struct BufferLayout {
    int32_t itemsize = 0;  // 0: no usable layout; this buffer's regions are byte ranges only
    int32_t rank = 0;
    int64_t strides[kMaxLayoutDims] = {};
};

struct Region {
    int64_t lo = 0;  // bytes from the buffer base
    int64_t hi = 0;
    bool dense = false;  // the view touches every byte of [lo, hi)
    bool boxed = false;
    int32_t rank = 0;    // layout rank when boxed
    int64_t start[kMaxLayoutDims] = {};
    int64_t stop[kMaxLayoutDims] = {};

    bool empty() const { return hi <= lo; }
    int64_t span() const { return hi - lo; }
};

// The layout a full tensor defines for its buffer: its strides, largest first, plus a unit stride.
BufferLayout layout_of(const ts_tensor &t);

// The region view `t` touches, boxed in `layout` when the view fits it.
Region region_of(const ts_tensor &t, const BufferLayout &layout);

// Whether two regions of the same buffer may share an element (exact when both are boxed).
bool overlaps(const Region &a, const Region &b);

// Whether every element of `inner` is certainly an element of `outer`.
bool covers(const Region &outer, const Region &inner);

}  // namespace ts::rt
