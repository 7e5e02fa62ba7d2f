"""A routed mixture-of-experts layer with int8 weights and activations (W8A8), as in the
reference's expert dispatch and combine:

- Routing is an input: for each expert, the ids of the tokens sent to it (``token_ids[e, :n]``),
  their count (``counts[e]``, int32) and the router weights (``route_w[e, :n]``).
- The orchestration reads each expert's count and submits, per expert: one task per block of 16
  of its tokens that gathers their rows (``ts.load_rows``) and quantizes them per token to int8
  (a saturating cast), once; ``groups`` gate/up tasks, each multiplying all the expert's tokens
  (in blocks of 16, a ragged tail through ``valid=``) by its columns of the int8 gate and up
  weights with int32 accumulation, dequantizing with the per-token and per-channel scales and
  applying the SiLU gate; and ``groups`` down tasks, each quantizing the hidden activations per
  token and running its columns of the int8 down projection, scaled by the router weight. A
  task reads its weights in row chunks as wide as its columns (contiguous reads), once per block
  of 16 tokens.
- Combine: for every (expert, token) pair the orchestration reads the token id and submits a
  task that adds the expert's row into that token's output row. A token routed to two experts
  gets two adds into one row: the dependencies order them.

Default size: DeepSeek-V2-Lite's routed experts (hidden 2048, expert width 1408), 8 experts,
64 tokens routed top-2.

python models/moe_expert.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

INV_127 = 1.0 / 127.0


def build(
    tokens: int = 64,
    hidden: int = 2048,
    inter: int = 1408,
    experts: int = 8,
    tb: int = 16,
    groups: int = 4,
    hc: int | None = None,
    ic: int | None = None,
    oc: int = 512,
    dc: int | None = None,
):
    """The program for x [tokens, hidden] bf16 and ``experts`` experts of width ``inter``; each
    projection of an expert is split into ``groups`` tasks by output columns. Chunks: ``hc`` of
    hidden read by gate/up (default 256, or all of it), ``ic`` of inter written by gate/up, ``dc`` of inter read by down,
    ``oc`` of hidden written by down."""
    iw, ow = inter // groups, hidden // groups  # the columns of one gate/up task and one down task
    # 256 of hidden per matmul: fewer, deeper int8 matmuls (each packs its weight tile for AMX/VNNI
    # and has a fixed cost); 64 took 6.9 ms against 5.9-6.2 for the default size
    hc = hc or min(256, hidden)
    # the whole width of a task's weight rows per load where it fits (contiguous reads)
    ic = ic or (iw if iw <= 512 and iw % 32 == 0 else 128 if iw % 128 == 0 else 64)
    dc = dc or ic

    @ts.kernel
    def quantize_block(
        x: ts.Tensor[[tokens, hidden], ts.bf16],
        ids: ts.Tensor[[1, tb], ts.i32],
        qx: ts.Out[[tb, hidden], ts.i8],
        dq: ts.Out[[tb, 1], ts.f32],
        n: ts.Scalar[ts.i32],
    ):
        rows = ts.load(ids, [0, 0], [1, tb])
        amax = ts.full([tb, 1], 1e-8, ts.f32)  # rows past n are all zero
        for c in ts.range(0, hidden, hc):
            amax = ts.maximum(amax, ts.row_max(ts.abs(ts.cast(ts.load_rows(x, rows, (c, hc), valid=n), ts.f32))))
        qs = 127.0 / amax
        for c in ts.range(0, hidden, hc):
            t = ts.cast(ts.load_rows(x, rows, (c, hc), valid=n), ts.f32)
            ts.store(qx, [0, c], ts.cast(t * qs, ts.i8), valid=(n, hc))
        ts.store(dq, [0, 0], amax * INV_127, valid=(n, 1))

    @ts.kernel
    def gate_up(
        qx: ts.Tensor[[tokens, hidden], ts.i8],
        dq: ts.Tensor[[tokens, 1], ts.f32],
        wg: ts.Weight[[hidden, iw], ts.i8],
        sg: ts.Tensor[[1, iw], ts.f32],
        wu: ts.Weight[[hidden, iw], ts.i8],
        su: ts.Tensor[[1, iw], ts.f32],
        h: ts.Out[[tokens, iw], ts.f32],
        n: ts.Scalar[ts.i32],
    ):
        for j in ts.range(0, iw, ic):
            for r in ts.range(0, n, tb):
                rows = min(n - r, tb)
                g = ts.zeros([tb, ic], ts.i32)
                u = ts.zeros([tb, ic], ts.i32)
                for c in ts.range(0, hidden, hc):
                    q = ts.load(qx, [r, c], [tb, hc], valid=(rows, hc))
                    g = ts.matmul(q, ts.load(wg, [c, j], [hc, ic]), acc=g)
                    u = ts.matmul(q, ts.load(wu, [c, j], [hc, ic]), acc=u)
                d = ts.load(dq, [r, 0], [tb, 1], valid=(rows, 1))
                gf = ts.cast(g, ts.f32) * d * ts.load(sg, [0, j], [1, ic])
                uf = ts.cast(u, ts.f32) * d * ts.load(su, [0, j], [1, ic])
                ts.store(h, [r, j], ts.silu(gf) * uf, valid=(rows, ic))

    @ts.kernel
    def down(
        h: ts.Tensor[[tokens, inter], ts.f32],
        rw: ts.Tensor[[1, tokens], ts.f32],
        wd: ts.Weight[[inter, ow], ts.i8],
        sd: ts.Tensor[[1, ow], ts.f32],
        y: ts.Out[[tokens, ow], ts.f32],
        n: ts.Scalar[ts.i32],
    ):
        for r in ts.range(0, n, tb):
            rows = min(n - r, tb)
            hmax = ts.full([tb, 1], 1e-8, ts.f32)
            for j in ts.range(0, inter, dc):
                hmax = ts.maximum(hmax, ts.row_max(ts.abs(ts.load(h, [r, j], [tb, dc], valid=(rows, dc)))))
            hs = 127.0 / hmax
            weight = ts.transpose(ts.load(rw, [0, r], [1, tb], valid=(1, rows))) * (hmax * INV_127)
            for o in ts.range(0, ow, oc):
                d = ts.zeros([tb, oc], ts.i32)
                for j in ts.range(0, inter, dc):
                    qh = ts.cast(ts.load(h, [r, j], [tb, dc], valid=(rows, dc)) * hs, ts.i8)
                    d = ts.matmul(qh, ts.load(wd, [j, o], [dc, oc]), acc=d)
                ts.store(y, [r, o], ts.cast(d, ts.f32) * ts.load(sd, [0, o], [1, oc]) * weight, valid=(rows, oc))

    @ts.kernel
    def zero_rows(out: ts.Out[[tb, hidden], ts.f32]):
        for c in ts.range(0, hidden, oc):
            ts.store(out, [0, c], ts.zeros([tb, oc], ts.f32))

    @ts.kernel
    def add_row(src: ts.Tensor[[1, hidden], ts.f32], dst: ts.InOut[[1, hidden], ts.f32]):
        for c in ts.range(0, hidden, oc):
            ts.store(dst, [0, c], ts.load(dst, [0, c], [1, oc]) + ts.load(src, [0, c], [1, oc]))

    @ts.jit
    def moe_expert(
        x: ts.Tensor[[tokens, hidden], ts.bf16],
        token_ids: ts.Tensor[[experts, tokens], ts.i32],
        counts: ts.Tensor[[experts], ts.i32],
        route_w: ts.Tensor[[experts, tokens], ts.f32],
        w_gate: ts.Weight[[experts, hidden, inter], ts.i8],
        s_gate: ts.Tensor[[experts, 1, inter], ts.f32],
        w_up: ts.Weight[[experts, hidden, inter], ts.i8],
        s_up: ts.Tensor[[experts, 1, inter], ts.f32],
        w_down: ts.Weight[[experts, inter, hidden], ts.i8],
        s_down: ts.Tensor[[experts, 1, hidden], ts.f32],
        out: ts.Out[[tokens, hidden], ts.f32],
    ):
        qx = ts.create_tensor([experts, tokens, hidden], ts.i8)
        dq = ts.create_tensor([experts, tokens, 1], ts.f32)
        h = ts.create_tensor([experts, tokens, inter], ts.f32)
        y = ts.create_tensor([experts, tokens, hidden], ts.f32)
        for r in ts.range(0, tokens, tb):
            zero_rows(out[r : r + tb, :])
        for e in ts.range(0, experts):
            n = counts[e]
            for b in ts.range(0, n, tb):
                quantize_block(x, token_ids[e : e + 1, b : b + tb], qx[e, b : b + tb, :], dq[e, b : b + tb, :],
                               min(n - b, tb))
            for g in ts.range(0, inter, iw):
                gate_up(qx[e, :, :], dq[e, :, :], w_gate[e, :, g : g + iw], s_gate[e, :, g : g + iw],
                        w_up[e, :, g : g + iw], s_up[e, :, g : g + iw], h[e, :, g : g + iw], n)
            for g in ts.range(0, hidden, ow):
                down(h[e, :, :], route_w[e : e + 1, :], w_down[e, :, g : g + ow], s_down[e, :, g : g + ow],
                     y[e, :, g : g + ow], n)
            for i in ts.range(0, n):
                t = token_ids[e, i]
                add_row(y[e, i : i + 1, :], out[t : t + 1, :])

    return moe_expert


def _quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row int8 values and the row's dequantization factor, computed as the kernel does (f32)."""
    amax = torch.maximum(t.abs().amax(-1, keepdim=True), torch.tensor(1e-8))
    # NOTE: torch.div, not 127.0 / amax: a number divided by a tensor is reciprocal-then-multiply in
    # torch, one rounding more than the kernel's division (it moved a product off a .5 tie here)
    q = torch.round(t * torch.div(127.0, amax)).clamp(-128, 127).to(torch.int8)  # ties to even, saturating
    return q, amax * torch.tensor(INV_127, dtype=torch.float32)


def reference(x, token_ids, counts, route_w, w_gate, s_gate, w_up, s_up, w_down, s_down, int_mm=None, **_):
    """The layer in torch with the kernel's quantization (``int_mm``: the int8 matmul to use)."""
    mm = int_mm or (lambda a, b: a.long() @ b.long())
    out = torch.zeros(x.shape, dtype=torch.float32)
    for e in range(token_ids.shape[0]):
        n = int(counts[e])
        if n == 0:
            continue
        ids = token_ids[e, :n].long()
        qx, dq = _quantize(x[ids].float())
        g = mm(qx, w_gate[e]).float() * dq * s_gate[e]
        u = mm(qx, w_up[e]).float() * dq * s_up[e]
        qh, dh = _quantize(torch.nn.functional.silu(g) * u)
        y = mm(qh, w_down[e]).float() * s_down[e] * (route_w[e, :n, None] * dh)
        out.index_add_(0, ids, y)
    return out


def golden(t: dict) -> None:
    t["out"][:] = reference(**t)


def eager(**inputs):
    """The torch code of this layer: the same W8A8 math with torch's int8 matmul (torch._int_mm)."""
    return reference(**inputs, int_mm=torch._int_mm)


def routing(tokens: int, experts: int, top_k: int = 2, seed: int = 3):
    """Each token sent to ``top_k`` distinct experts: token ids per expert (padded with 0), the
    counts and the router weights (a softmax over the chosen experts' random logits)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen)
    weights, chosen = torch.softmax(logits, -1).topk(top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    ids = torch.zeros(experts, tokens, dtype=torch.int32)
    route = torch.zeros(experts, tokens, dtype=torch.float32)
    counts = torch.zeros(experts, dtype=torch.int32)
    for t in range(tokens):
        for k in range(top_k):
            e = int(chosen[t, k])
            ids[e, counts[e]] = t
            route[e, counts[e]] = weights[t, k]
            counts[e] += 1
    return ids, counts, route


def _int8(shape, seed: int) -> torch.Tensor:
    return torch.randint(-127, 128, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int8)


def _scales(shape, lo: float, hi: float, seed: int) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * (hi - lo) + lo


def specs(tokens: int = 64, hidden: int = 2048, inter: int = 1408, experts: int = 8) -> list:
    ids, counts, route = routing(tokens, experts)
    return [
        TensorSpec("x", [tokens, hidden], torch.bfloat16, init_value=torch.randn),
        TensorSpec("token_ids", [experts, tokens], torch.int32, init_value=ids),
        TensorSpec("counts", [experts], torch.int32, init_value=counts),
        TensorSpec("route_w", [experts, tokens], torch.float32, init_value=route),
        TensorSpec("w_gate", [experts, hidden, inter], torch.int8, init_value=_int8([experts, hidden, inter], 11)),
        TensorSpec("s_gate", [experts, 1, inter], torch.float32, init_value=_scales([experts, 1, inter], 2e-4, 4e-4, 12)),
        TensorSpec("w_up", [experts, hidden, inter], torch.int8, init_value=_int8([experts, hidden, inter], 13)),
        TensorSpec("s_up", [experts, 1, inter], torch.float32, init_value=_scales([experts, 1, inter], 2e-4, 4e-4, 14)),
        TensorSpec("w_down", [experts, inter, hidden], torch.int8, init_value=_int8([experts, inter, hidden], 15)),
        TensorSpec("s_down", [experts, 1, hidden], torch.float32, init_value=_scales([experts, 1, hidden], 4e-4, 8e-4, 16)),
        TensorSpec("out", [tokens, hidden], torch.float32, is_output=True),
    ]


moe_expert = build()
PROGRAM, SIZE = moe_expert, "64 tokens top-2 over 8 experts, hidden 2048, width 1408, int8"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(moe_expert, specs(), golden_fn=golden, rtol=1e-2, atol=5e-3, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
