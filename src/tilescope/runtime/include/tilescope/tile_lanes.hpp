// tilescope tile library: fused expressions 16 elements at a time, where the CPU has AVX-512.
//
// A fused expression's element function (tile_fused.hpp) computes one element, and g++
// vectorizes the loops that call it. For exp, that vectorized code rebuilds 2^k from integer
// bits in two steps (scale_pow2, ten instructions a vector); AVX-512's vscalefps does it in one,
// with the same single rounding. So each node of a fused expression may also have a lane form,
// `lanes_at(r, c)`: elements c .. c + 15 of row r as one vector. Where every node has one (float
// tiles, views and scalars; + - * /, maximum, minimum, neg, abs, sqrt, rsqrt, exp) and some node's
// is cheaper than its elementwise code (exp), the loops that compute the expression (into a
// tile, a store, a row reduction, prefetching()) take 16 columns at a time by the lane forms and
// the last C % 16 columns elementwise. A unary op on a whole float tile (map(), as exp(t)) takes
// its lane form the same way where that is cheaper.
//
// A lane form computes the element function's value in every lane: the same IEEE operations in
// the same order (-ffp-contract=off holds for vector code too), and exp the same SLEEF steps with
// the same roundings, so the bits are the element code's, but for which NaN a result is where
// both operands of an op are NaNs: g++ may swap the operands of a commutative op (or turn -a + b
// into b - a) in either path, as it does between two -march targets of the element code alone.
// tests/runtime/test_fused_lanes.py compares them over 2^24 floats spread over the whole range,
// the special values, and whole kernels. Without AVX-512 and FMA, or with TS_FUSED_LANES defined
// as 0, no node has a lane form and nothing here is used.
#pragma once

#include <type_traits>

#include <tilescope/tile_math.hpp>

// A kernel that defines TS_FUSED_LANES as 0 before including tile.hpp computes elementwise.
#if !defined(TS_FUSED_LANES) && defined(__AVX512F__) && defined(__FMA__)
#define TS_FUSED_LANES 1
#endif
#if TS_FUSED_LANES
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "TS_FUSED_LANES: the lane forms need AVX-512 and FMA (this target lacks them); define it as 0 or leave it undefined"
#endif
#include <immintrin.h>
#endif

namespace ts::detail {

/// Whether F (an element function of a fused node) has a lane form, and whether that is cheaper
/// than its elementwise code. A node that says nothing has none.
template <class F, class = void>
struct lane_traits {
    static constexpr bool ok = false, cheaper = false;
};
template <class F>
struct lane_traits<F, std::void_t<decltype(F::lanes_ok)>> {
    static constexpr bool ok = F::lanes_ok, cheaper = F::lanes_ok && F::lanes_cheaper;
};
/// The loops below take F 16 columns at a time.
template <class F>
inline constexpr bool lanes_cheaper_v = lane_traits<F>::cheaper;

// The ops with lane forms (tile_elementwise.hpp defines them).
struct add_op;
struct sub_op;
struct mul_op;
struct div_op;
struct maximum_op;
struct minimum_op;
struct neg_op;
struct abs_op;
struct sqrt_op;
struct rsqrt_op;
struct exp_op;

/// An op's lane form: ok (it has one), cheaper (than the vectorized elementwise op) and
/// apply(a[, b]).
template <class Op>
struct LaneOp {
    static constexpr bool ok = false, cheaper = false;
};

#if TS_FUSED_LANES

inline constexpr int kLanes = 16;
using Lanes = __m512;

inline Lanes load_lanes(const float *p) { return _mm512_loadu_ps(p); }
inline void store_lanes(float *p, Lanes v) { _mm512_storeu_ps(p, v); }
inline Lanes splat(float x) { return _mm512_set1_ps(x); }

/// fmath::exp of each lane, bit for bit: the same clamp, reduction and polynomial (ExpConst),
/// and u * 2^k by vscalefps, which rounds once as scale_pow2 does.
inline Lanes exp_lanes(Lanes x) {
    using E = fmath::detail::ExpConst;
    // NaN compares false both ways and stays NaN, as in clamp_keep_nan
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, splat(E::hi), _CMP_GT_OQ), splat(E::hi));
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, splat(E::lo), _CMP_LT_OQ), splat(E::lo));
    // The masked forms with every lane set: the plain ones start from _mm512_undefined_ps(), which
    // g++ 12 reports as used uninitialized under -Wall.
    constexpr __mmask16 all = 0xFFFF;
    // the current rounding direction (round to nearest even unless changed), as std::nearbyint
    const Lanes xl = _mm512_mul_ps(x, splat(E::log2e));
    const Lanes kf = _mm512_mask_roundscale_ps(xl, all, xl, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
    Lanes s = _mm512_fmadd_ps(kf, splat(-E::ln2_hi), x);
    s = _mm512_fmadd_ps(kf, splat(-E::ln2_lo), s);
    Lanes u = splat(E::poly[0]);
    for (int i = 1; i < 6; ++i) u = _mm512_fmadd_ps(u, s, splat(E::poly[i]));
    u = _mm512_add_ps(splat(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
    return _mm512_mask_scalef_ps(u, all, u, kf);
}

template <>
struct LaneOp<add_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) { return _mm512_add_ps(a, b); }
};
template <>
struct LaneOp<sub_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) { return _mm512_sub_ps(a, b); }
};
template <>
struct LaneOp<mul_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) { return _mm512_mul_ps(a, b); }
};
template <>
struct LaneOp<div_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) { return _mm512_div_ps(a, b); }
};
/// maximum_op's ((a > b) | (a != a)) ? a : b: a where a > b or a is NaN, else b.
template <>
struct LaneOp<maximum_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) {
        const __mmask16 take_a = _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        return _mm512_mask_mov_ps(b, take_a, a);
    }
};
template <>
struct LaneOp<minimum_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a, Lanes b) {
        const __mmask16 take_a = _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        return _mm512_mask_mov_ps(b, take_a, a);
    }
};
/// -a flips the sign bit, NaN's included.
template <>
struct LaneOp<neg_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a) {
        return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
    }
};
/// std::fabs clears the sign bit, NaN's included.
template <>
struct LaneOp<abs_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a) {
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MAX)));
    }
};
template <>
struct LaneOp<sqrt_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a) { return _mm512_mask_sqrt_ps(a, 0xFFFF, a); }  // see exp_lanes
};
template <>
struct LaneOp<rsqrt_op> {
    static constexpr bool ok = true, cheaper = false;
    static Lanes apply(Lanes a) { return _mm512_div_ps(splat(1.0f), _mm512_mask_sqrt_ps(a, 0xFFFF, a)); }
};
template <>
struct LaneOp<exp_op> {
    static constexpr bool ok = true, cheaper = true;
    static Lanes apply(Lanes a) { return exp_lanes(a); }
};

#endif  // TS_FUSED_LANES

/// out[i] = Op(in[i]) for i in [0, N) (a unary op on a whole tile): by Op's lane form 16 at a
/// time where it is cheaper, the rest (or all) by element(i), Op's elementwise form.
template <class Op, int N, class T, class U, class Element>
[[gnu::always_inline]] inline void map_elements(const T *in, U *out, const Element &element) {
#if TS_FUSED_LANES
    if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float> && LaneOp<Op>::cheaper && N >= kLanes) {
        constexpr int body = N / kLanes * kLanes;
        for (int i = 0; i < body; i += kLanes) store_lanes(out + i, LaneOp<Op>::apply(load_lanes(in + i)));
        for (int i = body; i < N; ++i) out[i] = element(i);
        return;
    }
#endif
    (void)in;
    for (int i = 0; i < N; ++i) out[i] = element(i);
}

/// out[0 .. N) = f(r, c0 + 0 .. N): by f's lane forms 16 at a time where they are cheaper, the
/// rest (or all) elementwise.
template <int N, class T, class F>
[[gnu::always_inline]] inline void compute_cols(const F &f, int r, int c0, T *out) {
#if TS_FUSED_LANES
    if constexpr (lanes_cheaper_v<F> && N >= kLanes) {
        constexpr int body = N / kLanes * kLanes;
        for (int c = 0; c < body; c += kLanes) store_lanes(out + c, f.lanes_at(r, c0 + c));
        for (int c = body; c < N; ++c) out[c] = f(r, c0 + c);
        return;
    }
#endif
    for (int c = 0; c < N; ++c) out[c] = f(r, c0 + c);
}

}  // namespace ts::detail
