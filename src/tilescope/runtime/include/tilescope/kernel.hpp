// What generated kernels include: the tile library plus the few helpers generated code
// needs beyond it (Python-style integer division of indices, value-returning matmul with an
// accumulator).
#ifndef TILESCOPE_KERNEL_HPP
#define TILESCOPE_KERNEL_HPP

#include <tilescope/index.hpp>
#include <tilescope/tile.hpp>

namespace ts {

// ts.matmul(a, b, acc=acc) as a value: acc + a @ b, accumulated in fp32 (int32 for int8 inputs).
template <class T, class A, int M, int K, int N>
inline Tile<A, M, N> matmul(const Tile<T, M, K> &a, const Tile<T, K, N> &b, const Tile<A, M, N> &acc) {
    Tile<A, M, N> out = acc;
    matmul_acc(out, a, b);
    return out;
}

// The same for int8 inputs of which one or both are tile views (tile_matmul_i8.hpp).
template <int M, int N, class A, class B, std::enable_if_t<detail::i8_view_pair_v<A, B>, int> = 0>
inline Tile<int32_t, M, N> matmul(const A &a, const B &b, const Tile<int32_t, M, N> &acc) {
    Tile<int32_t, M, N> out = acc;
    matmul_acc(out, a, b);
    return out;
}

// The same for an int8 b read from a ts.Weight (tile_weights.hpp).
template <int M, int N, class A, int K, std::enable_if_t<detail::I8Operand<A>::ok, int> = 0>
inline Tile<int32_t, M, N> matmul(const A &a, const WeightView<K, N> &b, const Tile<int32_t, M, N> &acc) {
    Tile<int32_t, M, N> out = acc;
    matmul_acc(out, a, b);
    return out;
}

// The same for bf16 inputs compiled with bf16_matmul="dot" (tile_matmul_dot.hpp).
template <int M, int K, int N>
inline Tile<float, M, N> matmul_dot(const Tile<bf16, M, K> &a, const Tile<bf16, K, N> &b, const Tile<float, M, N> &acc) {
    Tile<float, M, N> out = acc;
    matmul_acc_dot(out, a, b);
    return out;
}

}  // namespace ts

#endif  // TILESCOPE_KERNEL_HPP
