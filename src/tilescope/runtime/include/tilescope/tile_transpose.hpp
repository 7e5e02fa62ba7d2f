// tilescope tile library: transpose of a tile.
//
//   Tile<T, C, R> transpose(const Tile<T, R, C> &t);
//
// A transpose moves bits, so every path gives the same tile. Tiles of 2-byte elements (bf16,
// f16) whose sides are multiples of 8 are moved in 8 x 8 blocks through SSE2 registers (three
// rounds of unpacks), and 4-byte ones (float, int32) whose sides are multiples of 4 in 4 x 4
// blocks; anything else element by element in 8 x 8 blocks. (Attention's scores take
// transpose(k) of a 64 x 512 bf16 tile per block: element by element it was 14% of a decode
// step.)
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <tilescope/tile_core.hpp>

namespace ts {

namespace detail {

#if defined(__SSE2__)
/// dst's 8 x 8 block (rows dst_stride elements apart) = the transpose of src's (src_stride apart),
/// 2-byte elements.
inline void transpose8x8_16(const char *src, int64_t src_stride, char *dst, int64_t dst_stride) {
    __m128i r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i * src_stride * 2));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
        t[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) {  // rows h..h+3: columns 0-1, 2-3, 4-5, 6-7
        u[h] = _mm_unpacklo_epi32(t[h], t[h + 2]);
        u[h + 1] = _mm_unpackhi_epi32(t[h], t[h + 2]);
        u[h + 2] = _mm_unpacklo_epi32(t[h + 1], t[h + 3]);
        u[h + 3] = _mm_unpackhi_epi32(t[h + 1], t[h + 3]);
    }
    for (int c = 0; c < 4; ++c) {  // column pair 2c, 2c + 1: rows 0-3 from u[c], rows 4-7 from u[c + 4]
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + (2 * c) * dst_stride * 2), _mm_unpacklo_epi64(u[c], u[c + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + (2 * c + 1) * dst_stride * 2), _mm_unpackhi_epi64(u[c], u[c + 4]));
    }
}

/// The same for a 4 x 4 block of 4-byte elements.
inline void transpose4x4_32(const char *src, int64_t src_stride, char *dst, int64_t dst_stride) {
    __m128i r[4];
    for (int i = 0; i < 4; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i * src_stride * 4));
    const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]), t1 = _mm_unpackhi_epi32(r[0], r[1]);
    const __m128i t2 = _mm_unpacklo_epi32(r[2], r[3]), t3 = _mm_unpackhi_epi32(r[2], r[3]);
    const __m128i cols[4] = {_mm_unpacklo_epi64(t0, t2), _mm_unpackhi_epi64(t0, t2), _mm_unpacklo_epi64(t1, t3),
                             _mm_unpackhi_epi64(t1, t3)};
    for (int c = 0; c < 4; ++c) _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + c * dst_stride * 4), cols[c]);
}
#endif

}  // namespace detail

/// The C x R transpose of a tile.
template <class T, int R, int C>
inline Tile<T, C, R> transpose(const Tile<T, R, C> &t) {
    Tile<T, C, R> out;
#if defined(__SSE2__)
    if constexpr (sizeof(T) == 2 && R % 8 == 0 && C % 8 == 0) {
        for (int r0 = 0; r0 < R; r0 += 8) {
            for (int c0 = 0; c0 < C; c0 += 8) {
                detail::transpose8x8_16(reinterpret_cast<const char *>(t.data + r0 * C + c0), C,
                                        reinterpret_cast<char *>(out.data + c0 * R + r0), R);
            }
        }
        return out;
    } else if constexpr (sizeof(T) == 4 && R % 4 == 0 && C % 4 == 0) {
        for (int r0 = 0; r0 < R; r0 += 4) {
            for (int c0 = 0; c0 < C; c0 += 4) {
                detail::transpose4x4_32(reinterpret_cast<const char *>(t.data + r0 * C + c0), C,
                                        reinterpret_cast<char *>(out.data + c0 * R + r0), R);
            }
        }
        return out;
    }
#endif
    constexpr int B = 8;  // 8x8 blocks keep both sides' accesses within a few cache lines
    for (int r0 = 0; r0 < R; r0 += B) {
        for (int c0 = 0; c0 < C; c0 += B) {
            const int r1 = r0 + B < R ? r0 + B : R;
            const int c1 = c0 + B < C ? c0 + B : C;
            for (int c = c0; c < c1; ++c) {
                for (int r = r0; r < r1; ++r) out.data[c * R + r] = t.data[r * C + c];
            }
        }
    }
    return out;
}

}  // namespace ts
