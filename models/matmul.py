"""Tiled matmul C = A @ B with fp32 accumulation: one task per [tm, tn] block of C, looping
over K in [tm, tk] x [tk, tn] tiles. Inputs are f32 or bf16; C is f32. Sizes that are not
multiples of the tile (``build_ragged``) run as the same one kernel: the blocks at the edges are
ragged (``valid=`` counts that the orchestration passes as scalars).

    python models/matmul.py -p sim                      # f32 inputs, 256 x 256 x 256
    python models/matmul.py -p sim --dtype bf16         # bf16 inputs
    python models/matmul.py -p sim --size 200 136 100   # M, N, K not multiples of the 64 tile
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

DTYPES = {"f32": (ts.f32, torch.float32), "bf16": (ts.bf16, torch.bfloat16)}


def build(
    m: int = 256, n: int = 256, k: int = 256, dtype: str = "f32", tm: int = 64, tn: int = 64, tk: int = 64
):
    """The matmul program for [m, k] @ [k, n] inputs of ``dtype`` (f32 or bf16)."""
    dt = DTYPES[dtype][0]

    @ts.kernel
    def matmul_block(
        a: ts.Tensor[[tm, k], dt],
        b: ts.Tensor[[k, tn], dt],
        c: ts.Out[[tm, tn], ts.f32],
    ):
        acc = ts.zeros([tm, tn], ts.f32)
        for kk in ts.range(0, k, tk):
            acc = acc + ts.matmul(ts.load(a, [0, kk], [tm, tk]), ts.load(b, [kk, 0], [tk, tn]))
        ts.store(c, [0, 0], acc)

    @ts.jit
    def matmul(a: ts.Tensor[[m, k], dt], b: ts.Tensor[[k, n], dt], c: ts.Out[[m, n], ts.f32]):
        for i in ts.range(0, m, tm):
            for j in ts.range(0, n, tn):
                matmul_block(a[i : i + tm, :], b[:, j : j + tn], c[i : i + tm, j : j + tn])

    return matmul


def build_ragged(
    m: int = 200, n: int = 136, k: int = 100, dtype: str = "f32", tm: int = 64, tn: int = 64, tk: int = 64
):
    """The matmul program for any [m, k] @ [k, n], one kernel for every block of C.

    A task's regions have the kernel's static shapes and lie inside their tensors, so the block at
    the bottom (right) edge gets the window of tm rows (tn columns) that ends at the tensor's end,
    overlapping its neighbour's; the orchestration tells the kernel where the block's own rows and
    columns start in that window (r0, c0) and how many there are (rows, cols), and the kernel's
    loads and store touch only those (``valid=``). C is InOut in the kernel: a task writes only
    its block of the window, and the overlapping tasks are ordered by their regions. The last
    chunk of K is ragged too: its loads fill A's columns (B's rows) past K with zeros, which add
    nothing to the sum.
    """
    dt = DTYPES[dtype][0]
    tm, tn, tk = min(tm, m), min(tn, n), min(tk, k)  # a tensor smaller than a tile is one block

    @ts.kernel
    def matmul_block(
        a: ts.Tensor[[tm, k], dt],
        b: ts.Tensor[[k, tn], dt],
        c: ts.InOut[[tm, tn], ts.f32],
        r0: ts.Scalar[ts.i32],
        c0: ts.Scalar[ts.i32],
        rows: ts.Scalar[ts.i32],
        cols: ts.Scalar[ts.i32],
    ):
        acc = ts.zeros([tm, tn], ts.f32)
        for kk in ts.range(0, k, tk):
            kc = min(k - kk, tk)  # the last chunk of K may be short
            ta = ts.load(a, [r0, kk], [tm, tk], valid=(rows, kc))
            tb = ts.load(b, [kk, c0], [tk, tn], valid=(kc, cols))
            acc = acc + ts.matmul(ta, tb)
        ts.store(c, [r0, c0], acc, valid=(rows, cols))

    @ts.jit
    def matmul_ragged(a: ts.Tensor[[m, k], dt], b: ts.Tensor[[k, n], dt], c: ts.Out[[m, n], ts.f32]):
        for i in ts.range(0, m, tm):
            si = min(i, m - tm)  # the window of tm rows holding rows i.. of C: the last one ends at m
            for j in ts.range(0, n, tn):
                sj = min(j, n - tn)
                matmul_block(
                    a[si : si + tm, :],
                    b[:, sj : sj + tn],
                    c[si : si + tm, sj : sj + tn],
                    i - si,
                    j - sj,
                    min(tm, m - i),
                    min(tn, n - j),
                )

    return matmul_ragged


def golden(t: dict) -> None:
    t["c"][:] = t["a"].float() @ t["b"].float()


def specs(m: int = 256, n: int = 256, k: int = 256, dtype: str = "f32") -> list:
    tdt = DTYPES[dtype][1]
    return [
        TensorSpec("a", [m, k], tdt, init_value=torch.randn),
        TensorSpec("b", [k, n], tdt, init_value=torch.randn),
        TensorSpec("c", [m, n], torch.float32, is_output=True),
    ]


matmul = build()
matmul_bf16 = build(dtype="bf16")
matmul_ragged = build_ragged()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="input dtype (default: f32)")
    parser.add_argument(
        "--size", nargs=3, type=int, metavar=("M", "N", "K"), default=(256, 256, 256),
        help="[M, K] @ [K, N] (default: 256 256 256); sizes that are not multiples of the 64 tile "
        "run the ragged-edge program",
    )  # fmt: skip
    add_harness_args(parser)
    args = parser.parse_args(argv)
    m, n, k = args.size
    if min(args.size) < 1:
        parser.error(f"--size takes positive sizes, got {m} {n} {k}")
    ragged = any(d % 64 for d in args.size)
    fn = (build_ragged if ragged else build)(m, n, k, dtype=args.dtype)
    result = run_jit(
        fn, specs(m, n, k, dtype=args.dtype), golden_fn=golden, rtol=1e-4, atol=1e-3, **harness_kwargs(args)
    )
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
