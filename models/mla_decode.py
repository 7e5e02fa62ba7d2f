"""DeepSeek-style multi-head latent attention (MLA) for decode, with absorbed projections: the
cache holds one compressed latent vector per token (kv_lora_rank 512, shared by all heads) and
one rotary key (64), instead of per-head keys and values.

- Absorb: each head's no-rope query is moved into the latent space, q_lat[h] = q_nope[h] @ W_UK[h]
  (one task per head, all sequences at once), so scores are q_lat . c_kv + q_pe . k_pe.
- Attention, split-KV: the orchestration reads each sequence's length and submits one task per
  256-token split; it scores all 16 heads against the split's latent rows in 64-token blocks
  (a ragged tail through valid=) with an online softmax, keeping an f32 partial in latent space.
- Combine per sequence: partials rescaled by their maxima and normalized.
- Up-projection: out[h] = o_lat[h] @ W_UV[h] (one task per head).

The golden computes the same attention the unabsorbed way (per-head keys and values expanded
from the latent cache), so it also checks the absorption.

Default size: DeepSeek-V2-Lite's attention (16 heads, latent 512, rope 64, head dim 128), a batch
of 4 sequences of 37 to 2100 cached tokens, bf16.

python models/mla_decode.py -p sim      # or -p interp
"""

import argparse
import math

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

KV_LENS = (1000, 2100, 37, 512)


def build(batch: int = 4, heads: int = 16, rank: int = 512, rope: int = 64, dim: int = 128, max_len: int = 2304,
          split: int = 256, blk: int = 64):
    """The program for one decode step of ``batch`` sequences over a latent cache of ``max_len`` tokens."""
    splits = max_len // split
    scale = 1.0 / math.sqrt(dim + rope)

    @ts.kernel
    def absorb(q_nope: ts.Tensor[[batch, dim], ts.bf16], w_uk: ts.Tensor[[dim, rank], ts.bf16],
               q_lat: ts.Out[[batch, rank], ts.bf16]):
        for c in ts.range(0, rank, 128):
            q = ts.matmul(ts.load(q_nope, [0, 0], [batch, dim]), ts.load(w_uk, [0, c], [dim, 128]))
            ts.store(q_lat, [0, c], ts.cast(q, ts.bf16))

    @ts.kernel
    def attention_split(
        q_lat: ts.Tensor[[heads, rank], ts.bf16],
        q_pe: ts.Tensor[[heads, rope], ts.bf16],
        ckv: ts.Tensor[[split, rank], ts.bf16],
        kpe: ts.Tensor[[split, rope], ts.bf16],
        o: ts.Out[[heads, rank], ts.f32],
        ml: ts.Out[[heads, 2], ts.f32],
        n: ts.Scalar[ts.i32],
    ):
        ql = ts.load(q_lat, [0, 0], [heads, rank])
        qp = ts.load(q_pe, [0, 0], [heads, rope])
        m = ts.full([heads, 1], float("-inf"), ts.f32)
        denom = ts.zeros([heads, 1], ts.f32)
        acc = ts.zeros([heads, rank], ts.f32)
        for j in ts.range(0, n, blk):
            rows = min(n - j, blk)
            c = ts.load(ckv, [j, 0], [blk, rank], valid=(rows, rank))
            s = ts.matmul(ql, c, transpose_b=True)
            s = ts.matmul(qp, ts.load(kpe, [j, 0], [blk, rope], valid=(rows, rope)), acc=s, transpose_b=True)
            s = ts.where(ts.iota([1, blk]) < rows, s * scale, float("-inf"))
            m_new = ts.maximum(m, ts.row_max(s))
            p = ts.exp(s - m_new)
            alpha = ts.exp(m - m_new)
            denom = denom * alpha + ts.row_sum(p)
            acc = ts.matmul(ts.cast(p, ts.bf16), c, acc=acc * alpha)
            m = m_new
        ts.store(o, [0, 0], acc)
        ts.store(ml, [0, 0], m)
        ts.store(ml, [0, 1], denom)

    @ts.kernel
    def combine(po: ts.Tensor[[splits, heads, rank], ts.f32], pml: ts.Tensor[[splits, heads, 2], ts.f32],
                o_lat: ts.Out[[heads, rank], ts.bf16], parts: ts.Scalar[ts.i32]):
        m = ts.full([heads, 1], float("-inf"), ts.f32)
        for p in ts.range(0, parts):
            m = ts.maximum(m, ts.load(pml, [p, 0, 0], [1, heads, 1]))
        denom = ts.zeros([heads, 1], ts.f32)
        acc = ts.zeros([heads, rank], ts.f32)
        for p in ts.range(0, parts):
            w = ts.exp(ts.load(pml, [p, 0, 0], [1, heads, 1]) - m)
            denom = denom + w * ts.load(pml, [p, 0, 1], [1, heads, 1])
            acc = acc + w * ts.load(po, [p, 0, 0], [1, heads, rank])
        ts.store(o_lat, [0, 0], ts.cast(acc / denom, ts.bf16))

    @ts.kernel
    def up_project(o_lat: ts.Tensor[[batch, rank], ts.bf16], w_uv: ts.Tensor[[rank, dim], ts.bf16],
                   out: ts.Out[[batch, dim], ts.bf16]):
        acc = ts.zeros([batch, dim], ts.f32)
        for c in ts.range(0, rank, 128):
            acc = acc + ts.matmul(ts.load(o_lat, [0, c], [batch, 128]), ts.load(w_uv, [c, 0], [128, dim]))
        ts.store(out, [0, 0], ts.cast(acc, ts.bf16))

    @ts.jit
    def mla_decode(
        q_nope: ts.Tensor[[batch, heads, dim], ts.bf16],
        q_pe: ts.Tensor[[batch, heads, rope], ts.bf16],
        ckv: ts.Tensor[[batch, max_len, rank], ts.bf16],
        kpe: ts.Tensor[[batch, max_len, rope], ts.bf16],
        w_uk: ts.Tensor[[heads, dim, rank], ts.bf16],
        w_uv: ts.Tensor[[heads, rank, dim], ts.bf16],
        kv_lens: ts.Tensor[[batch], ts.i32],
        out: ts.Out[[batch, heads, dim], ts.bf16],
    ):
        q_lat = ts.create_tensor([batch, heads, rank], ts.bf16)
        o_lat = ts.create_tensor([batch, heads, rank], ts.bf16)
        part_o = ts.create_tensor([batch, splits, heads, rank], ts.f32)
        part_ml = ts.create_tensor([batch, splits, heads, 2], ts.f32)
        for h in ts.range(0, heads):
            absorb(q_nope[:, h, :], w_uk[h, :, :], q_lat[:, h, :])
        for b in ts.range(0, batch):
            n = kv_lens[b]
            parts = (n + split - 1) // split
            for s in ts.range(0, parts):
                t0 = s * split
                attention_split(
                    q_lat[b, :, :], q_pe[b, :, :], ckv[b, t0 : t0 + split, :], kpe[b, t0 : t0 + split, :],
                    part_o[b, s, :, :], part_ml[b, s, :, :], min(n - t0, split),
                )
            combine(part_o[b, :, :, :], part_ml[b, :, :, :], o_lat[b, :, :], parts)
        for h in ts.range(0, heads):
            up_project(o_lat[:, h, :], w_uv[h, :, :], out[:, h, :])

    return mla_decode


def reference(q_nope, q_pe, ckv, kpe, w_uk, w_uv, kv_lens, **_) -> torch.Tensor:
    """MLA the unabsorbed way, in f32: per-head keys k = W_UK c and values v = c W_UV."""
    batch, heads, dim = q_nope.shape
    scale = 1.0 / math.sqrt(dim + q_pe.shape[-1])
    out = torch.empty_like(q_nope)
    for b in range(batch):
        n = int(kv_lens[b])
        c, kr = ckv[b, :n].float(), kpe[b, :n].float()
        k_nope = torch.einsum("hdr,nr->hnd", w_uk.float(), c)
        v = torch.einsum("nr,hrd->hnd", c, w_uv.float())
        s = (torch.einsum("hd,hnd->hn", q_nope[b].float(), k_nope) + q_pe[b].float() @ kr.T) * scale
        out[b] = torch.einsum("hn,hnd->hd", torch.softmax(s, -1), v).to(out.dtype)
    return out


def golden(t: dict) -> None:
    t["out"][:] = reference(**t)


def eager(q_nope, q_pe, ckv, kpe, w_uk, w_uv, kv_lens, **_):
    """The torch code of the absorbed decode step (bf16), sequence by sequence."""
    batch, heads, dim = q_nope.shape
    scale = 1.0 / math.sqrt(dim + q_pe.shape[-1])
    q_lat = torch.einsum("bhd,hdr->bhr", q_nope, w_uk)
    outs = []
    for b in range(batch):
        n = int(kv_lens[b])
        s = (q_lat[b] @ ckv[b, :n].T + q_pe[b] @ kpe[b, :n].T).float() * scale
        o_lat = torch.softmax(s, -1).to(ckv.dtype) @ ckv[b, :n]
        outs.append(torch.einsum("hr,hrd->hd", o_lat, w_uv))
    return torch.stack(outs)


def specs(batch: int = 4, heads: int = 16, rank: int = 512, rope: int = 64, dim: int = 128, max_len: int = 2304,
          kv_lens=KV_LENS) -> list:
    def scaled(k: float):
        return lambda shape, dtype: (torch.randn(shape) * k).to(dtype)

    return [
        TensorSpec("q_nope", [batch, heads, dim], torch.bfloat16, init_value=torch.randn),
        TensorSpec("q_pe", [batch, heads, rope], torch.bfloat16, init_value=torch.randn),
        TensorSpec("ckv", [batch, max_len, rank], torch.bfloat16, init_value=torch.randn),
        TensorSpec("kpe", [batch, max_len, rope], torch.bfloat16, init_value=torch.randn),
        TensorSpec("w_uk", [heads, dim, rank], torch.bfloat16, init_value=scaled(dim**-0.5)),
        TensorSpec("w_uv", [heads, rank, dim], torch.bfloat16, init_value=scaled(rank**-0.5)),
        TensorSpec("kv_lens", [batch], torch.int32, init_value=torch.tensor(kv_lens, dtype=torch.int32)),
        TensorSpec("out", [batch, heads, dim], torch.bfloat16, is_output=True),
    ]


mla_decode = build()
PROGRAM, SIZE = mla_decode, "4 sequences of 37..2100 tokens, 16 heads, latent 512 + rope 64, bf16"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(mla_decode, specs(), golden_fn=golden, rtol=2e-2, atol=2e-2, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
