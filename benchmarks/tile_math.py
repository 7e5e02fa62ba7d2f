"""Single-thread throughput (ns per element) of the tile library's float math vs torch's.

The C++ side is what a generated kernel does: load a 64 x 256 f32 tile of a 1-D tensor, apply
the op, store the result, for every tile of the tensor. Built with the kernel flags; torch runs
the same op on the whole tensor with torch.set_num_threads(1). pow's exponent is a tensor of the
same shape (tile ^ tile).

    python benchmarks/tile_math.py [--n 4194304] [--reps 5]
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from tilescope.toolchain.compiler import BASE_FLAGS, march_flag

INCLUDE = Path(__file__).resolve().parents[1] / "src" / "tilescope" / "runtime" / "include"

DRIVER = r"""
#include <tilescope/tile.hpp>
#include <chrono>
using namespace ts;

static ts_tensor vec(void *data, int64_t n) {
    ts_tensor t{};
    t.data = data;
    t.dtype = TS_F32;
    t.ndim = 2;
    t.shape[0] = n / 256;
    t.shape[1] = 256;
    t.strides[0] = 256;
    t.strides[1] = 1;
    return t;
}

// Applies f to every 64 x 256 tile of x (and y), `reps` times; returns the best time in seconds.
template <class F>
static double bench(void *x, void *y, void *out, int64_t n, int reps, F f) {
    const TensorView<float> xv(vec(x, n)), yv(vec(y, n)), ov(vec(out, n));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < n / 256; i += 64) store(ov, {i, 0}, f(load<64, 256>(xv, {i, 0}), load<64, 256>(yv, {i, 0})));
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = s < best ? s : best;
    }
    return best;
}

#define ENTRY(NAME, EXPR)                                                                      \
    extern "C" double bench_##NAME(void *x, void *y, void *out, int64_t n, int reps) {         \
        return bench(x, y, out, n, reps, [](const auto &a, const auto &b) { (void)b; return EXPR; }); \
    }
ENTRY(exp, exp(a))
ENTRY(exp2, exp2(a))
ENTRY(log2, log2(a))
ENTRY(erf, erf(a))
ENTRY(gelu, gelu(a))
ENTRY(gelu_tanh, gelu_tanh(a))
ENTRY(reciprocal, reciprocal(a))
ENTRY(pow, pow(a, b))
"""

TORCH = {
    "exp": lambda a, b: torch.exp(a),
    "exp2": lambda a, b: torch.exp2(a),
    "log2": lambda a, b: torch.log2(a),
    "erf": lambda a, b: torch.special.erf(a),
    "gelu": lambda a, b: torch.nn.functional.gelu(a),
    "gelu_tanh": lambda a, b: torch.nn.functional.gelu(a, approximate="tanh"),
    "reciprocal": lambda a, b: torch.reciprocal(a),
    "pow": lambda a, b: torch.pow(a, b),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1 << 22, help="elements (a multiple of 64 * 256)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.n
    x = torch.rand(n) * 8 + 0.01
    y = torch.randn(n) * 3
    out = torch.empty(n)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tile_math_driver.cpp"
        src.write_text(DRIVER)
        so = Path(tmp) / "tile_math_driver.so"
        subprocess.run(["g++", *BASE_FLAGS, march_flag(), "-I", str(INCLUDE), str(src), "-o", str(so)], check=True)
        lib = ctypes.CDLL(str(so))
        for name, fn in TORCH.items():
            c_fn = getattr(lib, f"bench_{name}")
            c_fn.restype = ctypes.c_double
            c_fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
            sec = c_fn(x.data_ptr(), y.data_ptr(), out.data_ptr(), n, args.reps)
            fn(x, y)
            best = 1e30
            for _ in range(args.reps):
                t0 = time.perf_counter()
                fn(x, y)
                best = min(best, time.perf_counter() - t0)
            print(f"{name:>10}: tile {1e9 * sec / n:6.2f} ns/element, torch {1e9 * best / n:6.2f} ns/element")


if __name__ == "__main__":
    main()
