// Checked builds (compile_cfg check_bounds=True, --check-bounds): bounds-checked load/store.
//
// Generated kernels include this header only when checked. A checked kernel calls the
// overloads of load / view / store / load_valid / store_valid / load_rows defined here, which take one
// more argument: the op's CheckSite (kernel, op, tensor parameter, argument index, DSL
// file:line), from a table the kernel file defines. Everything else reads exactly like the
// unchecked kernel.
//
// Invariants:
//  - The box checked is exactly the box load/store address (tile_core.hpp): one offset per
//    tensor dim; the tile's rows and columns run along its Axes (by default the last two dims;
//    a 1-D tensor's only dim gets C), every other dim an extent of 1; a strided dim's extent is
//    the span its elements cover ((C - 1) * step + 1). It is checked against the view's run-time
//    shape, and the offset count against its ndim.
//  - The cost when nothing is wrong is two compares per dim and one well-predicted branch per
//    op; the message is built only on failure, in a cold function.
//  - A violation throws ts::BoundsError (a std::out_of_range) before any element is touched.
//    Its what() is one line:
//      kernel <k>: <op> of <t> (arg <i>) at <file>:<line>: offset [..] + tile [..] is outside
//      <t>'s shape [..] (dim <d>: <offset> + <extent> > <size>)
//    (or "(dim <d>: <offset> < 0)" for a negative offset), naming the first violating dim.
//  - load_valid/store_valid check only the valid box (offsets + valid extents; "valid box [..]"
//    in the message instead of "tile [..]"); an empty one passes. Valid counts outside the
//    tile throw what the unchecked overload throws, after the site's "kernel <k>: <op> of <t>
//    (arg <i>) at <file>:<line>: ".
//  - load_rows checks that the view is 2-D, that [col0, col0 + C) is within its columns and
//    that every index it reads is within its rows:
//      kernel <k>: <op> of <t> (arg <i>) at <file>:<line>: index <i> of the row tile is <v>,
//      outside <t>'s <n> rows (shape [..])
//    (the ragged form checks only the first valid_rows indices).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_elementwise.hpp>
#include <tilescope/tile_fused.hpp>

namespace ts {

// ts::BoundsError, what every violation throws, and ts::CheckSite, the site it carries, are
// defined in bounds_error.hpp (unchecked ragged loads throw it too, with no site).

namespace detail {

/// Builds the message of a violation and throws it. `box` names the extents: "tile", or "valid
/// box" for a ragged access.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_bounds_error(const CheckSite &site, const int64_t *offsets,
                                                                       const int64_t *extents, int n,
                                                                       const int64_t *shape, int ndim,
                                                                       const char *box = "tile") {
    const char *t = site.tensor;
    Message m;
    site_prefix(m, site);
    if (n != ndim) {
        m << n << " offsets ";
        m.list(offsets, n) << " for " << t << "'s " << ndim << "-D shape ";
        m.list(shape, ndim);
        throw BoundsError(m.c_str(), site);
    }
    m << "offset ";
    m.list(offsets, n) << " + " << box << " ";
    m.list(extents, n) << " is outside " << t << "'s shape ";
    m.list(shape, ndim);
    for (int d = 0; d < n; ++d) {
        if (offsets[d] < 0) {
            m << " (dim " << d << ": " << offsets[d] << " < 0)";
            break;
        }
        if (offsets[d] > shape[d] - extents[d]) {
            m << " (dim " << d << ": " << offsets[d] << " + " << extents[d] << " > " << shape[d] << ")";
            break;
        }
    }
    throw BoundsError(m.c_str(), site);
}

/// Throws BoundsError unless `offsets` index a valid box of rows x cols elements along `A` (its
/// extents: the span each dim's elements cover, strides included) of `view`; an empty box
/// always passes. `box` names the extents in the message.
template <class A, class T, std::size_t N>
inline void check_box(const TensorView<T> &view, const int64_t (&offsets)[N], int64_t rows, int64_t cols,
                      const CheckSite &site, const char *box = "tile") {
    static_assert(N >= 1 && N <= TS_MAX_DIMS, "load/store take one offset per tensor dim (1 to TS_MAX_DIMS dims)");
    if (rows == 0 || cols == 0) return;
    constexpr AxesSpec ax = A::template spec<N>();
    int64_t extents[N];
    for (std::size_t d = 0; d < N; ++d) extents[d] = span_in(ax, static_cast<int>(d), rows, cols);
    // NOTE: `offset > size - extent`, not `offset + extent > size`: a huge scalar offset must
    // not overflow into a pass.
    bool bad = static_cast<int>(N) != view.ndim;
    for (std::size_t d = 0; d < N; ++d) bad |= (offsets[d] < 0) | (offsets[d] > view.shape[d] - extents[d]);
    if (__builtin_expect(bad, 0)) {
        const int ndim = view.ndim < 0 ? 0 : (view.ndim > TS_MAX_DIMS ? TS_MAX_DIMS : view.ndim);
        throw_bounds_error(site, offsets, extents, static_cast<int>(N), view.shape, ndim, box);
    }
}

/// The message of a load_rows index outside the view's rows, or of columns outside its columns.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_rows_error(const CheckSite &site, int ndim,
                                                                     const int64_t *shape, int64_t i, int64_t index,
                                                                     int64_t col0, int64_t cols) {
    const char *t = site.tensor;
    Message m;
    site_prefix(m, site);
    if (ndim != 2) {
        m << "needs a 2-D tensor; " << t << " is " << ndim << "-D (shape ";
        m.list(shape, ndim) << ")";
    } else if (i < 0) {
        m << "columns " << col0 << " + " << cols << " are outside " << t << "'s " << shape[1] << " columns (shape ";
        m.list(shape, 2) << ")";
    } else {
        m << "index " << i << " of the row tile is " << index << ", outside " << t << "'s " << shape[0]
          << " rows (shape ";
        m.list(shape, 2) << ")";
    }
    throw BoundsError(m.c_str(), site);
}

/// Throws BoundsError unless `view` is 2-D, [col0, col0 + C) lies within its columns and each of
/// the first n indices within its rows.
template <int C, class T, class I>
inline void check_rows(const TensorView<T> &view, const I *rows, int n, int64_t col0, const CheckSite &site) {
    if (n == 0) return;
    const int ndim = view.ndim < 0 ? 0 : (view.ndim > TS_MAX_DIMS ? TS_MAX_DIMS : view.ndim);
    if (__builtin_expect(view.ndim != 2, 0)) throw_rows_error(site, ndim, view.shape, -1, 0, col0, C);
    if (__builtin_expect((col0 < 0) | (col0 > view.shape[1] - C), 0)) {
        throw_rows_error(site, 2, view.shape, -1, 0, col0, C);
    }
    bool bad = false;
    for (int i = 0; i < n; ++i) {
        const int64_t r = static_cast<int64_t>(rows[i]);
        bad |= (r < 0) | (r >= view.shape[0]);
    }
    if (__builtin_expect(bad, 0)) {
        for (int i = 0; i < n; ++i) {
            const int64_t r = static_cast<int64_t>(rows[i]);
            if (r < 0 || r >= view.shape[0]) throw_rows_error(site, 2, view.shape, i, r, col0, C);
        }
    }
}

}  // namespace detail

/// load<R, C>(view, offsets), after checking the box against the view's shape (`line`: the caller's).
template <int R, int C, class A = LastAxes, class T, std::size_t N>
inline Tile<T, R, C> load(const TensorView<T> &view, const int64_t (&offsets)[N], const CheckSite &site,
                          int line = __builtin_LINE()) {
    detail::check_box<A>(view, offsets, R, C, site);
    return load<R, C, A>(view, offsets, line);
}

/// view<R, C>(tensor, offsets, writes) (tile_view.hpp), after checking the box as load's is.
template <int R, int C, class T, std::size_t N, std::size_t W>
inline TileView<T, R, C> view(const TensorView<T> &tensor, const int64_t (&offsets)[N], const Extent (&writes)[W],
                              const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_box<LastAxes>(tensor, offsets, R, C, site);
    return view<R, C>(tensor, offsets, writes, line);
}

/// view<R, C>(tensor, offsets) in a kernel that writes no tensor, checked as load's box is.
template <int R, int C, class T, std::size_t N>
inline TileView<T, R, C> view(const TensorView<T> &tensor, const int64_t (&offsets)[N], const CheckSite &site,
                              int line = __builtin_LINE()) {
    detail::check_box<LastAxes>(tensor, offsets, R, C, site);
    return view<R, C>(tensor, offsets, line);
}

/// store(view, offsets, tile), after checking the box against the view's shape (`line`: the caller's).
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const Tile<U, R, C> &tile,
                  const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_box<A>(view, offsets, R, C, site);
    store<A>(view, offsets, tile, line);
}

/// store(view, offsets, fused expression), checked as store of a tile is.
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C, class F>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const detail::Fused<U, R, C, F> &e,
                  const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_box<A>(view, offsets, R, C, site);
    store<A>(view, offsets, e, line);
}

/// store(view, offsets, tile view), checked as store of a tile is.
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const TileView<U, R, C> &v,
                  const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_box<A>(view, offsets, R, C, site);
    store<A>(view, offsets, v, line);
}

/// load_valid<R, C>(view, offsets, valid, fill): valid counts outside the tile throw with the
/// site's prefix, then only the valid box is checked against the view's shape (a ragged tail
/// whose whole tile would pass the tensor's end is fine).
template <int R, int C, class A = LastAxes, class T, std::size_t N, class V,
          class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, R, C> load_valid(const TensorView<T> &view, const int64_t (&offsets)[N], const int64_t (&valid)[2],
                                V fill, const CheckSite &site, int line = __builtin_LINE()) {
    if (__builtin_expect(!detail::valid_in_tile<R, C>(valid), 0)) {
        detail::throw_valid_error(&site, "load", R, C, valid[0], valid[1], false);
    }
    detail::check_box<A>(view, offsets, valid[0], valid[1], site, "valid box");
    return load_valid<R, C, A>(view, offsets, valid, fill, line);
}

/// load_pad<R, C, A>(view, offsets, pad): never out of bounds; only the offset count is checked
/// against the view's dims.
template <int R, int C, class A = LastAxes, class T, std::size_t N, class V, class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, R, C> load_pad(const TensorView<T> &view, const int64_t (&offsets)[N], V pad, const CheckSite &site,
                              int line = __builtin_LINE()) {
    if (__builtin_expect(static_cast<int>(N) != view.ndim, 0)) {
        int64_t extents[N] = {};
        const int ndim = view.ndim < 0 ? 0 : (view.ndim > TS_MAX_DIMS ? TS_MAX_DIMS : view.ndim);
        detail::throw_bounds_error(site, offsets, extents, static_cast<int>(N), view.shape, ndim);
    }
    return load_pad<R, C, A>(view, offsets, pad, line);
}

/// store_valid(view, offsets, tile, valid), checked as load_valid is.
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store_valid(const TensorView<T> &view, const int64_t (&offsets)[N], const Tile<U, R, C> &tile,
                        const int64_t (&valid)[2], const CheckSite &site, int line = __builtin_LINE()) {
    if (__builtin_expect(!detail::valid_in_tile<R, C>(valid), 0)) {
        detail::throw_valid_error(&site, "store", R, C, valid[0], valid[1], false);
    }
    detail::check_box<A>(view, offsets, valid[0], valid[1], site, "valid box");
    store_valid<A>(view, offsets, tile, valid, line);
}

/// load_rows<C>(view, rows, col0), after checking every index against the view's rows and
/// [col0, col0 + C) against its columns.
template <int C, class T, class I, int RI, int CI>
inline Tile<T, RI * CI, C> load_rows(const TensorView<T> &view, const Tile<I, RI, CI> &rows, int64_t col0,
                                     const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_row_indices<I, RI, CI>();
    detail::check_rows<C>(view, rows.data, RI * CI, col0, site);
    return load_rows<C>(view, rows, col0, line);
}

/// load_rows<C>(view, rows, col0, valid_rows, fill), checking the first valid_rows indices only.
template <int C, class T, class I, int RI, int CI, class V, class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, RI * CI, C> load_rows(const TensorView<T> &view, const Tile<I, RI, CI> &rows, int64_t col0,
                                     int64_t valid_rows, V fill, const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_row_indices<I, RI, CI>();
    if (__builtin_expect(valid_rows < 0 || valid_rows > RI * CI, 0)) {
        detail::throw_valid_error(&site, "load_rows", RI * CI, C, valid_rows, C, true);
    }
    detail::check_rows<C>(view, rows.data, static_cast<int>(valid_rows), col0, site);
    return load_rows<C>(view, rows, col0, valid_rows, fill, line);
}

}  // namespace ts
