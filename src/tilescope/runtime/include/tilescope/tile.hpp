// tilescope tile library (header-only, C++17, namespace ts).
//
// Generated kernels include this one header and `using namespace ts;`:
//
//   extern "C" void kernel_entry(const ts_arg *args) {
//       ts::TensorView<float> x(args[0]), y(args[1]);     // tensor arguments
//       float eps = ts::scalar_arg<float>(args[2]);         // scalar arguments
//       Tile<float, 64, 128> t = load<64, 128>(x, {0, h});  // one offset per tensor dim
//       Tile<float, 64, 1> ss = row_sum(t * t);
//       store(y, {0, h}, t * rsqrt(ss / 128.0f + eps));     // numpy broadcasting
//   }
//
// What is where:
//   tile_types.hpp        bf16 / f16, compute types, scalar conversions, RoundMode
//   tile_core.hpp         Tile, TensorView, scalar_arg, zeros/full, iota, slice, load/store,
//                         load_valid/store_valid, load_rows, bounds checks
//                         (define TS_CHECK_BOUNDS)
//   tile_math.hpp         the vectorizable float transcendentals behind the unary math ops
//                         and pow (accuracy notes there)
//   tile_transpose.hpp    transpose (SIMD blocks for 2- and 4-byte elements)
//   tile_elementwise.hpp  + - * /, maximum/minimum, pow, unary math, comparisons, where, logical
//   tile_view.hpp         TileView, view(): a box of a tensor the kernel only reads, read in place
//   tile_fused.hpp        fuse(tile): an elementwise expression computed in one loop when stored
//   tile_cast.hpp         cast<U>(tile, RoundMode)
//   tile_reduce.hpp       row_sum/row_max/row_min/row_mean, col_sum/col_max/col_min/col_mean
//   tile_matmul.hpp       matmul / matmul_acc (fp32 accumulation)
//   tile_matmul_i8.hpp    matmul / matmul_acc of int8 inputs (exact int32)
//   tile_weights.hpp      weight(view): an int8 matmul's b from a ts.Weight, packed once and kept
//   tile_matmul_dot.hpp   matmul_dot / matmul_acc_dot: bf16 through vdpbf16ps (opt-in,
//                         bf16_matmul="dot"; the same bits but for subnormals)
//
// Conventions: tiles are values (fixed-size, 64-byte aligned, row-major, at most 2-D; a 1-D
// tile of N elements is Tile<T, 1, N>). Every op returns a new tile. Ops follow torch's
// eager semantics one op at a time (bf16/f16 compute in float and round each result); each
// file's header says where it deliberately differs (scalars take the tile's type first,
// saturating float -> int casts, silu(-Inf) = -0, wrapping integer sums).
//
// Numerics in one paragraph: + - * / sqrt and all conversions are correctly rounded
// (bit-identical to torch except NaN payloads; torch's own CPU sqrt is not always correctly
// rounded). exp <= 1 ulp, log <= 1 ulp, the other transcendentals of tile_math.hpp <= 0.51
// ulp (each measured there).
// Reductions and matmul use fixed, documented summation orders (tile_reduce.hpp,
// tile_matmul.hpp): results are reproducible run to run, and a matmul's are also the same
// whatever the tile shape or K split.
//
// The library compiles cleanly with -Wall -Wextra and vectorizes without -ffast-math.
#pragma once

#include <tilescope/abi.h>
#include <tilescope/tile_types.hpp>
#include <tilescope/tile_core.hpp>
#include <tilescope/tile_transpose.hpp>
#include <tilescope/tile_math.hpp>
#include <tilescope/tile_elementwise.hpp>
#include <tilescope/tile_view.hpp>
#include <tilescope/tile_fused.hpp>
#include <tilescope/tile_prefetch.hpp>
#include <tilescope/tile_cast.hpp>
#include <tilescope/tile_reduce.hpp>
#include <tilescope/tile_matmul.hpp>
#include <tilescope/tile_matmul_i8.hpp>
#include <tilescope/tile_weights.hpp>
#include <tilescope/tile_matmul_dot.hpp>
#include <tilescope/tile_random.hpp>
