"""Rotary position embedding, half-split form (GPT-NeoX / LLaMA's rotate_half): each head's
vector x = [x1, x2] becomes [x1 cos - x2 sin, x2 cos + x1 sin], with cos/sin of the token's
position per frequency. One task per block of 32 tokens, which rotates each token's heads as
one [heads, dim] tile (the token's cos/sin row broadcast over its heads); the rotation is
computed in f32 from bf16 inputs and rounded to bf16 once.

Default size: 1024 tokens of a LLaMA-7B query projection (32 heads of 128), bf16, with the
cos/sin tables of rotary base 10000 (f32).

python models/rope.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(tokens: int = 1024, heads: int = 32, dim: int = 128, block: int = 32):
    """The rope program for an [tokens, heads, dim] bf16 input and [tokens, dim / 2] f32 tables."""
    half = dim // 2

    @ts.kernel
    def rope_block(
        x: ts.Tensor[[block, heads, dim], ts.bf16],
        cos: ts.Tensor[[block, half], ts.f32],
        sin: ts.Tensor[[block, half], ts.f32],
        y: ts.Out[[block, heads, dim], ts.bf16],
    ):
        for i in ts.range(0, block):
            t = ts.cast(ts.load(x, [i, 0, 0], [1, heads, dim]), ts.f32)
            x1 = t[:, 0:half]
            x2 = t[:, half:dim]
            c = ts.load(cos, [i, 0], [1, half])
            s = ts.load(sin, [i, 0], [1, half])
            ts.store(y, [i, 0, 0], ts.cast(x1 * c - x2 * s, ts.bf16))
            ts.store(y, [i, 0, half], ts.cast(x2 * c + x1 * s, ts.bf16))

    @ts.jit
    def rope(
        x: ts.Tensor[[tokens, heads, dim], ts.bf16],
        cos: ts.Tensor[[tokens, half], ts.f32],
        sin: ts.Tensor[[tokens, half], ts.f32],
        y: ts.Out[[tokens, heads, dim], ts.bf16],
    ):
        for t in ts.range(0, tokens, block):
            rope_block(x[t : t + block, :, :], cos[t : t + block, :], sin[t : t + block, :], y[t : t + block, :, :])

    return rope


def tables(tokens: int, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * base^(-2i/dim), [tokens, dim / 2] f32."""
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.arange(tokens, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def golden(t: dict) -> None:
    x = t["x"].float()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = t["cos"][:, None, :], t["sin"][:, None, :]
    t["y"][:] = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(torch.bfloat16)


def specs(tokens: int = 1024, heads: int = 32, dim: int = 128) -> list:
    cos, sin = tables(tokens, dim)
    return [
        TensorSpec("x", [tokens, heads, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("cos", [tokens, dim // 2], torch.float32, init_value=cos),
        TensorSpec("sin", [tokens, dim // 2], torch.float32, init_value=sin),
        TensorSpec("y", [tokens, heads, dim], torch.bfloat16, is_output=True),
    ]


rope = build()
PROGRAM, SIZE = rope, "1024 tokens x 32 heads x 128, bf16"


def eager(x, cos, sin, **_):
    """The torch code of this computation (LLaMA's rotate_half, in bf16 as the model runs it)."""
    half = x.shape[-1] // 2
    c = torch.cat([cos, cos], -1)[:, None, :].to(x.dtype)
    s = torch.cat([sin, sin], -1)[:, None, :].to(x.dtype)
    return x * c + torch.cat([-x[..., half:], x[..., :half]], -1) * s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(rope, specs(), golden_fn=golden, rtol=1e-2, atol=1e-2, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
