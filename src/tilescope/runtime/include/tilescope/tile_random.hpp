// ts.rand: uniform [0, 1) f32 tiles from a counter-based generator (Philox4x32-10).
//
// Invariants:
//  - Element i of the tile (row-major) is a function of (seed, offset + i) only: Philox4x32-10
//    with key (seed's low and high 32 bits) on the counter (offset + i as 64 bits, low word
//    first; the last two words 0), its first output word's top 24 bits times 2^-24. So a value
//    depends on no schedule, no worker and no platform: the interpreter's twin
//    (runtime/philox.py) gives the same bits.
//  - Values lie in [0, 1 - 2^-24], each a multiple of 2^-24 (exact in f32).
#pragma once

#include <cstdint>

#include <tilescope/tile_types.hpp>

namespace ts {

namespace detail {

/// The first output word of Philox4x32-10 for counter (c0, c1, 0, 0) and key (k0, k1).
inline uint32_t philox_word(uint32_t c0, uint32_t c1, uint32_t k0, uint32_t k1) {
    constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    uint32_t x0 = c0, x1 = c1, x2 = 0, x3 = 0;
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = kM0 * x0, p1 = kM1 * x2;
        const uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ k0;
        const uint32_t y2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ k1;
        x1 = static_cast<uint32_t>(p1);
        x3 = static_cast<uint32_t>(p0);
        x0 = y0;
        x2 = y2;
        k0 += kW0;
        k1 += kW1;
    }
    return x0;
}

}  // namespace detail

/// An R x C tile of uniform [0, 1) floats: element i (row-major) of counter offset + i under `seed`.
template <int R, int C>
inline Tile<float, R, C> rand(int64_t seed, int64_t offset) {
    const uint64_t s = static_cast<uint64_t>(seed);
    const uint32_t k0 = static_cast<uint32_t>(s), k1 = static_cast<uint32_t>(s >> 32);
    Tile<float, R, C> t;
    for (int i = 0; i < R * C; ++i) {
        const uint64_t ctr = static_cast<uint64_t>(offset) + static_cast<uint64_t>(i);
        const uint32_t w = detail::philox_word(static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), k0, k1);
        t.data[i] = static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
    }
    return t;
}

}  // namespace ts
