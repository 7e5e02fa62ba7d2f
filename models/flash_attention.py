"""Causal flash attention (prefill) with grouped-query heads: for each query head and block of
queries, one task streams the key/value blocks up to the diagonal, keeps the running row max
and sum of an online softmax, and rescales its f32 accumulator (FlashAttention-2's loop).
The causal mask of the diagonal block is built with ts.iota; scores and the softmax are f32,
the two matmuls take bf16 tiles (q @ k^T with transpose_b, p @ v).

Default size: LLaMA-3-8B's attention shapes — 32 query heads sharing 8 key/value heads, head
dim 128 — over 512 tokens, bf16.

python models/flash_attention.py -p sim      # or -p interp
"""

import argparse
import math

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(seq: int = 512, heads: int = 32, kv_heads: int = 8, dim: int = 128, bq: int = 64, bk: int = 64):
    """The program for q [heads, seq, dim], k and v [kv_heads, seq, dim] (bf16), o like q."""
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(dim)

    @ts.kernel
    def attention_block(
        q: ts.Tensor[[bq, dim], ts.bf16],
        k: ts.Tensor[[seq, dim], ts.bf16],
        v: ts.Tensor[[seq, dim], ts.bf16],
        o: ts.Out[[bq, dim], ts.bf16],
        q0: ts.Scalar[ts.i32],
    ):
        qt = ts.load(q, [0, 0], [bq, dim])
        m = ts.full([bq, 1], float("-inf"), ts.f32)
        denom = ts.zeros([bq, 1], ts.f32)
        acc = ts.zeros([bq, dim], ts.f32)
        row = ts.iota([bq, 1], dim=0) + q0
        for j in ts.range(0, q0 + bq, bk):  # key blocks up to the diagonal
            s = ts.matmul(qt, ts.load(k, [j, 0], [bk, dim]), transpose_b=True) * scale
            s = ts.where(ts.iota([1, bk]) + j <= row, s, float("-inf"))
            m_new = ts.maximum(m, ts.row_max(s))
            p = ts.exp(s - m_new)
            alpha = ts.exp(m - m_new)
            denom = denom * alpha + ts.row_sum(p)
            acc = acc * alpha + ts.matmul(ts.cast(p, ts.bf16), ts.load(v, [j, 0], [bk, dim]))
            m = m_new
        ts.store(o, [0, 0], ts.cast(acc / denom, ts.bf16))

    @ts.jit
    def flash_attention(
        q: ts.Tensor[[heads, seq, dim], ts.bf16],
        k: ts.Tensor[[kv_heads, seq, dim], ts.bf16],
        v: ts.Tensor[[kv_heads, seq, dim], ts.bf16],
        o: ts.Out[[heads, seq, dim], ts.bf16],
    ):
        for h in ts.range(0, heads):
            for r in ts.range(0, seq, bq):
                kv = h // group
                attention_block(q[h, r : r + bq, :], k[kv, :, :], v[kv, :, :], o[h, r : r + bq, :], r)

    return flash_attention


def golden(t: dict) -> None:
    q, k, v = (t[n].float() for n in ("q", "k", "v"))
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    t["o"][:] = o.to(torch.bfloat16)


def specs(seq: int = 512, heads: int = 32, kv_heads: int = 8, dim: int = 128) -> list:
    return [
        TensorSpec("q", [heads, seq, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("k", [kv_heads, seq, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("v", [kv_heads, seq, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("o", [heads, seq, dim], torch.bfloat16, is_output=True),
    ]


flash_attention = build()
PROGRAM, SIZE = flash_attention, "causal, 32 q / 8 kv heads x 128, 512 tokens, bf16"


def eager(q, k, v, **_):
    """The torch code of this computation: scaled_dot_product_attention on bf16, heads repeated."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(flash_attention, specs(), golden_fn=golden, rtol=2e-2, atol=2e-2, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
