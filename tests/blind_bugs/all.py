"""Every blind bug, gathered from the family modules."""

from __future__ import annotations

from blind_bugs import (
    attention,
    blocks,
    elementwise,
    gemm,
    losses,
    new_user,
    norms,
    reductions,
    repairs,
    scans_and_gathers,
)

BUGS = (
    *norms.BUGS,
    *attention.BUGS,
    *reductions.BUGS,
    *elementwise.BUGS,
    *gemm.BUGS,
    *losses.BUGS,
    *scans_and_gathers.BUGS,
    *new_user.BUGS,
    *blocks.BUGS,
    *repairs.BUGS,
)

assert len({b.name for b in BUGS}) == len(BUGS), "bug names must be unique"
