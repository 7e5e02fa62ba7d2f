"""Tiled matmul C = A @ B with fp32 accumulation: one task per [tm, tn] block of C, looping
over K in [tm, tk] x [tk, tn] tiles. Inputs are f32 or bf16; C is f32.

    python models/matmul.py -p sim                 # f32 inputs
    python models/matmul.py -p sim --dtype bf16    # bf16 inputs
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="input dtype (default: f32)")
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn = matmul if args.dtype == "f32" else matmul_bf16
    result = run_jit(
        fn, specs(dtype=args.dtype), golden_fn=golden, rtol=1e-4, atol=1e-3, **harness_kwargs(args)
    )
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
