// tilescope tile library: elementwise ops, broadcasting, comparisons, where.
//
// Semantics (torch eager, op by op):
//  - Two tiles broadcast as in numpy: each dim equal or 1; the result takes the larger.
//    Shapes that do not broadcast are a compile error ("tile shapes do not broadcast").
//  - Both operands must have the same element type (no implicit promotion; cast<>() first).
//    A scalar operand (any number, on either side) is first converted to the tile's element
//    type, so `bf16_tile * 0.1f` multiplies by bf16(0.1f).
//  - bf16/f16 ops compute in float and round each op's result back to the tile's type.
//  - Integer + - * and unary minus wrap around (two's complement), as torch's do. `/` on
//    integer tiles is a compile error: torch's `/` is true division, so cast to float first.
//  - maximum/minimum propagate NaN. Comparisons give Tile<bool>; NaN compares unequal.
//  - the unary math ops and pow on float (and bf16/f16) call tile_math.hpp's functions (its
//    header lists where their limits differ from torch's float formulas, such as a -0 where
//    torch gives NaN); reciprocal(x) is 1 / x, one correctly rounded division; sqrt is exact;
//    rsqrt(x) is 1 / sqrt(x) (two correct roundings, < 1 ulp; torch's CPU rsqrt uses
//    another approximation and differs from it by 1 ulp for ~13% of inputs).
#pragma once

#include <cmath>
#include <type_traits>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_lanes.hpp>
#include <tilescope/tile_math.hpp>

namespace ts {

namespace detail {

/// The shape two broadcast operands produce.
template <int R1, int C1, int R2, int C2>
struct broadcast_shape {
    static_assert(R1 == R2 || R1 == 1 || R2 == 1, "tile shapes do not broadcast: row counts differ and neither is 1");
    static_assert(C1 == C2 || C1 == 1 || C2 == 1,
                  "tile shapes do not broadcast: column counts differ and neither is 1");
    static constexpr int rows = R1 > R2 ? R1 : R2;
    static constexpr int cols = C1 > C2 ? C1 : C2;
};

/// Numbers usable as the scalar operand of a tile op.
template <class X>
inline constexpr bool is_scalar_v = std::is_arithmetic_v<X> || is_half_v<X>;

/// Operand pairs the binary operators accept: at least one tile, the other a tile or a scalar.
template <class A, class B>
inline constexpr bool is_operand_pair_v =
    (is_tile_v<A> && (is_tile_v<B> || is_scalar_v<B>)) || (is_scalar_v<A> && is_tile_v<B>);

template <class X>
struct tile_elem {
    using type = X;
};
template <class T, int R, int C>
struct tile_elem<Tile<T, R, C>> {
    using type = T;
};

/// A tile operand as is, or a scalar as a 1x1 tile of T (broadcast like any tile).
template <class T, class X>
inline decltype(auto) as_tile(const X &x) {
    if constexpr (is_tile_v<X>) {
        return (x);
    } else {
        return full<T, 1, 1>(x);
    }
}

/// Element r, c of a tile broadcast to a larger shape (dims of size 1 repeat).
template <class T, int R, int C>
inline T at(const Tile<T, R, C> &t, int r, int c) {
    return read(t.data, (R == 1 ? 0 : r) * C + (C == 1 ? 0 : c));
}

/// out = op(a, b) elementwise with broadcasting. op sees compute types (float for bf16/f16)
/// and returns either bool (a predicate: the result is Tile<bool>) or the compute type.
template <class Op, class T, int R1, int C1, int R2, int C2>
inline auto zip(const Tile<T, R1, C1> &a, const Tile<T, R2, C2> &b) {
    using S = broadcast_shape<R1, C1, R2, C2>;
    using X = compute_t<T>;
    using Y = decltype(Op{}(X{}, X{}));
    using Out = std::conditional_t<std::is_same_v<Y, bool>, bool, T>;
    Tile<Out, S::rows, S::cols> out;
    for (int r = 0; r < S::rows; ++r) {
        Out *o = out.data + r * S::cols;
        for (int c = 0; c < S::cols; ++c) o[c] = convert<Out>(Op{}(X(at(a, r, c)), X(at(b, r, c))));
    }
    return out;
}

/// The binary-op entry point: checks the element types and turns scalars into 1x1 tiles.
template <class Op, class A, class B>
inline auto binary(const A &a, const B &b) {
    using TA = typename tile_elem<A>::type;
    using TB = typename tile_elem<B>::type;
    if constexpr (is_tile_v<A> && is_tile_v<B>) {
        static_assert(std::is_same_v<TA, TB>,
                      "elementwise op on tiles of different element types: there is no implicit promotion, "
                      "cast<>() one operand");
    }
    using T = std::conditional_t<is_tile_v<A>, TA, TB>;
    return zip<Op>(as_tile<T>(a), as_tile<T>(b));
}

/// out = op(a) elementwise; op sees the compute type.
template <class Op, class T, int R, int C>
inline auto map(const Tile<T, R, C> &a) {
    using X = compute_t<T>;
    using Y = decltype(Op{}(X{}));
    using Out = std::conditional_t<std::is_same_v<Y, bool>, bool, T>;
    Tile<Out, R, C> out;
    map_elements<Op, R * C>(a.data, out.data, [&a](int i) { return convert<Out>(Op{}(X(read(a.data, i)))); });
    return out;
}

template <class X>
inline constexpr void check_arithmetic() {
    static_assert(!std::is_same_v<X, bool>, "arithmetic on bool tiles: use logical_and/logical_or/logical_not");
}

template <class X>
inline constexpr void check_floating() {
    static_assert(std::is_floating_point_v<X>, "this op needs a floating tile (float, double, bf16, f16); cast<>() first");
}

/// Two's complement wrap-around for integer arithmetic (signed overflow is UB in C++).
template <class X>
using wrap_t = std::make_unsigned_t<X>;

struct add_op {
    template <class X>
    X operator()(X a, X b) const {
        check_arithmetic<X>();
        if constexpr (std::is_integral_v<X>) return static_cast<X>(wrap_t<X>(a) + wrap_t<X>(b));
        else return a + b;
    }
};
struct sub_op {
    template <class X>
    X operator()(X a, X b) const {
        check_arithmetic<X>();
        if constexpr (std::is_integral_v<X>) return static_cast<X>(wrap_t<X>(a) - wrap_t<X>(b));
        else return a - b;
    }
};
struct mul_op {
    template <class X>
    X operator()(X a, X b) const {
        check_arithmetic<X>();
        if constexpr (std::is_integral_v<X>) return static_cast<X>(wrap_t<X>(a) * wrap_t<X>(b));
        else return a * b;
    }
};
struct div_op {
    template <class X>
    X operator()(X a, X b) const {
        static_assert(std::is_floating_point_v<X>,
                      "`/` on integer tiles: torch's `/` is true division, cast<float>() the operands first");
        return a / b;
    }
};
struct maximum_op {
    template <class X>
    X operator()(X a, X b) const {
        check_arithmetic<X>();
        return ((a > b) | (a != a)) ? a : b;  // NaN in either operand gives NaN
    }
};
struct minimum_op {
    template <class X>
    X operator()(X a, X b) const {
        check_arithmetic<X>();
        return ((a < b) | (a != a)) ? a : b;
    }
};
struct eq_op {
    template <class X>
    bool operator()(X a, X b) const { return a == b; }
};
struct ne_op {
    template <class X>
    bool operator()(X a, X b) const { return a != b; }
};
struct lt_op {
    template <class X>
    bool operator()(X a, X b) const { return a < b; }
};
struct le_op {
    template <class X>
    bool operator()(X a, X b) const { return a <= b; }
};
struct gt_op {
    template <class X>
    bool operator()(X a, X b) const { return a > b; }
};
struct ge_op {
    template <class X>
    bool operator()(X a, X b) const { return a >= b; }
};
struct logical_and_op {
    bool operator()(bool a, bool b) const { return a & b; }
};
struct logical_or_op {
    bool operator()(bool a, bool b) const { return a | b; }
};

struct neg_op {
    template <class X>
    X operator()(X a) const {
        check_arithmetic<X>();
        if constexpr (std::is_integral_v<X>) return static_cast<X>(wrap_t<X>(0) - wrap_t<X>(a));
        else return -a;
    }
};
struct abs_op {
    template <class X>
    X operator()(X a) const {
        check_arithmetic<X>();
        if constexpr (std::is_unsigned_v<X>) return a;
        else if constexpr (std::is_integral_v<X>) return a < 0 ? static_cast<X>(wrap_t<X>(0) - wrap_t<X>(a)) : a;
        else return std::fabs(a);
    }
};
struct exp_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::exp(a); }
};
struct log_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::log(a); }
};
struct tanh_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::tanh(a); }
};
struct sigmoid_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::sigmoid(a); }
};
struct silu_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::silu(a); }
};
struct exp2_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::exp2(a); }
};
struct log2_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::log2(a); }
};
struct erf_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::erf(a); }
};
struct gelu_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::gelu(a); }
};
struct gelu_tanh_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::gelu_tanh(a); }
};
struct softplus_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::softplus(a); }
};
struct log1p_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::log1p(a); }
};
struct expm1_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::expm1(a); }
};
struct elu_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::elu(a); }
};
struct selu_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::selu(a); }
};
struct hardsigmoid_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::hardsigmoid(a); }
};
struct hardswish_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::hardswish(a); }
};
struct mish_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::mish(a); }
};
struct softsign_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::softsign(a); }
};
struct logsigmoid_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::logsigmoid(a); }
};
struct reciprocal_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return fmath::reciprocal(a); }
};
struct pow_op {
    template <class X>
    X operator()(X a, X b) const { check_floating<X>(); return fmath::pow(a, b); }
};
struct sqrt_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return std::sqrt(a); }
};
struct rsqrt_op {
    template <class X>
    X operator()(X a) const { check_floating<X>(); return X(1) / std::sqrt(a); }
};
struct logical_not_op {
    bool operator()(bool a) const { return !a; }
};

template <class T>
inline constexpr void check_bool_tile() {
    static_assert(std::is_same_v<T, bool>, "logical ops need bool tiles (from comparisons or cast<bool>())");
}

}  // namespace detail

// ---- Arithmetic: tile (op) tile, tile (op) scalar, scalar (op) tile -----------------------

template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator+(const A &a, const B &b) { return detail::binary<detail::add_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator-(const A &a, const B &b) { return detail::binary<detail::sub_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator*(const A &a, const B &b) { return detail::binary<detail::mul_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator/(const A &a, const B &b) { return detail::binary<detail::div_op>(a, b); }

/// Elementwise max / min; NaN in either operand gives NaN (torch.maximum / torch.minimum).
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto maximum(const A &a, const B &b) { return detail::binary<detail::maximum_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto minimum(const A &a, const B &b) { return detail::binary<detail::minimum_op>(a, b); }

/// Elementwise a^b (torch.pow on float tiles, C99's special cases: tile_math.hpp), broadcast
/// like maximum; a scalar operand is converted to the tile's element type first.
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto pow(const A &a, const B &b) { return detail::binary<detail::pow_op>(a, b); }

// ---- Comparisons -> Tile<bool> ------------------------------------------------------------

template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto eq(const A &a, const B &b) { return detail::binary<detail::eq_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto ne(const A &a, const B &b) { return detail::binary<detail::ne_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto lt(const A &a, const B &b) { return detail::binary<detail::lt_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto le(const A &a, const B &b) { return detail::binary<detail::le_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto gt(const A &a, const B &b) { return detail::binary<detail::gt_op>(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto ge(const A &a, const B &b) { return detail::binary<detail::ge_op>(a, b); }

template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator==(const A &a, const B &b) { return eq(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator!=(const A &a, const B &b) { return ne(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator<(const A &a, const B &b) { return lt(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator<=(const A &a, const B &b) { return le(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator>(const A &a, const B &b) { return gt(a, b); }
template <class A, class B, class = std::enable_if_t<detail::is_operand_pair_v<A, B>>>
inline auto operator>=(const A &a, const B &b) { return ge(a, b); }

// ---- Logical ops on bool tiles ----------------------------------------------------------

template <int R1, int C1, int R2, int C2>
inline auto logical_and(const Tile<bool, R1, C1> &a, const Tile<bool, R2, C2> &b) {
    return detail::zip<detail::logical_and_op>(a, b);
}
template <int R1, int C1, int R2, int C2>
inline auto logical_or(const Tile<bool, R1, C1> &a, const Tile<bool, R2, C2> &b) {
    return detail::zip<detail::logical_or_op>(a, b);
}
template <class T, int R, int C>
inline Tile<bool, R, C> logical_not(const Tile<T, R, C> &a) {
    detail::check_bool_tile<T>();
    return detail::map<detail::logical_not_op>(a);
}

// ---- Unary ops ----------------------------------------------------------------------------

template <class T, int R, int C>
inline Tile<T, R, C> operator-(const Tile<T, R, C> &a) { return detail::map<detail::neg_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> neg(const Tile<T, R, C> &a) { return detail::map<detail::neg_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> abs(const Tile<T, R, C> &a) { return detail::map<detail::abs_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> exp(const Tile<T, R, C> &a) { return detail::map<detail::exp_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> log(const Tile<T, R, C> &a) { return detail::map<detail::log_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> sqrt(const Tile<T, R, C> &a) { return detail::map<detail::sqrt_op>(a); }
/// 1 / sqrt(x), two correctly rounded steps (not the approximate rsqrt instruction).
template <class T, int R, int C>
inline Tile<T, R, C> rsqrt(const Tile<T, R, C> &a) { return detail::map<detail::rsqrt_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> tanh(const Tile<T, R, C> &a) { return detail::map<detail::tanh_op>(a); }
template <class T, int R, int C>
inline Tile<T, R, C> sigmoid(const Tile<T, R, C> &a) { return detail::map<detail::sigmoid_op>(a); }
/// x * sigmoid(x).
template <class T, int R, int C>
inline Tile<T, R, C> silu(const Tile<T, R, C> &a) { return detail::map<detail::silu_op>(a); }
/// 2^x.
template <class T, int R, int C>
inline Tile<T, R, C> exp2(const Tile<T, R, C> &a) { return detail::map<detail::exp2_op>(a); }
/// Base-2 logarithm.
template <class T, int R, int C>
inline Tile<T, R, C> log2(const Tile<T, R, C> &a) { return detail::map<detail::log2_op>(a); }
/// The error function.
template <class T, int R, int C>
inline Tile<T, R, C> erf(const Tile<T, R, C> &a) { return detail::map<detail::erf_op>(a); }
/// 1 / x, one correctly rounded division (in float for bf16/f16, then rounded to the tile's type).
template <class T, int R, int C>
inline Tile<T, R, C> reciprocal(const Tile<T, R, C> &a) { return detail::map<detail::reciprocal_op>(a); }
/// torch's exact GELU: x/2 (1 + erf(x / sqrt2)).
template <class T, int R, int C>
inline Tile<T, R, C> gelu(const Tile<T, R, C> &a) { return detail::map<detail::gelu_op>(a); }
/// torch's GELU with approximate='tanh': x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T, int R, int C>
inline Tile<T, R, C> gelu_tanh(const Tile<T, R, C> &a) { return detail::map<detail::gelu_tanh_op>(a); }
/// torch's softplus with beta 1 and threshold 20: x for x > 20, else log(1 + e^x).
template <class T, int R, int C>
inline Tile<T, R, C> softplus(const Tile<T, R, C> &a) { return detail::map<detail::softplus_op>(a); }
/// log(1 + x), accurate for x near 0.
template <class T, int R, int C>
inline Tile<T, R, C> log1p(const Tile<T, R, C> &a) { return detail::map<detail::log1p_op>(a); }

/// e^x - 1, accurate near 0.
template <class T, int R, int C>
inline Tile<T, R, C> expm1(const Tile<T, R, C> &a) { return detail::map<detail::expm1_op>(a); }
/// torch's ELU (alpha 1): x for x >= 0, else e^x - 1.
template <class T, int R, int C>
inline Tile<T, R, C> elu(const Tile<T, R, C> &a) { return detail::map<detail::elu_op>(a); }
/// torch's SELU: scale (x for x >= 0, else alpha (e^x - 1)).
template <class T, int R, int C>
inline Tile<T, R, C> selu(const Tile<T, R, C> &a) { return detail::map<detail::selu_op>(a); }
/// torch's hardsigmoid: min(max(x + 3, 0), 6) / 6.
template <class T, int R, int C>
inline Tile<T, R, C> hardsigmoid(const Tile<T, R, C> &a) { return detail::map<detail::hardsigmoid_op>(a); }
/// torch's hardswish: x min(max(x + 3, 0), 6) / 6.
template <class T, int R, int C>
inline Tile<T, R, C> hardswish(const Tile<T, R, C> &a) { return detail::map<detail::hardswish_op>(a); }
/// torch's mish: x tanh(softplus(x)).
template <class T, int R, int C>
inline Tile<T, R, C> mish(const Tile<T, R, C> &a) { return detail::map<detail::mish_op>(a); }
/// torch's softsign: x / (1 + |x|).
template <class T, int R, int C>
inline Tile<T, R, C> softsign(const Tile<T, R, C> &a) { return detail::map<detail::softsign_op>(a); }
/// torch's logsigmoid: log(1 / (1 + e^-x)).
template <class T, int R, int C>
inline Tile<T, R, C> logsigmoid(const Tile<T, R, C> &a) { return detail::map<detail::logsigmoid_op>(a); }

// ---- where ----------------------------------------------------------------------------------

/// cond ? a : b elementwise, all three broadcast together; a and b are tiles of one element
/// type or scalars (converted to it). With two scalars their common C++ type is used.
template <int RC, int CC, class A, class B,
          class = std::enable_if_t<(is_tile_v<A> || detail::is_scalar_v<A>) && (is_tile_v<B> || detail::is_scalar_v<B>)>>
inline auto where(const Tile<bool, RC, CC> &cond, const A &a, const B &b) {
    using TA = typename detail::tile_elem<A>::type;
    using TB = typename detail::tile_elem<B>::type;
    if constexpr (is_tile_v<A> && is_tile_v<B>) {
        static_assert(std::is_same_v<TA, TB>,
                      "where: a and b have different element types: there is no implicit promotion, cast<>() one");
    }
    using T = std::conditional_t<is_tile_v<A>, TA, std::conditional_t<is_tile_v<B>, TB, std::common_type_t<TA, TB>>>;
    const auto &ta = detail::as_tile<T>(a);
    const auto &tb = detail::as_tile<T>(b);
    using TileA = std::remove_reference_t<decltype(ta)>;
    using TileB = std::remove_reference_t<decltype(tb)>;
    using AB = detail::broadcast_shape<TileA::rows, TileA::cols, TileB::rows, TileB::cols>;
    using S = detail::broadcast_shape<RC, CC, AB::rows, AB::cols>;
    Tile<T, S::rows, S::cols> out;
    for (int r = 0; r < S::rows; ++r) {
        T *o = out.data + r * S::cols;
        for (int c = 0; c < S::cols; ++c) o[c] = detail::select(detail::at(cond, r, c), detail::at(ta, r, c), detail::at(tb, r, c));
    }
    return out;
}

}  // namespace ts
