"""Seeded-bug programs for the triage tests: each a real program with one planted fault, and
its correct twin where it has one."""

from __future__ import annotations

import re

import torch

import tilescope as ts

# -- a store loop that stops one chunk early ---------------------------------------------------

R, W = 64, 512


@ts.kernel
def scale_rows_short(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, W], ts.f32]):
    for h in ts.range(0, W - 64, 64):  # the bug: one chunk short
        t = ts.load(x, [0, h], [R, 64])
        ts.store(y, [0, h], t * 2.0)


@ts.kernel
def add_one(y: ts.Tensor[[R, W], ts.f32], z: ts.Out[[R, W], ts.f32]):
    for h in ts.range(0, W, 128):
        ts.store(z, [0, h], ts.load(y, [0, h], [R, 128]) + 1.0)


@ts.jit
def short_store(x: ts.Tensor[[2 * R, W], ts.f32], z: ts.Out[[2 * R, W], ts.f32]):
    y = ts.create_tensor([2 * R, W], ts.f32)
    for r in ts.range(0, 2 * R, R):
        scale_rows_short(x[r : r + R, :], y[r : r + R, :])
    for r in ts.range(0, 2 * R, R):
        add_one(y[r : r + R, :], z[r : r + R, :])


def short_store_inputs() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(2 * R, W), "z": torch.zeros(2 * R, W)}


def short_store_golden(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


# -- split-KV attention: partial softmax-weighted sums per chunk of keys, then a combine --------

Q, D, S, KV = 16, 64, 4, 64  # query rows, head dim, splits, keys per split
SCALE = 0.125


@ts.kernel
def attn_partial(
    q: ts.Tensor[[Q, D], ts.f32],
    k: ts.Tensor[[KV, D], ts.f32],
    v: ts.Tensor[[KV, D], ts.f32],
    o: ts.Out[[Q, D], ts.f32],
    m: ts.Out[[Q, 1], ts.f32],
    rowsum: ts.Out[[Q, 1], ts.f32],
):
    s = ts.matmul(ts.load(q, [0, 0], [Q, D]), ts.transpose(ts.load(k, [0, 0], [KV, D]))) * SCALE
    mx = ts.row_max(s)
    p = ts.exp(s - mx)
    ts.store(o, [0, 0], ts.matmul(p, ts.load(v, [0, 0], [KV, D])))
    ts.store(m, [0, 0], mx)
    ts.store(rowsum, [0, 0], ts.row_sum(p))


@ts.kernel
def attn_partial_no_l(
    q: ts.Tensor[[Q, D], ts.f32],
    k: ts.Tensor[[KV, D], ts.f32],
    v: ts.Tensor[[KV, D], ts.f32],
    o: ts.Out[[Q, D], ts.f32],
    m: ts.Out[[Q, 1], ts.f32],
    rowsum: ts.Out[[Q, 1], ts.f32],
):
    s = ts.matmul(ts.load(q, [0, 0], [Q, D]), ts.transpose(ts.load(k, [0, 0], [KV, D]))) * SCALE
    mx = ts.row_max(s)
    p = ts.exp(s - mx)
    ts.store(o, [0, 0], ts.matmul(p, ts.load(v, [0, 0], [KV, D])))
    ts.store(m, [0, 0], mx)  # the bug: rowsum (the row sums) is never stored


@ts.kernel
def attn_combine(
    o: ts.Tensor[[S * Q, D], ts.f32],
    m: ts.Tensor[[S * Q, 1], ts.f32],
    rowsum: ts.Tensor[[S * Q, 1], ts.f32],
    out: ts.Out[[Q, D], ts.f32],
):
    top = ts.load(m, [0, 0], [Q, 1])
    for s in ts.range(Q, S * Q, Q):
        top = ts.maximum(top, ts.load(m, [s, 0], [Q, 1]))
    acc = ts.zeros([Q, D], ts.f32)
    total = ts.zeros([Q, 1], ts.f32)
    for s in ts.range(0, S * Q, Q):
        w = ts.exp(ts.load(m, [s, 0], [Q, 1]) - top)
        acc = acc + ts.load(o, [s, 0], [Q, D]) * w
        total = total + ts.load(rowsum, [s, 0], [Q, 1]) * w
    ts.store(out, [0, 0], acc / total)


def _attention(partial):
    @ts.jit
    def split_kv(
        q: ts.Tensor[[Q, D], ts.f32],
        k: ts.Tensor[[S * KV, D], ts.f32],
        v: ts.Tensor[[S * KV, D], ts.f32],
        out: ts.Out[[Q, D], ts.f32],
    ):
        o = ts.create_tensor([S * Q, D], ts.f32)
        m = ts.create_tensor([S * Q, 1], ts.f32)
        rowsum = ts.create_tensor([S * Q, 1], ts.f32)
        for s in ts.range(0, S, 1):
            partial(q, k[s * KV : s * KV + KV, :], v[s * KV : s * KV + KV, :], o[s * Q : s * Q + Q, :],
                    m[s * Q : s * Q + Q, :], rowsum[s * Q : s * Q + Q, :])  # fmt: skip
        attn_combine(o, m, rowsum, out)

    return split_kv


split_kv = _attention(attn_partial)
split_kv_missing_store = _attention(attn_partial_no_l)


def attention_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "q": torch.randn(Q, D, generator=g),
        "k": torch.randn(S * KV, D, generator=g),
        "v": torch.randn(S * KV, D, generator=g),
        "out": torch.zeros(Q, D),
    }


def attention_golden(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.T * SCALE, dim=-1) @ v


# -- a pipeline: produce blocks of y, then consume them (the audit's and the race's program) ----

B, C = 64, 64


@ts.kernel
def produce(x: ts.Tensor[[B, C], ts.f32], y: ts.Out[[B, C], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [B, C]) * 2.0)


@ts.kernel
def consume(y: ts.Tensor[[B, C], ts.f32], z: ts.Out[[B, C], ts.f32]):
    t = ts.load(y, [0, 0], [B, C])
    ts.store(z, [0, 0], t + 1.0)


@ts.jit
def pipeline(x: ts.Tensor[[5 * B, C], ts.f32], y: ts.Out[[5 * B, C], ts.f32], z: ts.Out[[4 * B, C], ts.f32]):
    for r in ts.range(0, 4 * B, B):
        produce(x[r : r + B, :], y[r : r + B, :])
    for r in ts.range(0, 4 * B, B):
        consume(y[r : r + B, :], z[r : r + B, :])


def pipeline_inputs():
    return {"x": torch.randn(5 * B, C), "y": torch.zeros(5 * B, C), "z": torch.zeros(4 * B, C)}



def pipeline_golden(x: torch.Tensor) -> torch.Tensor:
    return x[: 4 * B] * 2 + 1


def edit_kernel(prog, kernel: str, old: str, new: str) -> str:
    """Edit ``kernel``'s C++ in ``prog``'s build by hand (``old`` -> ``new``, dropping its bounds
    checks too); returns the source's path in the build."""
    (k,) = [k for k in prog.kernels if k["name"] == kernel]
    src = prog.work_dir / k["source"]
    text = src.read_text()
    assert old in text, f"{old!r} is not in {src}"
    edited = re.sub(r", ::check_sites\[\d+\]\)", ")", text.replace(old, new))
    src.write_text(edited)
    return k["source"]


# -- an InOut accumulation (the signature test edits its orchestration) -------------------------


@ts.kernel
def accumulate(x: ts.Tensor[[B, C], ts.f32], acc: ts.InOut[[B, C], ts.f32]):
    ts.store(acc, [0, 0], ts.load(acc, [0, 0], [B, C]) + ts.load(x, [0, 0], [B, C]))


@ts.jit
def running_sum(x: ts.Tensor[[4 * B, C], ts.f32], acc: ts.InOut[[B, C], ts.f32]):
    for r in ts.range(0, 4 * B, B):
        accumulate(x[r : r + B, :], acc)


def running_sum_inputs() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(4 * B, C), "acc": torch.randn(B, C)}


def running_sum_golden(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    return acc + x.reshape(4, B, C).sum(0)


# -- a NaN producer: log of a value that can be negative ----------------------------------------


@ts.kernel
def log_shift(x: ts.Tensor[[B, C], ts.f32], y: ts.Out[[B, C], ts.f32]):
    t = ts.load(x, [0, 0], [B, C])
    u = t * 2.0
    v = ts.log(u - 1.0)  # the bug (meant u + 1.0): x < 0.5 gives the log of a negative number
    ts.store(y, [0, 0], v + 1.0)


@ts.jit
def log_rows(x: ts.Tensor[[2 * B, C], ts.f32], y: ts.Out[[2 * B, C], ts.f32]):
    for r in ts.range(0, 2 * B, B):
        log_shift(x[r : r + B, :], y[r : r + B, :])


def log_rows_inputs() -> dict[str, torch.Tensor]:
    x = torch.rand(2 * B, C) + 0.6  # every element > 0.5 in the first block ...
    x[B + 3, 5] = 0.1  # ... and one that is not in the second
    return {"x": x, "y": torch.zeros(2 * B, C)}


# -- a half-stored output, then copied: the copy is not the culprit ------------------------------


@ts.kernel
def half_store(x: ts.Tensor[[B, 2 * C], ts.f32], y: ts.Out[[B, 2 * C], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [B, C]) * 3.0)  # the bug: y[:, C:] is never stored


@ts.kernel
def copy_block(y: ts.Tensor[[B, 2 * C], ts.f32], z: ts.Out[[B, 2 * C], ts.f32]):
    ts.store(z, [0, 0], ts.load(y, [0, 0], [B, 2 * C]))


@ts.jit
def half_then_copy(x: ts.Tensor[[B, 2 * C], ts.f32], z: ts.Out[[B, 2 * C], ts.f32]):
    y = ts.create_tensor([B, 2 * C], ts.f32)
    half_store(x, y)
    copy_block(y, z)


# -- an explicit -inf mask: NaN/Inf the golden has too -------------------------------------------


@ts.kernel
def mask_negative(x: ts.Tensor[[B, C], ts.f32], y: ts.Out[[B, C], ts.f32]):
    t = ts.load(x, [0, 0], [B, C])
    ts.store(y, [0, 0], ts.where(t > 0.0, t, ts.full([B, C], float("-inf"), ts.f32)))


@ts.jit
def masked(x: ts.Tensor[[B, C], ts.f32], y: ts.Out[[B, C], ts.f32]):
    mask_negative(x, y)


# -- blocks gathered at offsets the orchestration reads from a table -----------------------------


@ts.jit
def gathered(x: ts.Tensor[[4 * B, C], ts.f32], meta: ts.Tensor[[5], ts.i32], y: ts.Out[[4 * B, C], ts.f32]):
    n = meta[0]  # meta: the block count, then each block's first row
    for b in ts.range(0, n):
        s = meta[b + 1]
        produce(x[s : s + B, :], y[b * B : b * B + B, :])


def gathered_inputs(starts: list[int], n: int = 4) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(4 * B, C), "meta": torch.tensor([n, *starts], dtype=torch.int32),
            "y": torch.zeros(4 * B, C)}  # fmt: skip


# -- a second loop whose output region does not move with it: every task writes z[0:B] ------------


@ts.jit
def same_block(x: ts.Tensor[[4 * B, C], ts.f32], y: ts.Out[[4 * B, C], ts.f32], z: ts.Out[[4 * B, C], ts.f32]):
    for r in ts.range(0, 4 * B, B):
        produce(x[r : r + B, :], y[r : r + B, :])
    for r in ts.range(0, 4 * B, B):
        consume(y[r : r + B, :], z[0:B, :])  # the bug: z[r : r + B, :]


# -- a read of padding nothing wrote: the producer fills C columns of a C + 8 wide intermediate ----


@ts.kernel
def shift_block(x: ts.Tensor[[B, C], ts.f32], h: ts.Out[[B, C], ts.f32]):
    ts.store(h, [0, 0], ts.load(x, [0, 0], [B, C]) - 5.0)


@ts.kernel
def padded_max(h: ts.Tensor[[B, C + 8], ts.f32], y: ts.Out[[B, 1], ts.f32]):
    t = ts.load(h, [0, 0], [B, C + 8])  # the bug: the 8 padding columns are read, unmasked
    ts.store(y, [0, 0], ts.row_max(t))


@ts.jit
def padded(x: ts.Tensor[[2 * B, C], ts.f32], y: ts.Out[[2 * B, 1], ts.f32]):
    h = ts.create_tensor([2 * B, C + 8], ts.f32)
    for r in ts.range(0, 2 * B, B):
        shift_block(x[r : r + B, :], h[r : r + B, 0:C])
        padded_max(h[r : r + B, :], y[r : r + B, :])
