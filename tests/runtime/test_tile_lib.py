"""The header-only C++ tile library (src/tilescope/runtime/include/tilescope/tile*.hpp) against torch.

Invariants checked here:
  - elementwise ops, casts and bf16/f16 conversions are bit-identical to torch where torch is
    correctly rounded (+ - * / sqrt, conversions, comparisons, integer wrap-around);
  - exp/log are within 2 ulp and tanh/sigmoid/silu within 1 ulp of float64 references over a
    wide sweep that includes overflow, underflow, subnormals, NaN, +-Inf and -0; erf, exp2, log2,
    gelu, gelu_tanh and pow within 0.51 ulp, reciprocal bit-exact, pow's C99 special cases exactly
    as torch.pow's;
  - reductions (and row_mean/col_mean) follow their documented summation order bit-exactly; matmul
    accumulates each output in k order with fused multiply-adds (bit-exact where the CPU has FMA);
    int8 matmul is exact, wrapping mod 2^32;
  - load/store honour strides and leading-dim offsets of 1-D..4-D views; TS_CHECK_BOUNDS aborts
    with a message naming the op, offsets, tile and tensor shape;
  - load_valid/store_valid touch only the valid box (fills elsewhere, sentinels around it stay),
    throw BoundsError for valid counts outside the tile in every build, and their checked
    overloads (check.hpp) check only the valid box; load_rows gathers rows like torch indexing,
    its ragged form reads no index past valid_rows, and its checked overload names a bad index;
    the access audit records only valid boxes and one record per gathered row;
  - the library compiles without a single warning under the kernel flags.

The C++ side is seven programs compiled once per session, in parallel, with the exact kernel
flags: four shared libraries whose ops are looked up by name through `ts_test_call` (plus a few
`extern "C"` kernels taking `ts_arg` arrays, called like the runtime calls `kernel_entry`), a
bounds-check executable built with -DTS_CHECK_BOUNDS, and the ragged-access kernels built plain
and with -DTS_AUDIT_ACCESSES. The matmul ops are also built once per lower instruction-set path
(ISA_FLAGS: AVX-512 with VNNI and without it, AVX2 with and without AVX-VNNI, SSE2; none of them
with AMX, which `native` takes for int8 where the CPU has it), each run where the CPU has it.
Data moves through torch tensors' buffers via ctypes.
"""

from __future__ import annotations

import ctypes
import math
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tilescope.ir import op_registry as reg
from tilescope.runtime.abi import MAX_DIMS
from tilescope.runtime.unary_ops import unary_fn
from tilescope.toolchain import BASE_FLAGS, march_flag

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

INCLUDE = Path(__file__).resolve().parents[2] / "src" / "tilescope" / "runtime" / "include"
# The flags every generated kernel is compiled with (-march= from TILESCOPE_MARCH, default native).
KERNEL_FLAGS = [*(f for f in BASE_FLAGS if f != "-ffp-contract=off"), march_flag(), "-g1"]

DTYPES = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f64": torch.float64,
    "i32": torch.int32,
    "i64": torch.int64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
}
INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "i8": (-128, 127), "u8": (0, 255)}
MODES = ["rint", "round", "floor", "ceil", "trunc"]

# ---------------------------------------------------------------------------------------------
# C++ sources
# ---------------------------------------------------------------------------------------------

PRELUDE = r"""
#include <tilescope/tile.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

using namespace ts;

namespace {
using Fn = void (*)(void **bufs, int64_t n, const double *p);
std::map<std::string, Fn> &registry() {
    static std::map<std::string, Fn> r;
    return r;
}
struct Reg {
    Reg(const std::string &name, Fn f) { registry()[name] = f; }
};
#define TS_CAT2(a, b) a##b
#define TS_CAT(a, b) TS_CAT2(a, b)
#define REG(NAME, ...) \
    static Reg TS_CAT(reg_, __COUNTER__)(NAME, [](void **b, int64_t n, const double *p) { (void)b; (void)n; (void)p; __VA_ARGS__; });

template <class T>
T *buf(void **b, int i) { return static_cast<T *>(b[i]); }

// Elementwise ops run over n elements in chunks of one 4 x 64 tile (the tail zero-padded).
constexpr int CR = 4, CC = 64, CS = CR * CC;

template <class T>
Tile<T, CR, CC> chunk(const T *src, int64_t m) {
    Tile<T, CR, CC> t = zeros<T, CR, CC>();
    std::memcpy(t.data, src, static_cast<size_t>(m) * sizeof(T));
    return t;
}

template <class U, class T, int R, int C>
void put(U *dst, const Tile<T, R, C> &t, int64_t m) {
    static_assert(std::is_same_v<U, T>, "output buffer type");
    std::memcpy(dst, t.data, static_cast<size_t>(m) * sizeof(T));
}

template <class T, class U, class F>
void unary(void **b, int64_t n, F f) {
    for (int64_t i = 0; i < n; i += CS) {
        const int64_t m = std::min<int64_t>(CS, n - i);
        put(buf<U>(b, 1) + i, f(chunk(buf<T>(b, 0) + i, m)), m);
    }
}

template <class T, class U, class F>
void binary(void **b, int64_t n, F f) {
    for (int64_t i = 0; i < n; i += CS) {
        const int64_t m = std::min<int64_t>(CS, n - i);
        put(buf<U>(b, 2) + i, f(chunk(buf<T>(b, 0) + i, m), chunk(buf<T>(b, 1) + i, m)), m);
    }
}

// A whole tile of fixed shape from / to a contiguous buffer.
template <class T, int R, int C>
Tile<T, R, C> whole(const void *src) {
    Tile<T, R, C> t;
    std::memcpy(t.data, src, sizeof(T) * R * C);
    return t;
}
}  // namespace

extern "C" int ts_test_call(const char *name, void **bufs, int64_t n, const double *params) {
    auto it = registry().find(name);
    if (it == registry().end()) return -1;
    it->second(bufs, n, params);
    return 0;
}
"""

# Every float unary op of the op registry as "<name>_<dtype>": its tile function on a tile.
FLOAT_UNARY = [d for d in (reg.OPS[n] for n in reg.unary_ops()) if d.dtypes == reg.FLOAT]
REGISTRY_UNARY_MACRO = "#define REGISTRY_UNARY_OPS(T, S) " + "".join(
    f'\\\n    REG("{d.name}_" S, unary<T, T>(b, n, [](const auto &x) {{ return {d.cpp}(x); }}))' for d in FLOAT_UNARY
)

ELEMENTWISE_MACROS = REGISTRY_UNARY_MACRO + r"""
#define FLOAT_OPS(T, S)                                                                          \
    REGISTRY_UNARY_OPS(T, S)                                                                     \
    REG("abs_" S, unary<T, T>(b, n, [](const auto &x) { return abs(x); }))                       \
    REG("neg_" S, unary<T, T>(b, n, [](const auto &x) { return neg(x); }))                       \
    REG("uminus_" S, unary<T, T>(b, n, [](const auto &x) { return -x; }))                        \
    REG("div_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return x / y; }))        \
    REG("add_s_" S, unary<T, T>(b, n, [p](const auto &x) { return x + float(p[0]); }))           \
    REG("rsub_s_" S, unary<T, T>(b, n, [p](const auto &x) { return float(p[0]) - x; }))          \
    REG("mul_s_" S, unary<T, T>(b, n, [p](const auto &x) { return x * float(p[0]); }))           \
    REG("div_s_" S, unary<T, T>(b, n, [p](const auto &x) { return x / float(p[0]); }))           \
    REG("rdiv_s_" S, unary<T, T>(b, n, [p](const auto &x) { return float(p[0]) / x; }))          \
    REG("max_s_" S, unary<T, T>(b, n, [p](const auto &x) { return maximum(x, float(p[0])); }))   \
    REG("lt_s_" S, unary<T, bool>(b, n, [p](const auto &x) { return x < float(p[0]); }))         \
    REG("eq_s_" S, unary<T, bool>(b, n, [p](const auto &x) { return eq(float(p[0]), x); }))    \
    POW_OPS(T, S)

#define POW_OPS(T, S)                                                                      \
    REG("pow_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return pow(x, y); }))    \
    REG("pow_ts_" S, unary<T, T>(b, n, [p](const auto &x) { return pow(x, p[0]); }))            \
    REG("pow_st_" S, unary<T, T>(b, n, [p](const auto &x) { return pow(p[0], x); }))

#define OPERATOR_CMPS(T, S)                                                                      \
    REG("op_eq_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x == y; }))  \
    REG("op_ne_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x != y; }))  \
    REG("op_lt_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x < y; }))   \
    REG("op_le_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x <= y; }))  \
    REG("op_gt_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x > y; }))   \
    REG("op_ge_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return x >= y; }))

#define COMMON_OPS(T, S)                                                                         \
    REG("add_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return x + y; }))        \
    REG("sub_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return x - y; }))        \
    REG("mul_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return x * y; }))        \
    REG("maximum_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return maximum(x, y); })) \
    REG("minimum_" S, binary<T, T>(b, n, [](const auto &x, const auto &y) { return minimum(x, y); })) \
    REG("eq_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return eq(x, y); }))   \
    REG("ne_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return ne(x, y); }))   \
    REG("lt_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return lt(x, y); }))   \
    REG("le_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return le(x, y); }))   \
    REG("gt_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return gt(x, y); }))   \
    REG("ge_" S, binary<T, bool>(b, n, [](const auto &x, const auto &y) { return ge(x, y); }))   \
    REG("neg_" S, unary<T, T>(b, n, [](const auto &x) { return neg(x); }))                       \
    REG("abs_" S, unary<T, T>(b, n, [](const auto &x) { return abs(x); }))                       \
    REG("where_" S, for (int64_t i = 0; i < n; i += CS) {                                          \
        const int64_t m = std::min<int64_t>(CS, n - i);                                            \
        put(buf<T>(b, 3) + i, where(chunk(buf<bool>(b, 0) + i, m), chunk(buf<T>(b, 1) + i, m),      \
                                    chunk(buf<T>(b, 2) + i, m)), m);                               \
    })                                                                                             \
    REG("where_ts_" S, for (int64_t i = 0; i < n; i += CS) {                                       \
        const int64_t m = std::min<int64_t>(CS, n - i);                                            \
        put(buf<T>(b, 2) + i, where(chunk(buf<bool>(b, 0) + i, m), chunk(buf<T>(b, 1) + i, m), p[0]), m); \
    })                                                                                             \
    REG("where_st_" S, for (int64_t i = 0; i < n; i += CS) {                                       \
        const int64_t m = std::min<int64_t>(CS, n - i);                                            \
        put(buf<T>(b, 2) + i, where(chunk(buf<bool>(b, 0) + i, m), p[0], chunk(buf<T>(b, 1) + i, m)), m); \
    })

"""

UNIT_MATH = (
    ELEMENTWISE_MACROS
    + r"""
FLOAT_OPS(float, "f32")
FLOAT_OPS(bf16, "bf16")
FLOAT_OPS(f16, "f16")
REGISTRY_UNARY_OPS(double, "f64")
REG("div_f64", binary<double, double>(b, n, [](const auto &x, const auto &y) { return x / y; }))
REG("add_s_f64", unary<double, double>(b, n, [p](const auto &x) { return x + float(p[0]); }))
POW_OPS(double, "f64")
OPERATOR_CMPS(float, "f32")
OPERATOR_CMPS(int32_t, "i32")
"""
)

UNIT_COMMON = (
    ELEMENTWISE_MACROS
    + r"""
COMMON_OPS(float, "f32")
COMMON_OPS(bf16, "bf16")
COMMON_OPS(f16, "f16")
COMMON_OPS(double, "f64")
COMMON_OPS(int32_t, "i32")
COMMON_OPS(int8_t, "i8")
COMMON_OPS(uint8_t, "u8")
COMMON_OPS(int64_t, "i64")

REG("logical_and", binary<bool, bool>(b, n, [](const auto &x, const auto &y) { return logical_and(x, y); }))
REG("logical_or", binary<bool, bool>(b, n, [](const auto &x, const auto &y) { return logical_or(x, y); }))
REG("logical_not", unary<bool, bool>(b, n, [](const auto &x) { return logical_not(x); }))
REG("where_ss_f32", unary<bool, float>(b, n, [p](const auto &c) { return where(c, float(p[0]), float(p[1])); }))

"""
)

UNIT_CAST_BROADCAST = r"""
// Broadcasting: "bc_<op>_<dtype>_<A rows>x<A cols>_<B rows>x<B cols>", output row-major.
template <class T, int R1, int C1, int R2, int C2, class F>
void bcast(void **b, F f) {
    const auto out = f(whole<T, R1, C1>(b[0]), whole<T, R2, C2>(b[1]));
    std::memcpy(b[2], out.data, sizeof(out.data));
}
#define BC_SHAPES(OP, T, S, EXPR)                                                             \
    REG("bc_" OP "_" S "_6x40_6x1", bcast<T, 6, 40, 6, 1>(b, EXPR))                            \
    REG("bc_" OP "_" S "_6x40_1x40", bcast<T, 6, 40, 1, 40>(b, EXPR))                          \
    REG("bc_" OP "_" S "_6x40_1x1", bcast<T, 6, 40, 1, 1>(b, EXPR))                            \
    REG("bc_" OP "_" S "_6x1_1x40", bcast<T, 6, 1, 1, 40>(b, EXPR))                            \
    REG("bc_" OP "_" S "_1x40_6x40", bcast<T, 1, 40, 6, 40>(b, EXPR))                          \
    REG("bc_" OP "_" S "_6x1_6x40", bcast<T, 6, 1, 6, 40>(b, EXPR))                            \
    REG("bc_" OP "_" S "_1x1_6x40", bcast<T, 1, 1, 6, 40>(b, EXPR))
#define BC_OPS(T, S)                                                                          \
    BC_SHAPES("add", T, S, [](const auto &x, const auto &y) { return x + y; })                 \
    BC_SHAPES("sub", T, S, [](const auto &x, const auto &y) { return x - y; })                 \
    BC_SHAPES("mul", T, S, [](const auto &x, const auto &y) { return x * y; })                 \
    BC_SHAPES("div", T, S, [](const auto &x, const auto &y) { return x / y; })                 \
    BC_SHAPES("maximum", T, S, [](const auto &x, const auto &y) { return maximum(x, y); })     \
    BC_SHAPES("lt", T, S, [](const auto &x, const auto &y) { return x < y; })                  \
    BC_SHAPES("where", T, S, [](const auto &x, const auto &y) { return where(x > y, x, y); })
BC_OPS(float, "f32")
BC_SHAPES("pow", float, "f32", [](const auto &x, const auto &y) { return pow(x, y); })
BC_SHAPES("add", bf16, "bf16", [](const auto &x, const auto &y) { return x + y; })
BC_SHAPES("where", bf16, "bf16", [](const auto &x, const auto &y) { return where(x > y, x, y); })

// ---- casts: "cast_<from>_<to>[_<mode>]" --------------------------------------------------
#define CAST_MODES(T, S, U, SU)                                                                           \
    REG("cast_" S "_" SU "_rint", unary<T, U>(b, n, [](const auto &x) { return cast<U>(x); }))              \
    REG("cast_" S "_" SU "_round", unary<T, U>(b, n, [](const auto &x) { return cast<U>(x, RoundMode::round); })) \
    REG("cast_" S "_" SU "_floor", unary<T, U>(b, n, [](const auto &x) { return cast<U>(x, RoundMode::floor); })) \
    REG("cast_" S "_" SU "_ceil", unary<T, U>(b, n, [](const auto &x) { return cast<U>(x, RoundMode::ceil); }))   \
    REG("cast_" S "_" SU "_trunc", unary<T, U>(b, n, [](const auto &x) { return cast<U>(x, RoundMode::trunc); }))
#define CAST_TO_INTS(T, S)                                                                               \
    CAST_MODES(T, S, int32_t, "i32") CAST_MODES(T, S, int8_t, "i8") CAST_MODES(T, S, uint8_t, "u8")          \
    CAST_MODES(T, S, int64_t, "i64")
CAST_TO_INTS(float, "f32")
CAST_MODES(bf16, "bf16", int32_t, "i32") CAST_MODES(bf16, "bf16", uint8_t, "u8")
CAST_MODES(f16, "f16", int8_t, "i8")
CAST_MODES(double, "f64", int32_t, "i32") CAST_MODES(double, "f64", int64_t, "i64")
#define CAST(T, S, U, SU) REG("cast_" S "_" SU, unary<T, U>(b, n, [](const auto &x) { return cast<U>(x); }))
CAST(float, "f32", bf16, "bf16") CAST(float, "f32", f16, "f16") CAST(bf16, "bf16", float, "f32")
CAST(f16, "f16", float, "f32") CAST(double, "f64", float, "f32") CAST(double, "f64", bf16, "bf16")
CAST(double, "f64", f16, "f16") CAST(float, "f32", double, "f64") CAST(bf16, "bf16", f16, "f16")
CAST(f16, "f16", bf16, "bf16") CAST(int32_t, "i32", float, "f32") CAST(int32_t, "i32", bf16, "bf16")
CAST(int64_t, "i64", float, "f32") CAST(int32_t, "i32", int8_t, "i8") CAST(int8_t, "i8", uint8_t, "u8")
CAST(int32_t, "i32", int64_t, "i64") CAST(uint8_t, "u8", int32_t, "i32") CAST(float, "f32", bool, "bool")
CAST(bf16, "bf16", bool, "bool") CAST(int32_t, "i32", bool, "bool") CAST(bool, "bool", float, "f32")
CAST(bool, "bool", int32_t, "i32") CAST(bool, "bool", bf16, "bf16")

"""

# The matmul ops, also built once per lower instruction-set path (ISA_FLAGS).
UNIT_MATMUL = r"""
// ---- matmul: "mm_<dtype>_<M>x<K>x<N>" (b0 = a, b1 = b, b2 = out) and "mmacc_..." (b2 = acc in/out)
template <class T, int M, int K, int N>
void mm(void **b, bool accumulate) {
    Tile<float, M, N> acc = accumulate ? whole<float, M, N>(b[2]) : zeros<float, M, N>();
    if (accumulate) {
        matmul_acc(acc, whole<T, M, K>(b[0]), whole<T, K, N>(b[1]));
    } else {
        acc = matmul(whole<T, M, K>(b[0]), whole<T, K, N>(b[1]));
    }
    std::memcpy(b[2], acc.data, sizeof(acc.data));
}
#define MM(T, S, M, K, N, SHAPE) \
    REG("mm_" S "_" SHAPE, mm<T, M, K, N>(b, false)) REG("mmacc_" S "_" SHAPE, mm<T, M, K, N>(b, true))
MM(float, "f32", 64, 64, 64, "64x64x64")
MM(float, "f32", 13, 37, 19, "13x37x19")
MM(float, "f32", 7, 5, 24, "7x5x24")
MM(float, "f32", 1, 128, 1, "1x128x1")
MM(bf16, "bf16", 32, 40, 48, "32x40x48")
MM(bf16, "bf16", 5, 33, 37, "5x33x37")
MM(bf16, "bf16", 16, 24, 40, "16x24x40")
MM(bf16, "bf16", 1, 64, 130, "1x64x130")
MM(f16, "f16", 16, 8, 24, "16x8x24")

// int8 matmul: "mm_i8_<M>x<K>x<N>" (b2 = int32 out) and "mmacc_i8_..." (b2 = int32 acc in/out)
template <int M, int K, int N>
void mm_i8(void **b, bool accumulate) {
    Tile<int32_t, M, N> acc = whole<int32_t, M, N>(b[2]);
    if (accumulate) {
        matmul_acc(acc, whole<int8_t, M, K>(b[0]), whole<int8_t, K, N>(b[1]));
    } else {
        acc = matmul(whole<int8_t, M, K>(b[0]), whole<int8_t, K, N>(b[1]));
    }
    std::memcpy(b[2], acc.data, sizeof(acc.data));
}
#define MM_I8(M, K, N, SHAPE) \
    REG("mm_i8_" SHAPE, mm_i8<M, K, N>(b, false)) REG("mmacc_i8_" SHAPE, mm_i8<M, K, N>(b, true))
MM_I8(128, 128, 128, "128x128x128")
MM_I8(13, 37, 19, "13x37x19")
MM_I8(7, 5, 24, "7x5x24")
MM_I8(1, 128, 1, "1x128x1")
MM_I8(33, 9, 40, "33x9x40")
MM_I8(6, 1, 16, "6x1x16")
MM_I8(2, 300, 67, "2x300x67")
// whole 16 x 16 blocks of c: AMX where the CPU has it from K = 64 on (K's last K % 64 in blocks of
// their own); 16x36x48, with K below 64, takes VNNI even there
MM_I8(16, 36, 48, "16x36x48")
MM_I8(32, 68, 64, "32x68x64")
MM_I8(16, 128, 16, "16x128x16")
MM_I8(48, 100, 80, "48x100x80")

// int8 matmul of views, "mmv_i8_<M>x<K>x<N>": a is b0 as an M x (K + 5) matrix and b is b1 as a
// K x (N + 3) one, each read in place by view() (rows K + 5 and N + 3 bytes apart); b2 = int32
// acc in/out
// a rows x cols int8 matrix at data, rows cols bytes apart, as a kernel's tensor argument
inline TensorView<int8_t> int8_matrix(void *data, int64_t rows, int64_t cols) {
    ts_tensor t{};
    t.data = data; t.dtype = TS_I8; t.ndim = 2;
    t.shape[0] = rows; t.shape[1] = cols; t.strides[0] = cols; t.strides[1] = 1;
    return TensorView<int8_t>(t);
}

template <int M, int K, int N>
void mmv_i8(void **b) {
    const TensorView<int8_t> av = int8_matrix(b[0], M, K + 5), bv = int8_matrix(b[1], K, N + 3);
    Tile<int32_t, M, N> acc = whole<int32_t, M, N>(b[2]);
    const TileView<int8_t, M, K> a_view = view<M, K>(av, {0, 0});
    const TileView<int8_t, K, N> b_view = view<K, N>(bv, {0, 0});
    if (a_view.data != b[0] || b_view.data != b[1] || a_view.stride != K + 5 || b_view.stride != N + 3) std::abort();
    matmul_acc(acc, a_view, b_view);
    std::memcpy(b[2], acc.data, sizeof(acc.data));
}
#define MMV_I8(M, K, N, SHAPE) REG("mmv_i8_" SHAPE, mmv_i8<M, K, N>(b))
MMV_I8(7, 5, 24, "7x5x24")
MMV_I8(8, 67, 40, "8x67x40")  // K % 4 != 0 and long enough for the rows-ahead prefetch
MMV_I8(2, 300, 67, "2x300x67")
MMV_I8(16, 128, 16, "16x128x16")
MMV_I8(32, 68, 64, "32x68x64")
MMV_I8(48, 100, 80, "48x100x80")

// int8 matmul of a weight, "mmw_i8_<M>x<K>x<N>" (tile_weights.hpp): a is b0 (M x K), b is b1 as a
// K x (N + 3) matrix read in place through weight(view()). b2 = acc in, the first result out; then
// b's box is changed in place (each byte ^ 0x5A) and the same call gives b3 (the packed tile kept:
// the old result), then after weights_changed() b4 (packed again: the new result). b5 = two int32:
// the cache's tiles after the first call and after weights_changed().
template <int M, int K, int N>
void mmw_i8(void **b) {
    const TensorView<int8_t> bv = int8_matrix(b[1], K, N + 3);
    const Tile<int8_t, M, K> a = whole<int8_t, M, K>(b[0]);
    const Tile<int32_t, M, N> init = whole<int32_t, M, N>(b[2]);
    auto run = [&](void *out) {
        Tile<int32_t, M, N> acc = init;
        matmul_acc(acc, a, weight(view<K, N>(bv, {0, 0})));
        std::memcpy(out, acc.data, sizeof(acc.data));
    };
    weights_changed();
    run(b[2]);
    int32_t tiles[2] = {static_cast<int32_t>(detail::weight_cache().size()), 0};
    int8_t *raw = static_cast<int8_t *>(b[1]);
    for (int k = 0; k < K; ++k) {
        for (int j = 0; j < N; ++j) raw[k * (N + 3) + j] ^= 0x5A;
    }
    run(b[3]);
    weights_changed();
    tiles[1] = static_cast<int32_t>(detail::weight_cache().size());
    run(b[4]);
    std::memcpy(b[5], tiles, sizeof tiles);
}
#define MMW_I8(M, K, N, SHAPE) REG("mmw_i8_" SHAPE, mmw_i8<M, K, N>(b))
MMW_I8(7, 5, 24, "7x5x24")
MMW_I8(8, 67, 40, "8x67x40")
MMW_I8(2, 300, 67, "2x300x67")
MMW_I8(13, 37, 19, "13x37x19")
MMW_I8(5, 9, 3, "5x9x3")
MMW_I8(16, 36, 48, "16x36x48")
MMW_I8(33, 12, 100, "33x12x100")
MMW_I8(32, 68, 64, "32x68x64")  // AMX where the CPU has it: kept in the layout AMX reads

// "amx_used" (b0 = one int32): 1 where this build's int8 matmuls of whole 16 x 16 blocks run on
// AMX, 0 where its AMX path is refused the tile state, -1 where the build has no AMX path
void amx_used(void **b) {
#ifdef TS_MATMUL_AMX
    const int32_t used = detail::amx_permitted() ? 1 : 0;
#else
    const int32_t used = -1;
#endif
    std::memcpy(b[0], &used, sizeof used);
}
REG("amx_used", amx_used(b))

// bf16 through the dot-product instruction: "mmdot_<M>x<K>x<N>" (b2 = out) and "mmdotacc_..." (b2 = acc in/out)
template <int M, int K, int N>
void mm_dot(void **b, bool accumulate) {
    Tile<float, M, N> acc = whole<float, M, N>(b[2]);
    if (accumulate) {
        matmul_acc_dot(acc, whole<bf16, M, K>(b[0]), whole<bf16, K, N>(b[1]));
    } else {
        acc = matmul_dot(whole<bf16, M, K>(b[0]), whole<bf16, K, N>(b[1]));
    }
    std::memcpy(b[2], acc.data, sizeof(acc.data));
}
#define MM_DOT(M, K, N, SHAPE) \
    REG("mmdot_" SHAPE, mm_dot<M, K, N>(b, false)) REG("mmdotacc_" SHAPE, mm_dot<M, K, N>(b, true))
MM_DOT(64, 64, 64, "64x64x64")
MM_DOT(32, 40, 48, "32x40x48")
MM_DOT(13, 37, 19, "13x37x19")
MM_DOT(7, 5, 24, "7x5x24")
MM_DOT(1, 128, 1, "1x128x1")
MM_DOT(12, 1, 16, "12x1x16")
MM_DOT(25, 3, 40, "25x3x40")

"""

UNIT_OTHER = r"""
// ---- reductions: "<op>_<dtype>_<R>x<C>" on one tile ---------------------------------------
template <class T, int R, int C, class F>
void reduce(void **b, F f) {
    const auto out = f(whole<T, R, C>(b[0]));
    std::memcpy(b[1], out.data, sizeof(out.data));
}
#define RED_OPS(T, S, R, C, SHAPE)                                                     \
    REG("row_sum_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return row_sum(x); })) \
    REG("row_max_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return row_max(x); })) \
    REG("row_min_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return row_min(x); })) \
    REG("col_sum_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return col_sum(x); })) \
    REG("col_max_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return col_max(x); })) \
    REG("col_min_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return col_min(x); }))
RED_OPS(float, "f32", 16, 100, "16x100") RED_OPS(float, "f32", 8, 128, "8x128") RED_OPS(float, "f32", 5, 3, "5x3")
RED_OPS(float, "f32", 3, 1, "3x1") RED_OPS(float, "f32", 1, 37, "1x37") RED_OPS(float, "f32", 3, 1000, "3x1000")
RED_OPS(bf16, "bf16", 16, 100, "16x100") RED_OPS(bf16, "bf16", 5, 3, "5x3") RED_OPS(bf16, "bf16", 1, 37, "1x37")
RED_OPS(f16, "f16", 16, 100, "16x100")
RED_OPS(int32_t, "i32", 8, 128, "8x128")
#define MEAN_OPS(T, S, R, C, SHAPE)                                                              \
    REG("row_mean_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return row_mean(x); }))   \
    REG("col_mean_" S "_" SHAPE, reduce<T, R, C>(b, [](const auto &x) { return col_mean(x); }))
MEAN_OPS(float, "f32", 16, 100, "16x100") MEAN_OPS(float, "f32", 8, 128, "8x128") MEAN_OPS(float, "f32", 5, 3, "5x3")
MEAN_OPS(float, "f32", 3, 1, "3x1") MEAN_OPS(float, "f32", 1, 37, "1x37") MEAN_OPS(double, "f64", 7, 9, "7x9")
MEAN_OPS(double, "f64", 2, 100, "2x100")
MEAN_OPS(bf16, "bf16", 16, 100, "16x100") MEAN_OPS(bf16, "bf16", 5, 3, "5x3") MEAN_OPS(f16, "f16", 16, 100, "16x100")

// ---- iota / slice: "iota_<dtype>_<dim>" (5 x 7), "slice_<r0>_<c0>_<r>x<c>" of a 9 x 11 f32 tile
REG("iota_f32_0", const auto t = (iota<float, 5, 7, 0>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_f32_1", const auto t = (iota<float, 5, 7, 1>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_i32_0", const auto t = (iota<int32_t, 5, 7, 0>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_i64_1", const auto t = (iota<int64_t, 5, 7, 1>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_bf16_1", const auto t = (iota<bf16, 1, 300, 1>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_u8_0", const auto t = (iota<uint8_t, 300, 1, 0>()); std::memcpy(b[0], t.data, sizeof(t.data)))
REG("iota_bool_1", const auto t = (iota<bool, 2, 3, 1>()); std::memcpy(b[0], t.data, sizeof(t.data)))
#define SLICE(R0, C0, R, C) \
    REG("slice_" #R0 "_" #C0 "_" #R "x" #C, const auto t = (slice<R0, C0, R, C>(whole<float, 9, 11>(b[0]))); \
        std::memcpy(b[1], t.data, sizeof(t.data)))
SLICE(0, 0, 9, 11) SLICE(2, 3, 4, 5) SLICE(8, 10, 1, 1) SLICE(0, 4, 9, 1) SLICE(3, 0, 1, 11) SLICE(5, 6, 4, 5)

""" + UNIT_MATMUL + r"""
// ---- transpose: "tr_<dtype>_<R>x<C>" ----------------------------------------------------
template <class T, int R, int C>
void tr(void **b) {
    const auto out = transpose(whole<T, R, C>(b[0]));
    std::memcpy(b[1], out.data, sizeof(out.data));
}
REG("tr_f32_13x37", tr<float, 13, 37>(b))
REG("tr_bf16_64x64", tr<bf16, 64, 64>(b))
REG("tr_u8_5x9", tr<uint8_t, 5, 9>(b))
REG("tr_f32_1x7", tr<float, 1, 7>(b))
REG("tr_bf16_64x512", tr<bf16, 64, 512>(b))
REG("tr_f16_16x40", tr<f16, 16, 40>(b))
REG("tr_f32_12x36", tr<float, 12, 36>(b))
REG("tr_i32_4x8", tr<int32_t, 4, 8>(b))
REG("tr_bf16_8x12", tr<bf16, 8, 12>(b))

// ---- kernels called with ts_arg arrays, like generated code ---------------------------------
// args: x (2-D), y (2-D), scale (f32 scalar), x offsets (2 int64 scalars), y offsets (2 int64).
template <class T>
void view2d(const ts_arg *args) {
    TensorView<T> x(args[0]), y(args[1]);
    const float scale = scalar_arg<float>(args[2]);
    const int64_t i0 = scalar_arg<int64_t>(args[3]), i1 = scalar_arg<int64_t>(args[4]);
    const int64_t j0 = scalar_arg<int64_t>(args[5]), j1 = scalar_arg<int64_t>(args[6]);
    Tile<T, 8, 16> t = load<8, 16>(x, {i0, i1});
    store(y, {j0, j1}, t * scale);
}
extern "C" void k_view2d_f32(const ts_arg *args) { view2d<float>(args); }
extern "C" void k_view2d_bf16(const ts_arg *args) { view2d<bf16>(args); }
// view2d storing a fused expression (computed straight into y) instead of a tile.
template <class T>
void view2d_fused(const ts_arg *args) {
    TensorView<T> x(args[0]), y(args[1]);
    const float scale = scalar_arg<float>(args[2]);
    const int64_t i0 = scalar_arg<int64_t>(args[3]), i1 = scalar_arg<int64_t>(args[4]);
    const int64_t j0 = scalar_arg<int64_t>(args[5]), j1 = scalar_arg<int64_t>(args[6]);
    Tile<T, 8, 16> t = load<8, 16>(x, {i0, i1});
    store(y, {j0, j1}, fuse(t) * scale);
}
extern "C" void k_view2d_fused_f32(const ts_arg *args) { view2d_fused<float>(args); }
extern "C" void k_view2d_fused_bf16(const ts_arg *args) { view2d_fused<bf16>(args); }

// x (3-D), y (3-D): y[b, i:i+4, j:j+8] = x[a, k:k+4, l:l+8] + 1; offsets as 6 int64 scalars.
extern "C" void k_view3d(const ts_arg *args) {
    TensorView<float> x(args[0]), y(args[1]);
    int64_t o[6];
    for (int i = 0; i < 6; ++i) o[i] = scalar_arg<int64_t>(args[2 + i]);
    store(y, {o[3], o[4], o[5]}, load<4, 8>(x, {o[0], o[1], o[2]}) + 1.0f);
}

// x (4-D), y (4-D): offsets as 8 int64 scalars; y box = -x box.
extern "C" void k_view4d(const ts_arg *args) {
    TensorView<float> x(args[0]), y(args[1]);
    int64_t o[8];
    for (int i = 0; i < 8; ++i) o[i] = scalar_arg<int64_t>(args[2 + i]);
    store(y, {o[4], o[5], o[6], o[7]}, -load<3, 5>(x, {o[0], o[1], o[2], o[3]}));
}

// x (1-D), y (1-D): y[j:j+16] = x[i:i+16] * 2.
extern "C" void k_view1d(const ts_arg *args) {
    TensorView<int32_t> x(args[0]), y(args[1]);
    const int64_t i = scalar_arg<int64_t>(args[2]), j = scalar_arg<int64_t>(args[3]);
    store(y, {j}, load<1, 16>(x, {i}) * 2);
}

// The RMS-norm kernel of DESIGN.md §1: x [64, 512], gamma [1, 512], y [64, 512], eps.
extern "C" void k_rms_rows(const ts_arg *args) {
    TensorView<float> x(args[0]), gamma(args[1]), y(args[2]);
    const float eps = scalar_arg<float>(args[3]);
    Tile<float, 64, 1> acc = zeros<float, 64, 1>();
    for (int64_t h = 0; h < 512; h += 128) {
        Tile<float, 64, 128> t = load<64, 128>(x, {0, h});
        acc = acc + row_sum(t * t);
    }
    Tile<float, 64, 1> inv = rsqrt(acc / 512.0f + eps);
    for (int64_t h = 0; h < 512; h += 128) {
        Tile<float, 64, 128> t = load<64, 128>(x, {0, h});
        Tile<float, 1, 128> g = load<1, 128>(gamma, {0, h});
        store(y, {0, h}, t * inv * g);
    }
}

// A tiled matmul kernel: c[64, 96] = a[64, 128] @ b[128, 96] in 32 x 32 x 64 tiles (bf16 inputs).
extern "C" void k_tiled_matmul_bf16(const ts_arg *args) {
    TensorView<bf16> a(args[0]), bm(args[1]);
    TensorView<float> c(args[2]);
    for (int64_t i = 0; i < 64; i += 32) {
        for (int64_t j = 0; j < 96; j += 32) {
            Tile<float, 32, 32> acc = zeros<float, 32, 32>();
            for (int64_t k = 0; k < 128; k += 64) matmul_acc(acc, load<32, 64>(a, {i, k}), load<64, 32>(bm, {k, j}));
            store(c, {i, j}, acc);
        }
    }
}
"""

UNIT_RAGGED = r"""
// Ragged loads/stores and row gathers, called with ts_arg arrays like generated kernels. Each
// kernel's `checked` scalar picks the overload with a CheckSite (check.hpp), and its last
// argument is a uint8 tensor that receives the what() of a BoundsError ("" when none).
// Compiled twice: as is, and with -DTS_AUDIT_ACCESSES (with a sink that keeps the records).
#include <tilescope/check.hpp>
#include <vector>

namespace {
const CheckSite kLoadSite{"ragged", "load", "x", 0, "model.py:7"};
const CheckSite kStoreSite{"ragged", "store", "y", 1, "model.py:9"};
const CheckSite kRowsSite{"moe", "load_rows", "x", 0, "m.py:12"};

template <class F>
void catching(const ts_arg &msg_arg, F f) {
    TensorView<uint8_t> msg(msg_arg);
    msg.data[0] = 0;
    try {
        f();
    } catch (const BoundsError &e) {
        const std::string what = e.what();
        const size_t n = std::min<size_t>(what.size(), static_cast<size_t>(msg.shape[0] - 1));
        std::memcpy(msg.data, what.data(), n);
        msg.data[n] = 0;
    }
}

int64_t s64(const ts_arg &a) { return scalar_arg<int64_t>(a); }
}  // namespace

// x, y (2-D f32); x offsets i0, i1; valid vr, vc; fill; checked; msg.
// y[0:8, 0:16] = load_valid<8, 16>(x, {i0, i1}, {vr, vc}, fill).
extern "C" void k_load_valid(const ts_arg *args) {
    catching(args[8], [&] {
        TensorView<float> x(args[0]), y(args[1]);
        const int64_t i0 = s64(args[2]), i1 = s64(args[3]), vr = s64(args[4]), vc = s64(args[5]);
        const float fill = scalar_arg<float>(args[6]);
        const auto t = s64(args[7]) ? load_valid<8, 16>(x, {i0, i1}, {vr, vc}, fill, kLoadSite)
                                    : load_valid<8, 16>(x, {i0, i1}, {vr, vc}, fill);
        store(y, {0, 0}, t);
    });
}

// x, y (2-D f32); y offsets j0, j1; valid vr, vc; checked; msg.
// store_valid(y, {j0, j1}, x[0:8, 0:16], {vr, vc}).
extern "C" void k_store_valid(const ts_arg *args) {
    catching(args[7], [&] {
        TensorView<float> x(args[0]), y(args[1]);
        const int64_t j0 = s64(args[2]), j1 = s64(args[3]), vr = s64(args[4]), vc = s64(args[5]);
        const auto t = load<8, 16>(x, {0, 0});
        if (s64(args[6])) {
            store_valid(y, {j0, j1}, t, {vr, vc}, kStoreSite);
        } else {
            store_valid(y, {j0, j1}, t, {vr, vc});
        }
    });
}

// x (1-D i32), y (1-D i32 of 16); offset i; valid n; checked; msg. A 1-D ragged load and store:
// y[0:16] = load_valid<1, 16>(x, {i}, {1, n}, -7.9) (fill -7.9 -> int32 -7), then x[i:i+n] = 2 y.
extern "C" void k_valid_1d(const ts_arg *args) {
    catching(args[5], [&] {
        TensorView<int32_t> x(args[0]), y(args[1]);
        const int64_t i = s64(args[2]), n = s64(args[3]);
        const bool checked = s64(args[4]) != 0;
        const auto t = checked ? load_valid<1, 16>(x, {i}, {1, n}, -7.9, kLoadSite)
                               : load_valid<1, 16>(x, {i}, {1, n}, -7.9);
        store(y, {0}, t);
        if (checked) {
            store_valid(x, {i}, t * 2, {1, n}, kStoreSite);
        } else {
            store_valid(x, {i}, t * 2, {1, n});
        }
    });
}

// x (3-D bf16), y (2-D bf16 [4, 8]); offsets a, i, j; valid vr, vc; msg. The fill 1e10 rounds to bf16.
extern "C" void k_load_valid_3d_bf16(const ts_arg *args) {
    catching(args[7], [&] {
        TensorView<bf16> x(args[0]), y(args[1]);
        const int64_t a = s64(args[2]), i = s64(args[3]), j = s64(args[4]), vr = s64(args[5]), vc = s64(args[6]);
        store(y, {0, 0}, load_valid<4, 8>(x, {a, i, j}, {vr, vc}, 1e10f));
    });
}

// x (2-D T), idx (1-D I of 8), out (2-D T [8, 16]); col0; valid_rows (-100: the plain form); fill;
// checked; as_column (idx as an 8 x 1 tile, else 1 x 8); msg. out = load_rows<16>(x, idx, col0, ...).
template <class T, class I>
void load_rows_kernel(const ts_arg *args) {
    catching(args[8], [&] {
        TensorView<T> x(args[0]), out(args[2]);
        TensorView<I> idx(args[1]);
        const int64_t col0 = s64(args[3]), valid_rows = s64(args[4]);
        const double fill = scalar_arg<double>(args[5]);
        const bool checked = s64(args[6]) != 0;
        const Tile<I, 1, 8> row_form = load<1, 8>(idx, {0});
        const Tile<I, 8, 1> col_form = transpose(row_form);
        auto gather = [&](const auto &rows) {
            if (valid_rows == -100) {
                return checked ? load_rows<16>(x, rows, col0, kRowsSite) : load_rows<16>(x, rows, col0);
            }
            return checked ? load_rows<16>(x, rows, col0, valid_rows, fill, kRowsSite)
                           : load_rows<16>(x, rows, col0, valid_rows, fill);
        };
        store(out, {0, 0}, s64(args[7]) ? gather(col_form) : gather(row_form));
    });
}
extern "C" void k_load_rows_f32_i32(const ts_arg *args) { load_rows_kernel<float, int32_t>(args); }
extern "C" void k_load_rows_bf16_i64(const ts_arg *args) { load_rows_kernel<bf16, int64_t>(args); }
extern "C" void k_load_rows_i32_u8(const ts_arg *args) { load_rows_kernel<int32_t, uint8_t>(args); }

#ifdef TS_AUDIT_ACCESSES
// The audit's records, kept by the sink the test installs.
static std::vector<std::vector<int64_t>> audit_records;
extern "C" void test_audit_sink(int32_t, const void *data, int32_t, int64_t, int64_t cols) {
    const auto *row = static_cast<const int64_t *>(data);
    audit_records.emplace_back(row, row + cols);
}
// Copies the records (each padded to 16 values) into out and clears them; returns their count.
extern "C" int64_t test_audit_take(int64_t *out, int64_t capacity) {
    const int64_t n = static_cast<int64_t>(audit_records.size());
    for (int64_t r = 0; r < n && r < capacity; ++r) {
        for (int k = 0; k < 16; ++k) out[r * 16 + k] = k < static_cast<int>(audit_records[r].size()) ? audit_records[r][k] : -1;
    }
    audit_records.clear();
    return n;
}
#endif
"""

BOUNDS_MAIN = r"""
#include <tilescope/tile.hpp>
#include <cstdlib>
using namespace ts;
// usage: bounds <op: load|store> <ndim> <offsets...>; the tensor is [3, 10, 20] (or its last dims).
//        bounds <op: vload|vstore> <rows> <cols> <offsets (2)>: load_valid/store_valid of a 4 x 8
//        tile with valid {rows, cols} on the [10, 20] tensor.
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    if (argv[1][0] == 'v') {
        static float data2[10 * 20];
        ts_tensor t2{};
        t2.data = data2;
        t2.dtype = TS_F32;
        t2.ndim = 2;
        t2.shape[0] = 10;
        t2.shape[1] = 20;
        t2.strides[0] = 20;
        t2.strides[1] = 1;
        TensorView<float> v2(t2);
        const int64_t rows = std::atoll(argv[2]), cols = std::atoll(argv[3]);
        const int64_t i = std::atoll(argv[4]), j = std::atoll(argv[5]);
        if (argv[1][1] == 'l') return static_cast<int>(load_valid<4, 8>(v2, {i, j}, {rows, cols}, 0.0f)(0, 0));
        store_valid(v2, {i, j}, zeros<float, 4, 8>(), {rows, cols});
        return 0;
    }
    static float data[3 * 10 * 20];
    const int ndim = std::atoi(argv[2]);
    const int64_t full_shape[3] = {3, 10, 20};
    ts_tensor t{};
    t.data = data;
    t.dtype = TS_F32;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        t.shape[d] = full_shape[3 - ndim + d];
        t.strides[d] = stride;
        stride *= t.shape[d];
    }
    TensorView<float> v(t);
    const bool is_load = argv[1][0] == 'l';
    int64_t o[3];
    for (int i = 0; i < ndim; ++i) o[i] = std::atoll(argv[3 + i]);
    if (ndim == 3) {
        if (is_load) return static_cast<int>(load<4, 8>(v, {o[0], o[1], o[2]})(0, 0));
        store(v, {o[0], o[1], o[2]}, zeros<float, 4, 8>());
    } else if (ndim == 2) {
        if (is_load) return static_cast<int>(load<4, 8>(v, {o[0], o[1]})(0, 0));
        store(v, {o[0], o[1]}, zeros<float, 4, 8>());
    } else {
        if (is_load) return static_cast<int>(load<1, 8>(v, {o[0]})(0, 0));
        store(v, {o[0]}, zeros<float, 1, 8>());
    }
    return 0;
}
"""

UNIT_FUSED = r"""
// ---- fused expressions: "fused_<dtype>" writes one tree computed op by op (b[3]) and fused (b[4]).
// Compiled with -ffp-contract=off, as kernels are: a fused a * b + c may otherwise become one fma.
template <class T>
void fused_vs_tiles(void **b) {
    const auto x = whole<T, 6, 40>(b[0]);
    const auto r = whole<T, 6, 1>(b[1]);
    const auto c = whole<T, 1, 40>(b[2]);
    const Tile<T, 6, 40> tiles = exp(x - r) * c + maximum(x, r) / 3.0f - sqrt(abs(-x)) + minimum(c, 0.5f);
    const Tile<T, 6, 40> fused =
        exp(fuse(x) - r) * c + maximum(fuse(x), r) / 3.0f - sqrt(abs(-fuse(x))) + minimum(fuse(c), 0.5f);
    std::memcpy(b[3], tiles.data, sizeof(tiles.data));
    std::memcpy(b[4], fused.data, sizeof(fused.data));
    // row reductions of a fused operand (b[6]) against those of its tile (b[5]): [sum, max, mean]
    T *red_tiles = static_cast<T *>(b[5]), *red_fused = static_cast<T *>(b[6]);
    const Tile<T, 6, 1> st = row_sum(x * c), mt = row_max(x - r), at = row_mean(exp(x) - x);
    const Tile<T, 6, 1> sf = row_sum(fuse(x) * c), mf = row_max(fuse(x) - r), af = row_mean(exp(fuse(x)) - x);
    for (int i = 0; i < 6; ++i) {
        red_tiles[3 * i] = st.data[i], red_tiles[3 * i + 1] = mt.data[i], red_tiles[3 * i + 2] = at.data[i];
        red_fused[3 * i] = sf.data[i], red_fused[3 * i + 1] = mf.data[i], red_fused[3 * i + 2] = af.data[i];
    }
}
REG("fused_f32", fused_vs_tiles<float>(b)) REG("fused_bf16", fused_vs_tiles<bf16>(b))
"""

# ---------------------------------------------------------------------------------------------
# build (once per session) and call helpers
# ---------------------------------------------------------------------------------------------


class Built:
    """The compiled test programs: op libraries (searched by op name), the bounds-check executable,
    and the ragged-access library built plain (`ragged`) and with the access audit (`ragged_audit`)."""

    def __init__(
        self,
        libs: list[ctypes.CDLL],
        bounds_exe: Path,
        warnings: dict[str, str],
        ragged: ctypes.CDLL,
        ragged_audit: ctypes.CDLL,
        isa_libs: dict[str, ctypes.CDLL],
    ):
        self.libs = libs
        self.isa_libs = isa_libs
        self.bounds_exe = bounds_exe
        self.warnings = warnings
        self.ragged = ragged
        self.ragged_audit = ragged_audit


def _gxx_accepts(flag: str) -> bool:
    return subprocess.run(["g++", flag, "-E", "-x", "c++", "/dev/null"], capture_output=True).returncode == 0


# Lower instruction-set paths of the matmul kernels (flags after -march=native), each with the
# /proc/cpuinfo flags it needs to run; "native" is the plain kernel flags. None has AMX: they are
# its fallbacks (a g++ older than 11 knows no AMX, and no -mno-amx flag).
NO_AMX = ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"] if _gxx_accepts("-mno-amx-tile") else []
ISA_FLAGS = {
    "avx512-vnni": (NO_AMX, ["avx512f", "avx512bw", "avx512_vnni"]),
    "avx512": (["-mno-avx512vnni", "-mno-avxvnni", "-mno-avx512bf16", *NO_AMX], ["avx512f", "avx512bw"]),
    "avx2-vnni": (["-mno-avx512f", *NO_AMX], ["avx2", "fma", "avx_vnni"]),
    "avx2": (["-mno-avx512f", "-mno-avxvnni", *NO_AMX], ["avx2", "fma"]),
    "sse2": (["-mno-avx", *NO_AMX], []),
}
MATMUL_ISAS = ["native", *ISA_FLAGS]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


UNITS = {
    "math": UNIT_MATH,
    "common": UNIT_COMMON,
    "cast_broadcast": UNIT_CAST_BROADCAST,
    "other": UNIT_OTHER,
    "fused": UNIT_FUSED,
}
UNIT_FLAGS = {"fused": ["-ffp-contract=off"]}  # the kernels' own flag (toolchain/compiler.py)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Compiles every test program once per session, all in parallel."""
    work = tmp_path_factory.mktemp("tile_lib")
    jobs = {f"{name}.so": (PRELUDE + source, [*KERNEL_FLAGS, *UNIT_FLAGS.get(name, [])]) for name, source in UNITS.items()}
    exe_flags = [f for f in KERNEL_FLAGS if f not in ("-shared", "-fPIC")] + ["-DTS_CHECK_BOUNDS"]
    jobs["bounds"] = (BOUNDS_MAIN, exe_flags)
    jobs["ragged.so"] = (PRELUDE + UNIT_RAGGED, KERNEL_FLAGS)
    jobs["ragged_audit.so"] = (PRELUDE + UNIT_RAGGED, [*KERNEL_FLAGS, "-DTS_AUDIT_ACCESSES"])
    for isa, (flags, _) in ISA_FLAGS.items():
        jobs[f"matmul_{isa}.so"] = (PRELUDE + UNIT_MATMUL, [*KERNEL_FLAGS, *flags])
    procs = {}
    for out, (source, flags) in jobs.items():
        src = work / (out.split(".")[0] + ".cpp")
        src.write_text(source)
        cmd = ["g++", *flags, "-I", str(INCLUDE), str(src), "-o", str(work / out)]
        procs[out] = (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    warnings = {}
    for out, (cmd, proc) in procs.items():
        _, err = proc.communicate()
        assert proc.returncode == 0, f"compile failed: {' '.join(cmd)}\n{err}"
        warnings[out] = err
    libs = []
    for name in UNITS:
        lib = ctypes.CDLL(str(work / f"{name}.so"))
        lib.ts_test_call.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_double),
        ]
        lib.ts_test_call.restype = ctypes.c_int
        libs.append(lib)
    ragged = ctypes.CDLL(str(work / "ragged.so"))
    ragged_audit = ctypes.CDLL(str(work / "ragged_audit.so"))
    isa_libs = {isa: ctypes.CDLL(str(work / f"matmul_{isa}.so")) for isa in ISA_FLAGS}
    for lib in isa_libs.values():
        lib.ts_test_call.argtypes = libs[0].ts_test_call.argtypes
        lib.ts_test_call.restype = ctypes.c_int
    return Built(libs, work / "bounds", warnings, ragged, ragged_audit, isa_libs)


def call(
    built: Built, name: str, *tensors: torch.Tensor, n: int | None = None, params=(0.0,), isa: str = "native"
) -> None:
    """Runs registered op `name` on contiguous tensors (inputs first, then outputs), from the
    build for instruction-set path `isa` (ISA_FLAGS; only the matmul ops have lower paths)."""
    for t in tensors:
        assert t.is_contiguous()
    ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
    ps = (ctypes.c_double * max(1, len(params)))(*params)
    count = tensors[0].numel() if n is None else n
    for lib in built.libs if isa == "native" else [built.isa_libs[isa]]:
        if lib.ts_test_call(name.encode(), ptrs, count, ps) == 0:
            return
    raise AssertionError(f"no test op named {name}")


def unary_op(built: Built, name: str, x: torch.Tensor, out_dtype: torch.dtype | None = None, params=(0.0,)):
    out = torch.empty(x.shape, dtype=out_dtype or x.dtype)
    call(built, name, x.contiguous(), out, params=params)
    return out


def binary_op(
    built: Built, name: str, x: torch.Tensor, y: torch.Tensor, out_dtype: torch.dtype | None = None
):
    out = torch.empty(x.shape, dtype=out_dtype or x.dtype)
    call(built, name, x.contiguous(), y.contiguous(), out)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a float tensor, as a signed integer tensor of the same width."""
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_same_floats(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Bit-identical, except that any NaN matches any NaN (torch's NaN payloads vary by path)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    bad = (nan_got != nan_want) | (~nan_want & (bits(got) != bits(want)))
    if bad.any():
        idx = int(bad.reshape(-1).nonzero()[0, 0])
        g, w = got.reshape(-1)[idx].item(), want.reshape(-1)[idx].item()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {idx}: got {g!r} want {w!r}"
        )


def ulp_error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|got - ref| in units of the float32 spacing at ref (got: float32, ref: float64)."""
    ref = ref.double()
    g = got.double()
    _, e = torch.frexp(ref.abs())
    ulp = torch.where(
        ref.abs() < 2.0**-126, torch.full_like(ref, 2.0**-149), torch.ldexp(torch.ones_like(ref), e - 24)
    )
    err = (g - ref).abs() / ulp
    ref32 = ref.float()
    err = torch.where(torch.isinf(ref32) | torch.isinf(got), torch.where(got == ref32, 0.0, math.inf), err)
    nan_g, nan_r = torch.isnan(got), torch.isnan(ref)
    err = torch.where(nan_g & nan_r, 0.0, torch.where(nan_g | nan_r, math.inf, err))
    return err


def ordinal(t: torch.Tensor) -> torch.Tensor:
    """Monotone integer index of a float's bit pattern (adjacent floats differ by 1)."""
    b = bits(t).long()
    width = t.element_size() * 8
    return torch.where(b < 0, -(b & ((1 << (width - 1)) - 1)), b)


SPECIAL_F32 = [
    float(v)
    for v in (
        "0 -0 inf -inf nan 1 -1 0.5 -0.5 2 1e-45 -1e-45 1.17549435e-38 -1.17549435e-38 3.4028235e38 -3.4028235e38 "
        "88.72283 88.722839 88.7229 89 -87.33654 -87.3366 -103.972 -103.98 -104 -110 -112 -113 -200 1e-30 -1e-30 "
        "0.625 -0.625 0.6249 9 -9 20 -20 1e-8 -1e-8 0.1 100 -100 1e10 -1e10"
    ).split()
]


def float_sweep(n_random: int = 600_000, seed: int = 0) -> torch.Tensor:
    """Random bit patterns (every exponent), a dense range over [-120, 120], values near 1, specials."""
    g = torch.Generator().manual_seed(seed)
    random_bits = torch.randint(-(2**31), 2**31, (n_random,), generator=g, dtype=torch.int64).to(torch.int32)
    parts = [
        random_bits.view(torch.float32),
        torch.linspace(-120.0, 120.0, 240_001, dtype=torch.float32),
        1.0 + torch.linspace(-0.35, 0.35, 70_001, dtype=torch.float32),
        torch.linspace(-1.0, 1.0, 20_001, dtype=torch.float32) * 1e-3,
        torch.tensor(SPECIAL_F32, dtype=torch.float32),
    ]
    return torch.cat(parts)


def all_16bit(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


def random_bits(dtype: torch.dtype, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    width = torch.empty(0, dtype=dtype).element_size() * 8
    raw = torch.randint(-(2 ** (width - 1)), 2 ** (width - 1), (n,), generator=g, dtype=torch.int64)
    return raw.to({16: torch.int16, 32: torch.int32}[width]).view(dtype)


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


def test_library_compiles_without_warnings(built):
    for unit, err in built.warnings.items():
        assert "warning" not in err, f"{unit}:\n{err}"


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_16bit_roundtrip_all_patterns(built, dt):
    h = all_16bit(DTYPES[dt])
    f = unary_op(built, f"cast_{dt}_f32", h, torch.float32)
    assert_same_floats(f, h.float(), f"{dt} -> f32")  # every pattern, NaNs included, converts exactly
    back = unary_op(built, f"cast_f32_{dt}", f, DTYPES[dt])
    assert_same_floats(back, f.to(DTYPES[dt]), f"f32 -> {dt}")
    non_nan = ~torch.isnan(h)
    assert torch.equal(bits(back)[non_nan], bits(h)[non_nan])  # round trip is the identity


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_float_to_16bit_rounding_matches_torch(built, dt):
    x = float_sweep(400_000, seed=1)
    # Exact halfway cases and their neighbours for every exponent: the rounding bits set to 100..0.
    shift = 16 if dt == "bf16" else 13
    base = random_bits(torch.float32, 50_000, seed=2).view(torch.int32)
    half = (base & ~((1 << shift) - 1)) | (1 << (shift - 1))
    x = torch.cat(
        [x, half.view(torch.float32), (half + 1).view(torch.float32), (half - 1).view(torch.float32)]
    )
    got = unary_op(built, f"cast_f32_{dt}", x, DTYPES[dt])
    assert_same_floats(got, x.to(DTYPES[dt]), f"f32 -> {dt}")


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16", "f64"])
def test_arithmetic_bit_exact(built, op, dt):
    dtype = DTYPES[dt]
    if dt == "f64":
        x, y = torch.randn(50_000, dtype=dtype) * 1e3, torch.randn(50_000, dtype=dtype)
    else:
        x, y = random_bits(dtype, 300_000, seed=3), random_bits(dtype, 300_000, seed=4)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0], dtype=dtype)
    x = torch.cat([x, specials.repeat_interleave(7)])
    y = torch.cat([y, specials.repeat(7)])
    got = binary_op(built, f"{op}_{dt}", x, y)
    want = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[op](x, y)
    assert_same_floats(got, want, f"{op} {dt}")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_unary_bit_exact(built, dt):
    dtype = DTYPES[dt]
    x = all_16bit(dtype) if dt != "f32" else float_sweep(200_000, seed=5)
    # NOTE: torch's own CPU sqrt/rsqrt are not always correctly rounded (about 10% of float inputs
    # differ by 1 ulp), so the references are float64 results rounded to float, then to the tile type.
    sqrt_f32 = torch.sqrt(x.double()).float()
    for name, fn in [
        ("sqrt", lambda t: sqrt_f32.to(dtype)),
        ("abs", torch.abs),
        ("neg", torch.neg),
        ("uminus", torch.neg),
        ("rsqrt", lambda t: (1 / sqrt_f32).to(dtype)),
    ]:
        assert_same_floats(unary_op(built, f"{name}_{dt}", x), fn(x), f"{name} {dt}")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_scalar_operands(built, dt):
    """A scalar is converted to the tile's element type first, on either side of the op."""
    dtype = DTYPES[dt]
    x = torch.randn(10_000, dtype=torch.float64).to(dtype) * 3
    for s in [0.1, -2.5, 3.0]:
        sv = torch.tensor(s, dtype=torch.float32).to(dtype)  # float(p[0]) converted to the tile's type
        for name, want in [
            ("add_s", x + sv),
            ("rsub_s", sv - x),
            ("mul_s", x * sv),
            ("div_s", x / sv),
            ("rdiv_s", sv / x),
            ("max_s", torch.maximum(x, sv)),
        ]:
            assert_same_floats(unary_op(built, f"{name}_{dt}", x, params=(s,)), want, f"{name} {dt} {s}")
        assert torch.equal(unary_op(built, f"lt_s_{dt}", x, torch.bool, params=(s,)), x < sv)
        assert torch.equal(unary_op(built, f"eq_s_{dt}", x.round(), torch.bool, params=(s,)), x.round() == sv)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16", "f64"])
def test_maximum_minimum_propagate_nan(built, dt):
    dtype = DTYPES[dt]
    x = torch.randn(20_000, dtype=torch.float64).to(dtype)
    y = torch.randn(20_000, dtype=torch.float64).to(dtype)
    x[::7] = math.nan
    y[::11] = math.nan
    x[5::13] = math.inf
    y[3::17] = -math.inf
    for op, fn in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        got, want = binary_op(built, f"{op}_{dt}", x, y), fn(x, y)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), op
        assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)]), op


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16", "f64", "i32", "i8", "u8", "i64"])
def test_comparisons_and_where(built, dt):
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(6)
    if dtype.is_floating_point:
        x = torch.randint(-4, 5, (20_000,), generator=g).to(dtype) / 2
        y = torch.randint(-4, 5, (20_000,), generator=g).to(dtype) / 2
        x[::9] = math.nan
        y[::10] = math.nan
        x[1::23] = -0.0
        y[2::29] = math.inf
    else:
        lo, hi = INT_RANGE[dt]
        x = torch.randint(max(lo, -1000), min(hi, 1000) + 1, (20_000,), generator=g).to(dtype)
        y = torch.randint(max(lo, -1000), min(hi, 1000) + 1, (20_000,), generator=g).to(dtype)
        x[::13] = y[::13]
    for name, fn in [
        ("eq", torch.eq),
        ("ne", torch.ne),
        ("lt", torch.lt),
        ("le", torch.le),
        ("gt", torch.gt),
        ("ge", torch.ge),
    ]:
        want = fn(x, y)
        assert torch.equal(binary_op(built, f"{name}_{dt}", x, y, torch.bool), want), name
        if dt in ("f32", "i32"):
            assert torch.equal(binary_op(built, f"op_{name}_{dt}", x, y, torch.bool), want), (
                f"operator {name}"
            )
    cond = x > y
    out = torch.empty_like(x)
    call(built, f"where_{dt}", cond, x, y, out)
    if dtype.is_floating_point:
        assert_same_floats(out, torch.where(cond, x, y), "where")
    else:
        assert torch.equal(out, torch.where(cond, x, y))
    same = (
        assert_same_floats
        if dtype.is_floating_point
        else lambda g, w, what: torch.equal(g, w) or pytest.fail(what)
    )
    call(built, f"where_ts_{dt}", cond, x, out, params=(3.0,))
    same(out, torch.where(cond, x, torch.tensor(3, dtype=dtype)), "where(cond, tile, scalar)")
    call(built, f"where_st_{dt}", cond, y, out, params=(-2.0,))
    same(out, torch.where(cond, torch.tensor(-2, dtype=dtype), y), "where(cond, scalar, tile)")


@pytest.mark.parametrize("dt", ["i32", "i8", "u8", "i64"])
def test_integer_arithmetic_wraps_like_torch(built, dt):
    dtype = DTYPES[dt]
    lo, hi = INT_RANGE[dt]
    g = torch.Generator().manual_seed(7)
    x = torch.randint(lo, hi, (30_000,), generator=g, dtype=torch.int64).to(dtype)
    y = torch.randint(lo, hi, (30_000,), generator=g, dtype=torch.int64).to(dtype)
    x[:4] = torch.tensor([lo, hi, lo, 0], dtype=torch.int64).to(dtype)
    y[:4] = torch.tensor([lo, hi, -1 if lo < 0 else 1, lo], dtype=torch.int64).to(dtype)
    for op, fn in [
        ("add", torch.add),
        ("sub", torch.sub),
        ("mul", torch.mul),
        ("maximum", torch.maximum),
        ("minimum", torch.minimum),
    ]:
        assert torch.equal(binary_op(built, f"{op}_{dt}", x, y), fn(x, y)), op
    assert torch.equal(unary_op(built, f"neg_{dt}", x), x.neg() if dt != "u8" else (-x.long()).to(dtype))
    assert torch.equal(unary_op(built, f"abs_{dt}", x), x.abs())


def test_logical_ops(built):
    g = torch.Generator().manual_seed(8)
    a = torch.randint(0, 2, (5_000,), generator=g).bool()
    c = torch.randint(0, 2, (5_000,), generator=g).bool()
    assert torch.equal(binary_op(built, "logical_and", a, c), a & c)
    assert torch.equal(binary_op(built, "logical_or", a, c), a | c)
    assert torch.equal(unary_op(built, "logical_not", a), ~a)
    out = torch.empty(a.shape, dtype=torch.float32)
    call(built, "where_ss_f32", a, out, params=(1.5, -4.0))
    assert torch.equal(out, torch.where(a, 1.5, -4.0).float())


BC_SHAPES = [
    ((6, 40), (6, 1)),
    ((6, 40), (1, 40)),
    ((6, 40), (1, 1)),
    ((6, 1), (1, 40)),
    ((1, 40), (6, 40)),
    ((6, 1), (6, 40)),
    ((1, 1), (6, 40)),
]


@pytest.mark.parametrize(
    "dt,op",
    [("f32", op) for op in ["add", "sub", "mul", "div", "maximum", "lt", "where"]]
    + [("bf16", "add"), ("bf16", "where")],
)
def test_broadcasting(built, dt, op):
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(9)
    fns = {
        "add": torch.add,
        "sub": torch.sub,
        "mul": torch.mul,
        "div": torch.div,
        "maximum": torch.maximum,
        "lt": torch.lt,
        "where": lambda a, b: torch.where(a > b, a, b),
    }
    for sa, sb in BC_SHAPES:
        a = torch.randn(sa, generator=g).to(dtype)
        b = torch.randn(sb, generator=g).to(dtype) + 0.1
        want = fns[op](a, b).contiguous()
        out = torch.empty(want.shape, dtype=want.dtype)
        name = f"bc_{op}_{dt}_{sa[0]}x{sa[1]}_{sb[0]}x{sb[1]}"
        call(built, name, a.contiguous(), b.contiguous(), out, n=0)
        assert torch.equal(out, want), name


def test_broadcast_mismatch_is_a_compile_error(tmp_path):
    src = tmp_path / "bad.cpp"
    src.write_text(
        "#include <tilescope/tile.hpp>\nusing namespace ts;\n"
        "Tile<float, 4, 8> f(const Tile<float, 4, 8> &a, const Tile<float, 3, 8> &b) { return a + b; }\n"
    )
    proc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-I", str(INCLUDE), str(src)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "tile shapes do not broadcast: row counts differ" in proc.stderr


def _check_ulp(got: torch.Tensor, ref64: torch.Tensor, bound: float, what: str) -> float:
    err = ulp_error(got, ref64)
    worst = float(err.max())
    if worst > bound:
        i = int(err.argmax())
        raise AssertionError(
            f"{what}: max ulp error {worst:.3f} > {bound} at element {i}: got {got[i].item()!r}, "
            f"reference {ref64[i].item()!r}"
        )
    return worst


TRANSCENDENTAL = {
    "exp": (torch.exp, 2.0),
    "log": (torch.log, 2.0),
    "tanh": (torch.tanh, 1.0),
    "sigmoid": (torch.sigmoid, 1.0),
    "silu": (torch.nn.functional.silu, 1.0),
}


@pytest.mark.parametrize("name", list(TRANSCENDENTAL))
def test_transcendental_f32_ulp(built, name):
    fn, bound = TRANSCENDENTAL[name]
    x = float_sweep()
    got = unary_op(built, f"{name}_f32", x)
    ref = fn(x.double())
    if name == "silu":  # the limit at -inf is -0 (torch's x / (1 + e^-x) gives NaN there)
        ref = torch.where(x == -math.inf, torch.tensor(-0.0, dtype=torch.float64), ref)
    _check_ulp(got, ref, bound, f"{name} f32")


def test_transcendental_f64(built):
    """Double tiles use libm (std::exp, ...) and torch's sigmoid/silu formulas."""
    x = torch.cat(
        [torch.randn(20_000, dtype=torch.float64) * 30, torch.tensor([0.0, -0.0, math.inf, math.nan])]
    )
    for name, (fn, _) in TRANSCENDENTAL.items():
        got, want = unary_op(built, f"{name}_f64", x), fn(x)
        assert torch.allclose(got, want, rtol=1e-14, atol=1e-300, equal_nan=True), name
    assert torch.equal(
        unary_op(built, "silu_f64", torch.tensor([-math.inf], dtype=torch.float64)).signbit(),
        torch.tensor([True]),
    )
    assert torch.equal(unary_op(built, "add_s_f64", x[:100], params=(0.25,)), x[:100] + 0.25)


# Exact results IEEE/C99 define (signed zeros, infinities, NaN): name -> (inputs, results).
EXACT_SPECIALS = {
    "exp": ("0 -0 inf -inf nan 88.8 -104 -1e30", "1 1 inf 0 nan inf 0 0"),
    "log": ("0 -0 -1 inf -inf nan 1", "-inf -inf nan inf nan nan 0"),
    "tanh": ("0 -0 inf -inf nan 1e-40 -1e-40 -10 20", "0 -0 1 -1 nan 1e-40 -1e-40 -1 1"),
    "sigmoid": ("0 -0 inf -inf nan -200 30", "0.5 0.5 1 0 nan 0 1"),
    "silu": ("0 -0 inf -inf nan -200", "0 -0 inf -0 nan -0"),
}


@pytest.mark.parametrize("name", list(EXACT_SPECIALS))
def test_transcendental_special_values(built, name):
    x = torch.tensor([float(v) for v in EXACT_SPECIALS[name][0].split()], dtype=torch.float32)
    want = torch.tensor([float(v) for v in EXACT_SPECIALS[name][1].split()], dtype=torch.float32)
    got = unary_op(built, f"{name}_f32", x)
    same = (torch.isnan(got) & torch.isnan(want)) | (
        (got == want) & (torch.signbit(got) == torch.signbit(want))
    )
    assert bool(same.all()), f"{name}({x.tolist()}) = {got.tolist()}, want {want.tolist()}"
    # Just inside the overflow / underflow edges the results are finite, subnormal or tiny, and <= 1 ulp.
    edges = torch.tensor([88.72, -87.5, -100.0, -103.5, 1e-45, 3e-39, 1e-3, -1e-3], dtype=torch.float32)
    fn, _ = TRANSCENDENTAL[name]
    _check_ulp(unary_op(built, f"{name}_f32", edges), fn(edges.double()), 1.0, f"{name} edges")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("name", list(TRANSCENDENTAL))
def test_transcendental_16bit_all_patterns(built, dt, name):
    """Float math then one rounding: at most 1 ulp (of the 16-bit type) from the correctly rounded value."""
    dtype = DTYPES[dt]
    x = all_16bit(dtype)
    fn, _ = TRANSCENDENTAL[name]
    got = unary_op(built, f"{name}_{dt}", x)
    ref = fn(x.double())
    if name == "silu":
        ref = torch.where(x.double() == -math.inf, torch.tensor(-0.0, dtype=torch.float64), ref)
    want = ref.float().to(dtype)
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    assert torch.equal(nan_got, nan_want)
    dist = (ordinal(got) - ordinal(want)).abs()[~nan_want]
    assert int(dist.max()) <= 1, f"{name} {dt}: {int(dist.max())} ulp"
    assert float((dist != 0).float().mean()) < 0.01, f"{name} {dt}: too many 1-ulp differences"


def _gelu_ref(x: torch.Tensor) -> torch.Tensor:
    """torch's exact GELU in float64 as 0.5 x erfc(-x / sqrt2) (no cancellation for x < 0); -inf -> -0."""
    x = x.double()
    ref = 0.5 * x * torch.special.erfc(-x * math.sqrt(0.5))
    return torch.where(x == -math.inf, torch.tensor(-0.0, dtype=torch.float64), ref)


def _gelu_tanh_ref(x: torch.Tensor) -> torch.Tensor:
    """torch's approximate='tanh' GELU in float64 as x sigmoid(2z), the same value as x/2 (1 + tanh z)
    without its cancellation for x < 0 (which alone costs the float64 formula ~100 float ulp at x = -6)."""
    x = x.double()
    ref = x * torch.sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
    return torch.where(x == -math.inf, torch.tensor(-0.0, dtype=torch.float64), ref)


def _softplus_ref(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) in float64 as max(x, 0) + log1p(e^-|x|), without torch's threshold (above 20
    the two differ by e^-x, below a thousandth of a float ulp)."""
    x = x.double()
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-x.abs()))


# name -> (float64 reference, max ulp error of the float32 version over the sweep).
NEW_MATH = {
    "erf": (torch.special.erf, 0.51),
    "exp2": (torch.exp2, 0.51),
    "log2": (torch.log2, 0.51),
    "reciprocal": (torch.reciprocal, 0.5),
    "gelu": (_gelu_ref, 0.51),
    "gelu_tanh": (_gelu_tanh_ref, 0.51),
    "softplus": (_softplus_ref, 0.51),
    "log1p": (torch.log1p, 0.51),
    # torch's formulas in float64 (interp's own, runtime/unary_ops.py), with the limits at +-inf
    **{name: (unary_fn(name), 0.51) for name in ("expm1", "elu", "selu", "hardsigmoid", "hardswish", "mish", "softsign",
                                                 "logsigmoid")},  # fmt: skip
}


def test_every_float_unary_op_of_the_registry_has_an_accuracy_test():
    """Each float unary op of the op registry is measured here: sqrt and rsqrt bit-exactly, the
    others in ulps (TRANSCENDENTAL, NEW_MATH) and on their special values."""
    measured = {"sqrt", "rsqrt"} | set(TRANSCENDENTAL) | set(NEW_MATH)
    assert {d.name for d in FLOAT_UNARY} <= measured
    assert set(NEW_MATH) <= set(NEW_SPECIALS)


@pytest.mark.parametrize("name", list(NEW_MATH))
def test_new_math_f32_ulp(built, name):
    """Computed in double and rounded once: within 0.51 ulp of float64 everywhere, subnormals included."""
    fn, bound = NEW_MATH[name]
    x = torch.cat([float_sweep(), torch.linspace(-15.0, 5.0, 200_001, dtype=torch.float32)])
    got = unary_op(built, f"{name}_f32", x)
    _check_ulp(got, fn(x.double()), bound, f"{name} f32")
    if name == "reciprocal":  # one correctly rounded division, as torch's
        assert_same_floats(got, torch.reciprocal(x), "reciprocal vs torch")
    if name == "gelu":  # where 1 + erf(x / sqrt2) cancels the result is tiny but still accurate
        tail = torch.linspace(-14.0, -5.0, 10_001, dtype=torch.float32)
        err = ulp_error(unary_op(built, "gelu_f32", tail), _gelu_ref(tail))
        normal = _gelu_ref(tail).abs() >= 2.0**-126
        assert float(normal.float().mean()) > 0.85 and float(err[normal].max()) <= 0.51


def test_new_math_f32_close_to_torch(built):
    """torch's own float32 results are close to ours: within 2 ulp for erf/exp2/log2; for the GELUs within
    2 ulp plus |x| times the error of torch's 1 + erf / 1 + tanh (measured: up to 3.3e-7, which
    cancellation for negative x does not shrink)."""
    x = torch.linspace(-8.0, 8.0, 100_001, dtype=torch.float32)
    for name, fn in [("erf", torch.special.erf), ("exp2", torch.exp2), ("softplus", torch.nn.functional.softplus)]:
        got, want = unary_op(built, f"{name}_f32", x), fn(x)
        assert int((ordinal(got) - ordinal(want)).abs().max()) <= 2, name
    pos = torch.rand(100_000) * 100
    assert int((ordinal(unary_op(built, "log2_f32", pos)) - ordinal(torch.log2(pos))).abs().max()) <= 2
    near = torch.cat([pos, torch.linspace(-0.999, 1.0, 100_001), torch.linspace(-1e-6, 1e-6, 10_001)])
    assert int((ordinal(unary_op(built, "log1p_f32", near)) - ordinal(torch.log1p(near))).abs().max()) <= 2
    for name, fn in [
        ("gelu", torch.nn.functional.gelu),
        ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    ]:
        got, want = unary_op(built, f"{name}_f32", x).double(), fn(x).double()
        ulp = torch.ldexp(torch.ones_like(want), torch.frexp(want.abs())[1] - 24)
        tol = 2 * ulp + x.double().abs() * 2.0**-20
        bad = (got - want).abs() > tol
        assert not bad.any(), (name, x[bad][:5].tolist(), got[bad][:5].tolist(), want[bad][:5].tolist())


def test_new_math_f64(built):
    """Double tiles call libm (std::erf, std::exp2, std::log2, std::erfc, std::exp, std::pow)."""
    x = torch.cat(
        [
            torch.randn(20_000, dtype=torch.float64) * 10,
            torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan]),
        ]
    )
    for name, fn in [
        ("erf", torch.special.erf),
        ("exp2", torch.exp2),
        ("log2", torch.log2),
        ("reciprocal", torch.reciprocal),
        ("gelu", _gelu_ref),
        ("gelu_tanh", _gelu_tanh_ref),
        ("softplus", torch.nn.functional.softplus),  # torch's formula and threshold, as the double version
        ("log1p", torch.log1p),
        *((name, NEW_MATH[name][0]) for name in ("expm1", "elu", "selu", "hardsigmoid", "hardswish", "mish", "softsign",
                                                 "logsigmoid")),  # fmt: skip
    ]:
        got, want = unary_op(built, f"{name}_f64", x), fn(x)
        rtol = 1e-12 if name.startswith("gelu") else 1e-14  # e^{-x^2/2}: rounding of x^2 costs x^2 ulp
        assert torch.allclose(got, want, rtol=rtol, atol=1e-300, equal_nan=True), name
    y = torch.randn(20_000, dtype=torch.float64) * 3
    assert torch.allclose(binary_op(built, "pow_f64", x[:20_000].abs(), y), x[:20_000].abs() ** y, rtol=1e-15)


# Exact results IEEE/C99 define for the new functions: name -> (inputs, results).
NEW_SPECIALS = {
    "erf": ("0 -0 inf -inf nan 1e-45 -1e-45 4 -4 10 -10", "0 -0 1 -1 nan 1e-45 -1e-45 1 -1 1 -1"),
    "exp2": (
        "0 -0 inf -inf nan 1 -1 10 -149 -150 -151 127 128 -1e30",
        "1 1 inf 0 nan 2 0.5 1024 1e-45 0 0 1.7014118e38 inf 0",
    ),
    "log2": (
        "0 -0 -1 -1e-45 inf -inf nan 1 2 0.5 1e-45 1024",
        "-inf -inf nan nan inf nan nan 0 1 -1 -149 10",
    ),
    "reciprocal": ("0 -0 inf -inf nan 2 -4 1e-45", "inf -inf 0 -0 nan 0.5 -0.25 inf"),
    "gelu": ("0 -0 inf -inf nan -20 -1e30 20 1e30", "0 -0 inf -0 nan -0 -0 20 1e30"),
    "gelu_tanh": ("0 -0 inf -inf nan -20 -1e30 20 1e30", "0 -0 inf -0 nan -0 -0 20 1e30"),
    "softplus": ("inf -inf nan 20 21 30 1e30 -110 -200 -1e30", "inf 0 nan 20 21 30 1e30 0 0 0"),
    "expm1": ("0 -0 inf -inf nan 1e-45 -1e-45 89 -20 -1e30", "0 -0 inf -1 nan 1e-45 -1e-45 inf -1 -1"),
    "elu": ("0 -0 inf -inf nan 1e-45 -1e-45 -20 5", "0 -0 inf -1 nan 1e-45 -1e-45 -1 5"),
    "selu": ("0 -0 inf -inf nan 1 -1", "0 -0 inf -1.7580993175506592 nan 1.0507010221481323 -1.1113307476043701"),
    "hardsigmoid": ("0 -0 inf -inf nan -3 3 -1e30 1e30", "0.5 0.5 1 0 nan 0 1 0 1"),
    "hardswish": ("0 -0 inf -inf nan -3 3 -1e30 1e30 -1.5", "0 -0 inf -0 nan -0 3 -0 1e30 -0.375"),
    "mish": ("0 -0 inf -inf nan -200 -1e30 1e30", "0 -0 inf -0 nan -0 -0 1e30"),
    "softsign": ("0 -0 inf -inf nan 1 -3 1e30", "0 -0 1 -1 nan 0.5 -0.75 1"),
    "logsigmoid": ("0 -0 inf -inf nan -1e30 1e30 -200", "-0.6931471824645996 -0.6931471824645996 0 -inf nan -1e30 0 -200"),
    "log1p": (
        "0 -0 -1 -1.5 -2 -1e30 -inf inf nan 1e-45 -1e-45 1e-30 -1e-30 3e38",
        "0 -0 -inf nan nan nan nan inf nan 1e-45 -1e-45 1e-30 -1e-30 88.596848",
    ),
}


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", list(NEW_SPECIALS))
def test_new_math_special_values(built, name, dt):
    dtype = DTYPES[dt]
    x = torch.tensor([float(v) for v in NEW_SPECIALS[name][0].split()], dtype=torch.float32).to(dtype)
    want = torch.tensor([float(v) for v in NEW_SPECIALS[name][1].split()], dtype=torch.float32)
    if dt != "f32":  # the same values computed from the 16-bit inputs, rounded to 16 bits
        want = NEW_MATH[name][0](x.double()).float()
        want = torch.where(torch.isnan(x.float()), math.nan, want).to(dtype)
    got = unary_op(built, f"{name}_{dt}", x)
    same = (torch.isnan(got) & torch.isnan(want)) | (
        (got == want) & (torch.signbit(got) == torch.signbit(want))
    )
    assert bool(same.all()), f"{name}({x.tolist()}) = {got.tolist()}, want {want.tolist()}"


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("name", list(NEW_MATH))
def test_new_math_16bit_all_patterns(built, dt, name):
    """Float math then one rounding: at most 1 ulp (of the 16-bit type) from the correctly rounded value."""
    dtype = DTYPES[dt]
    x = all_16bit(dtype)
    got = unary_op(built, f"{name}_{dt}", x)
    want = NEW_MATH[name][0](x.double()).float().to(dtype)
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    assert torch.equal(nan_got, nan_want)
    dist = (ordinal(got) - ordinal(want)).abs()[~nan_want]
    assert int(dist.max()) <= 1, f"{name} {dt}: {int(dist.max())} ulp"
    assert float((dist != 0).float().mean()) < 0.01, f"{name} {dt}: too many 1-ulp differences"
    if name == "reciprocal":  # torch's bf16/f16 reciprocal is the float division rounded once, as ours
        assert_same_floats(got, torch.reciprocal(x), f"reciprocal {dt}")


POW_SPECIAL_X = (
    "0 -0 1 -1 2 -2 0.5 -0.5 3 -3 inf -inf nan 1e-45 -1e-45 3.4028235e38 -3.4028235e38 0.999999 1.000001"
)
POW_SPECIAL_Y = (
    "0 -0 1 -1 2 -2 3 -3 0.5 -0.5 1.5 -1.5 inf -inf nan 1e10 -1e10 16777215 -16777215 16777216 1e-45 -1e-45 "
    "127 -127 128 -149 -150 0.1"
)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_pow_special_cases_match_torch(built, dt):
    """Every pair of special bases and exponents: C99's table (as torch.pow) exactly, the rest within 1 ulp."""
    dtype = DTYPES[dt]
    xs = torch.tensor([float(v) for v in POW_SPECIAL_X.split()]).to(dtype)
    ys = torch.tensor([float(v) for v in POW_SPECIAL_Y.split()]).to(dtype)
    x = xs.repeat_interleave(len(ys))
    y = ys.repeat(len(xs))
    got = binary_op(built, f"pow_{dt}", x, y)
    want = torch.pow(x, y)
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    bad = nan_got != nan_want
    exact = ~nan_want & ((want == 0) | want.isinf() | (want.abs() == 1) | (x.abs() == 1) | (y == 0))
    bad |= exact & ((got != want) | (got.signbit() != want.signbit()))
    bad |= ~nan_want & ((ordinal(got) - ordinal(want)).abs() > 1)
    assert not bad.any(), [
        (a, b, g, w)
        for a, b, g, w in zip(x[bad].tolist(), y[bad].tolist(), got[bad].tolist(), want[bad].tolist())
    ][:10]
    # the named cases
    cases = {
        (math.nan, 0.0): 1.0,
        (1.0, math.nan): 1.0,
        (-1.0, math.inf): 1.0,
        (-8.0, 1 / 3): math.nan,
        (-0.0, -3.0): -math.inf,
        (-0.0, 3.0): -0.0,
        (-0.0, -2.0): math.inf,
        (0.0, -0.5): math.inf,
        (-2.0, 3.0): -8.0,
        (-2.0, 2.0): 4.0,
        (-math.inf, 3.0): -math.inf,
        (-math.inf, -3.0): -0.0,
        (-math.inf, 0.5): math.inf,
        (0.5, math.inf): 0.0,
        (2.0, -math.inf): 0.0,
    }
    cx = torch.tensor([k[0] for k in cases]).to(dtype)
    cy = torch.tensor([k[1] for k in cases]).to(dtype)
    cw = torch.tensor(list(cases.values())).to(dtype)
    cg = binary_op(built, f"pow_{dt}", cx, cy)
    assert torch.equal(torch.isnan(cg), torch.isnan(cw))
    ok = torch.isnan(cw) | ((cg == cw) & (cg.signbit() == cw.signbit()))
    assert bool(ok.all()), list(zip(cx.tolist(), cy.tolist(), cg.tolist(), cw.tolist()))


def test_pow_f32_ulp(built):
    """Random bases and exponents (results over the whole float range) within 0.51 ulp of float64."""
    g = torch.Generator().manual_seed(21)
    n = 300_000
    x = random_bits(torch.float32, n, seed=22)
    y = torch.randn(n, generator=g) * 4
    # exponents that put y * log2|x| anywhere in [-160, 140]: overflow, underflow and subnormals
    x2 = torch.rand(n, generator=g) * 100 + 1e-3
    y2 = (torch.rand(n, generator=g) * 300 - 160) / torch.log2(x2)
    x3 = (torch.randint(-20, 21, (n,), generator=g) / 2).float()  # negative bases, integer exponents
    y3 = torch.randint(-40, 41, (n,), generator=g).float()
    x = torch.cat([x, x2, x3])
    y = torch.cat([y, y2, y3])
    got = binary_op(built, "pow_f32", x, y)
    _check_ulp(got, torch.pow(x.double(), y.double()), 0.51, "pow f32")
    # bf16: float pow rounded once, within 1 ulp of torch's
    xb, yb = x[:n].abs().bfloat16(), y[:n].bfloat16()
    gb, wb = binary_op(built, "pow_bf16", xb, yb), torch.pow(xb, yb)
    assert torch.equal(torch.isnan(gb), torch.isnan(wb))
    assert int((ordinal(gb) - ordinal(wb)).abs()[~torch.isnan(wb)].max()) <= 1


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_pow_scalar_operands(built, dt):
    """tile ^ scalar and scalar ^ tile: the scalar is converted to the tile's type first."""
    dtype = DTYPES[dt]
    x = (torch.rand(5000) * 4 + 0.01).to(dtype)
    for s in [2.0, 0.5, -1.5, 0.1, 3.0]:
        sv = torch.full_like(x, s)  # s converted to the tile's type
        ts_, st_ = (
            unary_op(built, f"pow_ts_{dt}", x, params=(s,)),
            unary_op(built, f"pow_st_{dt}", x, params=(s,)),
        )
        assert_same_floats(ts_, binary_op(built, f"pow_{dt}", x, sv), f"pow(x, {s})")
        assert_same_floats(st_, binary_op(built, f"pow_{dt}", sv, x), f"pow({s}, x)")
        assert torch.equal(torch.isnan(st_), (s < 0) & (x != x.round()))  # a negative base needs an integer
    assert bool(
        (unary_op(built, f"pow_ts_{dt}", x, params=(2.0,)) == (x.float() * x.float()).to(dtype)).all()
    )


def test_pow_broadcasting(built):
    g = torch.Generator().manual_seed(23)
    for sa, sb in BC_SHAPES:
        a = torch.rand(sa, generator=g) * 3 + 0.01
        b = torch.randn(sb, generator=g) * 3
        ea, eb = torch.broadcast_tensors(a, b)
        want = binary_op(built, "pow_f32", ea.contiguous(), eb.contiguous())
        out = torch.empty(want.shape)
        call(built, f"bc_pow_f32_{sa[0]}x{sa[1]}_{sb[0]}x{sb[1]}", a.contiguous(), b.contiguous(), out, n=0)
        assert torch.equal(out, want), (sa, sb)
        _check_ulp(out.reshape(-1), torch.pow(ea.double(), eb.double()).reshape(-1), 0.51, "bc pow")


@pytest.mark.parametrize(
    "expr", ["erf(a)", "gelu(a)", "reciprocal(a)", "log2(a)", "pow(a, a)", "pow(a, 2)", "pow(2, a)"]
)
@pytest.mark.parametrize("elem", ["int32_t", "bool"])
def test_float_ops_on_integer_tiles_are_compile_errors(tmp_path, expr, elem):
    src = tmp_path / "bad.cpp"
    src.write_text(
        "#include <tilescope/tile.hpp>\nusing namespace ts;\n"
        f"auto f(const Tile<{elem}, 4, 8> &a) {{ return {expr}; }}\nint main() {{ f({{}}); }}\n"
    )
    proc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-I", str(INCLUDE), str(src)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "this op needs a floating tile (float, double, bf16, f16)" in proc.stderr


def _expected_int_cast(x: torch.Tensor, mode: str, dt: str) -> torch.Tensor:
    """The documented policy: round with `mode`, saturate to the type's range, NaN -> 0."""
    d = x.double()
    r = {
        "rint": torch.round,
        "floor": torch.floor,
        "ceil": torch.ceil,
        "trunc": torch.trunc,
        "round": lambda v: torch.sign(v) * torch.floor(v.abs() + 0.5),
    }[mode](d)
    lo, hi = INT_RANGE[dt]
    r = torch.nan_to_num(r, nan=0.0)
    if dt == "i64":  # float64 cannot hold int64's max; saturate explicitly
        out = r.clamp(-(2.0**63), 2.0**63 - 1024).to(torch.int64)
        out[r >= 2.0**63] = hi
        return out
    return r.clamp(lo, hi).to(DTYPES[dt])


CAST_PAIRS = [
    tuple(p.split("->"))
    for p in "f32->i32 f32->i8 f32->u8 f32->i64 bf16->i32 bf16->u8 f16->i8 f64->i32 f64->i64".split()
]


@pytest.mark.parametrize("src,dt", CAST_PAIRS)
@pytest.mark.parametrize("mode", MODES)
def test_cast_float_to_int(built, src, dt, mode):
    ties = [
        float(v)
        for v in (
            "0.5 1.5 2.5 -0.5 -1.5 -2.5 0.49999997 -0.49999997 126.5 127.5 128 -128.5 -129 255.5 256 -1 -0 0 3.7 "
            "-3.7 1e10 -1e10 2147483520 2147483648 -2147483648 -2147483904 9.2233715e18 9.223372e18 -9.223372e18 "
            "-1e19 inf -inf nan"
        ).split()
    ]
    g = torch.Generator().manual_seed(10)
    x = torch.cat(
        [
            torch.tensor(ties, dtype=torch.float64),
            torch.randn(4000, generator=g, dtype=torch.float64) * 300,
            torch.randn(1000, generator=g, dtype=torch.float64) * 1e9,
        ]
    )
    x = x.to(DTYPES[src])
    got = unary_op(built, f"cast_{src}_{dt}_{mode}", x, DTYPES[dt])
    want = _expected_int_cast(x, mode, dt)
    bad = got != want
    assert not bad.any(), (
        f"{int(bad.sum())} wrong, e.g. x={x[bad][:5].tolist()} got={got[bad][:5].tolist()} want={want[bad][:5].tolist()}"
    )


def test_cast_rint_matches_torch_in_range(built):
    x = torch.cat([torch.arange(-200, 200) / 4, torch.randn(5000) * 1000]).float()
    assert torch.equal(unary_op(built, "cast_f32_i32_rint", x, torch.int32), torch.round(x).to(torch.int32))
    assert torch.equal(unary_op(built, "cast_f32_i32_trunc", x, torch.int32), x.to(torch.int32))
    small = x.clamp(-128, 127)
    assert torch.equal(
        unary_op(built, "cast_f32_i8_floor", small, torch.int8), torch.floor(small).to(torch.int8)
    )


OTHER_CASTS = (
    "f64->f32 f64->bf16 f64->f16 f32->f64 bf16->f16 f16->bf16 i32->f32 i32->bf16 i64->f32 i32->i8 i8->u8 i32->i64 "
    "u8->i32 f32->bool bf16->bool i32->bool bool->f32 bool->i32 bool->bf16"
)


@pytest.mark.parametrize("src,dst", [tuple(p.split("->")) for p in OTHER_CASTS.split()])
def test_other_casts_match_torch(built, src, dst):
    g = torch.Generator().manual_seed(11)
    sdt = DTYPES[src]
    if src == "f64":
        x = torch.cat(
            [
                torch.randn(20_000, generator=g, dtype=torch.float64)
                * 10.0 ** torch.randint(-45, 39, (20_000,), generator=g),
                torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e300, -1e-300, 65520.0, 65519.99]),
            ]
        )
    elif sdt.is_floating_point:
        x = random_bits(sdt, 20_000, seed=12) if sdt != torch.float32 else float_sweep(20_000, seed=12)
        x[:3] = torch.tensor([0.0, -0.0, math.nan], dtype=sdt)
    elif src == "bool":
        x = torch.randint(0, 2, (1000,), generator=g).bool()
    else:
        lo, hi = INT_RANGE[src]
        x = torch.randint(lo, hi, (20_000,), generator=g, dtype=torch.int64).to(sdt)
        x[:3] = torch.tensor([0, lo, hi], dtype=torch.int64).to(sdt)
    got = unary_op(built, f"cast_{src}_{dst}", x, DTYPES[dst])
    want = x.to(DTYPES[dst])
    if DTYPES[dst].is_floating_point:
        assert_same_floats(got, want, f"{src} -> {dst}")
    else:
        assert torch.equal(got, want)


def _row_lanes(cols: int, max_lanes: int) -> int:
    """The documented lane count: max_lanes (256 bytes / the accumulator's size), or the row's
    length rounded down to a power of 2 when that is smaller."""
    lanes = 1
    while lanes * 2 <= cols and lanes * 2 <= max_lanes:
        lanes *= 2
    return lanes


def _emulate_row_sum(x: np.ndarray, max_lanes: int = 64) -> np.ndarray:
    """The documented order: L lanes (64 for 4-byte accumulators, 32 for 8-byte), lane l gets
    elements c = l mod L in order, then a tree; a float sum ends by adding +0.0."""
    rows, cols = x.shape
    lanes = _row_lanes(cols, max_lanes)
    acc = x[:, :lanes].copy()
    c = lanes
    while c + lanes <= cols:
        acc = acc + x[:, c : c + lanes]
        c += lanes
    rest = cols - c
    if rest:
        acc[:, :rest] = acc[:, :rest] + x[:, c:]
    width = lanes // 2
    while width >= 1:
        acc[:, :width] = acc[:, :width] + acc[:, width : 2 * width]
        width //= 2
    return acc[:, :1] + 0.0


def _emulate_col_sum(x: np.ndarray) -> np.ndarray:
    acc = x[0:1].copy()
    for r in range(1, x.shape[0]):
        acc = acc + x[r : r + 1]
    return acc


REDUCTION_CASES = [
    (dt, tuple(int(d) for d in shape.split("x")))
    for dt, shapes in [
        ("f32", "16x100 8x128 5x3 3x1 1x37 3x1000"),
        ("bf16", "16x100 5x3 1x37"),
        ("f16", "16x100"),
        ("i32", "8x128"),
    ]
    for shape in shapes.split()
]


@pytest.mark.parametrize("dt,shape", REDUCTION_CASES)
def test_reductions(built, dt, shape):
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(13)
    if dtype.is_floating_point:
        x = (torch.randn(shape, generator=g) * 4).to(dtype)
    else:
        x = torch.randint(-(2**31), 2**31 - 1, shape, generator=g, dtype=torch.int64).to(dtype)
    results = {}
    for op in ["row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min"]:
        out_shape = (shape[0], 1) if op.startswith("row") else (1, shape[1])
        out = torch.empty(out_shape, dtype=dtype)
        call(built, f"{op}_{dt}_{shape[0]}x{shape[1]}", x.contiguous(), out, n=0)
        results[op] = out
    for op, fn in [
        ("row_max", lambda t: t.amax(1, keepdim=True)),
        ("row_min", lambda t: t.amin(1, keepdim=True)),
        ("col_max", lambda t: t.amax(0, keepdim=True)),
        ("col_min", lambda t: t.amin(0, keepdim=True)),
    ]:
        assert torch.equal(results[op], fn(x)), op
    if dt == "i32":  # wrap-around sums in int32 (torch widens to int64; wrap that back)
        assert torch.equal(results["row_sum"], x.long().sum(1, keepdim=True).to(torch.int32))
        assert torch.equal(results["col_sum"], x.long().sum(0, keepdim=True).to(torch.int32))
        return
    xf = x.float().numpy()
    # Exactly the documented order, accumulated in float and rounded once to the tile's type.
    assert_same_floats(results["row_sum"], torch.from_numpy(_emulate_row_sum(xf)).to(dtype), "row_sum order")
    assert_same_floats(results["col_sum"], torch.from_numpy(_emulate_col_sum(xf)).to(dtype), "col_sum order")
    # And close to torch's own (differently ordered) sums.
    for op, dim in [("row_sum", 1), ("col_sum", 0)]:
        want = x.double().sum(dim, keepdim=True)
        scale = x.double().abs().sum(dim, keepdim=True)
        tol = 1e-6 * scale if dt == "f32" else 2.0**-7 * want.abs() + 1e-6 * scale
        assert bool(((results[op].double() - want).abs() <= tol).all()), op


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_fused_expression_is_bit_identical_to_its_tile_ops(built, dt):
    """A fused tree (broadcast operands, scalars, unary math, maximum/minimum) rounds every op as
    the tile ops do: the same bits, and torch's values for the exact ops."""
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(21)
    x, r, c = (torch.randn(s, generator=g).to(dtype) for s in [(6, 40), (6, 1), (1, 40)])
    tiles, fused = torch.empty(6, 40, dtype=dtype), torch.empty(6, 40, dtype=dtype)
    red_tiles, red_fused = torch.empty(6, 3, dtype=dtype), torch.empty(6, 3, dtype=dtype)
    call(built, f"fused_{dt}", x, r, c, tiles, fused, red_tiles, red_fused, n=0)
    bits = torch.int16 if dt == "bf16" else torch.int32
    assert torch.equal(tiles.view(bits), fused.view(bits))
    assert torch.equal(red_tiles.view(bits), red_fused.view(bits)), "row reductions of a fused operand"
    want = torch.exp(x - r) * c + torch.maximum(x, r) / 3.0 - torch.sqrt(torch.abs(-x)) + torch.clamp(c, max=0.5)
    torch.testing.assert_close(fused, want, rtol=1e-5 if dt == "f32" else 2e-2, atol=1e-5 if dt == "f32" else 2e-2)


def test_reductions_propagate_nan(built):
    x = torch.randn(16, 100)
    x[3, 77] = math.nan
    x[9, 0] = math.nan
    out = torch.empty(16, 1)
    call(built, "row_max_f32_16x100", x, out, n=0)
    assert torch.isnan(out[[3, 9], 0]).all() and not torch.isnan(out[[0, 1, 2, 4, 15], 0]).any()
    out = torch.empty(1, 100)
    call(built, "col_min_f32_16x100", x, out, n=0)
    assert torch.isnan(out[0, [0, 77]]).all() and int(torch.isnan(out).sum()) == 2


def _emulate_row_extremum(x: np.ndarray, is_max: bool) -> np.ndarray:
    """row_max/row_min in the documented lane order (64 float lanes, then a tree), element by
    element: op(a, b) is a when a beats b or a is NaN, else b (so the order decides which zero or
    which NaN comes out)."""

    def op(a, b):
        return a if ((a > b) if is_max else (a < b)) or a != a else b

    out = np.empty((x.shape[0], 1), dtype=x.dtype)
    for r, row in enumerate(x):
        lanes = _row_lanes(len(row), 64)
        acc = list(row[:lanes])
        for c in range(lanes, len(row)):
            acc[c % lanes] = op(acc[c % lanes], row[c])
        width = lanes // 2
        while width >= 1:
            acc[:width] = [op(acc[i], acc[i + width]) for i in range(width)]
            width //= 2
        out[r, 0] = acc[0]
    return out


def test_row_max_min_keep_the_lane_order_for_zeros_and_nans(built):
    """Rows of two 64-lane chunks (8 x 128): a zero or NaN result is the one the documented order
    gives (which sign of zero, which NaN payload), every other result is exact."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 128, generator=g)
    signs = torch.randint(0, 2, (8, 128), generator=g).bool()
    zeros = torch.where(signs, torch.tensor(-0.0), torch.tensor(0.0))
    x[0] = zeros[0]  # all +-0
    x[1] = torch.where(x[1] > 0, zeros[1], x[1])  # max is a zero, min negative
    x[2] = torch.where(x[2] < 0, zeros[2], x[2])  # min is a zero
    payloads = torch.tensor([0x7FC00001, 0x7FC00002, 0xFFC00003, 0x7FA00004], dtype=torch.int64)
    nans = payloads.to(torch.int32).view(torch.float32)  # quiet NaNs with distinct payloads
    x[3, [5, 40, 77, 127]] = nans
    x[4, [0, 64]] = nans[:2]
    x[5, 100] = nans[2]
    x[5, :50] = zeros[5, :50]
    x[6, [32, 64]] = nans[[1, 0]]  # one lane in a 16-lane order (the first NaN wins), two in 64 lanes
    for op, is_max in [("row_max", True), ("row_min", False)]:
        out = torch.empty(8, 1)
        call(built, f"{op}_f32_8x128", x.contiguous(), out, n=0)
        want = torch.from_numpy(_emulate_row_extremum(x.numpy(), is_max))
        assert torch.equal(out.view(torch.int32), want.view(torch.int32)), (op, out[:, 0], want[:, 0])


MEAN_CASES = [
    ("f32", (16, 100)),
    ("f32", (8, 128)),
    ("f32", (5, 3)),
    ("f32", (3, 1)),
    ("f32", (1, 37)),
    ("f64", (7, 9)),
    ("f64", (2, 100)),
    ("bf16", (16, 100)),
    ("bf16", (5, 3)),
    ("f16", (16, 100)),
]


@pytest.mark.parametrize("dt,shape", MEAN_CASES)
def test_row_col_mean(built, dt, shape):
    """The sum in row_sum's / col_sum's order in the compute type, / count in the compute type, rounded once."""
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(15)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 4 + 1).to(dtype)
    rows, cols = shape
    row, col = torch.empty(rows, 1, dtype=dtype), torch.empty(1, cols, dtype=dtype)
    call(built, f"row_mean_{dt}_{rows}x{cols}", x.contiguous(), row, n=0)
    call(built, f"col_mean_{dt}_{rows}x{cols}", x.contiguous(), col, n=0)
    acc = np.float64 if dt == "f64" else np.float32
    xa = x.to(torch.float64 if dt == "f64" else torch.float32).numpy()
    want_row = _emulate_row_sum(xa, 32 if dt == "f64" else 64) / acc(cols)
    want_col = _emulate_col_sum(xa) / acc(rows)
    assert_same_floats(row, torch.from_numpy(want_row).to(dtype), "row_mean")
    assert_same_floats(col, torch.from_numpy(want_col).to(dtype), "col_mean")
    if dt in ("f32", "f64"):  # and close to torch's (differently ordered) mean
        tol = {"f32": 1e-6, "f64": 1e-14}[dt]
        assert torch.allclose(row, x.mean(1, keepdim=True), rtol=tol, atol=tol * 4)
        assert torch.allclose(col, x.mean(0, keepdim=True), rtol=tol, atol=tol * 4)
    else:  # one rounding to 16 bits: within 1 ulp of torch's mean
        for got, want in [
            (row, x.float().mean(1, keepdim=True).to(dtype)),
            (col, x.float().mean(0, keepdim=True).to(dtype)),
        ]:
            assert int((ordinal(got) - ordinal(want)).abs().max()) <= 1


def test_mean_of_signed_zeros_and_nan(built):
    x = torch.full((5, 3), -0.0)
    row, col = torch.empty(5, 1), torch.empty(1, 3)
    call(built, "row_mean_f32_5x3", x, row, n=0)
    call(built, "col_mean_f32_5x3", x, col, n=0)
    assert not row.signbit().any() and not col.signbit().any()  # +0.0, as torch.mean
    x[2, 1] = math.nan
    call(built, "row_mean_f32_5x3", x, row, n=0)
    call(built, "col_mean_f32_5x3", x, col, n=0)
    assert torch.isnan(row[:, 0]).tolist() == [False, False, True, False, False]
    assert torch.isnan(col[0]).tolist() == [False, True, False]


@pytest.mark.parametrize("op", ["row_mean", "col_mean"])
def test_mean_of_integer_tile_is_a_compile_error(tmp_path, op):
    src = tmp_path / "bad.cpp"
    src.write_text(
        "#include <tilescope/tile.hpp>\nusing namespace ts;\n"
        f"auto f(const Tile<int32_t, 4, 8> &a) {{ return {op}(a); }}\nint main() {{ f({{}}); }}\n"
    )
    proc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-I", str(INCLUDE), str(src)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "row_mean/col_mean need a floating tile" in proc.stderr


def test_iota(built):
    r, c = torch.meshgrid(torch.arange(5), torch.arange(7), indexing="ij")
    for name, dtype, want in [
        ("iota_f32_0", torch.float32, r.float()),
        ("iota_f32_1", torch.float32, c.float()),
        ("iota_i32_0", torch.int32, r.int()),
        ("iota_i64_1", torch.int64, c.long()),
        ("iota_bf16_1", torch.bfloat16, torch.arange(300).reshape(1, 300).to(torch.bfloat16)),  # 257 -> 256
        ("iota_u8_0", torch.uint8, torch.arange(300).reshape(300, 1).to(torch.uint8)),  # wraps past 255
        ("iota_bool_1", torch.bool, torch.tensor([[False, True, True]] * 2)),
    ]:
        out = torch.empty(want.shape, dtype=dtype)
        call(built, name, out, n=0)
        assert torch.equal(out, want), name


@pytest.mark.parametrize(
    "box", [(0, 0, 9, 11), (2, 3, 4, 5), (8, 10, 1, 1), (0, 4, 9, 1), (3, 0, 1, 11), (5, 6, 4, 5)]
)
def test_slice(built, box):
    r0, c0, r, c = box
    x = torch.randn(9, 11)
    out = torch.empty(r, c)
    call(built, f"slice_{r0}_{c0}_{r}x{c}", x, out, n=0)
    assert torch.equal(out, x[r0 : r0 + r, c0 : c0 + c])


@pytest.mark.parametrize(
    "box,message",
    [
        ("1, 0, 9, 11", "slice: the box's rows run past the tile's"),
        ("0, 2, 3, 10", "slice: the box's columns run past the tile's"),
        ("-1, 0, 2, 2", "slice: the box starts at a negative row or column"),
    ],
)
def test_slice_outside_the_tile_is_a_compile_error(tmp_path, box, message):
    src = tmp_path / "bad.cpp"
    src.write_text(
        "#include <tilescope/tile.hpp>\nusing namespace ts;\n"
        f"auto f(const Tile<float, 9, 11> &a) {{ return slice<{box}>(a); }}\nint main() {{ f({{}}); }}\n"
    )
    proc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-I", str(INCLUDE), str(src)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert message in proc.stderr


def _cpu_has_fma() -> bool:
    try:
        return " fma " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def _missing_flags(isa: str) -> list[str]:
    """The CPU flags the matmul build for instruction-set path `isa` needs and this CPU lacks."""
    return [f for f in ISA_FLAGS.get(isa, ([], []))[1] if f not in _cpu_flags()]


def _need_isa(isa: str) -> None:
    """Skips unless this CPU runs the matmul build for instruction-set path `isa`."""
    missing = _missing_flags(isa)
    if missing:
        pytest.skip(f"{isa} path needs CPU flags {missing}")


def _sequential_fma_matmul(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """acc += a @ b one k at a time, each step a*b + acc rounded once to float32 (exact product in f64)."""
    acc = acc.double().clone()
    a64, b64 = a.double(), b.double()
    for k in range(a.shape[1]):
        acc = (acc + a64[:, k : k + 1] * b64[k : k + 1, :]).float().double()
    return acc.float()


@pytest.mark.parametrize(
    "dt,shape",
    [
        ("f32", (64, 64, 64)),
        ("f32", (13, 37, 19)),
        ("f32", (7, 5, 24)),
        ("f32", (1, 128, 1)),
        ("bf16", (32, 40, 48)),
        # fewer rows than two register blocks (12 x 2 on AVX-512, 6 x 2 on AVX2, 4 x 2 scalar): b is
        # widened in registers as it is loaded, not cast to a float tile first
        ("bf16", (5, 33, 37)),
        ("bf16", (16, 24, 40)),
        ("bf16", (1, 64, 130)),
        ("f16", (16, 8, 24)),
    ],
)
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul(built, dt, shape, isa):
    _need_isa(isa)
    m, k, n = shape
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(14)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    out = torch.empty(m, n)
    call(built, f"mm_{dt}_{m}x{k}x{n}", a, b, out, n=0, isa=isa)
    exact = a.double() @ b.double()
    bound = k * 2.0**-24 * (a.double().abs() @ b.double().abs())  # the classic gamma_K bound
    assert bool(((out.double() - exact).abs() <= bound).all())
    fused = _cpu_has_fma() and isa != "sse2"  # the sse2 build has no FMA: two roundings per step
    init = torch.randn(m, n, generator=g)
    acc = init.clone()
    call(built, f"mmacc_{dt}_{m}x{k}x{n}", a, b, acc, n=0, isa=isa)
    exact_acc = init.double() + exact
    assert bool(((acc.double() - exact_acc).abs() <= bound + (k + 1) * 2.0**-24 * init.double().abs()).all())
    if fused:  # the documented order: sequential in k, one rounding per step
        assert torch.equal(out, _sequential_fma_matmul(a.float(), b.float(), torch.zeros(m, n)))
        assert torch.equal(acc, _sequential_fma_matmul(a.float(), b.float(), init))


@pytest.mark.parametrize("shape", [(5, 33, 37), (16, 24, 40)])
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul_bf16_of_few_rows_keeps_subnormal_and_huge_b_values(built, shape, isa):
    """A bf16 b widened in registers (few rows of a) reads the same floats as its float copy:
    subnormal, huge and signed-zero values of b give the documented order's bits."""
    _need_isa(isa)
    if not _cpu_has_fma():
        pytest.skip("the bits of one fused step per k need FMA")
    m, k, n = shape
    g = torch.Generator().manual_seed(18)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16)
    b[0, :] = torch.tensor(1e-39).to(torch.bfloat16)  # subnormal in bf16
    b[1, ::2] = torch.tensor(3e38).to(torch.bfloat16)  # products beyond float's range: Inf
    b[2, 1::2] = -0.0
    out = torch.empty(m, n)
    call(built, f"mm_bf16_{m}x{k}x{n}", a, b, out, n=0, isa=isa)
    want = _sequential_fma_matmul(a.float(), b.float(), torch.zeros(m, n))
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.nan_to_num(), want.nan_to_num())
    assert bool(out.isinf().any())  # the huge row reached the sums


@pytest.mark.parametrize(
    "shape", [(64, 64, 64), (32, 40, 48), (13, 37, 19), (7, 5, 24), (1, 128, 1), (12, 1, 16), (25, 3, 40)]
)
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul_dot_gives_the_exact_orders_bits_for_normal_values(built, shape, isa):
    """matmul_dot (vdpbf16ps where the CPU has AVX-512 BF16, matmul elsewhere) accumulates in the
    documented order: the same bits as one fused step per k, for values that are not subnormal;
    odd K (a padded pair) and edge columns included, and an accumulator of -0."""
    _need_isa(isa)
    if not _cpu_has_fma():
        pytest.skip("the bits of one fused step per k need FMA")
    m, k, n = shape
    g = torch.Generator().manual_seed(17)
    a = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16)
    a[0, -1], b[-1, 0] = float("inf"), 2.0  # the padded pair of an odd K adds +0: Inf stays Inf
    out = torch.full((m, n), 7.0)  # matmul_dot ignores what the output held
    call(built, f"mmdot_{m}x{k}x{n}", a, b, out, n=0, isa=isa)
    assert torch.equal(out, _sequential_fma_matmul(a.float(), b.float(), torch.zeros(m, n)))
    assert out[0, 0] == float("inf")
    init = torch.randn(m, n, generator=g)
    init[0, -1] = -0.0
    acc = init.clone()
    call(built, f"mmdotacc_{m}x{k}x{n}", a, b, acc, n=0, isa=isa)
    assert torch.equal(acc, _sequential_fma_matmul(a.float(), b.float(), init + 0.0))
    zeros = torch.zeros(m, k, dtype=torch.bfloat16)
    signed = torch.full((m, n), -0.0)
    call(built, f"mmdotacc_{m}x{k}x{n}", zeros, b, signed, n=0, isa=isa)
    assert not bool(signed.signbit().any())  # -0 + (0 products) is +0, as matmul_acc gives


def test_matmul_dot_flushes_subnormals_where_the_instruction_runs(built):
    """The one documented difference: the instruction reads a subnormal input as zero."""
    tiny = torch.tensor(1e-39).to(torch.bfloat16)
    assert 0 < float(tiny) < 1.1754944e-38  # subnormal in bf16 (and float)
    a = torch.zeros(12, 1, dtype=torch.bfloat16)
    a[0, 0] = tiny
    b = torch.ones(1, 16, dtype=torch.bfloat16)
    out = torch.empty(12, 16)
    call(built, "mmdot_12x1x16", a, b, out, n=0)
    flushes = "avx512_bf16" in _cpu_flags()
    assert float(out[0, 0]) == (0.0 if flushes else float(tiny))
    call(built, "mmdot_12x1x16", a, b, out, n=0, isa="avx512" if "avx512f" in _cpu_flags() else "sse2")
    assert float(out[0, 0]) == float(tiny)  # built without AVX-512 BF16: matmul itself


def _kernel_grants_amx() -> bool:
    """Whether Linux lets this process use the AMX tile registers (arch_prctl ARCH_REQ_XCOMP_PERM)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl (x86-64), XFEATURE_XTILEDATA


def test_int8_matmul_runs_on_amx_where_the_cpu_the_compiler_and_the_kernel_allow_it(built):
    """The AMX shapes above run on AMX wherever it can (so their exactness is AMX's), and the build
    says so; elsewhere they run on VNNI (or vpmaddwd), whose paths the lower builds test."""
    used = torch.zeros(1, dtype=torch.int32)
    call(built, "amx_used", used, n=0)
    cpu = {"amx_tile", "amx_int8"} <= _cpu_flags() and platform.machine() == "x86_64"
    if not (cpu and sys.platform == "linux" and NO_AMX):  # NO_AMX: g++ knows AMX
        assert int(used) == -1  # no AMX path compiled in
        return
    assert int(used) == (1 if _kernel_grants_amx() else 0)
    for isa in ISA_FLAGS:  # the lower paths are built without AMX
        if not _missing_flags(isa):
            call(built, "amx_used", used, n=0, isa=isa)
            assert int(used) == -1, isa


def _wrap_i32(x: torch.Tensor) -> torch.Tensor:
    """int64 values mod 2^32 as int32 (two's complement)."""
    return ((x + 2**31) % 2**32 - 2**31).to(torch.int32)


@pytest.mark.parametrize(
    "shape",
    [
        (128, 128, 128),
        (13, 37, 19),
        (7, 5, 24),
        (1, 128, 1),
        (33, 9, 40),
        (6, 1, 16),
        (2, 300, 67),
        (16, 36, 48),
        (32, 68, 64),
        (16, 128, 16),
        (48, 100, 80),
    ],
)
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul_int8_exact(built, shape, isa):
    _need_isa(isa)
    m, k, n = shape
    g = torch.Generator().manual_seed(16)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8)
    name = f"{m}x{k}x{n}"
    for a_, b_ in [
        (a, b),
        (torch.full_like(a, -128), torch.full_like(b, -128)),  # the largest products: 2^14 each
        (torch.full_like(a, -128), torch.full_like(b, 127)),
        (torch.full_like(a, 127), torch.full_like(b, 127)),
    ]:
        out = torch.full((m, n), 12345, dtype=torch.int32)  # matmul ignores what the output held
        call(built, f"mm_i8_{name}", a_, b_, out, n=0, isa=isa)
        exact = a_.long() @ b_.long()
        assert torch.equal(out, _wrap_i32(exact))
        assert torch.equal(out.long(), exact)  # |sum| <= 2^14 K: nothing wraps
    assert int((a.long() @ b.long()).abs().max()) > 0
    # acc += a @ b, wrapping mod 2^32 past int32's ends
    init = torch.randint(-(2**31), 2**31, (m, n), generator=g, dtype=torch.int64)
    init[0, 0] = 2**31 - 1
    init[-1, -1] = -(2**31)
    acc = init.to(torch.int32)
    a2, b2 = torch.full_like(a, 100), torch.full_like(b, 100)
    call(built, f"mmacc_i8_{name}", a2, b2, acc, n=0, isa=isa)
    assert torch.equal(acc, _wrap_i32(init + a2.long() @ b2.long()))
    assert int(acc[0, 0]) < 0  # 2^31 - 1 + 10000 K wrapped
    acc = init.to(torch.int32)
    call(built, f"mmacc_i8_{name}", a, b, acc, n=0, isa=isa)
    assert torch.equal(acc, _wrap_i32(init + a.long() @ b.long()))


@pytest.mark.parametrize(
    "shape", [(7, 5, 24), (8, 67, 40), (2, 300, 67), (16, 128, 16), (32, 68, 64), (48, 100, 80)]
)
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul_int8_of_views_reads_their_rows_in_place(built, shape, isa):
    """Views of wider matrices (rows K + 5 and N + 3 bytes apart, read in place: the op checks its
    views' pointers and strides), on every path: packed rows, the edge columns, AMX's rows of a."""
    _need_isa(isa)
    m, k, n = shape
    g = torch.Generator().manual_seed(17)
    a = torch.randint(-128, 128, (m, k + 5), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n + 3), generator=g, dtype=torch.int8)
    init = torch.randint(-(2**31), 2**31, (m, n), generator=g, dtype=torch.int64)
    acc = init.to(torch.int32)
    call(built, f"mmv_i8_{m}x{k}x{n}", a, b, acc, n=0, isa=isa)
    assert torch.equal(acc, _wrap_i32(init + a[:, :k].long() @ b[:, :n].long()))


@pytest.mark.parametrize(
    "shape", [(7, 5, 24), (8, 67, 40), (2, 300, 67), (13, 37, 19), (5, 9, 3), (16, 36, 48), (33, 12, 100), (32, 68, 64)]
)
@pytest.mark.parametrize("isa", MATMUL_ISAS)
def test_matmul_int8_of_a_weight_packs_it_once(built, shape, isa):
    """b read through weight(): the exact result; the packed tile kept across calls (b changed in
    place still gives the old result) until weights_changed(), after which the new one. Not kept
    where the path does not pack b: fewer columns than a vector (and not AMX's shape)."""
    _need_isa(isa)
    m, k, n = shape
    g = torch.Generator().manual_seed(18)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n + 3), generator=g, dtype=torch.int8)
    init = torch.randint(-(2**31), 2**31, (m, n), generator=g, dtype=torch.int64)
    first, kept, again = init.to(torch.int32), torch.zeros(m, n, dtype=torch.int32), torch.zeros(m, n, dtype=torch.int32)
    tiles = torch.zeros(2, dtype=torch.int32)
    old = b.clone()
    call(built, f"mmw_i8_{m}x{k}x{n}", a, b, first, kept, again, tiles, n=0, isa=isa)
    new = old.clone()
    new[:, :n] ^= 0x5A
    assert torch.equal(b, new)  # the op changed b's box in place, nothing else
    want_old = _wrap_i32(init + a.long() @ old[:, :n].long())
    want_new = _wrap_i32(init + a.long() @ new[:, :n].long())
    assert not torch.equal(want_old, want_new)
    assert torch.equal(first, want_old)
    assert torch.equal(again, want_new)
    cached = int(tiles[0]) > 0
    assert int(tiles[1]) == 0  # weights_changed() dropped every tile
    if n >= 16:
        assert cached, "a whole vector of columns (or AMX's shape): the packed tile is kept"
    if n < 4:
        assert not cached
    assert torch.equal(kept, want_old if cached else want_new)


@pytest.mark.parametrize(
    "name,dtype,shape",
    [
        ("tr_f32_13x37", torch.float32, (13, 37)),
        ("tr_bf16_64x64", torch.bfloat16, (64, 64)),
        ("tr_u8_5x9", torch.uint8, (5, 9)),
        ("tr_f32_1x7", torch.float32, (1, 7)),
        ("tr_bf16_64x512", torch.bfloat16, (64, 512)),  # 8 x 8 SIMD blocks
        ("tr_f16_16x40", torch.float16, (16, 40)),
        ("tr_f32_12x36", torch.float32, (12, 36)),  # 4 x 4 SIMD blocks
        ("tr_i32_4x8", torch.int32, (4, 8)),
        ("tr_bf16_8x12", torch.bfloat16, (8, 12)),  # a side not a multiple of 8: element by element
    ],
)
def test_transpose(built, name, dtype, shape):
    """Every element moved where it belongs: random bit patterns, compared as bits."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    info = torch.iinfo(as_int)
    bits = torch.randint(info.min, info.max, shape, generator=torch.Generator().manual_seed(19), dtype=as_int)
    x = bits.view(dtype)
    out = torch.empty(shape[::-1], dtype=dtype)
    call(built, name, x, out, n=0)
    assert torch.equal(out.view(as_int), bits.t())


# ---- ts_arg kernels -----------------------------------------------------------------------


class _TsTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("buffer_id", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("offset", ctypes.c_int64),
    ]


class _TsScalarValue(ctypes.Union):
    _fields_ = [("f", ctypes.c_double), ("i", ctypes.c_int64)]


class _TsScalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32), ("v", _TsScalarValue)]


class _TsArgU(ctypes.Union):
    _fields_ = [("t", _TsTensor), ("s", _TsScalar)]


class _TsArg(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("dir", ctypes.c_int32), ("u", _TsArgU)]


TS_DTYPE = {
    torch.float32: 0,
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.int32: 3,
    torch.int8: 4,
    torch.uint8: 5,
    torch.bool: 6,
    torch.float64: 7,
    torch.int64: 8,
}


def _tensor_arg(t: torch.Tensor) -> _TsArg:
    a = _TsArg(kind=0, dir=2)
    a.u.t.data = t.untyped_storage().data_ptr()
    a.u.t.buffer_id = 0
    a.u.t.dtype = TS_DTYPE[t.dtype]
    a.u.t.ndim = t.dim()
    for d in range(t.dim()):
        a.u.t.shape[d] = t.shape[d]
        a.u.t.strides[d] = t.stride(d)
    a.u.t.offset = t.storage_offset()
    return a


def _scalar_arg(v: float | int) -> _TsArg:
    a = _TsArg(kind=1, dir=3)
    if isinstance(v, float):
        a.u.s.dtype, a.u.s.v.f = 0, v
    else:
        a.u.s.dtype, a.u.s.v.i = 8, v
    return a


def run_kernel(built: Built, name: str, *args, lib: ctypes.CDLL | None = None) -> None:
    """Calls `extern "C" void name(const ts_arg *)` the way the runtime calls kernel_entry (from the
    "other" unit unless `lib` is given)."""
    arr = (_TsArg * len(args))(
        *[_tensor_arg(a) if isinstance(a, torch.Tensor) else _scalar_arg(a) for a in args]
    )
    fn = getattr(lib or built.libs[list(UNITS).index("other")], name)
    fn.argtypes = [ctypes.POINTER(_TsArg)]
    fn.restype = None
    fn(arr)


@pytest.mark.parametrize("fused", ["", "fused_"])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_strided_views_2d(built, dt, fused):
    dtype = DTYPES[dt]
    big = torch.randn(60, 70).to(dtype)
    dst = torch.zeros(50, 80, dtype=dtype)
    cases = [
        (big, dst, (3, 5), (7, 9)),  # contiguous, offsets inside
        (big[4:44:2, 10:60], dst[1:30, 3:70], (2, 7), (4, 11)),  # row-strided views with storage offsets
        (big.t(), dst.t()[2:60, 5:40], (11, 3), (6, 2)),  # column stride != 1 on both sides
    ]
    for x, y, (i0, i1), (j0, j1) in cases:
        before = dst.clone()
        run_kernel(built, f"k_view2d_{fused}{dt}", x, y, 0.5, i0, i1, j0, j1)
        want_box = (x[i0 : i0 + 8, i1 : i1 + 16].float() * 0.5).to(dtype)
        assert torch.equal(y[j0 : j0 + 8, j1 : j1 + 16], want_box)
        before_view = before.as_strided(y.shape, y.stride(), y.storage_offset())
        before_view[j0 : j0 + 8, j1 : j1 + 16] = want_box
        assert torch.equal(dst, before), "store wrote outside its box"


def test_views_3d_4d_1d(built):
    x3 = torch.randn(5, 12, 30)
    y3 = torch.zeros(4, 9, 40)
    x3v = x3[1:, 2:, 3:]  # leading offsets and non-trivial strides everywhere
    run_kernel(built, "k_view3d", x3v, y3, 2, 1, 4, 3, 5, 30)
    want = y3.clone()
    want.zero_()
    want[3, 5:9, 30:38] = x3v[2, 1:5, 4:12] + 1
    assert torch.equal(y3, want)

    x4 = torch.randn(3, 4, 10, 12)
    y4 = torch.zeros(2, 3, 6, 20).permute(0, 1, 3, 2)  # y4 is [2, 3, 20, 6] with column stride 20
    run_kernel(built, "k_view4d", x4, y4, 2, 3, 6, 7, 1, 2, 16, 1)
    want4 = torch.zeros_like(y4)
    want4[1, 2, 16:19, 1:6] = -x4[2, 3, 6:9, 7:12]
    assert torch.equal(y4, want4)

    x1 = torch.arange(100, dtype=torch.int32)[10::3]  # 1-D, stride 3, offset 10
    y1 = torch.zeros(40, dtype=torch.int32)
    run_kernel(built, "k_view1d", x1, y1, 4, 20)
    want1 = torch.zeros(40, dtype=torch.int32)
    want1[20:36] = x1[4:20] * 2
    assert torch.equal(y1, want1)


def test_rms_norm_kernel(built):
    x = torch.randn(64, 512)
    gamma = torch.rand(1, 512)
    y = torch.empty(64, 512)
    run_kernel(built, "k_rms_rows", x, gamma, y, 1e-6)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    assert torch.allclose(y, want, rtol=1e-5, atol=1e-6)


def test_tiled_matmul_kernel(built):
    a = torch.randn(64, 128).bfloat16()
    b = torch.randn(128, 96).bfloat16()
    c = torch.empty(64, 96)
    run_kernel(built, "k_tiled_matmul_bf16", a, b, c)
    want = a.double() @ b.double()
    assert bool(((c.double() - want).abs() <= 1e-6 * (a.double().abs() @ b.double().abs())).all())


@pytest.mark.parametrize(
    "args,ok",
    [
        (["load", "3", "2", "6", "12"], True),
        (["store", "2", "6", "12"], True),
        (["load", "1", "12"], True),
        (["load", "3", "3", "0", "0"], False),  # leading dim offset == shape
        (["load", "3", "0", "7", "0"], False),  # rows 7..10 past 10
        (["store", "2", "0", "13"], False),  # cols 13..20 past 20
        (["store", "2", "-1", "0"], False),  # negative offset
        (["load", "1", "13"], False),
    ],
)
def test_bounds_checking(built, args, ok):
    proc = subprocess.run([str(built.bounds_exe), *args], capture_output=True, text=True)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
    else:
        assert proc.returncode != 0
        assert f"tilescope: {args[0]} out of bounds: offsets [" in proc.stderr
        shape = {"3": "[3, 10, 20]", "2": "[10, 20]", "1": "[20]"}[args[1]]
        assert f"tensor shape {shape}" in proc.stderr
        assert ("tile [1, 8]" if args[1] == "1" else "tile [4, 8]") in proc.stderr


@pytest.mark.parametrize(
    "args,ok",
    [
        (["vload", "2", "5", "8", "15"], True),  # a ragged tail whose whole 4 x 8 tile passes the end
        (["vstore", "4", "3", "6", "17"], True),
        (["vload", "0", "8", "30", "30"], True),  # an empty valid box is never out of bounds
        (["vload", "3", "8", "8", "0"], False),  # rows 8..11 past 10
        (["vstore", "2", "5", "8", "16"], False),  # columns 16..21 past 20
    ],
)
def test_bounds_checking_ragged(built, args, ok):
    """TS_CHECK_BOUNDS checks only the valid box of load_valid/store_valid (and names it as the tile)."""
    proc = subprocess.run([str(built.bounds_exe), *args], capture_output=True, text=True)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
    else:
        assert proc.returncode != 0
        op = "load" if args[0] == "vload" else "store"
        want = f"tilescope: {op} out of bounds: offsets [{args[3]}, {args[4]}], tile [{args[1]}, {args[2]}], tensor shape [10, 20]"
        assert want in proc.stderr


# ---- ragged loads/stores and row gathers (UNIT_RAGGED) ---------------------------------------

LOAD_AT = "kernel ragged: load of x (arg 0) at model.py:7: "
STORE_AT = "kernel ragged: store of y (arg 1) at model.py:9: "
ROWS_AT = "kernel moe: load_rows of x (arg 0) at m.py:12: "


def ragged(built: Built, name: str, *args, audit: bool = False) -> str:
    """Runs a UNIT_RAGGED kernel; returns the BoundsError message it caught ("" when none)."""
    msg = torch.zeros(512, dtype=torch.uint8)
    run_kernel(built, name, *args, msg, lib=built.ragged_audit if audit else built.ragged)
    return bytes(msg.tolist()).split(b"\0")[0].decode()


def _padded(
    shape: tuple[int, int], pad: int, value: float, dtype=torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """A [rows, cols] view (row stride cols + pad) of a buffer whose other elements all hold `value`."""
    buf = torch.full((shape[0] + pad, shape[1] + pad), value, dtype=dtype)
    return buf, buf[: shape[0], : shape[1]]


# (x offsets, valid): inside, partial, the whole tile at the end, ragged tails whose whole tile
# would pass the tensor's end (rows, columns, both), and empty boxes (anywhere, even outside).
LOAD_VALID_CASES = [
    ((2, 3), (8, 16)),
    ((2, 3), (5, 11)),
    ((12, 14), (8, 16)),
    ((15, 20), (5, 10)),
    ((17, 0), (3, 16)),
    ((0, 25), (8, 5)),
    ((0, 0), (0, 16)),
    ((0, 0), (8, 0)),
    ((40, -5), (0, 0)),
]


@pytest.mark.parametrize("checked", [0, 1])
@pytest.mark.parametrize("offsets,valid", LOAD_VALID_CASES)
def test_load_valid(built, offsets, valid, checked):
    (i0, i1), (vr, vc) = offsets, valid
    buf, x = _padded((20, 30), 10, math.nan)
    x.copy_(torch.randn(20, 30))
    for view in (x, x.t().contiguous().t()):  # row-major, and column stride != 1
        y = torch.empty(8, 16)
        assert ragged(built, "k_load_valid", view, y, i0, i1, vr, vc, -2.5, checked) == ""
        want = torch.full((8, 16), -2.5)
        want[:vr, :vc] = x[i0 : i0 + vr, i1 : i1 + vc] if vr and vc else want[:vr, :vc]
        assert torch.equal(y, want)  # no NaN: nothing outside the valid box was read


STORE_VALID_CASES = [
    ((2, 3), (8, 16)),
    ((2, 3), (5, 11)),
    ((15, 20), (5, 10)),
    ((0, 25), (8, 5)),
    ((0, 0), (0, 16)),
    ((50, 50), (3, 0)),
]


@pytest.mark.parametrize("checked", [0, 1])
@pytest.mark.parametrize("offsets,valid", STORE_VALID_CASES)
def test_store_valid_writes_only_the_valid_box(built, offsets, valid, checked):
    (j0, j1), (vr, vc) = offsets, valid
    src = torch.randn(8, 16)
    buf, y = _padded((20, 30), 10, 99.0)  # 99 everywhere, in the view and past its ends
    assert ragged(built, "k_store_valid", src, y, j0, j1, vr, vc, checked) == ""
    want = torch.full_like(buf, 99.0)
    if vr and vc:
        want[j0 : j0 + vr, j1 : j1 + vc] = src[:vr, :vc]
    assert torch.equal(buf, want)


@pytest.mark.parametrize(
    "valid,what",
    [
        ((9, 16), "valid [9, 16]: valid rows must be within [0, 8]"),
        ((-1, 16), "valid [-1, 16]: valid rows must be within [0, 8]"),
        ((8, 17), "valid [8, 17]: valid columns must be within [0, 16]"),
        ((3, -2), "valid [3, -2]: valid columns must be within [0, 16]"),
        ((70, 128), "valid [70, 128]: valid rows must be within [0, 8]"),
    ],
)
def test_valid_counts_outside_the_tile_throw_in_every_build(built, valid, what):
    x = torch.randn(20, 30)
    y = torch.full((8, 16), 99.0)
    for checked, prefix in [(0, ""), (1, LOAD_AT)]:
        msg = ragged(built, "k_load_valid", x, y, 0, 0, *valid, 0.0, checked)
        assert msg == f"{prefix}load of a [8, 16] tile with {what}"
        assert bool((y == 99.0).all())
    for checked, prefix in [(0, ""), (1, STORE_AT)]:
        out = torch.full((20, 30), 99.0)
        msg = ragged(built, "k_store_valid", x, out, 0, 0, *valid, checked)
        assert msg == f"{prefix}store of a [8, 16] tile with {what}"
        assert bool((out == 99.0).all())


@pytest.mark.parametrize(
    "offsets,valid,detail",
    [
        (
            (15, 20),
            (6, 10),
            "offset [15, 20] + valid box [6, 10] is outside x's shape [20, 30] (dim 0: 15 + 6 > 20)",
        ),
        (
            (0, 25),
            (8, 6),
            "offset [0, 25] + valid box [8, 6] is outside x's shape [20, 30] (dim 1: 25 + 6 > 30)",
        ),
        ((-1, 0), (2, 2), "offset [-1, 0] + valid box [2, 2] is outside x's shape [20, 30] (dim 0: -1 < 0)"),
    ],
)
def test_checked_valid_box_crossing_the_end_throws(built, offsets, valid, detail):
    x = torch.randn(20, 30)
    y = torch.full((8, 16), 99.0)
    assert ragged(built, "k_load_valid", x, y, *offsets, *valid, 0.0, 1) == LOAD_AT + detail
    assert bool((y == 99.0).all())
    out = torch.full((20, 30), 99.0)
    msg = ragged(built, "k_store_valid", torch.randn(8, 16), out, *offsets, *valid, 1)
    assert msg == STORE_AT + detail.replace("x's", "y's")
    assert bool((out == 99.0).all())


def test_valid_1d(built):
    base = torch.arange(100, dtype=torch.int32)
    for checked in (0, 1):
        for i, n in [(20, 10), (14, 16), (25, 5), (0, 0), (29, 1)]:
            buf = base.clone()
            x = buf[5:35]  # 30 elements at storage offset 5
            before = x.clone()
            y = torch.zeros(16, dtype=torch.int32)
            assert ragged(built, "k_valid_1d", x, y, i, n, checked) == ""
            want = torch.full((16,), -7, dtype=torch.int32)  # the fill -7.9 converted to int32
            want[:n] = before[i : i + n]
            assert torch.equal(y, want)
            after = before.clone()
            after[i : i + n] = 2 * before[i : i + n]
            assert (
                torch.equal(x, after) and torch.equal(buf[:5], base[:5]) and torch.equal(buf[35:], base[35:])
            )
    x = base[5:35].clone()
    y = torch.zeros(16, dtype=torch.int32)
    assert ragged(built, "k_valid_1d", x, y, 0, 17, 0) == (
        "load of a [1, 16] tile with valid [1, 17]: valid columns must be within [0, 16]"
    )
    assert ragged(built, "k_valid_1d", x, y, 25, 10, 1) == (
        LOAD_AT + "offset [25] + valid box [10] is outside x's shape [30] (dim 0: 25 + 10 > 30)"
    )


def test_load_valid_3d_bf16(built):
    x = torch.randn(3, 10, 20).bfloat16()
    y = torch.empty(4, 8, dtype=torch.bfloat16)
    assert ragged(built, "k_load_valid_3d_bf16", x[:, 1:, 2:], y, 2, 6, 15, 3, 3) == ""
    want = torch.full((4, 8), 1e10).bfloat16()  # the fill converted to bf16
    want[:3, :3] = x[2, 7:10, 17:20]
    assert torch.equal(y, want)


def _rows_case(dt: str):
    return {
        "f32": ("k_load_rows_f32_i32", torch.float32, torch.int32),
        "bf16": ("k_load_rows_bf16_i64", torch.bfloat16, torch.int64),
        "i32": ("k_load_rows_i32_u8", torch.int32, torch.uint8),
    }[dt]


@pytest.mark.parametrize("dt", ["f32", "bf16", "i32"])
@pytest.mark.parametrize("checked", [0, 1])
@pytest.mark.parametrize("as_column", [0, 1])
def test_load_rows(built, dt, checked, as_column):
    kernel, dtype, itype = _rows_case(dt)
    x = (torch.randn(50, 40) * 100).to(dtype)
    idx = torch.tensor([3, 49, 0, 7, 7, 12, 30, 1], dtype=itype)
    for view in (x, x.t().contiguous().t()):  # row-major, and column stride != 1
        out = torch.empty(8, 16, dtype=dtype)
        assert ragged(built, kernel, view, idx, out, 10, -100, 0.0, checked, as_column) == ""
        assert torch.equal(out, x[idx.long(), 10:26])
        # ragged: rows past valid_rows take the fill, and their indices (here out of range) are not read
        bad_idx = idx.clone()
        bad_idx[5:] = 255 if itype == torch.uint8 else 10**6
        assert ragged(built, kernel, view, bad_idx, out, 24, 5, -3.0, checked, as_column) == ""
        want = torch.full((8, 16), -3.0).to(dtype)
        want[:5] = x[idx[:5].long(), 24:40]
        assert torch.equal(out, want)
        assert ragged(built, kernel, view, bad_idx, out, 1000, 0, 4.0, checked, as_column) == ""
        assert torch.equal(out, torch.full((8, 16), 4.0).to(dtype))


def test_load_rows_errors(built):
    x = torch.randn(50, 40)
    idx = torch.tensor([3, 49, 0, 50, 7, -1, 30, 1], dtype=torch.int32)

    def rows(view, col0, valid_rows, checked, as_column=0) -> str:
        """The message of load_rows<16>(view, idx, col0, ...); a failing call writes nothing."""
        out = torch.full((8, 16), 99.0)
        msg = ragged(built, "k_load_rows_f32_i32", view, idx, out, col0, valid_rows, 0.0, checked, as_column)
        assert msg == "" or bool((out == 99.0).all())
        return msg

    at_3 = ROWS_AT + "index 3 of the row tile is 50, outside x's 50 rows (shape [50, 40])"
    for as_column in (0, 1):
        assert rows(x, 0, -100, 1, as_column) == at_3
        assert rows(x, 0, 8, 1, as_column) == at_3
        assert rows(x, 0, 3, 1, as_column) == ""  # index 3 is not read
    idx[3] = 4
    assert (
        rows(x, 0, -100, 1) == ROWS_AT + "index 5 of the row tile is -1, outside x's 50 rows (shape [50, 40])"
    )
    idx[5] = 5
    assert rows(x, 30, -100, 1) == ROWS_AT + "columns 30 + 16 are outside x's 40 columns (shape [50, 40])"
    assert rows(x, -1, 2, 1) == ROWS_AT + "columns -1 + 16 are outside x's 40 columns (shape [50, 40])"
    assert (
        rows(torch.randn(2, 50, 40), 0, -100, 1)
        == ROWS_AT + "needs a 2-D tensor; x is 3-D (shape [2, 50, 40])"
    )
    for valid_rows in (9, -2):
        want = f"load_rows of a [8, 16] tile with valid rows {valid_rows}: valid rows must be within [0, 8]"
        assert rows(x, 0, valid_rows, 0) == want
        assert rows(x, 0, valid_rows, 1) == ROWS_AT + want


@pytest.fixture
def audit_records(built):
    """Installs a sink in the audited ragged library; yields a function returning (and clearing) its records."""
    lib = built.ragged_audit
    lib.ts_audit_install.argtypes = [ctypes.c_void_p]
    lib.test_audit_take.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
    lib.test_audit_take.restype = ctypes.c_int64
    lib.ts_audit_install(ctypes.cast(lib.test_audit_sink, ctypes.c_void_p))

    def take() -> list[dict]:
        out = (ctypes.c_int64 * (16 * 64))()
        n = lib.test_audit_take(out, 64)
        records = []
        for r in range(n):
            row = out[r * 16 : r * 16 + 16]
            nd = row[4]
            records.append(
                {
                    "op": "load" if row[0] == 0 else "store",
                    "data": row[2],
                    "box": (row[5], row[6]),
                    "offsets": tuple(row[7 : 7 + nd]),
                    "strides": tuple(row[7 + nd : 7 + 2 * nd]),
                }
            )
        return records

    take()
    yield take
    lib.ts_audit_install(None)


def test_audit_records_only_the_valid_box(built, audit_records):
    x = torch.randn(20, 30)
    y = torch.empty(8, 16)
    assert ragged(built, "k_load_valid", x, y, 15, 20, 5, 10, 0.0, 1, audit=True) == ""
    load, store = audit_records()
    assert load == {
        "op": "load",
        "data": x.data_ptr(),
        "box": (5, 10),
        "offsets": (15, 20),
        "strides": (30, 1),
    }
    assert store["op"] == "store" and store["box"] == (8, 16) and store["data"] == y.data_ptr()
    assert ragged(built, "k_load_valid", x, y, 40, 40, 0, 16, 0.0, 1, audit=True) == ""
    assert [r["op"] for r in audit_records()] == ["store"]  # the empty load records nothing
    out = torch.zeros(20, 30)
    assert ragged(built, "k_store_valid", torch.randn(8, 16), out, 17, 3, 3, 7, 0, audit=True) == ""
    load, store = audit_records()
    assert store == {
        "op": "store",
        "data": out.data_ptr(),
        "box": (3, 7),
        "offsets": (17, 3),
        "strides": (30, 1),
    }
    assert ragged(built, "k_store_valid", torch.randn(8, 16), out, 0, 0, 8, 0, 1, audit=True) == ""
    assert [r["op"] for r in audit_records()] == ["load"]
    # a refused access (valid counts outside the tile) records nothing
    assert ragged(built, "k_store_valid", torch.randn(8, 16), out, 0, 0, 9, 1, 0, audit=True) != ""
    assert [r["op"] for r in audit_records()] == ["load"]


def test_audit_records_one_row_per_gathered_row(built, audit_records):
    x = torch.randn(50, 40)
    idx = torch.tensor([3, 49, 0, 7, 7, 12, 30, 1], dtype=torch.int32)
    out = torch.empty(8, 16)
    assert ragged(built, "k_load_rows_f32_i32", x, idx, out, 10, 5, 0.0, 1, 0, audit=True) == ""
    records = audit_records()
    assert [r["op"] for r in records] == ["load"] * 6 + ["store"]  # the index tile, 5 rows, the result
    assert records[0]["data"] == idx.data_ptr() and records[0]["box"] == (1, 8)
    for i, r in enumerate(records[1:6]):
        assert r == {
            "op": "load",
            "data": x.data_ptr(),
            "box": (1, 16),
            "offsets": (int(idx[i]), 10),
            "strides": (40, 1),
        }
