// tilescope tile library: cast<U>(tile, mode).
//
// Conversion rules (torch's, except where torch is undefined):
//  - floating -> integer: round with `mode` (default rint = nearest, ties to even), then
//    SATURATE to U's range: values above the range (and +Inf) give U's max, below (and -Inf)
//    U's min, and NaN gives 0. (torch leaves these undefined; on x86 it returns garbage such
//    as INT_MIN, or wraps for int8/uint8.)
//  - floating -> floating: round to nearest even (double -> bf16/f16 goes through float,
//    as c10 does). `mode` is ignored.
//  - integer -> floating: exact when representable, else round to nearest even.
//  - integer -> integer: wrap around (two's complement), as torch.
//  - anything -> bool: `!= 0` (NaN -> true); bool -> anything: 0 or 1.
#pragma once

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

}  // namespace detail

/// The tile converted elementwise to U (see the rules at the top of this file). `mode`
/// matters only for floating -> integer casts.
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
