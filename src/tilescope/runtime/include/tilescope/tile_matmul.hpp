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
// one vector or scalar loops.
#pragma once

#include <type_traits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include <tilescope/tile_cast.hpp>
#include <tilescope/tile_math.hpp>

namespace ts {

namespace detail {

/// The SIMD vector of floats the matmul kernel is written against.
#if defined(__AVX512F__)
struct FloatVec {
    using reg = __m512;
    static constexpr int width = 16;
    static reg load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, reg v) { _mm512_storeu_ps(p, v); }
    static reg splat(float x) { return _mm512_set1_ps(x); }
    static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
};
inline constexpr int kMatmulRows = 12;  // 12 x 2 accumulators + 2 b vectors + 1 broadcast of 32 registers
inline constexpr int kMatmulVecs = 2;
#elif defined(__AVX2__) && defined(__FMA__)
struct FloatVec {
    using reg = __m256;
    static constexpr int width = 8;
    static reg load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, reg v) { _mm256_storeu_ps(p, v); }
    static reg splat(float x) { return _mm256_set1_ps(x); }
    static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
};
inline constexpr int kMatmulRows = 6;  // 6 x 2 accumulators + 2 b vectors + 1 broadcast of 16 registers
inline constexpr int kMatmulVecs = 2;
#else
struct FloatVec {  // portable fallback: one float per "vector"
    using reg = float;
    static constexpr int width = 1;
    static reg load(const float *p) { return *p; }
    static void store(float *p, reg v) { *p = v; }
    static reg splat(float x) { return x; }
    static reg fmadd(reg a, reg b, reg c) { return fmath::detail::fmadd(a, b, c); }
};
inline constexpr int kMatmulRows = 4;
inline constexpr int kMatmulVecs = 4;
#endif

/// c[0:MR, 0:NV*W] += a[0:MR, 0:K] @ b[0:K, 0:NV*W]; row strides lda, ldb, ldc.
template <int MR, int NV>
inline void matmul_block(const float *a, int lda, const float *b, int ldb, float *c, int ldc, int K) {
    using V = FloatVec;
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
            for (int j = 0; j < NV; ++j) acc[i][j] = V::fmadd(ai, bk[j], acc[i][j]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) V::store(c + i * ldc + j * W, acc[i][j]);
    }
}

/// Columns [j0, j0 + NV*W) of c (M x N) += a (M x K) @ b (K x N), all rows.
template <int M, int N, int K, int NV>
inline void matmul_panel(float *c, const float *a, const float *b, int j0) {
    constexpr int MR = kMatmulRows;
    int i = 0;
    for (; i + MR <= M; i += MR) matmul_block<MR, NV>(a + i * K, K, b + j0, N, c + i * N + j0, N, K);
    if constexpr (M % MR != 0) matmul_block<M % MR, NV>(a + i * K, K, b + j0, N, c + i * N + j0, N, K);
}

/// c (M x N) += a (M x K) @ b (K x N), row-major float arrays.
// NOTE: noinline, so the register blocking gets the whole register file whatever the calling
// kernel keeps live (inlined into a checked kernel, the bounds checks' values pushed the
// microkernel's B vectors onto the stack: matmul 1024^3 ran 1.3x slower).
template <int M, int N, int K>
[[gnu::noinline]] inline void matmul_f32(float *c, const float *a, const float *b) {
    constexpr int W = FloatVec::width;
    constexpr int NB = kMatmulVecs * W;
    int j = 0;
    for (; j + NB <= N; j += NB) matmul_panel<M, N, K, kMatmulVecs>(c, a, b, j);
    for (; j + W <= N; j += W) matmul_panel<M, N, K, 1>(c, a, b, j);
    if (j < N) {  // leftover columns (N not a multiple of W): same order, scalar fused steps
        for (int i = 0; i < M; ++i) {
            for (int k = 0; k < K; ++k) {
                const float aik = a[i * K + k];
                for (int jj = j; jj < N; ++jj) c[i * N + jj] = fmath::detail::fmadd(aik, b[k * N + jj], c[i * N + jj]);
            }
        }
    }
}

}  // namespace detail

/// acc += a @ b with fp32 accumulation; a: M x K, b: K x N, T in {float, bf16, f16}.
template <class T, int M, int N, int MA, int K, int KB, int NB>
inline void matmul_acc(Tile<float, M, N> &acc, const Tile<T, MA, K> &a, const Tile<T, KB, NB> &b) {
    static_assert(std::is_same_v<T, float> || is_half_v<T>, "matmul: inputs must be float, bf16 or f16 tiles");
    static_assert(K == KB, "matmul: a's column count must equal b's row count");
    static_assert(M == MA && N == NB, "matmul_acc: acc must have a's rows and b's columns");
    // acc + (a @ b) as torch computes it: a @ b starts from +0.0, so an acc of -0.0 plus
    // products that are all zero is +0.0 (acc + 0.0 changes nothing else)
    for (int i = 0; i < M * N; ++i) acc.data[i] += 0.0f;
    if constexpr (std::is_same_v<T, float>) {
        detail::matmul_f32<M, N, K>(acc.data, a.data, b.data);
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
