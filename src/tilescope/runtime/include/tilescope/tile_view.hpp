// tilescope tile library: tile views, a box of a tensor that the kernel only reads, read where it is.
//
//   TileView<float, 4, 4096> t = view<4, 4096>(x, {0, 0}, {extent(y)});
//   Tile<float, 4, 1> ss = row_sum(fuse(t) * t);
//   store(y, {0, 0}, fuse(t) * rsqrt(ss / 4096.0f + eps));
//
// stands where `Tile<float, 4, 4096> t = load<4, 4096>(x, {0, 0});` would: the same box, the same
// bounds check and access-audit record, but the elements stay in the tensor, so a row block is
// read from memory by the reduction and the store that use it instead of being copied to the
// stack first and read from there again. A view is read by fused expressions (fuse(view), or a
// view as an operand of one), by row_sum/row_max/row_min/row_mean, by store and by an int8
// matmul (tile_matmul_i8.hpp), which packs it from where it is; anything else takes a tile. The
// kernel generator emits a view for a load whose tile is read only there, and which no store of
// the kernel can reach (kernel_fusion.py).
//
// Invariants:
//  - A view reads exactly the values load() would have copied. The box is read in place only
//    when its columns are contiguous and its bytes cannot overlap a tensor the kernel writes
//    (`writes`: the extent() of each); otherwise view() copies it into the view's own tile, as
//    load() does, and the view reads that.
//  - A view cannot be copied (it may point into itself): it is made where it is declared
//    (C++17 guaranteed copy elision), and fused expressions hold its pointer and row stride.
#pragma once

#include <cstdint>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_lanes.hpp>

namespace ts {

/// The bytes a tensor view spans, [lo, hi) (what a view's box is compared with).
struct Extent {
    uintptr_t lo;
    uintptr_t hi;
};

/// The bytes `v` spans: from its lowest to its highest element (strides of any sign).
template <class T>
inline Extent extent(const TensorView<T> &v) {
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < v.ndim; ++d) {
        if (v.shape[d] == 0) return {0, 0};
        const int64_t span = (v.shape[d] - 1) * v.strides[d];
        (span < 0 ? lo : hi) += span;
    }
    const auto base = reinterpret_cast<uintptr_t>(v.data);
    return {base + lo * static_cast<int64_t>(sizeof(T)), base + (hi + 1) * static_cast<int64_t>(sizeof(T))};
}

/// An R x C box of a tensor, read in place (`data`, rows `stride` elements apart, columns
/// contiguous) or from `copy` (see the invariants at the top of this file).
template <class T, int R, int C>
struct TileView {
    static constexpr int rows = R;
    static constexpr int cols = C;
    using value_type = T;

    const T *data;
    int64_t stride;
    Tile<T, R, C> copy;  // the box, when it is not read in place

    TileView(const detail::Box<T> &box, bool in_place) {
        if (in_place) {
            data = box.base;
            stride = box.row_stride;
            return;
        }
        for (int r = 0; r < R; ++r) {
            for (int c = 0; c < C; ++c) copy.data[r * C + c] = box.base[r * box.row_stride + c * box.col_stride];
        }
        data = copy.data;
        stride = C;
    }
    TileView(const TileView &) = delete;
    TileView &operator=(const TileView &) = delete;
};

template <class X>
struct is_view : std::false_type {};
template <class T, int R, int C>
struct is_view<TileView<T, R, C>> : std::true_type {};
/// True when X is some TileView<T, R, C>.
template <class X>
inline constexpr bool is_view_v = is_view<std::remove_cv_t<std::remove_reference_t<X>>>::value;

namespace detail {

/// Element (r, c) of a view broadcast to a larger shape (dims of size 1 repeat), as fused
/// expressions read it.
template <class T, int R, int C>
struct ViewAt {
    const T *data;
    int64_t stride;
    T operator()(int r, int c) const { return read(data + (R == 1 ? 0 : r) * stride, C == 1 ? 0 : c); }
#if TS_FUSED_LANES
    static constexpr bool lanes_ok = std::is_same_v<T, float>, lanes_cheaper = false;
    Lanes lanes_at(int r, int c) const {
        const T *row = data + (R == 1 ? 0 : r) * stride;
        return C == 1 ? splat(row[0]) : load_lanes(row + c);
    }
#endif
};

/// Whether the box's bytes (rows x cols elements at `box`) may overlap any of `writes`.
template <class T, std::size_t W>
inline bool may_overlap(const Box<T> &box, int rows, int cols, const Extent (&writes)[W]) {
    int64_t lo = 0, hi = 0;
    (box.row_stride < 0 ? lo : hi) += (rows - 1) * box.row_stride;
    (box.col_stride < 0 ? lo : hi) += (cols - 1) * box.col_stride;
    const auto base = reinterpret_cast<uintptr_t>(box.base);
    const uintptr_t first = base + lo * static_cast<int64_t>(sizeof(T));
    const uintptr_t end = base + (hi + 1) * static_cast<int64_t>(sizeof(T));
    for (const Extent &w : writes) {
        if (w.lo < end && first < w.hi) return true;
    }
    return false;
}

}  // namespace detail

/// The R x C box of `tensor` at `offsets` (default axes), as load<R, C>(tensor, offsets) would read
/// it, read in place when its columns are contiguous and it cannot overlap `writes` (the extents
/// of the tensors the kernel writes). `line` is the caller's C++ line (the access audit's).
template <int R, int C, class T, std::size_t N, std::size_t W>
inline TileView<T, R, C> view(const TensorView<T> &tensor, const int64_t (&offsets)[N], const Extent (&writes)[W],
                              int line = __builtin_LINE()) {
    static_assert(detail::fits_axes<LastAxes, N, R, C>(), "a tile dim with no tensor dim has size 1");
    const auto box = detail::checked_box<R, C, LastAxes>(false, tensor, offsets, line);
    return TileView<T, R, C>(box, (C == 1 || box.col_stride == 1) && !detail::may_overlap(box, R, C, writes));
}

/// view() in a kernel that writes no tensor.
template <int R, int C, class T, std::size_t N>
inline TileView<T, R, C> view(const TensorView<T> &tensor, const int64_t (&offsets)[N], int line = __builtin_LINE()) {
    static_assert(detail::fits_axes<LastAxes, N, R, C>(), "a tile dim with no tensor dim has size 1");
    const auto box = detail::checked_box<R, C, LastAxes>(false, tensor, offsets, line);
    return TileView<T, R, C>(box, C == 1 || box.col_stride == 1);
}

}  // namespace ts
