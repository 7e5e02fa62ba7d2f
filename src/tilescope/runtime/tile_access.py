"""The elements a kernel's ``ts.load`` or ``ts.store`` touches, as torch views: what the
interpreter and the localize error model read and write (the C++ twin is tile_core.hpp's
``locate`` and ``load_pad``).

Invariants:
- A region is a view of the tensor (basic slicing, strides included), never a copy: a store
  writes through it.
- A tensor dim the tile does not cover contributes its offset only; a tile dim ``d`` covers
  ``offset, offset + step, ...`` (``sizes[d]`` elements, ``step = strides[d]``).
- An access out of bounds raises IndexError worded as a checked sim build words it: the site,
  the offsets, the span of each dim and the first dim that does not fit.
- A 0-dim tensor is one element: it is read and written as a 1-D tensor of one.
"""

from __future__ import annotations

import torch

from tilescope.ir.nodes import Load
from tilescope.ir.type_rules import access_dims, access_extents


def region(
    view: torch.Tensor, offsets: list[int], sizes, site: str = "", name: str = "", strides: tuple[int, ...] = ()
) -> torch.Tensor:
    """The region of ``view`` an access of ``sizes`` (one count per tensor dim) at ``offsets``
    with ``strides`` touches; IndexError naming the site, the tensor ``name`` and the first dim
    out of bounds."""
    if view.dim() == 0:
        view, offsets, sizes = view.reshape(1), [0], (1,)
    spans = access_extents(tuple(sizes), strides)
    steps = strides or (1,) * len(spans)
    whose = f"{name}'s" if name else "the tensor's"
    index = []
    for dim, (o, n, step) in enumerate(zip(offsets, spans, steps)):
        if o < 0 or o + n > view.shape[dim]:
            why = f"{o} < 0" if o < 0 else f"{o} + {n} > {view.shape[dim]}"
            raise IndexError(
                f"{site}offset {list(offsets)} + tile {list(spans)} is outside {whose} shape {list(view.shape)} "
                f"(dim {dim}: {why})"
            )
        index.append(slice(o, o + n, step))
    return view[tuple(index)]


def counted_sizes(sizes: tuple[int, ...], dims: tuple[int | None, ...], tile: tuple[int, ...], counts) -> tuple:
    """``sizes`` (one per tensor dim) with each tile dim's count replaced by ``counts`` (one per
    tile dim: a ragged access's valid counts; a tile dim with no tensor dim has none to replace)."""
    out = list(sizes)
    for d, n in zip(access_dims(len(sizes), len(tile), dims), counts):
        if d is not None:
            out[d] = n
    return tuple(out)


def padded_window(view: torch.Tensor, e: Load, offsets: list[int]) -> tuple[tuple[slice, ...], torch.Tensor | None]:
    """The part of a padded load's tile whose elements lie inside ``view`` (slices of the tile)
    and the region they are read from; None when no element does (all of it is pad)."""
    tile = e.type.shape
    if view.dim() == 0:
        return tuple(slice(0, 1) for _ in tile), view.reshape(1)
    nd = view.dim()
    along = access_dims(nd, len(tile), e.dims)
    steps = e.strides or (1,) * nd
    first = list(offsets)
    counts = list(e.sizes)
    inside = {None: slice(0, 1)}
    for d in range(nd):
        o, size = offsets[d], view.shape[d]
        if d not in along:
            if not 0 <= o < size:
                return (), None
            continue
        step, n = steps[d], e.sizes[d]
        lo = 0 if o >= 0 else (-o + step - 1) // step
        hi = 0 if o >= size else (size - o + step - 1) // step
        lo, hi = min(lo, n), min(hi, n)
        if hi <= lo:
            return (), None
        first[d], counts[d] = o + lo * step, hi - lo
        inside[d] = slice(lo, hi)
    return tuple(inside[d] for d in along), region(view, first, tuple(counts), strides=e.strides)
