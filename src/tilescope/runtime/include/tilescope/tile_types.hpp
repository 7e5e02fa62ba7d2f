// tilescope tile library: element types.
//
// Defines the 16-bit float storage types `ts::bf16` and `ts::f16`, the "compute type" every
// element type is widened to inside an op (float for bf16/f16, the type itself otherwise),
// scalar conversions that follow torch's rules, and `ts::RoundMode`.
//
// Invariants:
//  - bf16/f16 are trivially copyable 2-byte structs holding IEEE bits; a default-constructed
//    one is uninitialized (like a float).
//  - float -> bf16/f16 is round-to-nearest-even with correct overflow (to Inf), subnormals
//    and signed zeros, bit-identical to torch's `.to(torch.bfloat16 / torch.float16)` for
//    every non-NaN input. A NaN becomes the quiet NaN c10 produces (bf16 0x7FC0, f16
//    sign|0x7E00); torch's vectorized paths may give another NaN pattern.
//  - double -> bf16/f16 goes through float (as c10 does), so it rounds twice.
//  - All conversions are branch-free so loops of them vectorize.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ts {

/// How `cast` turns a floating value into an integer. `rint` = nearest, ties to even (torch's
/// default); `round` = nearest, ties away from zero; `floor`, `ceil`, `trunc` as in <cmath>.
enum class RoundMode { rint, round, floor, ceil, trunc };

namespace detail {

inline uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float float_of_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/// `c ? a : b` computed with bit masks. Under the default -ftrapping-math g++ will not
/// if-convert a `?:` when an arm's value comes from float arithmetic used nowhere else (it
/// moves that arithmetic into a branch), and a loop with a branch does not vectorize; this
/// always compiles to a blend.
template <class T>
inline T select(bool c, T a, T b) {
    static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 ||
                                                      sizeof(T) == 8),
                  "select: 1, 2, 4 or 8-byte values only");
    using U = std::conditional_t<sizeof(T) == 1, uint8_t,
                                 std::conditional_t<sizeof(T) == 2, uint16_t,
                                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    U ua, ub;
    std::memcpy(&ua, &a, sizeof a);
    std::memcpy(&ub, &b, sizeof b);
    const U mask = static_cast<U>(U(0) - static_cast<U>(c));
    const U r = static_cast<U>((mask & ua) | (~mask & ub));
    T out;
    std::memcpy(&out, &r, sizeof out);
    return out;
}

/// float -> bf16 bits, round-to-nearest-even (c10::BFloat16's algorithm).
inline uint16_t float_to_bf16_bits(float f) {
    const uint32_t u = bits_of(f);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    return static_cast<uint16_t>(select(is_nan, 0x7FC0u, rounded));
}

inline float bf16_bits_to_float(uint16_t h) { return float_of_bits(static_cast<uint32_t>(h) << 16); }

/// float -> IEEE half bits, round-to-nearest-even. The rounding is done by the FPU: adding a
/// power of two ("bias") chosen from the input's exponent leaves exactly the half-precision
/// mantissa bits in the float's low bits (Maratyszcza's FP16 library, also used by c10).
inline uint16_t float_to_f16_bits(float f) {
    const float scale_to_inf = float_of_bits(0x77800000u);   // 2^112
    const float scale_to_zero = float_of_bits(0x08800000u);  // 2^-110
    const uint32_t w = bits_of(f);
    const float abs_f = float_of_bits(w & 0x7FFFFFFFu);
    float base = (abs_f * scale_to_inf) * scale_to_zero;      // overflows to Inf when |f| >= 2^16
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    bias = select(bias < 0x71000000u, 0x71000000u, bias);     // subnormal halves share one bias
    base = float_of_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = bits_of(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return static_cast<uint16_t>((sign >> 16) | select(shl1_w > 0xFF000000u, 0x7E00u, nonsign));
}

/// IEEE half bits -> float (exact).
inline float f16_bits_to_float(uint16_t h) {
    const uint32_t w = static_cast<uint32_t>(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    // Normal/Inf/NaN: move exponent+mantissa into place and rescale by 2^-112.
    const float normalized = float_of_bits((two_w >> 4) + (0xE0u << 23)) * float_of_bits(0x07800000u);
    // Subnormal: build 0.5 + m * 2^-24 exactly and subtract 0.5.
    const float denormalized = float_of_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    return float_of_bits(sign | bits_of(select(two_w < (1u << 27), denormalized, normalized)));
}

}  // namespace detail

/// bfloat16: 1 sign, 8 exponent, 7 mantissa bits. Converts implicitly to float (exact);
/// construction from a number is explicit and rounds to nearest even.
struct bf16 {
    uint16_t bits;

    bf16() = default;
    explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
    template <class A, class = std::enable_if_t<std::is_arithmetic_v<A> && !std::is_same_v<A, float>>>
    explicit bf16(A a) : bf16(static_cast<float>(a)) {}

    static bf16 from_bits(uint16_t b) {
        bf16 h;
        h.bits = b;
        return h;
    }
    operator float() const { return detail::bf16_bits_to_float(bits); }
};

/// IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits. Same conversion rules as bf16.
struct f16 {
    uint16_t bits;

    f16() = default;
    explicit f16(float f) : bits(detail::float_to_f16_bits(f)) {}
    template <class A, class = std::enable_if_t<std::is_arithmetic_v<A> && !std::is_same_v<A, float>>>
    explicit f16(A a) : f16(static_cast<float>(a)) {}

    static f16 from_bits(uint16_t b) {
        f16 h;
        h.bits = b;
        return h;
    }
    operator float() const { return detail::f16_bits_to_float(bits); }
};

static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>, "bf16 must be 2 plain bytes");
static_assert(sizeof(f16) == 2 && std::is_trivially_copyable_v<f16>, "f16 must be 2 plain bytes");

/// True for bf16 and f16.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

/// Floating element types: float, double, bf16, f16.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

/// Every type a tile may hold.
template <class T>
inline constexpr bool is_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T> || std::is_same_v<T, int32_t> ||
    std::is_same_v<T, int64_t> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
    std::is_same_v<T, bool>;

/// The type an op computes in: float for bf16/f16 (torch's "opmath" type), T otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

/// Converts a scalar of any element type to U following torch's rules: to bool is `!= 0`,
/// from bool is 0/1, floating -> integer truncates (out of range is undefined, as in C++;
/// `cast` saturates instead), everything else is C++'s conversion via the compute type
/// (so double -> bf16 goes through float, as c10 does).
template <class U, class T>
inline U convert(T v) {
    if constexpr (std::is_same_v<U, T>) {
        return v;
    } else if constexpr (std::is_same_v<U, bool>) {
        return static_cast<compute_t<T>>(v) != compute_t<T>(0);
    } else if constexpr (is_half_v<U>) {
        return U(static_cast<float>(static_cast<compute_t<T>>(v)));
    } else {
        return static_cast<U>(static_cast<compute_t<T>>(v));
    }
}

}  // namespace ts
