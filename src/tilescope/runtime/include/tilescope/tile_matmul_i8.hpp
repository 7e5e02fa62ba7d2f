// tilescope tile library: matmul of int8 tiles, exact in int32.
//
// int8 inputs (tile_matmul.hpp has the float ones):
//   Tile<int32_t, M, N> matmul(a, b);     // a: Tile<int8_t, M, K>, b: Tile<int8_t, K, N>
//   void matmul_acc(acc, a, b);           // acc: Tile<int32_t, M, N>, acc += a @ b
// a and b may also be tile views (tile_view.hpp), read where their tensors hold them: the kernel
// packs b (and a, but on AMX, which reads a in rows; and both but for N below a vector, read
// once by plain loops), so a view costs no copy of its own.
// Exact: every product and the sum are integers, accumulated in 32 bits with two's
// complement wrap-around (done in unsigned arithmetic, so never UB); the result is
// (acc + sum_k a[i,k] b[k,j]) mod 2^32 whatever the order, so the int8 path may sum in any
// order. (Products are at most 2^14, so nothing wraps before K exceeds 2^17.)
// Speed: with AVX-512 VNNI or AVX-VNNI, b is packed as groups of 4 bytes of consecutive rows
// (k .. k+3) and a as the 4 bytes a + 128 (unsigned), so one vpdpbusd adds 4 products per column
// (u8 x s8, at most 2^15 each, sums exact); 128 * (column sum of b) is taken off c first. Without
// VNNI (SSE2 / AVX2 / AVX-512BW), int16 pairs of rows (k, k+1) and one vpmaddwd per pair
// (exact: at most 2^15). Packing is SIMD (SSE2). Register blocks of 8 x 2 vectors (AVX-512) or
// 4 x 2. Elsewhere plain int32 loops. With AMX (AMX-INT8, on Linux, once the process may use the
// tile registers: amx_permitted), whole 16 x 16 blocks of c and K a multiple of 4 and at least 64,
// b is packed the same way and tdpbssd multiplies 16 x 64 blocks of a by 16-row blocks of packed b, adding
// into 16 x 16 blocks of c read and written in place (signed bytes; exact, wrapping, as above).
// See benchmarks/tile_matmul.py for timings of each path.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <tilescope/tile_matmul.hpp>
#include <tilescope/tile_view.hpp>

namespace ts {

namespace detail {

/// Columns [J0, N) of c (M x N int32) += a (M x K) @ b (K x N), int8 row-major arrays with row
/// strides lda and ldb, exact mod 2^32, in plain loops (unsigned, so wrap-around is defined).
/// Also the edge columns of the packed kernel.
template <int M, int N, int K, int J0>
inline void matmul_i8_columns(int32_t *c, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb) {
    for (int i = 0; i < M; ++i) {
        for (int k = 0; k < K; ++k) {
            const int32_t aik = a[i * lda + k];
            for (int j = J0; j < N; ++j) {
                const uint32_t p = static_cast<uint32_t>(aik * static_cast<int32_t>(b[k * ldb + j]));
                c[i * N + j] = static_cast<int32_t>(static_cast<uint32_t>(c[i * N + j]) + p);
            }
        }
    }
}

#if defined(__AVX512BW__) || defined(__AVX2__) || defined(__SSE2__)
/// The SIMD vector of the packed int8 kernel: W int32 lanes, each holding one column's group of
/// G consecutive k of b, or one row's group of a. G = 4 with VNNI: vpdpbusd multiplies u8 by s8
/// bytes and adds four products to each lane, so a is packed as the bytes a + 128 and the
/// result corrected by 128 * (column sum of b). G = 2 otherwise: int16 pairs and vpmaddwd.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
struct I8Vec {
    using reg = __m512i;
    using elem = int32_t;
    static constexpr int width = 16;
    static constexpr int group = 4;
    static reg load(const void *p) { return _mm512_loadu_si512(p); }
    static void store(void *p, reg v) { _mm512_storeu_si512(p, v); }
    static reg splat(int32_t x) { return _mm512_set1_epi32(x); }
    static reg step(reg a, reg b, reg acc) { return _mm512_dpbusd_epi32(acc, a, b); }
};
inline constexpr int kMatmulI8Rows = 8;  // 8 x 2: at 12 x 2, g++ keeps accumulators on the stack
inline constexpr int kMatmulI8Vecs = 2;
#elif defined(__AVXVNNI__) && defined(__AVX2__)
struct I8Vec {
    using reg = __m256i;
    using elem = int32_t;
    static constexpr int width = 8;
    static constexpr int group = 4;
    static reg load(const void *p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }
    static void store(void *p, reg v) { _mm256_storeu_si256(static_cast<__m256i *>(p), v); }
    static reg splat(int32_t x) { return _mm256_set1_epi32(x); }
    static reg step(reg a, reg b, reg acc) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
};
inline constexpr int kMatmulI8Rows = 4;  // 4 x 2: at 6 x 2, g++ keeps accumulators on the stack
inline constexpr int kMatmulI8Vecs = 2;
#elif defined(__AVX512BW__)
struct I8Vec {
    using reg = __m512i;
    using elem = int32_t;
    static constexpr int width = 16;
    static constexpr int group = 2;
    static reg load(const void *p) { return _mm512_loadu_si512(p); }
    static void store(void *p, reg v) { _mm512_storeu_si512(p, v); }
    static reg splat(int32_t x) { return _mm512_set1_epi32(x); }
    static reg step(reg a, reg b, reg acc) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
};
inline constexpr int kMatmulI8Rows = 8;  // as with VNNI
inline constexpr int kMatmulI8Vecs = 2;
#elif defined(__AVX2__)
struct I8Vec {
    using reg = __m256i;
    using elem = int32_t;
    static constexpr int width = 8;
    static constexpr int group = 2;
    static reg load(const void *p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }
    static void store(void *p, reg v) { _mm256_storeu_si256(static_cast<__m256i *>(p), v); }
    static reg splat(int32_t x) { return _mm256_set1_epi32(x); }
    static reg step(reg a, reg b, reg acc) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
};
inline constexpr int kMatmulI8Rows = 4;  // 4 x 2: at 6 x 2, g++ keeps accumulators on the stack
inline constexpr int kMatmulI8Vecs = 2;
#else
struct I8Vec {
    using reg = __m128i;
    using elem = int32_t;
    static constexpr int width = 4;
    static constexpr int group = 2;
    static reg load(const void *p) { return _mm_loadu_si128(static_cast<const __m128i *>(p)); }
    static void store(void *p, reg v) { _mm_storeu_si128(static_cast<__m128i *>(p), v); }
    static reg splat(int32_t x) { return _mm_set1_epi32(x); }
    static reg step(reg a, reg b, reg acc) { return _mm_add_epi32(acc, _mm_madd_epi16(a, b)); }
};
inline constexpr int kMatmulI8Rows = 4;
inline constexpr int kMatmulI8Vecs = 2;
#endif

/// One int32 lane of packed a (A = true) or b: the int8 values v[0..G) of consecutive k as G = 2
/// int16 or G = 4 bytes, lowest k in the low bits; a's bytes offset by 128 for vpdpbusd.
template <int G, bool A>
inline int32_t pack_group(const int8_t *v) {
    uint32_t x = 0;
    for (int g = 0; g < G; ++g) {
        const uint32_t u = G == 2 ? static_cast<uint16_t>(v[g]) : static_cast<uint8_t>(A ? v[g] ^ 0x80 : v[g]);
        x |= u << (g * (32 / G));
    }
    return static_cast<int32_t>(x);
}

/// ap (M x KP lanes) = a (M x K int8, rows lda apart) in groups of G consecutive k (zeros past K).
template <int G, int M, int K, int KP>
inline void pack_a_i8(int32_t *ap, const int8_t *a, int64_t lda) {
    constexpr int K16 = K - K % 16;
    for (int i = 0; i < M; ++i) {
        const int8_t *row = a + i * lda;
        char *out = reinterpret_cast<char *>(ap + i * KP);
        for (int k = 0; k < K16; k += 16) {
            const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + k));
            if constexpr (G == 4) {
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + k), _mm_xor_si128(r, _mm_set1_epi8(-128)));
            } else {  // sign-extended to int16
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 2 * k), _mm_srai_epi16(_mm_unpacklo_epi8(r, r), 8));
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 2 * k + 16), _mm_srai_epi16(_mm_unpackhi_epi8(r, r), 8));
            }
        }
        for (int kp = K16 / G; kp < KP; ++kp) {
            int8_t v[G] = {};
            for (int g = 0; g < G && kp * G + g < K; ++g) v[g] = row[kp * G + g];
            ap[i * KP + kp] = pack_group<G, true>(v);
        }
    }
}

/// Rows of b ahead of the ones pack_b_i8 packs whose cache lines it asks for.
inline constexpr int kPackAheadRows = 16;

/// bp (KP x N lanes) = b (K x N int8, rows ldb apart) in groups of G consecutive rows (zeros past
/// K). b is read from memory once, here: a weight read in place (a view, Ahead) comes straight
/// from its tensor, so the lines kPackAheadRows rows on are asked for while a group is packed
/// (without, the 16-byte loads of four rows at a time kept fewer lines in flight than a copy
/// does: MoE's views ran 17% slower than its copies, and 11% faster with).
template <int G, int N, int K, int KP, bool Ahead>
inline void pack_b_i8(int32_t *bp, const int8_t *b, int64_t ldb) {
    constexpr int N16 = N - N % 16;
    constexpr int ahead = kPackAheadRows / G;  // in groups
    for (int kp = 0; kp < KP; ++kp) {
        const int8_t *r = b + kp * G * ldb;
        if (Ahead && (kp + ahead) * G + G <= K) {  // a whole group, inside b
            const char *next = reinterpret_cast<const char *>(r + ahead * G * ldb);
            for (int g = 0; g < G; ++g)
                for (int x = 0; x < N; x += 64) __builtin_prefetch(next + g * ldb + x);
        }
        int j = 0;
        if (kp * G + G <= K) {
            for (; j < N16; j += 16) {
                auto row = [&](int g) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(r + g * ldb + j)); };
                __m128i *out = reinterpret_cast<__m128i *>(bp + kp * N + j);
                if constexpr (G == 4) {  // bytes of rows 0..3 interleaved per column
                    const __m128i r0 = row(0), r1 = row(1), r2 = row(2), r3 = row(3);
                    const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
                    const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
                    _mm_storeu_si128(out, _mm_unpacklo_epi16(lo01, lo23));
                    _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo01, lo23));
                    _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi01, hi23));
                    _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi01, hi23));
                } else {  // int16 of rows 0, 1 interleaved per column
                    const __m128i r0 = row(0), r1 = row(1);
                    const __m128i lo0 = _mm_srai_epi16(_mm_unpacklo_epi8(r0, r0), 8);
                    const __m128i hi0 = _mm_srai_epi16(_mm_unpackhi_epi8(r0, r0), 8);
                    const __m128i lo1 = _mm_srai_epi16(_mm_unpacklo_epi8(r1, r1), 8);
                    const __m128i hi1 = _mm_srai_epi16(_mm_unpackhi_epi8(r1, r1), 8);
                    _mm_storeu_si128(out, _mm_unpacklo_epi16(lo0, lo1));
                    _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo0, lo1));
                    _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi0, hi1));
                    _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi0, hi1));
                }
            }
        }
        for (; j < N; ++j) {
            int8_t v[G] = {};
            for (int g = 0; g < G && kp * G + g < K; ++g) v[g] = r[g * ldb + j];
            bp[kp * N + j] = pack_group<G, false>(v);
        }
    }
}
#endif

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__) && defined(__x86_64__)
#define TS_MATMUL_AMX 1
/// Whether this process may use the AMX tile registers: Linux hands out their state only to a
/// process that asks for it (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked here once.
/// False where the kernel refuses (too old, or a sandbox): matmul_i8 then takes the VNNI path.
inline bool amx_permitted() {
    static const bool permitted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    return permitted;
}

/// The shapes the AMX kernel takes: whole 16-row and 16-column blocks, and K in groups of 4 and at
/// least 64 (a call's fixed cost, the tile configuration loaded and released, is ~50 ns: below
/// K = 64 the VNNI kernel is as fast or faster).
template <int M, int N, int K>
inline constexpr bool amx_shape_v = M % 16 == 0 && N % 16 == 0 && K % 4 == 0 && M > 0 && N > 0 && K >= 64;

/// The tile configuration (palette 1, ldtilecfg's 64-byte layout) of matmul_i8_amx for depth K:
/// tmm0-1 two 16 x 16 int32 blocks of c, tmm2 a 16 x 64 block of a, tmm3-4 two 16-row blocks of
/// packed b; for K's last K % 64, tmm5 a's 16 x (K % 64) block and tmm6-7 b's (K % 64) / 4 rows.
struct alignas(64) AmxConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};

    constexpr explicit AmxConfig(int k_tail) {
        for (int t = 0; t < 5; ++t) rows[t] = 16, colsb[t] = 64;
        if (k_tail > 0) {
            rows[5] = 16, colsb[5] = static_cast<uint16_t>(k_tail);
            for (int t = 6; t < 8; ++t) rows[t] = static_cast<uint8_t>(k_tail / 4), colsb[t] = 64;
        }
    }
};

/// The NB (1 or 2) 16 x 16 blocks of c at ci (row stride N) += the 16 rows of a at ai (lda apart)
/// @ the matching columns of packed b at bp (row stride N lanes), K in 64s and then K's last K % 64.
template <int N, int K, int NB>
inline void amx_blocks(int32_t *ci, const int8_t *ai, int64_t lda, const int32_t *bp) {
    constexpr int K64 = K - K % 64, ld = N * 4;
    _tile_loadd(0, ci, ld);
    if constexpr (NB == 2) _tile_loadd(1, ci + 16, ld);
    for (int k = 0; k < K64; k += 64) {
        _tile_loadd(2, ai + k, lda);
        _tile_loadd(3, bp + (k / 4) * N, ld);
        _tile_dpbssd(0, 2, 3);
        if constexpr (NB == 2) {
            _tile_loadd(4, bp + (k / 4) * N + 16, ld);
            _tile_dpbssd(1, 2, 4);
        }
    }
    if constexpr (K % 64 != 0) {
        _tile_loadd(5, ai + K64, lda);
        _tile_loadd(6, bp + (K64 / 4) * N, ld);
        _tile_dpbssd(0, 5, 6);
        if constexpr (NB == 2) {
            _tile_loadd(7, bp + (K64 / 4) * N + 16, ld);
            _tile_dpbssd(1, 5, 7);
        }
    }
    _tile_stored(0, ci, ld);
    if constexpr (NB == 2) _tile_stored(1, ci + 16, ld);
}

/// c (M x N int32) += a (M x K) @ packed b (bp: K / 4 rows of N lanes, pack_b_i8's groups of 4 rows)
/// through AMX's tdpbssd (signed bytes, four products summed into each int32 lane, wrapping):
/// exact mod 2^32 as every path. a and c are read and written in place.
template <int M, int N, int K>
inline void amx_multiply(int32_t *c, const int8_t *a, int64_t lda, const int32_t *bp) {
    static constexpr AmxConfig config(K % 64);
    _tile_loadconfig(&config);
    for (int i = 0; i < M; i += 16) {
        int j = 0;
        for (; j + 32 <= N; j += 32) amx_blocks<N, K, 2>(c + i * N + j, a + i * lda, lda, bp + j);
        if constexpr (N % 32 != 0) amx_blocks<N, K, 1>(c + i * N + j, a + i * lda, lda, bp + j);
    }
    _tile_release();  // the thread's tile state back to its initial one: cheaper to switch out
}

/// c (M x N int32) += a (M x K) @ b (K x N) int8 through AMX: b is packed in groups of 4 rows (the
/// VNNI layout, which is the layout AMX reads), then amx_multiply.
template <int M, int N, int K, bool Ahead>
inline void matmul_i8_amx(int32_t *c, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb) {
    alignas(64) int32_t bp[K / 4 * N];
    pack_b_i8<4, N, K, K / 4, Ahead>(bp, b, ldb);
    amx_multiply<M, N, K>(c, a, lda, bp);
}
#endif

/// c (M x N int32) += a (M x K) @ b (K x N), int8 row-major arrays with row strides lda and ldb (a
/// tile's are K and N; a view's, its tensor's), exact mod 2^32. Both are packed (or, on AMX, a is
/// read in rows of 64 bytes), so a view costs no copy of its own. BView: b is a view, read from
/// its tensor (its packing asks for the rows ahead).
// NOTE: noinline for the same reason as matmul_f32.
template <int M, int N, int K, bool BView = false>
[[gnu::noinline]] inline void matmul_i8(int32_t *c, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb) {
#if defined(__AVX512BW__) || defined(__AVX2__) || defined(__SSE2__)
#ifdef TS_MATMUL_AMX
    if constexpr (amx_shape_v<M, N, K>) {
        if (amx_permitted()) {
            matmul_i8_amx<M, N, K, BView>(c, a, lda, b, ldb);
            return;
        }
    }
#endif
    constexpr int W = I8Vec::width;
    constexpr int G = I8Vec::group;
    constexpr int NB = kMatmulI8Vecs * W;
    constexpr int KP = (K + G - 1) / G;
    if constexpr (N >= W) {
        alignas(64) int32_t ap[M * KP];
        alignas(64) int32_t bp[KP * N];
        pack_a_i8<G, M, K, KP>(ap, a, lda);
        pack_b_i8<G, N, K, KP, BView>(bp, b, ldb);
        constexpr int MR = kMatmulI8Rows;
        auto panel = [&](auto nv, int j0) {
            constexpr int NV = decltype(nv)::value;
            if constexpr (G == 4) {  // sum (a + 128) b = a @ b + 128 colsum(b): take the excess off first
                alignas(64) int32_t ones[KP], colsum[NV * W] = {};
                for (int kp = 0; kp < KP; ++kp) ones[kp] = 0x01010101;
                register_block<I8Vec, 1, NV>(ones, KP, bp + j0, N, colsum, NV * W, KP);
                for (int i = 0; i < M; ++i) {
                    for (int j = 0; j < NV * W; ++j) {
                        uint32_t &x = reinterpret_cast<uint32_t &>(c[i * N + j0 + j]);
                        x -= static_cast<uint32_t>(colsum[j]) << 7;
                    }
                }
            }
            int i = 0;
            for (; i + MR <= M; i += MR) register_block<I8Vec, MR, NV>(ap + i * KP, KP, bp + j0, N, c + i * N + j0, N, KP);
            if constexpr (M % MR != 0) register_block<I8Vec, M % MR, NV>(ap + i * KP, KP, bp + j0, N, c + i * N + j0, N, KP);
        };
        int j = 0;
        for (; j + NB <= N; j += NB) panel(std::integral_constant<int, kMatmulI8Vecs>{}, j);
        for (; j + W <= N; j += W) panel(std::integral_constant<int, 1>{}, j);
        // NOTE: the edge's first column as a constant: from a run-time j, g++ warns of UB it
        // imagines for a negative j.
        if constexpr (N % W != 0) matmul_i8_columns<M, N, K, N - N % W>(c, a, lda, b, ldb);
        return;
    }
#endif
    matmul_i8_columns<M, N, K, 0>(c, a, lda, b, ldb);
}

/// An int8 matmul operand: a tile (rows C apart) or a tile view (tile_view.hpp: rows `stride`
/// apart where its tensor holds them, or its copy's).
template <class X>
struct I8Operand {
    static constexpr bool ok = false;
};
template <int R, int C>
struct I8Operand<Tile<int8_t, R, C>> {
    static constexpr bool ok = true;
    static constexpr int rows = R, cols = C;
    static const int8_t *data(const Tile<int8_t, R, C> &t) { return t.data; }
    static int64_t stride(const Tile<int8_t, R, C> &) { return C; }
};
template <int R, int C>
struct I8Operand<TileView<int8_t, R, C>> {
    static constexpr bool ok = true;
    static constexpr int rows = R, cols = C;
    static const int8_t *data(const TileView<int8_t, R, C> &v) { return v.data; }
    static int64_t stride(const TileView<int8_t, R, C> &v) { return v.stride; }
};

/// Two int8 matmul operands of which at least one is a view (two tiles take the overloads below).
template <class A, class B>
inline constexpr bool i8_view_pair_v = I8Operand<A>::ok && I8Operand<B>::ok && (is_view_v<A> || is_view_v<B>);

/// acc += a @ b for int8 a (M x K, rows lda apart) and b (K x N, rows ldb apart).
template <int M, int N, class A, class B>
inline void matmul_acc_i8(Tile<int32_t, M, N> &acc, const A &a, const B &b) {
    using OA = I8Operand<A>;
    using OB = I8Operand<B>;
    static_assert(OA::cols == OB::rows, "matmul: a's column count must equal b's row count");
    static_assert(M == OA::rows && N == OB::cols, "matmul_acc: acc must have a's rows and b's columns");
    matmul_i8<M, N, OA::cols, is_view_v<B>>(acc.data, OA::data(a), OA::stride(a), OB::data(b), OB::stride(b));
}

}  // namespace detail

/// acc += a @ b for int8 a (M x K) and b (K x N): exact, wrapping mod 2^32 (see the top of this file).
template <int M, int N, int MA, int K, int KB, int NB>
inline void matmul_acc(Tile<int32_t, M, N> &acc, const Tile<int8_t, MA, K> &a, const Tile<int8_t, KB, NB> &b) {
    detail::matmul_acc_i8(acc, a, b);
}

/// The same with a tile view for a or b or both, read where its tensor holds it.
template <int M, int N, class A, class B, std::enable_if_t<detail::i8_view_pair_v<A, B>, int> = 0>
inline void matmul_acc(Tile<int32_t, M, N> &acc, const A &a, const B &b) {
    detail::matmul_acc_i8(acc, a, b);
}

/// a @ b as an int32 tile for int8 a (M x K) and b (K x N): exact, wrapping mod 2^32.
template <int M, int K, int KB, int N>
inline Tile<int32_t, M, N> matmul(const Tile<int8_t, M, K> &a, const Tile<int8_t, KB, N> &b) {
    Tile<int32_t, M, N> acc = zeros<int32_t, M, N>();
    matmul_acc(acc, a, b);
    return acc;
}

/// The same with a tile view for a or b or both.
template <class A, class B, std::enable_if_t<detail::i8_view_pair_v<A, B>, int> = 0>
inline Tile<int32_t, detail::I8Operand<A>::rows, detail::I8Operand<B>::cols> matmul(const A &a, const B &b) {
    auto acc = zeros<int32_t, detail::I8Operand<A>::rows, detail::I8Operand<B>::cols>();
    matmul_acc(acc, a, b);
    return acc;
}

}  // namespace ts
