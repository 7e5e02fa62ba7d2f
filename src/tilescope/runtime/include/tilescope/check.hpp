// Checked builds (compile_cfg check_bounds=True, --check-bounds): bounds-checked load/store.
//
// Generated kernels include this header only when checked. A checked kernel calls the
// overloads of load / store defined here, which take one more argument: the op's CheckSite
// (kernel, op, tensor parameter, argument index, DSL file:line), from a table the kernel file
// defines. Everything else reads exactly like the unchecked kernel.
//
// Invariants:
//  - The box checked is exactly the box load/store address (tile_core.hpp): one offset per
//    tensor dim; the tile covers the last two dims (R rows, C columns; a 1-D tensor's only dim
//    gets C), every leading dim an extent of 1. It is checked against the view's run-time
//    shape, and the offset count against its ndim.
//  - The cost when nothing is wrong is two compares per dim and one well-predicted branch per
//    op; the message is built only on failure, in a cold function.
//  - A violation throws ts::BoundsError (a std::out_of_range) before any element is touched.
//    Its what() is one line:
//      kernel <k>: <op> of <t> (arg <i>) at <file>:<line>: offset [..] + tile [..] is outside
//      <t>'s shape [..] (dim <d>: <offset> + <extent> > <size>)
//    (or "(dim <d>: <offset> < 0)" for a negative offset), naming the first violating dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <tilescope/tile_core.hpp>

namespace ts {

/// A load/store of a checked build was outside its tensor.
struct BoundsError : std::out_of_range {
    using std::out_of_range::out_of_range;
};

/// Where a checked load/store is: what a BoundsError names.
struct CheckSite {
    const char *kernel;  // kernel name
    const char *op;      // "load" or "store"
    const char *tensor;  // the tensor parameter's DSL name
    int arg;             // its index in the kernel's arguments
    const char *where;   // DSL file:line
};

namespace detail {

/// Extent of the R x C box in dim d of an N-dim tensor (see load/store).
template <int R, int C, std::size_t N>
constexpr int64_t box_extent(std::size_t d) {
    if (d + 1 == N) return C;
    if (d + 2 == N) return R;
    return 1;
}

inline std::string int_list(const int64_t *v, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
        if (i) s += ", ";
        s += std::to_string(v[i]);
    }
    return s + "]";
}

/// Builds the message of a violation and throws it.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_bounds_error(const CheckSite &site, const int64_t *offsets,
                                                                       const int64_t *extents, int n,
                                                                       const int64_t *shape, int ndim) {
    const std::string t = site.tensor;
    std::string msg = std::string("kernel ") + site.kernel + ": " + site.op + " of " + t + " (arg " +
                      std::to_string(site.arg) + ") at " + site.where + ": ";
    if (n != ndim) {
        msg += std::to_string(n) + " offsets " + int_list(offsets, n) + " for " + t + "'s " + std::to_string(ndim) +
               "-D shape " + int_list(shape, ndim);
        throw BoundsError(msg);
    }
    msg += "offset " + int_list(offsets, n) + " + tile " + int_list(extents, n) + " is outside " + t + "'s shape " +
           int_list(shape, ndim);
    for (int d = 0; d < n; ++d) {
        if (offsets[d] < 0) {
            msg += " (dim " + std::to_string(d) + ": " + std::to_string(offsets[d]) + " < 0)";
            break;
        }
        if (offsets[d] > shape[d] - extents[d]) {
            msg += " (dim " + std::to_string(d) + ": " + std::to_string(offsets[d]) + " + " +
                   std::to_string(extents[d]) + " > " + std::to_string(shape[d]) + ")";
            break;
        }
    }
    throw BoundsError(msg);
}

/// Throws BoundsError unless `offsets` index a valid R x C box of `view`.
template <int R, int C, class T, std::size_t N>
inline void check_box(const TensorView<T> &view, const int64_t (&offsets)[N], const CheckSite &site) {
    static_assert(N >= 1 && N <= TS_MAX_DIMS, "load/store take one offset per tensor dim (1 to 4 dims)");
    // NOTE: `offset > size - extent`, not `offset + extent > size`: a huge scalar offset must
    // not overflow into a pass.
    bool bad = static_cast<int>(N) != view.ndim;
    for (std::size_t d = 0; d < N; ++d) {
        bad |= (offsets[d] < 0) | (offsets[d] > view.shape[d] - box_extent<R, C, N>(d));
    }
    if (__builtin_expect(bad, 0)) {
        int64_t extents[N];
        for (std::size_t d = 0; d < N; ++d) extents[d] = box_extent<R, C, N>(d);
        const int ndim = view.ndim < 0 ? 0 : (view.ndim > TS_MAX_DIMS ? TS_MAX_DIMS : view.ndim);
        throw_bounds_error(site, offsets, extents, static_cast<int>(N), view.shape, ndim);
    }
}

}  // namespace detail

/// load<R, C>(view, offsets), after checking the box against the view's shape (`line`: the caller's).
template <int R, int C, class T, std::size_t N>
inline Tile<T, R, C> load(const TensorView<T> &view, const int64_t (&offsets)[N], const CheckSite &site,
                          int line = __builtin_LINE()) {
    detail::check_box<R, C>(view, offsets, site);
    return load<R, C>(view, offsets, line);
}

/// store(view, offsets, tile), after checking the box against the view's shape (`line`: the caller's).
template <class T, std::size_t N, class U, int R, int C>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const Tile<U, R, C> &tile,
                  const CheckSite &site, int line = __builtin_LINE()) {
    detail::check_box<R, C>(view, offsets, site);
    store(view, offsets, tile, line);
}

}  // namespace ts
