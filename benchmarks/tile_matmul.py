"""Single-thread speed of the tile library's matmul (f32, bf16, int8) vs torch, per instruction set.

The C++ side is what a generated kernel does: for every TM x TN output tile, zero an
accumulator, loop over K in TK steps loading an a tile and a b tile from the big row-major
matrices, `matmul_acc` them, and store the result. Built with the kernel flags, once per
instruction-set path (`--isa`): `native` (-march=native: AMX for int8 where the CPU has it),
`avx512-vnni` (AVX-512 with VNNI, no AMX), `avx512` (no VNNI), `avx2-vnni`
(AVX2 + AVX-VNNI), `avx2` (AVX2 + FMA, no VNNI), `sse2` (no AVX). A path whose instructions the
CPU lacks is skipped. `--include DIR` adds another copy of the tile headers (e.g. a previous
version) built and timed alternately with this one, for before/after figures from one run.

bf16 is timed twice: `matmul_acc` (the default) and `matmul_acc_dot` (compile option
bf16_matmul="dot", the bf16 dot-product instruction where the CPU has it), whose bits are
compared with the first's. References (torch.set_num_threads(1)): f32 `a @ b`; bf16 both `a @ b` in bf16 and the upcast
`a.float() @ b.float()` (the same result as the tile library's fp32 accumulation), the faster
of the two is the ratio's base; int8 `torch._int_mm(a, b)` (int32; the result is checked against float64, which is exact here). For each path and tile
the tile matmuls and torch's take turns (`run_all.turns`, one whole matmul per call), so a ratio
compares calls made in the same seconds on a machine whose speed drifts. Every ratio is
torch time / tile time (> 1: the tile library is faster); int8's `i8_vs_f32` is the tile f32 time
over the tile int8 time at the same tiles.

    python benchmarks/tile_matmul.py [--n 1024] [--tiles 64x64x64,128x128x32] [--isa native,avx2]
                                     [--reps 5] [--include DIR] [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch
from run_all import turns

from tilescope.toolchain.compiler import BASE_FLAGS, march_flag

INCLUDE = Path(__file__).resolve().parents[1] / "src" / "tilescope" / "runtime" / "include"
FLAGS = [*BASE_FLAGS, march_flag()]
# Extra flags per instruction-set path (after -march=native), and the /proc/cpuinfo flags it needs.
# the lower paths are AMX's fallbacks (a g++ older than 11 knows no AMX, and no such flag)
_KNOWS_AMX = subprocess.run(["g++", "-mno-amx-tile", "-E", "-x", "c++", "/dev/null"], capture_output=True).returncode == 0
NO_AMX = ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"] if _KNOWS_AMX else []
ISAS = {
    "native": ([], []),
    "avx512-vnni": (NO_AMX, ["avx512f", "avx512bw", "avx512_vnni"]),
    "avx512": (["-mno-avx512vnni", "-mno-avxvnni", "-mno-avx512bf16", *NO_AMX], ["avx512f", "avx512bw"]),
    "avx2-vnni": (["-mno-avx512f", *NO_AMX], ["avx2", "fma", "avx_vnni"]),
    "avx2": (["-mno-avx512f", "-mno-avxvnni", *NO_AMX], ["avx2", "fma"]),
    "sse2": (["-mno-avx", *NO_AMX], []),
}

DRIVER = r"""
#include <tilescope/tile.hpp>
using namespace ts;

// The accumulator (and output) type: int32 for int8 inputs, float otherwise.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, int8_t>, int32_t, float>;

// DOT: bf16 through matmul_acc_dot (the compile option bf16_matmul="dot").
template <class T, int TM, int TN, int TK, bool DOT = false>
static void tiled(const TensorView<T> &a, const TensorView<T> &b, const TensorView<acc_t<T>> &c, int64_t n) {
    for (int64_t i = 0; i < n; i += TM) {
        for (int64_t j = 0; j < n; j += TN) {
            Tile<acc_t<T>, TM, TN> acc = zeros<acc_t<T>, TM, TN>();
            for (int64_t k = 0; k < n; k += TK) {
                if constexpr (DOT)
                    matmul_acc_dot(acc, load<TM, TK>(a, {i, k}), load<TK, TN>(b, {k, j}));
                else
                    matmul_acc(acc, load<TM, TK>(a, {i, k}), load<TK, TN>(b, {k, j}));
            }
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

// One tiled matmul of the n x n row-major matrices at a, b into c (timed by the caller).
template <class T, int TM, int TN, int TK, bool DOT = false>
static void once(void *a, void *b, void *c, int64_t n) {
    const TensorView<T> av(square(a, dtype_of<T>(), n)), bv(square(b, dtype_of<T>(), n));
    const TensorView<acc_t<T>> cv(square(c, dtype_of<acc_t<T>>(), n));
    tiled<T, TM, TN, TK, DOT>(av, bv, cv, n);
}

#define ENTRY(T, NAME, TM, TN, TK, DOT) \
    extern "C" void NAME##_##TM##x##TN##x##TK(void *a, void *b, void *c, int64_t n) { once<T, TM, TN, TK, DOT>(a, b, c, n); }
#define TILE(TM, TN, TK) \
    ENTRY(float, f32, TM, TN, TK, false) ENTRY(bf16, bf16, TM, TN, TK, false) \
    ENTRY(bf16, bf16dot, TM, TN, TK, true) ENTRY(int8_t, i8, TM, TN, TK, false)
TILE(64, 64, 64)
TILE(32, 64, 128)
TILE(128, 128, 32)
TILE(64, 128, 64)
TILE(128, 64, 64)
"""

TILES = ["64x64x64", "32x64x128", "128x128x32", "64x128x64", "128x64x64"]


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def build(work: Path, include: Path, isa: str) -> ctypes.CDLL:
    """The driver built against ``include`` with the ``isa`` path's flags."""
    src = work / "tile_matmul_driver.cpp"
    src.write_text(DRIVER)
    out = work / f"tile_matmul_{isa}_{abs(hash(str(include)))}.so"
    subprocess.run(["g++", *FLAGS, *ISAS[isa][0], "-I", str(include), str(src), "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    for tile in TILES:
        for kind in ("f32", "bf16", "bf16dot", "i8"):
            fn = getattr(lib, f"{kind}_{tile}")
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def operands(n: int) -> dict:
    """The n x n inputs of every timed matmul (f32, bf16, int8) and their outputs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return {
        "a": a, "b": b, "ab": a.bfloat16(), "bb": b.bfloat16(),
        "ai": torch.randint(-128, 128, (n, n), dtype=torch.int8),
        "bi": torch.randint(-128, 128, (n, n), dtype=torch.int8),
        "c": torch.empty(n, n), "ci": torch.empty(n, n, dtype=torch.int32),
    }  # fmt: skip


def torch_calls(x: dict) -> dict:
    """torch's ways to each result (1 thread), as calls for run_all.turns."""
    return {
        "torch_f32": lambda: x["a"] @ x["b"],
        "torch_bf16": lambda: x["ab"] @ x["bb"],
        "torch_bf16_upcast": lambda: x["ab"].float() @ x["bb"].float(),
        "torch_i8": lambda: torch._int_mm(x["ai"], x["bi"]),
    }


def tile_calls(lib: ctypes.CDLL, tile: str, x: dict) -> dict:
    """The tile library's f32, bf16 (exact order and dot) and int8 matmuls at ``tile``, one whole
    n x n matmul per call, as calls for run_all.turns."""
    n = x["a"].shape[0]

    def call(kind: str, a: str, b: str, c: str):
        fn = getattr(lib, f"{kind}_{tile}")
        return lambda: fn(x[a].data_ptr(), x[b].data_ptr(), x[c].data_ptr(), n)

    return {
        "f32": call("f32", "a", "b", "c"),
        "bf16": call("bf16", "ab", "bb", "c"),
        "bf16dot": call("bf16dot", "ab", "bb", "c"),
        "i8": call("i8", "ai", "bi", "ci"),
    }


def tile_checks(calls: dict, x: dict) -> dict:
    """Each tile matmul's result against float64 (its largest error) or against the others."""
    calls["f32"]()
    out = {"f32_err": float((x["c"].double() - x["a"].double() @ x["b"].double()).abs().max())}
    calls["bf16"]()
    out["bf16_err"] = float((x["c"].double() - x["ab"].double() @ x["bb"].double()).abs().max())
    exact = x["c"].clone()
    calls["bf16dot"]()
    out["bf16dot_same_bits"] = bool(torch.equal(x["c"], exact))
    calls["i8"]()
    # NOTE: against float64 (every product and sum is an integer below 2^53: exact), not torch._int_mm,
    # which saturates int16 sums on a CPU without VNNI (oneDNN's u8 x s8 pairs)
    out["i8_exact"] = bool(torch.equal(x["ci"], (x["ai"].double() @ x["bi"].double()).to(torch.int32)))
    return out


def measure(n: int = 1024, tiles=("64x64x64",), isas=("native",), reps: int = 5, includes=()) -> dict:
    """Tile vs torch matmul timings: {"n", "torch": {...}, "runs": [{"include", "isa", "tile",
    seconds and ratios}]}. Each run's tile matmuls and torch's take turns (run_all.turns, ``reps``
    rounds), so its ratios compare calls made in the same seconds; ``"torch"`` holds torch's
    medians over every run's turns. ``includes`` adds header directories timed alongside this one's."""
    torch.set_num_threads(1)
    have = cpu_flags()
    dirs = [INCLUDE, *(Path(d) for d in includes)]
    x = operands(n)
    runs, torch_secs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        libs = {
            (str(d), isa): build(Path(tmp), d, isa)
            for isa in isas
            if all(f in have for f in ISAS[isa][1])
            for d in dirs
        }
        for tile in tiles:
            if any(n % int(d) for d in tile.split("x")):
                continue
            for (inc, isa), lib in libs.items():
                mine = tile_calls(lib, tile, x)
                checks = tile_checks(mine, x)
                timed = turns({**torch_calls(x), **mine}, reps, per=1)
                t = {key: statistics.median(got["steady"]) for key, got in timed.items()}
                for key in torch_calls(x):
                    torch_secs.setdefault(key.removeprefix("torch_"), []).extend(timed[key]["steady"])
                best_bf16 = min(t["torch_bf16"], t["torch_bf16_upcast"])
                runs.append({
                    "include": inc, "isa": isa, "tile": tile, **{k: t[k] for k in mine}, **checks,
                    "f32_gflops": 2 * n**3 / t["f32"] / 1e9,
                    "f32_vs_torch": t["torch_f32"] / t["f32"],
                    "bf16_vs_torch": best_bf16 / t["bf16"],
                    "bf16_vs_torch_bf16": t["torch_bf16"] / t["bf16"],
                    "bf16_vs_torch_upcast": t["torch_bf16_upcast"] / t["bf16"],
                    "bf16dot_vs_torch": best_bf16 / t["bf16dot"],
                    "bf16dot_vs_torch_bf16": t["torch_bf16"] / t["bf16dot"],
                    "i8_vs_torch": t["torch_i8"] / t["i8"],
                    "i8_vs_f32": t["f32"] / t["i8"],
                })  # fmt: skip
    if not torch_secs:  # no path this CPU has, or no tile dividing n: torch's figures alone
        timed = turns(torch_calls(x), reps, per=1)
        torch_secs = {key.removeprefix("torch_"): got["steady"] for key, got in timed.items()}
    ref = {key: statistics.median(secs) for key, secs in torch_secs.items()}
    return {"n": n, "torch": ref, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tiles", default="64x64x64", help=f"comma-separated, of {','.join(TILES)}")
    parser.add_argument("--isa", default="native,avx2", help=f"comma-separated, of {','.join(ISAS)}")
    parser.add_argument("--include", action="append", default=[], help="another tile header directory")
    parser.add_argument("--json", action="store_true", help="print the measure() dict as JSON")
    args = parser.parse_args()
    for name, known in (("--tiles", TILES), ("--isa", ISAS)):
        bad = [x for x in getattr(args, name[2:]).split(",") if x not in known]
        if bad:
            parser.error(f"{name}: unknown {', '.join(bad)}; expected some of {', '.join(known)}")
    res = measure(args.n, args.tiles.split(","), args.isa.split(","), args.reps, args.include)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    ref = res["torch"]
    print(
        f"torch 1 thread, n={res['n']}: f32 {ref['f32'] * 1e3:.2f} ms, bf16 {ref['bf16'] * 1e3:.2f} ms, "
        f"bf16 upcast {ref['bf16_upcast'] * 1e3:.2f} ms, int8 _int_mm {ref['i8'] * 1e3:.2f} ms"
    )
    for r in res["runs"]:
        print(
            f"{r['include']} {r['isa']:>9} {r['tile']:>10}: f32 {r['f32'] * 1e3:6.2f} ms (x{r['f32_vs_torch']:.2f} torch)"
            f"  bf16 {r['bf16'] * 1e3:6.2f} ms (x{r['bf16_vs_torch_bf16']:.2f} bf16, x{r['bf16_vs_torch_upcast']:.2f} upcast)"
            f"  bf16 dot {r['bf16dot'] * 1e3:6.2f} ms (x{r['bf16dot_vs_torch_bf16']:.2f} bf16"
            f"{'' if r['bf16dot_same_bits'] else ', other bits'})"
            f"  int8 {r['i8'] * 1e3:6.2f} ms (x{r['i8_vs_torch']:.2f} torch, x{r['i8_vs_f32']:.2f} f32"
            f"{'' if r['i8_exact'] else ', NOT EXACT'})"
        )


if __name__ == "__main__":
    main()
