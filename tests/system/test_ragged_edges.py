"""One kernel over a tensor whose size is not a multiple of the tile (docs/dsl.md, "Sizes that
are not a multiple of the tile"): the elementwise example as the docs write it, on sim and
interp. The matmul (models/matmul.py ``build_ragged``) runs with the models in test_models.py."""

import pytest
import torch

import tilescope as ts

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

M, N, BM, BN = 1000, 300, 64, 128


@ts.kernel
def gelu_rows(x: ts.Tensor[[BM, N], ts.f32], y: ts.InOut[[BM, N], ts.f32],
              r0: ts.Scalar[ts.i32], rows: ts.Scalar[ts.i32]):  # fmt: skip
    for c in ts.range(0, N, BN):
        cols = min(N - c, BN)  # the last chunk of columns is short
        t = ts.load(x, [r0, c], [BM, BN], valid=(rows, cols))
        ts.store(y, [r0, c], ts.gelu(t), valid=(rows, cols))


@ts.jit
def gelu(x: ts.Tensor[[M, N], ts.f32], y: ts.Out[[M, N], ts.f32]):
    for r in ts.range(0, M, BM):
        s = min(r, M - BM)  # the window holding rows r..: the last ends at M
        gelu_rows(x[s : s + BM, :], y[s : s + BM, :], r - s, min(BM, M - r))


@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_one_kernel_covers_rows_and_columns_that_are_not_a_multiple_of_the_tile(platform):
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(0))  # fixed: the tolerance is tight
    y = torch.full((M, N), float("nan"))  # every element must be written
    info = gelu.compile().run(x, y, platform=platform)
    torch.testing.assert_close(y, torch.nn.functional.gelu(x), rtol=1e-6, atol=1e-6)
    assert info.num_tasks == 16  # ceil(1000 / 64) blocks of rows, the last one 40 rows
    assert [k.name for k in gelu.program().kernels] == ["gelu_rows"]
