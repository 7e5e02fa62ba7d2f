"""``ts.rand``'s generator in torch: Philox4x32-10, bit for bit the tile library's
(tile_random.hpp), so interp and sim draw the same numbers.

Element ``i`` of a tile is a function of ``(seed, offset + i)`` only: the key is the seed's low
and high 32 bits, the counter ``offset + i`` (64 bits, low word first; the last two words 0),
and the value the first output word's top 24 bits times 2**-24, in ``[0, 1)``.
"""

from __future__ import annotations

import torch

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


def _int64(v: int) -> int:
    """``v`` modulo 2**64 as a signed 64-bit int (what torch's int64 holds)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def philox(counter: list[torch.Tensor], key: tuple[int, int]) -> list[torch.Tensor]:
    """Philox4x32-10 of the four 32-bit counter words (int64 tensors holding 0..2**32-1) under
    the two key words: the four output words."""
    x0, x1, x2, x3 = counter
    k0, k1 = key[0] & _MASK, key[1] & _MASK
    for _ in range(10):
        p0, p1 = x0 * _M0, x2 * _M1  # wraps modulo 2**64: the high word is still right
        y0 = ((p1 >> 32) & _MASK) ^ x1 ^ k0
        y2 = ((p0 >> 32) & _MASK) ^ x3 ^ k1
        x1, x3 = p1 & _MASK, p0 & _MASK
        x0, x2 = y0, y2
        k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return [x0, x1, x2, x3]


def philox_uniform(seed: int, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
    """An f32 tensor of ``shape`` whose element i (row-major) is the uniform of counter
    ``offset + i`` under ``seed``."""
    n = 1
    for s in shape:
        n *= s
    ctr = torch.arange(n, dtype=torch.int64) + _int64(offset)  # wraps modulo 2**64, as the C++
    zero = torch.zeros(n, dtype=torch.int64)
    seed &= (1 << 64) - 1
    word = philox([ctr & _MASK, (ctr >> 32) & _MASK, zero, zero], (seed & _MASK, seed >> 32))[0]
    return ((word >> 8).to(torch.float32) * (1.0 / 16777216.0)).reshape(shape)
