// tilescope tile library: cast<U>(tile, mode).
//
// Conversion rules (torch's, except where torch is undefined):
//  - floating -> integer: round with `mode` (default rint = nearest, ties to even), then
//    SATURATE to U's range: values above the range (and +Inf) give U's max, below (and -Inf)
//    U's min, and NaN gives 0. (torch leaves these undefined; on x86 it returns garbage such
//    as INT_MIN, or wraps for int8/uint8.)
//  - floating -> floating: round with `mode`, as IEEE 754 defines it: rint to nearest, ties
//    to even (double -> bf16/f16 goes through float, as c10 does); round to nearest, ties away
//    from zero; floor toward -Inf; ceil toward +Inf; trunc toward zero. Past the largest finite
//    value, rint and round give Inf, floor/ceil/trunc the largest finite value or Inf by their
//    direction; a zero result keeps the input's sign; NaN stays NaN. Exact for widening casts.
//  - integer -> floating: exact when representable, else round to nearest even.
//  - integer -> integer: wrap around (two's complement), as torch.
//  - anything -> bool: `!= 0` (NaN -> true); bool -> anything: 0 or 1.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include <tilescope/tile_core.hpp>

namespace ts {

namespace detail {

/// x rounded to an integral value with mode M; NaN and Inf pass through. Only
/// std::nearbyint and selects are used, because g++ vectorizes those but not floor/ceil/
/// trunc/round without -fno-trapping-math.
template <RoundMode M, class F>
inline F round_integral(F x) {
    const F r = std::nearbyint(x);  // ties to even; exact for |x| >= 2^(digits-1)
    if constexpr (M == RoundMode::rint) {
        return r;
    } else if constexpr (M == RoundMode::floor) {
        return select(r > x, r - F(1), r);
    } else if constexpr (M == RoundMode::ceil) {
        return select(r < x, r + F(1), r);
    } else {
        const F down = select(r > x, r - F(1), r);  // floor
        const F up = select(r < x, r + F(1), r);    // ceil
        const F t = select(x < F(0), up, down);     // trunc
        if constexpr (M == RoundMode::trunc) {
            return t;
        } else {  // round: half away from zero; x - t is exact
            return select(std::fabs(x - t) >= F(0.5), t + std::copysign(F(1), x), t);
        }
    }
}

/// An integral-valued float (or NaN/Inf) converted to integer type I with saturation;
/// NaN -> 0.
template <class I, class F>
inline I saturate_to(F v) {
    using W = std::conditional_t<sizeof(I) == 8, int64_t, int32_t>;  // conversion width
    constexpr F lo = static_cast<F>(std::numeric_limits<I>::min());  // 0 or -2^(bits-1): exact
    constexpr F hi_excl = std::is_signed_v<I> ? -lo : static_cast<F>(std::numeric_limits<I>::max() / 2 + 1) * F(2);
    constexpr F hi_in = hi_excl * (F(1) - std::numeric_limits<F>::epsilon() / F(2));  // largest F below hi_excl
    const F c = select(v == v, v, F(0));
    const F clamped = select(c < lo, lo, select(c > hi_in, hi_in, c));
    const W w = select(c >= hi_excl, static_cast<W>(std::numeric_limits<I>::max()), static_cast<W>(clamped));
    return static_cast<I>(w);
}

template <class U, RoundMode M, class T, int R, int C>
inline Tile<U, R, C> cast_rounded(const Tile<T, R, C> &t) {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Tile<U, R, C> out;
    for (int i = 0; i < R * C; ++i) out.data[i] = saturate_to<U>(round_integral<M>(static_cast<F>(t.data[i])));
    return out;
}

/// The neighbour of `v` toward +Inf (`up`) or -Inf, on the bits of bf16/f16.
template <class U>
inline U step(U v, bool up) {
    if constexpr (is_half_v<U>) {
        const uint16_t b = v.bits;
        if ((b & 0x7FFF) == 0) return U::from_bits(up ? 0x0001 : 0x8001);  // +-0: the smallest subnormal
        const bool negative = (b & 0x8000) != 0;
        return U::from_bits(static_cast<uint16_t>(negative != up ? b + 1 : b - 1));  // +1: magnitude up
    } else {
        return std::nextafter(v, up ? std::numeric_limits<U>::infinity() : -std::numeric_limits<U>::infinity());
    }
}

/// 2^(emax + 1): where U's next value past its largest finite one would be, were it not Inf.
template <class U>
constexpr double past_max() {
    if constexpr (std::is_same_v<U, f16>) {
        return 65536.0;
    } else {
        return 0x1p128;  // bf16 and float
    }
}

/// x (float or double) as floating type U rounded with mode M (see the rules at the top).
/// The nearest-even conversion gives one of x's two neighbours in U; the other is one step
/// away. Distances are exact in double (x and the neighbours share an ulp of x's binade).
template <class U, RoundMode M, class F>
inline U narrow_rounded(F x) {
    const U r = convert<U>(x);
    if constexpr (M == RoundMode::rint) return r;
    const double xd = static_cast<double>(x);
    const double rd = static_cast<double>(static_cast<compute_t<U>>(r));
    const U down = rd > xd ? step(r, false) : r;
    const U up = rd < xd ? step(r, true) : r;
    if constexpr (M == RoundMode::floor) {
        return down;
    } else if constexpr (M == RoundMode::ceil) {
        return up;
    } else if constexpr (M == RoundMode::trunc) {
        return xd < 0 ? up : down;
    } else {  // round: to nearest, ties away from zero
        const bool finite = std::isfinite(xd);
        double lo = static_cast<double>(static_cast<compute_t<U>>(down));
        double hi = static_cast<double>(static_cast<compute_t<U>>(up));
        if (finite && std::isinf(lo)) lo = -past_max<U>();
        if (finite && std::isinf(hi)) hi = past_max<U>();
        const double below = xd - lo, above = hi - xd;
        if (below < above) return down;
        if (above < below) return up;
        return xd > 0 ? up : down;  // a tie (or NaN: down == up == r)
    }
}

template <class U, RoundMode M, class T, int R, int C>
inline Tile<U, R, C> cast_narrowed(const Tile<T, R, C> &t) {
    Tile<U, R, C> out;
    for (int i = 0; i < R * C; ++i) out.data[i] = narrow_rounded<U, M>(static_cast<compute_t<T>>(t.data[i]));
    return out;
}

}  // namespace detail

/// The tile converted elementwise to U (see the rules at the top of this file). `mode`
/// matters only for floating -> integer and floating -> floating casts.
template <class U, class T, int R, int C>
inline Tile<U, R, C> cast(const Tile<T, R, C> &t, RoundMode mode = RoundMode::rint) {
    if constexpr (std::is_same_v<U, T>) {
        (void)mode;
        return t;
    } else if constexpr (is_floating_v<T> && std::is_integral_v<U> && !std::is_same_v<U, bool>) {
        switch (mode) {
            case RoundMode::round: return detail::cast_rounded<U, RoundMode::round>(t);
            case RoundMode::floor: return detail::cast_rounded<U, RoundMode::floor>(t);
            case RoundMode::ceil: return detail::cast_rounded<U, RoundMode::ceil>(t);
            case RoundMode::trunc: return detail::cast_rounded<U, RoundMode::trunc>(t);
            case RoundMode::rint: break;
        }
        return detail::cast_rounded<U, RoundMode::rint>(t);
    } else if constexpr (is_floating_v<T> && is_floating_v<U>) {
        switch (mode) {
            case RoundMode::round: return detail::cast_narrowed<U, RoundMode::round>(t);
            case RoundMode::floor: return detail::cast_narrowed<U, RoundMode::floor>(t);
            case RoundMode::ceil: return detail::cast_narrowed<U, RoundMode::ceil>(t);
            case RoundMode::trunc: return detail::cast_narrowed<U, RoundMode::trunc>(t);
            case RoundMode::rint: break;
        }
        Tile<U, R, C> out;
        for (int i = 0; i < R * C; ++i) out.data[i] = convert<U>(t.data[i]);
        return out;
    } else {
        (void)mode;
        Tile<U, R, C> out;
        if constexpr (std::is_same_v<T, bool>) {  // bytes 0/1 (g++ does not vectorize bool -> number)
            const uint8_t *bytes = reinterpret_cast<const uint8_t *>(t.data);
            for (int i = 0; i < R * C; ++i) out.data[i] = convert<U>(bytes[i]);
        } else {
            for (int i = 0; i < R * C; ++i) out.data[i] = convert<U>(t.data[i]);
        }
        return out;
    }
}

}  // namespace ts
