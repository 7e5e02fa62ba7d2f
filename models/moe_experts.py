"""Mixture-of-experts with token counts known only at run time: a routing task counts each
expert's tokens, and the orchestration reads every count to submit one task per block of 64
tokens of that expert, as the reference's MoE orchestrations read their token counts.

counts[e] = sum(route[e, :])                          (task 0: count_tokens)
y[e, t:t + 64, :] = silu(x[e, t:t + 64, :] @ w[e])    (one task per block, t < counts[e])

Tokens are grouped by expert (routed ones first, in multiples of 64); rows past an expert's
count are left as they were (zeros).

python models/moe_experts.py -p sim --trace --enable-dep-gen   # the reads in the trace and graph
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

E, T, D, BLOCK = 4, 256, 64, 64


@ts.kernel
def count_tokens(route: ts.Tensor[[E, T], ts.f32], counts: ts.Out[[E, 1], ts.i32]):
    ts.store(counts, [0, 0], ts.cast(ts.row_sum(ts.load(route, [0, 0], [E, T])), ts.i32))


@ts.kernel
def expert(x: ts.Tensor[[BLOCK, D], ts.f32], w: ts.Tensor[[D, D], ts.f32], y: ts.Out[[BLOCK, D], ts.f32]):
    ts.store(y, [0, 0], ts.silu(ts.matmul(ts.load(x, [0, 0], [BLOCK, D]), ts.load(w, [0, 0], [D, D]))))


@ts.jit
def moe_experts(
    route: ts.Tensor[[E, T], ts.f32],
    x: ts.Tensor[[E, T, D], ts.f32],
    w: ts.Tensor[[E, D, D], ts.f32],
    y: ts.InOut[[E, T, D], ts.f32],
    counts: ts.Out[[E, 1], ts.i32],
):
    count_tokens(route, counts)
    for e in ts.range(0, E):
        n = counts[e, 0]  # waits for count_tokens, then reads expert e's token count
        for t in ts.range(0, n, BLOCK):
            expert(x[e, t : t + BLOCK, :], w[e, :, :], y[e, t : t + BLOCK, :])


def routing(shape, dtype=torch.float32) -> torch.Tensor:
    """Each expert's first 64 * k tokens routed to it (k = 0..T / 64, drawn at random)."""
    blocks = torch.randint(0, T // BLOCK + 1, (E,))
    return (torch.arange(T)[None, :] < blocks[:, None] * BLOCK).to(dtype)


def golden(t: dict) -> None:
    counts = t["route"].sum(dim=1).to(torch.int32)
    t["counts"][:] = counts[:, None]
    for e, n in enumerate(counts.tolist()):
        t["y"][e, :n] = torch.nn.functional.silu(t["x"][e, :n] @ t["w"][e])


SPECS = [
    TensorSpec("route", [E, T], torch.float32, init_value=routing),
    TensorSpec("x", [E, T, D], torch.float32, init_value=torch.randn),
    TensorSpec("w", [E, D, D], torch.float32, init_value=lambda shape, dtype: torch.randn(shape, dtype=dtype) / 8),
    TensorSpec("y", [E, T, D], torch.float32, is_output=True, init_value=0.0),
    TensorSpec("counts", [E, 1], torch.int32, is_output=True),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(moe_experts, SPECS, golden_fn=golden, rtol=1e-4, atol=1e-4, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
