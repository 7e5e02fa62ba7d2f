// tilescope tile library: fused elementwise expressions. fuse(tile) starts one; + - * /,
// maximum/minimum and the unary math functions on it build a tree that is computed in one loop
// when it is stored or becomes a tile (row reductions read one too, tile_reduce.hpp). A tile view
// (tile_view.hpp) is read by them in place, as a tile is.
#pragma once

#include <type_traits>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_elementwise.hpp>
#include <tilescope/tile_view.hpp>

namespace ts {

// ---- Fused expressions ------------------------------------------------------------------------
// fuse(tile) starts an expression that is not computed op by op: + - * /, maximum/minimum, unary
// minus and the unary math functions on it (with tiles, scalars or other fused expressions)
// build a Fused node instead of a tile, and the whole tree is computed in one loop, element by
// element, when it is stored (store) or becomes a tile (conversion). Every element goes through
// exactly the ops, conversions and roundings of the tile ops, so the result is bit-identical to
// the unfused expression's (under -ffp-contract=off, the kernels' flag: else g++ may turn a fused
// a * b + c into one fma); only the intermediate tiles are never written. row_sum/row_max/
// row_min/row_mean take one too (tile_reduce.hpp). A Fused node reads its tiles by reference
// when it is computed: build and consume it in one full expression.

namespace detail {

/// An R x C expression of element type T whose element (r, c) is f(r, c).
template <class T, int R, int C, class F>
struct Fused {
    static constexpr int rows = R;
    static constexpr int cols = C;
    F f;

    operator Tile<T, R, C>() const {
        Tile<T, R, C> out;
        for (int r = 0; r < R; ++r) compute_cols<C>(f, r, 0, out.data + r * C);
        return out;
    }
};

template <class X>
struct is_fused : std::false_type {};
template <class T, int R, int C, class F>
struct is_fused<Fused<T, R, C, F>> : std::true_type {};
template <class X>
inline constexpr bool is_fused_v = is_fused<X>::value;
template <class T, int R, int C, class F>
struct tile_elem<Fused<T, R, C, F>> {
    using type = T;
};
template <class T, int R, int C>
struct tile_elem<TileView<T, R, C>> {
    using type = T;
};

template <class T, int R, int C, class F>
inline Fused<T, R, C, F> make_fused(F f) { return {f}; }

/// Element type, rows and columns of a tile or a fused expression (a scalar: 1 x 1).
template <class X, class = void>
struct fused_shape {
    static constexpr int rows = 1, cols = 1;
};
template <class X>
struct fused_shape<X, std::enable_if_t<is_tile_v<X> || is_fused_v<X> || is_view_v<X>>> {
    static constexpr int rows = X::rows, cols = X::cols;
};

// The element functions of fused nodes are named class templates, not lambdas: a lambda's type
// names the function template it is made in, whose arguments name the operand's type again, so
// the type names (and -g's debug info) of a chain of n ops grew as 2^n (a 24-op chain took g++
// minutes); these grow linearly.

/// Element (r, c) of a tile, read in place (fuse(), and a tile operand of a fused op).
template <class X>
struct TileAt {
    const X *x;
    auto operator()(int r, int c) const { return at(*x, r, c); }
#if TS_FUSED_LANES
    static constexpr bool lanes_ok = std::is_same_v<typename X::value_type, float>, lanes_cheaper = false;
    Lanes lanes_at(int r, int c) const {
        const auto *row = x->data + (X::rows == 1 ? 0 : r) * X::cols;
        return X::cols == 1 ? splat(row[0]) : load_lanes(row + c);
    }
#endif
};
/// Element (r, c) of a fused operand broadcast to a larger shape.
template <class X>
struct FusedAt {
    X x;
    auto operator()(int r, int c) const { return x.f(X::rows == 1 ? 0 : r, X::cols == 1 ? 0 : c); }
#if TS_FUSED_LANES
    // a column broadcast is one element, computed once for its 16 lanes
    static constexpr bool lanes_ok =
        X::cols == 1 ? std::is_same_v<typename tile_elem<X>::type, float> : lane_traits<decltype(X::f)>::ok;
    static constexpr bool lanes_cheaper = X::cols != 1 && lane_traits<decltype(X::f)>::cheaper;
    Lanes lanes_at(int r, int c) const {
        if constexpr (X::cols == 1) {
            return splat(x.f(X::rows == 1 ? 0 : r, 0));
        } else {
            return x.f.lanes_at(X::rows == 1 ? 0 : r, c);
        }
    }
#endif
};
/// A scalar operand, converted to T once (as binary() converts it).
template <class T>
struct ScalarAt {
    T v;
    T operator()(int, int) const { return v; }
#if TS_FUSED_LANES
    static constexpr bool lanes_ok = std::is_same_v<T, float>, lanes_cheaper = false;
    Lanes lanes_at(int, int) const { return splat(v); }
#endif
};
/// Op of two operands' elements, in T's compute type, rounded to T.
template <class Op, class T, class FA, class FB>
struct BinaryAt {
    FA fa;
    FB fb;
    T operator()(int r, int c) const {
        using X = compute_t<T>;
        return convert<T>(Op{}(X(fa(r, c)), X(fb(r, c))));
    }
#if TS_FUSED_LANES
    static constexpr bool lanes_ok =
        std::is_same_v<T, float> && LaneOp<Op>::ok && lane_traits<FA>::ok && lane_traits<FB>::ok;
    static constexpr bool lanes_cheaper = LaneOp<Op>::cheaper || lane_traits<FA>::cheaper || lane_traits<FB>::cheaper;
    Lanes lanes_at(int r, int c) const { return LaneOp<Op>::apply(fa.lanes_at(r, c), fb.lanes_at(r, c)); }
#endif
};
/// Op of one operand's elements, in T's compute type, rounded to T.
template <class Op, class T, class F>
struct MapAt {
    F f;
    T operator()(int r, int c) const {
        using X = compute_t<T>;
        return convert<T>(Op{}(X(f(r, c))));
    }
#if TS_FUSED_LANES
    static constexpr bool lanes_ok = std::is_same_v<T, float> && LaneOp<Op>::ok && lane_traits<F>::ok;
    static constexpr bool lanes_cheaper = LaneOp<Op>::cheaper || lane_traits<F>::cheaper;
    Lanes lanes_at(int r, int c) const { return LaneOp<Op>::apply(f.lanes_at(r, c)); }
#endif
};

/// Element (r, c) of an operand broadcast to a larger shape, as a T: a tile's (read in place), a
/// fused expression's, or a scalar converted to T (as binary() converts it).
template <class T, class X>
inline auto operand(const X &x) {
    if constexpr (is_tile_v<X>) {
        return TileAt<X>{&x};
    } else if constexpr (is_view_v<X>) {
        return ViewAt<typename X::value_type, X::rows, X::cols>{x.data, x.stride};
    } else if constexpr (is_fused_v<X>) {
        return FusedAt<X>{x};
    } else {
        return ScalarAt<T>{convert<T>(x)};
    }
}

template <class Op, class A, class B>
inline auto fused_binary(const A &a, const B &b) {
    using TA = typename tile_elem<A>::type;
    using TB = typename tile_elem<B>::type;
    constexpr bool tile_a = is_tile_v<A> || is_fused_v<A> || is_view_v<A>;
    if constexpr (tile_a && (is_tile_v<B> || is_fused_v<B> || is_view_v<B>)) {
        static_assert(std::is_same_v<TA, TB>,
                      "elementwise op on tiles of different element types: there is no implicit promotion, "
                      "cast<>() one operand");
    }
    using T = std::conditional_t<tile_a, TA, TB>;
    using X = compute_t<T>;
    using S = broadcast_shape<fused_shape<A>::rows, fused_shape<A>::cols, fused_shape<B>::rows, fused_shape<B>::cols>;
    static_assert(!std::is_same_v<decltype(Op{}(X{}, X{})), bool>, "fused expressions hold arithmetic only");
    using FA = decltype(operand<T>(a));
    using FB = decltype(operand<T>(b));
    return make_fused<T, S::rows, S::cols>(BinaryAt<Op, T, FA, FB>{operand<T>(a), operand<T>(b)});
}

template <class Op, class T, int R, int C, class F>
inline auto fused_map(const Fused<T, R, C, F> &a) {
    return make_fused<T, R, C>(MapAt<Op, T, F>{a.f});
}

/// Operand pairs that build a fused node: at least one fused expression or tile view, the other a
/// fused expression, a view, a tile or a scalar.
template <class A, class B>
inline constexpr bool is_fused_pair_v =
    ((is_fused_v<A> || is_view_v<A>) && (is_fused_v<B> || is_view_v<B> || is_tile_v<B> || is_scalar_v<B>)) ||
    ((is_tile_v<A> || is_scalar_v<A>) && (is_fused_v<B> || is_view_v<B>));

}  // namespace detail

/// The start of a fused expression: `tile` itself, read in place when the expression is computed.
template <class T, int R, int C>
inline auto fuse(const Tile<T, R, C> &t) {
    return detail::make_fused<T, R, C>(detail::TileAt<Tile<T, R, C>>{&t});
}

/// A fused expression as it is (an op on a tile view is one already: `fuse(w + 1.0f)` where the
/// generator wraps an operand of another shape than the expression around it).
template <class T, int R, int C, class F>
inline auto fuse(const detail::Fused<T, R, C, F> &e) {
    return e;
}

/// The start of a fused expression on a tile view: its elements, read where the view reads them.
template <class T, int R, int C>
inline auto fuse(const TileView<T, R, C> &v) {
    return detail::make_fused<T, R, C>(detail::ViewAt<T, R, C>{v.data, v.stride});
}

template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto operator+(const A &a, const B &b) { return detail::fused_binary<detail::add_op>(a, b); }
template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto operator-(const A &a, const B &b) { return detail::fused_binary<detail::sub_op>(a, b); }
template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto operator*(const A &a, const B &b) { return detail::fused_binary<detail::mul_op>(a, b); }
template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto operator/(const A &a, const B &b) { return detail::fused_binary<detail::div_op>(a, b); }
template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto maximum(const A &a, const B &b) { return detail::fused_binary<detail::maximum_op>(a, b); }
template <class A, class B, std::enable_if_t<detail::is_fused_pair_v<A, B>, int> = 0>
inline auto minimum(const A &a, const B &b) { return detail::fused_binary<detail::minimum_op>(a, b); }

#define TS_FUSED_UNARY(NAME, OP)                                                                 \
    template <class T, int R, int C, class F>                                                    \
    inline auto NAME(const detail::Fused<T, R, C, F> &a) { return detail::fused_map<detail::OP>(a); } \
    template <class T, int R, int C>                                                             \
    inline auto NAME(const TileView<T, R, C> &v) { return detail::fused_map<detail::OP>(fuse(v)); }
TS_FUSED_UNARY(operator-, neg_op)
TS_FUSED_UNARY(neg, neg_op)
TS_FUSED_UNARY(abs, abs_op)
TS_FUSED_UNARY(exp, exp_op)
TS_FUSED_UNARY(log, log_op)
TS_FUSED_UNARY(sqrt, sqrt_op)
TS_FUSED_UNARY(rsqrt, rsqrt_op)
TS_FUSED_UNARY(tanh, tanh_op)
TS_FUSED_UNARY(sigmoid, sigmoid_op)
TS_FUSED_UNARY(silu, silu_op)
TS_FUSED_UNARY(exp2, exp2_op)
TS_FUSED_UNARY(log2, log2_op)
TS_FUSED_UNARY(erf, erf_op)
TS_FUSED_UNARY(reciprocal, reciprocal_op)
TS_FUSED_UNARY(gelu, gelu_op)
TS_FUSED_UNARY(gelu_tanh, gelu_tanh_op)
TS_FUSED_UNARY(softplus, softplus_op)
TS_FUSED_UNARY(log1p, log1p_op)
TS_FUSED_UNARY(expm1, expm1_op)
TS_FUSED_UNARY(elu, elu_op)
TS_FUSED_UNARY(selu, selu_op)
TS_FUSED_UNARY(hardsigmoid, hardsigmoid_op)
TS_FUSED_UNARY(hardswish, hardswish_op)
TS_FUSED_UNARY(mish, mish_op)
TS_FUSED_UNARY(softsign, softsign_op)
TS_FUSED_UNARY(logsigmoid, logsigmoid_op)
#undef TS_FUSED_UNARY

/// Stores a fused expression into the box of `view` at `offsets`, computing each element once,
/// straight into the tensor (as store() of the expression's tile, without the tile).
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C, class F>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const detail::Fused<U, R, C, F> &e,
                  int line = __builtin_LINE()) {
    static_assert(std::is_same_v<T, U>, "store: the tile's element type must match the tensor's; cast<>() it first");
    static_assert(detail::fits_axes<A, N, R, C>(), "a tile dim with no tensor dim (1-D rows, dims=[d, None]) has size 1");
    const auto box = detail::checked_box<R, C, A>(true, view, offsets, line);
    const bool stream = view.stream && box.col_stride == 1;
    for (int r = 0; r < R; ++r) {
        T *dst = box.base + r * box.row_stride;
        if (stream) {
            detail::stream_row(dst, C, [&e, r](int c) { return e.f(r, c); },
                               [&e, r](int c, T *buf) { detail::compute_cols<detail::kStreamChunk<T>>(e.f, r, c, buf); });
        } else if (box.col_stride == 1) {
            detail::compute_cols<C>(e.f, r, 0, dst);
        } else {
            for (int c = 0; c < C; ++c) dst[c * box.col_stride] = e.f(r, c);
        }
    }
    if (stream) detail::stream_fence();
}

/// Stores a tile view into the box of `view` at `offsets` (as store() of the tile it views).
template <class A = LastAxes, class T, std::size_t N, class U, int R, int C>
inline void store(const TensorView<T> &view, const int64_t (&offsets)[N], const TileView<U, R, C> &v,
                  int line = __builtin_LINE()) {
    store<A>(view, offsets, fuse(v), line);
}

}  // namespace ts
