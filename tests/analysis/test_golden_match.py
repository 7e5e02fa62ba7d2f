"""Where a tile is among the golden's values: windows of every layout a kernel sees, transposed,
broadcast, past an edge with a masked load's fill; within the tile's bound, not past it."""

import torch

from tilescope.analysis.localize.golden_match import GoldenIndex, tile_close


def _index(values, rtol=1e-5, atol=1e-6):
    return GoldenIndex(dict(enumerate(values)), rtol, atol)


def _zero(t):
    return torch.zeros(t.shape, dtype=torch.float64)


def test_a_window_of_a_matrix_and_of_the_rows_of_a_4d_value():
    g = torch.randn(64, 128)
    tile = g[16:32, 64:96].double()
    (w,) = _index([g]).find(tile, _zero(tile))
    assert (w.value, w.row, w.col, w.rows_n, w.cols_n, w.transposed) == (0, 16, 64, 16, 32, False)
    assert w.text(tuple(g.shape)) == "[16:32, 64:96]"
    q = torch.randn(2, 4, 16, 8)  # [B, H, S, D]: the tile of head (1, 2)
    tile = q[1, 2, 4:12, :].double()
    (w,) = _index([q]).find(tile, _zero(tile))
    assert w.text(tuple(q.shape)) == "[1, 2, 4:12, 0:8]"


def test_transposed_and_broadcast_tiles():
    g = torch.randn(32, 16)
    tile = g[0:8, 0:16].t().double()
    (w,) = _index([g]).find(tile, _zero(tile))
    assert w.transposed
    stat = torch.randn(32)  # a row statistic kept as [N] (keepdim=False)
    tile = stat[8:16, None].expand(8, 64).double()  # broadcast over a tile's columns
    (w,) = _index([stat]).find(tile, _zero(tile))
    assert (w.row, w.col) == (8, 0) and w.cols == 1


def test_a_masked_tail_past_the_edge_matches_where_its_fill_is_outside():
    g = torch.randn(4, 100)
    tile = torch.full((4, 64), float("-inf"), dtype=torch.float64)
    tile[:, :36] = g[:, 64:100].double()
    (w,) = _index([g]).find(tile, _zero(tile))
    assert (w.col, w.cols_n) == (64, 36)
    tile[:, 40] = 1.0  # not a fill outside: no window
    assert _index([g]).find(tile, _zero(tile)) == []


def test_a_value_outside_its_bound_matches_nothing_and_the_bound_is_honoured():
    g = torch.randn(16, 16)
    tile = g[0:4, 0:4].double().clone()
    tile[2, 3] += 0.01
    assert _index([g]).find(tile, _zero(tile)) == []
    bound = torch.zeros_like(tile)
    bound[2, 3] = 0.02  # the kernel's own rounding may explain it
    assert len(_index([g]).find(tile, bound)) == 1
    assert tile_close(tile, bound, g[0:4, 0:4], 1e-5, 1e-6)
    assert not tile_close(tile, _zero(tile), g[0:4, 0:4], 1e-5, 1e-6)


def test_one_common_value_is_no_evidence_of_where_it_is():
    g = torch.zeros(8, 8)
    one = torch.zeros(1, 1, dtype=torch.float64)
    assert _index([g]).find(one, _zero(one)) == []
