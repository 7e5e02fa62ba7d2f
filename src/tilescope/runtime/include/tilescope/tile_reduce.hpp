// tilescope tile library: row and column reductions.
//
// row_sum/row_max/row_min/row_mean reduce each row to Tile<T, R, 1>; col_sum/col_max/col_min/
// col_mean reduce each column to Tile<T, 1, C>.
//
// Summation order (fixed, so results are reproducible and vectorize without -ffast-math):
//  - Rows: L lanes, L = min(256 bytes / sizeof(accumulator), C rounded down to a power of 2)
//    (64 for float, 32 for double). Element c goes to lane c % L in order; then lanes are
//    combined as a tree: lane l += lane l + L/2, then + L/4, ..., down to lane 0. 256 bytes are
//    four AVX-512 or eight AVX2 registers, independent chains, so a long row's loop is not
//    bound by the latency of one add after another; the order is the same on every
//    instruction set.
//  - Columns: in row order, r = 0, 1, ..., R-1.
// max/min take the same lane order (it shows only in which NaN or which zero they return).
// bf16/f16 accumulate in float and round the result once. Integer sums wrap around in T
// (torch would widen to int64). max/min propagate NaN. A float sum ends by adding +0.0, so a sum
// whose terms are all -0.0 is +0.0 as torch's (which starts from +0.0); no other result changes.
// row_mean/col_mean (floating tiles only) are that sum, in the compute type and in exactly
// row_sum's/col_sum's order, divided by the count in the compute type and rounded to T once.
// row_argmax/row_argmin/col_argmax/col_argmin give int32 indices as torch's (the first extreme,
// a NaN counting as the extreme); row_logsumexp/col_logsumexp are computed in double around the
// maximum and rounded to the compute type, then to T.
#pragma once

#include <tilescope/tile_elementwise.hpp>
#include <tilescope/tile_fused.hpp>

namespace ts {

namespace detail {

/// The last step of a reduction: a float sum adds +0.0 (see the top of this file).
template <class Op, class A>
inline A finish(A a) {
    if constexpr (std::is_same_v<Op, add_op> && std::is_floating_point_v<A>) return a + A(0);
    else return a;
}

/// The element type x[i] reads (x: a pointer to a row, or a fused expression's row).
template <class X>
using row_elem_t = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<const X &>()[0])>>;

/// Row r of a fused expression, read as x[c].
template <class T, int R, int C, class F>
struct FusedRow {
    const Fused<T, R, C, F> &e;
    int r;
    T operator[](int c) const { return e.f(r, c); }
};

/// Whether reduce_row reads x (a row of a fused expression) by its lane forms (tile_lanes.hpp).
template <class Op, class X, int Lanes_>
inline constexpr bool row_lanes_v = false;
#if TS_FUSED_LANES
template <class Op, class T, int R, int C, class F, int Lanes_>
inline constexpr bool row_lanes_v<Op, FusedRow<T, R, C, F>, Lanes_> =
    lanes_cheaper_v<F> && LaneOp<Op>::ok && Lanes_ % kLanes == 0;
#endif

/// The lanes' tree: acc[l] = op(acc[l], acc[l + Width]) for l < Width, then Width / 2, ... 1.
/// Each level's width is a constant, so g++ computes it in vector registers.
template <class Op, int Width, class A>
[[gnu::always_inline]] inline void fold_lanes(A *acc) {
    if constexpr (Width >= 1) {
        for (int l = 0; l < Width; ++l) acc[l] = Op{}(acc[l], acc[l + Width]);
        fold_lanes<Op, Width / 2>(acc);
    }
}

/// op over the C elements x[0..C), in the lane order described at the top of this file.
template <class Op, int C, class X>
inline compute_t<row_elem_t<X>> reduce_row(const X &x) {
    using A = compute_t<row_elem_t<X>>;
    constexpr int max_lanes = static_cast<int>(256 / sizeof(A));
    constexpr int lanes = [] {
        int l = 1;
        while (l * 2 <= C && l * 2 <= max_lanes) l *= 2;
        return l;
    }();
    A acc[lanes];
    constexpr int body_end = C / lanes * lanes;
#if TS_FUSED_LANES
    if constexpr (row_lanes_v<Op, X, lanes>) {  // the same lanes, each computed 16 at a time
        constexpr int vectors = lanes / kLanes;
        Lanes acc_v[vectors];
        for (int v = 0; v < vectors; ++v) acc_v[v] = x.e.f.lanes_at(x.r, v * kLanes);
        for (int c = lanes; c < body_end; c += lanes) {
            for (int v = 0; v < vectors; ++v) acc_v[v] = LaneOp<Op>::apply(acc_v[v], x.e.f.lanes_at(x.r, c + v * kLanes));
        }
        for (int v = 0; v < vectors; ++v) store_lanes(acc + v * kLanes, acc_v[v]);
    } else
#endif
    {
        for (int l = 0; l < lanes; ++l) acc[l] = A(x[l]);
        for (int c = lanes; c < body_end; c += lanes) {
            for (int l = 0; l < lanes; ++l) acc[l] = Op{}(acc[l], A(x[c + l]));
        }
    }
    for (int l = 0; body_end + l < C; ++l) acc[l] = Op{}(acc[l], A(x[body_end + l]));
    fold_lanes<Op, lanes / 2>(acc);
    return finish<Op>(acc[0]);
}

/// Each of the R rows of C elements at data + r * stride reduced with op in the order above; with
/// Mean, that sum divided by C in the compute type; each result rounded to T once.
template <class Op, bool Mean, class T, int R, int C>
inline Tile<T, R, 1> reduce_rows_at(const T *data, int64_t stride) {
    using A = compute_t<T>;
    Tile<T, R, 1> out;
    for (int r = 0; r < R; ++r) {
        const A v = reduce_row<Op, C>(data + r * stride);
        if constexpr (Mean) {
            out.data[r] = convert<T>(v / A(C));
        } else {
            out.data[r] = convert<T>(v);
        }
    }
    return out;
}

template <class Op, class T, int R, int C>
inline Tile<T, R, 1> reduce_rows(const Tile<T, R, C> &t) {
    return reduce_rows_at<Op, false, T, R, C>(t.data, C);
}

/// reduce_rows of a tile view (tile_view.hpp): each row read in place, in the same order.
template <class Op, class T, int R, int C>
inline Tile<T, R, 1> reduce_rows(const TileView<T, R, C> &v) {
    return reduce_rows_at<Op, false, T, R, C>(v.data, v.stride);
}

/// reduce_rows of a fused expression: each element is computed as the reduction reads it, once.
template <class Op, class T, int R, int C, class F>
inline Tile<T, R, 1> reduce_rows(const Fused<T, R, C, F> &e) {
    Tile<T, R, 1> out;
    for (int r = 0; r < R; ++r) out.data[r] = convert<T>(reduce_row<Op, C>(FusedRow<T, R, C, F>{e, r}));
    return out;
}

/// op down each column, in row order; each result is divided by Divisor (in the compute type)
/// when that is not 1, then rounded to T.
template <class Op, int Divisor = 1, class T, int R, int C>
inline Tile<T, 1, C> reduce_cols(const Tile<T, R, C> &t) {
    using A = compute_t<T>;
    A acc[C];
    for (int c = 0; c < C; ++c) acc[c] = A(t.data[c]);
    for (int r = 1; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[c] = Op{}(acc[c], A(t.data[r * C + c]));
    }
    Tile<T, 1, C> out;
    if constexpr (Divisor == 1) {
        for (int c = 0; c < C; ++c) out.data[c] = convert<T>(finish<Op>(acc[c]));
    } else {
        const A d = A(Divisor);
        for (int c = 0; c < C; ++c) out.data[c] = convert<T>(finish<Op>(acc[c]) / d);
    }
    return out;
}

/// The index of the first maximum (Greater: the first minimum with less) of x[0..n) read at
/// x[i * stride], as torch.argmax/argmin: a NaN counts as the extreme (the first NaN wins), ties
/// give the first index.
template <bool Greater, class X>
inline int32_t arg_extreme(const X &x, int n, int stride) {
    using A = compute_t<std::remove_cv_t<std::remove_reference_t<decltype(x[0])>>>;
    A best = A(x[0]);
    int32_t at = 0;
    for (int i = 1; i < n; ++i) {
        const A v = A(x[i * stride]);
        bool better = Greater ? v > best : v < best;
        if constexpr (std::is_floating_point_v<A>) better = (better || v != v) && best == best;
        if (better) {
            best = v;
            at = i;
        }
    }
    return at;
}

/// log(sum(e^x)) of x[0..n) read at x[i * stride], as torch.logsumexp: m + log(sum(e^(x - m)))
/// with m the maximum, in double with libm's exp and log (a reduction's cost is the sum, and
/// libm's double results round to the same float on every CPU), then rounded to compute_t<T> and
/// to T; the maximum itself when it is NaN or infinite (+Inf for a +Inf, -Inf for all -Inf).
template <class T, class X>
inline T logsumexp_of(const X &x, int n, int stride) {
    double m = static_cast<double>(compute_t<T>(x[0]));
    for (int i = 1; i < n; ++i) {
        const double v = static_cast<double>(compute_t<T>(x[i * stride]));
        m = (v > m || v != v) && m == m ? v : m;
    }
    if (m != m || m == HUGE_VAL || m == -HUGE_VAL) return convert<T>(compute_t<T>(m));
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
        sum += std::exp(static_cast<double>(compute_t<T>(x[i * stride])) - m);
    }
    return convert<T>(compute_t<T>(m + std::log(sum)));
}

template <class T>
inline constexpr void check_logsumexp() {
    static_assert(is_floating_v<T>, "row_logsumexp/col_logsumexp need a floating tile; cast<>() first");
}

template <class T>
inline constexpr void check_arg() {
    static_assert(!std::is_same_v<T, bool>, "argmax/argmin need a number tile; cast<>() first");
}

template <class T>
inline constexpr void check_mean() {
    static_assert(is_floating_v<T>, "row_mean/col_mean need a floating tile (float, double, bf16, f16); cast<>() first");
}

}  // namespace detail

/// Sum of each row.
template <class T, int R, int C>
inline Tile<T, R, 1> row_sum(const Tile<T, R, C> &t) { return detail::reduce_rows<detail::add_op>(t); }
/// Maximum of each row (NaN if the row has a NaN).
template <class T, int R, int C>
inline Tile<T, R, 1> row_max(const Tile<T, R, C> &t) { return detail::reduce_rows<detail::maximum_op>(t); }
/// Minimum of each row (NaN if the row has a NaN).
template <class T, int R, int C>
inline Tile<T, R, 1> row_min(const Tile<T, R, C> &t) { return detail::reduce_rows<detail::minimum_op>(t); }

/// Mean of each row: row_sum's sum (in the compute type) / C, rounded to T once.
template <class T, int R, int C>
inline Tile<T, R, 1> row_mean(const Tile<T, R, C> &t) {
    detail::check_mean<T>();
    return detail::reduce_rows_at<detail::add_op, true, T, R, C>(t.data, C);
}

/// row_sum/row_max/row_min/row_mean of a tile view (tile_view.hpp): the same result as of the
/// tile it views, read in place.
template <class T, int R, int C>
inline Tile<T, R, 1> row_sum(const TileView<T, R, C> &v) { return detail::reduce_rows<detail::add_op>(v); }
template <class T, int R, int C>
inline Tile<T, R, 1> row_max(const TileView<T, R, C> &v) { return detail::reduce_rows<detail::maximum_op>(v); }
template <class T, int R, int C>
inline Tile<T, R, 1> row_min(const TileView<T, R, C> &v) { return detail::reduce_rows<detail::minimum_op>(v); }
template <class T, int R, int C>
inline Tile<T, R, 1> row_mean(const TileView<T, R, C> &v) {
    detail::check_mean<T>();
    return detail::reduce_rows_at<detail::add_op, true, T, R, C>(v.data, v.stride);
}

/// row_sum/row_max/row_min/row_mean of a fused expression (tile_fused.hpp): the same
/// result as of its tile, without the tile.
template <class T, int R, int C, class F>
inline Tile<T, R, 1> row_sum(const detail::Fused<T, R, C, F> &e) { return detail::reduce_rows<detail::add_op>(e); }
template <class T, int R, int C, class F>
inline Tile<T, R, 1> row_max(const detail::Fused<T, R, C, F> &e) { return detail::reduce_rows<detail::maximum_op>(e); }
template <class T, int R, int C, class F>
inline Tile<T, R, 1> row_min(const detail::Fused<T, R, C, F> &e) { return detail::reduce_rows<detail::minimum_op>(e); }
template <class T, int R, int C, class F>
inline Tile<T, R, 1> row_mean(const detail::Fused<T, R, C, F> &e) {
    detail::check_mean<T>();
    using A = compute_t<T>;
    Tile<T, R, 1> out;
    for (int r = 0; r < R; ++r) {
        out.data[r] = convert<T>(detail::reduce_row<detail::add_op, C>(detail::FusedRow<T, R, C, F>{e, r}) / A(C));
    }
    return out;
}

/// Sum of each column.
template <class T, int R, int C>
inline Tile<T, 1, C> col_sum(const Tile<T, R, C> &t) { return detail::reduce_cols<detail::add_op>(t); }
/// Maximum of each column (NaN if the column has a NaN).
template <class T, int R, int C>
inline Tile<T, 1, C> col_max(const Tile<T, R, C> &t) { return detail::reduce_cols<detail::maximum_op>(t); }
/// Minimum of each column (NaN if the column has a NaN).
template <class T, int R, int C>
inline Tile<T, 1, C> col_min(const Tile<T, R, C> &t) { return detail::reduce_cols<detail::minimum_op>(t); }
/// Mean of each column: col_sum's sum (in the compute type) / R, rounded to T once.
template <class T, int R, int C>
inline Tile<T, 1, C> col_mean(const Tile<T, R, C> &t) {
    detail::check_mean<T>();
    return detail::reduce_cols<detail::add_op, R>(t);
}

namespace detail {

template <bool Greater, class T, int R, int C>
inline Tile<int32_t, R, 1> row_arg(const Tile<T, R, C> &t) {
    check_arg<T>();
    Tile<int32_t, R, 1> out;
    for (int r = 0; r < R; ++r) out.data[r] = arg_extreme<Greater>(t.data + r * C, C, 1);
    return out;
}

template <bool Greater, class T, int R, int C>
inline Tile<int32_t, 1, C> col_arg(const Tile<T, R, C> &t) {
    check_arg<T>();
    Tile<int32_t, 1, C> out;
    for (int c = 0; c < C; ++c) out.data[c] = arg_extreme<Greater>(t.data + c, R, C);
    return out;
}

template <class T, int R, int C>
inline Tile<T, R, 1> row_logsumexp(const Tile<T, R, C> &t) {
    check_logsumexp<T>();
    Tile<T, R, 1> out;
    for (int r = 0; r < R; ++r) out.data[r] = logsumexp_of<T>(t.data + r * C, C, 1);
    return out;
}

template <class T, int R, int C>
inline Tile<T, 1, C> col_logsumexp(const Tile<T, R, C> &t) {
    check_logsumexp<T>();
    Tile<T, 1, C> out;
    for (int c = 0; c < C; ++c) out.data[c] = logsumexp_of<T>(t.data + c, R, C);
    return out;
}

}  // namespace detail

/// The column of the first maximum (minimum) of each row, as torch.argmax(t, -1, keepdim=True)
/// (argmin); the row of each column's, as torch.argmax(t, 0, keepdim=True): a NaN counts as the
/// extreme, ties give the first index.
template <class T, int R, int C>
inline Tile<int32_t, R, 1> row_argmax(const Tile<T, R, C> &t) { return detail::row_arg<true>(t); }
template <class T, int R, int C>
inline Tile<int32_t, R, 1> row_argmin(const Tile<T, R, C> &t) { return detail::row_arg<false>(t); }
template <class T, int R, int C>
inline Tile<int32_t, 1, C> col_argmax(const Tile<T, R, C> &t) { return detail::col_arg<true>(t); }
template <class T, int R, int C>
inline Tile<int32_t, 1, C> col_argmin(const Tile<T, R, C> &t) { return detail::col_arg<false>(t); }

/// log(sum(e^x)) of each row (column), stable, as torch.logsumexp(t, dim, keepdim=True):
/// computed in double around the maximum and rounded once.
template <class T, int R, int C>
inline Tile<T, R, 1> row_logsumexp(const Tile<T, R, C> &t) { return detail::row_logsumexp(t); }
template <class T, int R, int C>
inline Tile<T, 1, C> col_logsumexp(const Tile<T, R, C> &t) { return detail::col_logsumexp(t); }

namespace detail {

/// The running value of a scan: double for floating tiles; for integer ones uint64 (modular, so
/// an overflow wraps as torch's int64 does, never undefined), wrapped to T.
template <class T>
using scan_acc_t = std::conditional_t<is_floating_v<T>, double, uint64_t>;

template <bool Prod, int Dim, bool Reverse, bool Exclusive, class T, int R, int C>
inline Tile<T, R, C> scan(const Tile<T, R, C> &t) {
    static_assert(Dim == 0 || Dim == 1, "a scan runs along dim 0 or 1");
    static_assert(!std::is_same_v<T, bool>, "cumsum/cumprod need a number tile; cast<>() first");
    using A = scan_acc_t<T>;
    constexpr int n = Dim == 1 ? C : R, lines = Dim == 1 ? R : C;
    Tile<T, R, C> out;
    for (int line = 0; line < lines; ++line) {
        A acc = Prod ? A(1) : A(0);
        for (int k = 0; k < n; ++k) {
            const int i = Reverse ? n - 1 - k : k;
            const int at = Dim == 1 ? line * C + i : i * C + line;
            const A x = static_cast<A>(static_cast<compute_t<T>>(t.data[at]));
            if constexpr (!Exclusive) acc = Prod ? A(acc * x) : A(acc + x);
            if constexpr (std::is_integral_v<A>) out.data[at] = static_cast<T>(acc);
            else out.data[at] = convert<T>(static_cast<compute_t<T>>(acc));
            if constexpr (Exclusive) acc = Prod ? A(acc * x) : A(acc + x);
        }
    }
    return out;
}

}  // namespace detail

/// Running sum along Dim (0: down each column, 1: along each row), from the end when Reverse,
/// without the element itself when Exclusive (the first is then 0): torch.cumsum, in double for
/// floating tiles (as torch's CPU f32 cumsum) and int64 for integer ones, each output rounded once
/// (to float, then to a bf16/f16 tile's type) or wrapped to T.
template <int Dim, bool Reverse, bool Exclusive, class T, int R, int C>
inline Tile<T, R, C> cumsum(const Tile<T, R, C> &t) { return detail::scan<false, Dim, Reverse, Exclusive>(t); }
/// Running product, as cumsum (the first of an exclusive one is 1).
template <int Dim, bool Reverse, bool Exclusive, class T, int R, int C>
inline Tile<T, R, C> cumprod(const Tile<T, R, C> &t) { return detail::scan<true, Dim, Reverse, Exclusive>(t); }

}  // namespace ts
