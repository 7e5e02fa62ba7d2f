// tilescope tile library: matmul with fp32 accumulation.
//
//   Tile<float, M, N> matmul(a, b);       // a: Tile<T, M, K>, b: Tile<T, K, N>
//   void matmul_acc(acc, a, b);           // acc += a @ b, in place
// with T one of float, bf16, f16 (bf16/f16 inputs are widened to float first, exactly).
//
// Numerics: every output element accumulates its K products in order k = 0, 1, ..., K-1,
// each step one fused multiply-add (a*b + acc rounded once) where the CPU has FMA. So the
// result does not depend on the tile shape or the SIMD width.
//
// Speed: the output is computed in register blocks of MR rows x (NV * W) columns (W = SIMD
// width): the block's accumulators stay in registers for the whole K loop, each step
// broadcasts one a element per row and loads NV vectors of b. Blocks: AVX-512 12 x 32,
// AVX2+FMA 6 x 16, otherwise 4 x 4 scalars. Edge rows use a shorter block, edge columns
// one vector or scalar loops. bf16/f16 inputs are widened to float tiles first, except a bf16 b
// with fewer than two blocks of rows (M < 2 MR), which the microkernel widens in registers as it
// loads it (the same floats, so the same bits; no float copy of b written and read back).
//
// See benchmarks/tile_matmul.py for timings of each path.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include <tilescope/tile_cast.hpp>
#include <tilescope/tile_math.hpp>
#include <tilescope/tile_view.hpp>

namespace ts {

namespace detail {

/// The SIMD vector of floats the matmul kernel is written against.
#if defined(__AVX512F__)
struct FloatVec {
    using reg = __m512;
    using elem = float;
    static constexpr int width = 16;
    static reg load(const float *p) { return _mm512_loadu_ps(p); }
    static reg load(const bf16 *p) {  // 16 bf16 widened: each one's bits are its float's high half
        // NOTE: the zero-masked forms, the same instructions: the plain ones start from
        // _mm512_undefined_epi32(), which g++ 12 warns of as used uninitialized
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
        const __m512i w = _mm512_maskz_cvtepu16_epi32(static_cast<__mmask16>(-1), h);
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(static_cast<__mmask16>(-1), w, 16));
    }
    static void store(float *p, reg v) { _mm512_storeu_ps(p, v); }
    static reg splat(float x) { return _mm512_set1_ps(x); }
    static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static reg step(reg a, reg b, reg acc) { return fmadd(a, b, acc); }
};
inline constexpr int kMatmulRows = 12;  // 12 x 2 accumulators + 2 b vectors + 1 broadcast of 32 registers
inline constexpr int kMatmulVecs = 2;
#elif defined(__AVX2__) && defined(__FMA__)
struct FloatVec {
    using reg = __m256;
    using elem = float;
    static constexpr int width = 8;
    static reg load(const float *p) { return _mm256_loadu_ps(p); }
    static reg load(const bf16 *p) {  // 8 bf16 widened: each one's bits are its float's high half
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static void store(float *p, reg v) { _mm256_storeu_ps(p, v); }
    static reg splat(float x) { return _mm256_set1_ps(x); }
    static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static reg step(reg a, reg b, reg acc) { return fmadd(a, b, acc); }
};
inline constexpr int kMatmulRows = 6;  // 6 x 2 accumulators + 2 b vectors + 1 broadcast of 16 registers
inline constexpr int kMatmulVecs = 2;
#else
struct FloatVec {  // portable fallback: one float per "vector"
    using reg = float;
    using elem = float;
    static constexpr int width = 1;
    static reg load(const float *p) { return *p; }
    static reg load(const bf16 *p) { return static_cast<float>(*p); }
    static void store(float *p, reg v) { *p = v; }
    static reg splat(float x) { return x; }
    static reg fmadd(reg a, reg b, reg c) { return fmath::detail::fmadd(a, b, c); }
    static reg step(reg a, reg b, reg acc) { return fmadd(a, b, acc); }
};
inline constexpr int kMatmulRows = 4;
inline constexpr int kMatmulVecs = 4;
#endif

/// c[0:MR, 0:NV*W] += a[0:MR, 0:K] @ b[0:K, 0:NV*W] in registers, one V::step per a element and b
/// vector (FloatVec: a fused multiply-add of floats; I8Vec: K counts groups of 2 or 4 int8, each
/// step multiplies and adds a group); row strides lda, ldb, ldc in elements. b's elements are
/// V::elem, or bf16 for FloatVec (widened as they are loaded, exactly).
template <class V, int MR, int NV, class B = typename V::elem>
inline void register_block(const typename V::elem *a, int lda, const B *b, int ldb, typename V::elem *c, int ldc,
                           int K) {
    constexpr int W = V::width;
    typename V::reg acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) acc[i][j] = V::load(c + i * ldc + j * W);
    }
    for (int k = 0; k < K; ++k) {
        typename V::reg bk[NV];
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) bk[j] = V::load(b + k * ldb + j * W);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const typename V::reg ai = V::splat(a[i * lda + k]);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) acc[i][j] = V::step(ai, bk[j], acc[i][j]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) V::store(c + i * ldc + j * W, acc[i][j]);
    }
}

/// Columns [j0, j0 + NV*W) of c (M x N) += a (M x K) @ b (K x N), all rows.
template <int M, int N, int K, int NV, class B>
inline void matmul_panel(float *c, const float *a, const B *b, int j0) {
    constexpr int MR = kMatmulRows;
    int i = 0;
    for (; i + MR <= M; i += MR) register_block<FloatVec, MR, NV>(a + i * K, K, b + j0, N, c + i * N + j0, N, K);
    if constexpr (M % MR != 0) register_block<FloatVec, M % MR, NV>(a + i * K, K, b + j0, N, c + i * N + j0, N, K);
}

/// Columns [J0, N) of c (M x N) += a (M x K) @ b (K x N), in matmul's order, scalar fused steps:
/// the edge columns of the vector kernels (N not a multiple of the vector width).
template <int M, int N, int K, int J0, class TA, class TB>
inline void matmul_f32_columns(float *c, const TA *a, const TB *b) {
    for (int i = 0; i < M; ++i) {
        for (int k = 0; k < K; ++k) {
            const float aik = static_cast<float>(a[i * K + k]);
            for (int j = J0; j < N; ++j) c[i * N + j] = fmath::detail::fmadd(aik, static_cast<float>(b[k * N + j]), c[i * N + j]);
        }
    }
}

/// c (M x N) += a (M x K) @ b (K x N), row-major arrays: a of floats, b of floats or bf16 (widened
/// in registers as the microkernel loads it: the same floats, so the same result).
// NOTE: noinline, so the register blocking gets the whole register file whatever the calling
// kernel keeps live (inlined into a checked kernel, the bounds checks' values pushed the
// microkernel's B vectors onto the stack: matmul 1024^3 ran 1.3x slower).
template <int M, int N, int K, class B>
[[gnu::noinline]] inline void matmul_f32(float *c, const float *a, const B *b) {
    constexpr int W = FloatVec::width;
    constexpr int NB = kMatmulVecs * W;
    int j = 0;
    for (; j + NB <= N; j += NB) matmul_panel<M, N, K, kMatmulVecs>(c, a, b, j);
    for (; j + W <= N; j += W) matmul_panel<M, N, K, 1>(c, a, b, j);
    // NOTE: the leftover columns' first one as a constant (where the loops above stop): from the
    // run-time j, g++ warns of undefined behaviour it imagines in the loop below
    if constexpr (N % W != 0) matmul_f32_columns<M, N, K, N - N % W>(c, a, b);
}

}  // namespace detail

/// acc += a @ b with fp32 accumulation; a: M x K, b: K x N, T in {float, bf16, f16}.
template <class T, int M, int N, int MA, int K, int KB, int NB>
inline void matmul_acc(Tile<float, M, N> &acc, const Tile<T, MA, K> &a, const Tile<T, KB, NB> &b) {
    static_assert(std::is_same_v<T, float> || is_half_v<T>,
                  "matmul: inputs must be float, bf16 or f16 tiles (or int8 tiles with an int32 acc)");
    static_assert(K == KB, "matmul: a's column count must equal b's row count");
    static_assert(M == MA && N == NB, "matmul_acc: acc must have a's rows and b's columns");
    // acc + (a @ b) as torch computes it: a @ b starts from +0.0, so an acc of -0.0 plus
    // products that are all zero is +0.0 (acc + 0.0 changes nothing else)
    for (int i = 0; i < M * N; ++i) acc.data[i] += 0.0f;
    if constexpr (std::is_same_v<T, float>) {
        detail::matmul_f32<M, N, K>(acc.data, a.data, b.data);
    } else if constexpr (std::is_same_v<T, bf16> && M < 2 * detail::kMatmulRows) {
        // few rows: b is read by at most two row blocks, so it is widened as it is loaded instead of
        // into a float copy first (written, then read again); the same floats either way
        const Tile<float, M, K> af = cast<float>(a);
        detail::matmul_f32<M, N, K>(acc.data, af.data, b.data);
    } else {
        const Tile<float, M, K> af = cast<float>(a);
        const Tile<float, K, N> bf = cast<float>(b);
        detail::matmul_f32<M, N, K>(acc.data, af.data, bf.data);
    }
}

/// a @ b as a float tile (fp32 accumulation); a: M x K, b: K x N, T in {float, bf16, f16}.
template <class T, int M, int K, int KB, int N>
inline Tile<float, M, N> matmul(const Tile<T, M, K> &a, const Tile<T, KB, N> &b) {
    Tile<float, M, N> acc = zeros<float, M, N>();
    matmul_acc(acc, a, b);
    return acc;
}

}  // namespace ts
