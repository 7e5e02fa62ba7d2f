"""Transposed 2-D convolution of NCHW f32 tensors, as torch.nn.functional.conv_transpose2d:
stride, padding, output_padding and groups (dilation 1).

Output element y[n, co, oh, ow] sums x[n, ci, ih, iw] * w[ci, co, kh, kw] over the taps with
oh = ih*s - p + kh (and the same along w). Written as a gather, an output row oh = s*i + rh
takes the taps kh = (rh + p) mod s, + s, + 2s, ... each from input row ih = i + (rh + p - kh) / s,
and the outputs of one column phase rw (ow = s*j + rw) take the taps kw = (rw + p) mod s, ...
each from the input columns starting at (rw + p - kw) / s, one per output column. So each phase
(rh, rw) of an output row is a sum of [Cout, Cin] @ [Cin, OW/s] matmuls of input rows read with
padded loads (zero outside x), written into every s-th output column with a strided store.
A task computes s*block output rows of one image (and group).

Configurations (--config): k4 (4x4, stride 2, padding 1: the usual 2x upsampling),
k3 (3x3, stride 2, padding 1, output_padding 1, 2 groups).

    python models/conv_transpose2d.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

CONFIGS = {
    "k4": dict(n=2, c_in=16, h=16, w=16, c_out=8, k=4, stride=2, padding=1),
    "k3": dict(n=2, c_in=16, h=12, w=10, c_out=16, k=3, stride=2, padding=1, output_padding=1, groups=2),
}


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def out_size(size: int, k: int, stride: int, padding: int, output_padding: int) -> int:
    """torch's output length of a transposed convolution (dilation 1) along one dim."""
    return (size - 1) * stride - 2 * padding + k + output_padding


def build(
    n: int = 2,
    c_in: int = 16,
    h: int = 16,
    w: int = 16,
    c_out: int = 8,
    k=4,
    stride=2,
    padding=1,
    output_padding=0,
    groups: int = 1,
    block: int = 4,
):
    """The conv_transpose2d program for x [n, c_in, h, w], weight [c_in, c_out // groups, kh, kw]
    (torch's layout), bias [c_out] (read as a column of the output tile), y [n, c_out, oh, ow];
    ``k``, ``stride``, ``padding`` and ``output_padding`` are an int or an (h, w) pair. The output
    height and width must be multiples of the stride (each column phase is one [Cout, OW/s] tile).
    A task computes ``block`` * stride output rows (``block`` reduced until it divides oh / s)."""
    kh, kw = _pair(k)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    if c_in % groups or c_out % groups:
        raise ValueError(f"groups={groups} must divide c_in={c_in} and c_out={c_out}")
    cg, cog = c_in // groups, c_out // groups
    oh = out_size(h, kh, sh, ph, _pair(output_padding)[0])
    ow = out_size(w, kw, sw, pw, _pair(output_padding)[1])
    if oh % sh or ow % sw:
        raise ValueError(f"the output [{oh}, {ow}] must be a multiple of the stride [{sh}, {sw}]")
    ows = ow // sw  # the columns of one phase
    while (oh // sh) % block:
        block -= 1

    @ts.kernel
    def conv_t_rows(
        x: ts.Tensor[[cg, h, w], ts.f32],
        wt: ts.Tensor[[cg, cog, kh, kw], ts.f32],
        bias: ts.Tensor[[cog], ts.f32],
        y: ts.Out[[cog, block * sh, ow], ts.f32],
        i0: ts.Scalar[ts.i32],
    ):
        b = ts.load(bias, [0], [cog], dims=[0, None])  # bias[:, None]
        for i in ts.range(0, block):
            for rh in ts.range(0, sh):  # output row s*(i0 + i) + rh
                for rw in ts.range(0, sw):  # output columns rw, rw + s, ...
                    acc = ts.zeros([cog, ows], ts.f32)
                    for ki in ts.range((rh + ph) % sh, kh, sh):  # the kernel rows that reach row rh
                        ih = i0 + i + (rh + ph - ki) // sh
                        for kj in ts.range((rw + pw) % sw, kw, sw):
                            rows = ts.load(
                                x, [0, ih, (rw + pw - kj) // sw], [cg, 1, ows], dims=[0, 2], pad=0.0
                            )
                            tap = ts.load(wt, [0, 0, ki, kj], [cg, cog, 1, 1], dims=[0, 1])
                            acc = acc + ts.matmul(tap, rows, transpose_a=True)
                    ts.store(y, [0, i * sh + rh, rw], acc + b, dims=[0, 2], strides=[1, 1, sw])

    @ts.jit
    def conv_transpose2d(
        x: ts.Tensor[[n, c_in, h, w], ts.f32],
        weight: ts.Tensor[[c_in, cog, kh, kw], ts.f32],
        bias: ts.Tensor[[c_out], ts.f32],
        y: ts.Out[[n, c_out, oh, ow], ts.f32],
    ):
        for bt in ts.range(0, n):
            for g in ts.range(0, groups):
                for i in ts.range(0, oh // sh, block):
                    conv_t_rows(
                        x[bt, g * cg : g * cg + cg, :, :],
                        weight[g * cg : g * cg + cg, :, :, :],
                        bias[g * cog : g * cog + cog],
                        y[bt, g * cog : g * cog + cog, i * sh : i * sh + block * sh, :],
                        i,
                    )

    return conv_transpose2d


def golden_for(stride=2, padding=1, output_padding=0, groups: int = 1):
    """The golden of a build() with these arguments: torch's conv_transpose2d."""

    def golden(t: dict) -> None:
        t["y"][:] = torch.nn.functional.conv_transpose2d(
            t["x"],
            t["weight"],
            t["bias"],
            stride=stride,
            padding=padding,
            output_padding=output_padding,
            groups=groups,
        )

    return golden


def specs(
    n: int = 2,
    c_in: int = 16,
    h: int = 16,
    w: int = 16,
    c_out: int = 8,
    k=4,
    stride=2,
    padding=1,
    output_padding=0,
    groups: int = 1,
) -> list:
    kh, kw = _pair(k)
    (sh, sw), (ph, pw), (qh, qw) = _pair(stride), _pair(padding), _pair(output_padding)
    return [
        TensorSpec("x", [n, c_in, h, w], torch.float32, init_value=torch.randn),
        TensorSpec("weight", [c_in, c_out // groups, kh, kw], torch.float32, init_value=torch.randn),
        TensorSpec("bias", [c_out], torch.float32, init_value=torch.randn),
        TensorSpec(
            "y",
            [n, c_out, out_size(h, kh, sh, ph, qh), out_size(w, kw, sw, pw, qw)],
            torch.float32,
            is_output=True,
        ),
    ]


def case(config: str):
    """(program, specs, golden) of a named configuration (CONFIGS)."""
    cfg = CONFIGS[config]
    conv = {key: cfg[key] for key in ("stride", "padding", "output_padding", "groups") if key in cfg}
    return build(**cfg), specs(**cfg), golden_for(**conv)


TOLERANCE = (1e-5, 1e-4)  # rtol, atol: sums of up to 4 * 16 products of N(0, 1) numbers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default="k4", help="which convolution (default: k4)"
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn, spec, golden = case(args.config)
    rtol, atol = TOLERANCE
    result = run_jit(fn, spec, golden_fn=golden, rtol=rtol, atol=atol, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
