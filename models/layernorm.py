"""Layer norm over rows: y = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance, as
torch.nn.functional.layer_norm), one task per block of rows, which it takes a few rows at a time
(a step small enough to stay in the core's L1 while it is read three times). The mean and the
variance are taken in two passes (the variance from the centred values, so it does not cancel),
in f32 whatever the input dtype; a step's rows are read once when they fit a tile, else in
column chunks.

Default size: a [2048, 1024] f32 input (BERT-large's hidden size, 2048 tokens); --dtype bf16
reads and writes bf16.

python models/layernorm.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit

from row_tiling import step_rows, task_rows

DTYPES = {"f32": (ts.f32, torch.float32), "bf16": (ts.bf16, torch.bfloat16)}


def build(
    rows: int = 2048,
    cols: int = 1024,
    dtype: str = "f32",
    block: int | None = None,
    chunk: int | None = None,
    step: int | None = None,
):
    """The layernorm program for a [rows, cols] input of ``dtype`` (f32 or bf16); ``block`` rows
    per task (default: as many f32 rows as fit 512 KiB, but at least 16 tasks where there are
    rows for them, so a [2048, 1024] input is 16 tasks: few enough that a task's fixed cost is
    small, enough to keep the workers busy), taken ``step``
    rows at a time (default: as many as fit 16 KiB, the core's L1 with room to spare), ``chunk``
    columns at a time (default: the whole row, read once; a smaller chunk reads the row three
    times)."""
    block = block or task_rows(rows, cols)
    step = step or step_rows(block, cols)
    if block % step:
        raise ValueError(f"layernorm: step ({step} rows) must divide block ({block} rows)")
    chunk = chunk or cols
    dt = DTYPES[dtype][0]

    @ts.kernel
    def layernorm_rows(
        x: ts.Tensor[[block, cols], dt],
        gamma: ts.Tensor[[1, cols], ts.f32],
        beta: ts.Tensor[[1, cols], ts.f32],
        y: ts.Out[[block, cols], dt],
        eps: ts.Scalar[ts.f32],
    ):
        for s in ts.range(0, block, step):
            if chunk == cols and dtype == "f32":  # one f32 tile, read once; no casts: one fused output loop
                t = ts.load(x, [s, 0], [step, cols])
                d = t - ts.row_mean(t)
                inv = ts.rsqrt(ts.row_mean(d * d) + eps)
                ts.store(y, [s, 0], d * inv * ts.load(gamma, [0, 0], [1, cols]) + ts.load(beta, [0, 0], [1, cols]))
            elif chunk == cols:  # the step's rows fit one tile: read them once
                t = ts.cast(ts.load(x, [s, 0], [step, cols]), ts.f32)
                d = t - ts.row_mean(t)
                inv = ts.rsqrt(ts.row_mean(d * d) + eps)
                g = ts.load(gamma, [0, 0], [1, cols])
                ts.store(y, [s, 0], ts.cast(d * inv * g + ts.load(beta, [0, 0], [1, cols]), dt))
            else:  # column chunks: the rows are read three times
                total = ts.zeros([step, 1], ts.f32)
                for h in ts.range(0, cols, chunk):
                    total = total + ts.row_sum(ts.cast(ts.load(x, [s, h], [step, chunk]), ts.f32))
                mean = total * (1.0 / cols)
                sq = ts.zeros([step, 1], ts.f32)
                for h in ts.range(0, cols, chunk):
                    d = ts.cast(ts.load(x, [s, h], [step, chunk]), ts.f32) - mean
                    sq = sq + ts.row_sum(d * d)
                inv = ts.rsqrt(sq * (1.0 / cols) + eps)
                for h in ts.range(0, cols, chunk):
                    d = ts.cast(ts.load(x, [s, h], [step, chunk]), ts.f32) - mean
                    g = ts.load(gamma, [0, h], [1, chunk])
                    b = ts.load(beta, [0, h], [1, chunk])
                    ts.store(y, [s, h], ts.cast(d * inv * g + b, dt))

    @ts.jit
    def layernorm(
        x: ts.Tensor[[rows, cols], dt],
        gamma: ts.Tensor[[1, cols], ts.f32],
        beta: ts.Tensor[[1, cols], ts.f32],
        y: ts.Out[[rows, cols], dt],
        eps: ts.Scalar[ts.f32],
    ):
        for r in ts.range(0, rows, block):
            layernorm_rows(x[r : r + block, :], gamma, beta, y[r : r + block, :], eps)

    return layernorm


def golden(t: dict) -> None:
    x = t["x"].float()
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], t["gamma"][0], t["beta"][0], t["eps"])
    t["y"][:] = y.to(t["y"].dtype)


def specs(rows: int = 2048, cols: int = 1024, dtype: str = "f32") -> list:
    tdt = DTYPES[dtype][1]
    return [
        TensorSpec("x", [rows, cols], tdt, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 3 + 1),
        TensorSpec("gamma", [1, cols], torch.float32, init_value=torch.rand),
        TensorSpec("beta", [1, cols], torch.float32, init_value=torch.randn),
        TensorSpec("y", [rows, cols], tdt, is_output=True),
        ScalarSpec("eps", torch.float32, 1e-5),
    ]


TOLERANCE = {"f32": (1e-5, 1e-5), "bf16": (1.6e-2, 2e-2)}
layernorm = build()
layernorm_bf16 = build(dtype="bf16")
PROGRAM, SIZE = layernorm, "[2048, 1024] f32"


def eager(x, gamma, beta, eps, **_):
    """The torch code of this computation (what benchmarks/models.py times against)."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma[0], beta[0], eps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="input/output dtype (default: f32)")
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn = layernorm if args.dtype == "f32" else layernorm_bf16
    rtol, atol = TOLERANCE[args.dtype]
    result = run_jit(fn, specs(dtype=args.dtype), golden_fn=golden, rtol=rtol, atol=atol, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
