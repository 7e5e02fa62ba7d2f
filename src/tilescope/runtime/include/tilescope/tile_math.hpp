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
// Edge cases follow IEEE/C99: overflow to Inf, gradual underflow through subnormals, NaN in
// NaN out, signed zeros kept. Max error over all 2^32 float inputs against libm in double
// (g++ 12, AVX2+FMA): exp 0.988, log 0.827, tanh 0.5003, sigmoid 0.5001, silu 0.5001 ulp.
// tests/test_tile_lib.py checks a sweep of ~1M values and the special cases.
//
// Double versions call std:: functions (libm) and use torch's formulas for sigmoid/silu
// (silu(-Inf) = -0 here too).
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
/// product stays normal (exact), only the second may round into the subnormal range.
inline float scale_pow2(float m, int32_t k) {
    const int32_t k1 = k / 2;
    return (m * pow2i(k1)) * pow2i(k - k1);
}

/// e^x = mant * 2^exp2 with mant in [0.7, 1.42], for x in [-112, 104] (or NaN, giving a NaN
/// mant). This is SLEEF's expf_u10 step by step: x = k ln2 + s with |s| <= ln2 / 2, e^s by a
/// degree-7 polynomial.
struct ExpParts {
    float mant;
    int32_t exp2;
};

inline ExpParts exp_parts(float x) {
    constexpr float shifter = 12582912.0f;  // 1.5 * 2^23: kf + shifter keeps kf in the low mantissa bits
    const float kf = std::nearbyint(x * 1.442695040888963407f);
    const int32_t k = static_cast<int32_t>(bits_of(kf + shifter) - bits_of(shifter));
    float s = fmadd(kf, -0.693145751953125f, x);  // ln2 split in two parts (Cody-Waite)
    s = fmadd(kf, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmadd(u, s, 0.00139304355252534151077271f);
    u = fmadd(u, s, 0.00833336077630519866943359f);
    u = fmadd(u, s, 0.0416664853692054748535156f);
    u = fmadd(u, s, 0.166666671633720397949219f);
    u = fmadd(u, s, 0.5f);
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

/// e^y - 1 in double for y in [-230, 230] (or NaN), relative error below 2^-34. The float
/// functions built on it (tanh, sigmoid, silu) do their last steps in double too, so their
/// only significant error is the final rounding to float.
/// y = k ln2 + s with |s| <= ln2 / 2; e^y - 1 = 2^k expm1(s) + (2^k - 1), expm1(s) by its
/// Taylor series to s^9 / 9!.
inline double expm1_wide(double y) {
    y = clamp_keep_nan(y, -230.0, 230.0);
    constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52
    const double kd = std::nearbyint(y * 1.4426950408889634074);
    uint64_t t_bits, shifter_bits;
    const double t = kd + shifter;
    std::memcpy(&t_bits, &t, sizeof t);
    std::memcpy(&shifter_bits, &shifter, sizeof shifter);
    const uint64_t k = t_bits - shifter_bits;  // kd as a two's complement integer
    const uint64_t pow2_bits = (k + 1023u) << 52;
    double two_k;
    std::memcpy(&two_k, &pow2_bits, sizeof two_k);
    const double s = fmadd(kd, -0.69314718055994530942, y);
    double q = 1.0 / 362880;
    q = fmadd(q, s, 1.0 / 40320);
    q = fmadd(q, s, 1.0 / 5040);
    q = fmadd(q, s, 1.0 / 720);
    q = fmadd(q, s, 1.0 / 120);
    q = fmadd(q, s, 1.0 / 24);
    q = fmadd(q, s, 1.0 / 6);
    q = fmadd(q, s, 0.5);
    const double expm1_s = fmadd(s * s, q, s);
    return fmadd(two_k, expm1_s, two_k - 1.0);
}

}  // namespace detail

/// e^x. Overflows to +Inf above ~88.72, underflows through subnormals to +0 below ~-103.97.
inline float exp(float x) {
    const detail::ExpParts p = detail::exp_parts(detail::clamp_keep_nan(x, -112.0f, 104.0f));
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

inline double exp(double x) { return std::exp(x); }
inline double log(double x) { return std::log(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x == -HUGE_VAL ? -0.0 : x / (1.0 + std::exp(-x)); }

}  // namespace ts::fmath
