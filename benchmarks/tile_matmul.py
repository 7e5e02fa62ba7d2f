"""Single-thread GFLOPS of the tile library's matmul vs torch.matmul (torch.set_num_threads(1)).

The C++ side is what a generated kernel does: for every TM x TN output tile, zero an fp32
accumulator, loop over K in TK steps loading an a tile and a b tile from the big row-major
matrices, `matmul_acc` them, and store the result. Built with the kernel flags.
int8 inputs do the same with an int32 accumulator (exact); their line gives the time ratio to
the f32 run of the same tiles.

    python benchmarks/tile_matmul.py [--n 1024] [--tiles 64x64x64,32x64x128] [--reps 5]
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from tilescope.toolchain.compiler import BASE_FLAGS

INCLUDE = Path(__file__).resolve().parents[1] / "src" / "tilescope" / "runtime" / "include"
FLAGS = list(BASE_FLAGS)

DRIVER = r"""
#include <tilescope/tile.hpp>
#include <chrono>
using namespace ts;

// The accumulator (and output) type: int32 for int8 inputs, float otherwise.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, int8_t>, int32_t, float>;

template <class T, int TM, int TN, int TK>
static void tiled(const TensorView<T> &a, const TensorView<T> &b, const TensorView<acc_t<T>> &c, int64_t n) {
    for (int64_t i = 0; i < n; i += TM) {
        for (int64_t j = 0; j < n; j += TN) {
            Tile<acc_t<T>, TM, TN> acc = zeros<acc_t<T>, TM, TN>();
            for (int64_t k = 0; k < n; k += TK) matmul_acc(acc, load<TM, TK>(a, {i, k}), load<TK, TN>(b, {k, j}));
            store(c, {i, j}, acc);
        }
    }
}

static ts_tensor square(void *data, int32_t dtype, int64_t n) {
    ts_tensor t{};
    t.data = data;
    t.dtype = dtype;
    t.ndim = 2;
    t.shape[0] = t.shape[1] = n;
    t.strides[0] = n;
    t.strides[1] = 1;
    return t;
}

// Runs the tiled matmul `reps` times; returns the best time in seconds.
template <class T, int TM, int TN, int TK>
static double bench(void *a, void *b, void *c, int64_t n, int reps) {
    const TensorView<T> av(square(a, dtype_of<T>(), n)), bv(square(b, dtype_of<T>(), n));
    const TensorView<acc_t<T>> cv(square(c, dtype_of<acc_t<T>>(), n));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        tiled<T, TM, TN, TK>(av, bv, cv, n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = s < best ? s : best;
    }
    return best;
}

#define ENTRY(T, NAME, TM, TN, TK) \
    extern "C" double NAME##_##TM##x##TN##x##TK(void *a, void *b, void *c, int64_t n, int reps) { \
        return bench<T, TM, TN, TK>(a, b, c, n, reps); \
    }
ENTRY(float, f32, 64, 64, 64)
ENTRY(float, f32, 32, 64, 128)
ENTRY(float, f32, 128, 128, 32)
ENTRY(bf16, bf16, 64, 64, 64)
ENTRY(int8_t, i8, 64, 64, 64)
ENTRY(int8_t, i8, 32, 64, 128)
ENTRY(int8_t, i8, 128, 128, 32)
"""

TILES = ["64x64x64", "32x64x128", "128x128x32"]


def build(work: Path) -> ctypes.CDLL:
    src = work / "tile_matmul_driver.cpp"
    src.write_text(DRIVER)
    out = work / "tile_matmul_driver.so"
    subprocess.run(["g++", *FLAGS, "-I", str(INCLUDE), str(src), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


def torch_gflops(n: int, dtype: torch.dtype, reps: int) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        a @ b
    best = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.n
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(Path(tmp))
        a, b = torch.randn(n, n), torch.randn(n, n)
        want = (a.double() @ b.double()).float()
        ref = torch_gflops(n, torch.float32, args.reps)
        print(f"torch.matmul f32, 1 thread: {ref:7.1f} GFLOPS")
        for tile in TILES:
            if any(n % int(d) for d in tile.split("x")):
                continue
            c = torch.empty(n, n)
            fn = getattr(lib, f"f32_{tile}")
            fn.restype = ctypes.c_double
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
            sec = fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), n, args.reps)
            err = float((c - want).abs().max())
            gf = 2 * n**3 / sec / 1e9
            print(
                f"tile f32 {tile:>11}:        {gf:7.1f} GFLOPS  ({100 * gf / ref:5.1f}% of torch)  max|err| {err:.2e}"
            )
            ai = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            bi = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            ci = torch.empty(n, n, dtype=torch.int32)
            fn = getattr(lib, f"i8_{tile}")
            fn.restype = ctypes.c_double
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
            sec_i8 = fn(ai.data_ptr(), bi.data_ptr(), ci.data_ptr(), n, args.reps)
            exact = bool(torch.equal(ci.long(), ai.long() @ bi.long()))
            print(
                f"tile int8 {tile:>10}:        {2 * n**3 / sec_i8 / 1e9:7.1f} GOPS    "
                f"(f32 / int8 time: {sec / sec_i8:.2f})  exact: {exact}"
            )
        if n % 64 == 0:
            ab, bb = a.bfloat16(), b.bfloat16()
            c = torch.empty(n, n)
            fn = lib.bf16_64x64x64
            fn.restype = ctypes.c_double
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
            sec = fn(ab.data_ptr(), bb.data_ptr(), c.data_ptr(), n, args.reps)
            ref_bf = torch_gflops(n, torch.bfloat16, args.reps)
            gf = 2 * n**3 / sec / 1e9
            print(
                f"tile bf16    64x64x64:        {gf:7.1f} GFLOPS  (fp32 accumulate; torch bf16 matmul: {ref_bf:.1f})"
            )


if __name__ == "__main__":
    main()
