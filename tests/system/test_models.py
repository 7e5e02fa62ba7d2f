"""Every model on sim and interp against its torch golden, through the harness."""

import pytest
import torch

from tilescope.harness import run_jit

import argmax
import conv2d
import conv_transpose2d
import cross_entropy
import cumsum
import flash_attention
import group_norm
import layernorm
import matmul
import mla_decode
import moe_expert
import paged_attention_decode
import pool2d
import rms_norm
import rope
import softmax
import vector_dag
from row_tiling import row_tiling

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

CASES = {
    "vector_dag": (vector_dag.vector_dag, vector_dag.SPECS, vector_dag.golden, 1e-5, 1e-6),
    "rms_norm": (rms_norm.rms_norm, rms_norm.specs(), rms_norm.golden, 1e-5, 1e-5),
    "rms_norm_single_pass": (
        rms_norm.build(256, 512, **row_tiling(256, 512)),
        rms_norm.specs(256, 512),
        rms_norm.golden,
        1e-5,
        1e-5,
    ),
    "softmax": (softmax.softmax, softmax.specs(), softmax.golden, 1e-5, 1e-6),
    "softmax_single_pass": (
        softmax.build(256, 512, **row_tiling(256, 512)),
        softmax.specs(256, 512),
        softmax.golden,
        1e-5,
        1e-6,
    ),
    "matmul_f32": (matmul.matmul, matmul.specs(), matmul.golden, 1e-4, 1e-3),
    "matmul_bf16": (matmul.matmul_bf16, matmul.specs(dtype="bf16"), matmul.golden, 1e-4, 1e-3),
    # M, N, K not multiples of the 64 tile: one kernel, ragged blocks at the edges
    "matmul_ragged": (matmul.matmul_ragged, matmul.specs(200, 136, 100), matmul.golden, 1e-4, 1e-3),
    "matmul_ragged_bf16": (
        matmul.build_ragged(130, 70, 150, dtype="bf16"), matmul.specs(130, 70, 150, dtype="bf16"), matmul.golden, 1e-4, 1e-3
    ),
    "matmul_ragged_below_a_tile": (matmul.build_ragged(30, 20, 10), matmul.specs(30, 20, 10), matmul.golden, 1e-4, 1e-3),
    "layernorm": (layernorm.layernorm, layernorm.specs(), layernorm.golden, *layernorm.TOLERANCE["f32"]),
    "layernorm_chunked": (
        layernorm.build(512, 1024, chunk=256), layernorm.specs(512, 1024), layernorm.golden, *layernorm.TOLERANCE["f32"]
    ),
    "layernorm_bf16": (
        layernorm.layernorm_bf16, layernorm.specs(dtype="bf16"), layernorm.golden, *layernorm.TOLERANCE["bf16"]
    ),
    "rope": (rope.rope, rope.specs(), rope.golden, 1e-2, 1e-2),
    "flash_attention": (flash_attention.flash_attention, flash_attention.specs(), flash_attention.golden, 2e-2, 2e-2),
    "paged_attention_decode": (
        paged_attention_decode.paged_attention_decode,
        paged_attention_decode.specs(),
        paged_attention_decode.golden,
        2e-2,
        2e-2,
    ),
    "mla_decode": (mla_decode.mla_decode, mla_decode.specs(), mla_decode.golden, 2e-2, 2e-2),
    "moe_expert": (moe_expert.moe_expert, moe_expert.specs(), moe_expert.golden, 1e-2, 5e-3),
    **{f"conv2d_{c}": (*conv2d.case(c), *conv2d.TOLERANCE) for c in conv2d.CONFIGS},
    **{f"conv_transpose2d_{c}": (*conv_transpose2d.case(c), *conv_transpose2d.TOLERANCE) for c in conv_transpose2d.CONFIGS},
    **{f"pool2d_{c}": (*pool2d.case(c), *pool2d.TOLERANCE) for c in pool2d.CONFIGS},
    "group_norm": (
        group_norm.build(2, 32, 8, 12, groups=8), group_norm.specs(2, 32, 8, 12), group_norm.golden_for(8), 1e-5, 1e-5
    ),
    "cross_entropy": (  # 256-class chunks, the last one ragged; about 1 target in 8 ignored
        cross_entropy.build(64, 1000, block=16, chunk=256), cross_entropy.specs(64, 1000), cross_entropy.golden, 1e-5, 1e-6
    ),
    "cross_entropy_whole_rows": (
        cross_entropy.build(64, 300, block=16, chunk=None), cross_entropy.specs(64, 300), cross_entropy.golden, 1e-5, 1e-6
    ),
    "cross_entropy_all_ignored": (  # 0 / 0: NaN, as torch
        cross_entropy.build(32, 100, block=16, chunk=None),
        cross_entropy.specs(32, 100, ignored=1.0),
        cross_entropy.golden,
        1e-5,
        1e-6,
    ),
    "cumsum": (cumsum.build(64, 1024, block=16, chunk=256), cumsum.specs(64, 1024), cumsum.golden, 1e-6, 1e-6),
    "cumsum_reverse_exclusive": (
        cumsum.build(64, 1024, block=16, chunk=256, reverse=True, exclusive=True),
        cumsum.specs(64, 1024),
        cumsum.golden_for(reverse=True, exclusive=True),
        1e-6,
        1e-6,
    ),
    "argmax": (argmax.build(64, 4096, block=16, chunk=512), argmax.specs(64, 4096), argmax.golden, 0, 0),
}


@pytest.mark.parametrize("platform", ["sim", "interp"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_golden(name, platform, capsys):
    fn, specs, golden, rtol, atol = CASES[name]
    result = run_jit(fn, specs, golden_fn=golden, rtol=rtol, atol=atol, runtime_cfg={"platform": platform})
    out = capsys.readouterr().out
    assert result.passed, out
    assert result.error is None
    assert f"[PASS] {fn.name} on {platform}" in out
    assert result.num_tasks > 0
    for rep in result.comparisons:
        assert rep.mismatches == 0 and rep.max_abs_diff <= atol + rtol * 100
    assert (result.work_dir / "kernel_config.py").is_file()


def test_models_run_as_scripts(capsys):
    assert rms_norm.main(["-p", "sim", "--log-level", "info"]) == 0
    out = capsys.readouterr().out
    assert "[RUN] compile rms_norm … done" in out
    assert "[COMPARE] y: PASS" in out and "[PASS] rms_norm on sim" in out
    assert matmul.main(["-p", "interp", "--size", "70", "50", "40"]) == 0
    out = capsys.readouterr().out
    assert "[COMPARE] c: PASS  3500 elements match" in out and "[PASS] matmul_ragged on interp" in out


def test_the_ragged_matmul_is_one_kernel_whose_edge_tasks_are_ordered_after_their_neighbours():
    program = matmul.matmul_ragged.program()
    assert [k.name for k in program.kernels] == ["matmul_block"]
    prog = matmul.matmul_ragged.compile()
    a, b, c = torch.randn(200, 100), torch.randn(100, 136), torch.zeros(200, 136)
    info = prog.run(a, b, c, enable_dep_gen=True)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)
    # one task per block, ceil(200 / 64) x ceil(136 / 64); the window of C a block's task is given
    # ends at the tensor's end for the last row (column) of blocks
    windows = [(min(i, 200 - 64), min(j, 136 - 64)) for i in range(0, 200, 64) for j in range(0, 136, 64)]
    assert info.num_tasks == len(windows) == 12
    overlapping = {
        (p, s)
        for s, (i, j) in enumerate(windows)
        for p, (pi, pj) in enumerate(windows[:s])
        if abs(i - pi) < 64 and abs(j - pj) < 64
    }
    ordered = {(e.pred, e.succ) for e in info.report.edges}
    while True:  # every pair a chain of dependencies orders
        more = ordered | {(p, s) for p, m in ordered for m2, s in ordered if m == m2}
        if more == ordered:
            break
        ordered = more
    assert ordered == overlapping  # the edge tasks wait for the neighbours they overlap, and only those


def test_interp_float64_reference_is_closer_to_a_float64_golden():
    import torch

    from tilescope.harness.specs import generate

    prog = softmax.softmax.compile()
    inputs = generate(softmax.specs(), seed=3)
    ref = torch.softmax(inputs["x"].double(), dim=-1)
    errs = {}
    for f64 in (False, True):
        y = torch.zeros_like(inputs["y"])
        prog.run(inputs["x"], y, platform="interp", float64=f64)
        errs[f64] = (y.double() - ref).abs().max().item()
    assert errs[True] < errs[False]
