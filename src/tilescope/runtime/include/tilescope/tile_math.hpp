// tilescope tile library: scalar transcendental functions that vectorize.
//
// g++ does not vectorize calls to libm's expf/logf/tanhf without -ffast-math, so the float
// versions here are branch-free (special cases by selects, not branches), and a loop calling
// them vectorizes:
//  - exp: SLEEF's expf_u10 algorithm; <= 1 ulp.
//  - log: Cephes' logf reduction and polynomial; <= 1 ulp.
//  - tanh, sigmoid, silu: one formula each on top of expm1 evaluated in double precision
//    (error < 2^-34), so the final rounding to float is the only significant error (<= 0.51
//    ulp: correctly rounded except for rare near-ties).
//  - exp2, log2, erf, gelu, gelu_tanh, pow: the same way, all in double (2^y with an exact
//    base-2 reduction, log2 by an atanh series, erf/erfc by fitted polynomials), then rounded
//    once; gelu goes through erfc and gelu_tanh through expm1, so neither cancels for x < 0.
//    Exact where the result is (exp2 of an integer, log2 of a power of two, pow(2, -150) = +0
//    by ties-to-even).
//  - softplus, log1p: the same way: softplus as max(x, 0) + log1p(e^-|x|) (two non-negative
//    terms) and x itself above torch's threshold 20; log1p through 1 + x = u + r split exactly
//    into a float u and its rounding error r, log(u) + log1p(r / u).
//  - expm1, elu, selu, hardsigmoid, hardswish, mish, softsign, logsigmoid: torch's formulas in
//    double on the helpers above (expm1 for the ELUs, softplus and tanh through log1p and expm1
//    for mish, max(x, 0) - log1p(e^-|x|) for logsigmoid), rounded once; at +-Inf the limits.
// Edge cases follow IEEE/C99: overflow to Inf, gradual underflow through subnormals, NaN in
// NaN out, signed zeros kept. Max error over all 2^32 float inputs against libm in double
// (g++ 12, AVX2+FMA): exp 0.988, log 0.827, tanh 0.5003, sigmoid 0.5001, silu 0.5001 ulp;
// (g++ 12, AVX-512+FMA; the same on every 7th input without FMA or AVX): exp2 0.5001,
// log2 0.5000, erf 0.5000, gelu 0.5001, gelu_tanh 0.5001 ulp against float64 references
// (0.5 x erfc(-x / sqrt2), x sigmoid(2z)); pow 0.5001 ulp over 8.2e7 random pairs (results
// over the whole float range, subnormals included) against libm's double pow; softplus
// 0.5001 and log1p 0.5000 ulp over all 2^32 floats against libm's double log1p (g++ 12,
// AVX-512+FMA; the same on every 7th input without FMA or AVX).
// tests/runtime/test_tile_lib.py checks a sweep of ~1M values and the special cases.
// Speed (one core, AVX-512, ns per element): exp2 0.6, log2 0.6, erf 1.0, gelu 1.3,
// gelu_tanh 0.8, pow 2.0 (libm's scalar powf: 2.9).
//
// Double versions call std:: functions (libm) and use torch's formulas for sigmoid/silu
// (silu(-Inf) = -0 here too); gelu(x) = x/2 erfc(-x / sqrt2) and gelu_tanh(x) = x sigmoid(2z)
// there as well, with gelu(-Inf) = gelu_tanh(-Inf) = -0; softplus(x) = x > 20 ? x : log1p(e^x)
// as torch's, log1p is std::log1p.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <tilescope/tile_types.hpp>

namespace ts::fmath {

namespace detail {

using ts::detail::bits_of;
using ts::detail::float_of_bits;
using ts::detail::select;

/// a * b + c, fused (one rounding) where the CPU has FMA.
inline float fmadd(float a, float b, float c) {
#ifdef __FMA__
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

/// 2^k for k in [-126, 127].
inline float pow2i(int32_t k) { return float_of_bits((static_cast<uint32_t>(k) + 127u) << 23); }

/// m * 2^k for m in [0.3, 200] and k in [-170, 170], with a single rounding: the first
/// product stays normal (exact), only the second may round into the subnormal range. (k1 is
/// floor(k / 2), an arithmetic shift: any split whose first product is exact rounds alike.)
inline float scale_pow2(float m, int32_t k) {
    const int32_t k1 = k >> 1;
    return (m * pow2i(k1)) * pow2i(k - k1);
}

/// SLEEF expf_u10's constants: x is clamped to [lo, hi] (NaN stays NaN), x = k ln2 + s with
/// k = nearbyint(x log2e) and ln2 = ln2_hi + ln2_lo (Cody-Waite), e^s = 1 + s + s^2 P(s) with
/// P's coefficients in poly, the highest degree first. tile_lanes.hpp's 16-lane exp takes them too.
struct ExpConst {
    static constexpr float lo = -112.0f, hi = 104.0f;
    static constexpr float log2e = 1.442695040888963407f;
    static constexpr float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187045e-06f;
    static constexpr float poly[6] = {0.000198527617612853646278381f, 0.00139304355252534151077271f,
                                      0.00833336077630519866943359f,  0.0416664853692054748535156f,
                                      0.166666671633720397949219f,    0.5f};
};

/// e^x = mant * 2^exp2 with mant in [0.7, 1.42], for x in [-112, 104] (or NaN, giving a NaN
/// mant). This is SLEEF's expf_u10 step by step: x = k ln2 + s with |s| <= ln2 / 2, e^s by a
/// degree-7 polynomial.
struct ExpParts {
    float mant;
    int32_t exp2;
};

inline ExpParts exp_parts(float x) {
    using E = ExpConst;
    constexpr float shifter = 12582912.0f;  // 1.5 * 2^23: kf + shifter keeps kf in the low mantissa bits
    const float kf = std::nearbyint(x * E::log2e);
    const int32_t k = static_cast<int32_t>(bits_of(kf + shifter) - bits_of(shifter));
    float s = fmadd(kf, -E::ln2_hi, x);
    s = fmadd(kf, -E::ln2_lo, s);
    float u = E::poly[0];
    for (int i = 1; i < 6; ++i) u = fmadd(u, s, E::poly[i]);
    u = 1.0f + fmadd(s * s, u, s);
    return {u, k};
}

/// x clamped to [lo, hi]; NaN stays NaN.
template <class F>
inline F clamp_keep_nan(F x, F lo, F hi) {
    x = select(x > hi, hi, x);
    return select(x < lo, lo, x);
}

inline double fmadd(double a, double b, double c) {
#ifdef __FMA__
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

/// 2^k and expm1(s), the parts of 2^k (1 + expm1(s)) = 2^k e^s.
struct ExpWideParts {
    double two_k;
    double expm1_s;
};

/// The parts for an integer-valued kd in [-1020, 1020] and |s| <= ln2 / 2 (or NaN): expm1(s) by
/// its Taylor series to s^9 / 9! (relative error below 2^-34).
[[gnu::always_inline]] inline ExpWideParts pow2_expm1(double kd, double s) {
    constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52
    uint64_t t_bits, shifter_bits;
    const double t = kd + shifter;
    std::memcpy(&t_bits, &t, sizeof t);
    std::memcpy(&shifter_bits, &shifter, sizeof shifter);
    const uint64_t k = t_bits - shifter_bits;  // kd as a two's complement integer
    const uint64_t pow2_bits = (k + 1023u) << 52;
    double two_k;
    std::memcpy(&two_k, &pow2_bits, sizeof two_k);
    double q = 1.0 / 362880;
    q = fmadd(q, s, 1.0 / 40320);
    q = fmadd(q, s, 1.0 / 5040);
    q = fmadd(q, s, 1.0 / 720);
    q = fmadd(q, s, 1.0 / 120);
    q = fmadd(q, s, 1.0 / 24);
    q = fmadd(q, s, 1.0 / 6);
    q = fmadd(q, s, 0.5);
    return {two_k, fmadd(s * s, q, s)};
}

/// e^y = 2^k e^s for y in [-700, 700] (or NaN): y = k ln2 + s with |s| <= ln2 / 2.
[[gnu::always_inline]] inline ExpWideParts exp_wide_parts(double y) {
    const double kd = std::nearbyint(y * 1.4426950408889634074);
    return pow2_expm1(kd, fmadd(kd, -0.69314718055994530942, y));
}

/// 2^y in double for y clamped to [-200, 200] (NaN stays NaN), relative error below 2^-34 and
/// exact for integer y: y = k + f with |f| <= 1/2, 2^f = e^{f ln2}.
inline double exp2_wide(double y) {
    y = clamp_keep_nan(y, -200.0, 200.0);
    const double kd = std::nearbyint(y);
    const ExpWideParts p = pow2_expm1(kd, (y - kd) * 0.69314718055994530942);
    return fmadd(p.two_k, p.expm1_s, p.two_k);
}

/// e^y - 1 in double for y in [-230, 230] (or NaN), relative error below 2^-34. The float
/// functions built on it (tanh, sigmoid, silu) do their last steps in double too, so their
/// only significant error is the final rounding to float.
inline double expm1_wide(double y) {
    const ExpWideParts p = exp_wide_parts(clamp_keep_nan(y, -230.0, 230.0));
    return fmadd(p.two_k, p.expm1_s, p.two_k - 1.0);
}

/// e^y in double for y clamped to [-700, 700] (NaN stays NaN), relative error below 2^-34.
inline double exp_wide(double y) {
    const ExpWideParts p = exp_wide_parts(clamp_keep_nan(y, -700.0, 700.0));
    return fmadd(p.two_k, p.expm1_s, p.two_k);
}

/// log2(x) in double for a finite x > 0 (other inputs give a meaningless finite number; the
/// callers select their special values), relative error below 2^-45.
/// x = m * 2^e with m in [sqrt(1/2), sqrt(2)]; log2(m) = (2 / ln2) atanh(u), u = (m - 1) / (m + 1)
/// (|u| <= 0.1716), by its series to u^19.
[[gnu::always_inline]] inline double log2_wide(float x) {
    const bool subnormal = x < 1.17549435e-38f;
    const float xs = select(subnormal, x * 33554432.0f, x);  // * 2^25 makes subnormals normal
    const uint32_t b = bits_of(xs);
    int32_t e = static_cast<int32_t>((b >> 23) & 0xFFu) - 127;  // xs = m * 2^e, m in [1, 2)
    float m = float_of_bits((b & 0x007FFFFFu) | 0x3F800000u);
    const bool high = m > 1.41421356f;
    e = select(high, e + 1, e);
    m = select(high, m * 0.5f, m);  // exact
    e = select(subnormal, e - 25, e);
    const double md = m;
    const double u = (md - 1.0) / (md + 1.0);
    const double u2 = u * u;
    constexpr double k = 2.8853900817779268147;  // 2 / ln2
    double q = k / 19;
    q = fmadd(q, u2, k / 17);
    q = fmadd(q, u2, k / 15);
    q = fmadd(q, u2, k / 13);
    q = fmadd(q, u2, k / 11);
    q = fmadd(q, u2, k / 9);
    q = fmadd(q, u2, k / 7);
    q = fmadd(q, u2, k / 5);
    q = fmadd(q, u2, k / 3);
    q = fmadd(q, u2, k);
    return fmadd(u, q, static_cast<double>(e));
}

/// log(1 + z) in double for z in [0, 1] (or NaN), relative error below 2^-46: 2 atanh(w) with
/// w = z / (2 + z) in [0, 1/3], by its series to w^27.
[[gnu::always_inline]] inline double log1p_unit(double z) {
    const double w = z / (2.0 + z);
    const double w2 = w * w;
    double q = 2.0 / 27;
    q = fmadd(q, w2, 2.0 / 25);
    q = fmadd(q, w2, 2.0 / 23);
    q = fmadd(q, w2, 2.0 / 21);
    q = fmadd(q, w2, 2.0 / 19);
    q = fmadd(q, w2, 2.0 / 17);
    q = fmadd(q, w2, 2.0 / 15);
    q = fmadd(q, w2, 2.0 / 13);
    q = fmadd(q, w2, 2.0 / 11);
    q = fmadd(q, w2, 2.0 / 9);
    q = fmadd(q, w2, 2.0 / 7);
    q = fmadd(q, w2, 2.0 / 5);
    q = fmadd(q, w2, 2.0 / 3);
    q = fmadd(q, w2, 2.0);
    return w * q;
}

/// erf(a) and erfc(a) in double for a >= 0 (or NaN), each with relative error below 2^-33
/// (mostly exp_wide's).
/// For a < 1, erf(a) = a P(a^2) (P: degree 9, fitted to 2e-14) and erfc = 1 - erf; for a >= 1,
/// erfc(a) = e^{-a^2} Q(t), t = 3 / (3 + a) (Q: degree 14, fitted to exp(a^2) erfc(a) on
/// [1, 20] to 7e-13) and erf = 1 - erfc. a is clamped to 20 (erfc(20) < 1e-175).
struct ErfWide {
    double erf;
    double erfc;
};

// NOTE: always_inline: g++ does not inline it into a loop by itself, and a loop with a call
// does not vectorize (erf ran 40x slower).
[[gnu::always_inline]] inline ErfWide erf_wide(double a) {
    a = clamp_keep_nan(a, 0.0, 20.0);
    const double s = a * a;
    double p = -1.047404706468402e-07;
    p = fmadd(p, s, 1.5308587676402488e-06);
    p = fmadd(p, s, -1.4795444879655714e-05);
    p = fmadd(p, s, 0.00012046302841704197);
    p = fmadd(p, s, -0.00085479361672860239);
    p = fmadd(p, s, 0.0052239672767340414);
    p = fmadd(p, s, -0.026866169066478183);
    p = fmadd(p, s, 0.11283791658697839);
    p = fmadd(p, s, -0.37612638902813694);
    p = fmadd(p, s, 1.1283791670954941);
    const double erf_small = a * p;
    const double t = 3.0 / (3.0 + a);
    double q = 0.0046800592899432667;
    q = fmadd(q, t, -0.051795897134050854);
    q = fmadd(q, t, 0.20034934416511174);
    q = fmadd(q, t, -0.37806852500093985);
    q = fmadd(q, t, 0.39790394517356242);
    q = fmadd(q, t, -0.30207968831548343);
    q = fmadd(q, t, 0.19302364415763354);
    q = fmadd(q, t, -0.010215203391858357);
    q = fmadd(q, t, 0.1124698602271023);
    q = fmadd(q, t, 0.1226152483525324);
    q = fmadd(q, t, 0.15745372064117982);
    q = fmadd(q, t, 0.17753029714168986);
    q = fmadd(q, t, 0.18806977603482061);
    q = fmadd(q, t, 0.18806288886670675);
    q = fmadd(q, t, 6.416845860224285e-09);
    const double erfc_large = exp_wide(-s) * q;
    const bool small = a < 1.0;
    return {select(small, erf_small, 1.0 - erfc_large), select(small, 1.0 - erf_small, erfc_large)};
}

}  // namespace detail

/// e^x. Overflows to +Inf above ~88.72, underflows through subnormals to +0 below ~-103.97.
inline float exp(float x) {
    const detail::ExpParts p = detail::exp_parts(detail::clamp_keep_nan(x, detail::ExpConst::lo, detail::ExpConst::hi));
    return detail::scale_pow2(p.mant, p.exp2);
}

/// Natural logarithm. log(+-0) = -Inf, log(x < 0) = NaN, log(+Inf) = +Inf.
/// Cephes logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f).
inline float log(float x) {
    using detail::fmadd;
    const bool subnormal = x < 1.17549435e-38f;  // also true for 0 and negatives (fixed below)
    const float xs = detail::select(subnormal, x * 33554432.0f, x);  // * 2^25 makes subnormals normal
    const uint32_t b = detail::bits_of(xs);
    int32_t e = static_cast<int32_t>((b >> 23) & 0xFFu) - 126;  // xs = m * 2^e, m in [0.5, 1)
    float m = detail::float_of_bits((b & 0x007FFFFFu) | 0x3F000000u);
    const bool low = m < 0.707106781186547524f;
    e = detail::select(low, e - 1, e);
    m = detail::select(low, m + m, m);
    const float f = m - 1.0f;  // exact
    const float fe = static_cast<float>(detail::select(subnormal, e - 25, e));
    const float z = f * f;
    float p = 7.0376836292e-2f;
    p = fmadd(p, f, -1.1514610310e-1f);
    p = fmadd(p, f, 1.1676998740e-1f);
    p = fmadd(p, f, -1.2420140846e-1f);
    p = fmadd(p, f, 1.4249322787e-1f);
    p = fmadd(p, f, -1.6668057665e-1f);
    p = fmadd(p, f, 2.0000714765e-1f);
    p = fmadd(p, f, -2.4999993993e-1f);
    p = fmadd(p, f, 3.3333331174e-1f);
    float y = p * f * z;
    y = fmadd(fe, -2.12194440e-4f, y);  // ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
    y = fmadd(z, -0.5f, y);
    float r = f + y;
    r = fmadd(fe, 0.693359375f, r);
    const float inf = std::numeric_limits<float>::infinity();
    r = detail::select(x == inf, inf, r);
    r = detail::select(x == 0.0f, -inf, r);
    r = detail::select(x < 0.0f, std::numeric_limits<float>::quiet_NaN(), r);
    return detail::select(x != x, x, r);
}

/// Hyperbolic tangent: sign(x) * m / (m + 2) with m = e^{2|x|} - 1, in double.
/// tanh(+-0) = +-0, tanh(+-Inf) = +-1.
inline float tanh(float x) {
    const double m = detail::expm1_wide(2.0 * std::fabs(static_cast<double>(x)));
    return static_cast<float>(std::copysign(m / (m + 2.0), static_cast<double>(x)));
}

/// 1 / (1 + e^-x) = 1 / (2 + expm1(-x)), in double: accurate down to subnormal results.
inline float sigmoid(float x) {
    return static_cast<float>(1.0 / (2.0 + detail::expm1_wide(-static_cast<double>(x))));
}

/// x * sigmoid(x) = x / (2 + expm1(-x)), in double. silu(-Inf) = -0 (the limit; torch's
/// formula gives NaN there).
inline float silu(float x) {
    const double xd = detail::clamp_keep_nan(static_cast<double>(x), -230.0, HUGE_VAL);
    return static_cast<float>(xd / (2.0 + detail::expm1_wide(-xd)));
}

/// 2^x in double, rounded once; exact for integer x. Overflows to +Inf from 128, underflows
/// through subnormals to +0 (2^-150, halfway to the smallest subnormal, rounds to +0).
inline float exp2(float x) { return static_cast<float>(detail::exp2_wide(static_cast<double>(x))); }

/// Base-2 logarithm, in double then rounded once; exact for powers of two.
/// log2(+-0) = -Inf, log2(x < 0) = NaN, log2(+Inf) = +Inf.
inline float log2(float x) {
    const float inf = std::numeric_limits<float>::infinity();
    float r = static_cast<float>(detail::log2_wide(x));
    r = detail::select(x == inf, inf, r);
    r = detail::select(x == 0.0f, -inf, r);
    r = detail::select(x < 0.0f, std::numeric_limits<float>::quiet_NaN(), r);
    return detail::select(x != x, x, r);
}

/// The error function, in double then rounded once. erf(+-0) = +-0, erf(+-Inf) = +-1.
inline float erf(float x) {
    const double a = std::fabs(static_cast<double>(x));
    return static_cast<float>(std::copysign(detail::erf_wide(a).erf, static_cast<double>(x)));
}

/// torch's exact GELU, x/2 (1 + erf(x / sqrt2)), computed as x/2 erfc(-x / sqrt2) in double so
/// that nothing cancels for negative x (the result keeps its relative accuracy down to the
/// subnormals). gelu(+Inf) = +Inf; gelu(-Inf) = -0, the limit, which torch gives for large
/// negative finite x (at -Inf itself torch's x/2 (1 + erf) is -Inf * 0 = NaN).
inline float gelu(float x) {
    // NOTE: below -40 the result is far below the float subnormals; clamping keeps -Inf from
    // meeting erfc's 0 (-Inf * 0 = NaN).
    const double xd = detail::clamp_keep_nan(static_cast<double>(x), -40.0, HUGE_VAL);
    const double erfc_a = detail::erf_wide(std::fabs(xd) * 0.70710678118654752440).erfc;
    return static_cast<float>(0.5 * xd * detail::select(xd < 0.0, erfc_a, 2.0 - erfc_a));
}

/// torch's approximate='tanh' GELU, x/2 (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3),
/// computed as x / (2 + expm1(-2z)) in double (the same value without 1 + tanh's cancellation
/// for negative x). gelu_tanh(+Inf) = +Inf, gelu_tanh(-Inf) = -0 (the limit, as for gelu).
inline float gelu_tanh(float x) {
    const double xd = detail::clamp_keep_nan(static_cast<double>(x), -30.0, HUGE_VAL);
    const double two_z = 1.5957691216057307117 * detail::fmadd(0.044715 * xd, xd * xd, xd);
    return static_cast<float>(xd / (2.0 + detail::expm1_wide(-two_z)));
}

/// 1 / x, one correctly rounded division.
inline float reciprocal(float x) { return 1.0f / x; }

/// log(1 + x). 1 + x = u + r exactly, with u = 1 + x rounded to float and r its rounding error
/// (itself a float), so log1p(x) = log(u) + log1p(t) with t = r / u (|t| <= 2^-24): ln2 log2(u)
/// plus t - t^2/2, in double, then rounded once. Exact for x = +-0 (log1p(-0) = -0);
/// log1p(-1) = -Inf, log1p(x < -1) = NaN, log1p(+Inf) = +Inf.
inline float log1p(float x) {
    const float inf = std::numeric_limits<float>::infinity();
    const float u = 1.0f + x;
    const double ud = static_cast<double>(u);
    const double t = (static_cast<double>(x) - (ud - 1.0)) / ud;
    const double l = detail::fmadd(detail::log2_wide(u), 0.69314718055994530942, detail::fmadd(-0.5 * t, t, t));
    float r = static_cast<float>(l);
    r = detail::select(x == inf, inf, r);
    r = detail::select(x == -1.0f, -inf, r);
    r = detail::select(x < -1.0f, std::numeric_limits<float>::quiet_NaN(), r);
    r = detail::select(x == 0.0f, x, r);
    return detail::select(x != x, x, r);
}

/// torch's softplus (beta 1, threshold 20): x for x > 20, else log(1 + e^x), computed as
/// max(x, 0) + log1p(e^-|x|) in double (a sum of two non-negative terms: nothing cancels, and
/// the result keeps its relative accuracy down to the subnormals), then rounded once.
/// softplus(-Inf) = +0, softplus(+Inf) = +Inf, NaN in NaN out.
inline float softplus(float x) {
    const double xd = static_cast<double>(x);
    const double r = detail::select(xd > 0.0, xd, 0.0) + detail::log1p_unit(detail::exp_wide(-std::fabs(xd)));
    return detail::select(x > 20.0f, x, static_cast<float>(r));
}

/// e^x - 1 in double, rounded once: accurate near 0 (expm1(-0) = -0), -1 from about -17 on,
/// +Inf from about 88.7.
inline float expm1(float x) {
    const float r = static_cast<float>(detail::expm1_wide(static_cast<double>(x)));
    return detail::select(x == 0.0f, x, r);
}

/// torch's ELU with alpha 1: x for x >= 0 (-0 kept), else e^x - 1.
inline float elu(float x) {
    const float r = static_cast<float>(detail::expm1_wide(static_cast<double>(x)));
    return detail::select(x >= 0.0f, x, r);
}

/// torch's SELU: scale x for x >= 0, else scale alpha (e^x - 1), in double, rounded once.
inline float selu(float x) {
    constexpr double scale = 1.0507009873554804934193349852946, alpha = 1.6732632423543772848170429916717;
    const double xd = static_cast<double>(x);
    return static_cast<float>(detail::select(xd >= 0.0, scale * xd, scale * alpha * detail::expm1_wide(xd)));
}

/// torch's hardsigmoid: min(max(x + 3, 0), 6) / 6, in double, rounded once (NaN in NaN out).
inline float hardsigmoid(float x) {
    return static_cast<float>(detail::clamp_keep_nan(static_cast<double>(x) + 3.0, 0.0, 6.0) / 6.0);
}

/// torch's hardswish: x min(max(x + 3, 0), 6) / 6, in double, rounded once; -0 for x <= -3
/// (the limit at -Inf too, where torch's formula gives NaN).
inline float hardswish(float x) {
    const double xd = static_cast<double>(x);
    const double r = xd * detail::clamp_keep_nan(xd + 3.0, 0.0, 6.0) / 6.0;
    return detail::select(x <= -3.0f, -0.0f, static_cast<float>(r));
}

/// torch's mish: x tanh(softplus(x)), in double (softplus as max(x, 0) + log1p(e^-|x|), tanh(s)
/// as m / (m + 2) with m = expm1(2s): nothing cancels), rounded once. x is clamped below at
/// -200, where the result is -0 already: mish(-Inf) = -0, the limit (torch's formula gives NaN).
inline float mish(float x) {
    const double xd = detail::clamp_keep_nan(static_cast<double>(x), -200.0, HUGE_VAL);
    const double sp = detail::select(xd > 0.0, xd, 0.0) + detail::log1p_unit(detail::exp_wide(-std::fabs(xd)));
    const double m = detail::expm1_wide(2.0 * sp);
    return static_cast<float>(xd * (m / (m + 2.0)));
}

/// torch's softsign: x / (1 + |x|), in double, rounded once; +-1 at +-Inf (the limits, where
/// torch's formula gives NaN).
inline float softsign(float x) {
    const double xd = static_cast<double>(x);
    const float r = static_cast<float>(xd / (1.0 + std::fabs(xd)));
    return detail::select(std::fabs(x) == std::numeric_limits<float>::infinity(), std::copysign(1.0f, x), r);
}

/// torch's logsigmoid: log(1 / (1 + e^-x)) = min(x, 0) - log1p(e^-|x|), in double, rounded once;
/// +0 from |x| > 745 on, where e^-|x| is 0 in double (as torch's float64 formula gives).
inline float logsigmoid(float x) {
    const double xd = static_cast<double>(x);
    const double tail = detail::log1p_unit(detail::exp_wide(-std::fabs(xd)));
    const double r = detail::select(xd < 0.0, xd, 0.0) - detail::select(std::fabs(xd) > 745.0, 0.0, tail);
    return static_cast<float>(detail::select(xd != xd, xd, r));
}

/// x^y with C99's (and torch's) special cases: pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN,
/// pow(-1, +-Inf) = 1, a negative finite x with a non-integer y gives NaN, an odd integer y
/// keeps x's sign (pow(-0, -3) = -Inf), pow(+-0, y < 0) = +Inf otherwise, and the limits at
/// +-Inf. The magnitude is 2^{y log2|x|} in double (|y log2|x|| < 150 where the result is a
/// nonzero finite float; relative error below 2^-33, and none when y log2|x| is an integer),
/// rounded once; pow(x, 2) is x * x, correctly rounded.
inline float pow(float x, float y) {
    using detail::select;
    const float inf = std::numeric_limits<float>::infinity();
    const float ax = std::fabs(x), ay = std::fabs(y);
    double l = detail::log2_wide(ax);
    l = select(ax == inf, static_cast<double>(HUGE_VAL), l);
    l = select(ax == 0.0f, -static_cast<double>(HUGE_VAL), l);
    l = select(ax != ax, static_cast<double>(ax), l);
    float r = static_cast<float>(detail::exp2_wide(static_cast<double>(y) * l));
    // NOTE: the integer tests go through an int32 conversion and bit masks, not std::trunc or
    // selects of bools: with those g++ 12 does not vectorize the loop.
    const bool y_small = ay < 16777216.0f;  // from 2^24 on every float is an even integer
    const int32_t y_i = static_cast<int32_t>(select(y_small, y, 0.0f));
    const bool y_int = (y_small & (static_cast<float>(y_i) == y)) | (!y_small & (y == y));  // +-Inf too
    const uint32_t odd_sign = (static_cast<uint32_t>(y_i) << 31) & select(y_int, 0x80000000u, 0u);
    r = detail::float_of_bits(detail::bits_of(r) | (detail::bits_of(x) & odd_sign));
    r = select((x < 0.0f) & (x != -inf) & !y_int, std::numeric_limits<float>::quiet_NaN(), r);
    // x^2 is the one exponent whose exact result (48 bits) can sit on or next to a midpoint of
    // two floats, where 2^-33 is not enough to round it the right way: x * x rounds it exactly.
    r = select(y == 2.0f, x * x, r);
    return select((y == 0.0f) | (x == 1.0f) | ((x == -1.0f) & (ay == inf)), 1.0f, r);
}

inline double exp(double x) { return std::exp(x); }
inline double log(double x) { return std::log(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x == -HUGE_VAL ? -0.0 : x / (1.0 + std::exp(-x)); }
inline double exp2(double x) { return std::exp2(x); }
inline double log2(double x) { return std::log2(x); }
inline double erf(double x) { return std::erf(x); }
inline double gelu(double x) { return x == -HUGE_VAL ? -0.0 : 0.5 * x * std::erfc(-x * 0.70710678118654752440); }
inline double gelu_tanh(double x) {
    const double two_z = 1.5957691216057307117 * (x + 0.044715 * x * x * x);
    return x == -HUGE_VAL ? -0.0 : x / (1.0 + std::exp(-two_z));
}
inline double reciprocal(double x) { return 1.0 / x; }
inline double log1p(double x) { return std::log1p(x); }
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
inline double pow(double x, double y) { return std::pow(x, y); }
inline double expm1(double x) { return std::expm1(x); }
inline double elu(double x) { return x >= 0.0 ? x : std::expm1(x); }
inline double selu(double x) {
    constexpr double scale = 1.0507009873554804934193349852946, alpha = 1.6732632423543772848170429916717;
    return x >= 0.0 ? scale * x : scale * alpha * std::expm1(x);
}
inline double hardsigmoid(double x) { return x != x ? x : std::fmin(std::fmax(x + 3.0, 0.0), 6.0) / 6.0; }
inline double hardswish(double x) { return x <= -3.0 ? -0.0 : x * std::fmin(std::fmax(x + 3.0, 0.0), 6.0) / 6.0; }
inline double mish(double x) {
    if (x == -HUGE_VAL) return -0.0;
    const double sp = x > 20.0 ? x : std::log1p(std::exp(x));
    return x * std::tanh(sp);
}
inline double softsign(double x) { return std::isinf(x) ? std::copysign(1.0, x) : x / (1.0 + std::fabs(x)); }
inline double logsigmoid(double x) { return (x < 0.0 ? x : 0.0) - std::log1p(std::exp(-std::fabs(x))); }

}  // namespace ts::fmath
