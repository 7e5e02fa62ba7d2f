"""Orchestration features end to end, sim against interp: intermediate tensors, explicit deps
and task names, run-time branches on indices, integer indexing, dump tags, nested loops,
integer scalars and index arithmetic."""

import pytest
import torch
from helpers import line_of
from orchestration_programs import F, features, scale

import tilescope as ts

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run


def test_features_sim_matches_interp_and_torch():
    prog = features.compile()
    x = torch.randn(4, 8)
    results = {}
    for platform in ("sim", "interp"):
        out = torch.ones(4, 8)
        idx = torch.zeros(6, 8)
        info = prog.run(x, out, idx, 0.5, platform=platform)
        assert info.num_tasks == 8 + 6
        results[platform] = (out, idx)
    expected_out = torch.ones(4, 8)
    expected_out[0::2] += x[0::2] * 0.5
    expected_out[1::2] += x[1::2]
    expected_idx = torch.tensor([0, 0, 1, 10, 10, 11], dtype=torch.float32)[:, None].expand(6, 8)
    for platform, (out, idx) in results.items():
        torch.testing.assert_close(out, expected_out, msg=platform)
        torch.testing.assert_close(idx, expected_idx, msg=platform)


def test_generated_orchestration_reads_like_the_source():
    cpp = next((features.compile().work_dir / "orchestration").glob("*.cpp")).read_text()
    assert 'ts::TensorHandle tmp = orch.create_tensor(TS_F32, {4, 8}, "tmp");' in cpp
    assert "orch.dump_tag(tmp);" in cpp
    line = line_of(features, 'name="scale_row"')
    assert f'ts::Task task = orch.task(FUNC_SCALE, "scale_row", "orchestration_programs.py:{line}");' in cpp
    assert "task.add_input(x.slice({{r, r + 1}, {0, 8}}).squeeze({0}), {8});" in cpp
    assert "task.depends_on(t);" in cpp
    assert "if (ts::floormod(r, 2) == 0) {" in cpp
    assert "task.add_scalar(TS_I32, a * 10 + ts::floordiv(b, 2));" in cpp


@ts.jit
def bad_slice(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], n: ts.Scalar[ts.i32]):
    for r in ts.range(0, 4):
        scale(x[r + n, :], y[r, :], 1.0)


@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_out_of_bounds_dynamic_slice_is_a_clear_runtime_error(platform):
    prog = bad_slice.compile()
    with pytest.raises(
        ts.RuntimeFailure, match=r"(outside|out of bounds).*\[4, 8\]|\[4, 8\].*(outside|out of)"
    ):
        prog.run(torch.randn(4, 8), torch.zeros(4, 8), 1, platform=platform)
