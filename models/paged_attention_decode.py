"""Paged attention for decode (vLLM's layout, split-KV): one new query token per sequence
attends to that sequence's cached keys and values, which live in fixed-size blocks of a shared
cache named by a block table. Sequences have ragged lengths.

- The orchestration reads each sequence's length (``kv_lens[b]``) and the block ids it needs
  (``block_table[b, i]``) and slices the cache with them (``k_cache[blk, :, h, :]``).
- Split-KV: every partition of PART_BLOCKS blocks of one sequence and one KV head is a task.
  It scores the query heads sharing that KV head (grouped-query attention) against each
  block's valid rows (``valid=`` and an ``iota`` mask for the ragged last block) and keeps an
  unnormalized f32 partial output with its row max and sum (an online softmax).
- A combine task per sequence and KV head rescales the partials by their maxima and
  normalizes.

Default size: a batch of 8 sequences of 37 to 4000 tokens, LLaMA-3-8B's heads (32 query
heads sharing 8 KV heads of 128), 32-token blocks, 4 blocks per partition, bf16.

python models/paged_attention_decode.py -p sim      # or -p interp
"""

import argparse
import math

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

KV_LENS = (1000, 2100, 37, 512, 1536, 4000, 700, 2048)


def build(
    batch: int = 8,
    heads: int = 32,
    kv_heads: int = 8,
    dim: int = 128,
    block: int = 32,
    num_blocks: int = 512,
    max_blocks: int = 128,
    part_blocks: int = 4,
):
    """The program for q [batch, heads, dim] against a cache of ``num_blocks`` blocks of ``block``
    tokens ([num_blocks, block, kv_heads, dim]) and a [batch, max_blocks] block table."""
    group = heads // kv_heads
    part = block * part_blocks  # tokens per partition
    max_parts = max_blocks // part_blocks
    scale = 1.0 / math.sqrt(dim)

    @ts.inline
    def attend(qt, k, v, n, m, denom, acc):
        """One cache block (its first n rows valid) folded into the online softmax."""
        s = ts.matmul(qt, ts.load(k, [0, 0], [block, dim], valid=(n, dim)), transpose_b=True) * scale
        s = ts.where(ts.iota([1, block]) < n, s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        p = ts.exp(s - m_new)
        alpha = ts.exp(m - m_new)
        pv = ts.matmul(ts.cast(p, ts.bf16), ts.load(v, [0, 0], [block, dim], valid=(n, dim)))
        return [m_new, denom * alpha + ts.row_sum(p), acc * alpha + pv]

    @ts.kernel
    def attention_partition(
        q: ts.Tensor[[group, dim], ts.bf16],
        k0: ts.Tensor[[block, dim], ts.bf16],
        k1: ts.Tensor[[block, dim], ts.bf16],
        k2: ts.Tensor[[block, dim], ts.bf16],
        k3: ts.Tensor[[block, dim], ts.bf16],
        v0: ts.Tensor[[block, dim], ts.bf16],
        v1: ts.Tensor[[block, dim], ts.bf16],
        v2: ts.Tensor[[block, dim], ts.bf16],
        v3: ts.Tensor[[block, dim], ts.bf16],
        o: ts.Out[[group, dim], ts.f32],
        ml: ts.Out[[group, 2], ts.f32],
        n0: ts.Scalar[ts.i32],
        n1: ts.Scalar[ts.i32],
        n2: ts.Scalar[ts.i32],
        n3: ts.Scalar[ts.i32],
    ):
        qt = ts.load(q, [0, 0], [group, dim])
        m = ts.full([group, 1], float("-inf"), ts.f32)
        denom = ts.zeros([group, 1], ts.f32)
        acc = ts.zeros([group, dim], ts.f32)
        m, denom, acc = attend(qt, k0, v0, n0, m, denom, acc)  # n0 >= 1: a partition starts inside the sequence
        m, denom, acc = attend(qt, k1, v1, n1, m, denom, acc)
        m, denom, acc = attend(qt, k2, v2, n2, m, denom, acc)
        m, denom, acc = attend(qt, k3, v3, n3, m, denom, acc)
        ts.store(o, [0, 0], acc)
        ts.store(ml, [0, 0], m)
        ts.store(ml, [0, 1], denom)

    @ts.kernel
    def combine(
        po: ts.Tensor[[max_parts, group, dim], ts.f32],
        pml: ts.Tensor[[max_parts, group, 2], ts.f32],
        o: ts.Out[[group, dim], ts.bf16],
        parts: ts.Scalar[ts.i32],
    ):
        m = ts.full([group, 1], float("-inf"), ts.f32)
        for p in ts.range(0, parts):
            m = ts.maximum(m, ts.load(pml, [p, 0, 0], [1, group, 1]))
        denom = ts.zeros([group, 1], ts.f32)
        acc = ts.zeros([group, dim], ts.f32)
        for p in ts.range(0, parts):
            w = ts.exp(ts.load(pml, [p, 0, 0], [1, group, 1]) - m)
            denom = denom + w * ts.load(pml, [p, 0, 1], [1, group, 1])
            acc = acc + w * ts.load(po, [p, 0, 0], [1, group, dim])
        ts.store(o, [0, 0], ts.cast(acc / denom, ts.bf16))

    @ts.jit
    def paged_attention_decode(
        q: ts.Tensor[[batch, heads, dim], ts.bf16],
        k_cache: ts.Tensor[[num_blocks, block, kv_heads, dim], ts.bf16],
        v_cache: ts.Tensor[[num_blocks, block, kv_heads, dim], ts.bf16],
        block_table: ts.Tensor[[batch, max_blocks], ts.i32],
        kv_lens: ts.Tensor[[batch], ts.i32],
        o: ts.Out[[batch, heads, dim], ts.bf16],
    ):
        part_o = ts.create_tensor([batch * kv_heads, max_parts, group, dim], ts.f32)
        part_ml = ts.create_tensor([batch * kv_heads, max_parts, group, 2], ts.f32)
        for b in ts.range(0, batch):
            n = kv_lens[b]
            last = (n - 1) // block  # the sequence's last block
            parts = (n + part - 1) // part
            for p in ts.range(0, parts):
                t0 = p * part
                i = p * part_blocks
                b0 = block_table[b, i]
                b1 = block_table[b, min(i + 1, last)]  # past the sequence: any block, with 0 valid rows
                b2 = block_table[b, min(i + 2, last)]
                b3 = block_table[b, min(i + 3, last)]
                r0 = min(n - t0, block)
                r1 = min(max(n - t0 - block, 0), block)
                r2 = min(max(n - t0 - 2 * block, 0), block)
                r3 = min(max(n - t0 - 3 * block, 0), block)
                for h in ts.range(0, kv_heads):
                    attention_partition(
                        q[b, h * group : h * group + group, :],
                        k_cache[b0, :, h, :],
                        k_cache[b1, :, h, :],
                        k_cache[b2, :, h, :],
                        k_cache[b3, :, h, :],
                        v_cache[b0, :, h, :],
                        v_cache[b1, :, h, :],
                        v_cache[b2, :, h, :],
                        v_cache[b3, :, h, :],
                        part_o[b * kv_heads + h, p, :, :],
                        part_ml[b * kv_heads + h, p, :, :],
                        r0,
                        r1,
                        r2,
                        r3,
                    )
            for h in ts.range(0, kv_heads):
                combine(
                    part_o[b * kv_heads + h, :, :, :],
                    part_ml[b * kv_heads + h, :, :, :],
                    o[b, h * group : h * group + group, :],
                    parts,
                )

    return paged_attention_decode


def reference(q, k_cache, v_cache, block_table, kv_lens, **_) -> torch.Tensor:
    """The same attention in torch: each sequence's blocks gathered, grouped heads repeated,
    softmax in f32 (bf16 output)."""
    batch, heads, dim = q.shape
    block, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for b in range(batch):
        n = int(kv_lens[b])
        blocks = block_table[b, : (n + block - 1) // block].long()
        k = k_cache[blocks].reshape(-1, kv_heads, dim)[:n].float().repeat_interleave(heads // kv_heads, dim=1)
        v = v_cache[blocks].reshape(-1, kv_heads, dim)[:n].float().repeat_interleave(heads // kv_heads, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), k) / math.sqrt(dim)
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, dim=-1), v).to(q.dtype)
    return out


def golden(t: dict) -> None:
    t["o"][:] = reference(**t)


def _block_table(batch: int, max_blocks: int, num_blocks: int, block: int, kv_lens) -> torch.Tensor:
    """Each sequence's blocks, distinct and shuffled across the cache; unused entries are -1."""
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(1)).to(torch.int32)
    table = torch.full((batch, max_blocks), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(kv_lens):
        k = (n + block - 1) // block
        table[b, :k] = perm[used : used + k]
        used += k
    return table


def specs(
    batch: int = 8, heads: int = 32, kv_heads: int = 8, dim: int = 128, block: int = 32, num_blocks: int = 512,
    max_blocks: int = 128, kv_lens=KV_LENS,
) -> list:
    cache = [num_blocks, block, kv_heads, dim]
    return [
        TensorSpec("q", [batch, heads, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("k_cache", cache, torch.bfloat16, init_value=torch.randn),
        TensorSpec("v_cache", cache, torch.bfloat16, init_value=torch.randn),
        TensorSpec("block_table", [batch, max_blocks], torch.int32,
                   init_value=_block_table(batch, max_blocks, num_blocks, block, kv_lens)),
        TensorSpec("kv_lens", [batch], torch.int32, init_value=torch.tensor(kv_lens, dtype=torch.int32)),
        TensorSpec("o", [batch, heads, dim], torch.bfloat16, is_output=True),
    ]


paged_attention_decode = build()
PROGRAM, SIZE = paged_attention_decode, "8 sequences of 37..4000 tokens, 32 q / 8 kv heads x 128, bf16"


def eager(q, k_cache, v_cache, block_table, kv_lens, **_):
    """What torch code of this computation looks like: gather each sequence's blocks and call
    scaled_dot_product_attention (bf16), sequence by sequence."""
    batch, heads, dim = q.shape
    block, kv_heads = k_cache.shape[1], k_cache.shape[2]
    outs = []
    for b in range(batch):
        n = int(kv_lens[b])
        blocks = block_table[b, : (n + block - 1) // block].long()
        k = k_cache[blocks].reshape(-1, kv_heads, dim)[:n].transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v_cache[blocks].reshape(-1, kv_heads, dim)[:n].transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        outs.append(torch.nn.functional.scaled_dot_product_attention(q[b][:, None, :], k, v)[:, 0])
    return torch.stack(outs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(paged_attention_decode, specs(), golden_fn=golden, rtol=2e-2, atol=2e-2, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
