// tilescope tile library: bf16 matmul through the CPU's bf16 dot-product instruction (opt-in).
//
//   Tile<float, M, N> matmul_dot(a, b);     // a: Tile<bf16, M, K>, b: Tile<bf16, K, N>
//   void matmul_acc_dot(acc, a, b);         // acc += a @ b, in place
//
// Generated kernels call these for bf16 matmuls when the program is compiled with
// bf16_matmul="dot" (--bf16-matmul dot); the default, "exact", calls matmul / matmul_acc.
//
// Numerics: where the CPU has AVX-512 BF16, one vdpbf16ps adds the products of a pair of k to
// each accumulator lane: acc + p_odd, rounded, then + p_even, rounded (a bf16 product is exact
// in float). The pair is packed with k in the odd half and k + 1 in the even one, so each
// output accumulates its K products in the order k = 0, 1, ..., K-1 with one rounding per step:
// the same bits as matmul's fused multiply-adds, except that the instruction treats a subnormal
// input as zero and flushes a subnormal product or partial sum to zero (matmul and the
// interpreter keep them). An odd K pads the last pair with two zeros (adding +0 changes nothing:
// matmul_acc's accumulator is never -0, see there). Edge columns (N not a multiple of 16) take
// matmul's scalar fused steps, in the same order. Without AVX-512 BF16 these are matmul and
// matmul_acc themselves.
//
// Speed: b is packed once per call as pairs of rows (KP = ceil(K / 2) rows of N 32-bit lanes) and
// a as pairs of columns; register blocks of 12 rows x 2 vectors of 16 columns, as the float
// kernel, each step doing two k at once. See benchmarks/tile_matmul.py.
#pragma once

#include <cstdint>
#include <type_traits>

#include <tilescope/tile_matmul.hpp>

namespace ts {

#if defined(__AVX512BF16__) && defined(__AVX512F__)
namespace detail {

/// The packed bf16 pairs as register_block's vector: 16 lanes of two bf16 (a pair of k), held as
/// float registers as the accumulators are (so that g++ keeps each accumulator in one register).
struct Bf16DotVec {
    using reg = __m512;
    using elem = int32_t;
    static constexpr int width = 16;
    static reg load(const int32_t *p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
    static void store(int32_t *p, reg v) { _mm512_storeu_si512(p, _mm512_castps_si512(v)); }
    static reg splat(int32_t x) { return _mm512_castsi512_ps(_mm512_set1_epi32(x)); }
    static reg step(reg a, reg b, reg acc) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
};

/// One 32-bit lane of a pair: k in the odd (high) half, which the instruction adds first.
inline int32_t bf16_pair(uint16_t first, uint16_t second) {
    return static_cast<int32_t>((static_cast<uint32_t>(first) << 16) | second);
}

/// ap (M x KP) = a (M x K) as pairs of columns (zeros past K): in memory a pair of columns is one
/// 32-bit lane with k in the low half, so each lane's halves are swapped (vprord by 16).
template <int M, int K, int KP>
inline void pack_a_bf16(int32_t *ap, const bf16 *a) {
    constexpr int K32 = (K / 2) - (K / 2) % 16;  // pairs in whole vectors of 16
    for (int i = 0; i < M; ++i) {
        const bf16 *row = a + i * K;
        int kp = 0;
        for (; kp < K32; kp += 16) {
            const __m512i v = _mm512_loadu_si512(row + 2 * kp);
            _mm512_storeu_si512(ap + i * KP + kp, _mm512_maskz_ror_epi32(0xFFFF, v, 16));
        }
        for (; kp < KP; ++kp) {
            const int k = 2 * kp;
            ap[i * KP + kp] = bf16_pair(row[k].bits, k + 1 < K ? row[k + 1].bits : uint16_t{0});
        }
    }
}

/// bp (KP x N) = b (K x N) as pairs of rows (zeros past K).
template <int N, int K, int KP>
inline void pack_b_bf16(int32_t *bp, const bf16 *b) {
    constexpr int N16 = N - N % 16;
    for (int kp = 0; kp < KP; ++kp) {
        const bf16 *first = b + 2 * kp * N;
        const bool pair = 2 * kp + 1 < K;
        int j = 0;
        // NOTE: the maskz forms, all lanes: g++ 12 warns that the plain ones use an undefined value
        for (; j < N16; j += 16) {
            auto widened = [&](const bf16 *p) {
                return _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
            };
            const __m512i lo = pair ? widened(first + N + j) : _mm512_setzero_si512();
            _mm512_storeu_si512(bp + kp * N + j, _mm512_or_si512(_mm512_maskz_slli_epi32(0xFFFF, widened(first + j), 16), lo));
        }
        for (; j < N; ++j) bp[kp * N + j] = bf16_pair(first[j].bits, pair ? first[N + j].bits : uint16_t{0});
    }
}

/// c (M x N float) += a (M x K) @ b (K x N), bf16 row-major arrays, through vdpbf16ps.
// NOTE: noinline for the same reason as matmul_f32.
template <int M, int N, int K>
[[gnu::noinline]] inline void matmul_bf16_dot(float *c, const bf16 *a, const bf16 *b) {
    constexpr int W = Bf16DotVec::width;
    constexpr int NB = kMatmulVecs * W;
    constexpr int KP = (K + 1) / 2;
    constexpr int MR = kMatmulRows;
    alignas(64) int32_t ap[M * KP];
    alignas(64) int32_t bp[KP * N];
    pack_a_bf16<M, K, KP>(ap, a);
    pack_b_bf16<N, K, KP>(bp, b);
    int32_t *ci = reinterpret_cast<int32_t *>(c);  // the accumulators' bits (Bf16DotVec::step)
    auto panel = [&](auto nv, int j0) {
        constexpr int NV = decltype(nv)::value;
        int i = 0;
        for (; i + MR <= M; i += MR) register_block<Bf16DotVec, MR, NV>(ap + i * KP, KP, bp + j0, N, ci + i * N + j0, N, KP);
        if constexpr (M % MR != 0)
            register_block<Bf16DotVec, M % MR, NV>(ap + i * KP, KP, bp + j0, N, ci + i * N + j0, N, KP);
    };
    int j = 0;
    for (; j + NB <= N; j += NB) panel(std::integral_constant<int, kMatmulVecs>{}, j);
    for (; j + W <= N; j += W) panel(std::integral_constant<int, 1>{}, j);
    if constexpr (N % W != 0) matmul_f32_columns<M, N, K, N - N % W>(c, a, b);  // matmul's edge, same order
}

}  // namespace detail
#endif

/// acc += a @ b for bf16 a (M x K) and b (K x N) through the bf16 dot-product instruction where
/// the CPU has it (see the top of this file), else matmul_acc.
template <int M, int N, int MA, int K, int KB, int NB>
inline void matmul_acc_dot(Tile<float, M, N> &acc, const Tile<bf16, MA, K> &a, const Tile<bf16, KB, NB> &b) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    static_assert(K == KB, "matmul: a's column count must equal b's row count");
    static_assert(M == MA && N == NB, "matmul_acc: acc must have a's rows and b's columns");
    for (int i = 0; i < M * N; ++i) acc.data[i] += 0.0f;  // as matmul_acc: never -0 from here on
    detail::matmul_bf16_dot<M, N, K>(acc.data, a.data, b.data);
#else
    matmul_acc(acc, a, b);
#endif
}

/// a @ b as a float tile for bf16 a and b, through the bf16 dot-product instruction where the CPU
/// has it, else matmul.
template <int M, int K, int KB, int N>
inline Tile<float, M, N> matmul_dot(const Tile<bf16, M, K> &a, const Tile<bf16, KB, N> &b) {
    Tile<float, M, N> acc = zeros<float, M, N>();
    matmul_acc_dot(acc, a, b);
    return acc;
}

}  // namespace ts
