"""Group norm of an NCHW f32 input, as torch.nn.functional.group_norm with a per-channel weight
and bias: the C channels are split into ``groups`` groups of C/G channels, and each (sample,
group) is normalized by the mean and the biased variance of its C/G x H x W values.

One task per (sample, group). The kernel walks the group's channels one [H, W] tile at a time
(the region ``x[n, c, :, :]`` of the 4-D tensor, no host view): a first pass sums for the mean,
a second sums the squares of the centred values for the variance (so it does not cancel), in
f32, and a third normalizes and applies the channel's weight and bias.

Default size: [8, 64, 32, 32] f32, 16 groups (a ResNet-style stage).

python models/group_norm.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(n: int = 8, channels: int = 64, height: int = 32, width: int = 32, groups: int = 16):
    """The group-norm program for an [n, channels, height, width] f32 input split into ``groups``
    groups (``groups`` must divide ``channels``)."""
    if channels % groups:
        raise ValueError(f"groups ({groups}) must divide channels ({channels})")
    cg = channels // groups
    inv_count = 1.0 / (cg * height * width)

    @ts.kernel
    def group_norm_group(
        x: ts.Tensor[[1, cg, height, width], ts.f32],
        weight: ts.Tensor[[cg], ts.f32],
        bias: ts.Tensor[[cg], ts.f32],
        y: ts.Out[[1, cg, height, width], ts.f32],
        eps: ts.Scalar[ts.f32],
    ):
        total = ts.zeros([1, 1], ts.f32)
        for c in ts.range(0, cg):
            t = ts.load(x, [0, c, 0, 0], [1, 1, height, width])
            total = total + ts.row_sum(ts.col_sum(t))
        mean = total * inv_count
        sq = ts.zeros([1, 1], ts.f32)
        for c in ts.range(0, cg):
            d = ts.load(x, [0, c, 0, 0], [1, 1, height, width]) - mean
            sq = sq + ts.row_sum(ts.col_sum(d * d))
        inv = ts.rsqrt(sq * inv_count + eps)
        for c in ts.range(0, cg):
            d = ts.load(x, [0, c, 0, 0], [1, 1, height, width]) - mean
            w = ts.load(weight, [c], [1])
            b = ts.load(bias, [c], [1])
            ts.store(y, [0, c, 0, 0], d * inv * w + b)

    @ts.jit
    def group_norm(
        x: ts.Tensor[[n, channels, height, width], ts.f32],
        weight: ts.Tensor[[channels], ts.f32],
        bias: ts.Tensor[[channels], ts.f32],
        y: ts.Out[[n, channels, height, width], ts.f32],
        eps: ts.Scalar[ts.f32],
    ):
        for s in ts.range(0, n):
            for c in ts.range(0, channels, cg):
                group_norm_group(
                    x[s : s + 1, c : c + cg, :, :], weight[c : c + cg], bias[c : c + cg], y[s : s + 1, c : c + cg, :, :], eps
                )

    return group_norm


def specs(n: int = 8, channels: int = 64, height: int = 32, width: int = 32) -> list:
    return [
        TensorSpec("x", [n, channels, height, width], torch.float32,
                   init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 3 + 1),  # fmt: skip
        TensorSpec("weight", [channels], torch.float32, init_value=torch.rand),
        TensorSpec("bias", [channels], torch.float32, init_value=torch.randn),
        TensorSpec("y", [n, channels, height, width], torch.float32, is_output=True),
        ScalarSpec("eps", torch.float32, 1e-5),
    ]


def golden_for(groups: int):
    """The golden of a program built with ``groups`` groups."""

    def golden(t: dict) -> None:
        t["y"][:] = torch.nn.functional.group_norm(t["x"], groups, t["weight"], t["bias"], t["eps"])

    return golden


GROUPS = 16
TOLERANCE = (1e-5, 1e-5)
group_norm = build(groups=GROUPS)
golden = golden_for(GROUPS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(group_norm, specs(), golden_fn=golden, rtol=TOLERANCE[0], atol=TOLERANCE[1], **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
