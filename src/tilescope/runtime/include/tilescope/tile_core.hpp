// tilescope tile library: tiles, tensor views, kernel arguments, load/store (also ragged and
// gathered), iota, slice (transpose: tile_transpose.hpp).
//
// Invariants:
//  - A Tile<T, R, C> is R*C elements stored row-major in a 64-byte aligned array; it owns
//    its data and copies like a struct. Tiles are at most 2-D; a 1-D tile is Tile<T, 1, N>.
//  - A TensorView<T> is a non-owning view of one kernel tensor argument: `data` already
//    points at the view's first element (the ABI's offset applied); strides are in elements.
//  - load/store take one offset per tensor dim. By default (LastAxes) the tile covers the LAST
//    TWO dims (for a 1-D tensor: its only dim, and the tile has one row); other dims contribute
//    only their offset. Axes<RowDim, ColDim, RowStep, ColStep> puts the rows and columns along
//    any two dims, every RowStep-th / ColStep-th element (strided loads and stores). With TS_CHECK_BOUNDS defined, every load/store checks the offset count and the
//    box against the tensor's shape and calls ts::bounds_violation() when they are wrong.
//    With TS_AUDIT_ACCESSES defined, every load/store reports its box and its caller's C++ line
//    (the defaulted `line` argument) to the access audit before touching an element (audit.hpp).
//  - load_valid/store_valid are load/store of a ragged tile: only the valid box, the first
//    valid[0] rows and valid[1] columns, touches the tensor (read exactly as load reads it);
//    the rest of a loaded tile is `fill`. Bounds checks and the audit see only the valid box,
//    and an empty one (0 rows or 0 columns) touches nothing. Valid counts outside [0, R] x
//    [0, C] are a bug in every build: they throw ts::BoundsError (caught by the runtime and
//    reported with the task) before anything is touched.
//  - load_rows gathers whole rows of a 2-D view: row i of the tile is view[rows[i], col0 :
//    col0 + C]. Its ragged form reads only the first valid_rows indices (the others are not
//    even looked at); valid_rows outside [0, N] throws ts::BoundsError. The audit gets one
//    record per row read.
//  - load_pad reads only the elements whose index lies inside the view in every dim; the others
//    are `pad` and touch no memory, so it is never out of bounds.
//  - A TensorView with `stream` set is stored into past the caches: store() writes each
//    contiguous row's aligned middle with non-temporal stores (the same values, in the same
//    places) and fences before it returns, so whoever runs after the task sees them. The kernel
//    generator sets it for an output nothing reads again that is too large to stay in cache
//    (docs/build.md); a store never reads the memory it writes, so the line is not fetched first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <tilescope/abi.h>
#include <tilescope/bounds_error.hpp>
#include <tilescope/tile_stream.hpp>
#include <tilescope/tile_types.hpp>

#ifdef TS_AUDIT_ACCESSES
#include <tilescope/audit.hpp>
#endif

namespace ts {

/// A fixed-size R x C tile of T, row-major, 64-byte aligned.
template <class T, int R, int C>
struct alignas(64) Tile {
    static_assert(is_element_v<T>, "unsupported tile element type");
    static_assert(R >= 1 && C >= 1, "tile dimensions must be positive");

    static constexpr int rows = R;
    static constexpr int cols = C;
    static constexpr int size = R * C;
    using value_type = T;

    T data[R * C];

    T &operator()(int r, int c) { return data[r * C + c]; }
    const T &operator()(int r, int c) const { return data[r * C + c]; }
};

template <class X>
struct is_tile : std::false_type {};
template <class T, int R, int C>
struct is_tile<Tile<T, R, C>> : std::true_type {};
/// True when X is some Tile<T, R, C>.
template <class X>
inline constexpr bool is_tile_v = is_tile<std::remove_cv_t<std::remove_reference_t<X>>>::value;

namespace detail {

/// Reads element i of a T array. bool arrays are read as bytes (`!= 0`): g++ 12 does not
/// vectorize loops that load `bool`, but does for uint8_t (a char type, so this is legal).
template <class T>
inline T read(const T *p, int i) {
    if constexpr (std::is_same_v<T, bool>) {
        return reinterpret_cast<const uint8_t *>(p)[i] != 0;
    } else {
        return p[i];
    }
}

}  // namespace detail

/// A tile with every element equal to `value` (converted to T).
template <class T, int R, int C, class V>
inline Tile<T, R, C> full(V value) {
    Tile<T, R, C> t;
    const T v = convert<T>(value);
    for (int i = 0; i < R * C; ++i) t.data[i] = v;
    return t;
}

/// A tile of zeros.
template <class T, int R, int C>
inline Tile<T, R, C> zeros() {
    return full<T, R, C>(0);
}

/// The tile whose element (r, c) is r (Dim == 0) or c (Dim == 1), converted to T.
template <class T, int R, int C, int Dim>
inline Tile<T, R, C> iota() {
    static_assert(Dim == 0 || Dim == 1, "iota: Dim must be 0 (row index) or 1 (column index)");
    Tile<T, R, C> t;
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) t.data[r * C + c] = convert<T>(Dim == 0 ? r : c);
    }
    return t;
}

/// t[R0 : R0 + R, C0 : C0 + C] as an R x C tile.
template <int R0, int C0, int R, int C, class T, int RT, int CT>
inline Tile<T, R, C> slice(const Tile<T, RT, CT> &t) {
    static_assert(R0 >= 0 && C0 >= 0, "slice: the box starts at a negative row or column");
    static_assert(R0 + R <= RT, "slice: the box's rows run past the tile's");
    static_assert(C0 + C <= CT, "slice: the box's columns run past the tile's");
    Tile<T, R, C> out;
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out.data[r * C + c] = t.data[(R0 + r) * CT + C0 + c];
    }
    return out;
}

/// The ts_dtype code of an element type.
template <class T>
constexpr int32_t dtype_of() {
    if constexpr (std::is_same_v<T, float>) return TS_F32;
    else if constexpr (std::is_same_v<T, f16>) return TS_F16;
    else if constexpr (std::is_same_v<T, bf16>) return TS_BF16;
    else if constexpr (std::is_same_v<T, int32_t>) return TS_I32;
    else if constexpr (std::is_same_v<T, int8_t>) return TS_I8;
    else if constexpr (std::is_same_v<T, uint8_t>) return TS_U8;
    else if constexpr (std::is_same_v<T, bool>) return TS_BOOL;
    else if constexpr (std::is_same_v<T, double>) return TS_F64;
    else return TS_I64;
}

/// A kernel's view of one tensor argument.
template <class T>
struct TensorView {
    static_assert(is_element_v<T>, "unsupported tensor element type");

    T *data;  // the view's element (0, ..., 0)
    int ndim;
    int64_t shape[TS_MAX_DIMS];
    int64_t strides[TS_MAX_DIMS];  // in elements
    bool stream = false;  // stores bypass the caches (see the invariants)

    explicit TensorView(const ts_tensor &t) : data(static_cast<T *>(t.data) + t.offset), ndim(t.ndim) {
        for (int d = 0; d < TS_MAX_DIMS; ++d) {
            shape[d] = d < t.ndim ? t.shape[d] : 1;
            strides[d] = d < t.ndim ? t.strides[d] : 0;
        }
#ifdef TS_CHECK_BOUNDS
        if (t.dtype != dtype_of<T>() || t.ndim < 1 || t.ndim > TS_MAX_DIMS) {
            std::fprintf(stderr, "tilescope: tensor argument has dtype %d, ndim %d; the kernel expects dtype %d\n",
                         static_cast<int>(t.dtype), static_cast<int>(t.ndim), static_cast<int>(dtype_of<T>()));
            std::abort();
        }
#endif
    }
    explicit TensorView(const ts_arg &arg) : TensorView(arg.u.t) {}
};

/// Reads a scalar kernel argument as T (from the ABI's double or int64 slot, whichever the
/// argument's dtype uses), converting with ts::convert.
template <class T>
inline T scalar_arg(const ts_arg &arg) {
    const ts_scalar &s = arg.u.s;
    const bool is_float = s.dtype == TS_F32 || s.dtype == TS_F64 || s.dtype == TS_F16 || s.dtype == TS_BF16;
    return is_float ? convert<T>(s.v.f) : convert<T>(s.v.i);
}

/// Reports an out-of-bounds (or wrongly indexed) load/store and aborts: prints the op, the
/// offsets, the tile shape and the tensor shape to stderr.
[[noreturn]] inline void bounds_violation(const char *op, const int64_t *offsets, int noffsets, int rows, int cols,
                                          const int64_t *shape, int ndim) {
    std::fprintf(stderr, "tilescope: %s out of bounds: offsets [", op);
    for (int i = 0; i < noffsets; ++i) std::fprintf(stderr, "%s%lld", i ? ", " : "", static_cast<long long>(offsets[i]));
    std::fprintf(stderr, "], tile [%d, %d], tensor shape [", rows, cols);
    for (int i = 0; i < ndim; ++i) std::fprintf(stderr, "%s%lld", i ? ", " : "", static_cast<long long>(shape[i]));
    std::fprintf(stderr, "]\n");
    std::fflush(stderr);
    std::abort();
}

namespace detail {

/// Throws the BoundsError of valid counts outside an R x C tile: `<prefix><op> of a [R, C] tile
/// with valid [rows, cols]: valid rows must be within [0, R]` (or columns, [0, C]). With
/// rows_only (load_rows, whose columns are all valid) the counts read `valid rows <rows>`.
/// `site`: the checked op's (check.hpp), whose "kernel <k>: <op> of <t> (arg <i>) at <where>: "
/// is the prefix; nullptr: none, and no prefix.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_valid_error(const CheckSite *site, const char *op, int R,
                                                                      int C, int64_t rows, int64_t cols,
                                                                      bool rows_only = false) {
    Message m;
    if (site != nullptr) site_prefix(m, *site);
    m << op << " of a [" << R << ", " << C << "] tile with valid ";
    if (rows_only)
        m << "rows " << rows;
    else
        m << "[" << rows << ", " << cols << "]";
    if (rows < 0 || rows > R)
        m << ": valid rows must be within [0, " << R << "]";
    else
        m << ": valid columns must be within [0, " << C << "]";
    throw BoundsError(m.c_str(), site != nullptr ? *site : CheckSite{});
}

/// True when 0 <= valid[0] <= R and 0 <= valid[1] <= C.
template <int R, int C>
inline bool valid_in_tile(const int64_t (&valid)[2]) {
    return (valid[0] >= 0) & (valid[0] <= R) & (valid[1] >= 0) & (valid[1] <= C);
}

}  // namespace detail

/// Which tensor dims a tile's rows and columns run along, and the step between consecutive rows
/// and columns in elements of that dim (ts.load / ts.store's `dims=` and `strides=`): element
/// (r, c) of the tile is the tensor's element at offsets[RowDim] + r * RowStep, offsets[ColDim]
/// + c * ColStep, every other dim at its offset. RowDim -1: a one-row tile with no row dim (a
/// 1-D tensor's row); ColDim -1: a one-column tile with no column dim (a 1-D tensor read as a
/// column, `dims=[0, None]`).
struct AxesSpec {
    int row_dim;
    int col_dim;
    int64_t row_step;
    int64_t col_step;
};

template <int RowDim, int ColDim, int RowStep = 1, int ColStep = 1>
struct Axes {
    template <std::size_t N>
    static constexpr AxesSpec spec() {
        static_assert(RowDim >= -1 && ColDim >= -1 && RowDim < static_cast<int>(N) && ColDim < static_cast<int>(N),
                      "Axes: the row and column dims must be within the tensor's dims (-1: none)");
        static_assert(RowDim < 0 || ColDim < 0 || RowDim < ColDim, "Axes: the row dim must come before the column dim");
        static_assert(RowDim >= 0 || ColDim >= 0, "Axes: a tile runs along at least one tensor dim");
        static_assert(RowStep >= 1 && ColStep >= 1, "Axes: steps are at least 1");
        return {RowDim, ColDim, RowStep, ColStep};
    }
};

/// The default: the last two dims (a 1-D tensor's one dim), step 1.
struct LastAxes {
    template <std::size_t N>
    static constexpr AxesSpec spec() {
        return {N >= 2 ? static_cast<int>(N) - 2 : -1, static_cast<int>(N) - 1, 1, 1};
    }
};

namespace detail {

/// Whether an R x C tile fits axes `A` of an N-dim tensor: a tile dim with no tensor dim has size 1.
template <class A, std::size_t N, int R, int C>
constexpr bool fits_axes() {
    constexpr AxesSpec ax = A::template spec<N>();
    return (ax.row_dim >= 0 || R == 1) && (ax.col_dim >= 0 || C == 1);
}

/// The extent an access of `rows` x `cols` elements spans in dim d (strides included).
constexpr int64_t span_in(const AxesSpec &ax, int d, int64_t rows, int64_t cols) {
    if (d == ax.col_dim) return cols == 0 ? 0 : (cols - 1) * ax.col_step + 1;
    if (d == ax.row_dim) return rows == 0 ? 0 : (rows - 1) * ax.row_step + 1;
    return 1;
}

/// Whether `offsets` index a box of rows x cols elements (along `A`) inside the view; an empty box
/// always is.
template <class A, class T, std::size_t N>
inline bool box_inside(const TensorView<T> &view, const int64_t (&offsets)[N], int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return true;
    constexpr AxesSpec ax = A::template spec<N>();
    bool ok = static_cast<int>(N) == view.ndim;
    for (int d = 0; ok && d < static_cast<int>(N); ++d) {
        ok = offsets[d] >= 0 && offsets[d] <= view.shape[d] - span_in(ax, d, rows, cols);
    }
    return ok;
}

/// Checks that `offsets` index a valid box of rows x cols elements (along `ax`) of the view (used
/// under TS_CHECK_BOUNDS); an empty box is never out of bounds.
template <class A, class T, std::size_t N>
inline void check_box_extents(const char *op, const TensorView<T> &view, const int64_t (&offsets)[N], int rows,
                              int cols) {
    if (!box_inside<A>(view, offsets, rows, cols))
        bounds_violation(op, offsets, static_cast<int>(N), rows, cols, view.shape, view.ndim);
}

/// Pointer to the tile's first element and the row / column strides of the tile's box.
template <class T>
struct Box {
    T *base;
    int64_t row_stride;
    int64_t col_stride;
};

template <class A, class T, std::size_t N>
inline Box<T> locate(const TensorView<T> &view, const int64_t (&offsets)[N]) {
    static_assert(N >= 1 && N <= TS_MAX_DIMS, "load/store take one offset per tensor dim (1 to TS_MAX_DIMS dims)");
    constexpr AxesSpec ax = A::template spec<N>();
    T *base = view.data;
    for (std::size_t d = 0; d < N; ++d) base += offsets[d] * view.strides[d];
    const int64_t row_stride = ax.row_dim < 0 ? 0 : view.strides[ax.row_dim] * ax.row_step;
    const int64_t col_stride = ax.col_dim < 0 ? 0 : view.strides[ax.col_dim] * ax.col_step;
    return {base, row_stride, col_stride};
}

/// The access audit's record of a box of rows x cols elements at `box` (audit.hpp): the view's own
/// offsets and strides when the box is the default axes' at `offsets`, else a 3-dim description
/// whose lead dim (offset 1, stride the first element's distance from the view's start) places it.
template <class A, class T, std::size_t N>
inline void audit_box(bool store, const TensorView<T> &view, const int64_t (&offsets)[N], const Box<T> &box, int rows,
                      int cols, int line, bool at_offsets = true) {
#ifdef TS_AUDIT_ACCESSES
    const int64_t op = store ? audit::kStore : audit::kLoad;
    if (std::is_same_v<A, LastAxes> && at_offsets) {
        audit::record(op, view.data, sizeof(T), offsets, view.strides, static_cast<int>(N), rows, cols, line);
        return;
    }
    const int64_t at[3] = {1, 0, 0};
    const int64_t steps[3] = {static_cast<int64_t>(box.base - view.data), box.row_stride, box.col_stride};
    audit::record(op, view.data, sizeof(T), at, steps, 3, rows, cols, line);
#else
    (void)store, (void)view, (void)offsets, (void)box, (void)rows, (void)cols, (void)line, (void)at_offsets;
#endif
}

/// What a load (`store` false) or a store of an R x C box does before touching memory: the bounds
/// check (TS_CHECK_BOUNDS) and the access audit's record (TS_AUDIT_ACCESSES).
template <int R, int C, class A, class T, std::size_t N>
inline Box<T> checked_box(bool store, const TensorView<T> &view, const int64_t (&offsets)[N], int line) {
#ifdef TS_CHECK_BOUNDS
    check_box_extents<A>(store ? "store" : "load", view, offsets, R, C);
#endif
    const auto box = locate<A>(view, offsets);
    audit_box<A>(store, view, offsets, box, R, C, line);
    return box;
}

/// The indices i in [0, count) whose o + i * step lies in [0, size): [first, last).
inline void inside_span(int64_t o, int64_t step, int64_t count, int64_t size, int64_t &first, int64_t &last) {
    first = o >= 0 ? 0 : (-o + step - 1) / step;
    last = o >= size ? 0 : (size - o + step - 1) / step;
    if (first > count) first = count;
    if (last > count) last = count;
    if (last < first) last = first;
}

}  // namespace detail

/// Loads the R x C box of `view` starting at `offsets` (one offset per tensor dim), along `A`'s
/// dims and steps. `line` is the caller's C++ line (what the access audit records, audit.hpp).
template <int R, int C, class A = LastAxes, class T, std::size_t N>
inline Tile<T, R, C> load(const TensorView<T> &view, const int64_t (&offsets)[N], int line = __builtin_LINE()) {
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    const auto box = detail::checked_box<R, C, A>(false, view, offsets, line);
    Tile<T, R, C> t;
    for (int r = 0; r < R; ++r) {
        const T *src = box.base + r * box.row_stride;
        T *dst = t.data + r * C;
        if (box.col_stride == 1) {
            for (int c = 0; c < C; ++c) dst[c] = src[c];
        } else {
            for (int c = 0; c < C; ++c) dst[c] = src[c * box.col_stride];
        }
    }
    return t;
}

/// Stores `tile` into the box of `view` starting at `offsets` (one offset per tensor dim), along
/// `A`'s dims and steps. `line` is the caller's C++ line (what the access audit records, audit.hpp).
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const Tile<U, R, C> &tile,
                  int line = __builtin_LINE()) {
    static_assert(std::is_same_v<T, U>, "store: the tile's element type must match the tensor's; cast<>() it first");
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    const auto box = detail::checked_box<R, C, A>(true, view, offsets, line);
    const bool stream = view.stream && box.col_stride == 1;
    for (int r = 0; r < R; ++r) {
        const T *src = tile.data + r * C;
        T *dst = box.base + r * box.row_stride;
        if (stream) {
            detail::stream_row(dst, C, [src](int c) { return src[c]; });
        } else if (box.col_stride == 1) {
            for (int c = 0; c < C; ++c) dst[c] = src[c];
        } else {
            for (int c = 0; c < C; ++c) dst[c * box.col_stride] = src[c];
        }
    }
    if (stream) detail::stream_fence();
}

/// Numbers usable as a ragged load's fill value.
template <class V>
inline constexpr bool is_fill_v = std::is_arithmetic_v<V> || is_half_v<V>;

/// load<R, C, A>(view, offsets) of a ragged tile: elements (r, c) with r < valid[0] and c <
/// valid[1] are read as load reads them, the others are `fill` (converted to T) and touch no
/// memory. Throws BoundsError unless 0 <= valid[0] <= R and 0 <= valid[1] <= C. (A 1-D tensor's
/// tile has one row: valid = {1, n}.)
template <int R, int C, class A = LastAxes, class T, std::size_t N, class V, class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, R, C> load_valid(const TensorView<T> &view, const int64_t (&offsets)[N], const int64_t (&valid)[2],
                                V fill, int line = __builtin_LINE()) {
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    if (__builtin_expect(!detail::valid_in_tile<R, C>(valid), 0)) {
        detail::throw_valid_error(nullptr, "load", R, C, valid[0], valid[1]);
    }
    const int vr = static_cast<int>(valid[0]), vc = static_cast<int>(valid[1]);
    const T f = convert<T>(fill);
    Tile<T, R, C> t;
    if (vr == 0 || vc == 0) {
        (void)line;
        for (int i = 0; i < R * C; ++i) t.data[i] = f;
        return t;
    }
#ifdef TS_CHECK_BOUNDS
    detail::check_box_extents<A>("load", view, offsets, vr, vc);
#endif
    const auto box = detail::locate<A>(view, offsets);
    detail::audit_box<A>(false, view, offsets, box, vr, vc, line);
    for (int r = 0; r < R; ++r) {
        T *dst = t.data + r * C;
        int c = 0;
        if (r < vr) {
            const T *src = box.base + r * box.row_stride;
            if (box.col_stride == 1) {
                for (; c < vc; ++c) dst[c] = src[c];
            } else {
                for (; c < vc; ++c) dst[c] = src[c * box.col_stride];
            }
        }
        for (; c < C; ++c) dst[c] = f;
    }
    return t;
}

/// store<A>(view, offsets, tile) of a ragged tile: writes only elements (r, c) with r < valid[0]
/// and c < valid[1]. Throws BoundsError unless 0 <= valid[0] <= R and 0 <= valid[1] <= C.
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store_valid(const TensorView<T> &view, const int64_t (&offsets)[N], const Tile<U, R, C> &tile,
                        const int64_t (&valid)[2], int line = __builtin_LINE()) {
    static_assert(std::is_same_v<T, U>, "store: the tile's element type must match the tensor's; cast<>() it first");
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    if (__builtin_expect(!detail::valid_in_tile<R, C>(valid), 0)) {
        detail::throw_valid_error(nullptr, "store", R, C, valid[0], valid[1]);
    }
    const int vr = static_cast<int>(valid[0]), vc = static_cast<int>(valid[1]);
    (void)line;
    if (vr == 0 || vc == 0) return;
#ifdef TS_CHECK_BOUNDS
    detail::check_box_extents<A>("store", view, offsets, vr, vc);
#endif
    const auto box = detail::locate<A>(view, offsets);
    detail::audit_box<A>(true, view, offsets, box, vr, vc, line);
    for (int r = 0; r < vr; ++r) {
        const T *src = tile.data + r * C;
        T *dst = box.base + r * box.row_stride;
        if (box.col_stride == 1) {
            for (int c = 0; c < vc; ++c) dst[c] = src[c];
        } else {
            for (int c = 0; c < vc; ++c) dst[c * box.col_stride] = src[c];
        }
    }
}

/// load<R, C, A>(view, offsets) of a padded tile: element (r, c) whose tensor index lies outside
/// the view in any dim (a negative offset, or past the end) is `pad` (converted to T) and touches
/// no memory; the others are read as load reads them. Never out of bounds; the audit sees the
/// box read, none when it is empty.
template <int R, int C, class A = LastAxes, class T, std::size_t N, class V, class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, R, C> load_pad(const TensorView<T> &view, const int64_t (&offsets)[N], V pad,
                              int line = __builtin_LINE()) {
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    constexpr AxesSpec ax = A::template spec<N>();
    const T f = convert<T>(pad);
    bool inside = true;
    for (int d = 0; d < static_cast<int>(N); ++d) {
        if (d != ax.row_dim && d != ax.col_dim) inside &= (offsets[d] >= 0) & (offsets[d] < view.shape[d]);
    }
    int64_t r0 = 0, r1 = R, c0 = 0, c1 = C;
    if (ax.row_dim >= 0) detail::inside_span(offsets[ax.row_dim], ax.row_step, R, view.shape[ax.row_dim], r0, r1);
    if (ax.col_dim >= 0) detail::inside_span(offsets[ax.col_dim], ax.col_step, C, view.shape[ax.col_dim], c0, c1);
    Tile<T, R, C> t;
    for (int i = 0; i < R * C; ++i) t.data[i] = f;
    if (!inside || r0 == r1 || c0 == c1) {
        (void)line;
        return t;
    }
    auto box = detail::locate<A>(view, offsets);
    box.base += r0 * box.row_stride + c0 * box.col_stride;
    detail::audit_box<A>(false, view, offsets, box, static_cast<int>(r1 - r0), static_cast<int>(c1 - c0), line,
                         r0 == 0 && c0 == 0);
    for (int64_t r = r0; r < r1; ++r) {
        const T *src = box.base + (r - r0) * box.row_stride;
        T *dst = t.data + r * C;
        for (int64_t c = c0; c < c1; ++c) dst[c] = src[(c - c0) * box.col_stride];
    }
    return t;
}

namespace detail {

template <class I, int RI, int CI>
inline constexpr void check_row_indices() {
    static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>, "load_rows: the row indices must be an integer tile");
    static_assert(RI == 1 || CI == 1, "load_rows: the row indices must be a column (N x 1) or a row (1 x N) tile");
}

/// Rows [0, n) of the gather: row i of t is view[rows[i], col0 : col0 + C]; rows [n, N) are fill.
template <int C, class T, class I, int N>
inline void gather_rows(Tile<T, N, C> &t, const TensorView<T> &view, const I *rows, int64_t col0, int n, T fill,
                        int line) {
    (void)line;
    for (int i = 0; i < n; ++i) {
        const int64_t row = static_cast<int64_t>(rows[i]);
#if defined(TS_AUDIT_ACCESSES) || defined(TS_CHECK_BOUNDS)
        const int64_t offsets[2] = {row, col0};
#endif
#ifdef TS_AUDIT_ACCESSES
        audit::record(audit::kLoad, view.data, sizeof(T), offsets, view.strides, 2, 1, C, line);
#endif
#ifdef TS_CHECK_BOUNDS
        check_box_extents<LastAxes>("load_rows", view, offsets, 1, C);
#endif
        const T *src = view.data + row * view.strides[0] + col0 * view.strides[1];
        T *dst = t.data + i * C;
        if (view.strides[1] == 1) {
            for (int c = 0; c < C; ++c) dst[c] = src[c];
        } else {
            for (int c = 0; c < C; ++c) dst[c] = src[c * view.strides[1]];
        }
    }
    for (int i = n * C; i < N * C; ++i) t.data[i] = fill;
}

}  // namespace detail

/// Gathers rows of a 2-D view: row i of the N x C result is view[rows[i], col0 : col0 + C], for
/// an integer index tile `rows` of N x 1 or 1 x N.
template <int C, class T, class I, int RI, int CI>
inline Tile<T, RI * CI, C> load_rows(const TensorView<T> &view, const Tile<I, RI, CI> &rows, int64_t col0,
                                     int line = __builtin_LINE()) {
    detail::check_row_indices<I, RI, CI>();
    Tile<T, RI * CI, C> t;
    detail::gather_rows<C>(t, view, rows.data, col0, RI * CI, T{}, line);
    return t;
}

/// load_rows of a ragged index tile: rows i < valid_rows are gathered, the others are `fill`
/// (converted to T; their indices are not read). Throws BoundsError unless 0 <= valid_rows <= N.
template <int C, class T, class I, int RI, int CI, class V, class = std::enable_if_t<is_fill_v<V>>>
inline Tile<T, RI * CI, C> load_rows(const TensorView<T> &view, const Tile<I, RI, CI> &rows, int64_t col0,
                                     int64_t valid_rows, V fill, int line = __builtin_LINE()) {
    detail::check_row_indices<I, RI, CI>();
    constexpr int N = RI * CI;
    if (__builtin_expect(valid_rows < 0 || valid_rows > N, 0)) {
        detail::throw_valid_error(nullptr, "load_rows", N, C, valid_rows, C, true);
    }
    Tile<T, N, C> t;
    detail::gather_rows<C>(t, view, rows.data, col0, static_cast<int>(valid_rows), convert<T>(fill), line);
    return t;
}

}  // namespace ts
