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

}  // namespace ts

#endif  // TILESCOPE_KERNEL_HPP
