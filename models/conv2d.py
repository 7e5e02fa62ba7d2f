"""2-D convolution of NCHW f32 tensors, as torch.nn.functional.conv2d: padding, stride, dilation
and groups (groups=1, grouped, and depthwise with any channel multiplier).

Each task computes a block of output rows of one image (and of one group). For each output row
and each kernel tap (i, j) it reads the input window straight from x with a padded, strided
load: the [Cg, OW] tile whose element [c, o] is x[n, c, oh*sh - ph + i*dh, o*sw - pw + j*dw],
zero where that index falls in the padding. A grouped convolution multiplies it by the tap's
[Cout_g, Cg] weights and accumulates (a matmul per tap); a depthwise one (Cg = 1) takes every
channel at once, a [C, OW] tile scaled by a column of weights, and writes the outputs of each
channel multiplier with a strided store.

Configurations (--config): same (3x3, stride 1, padding 1), strided (stride 2, dilation 2),
grouped (4 groups), depthwise (groups = channels, multiplier 2).

    python models/conv2d.py -p sim                      # or -p interp
    python models/conv2d.py -p sim --config depthwise
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

CONFIGS = {
    "same": dict(n=2, c_in=16, h=32, w=32, c_out=32, k=3, stride=1, padding=1),
    "strided": dict(n=2, c_in=8, h=33, w=35, c_out=16, k=3, stride=2, padding=2, dilation=2),
    "grouped": dict(n=2, c_in=16, h=24, w=20, c_out=32, k=(3, 5), stride=1, padding=(1, 2), groups=4),
    "depthwise": dict(n=2, c_in=16, h=30, w=30, c_out=32, k=3, stride=(1, 2), padding=1, groups=16),
}


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def out_size(size: int, k: int, stride: int, padding: int, dilation: int) -> int:
    """torch's output length of a convolution along one dim."""
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _row_block(rows: int, target: int) -> int:
    """The largest divisor of ``rows`` not above ``target``: output rows per task."""
    return max(b for b in range(1, min(rows, target) + 1) if rows % b == 0)


def build(
    n: int = 2,
    c_in: int = 16,
    h: int = 32,
    w: int = 32,
    c_out: int = 32,
    k=3,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    block_rows: int = 8,
):
    """The conv2d program for x [n, c_in, h, w], weight [c_out, c_in // groups, kh, kw] and bias
    [c_out] (read as a column of the output tile), y [n, c_out, oh, ow]; ``k``, ``stride``, ``padding`` and
    ``dilation`` are an int or an (h, w) pair, as torch's. A task computes up to ``block_rows``
    output rows (the largest count that divides oh)."""
    kh, kw = _pair(k)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if c_in % groups or c_out % groups:
        raise ValueError(f"groups={groups} must divide c_in={c_in} and c_out={c_out}")
    cg, cog = c_in // groups, c_out // groups
    oh, ow = out_size(h, kh, sh, ph, dh), out_size(w, kw, sw, pw, dw)
    bh = _row_block(oh, block_rows)
    depthwise = cg == 1  # groups == c_in: every channel at once, cog outputs per channel

    @ts.kernel
    def conv_rows(
        x: ts.Tensor[[cg, h, w], ts.f32],
        wt: ts.Tensor[[cog, cg, kh, kw], ts.f32],
        bias: ts.Tensor[[cog], ts.f32],
        y: ts.Out[[cog, bh, ow], ts.f32],
        oh0: ts.Scalar[ts.i32],
    ):
        b = ts.load(bias, [0], [cog], dims=[0, None])  # bias[:, None]
        for r in ts.range(0, bh):
            ih = (oh0 + r) * sh - ph
            acc = ts.zeros([cog, ow], ts.f32)
            for i in ts.range(0, kh):
                for j in ts.range(0, kw):
                    win = ts.load(
                        x,
                        [0, ih + i * dh, j * dw - pw],
                        [cg, 1, ow],
                        dims=[0, 2],
                        strides=[1, 1, sw],
                        pad=0.0,
                    )
                    acc = acc + ts.matmul(ts.load(wt, [0, 0, i, j], [cog, cg, 1, 1], dims=[0, 1]), win)
            ts.store(y, [0, r, 0], acc + b, dims=[0, 2])

    @ts.kernel
    def depthwise_rows(
        x: ts.Tensor[[c_in, h, w], ts.f32],
        wt: ts.Tensor[[c_out, 1, kh, kw], ts.f32],
        bias: ts.Tensor[[c_out], ts.f32],
        y: ts.Out[[c_out, bh, ow], ts.f32],
        oh0: ts.Scalar[ts.i32],
    ):
        for m in ts.range(0, cog):  # output channel c * cog + m reads input channel c
            b = ts.load(bias, [m], [c_in], dims=[0, None], strides=[cog])  # bias[m::cog, None]
            for r in ts.range(0, bh):
                ih = (oh0 + r) * sh - ph
                acc = ts.zeros([c_in, ow], ts.f32)
                for i in ts.range(0, kh):
                    for j in ts.range(0, kw):
                        win = ts.load(
                            x,
                            [0, ih + i * dh, j * dw - pw],
                            [c_in, 1, ow],
                            dims=[0, 2],
                            strides=[1, 1, sw],
                            pad=0.0,
                        )
                        tap = ts.load(wt, [m, 0, i, j], [c_in, 1, 1, 1], dims=[0, 1], strides=[cog, 1, 1, 1])
                        acc = acc + win * tap
                ts.store(y, [m, r, 0], acc + b, dims=[0, 2], strides=[cog, 1, 1])

    @ts.jit
    def conv2d(
        x: ts.Tensor[[n, c_in, h, w], ts.f32],
        weight: ts.Tensor[[c_out, cg, kh, kw], ts.f32],
        bias: ts.Tensor[[c_out], ts.f32],
        y: ts.Out[[n, c_out, oh, ow], ts.f32],
    ):
        for b in ts.range(0, n):
            for r in ts.range(0, oh, bh):
                if depthwise:
                    depthwise_rows(x[b, :, :, :], weight, bias, y[b, :, r : r + bh, :], r)
                else:
                    for g in ts.range(0, groups):
                        conv_rows(
                            x[b, g * cg : g * cg + cg, :, :],
                            weight[g * cog : g * cog + cog, :, :, :],
                            bias[g * cog : g * cog + cog],
                            y[b, g * cog : g * cog + cog, r : r + bh, :],
                            r,
                        )

    return conv2d


def golden_for(stride=1, padding=0, dilation=1, groups: int = 1):
    """The golden of a build() with these arguments: torch's conv2d."""

    def golden(t: dict) -> None:
        t["y"][:] = torch.nn.functional.conv2d(
            t["x"],
            t["weight"],
            t["bias"],
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )

    return golden


def specs(
    n: int = 2,
    c_in: int = 16,
    h: int = 32,
    w: int = 32,
    c_out: int = 32,
    k=3,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> list:
    kh, kw = _pair(k)
    oh = out_size(h, kh, _pair(stride)[0], _pair(padding)[0], _pair(dilation)[0])
    ow = out_size(w, kw, _pair(stride)[1], _pair(padding)[1], _pair(dilation)[1])
    return [
        TensorSpec("x", [n, c_in, h, w], torch.float32, init_value=torch.randn),
        TensorSpec("weight", [c_out, c_in // groups, kh, kw], torch.float32, init_value=torch.randn),
        TensorSpec("bias", [c_out], torch.float32, init_value=torch.randn),
        TensorSpec("y", [n, c_out, oh, ow], torch.float32, is_output=True),
    ]


def case(config: str):
    """(program, specs, golden) of a named configuration (CONFIGS)."""
    cfg = CONFIGS[config]
    conv = {key: cfg[key] for key in ("stride", "padding", "dilation", "groups") if key in cfg}
    return build(**cfg), specs(**cfg), golden_for(**conv)


TOLERANCE = (1e-5, 1e-4)  # rtol, atol: sums of up to 9 * 16 products of N(0, 1) numbers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default="same", help="which convolution (default: same)"
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn, spec, golden = case(args.config)
    rtol, atol = TOLERANCE
    result = run_jit(fn, spec, golden_fn=golden, rtol=rtol, atol=atol, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
