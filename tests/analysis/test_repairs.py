"""Each rule of the repair catalogue on a realistic seeded bug (tests/blind_bugs, written by
someone who had not read the analysis code): `triage --fix` proposes the rule's edit (the
`after` text), verified on the saved data and on a second input set, as a diff `git apply`
takes, and the user's file is byte-identical afterwards.

(`sibling helper`, `variance by cancellation` and `accumulator` are covered by
tests/analysis/test_fix.py on the programs of tests/fix_programs.py; the repairs made from a
finding rather than a line, there too.)"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from blind_bugs.all import BUGS
from blind_bugs.score import build

from tilescope.analysis.fix.catalogue import CATALOGUE
from tilescope.analysis.triage.triage_command import triage

REPAIRS = {  # rule -> (bug, the line as the repair writes it)
    "cast mode": ("quantize_i8_trunc", 'ts.store(q, [0, 0], ts.cast(t * inv, ts.i8, mode="rint"))'),
    "comparison": ("cumsum_tri_strict", "tri = ts.where(src <= dst, ones, 0.0)"),
    "iota offset": ("xent_chunk_offset", "hit = ts.iota([1, XE_CHUNK]) + c == lab"),
    "tail mask": ("embedding_bag_tail_reads_row_zero", "rows = ts.load_rows(weight, idx, EB_D, valid=cnt)"),
    "bound off by one": ("packed_layernorm_floor_blocks", "for i in ts.range(0, (n_tokens + LN_BT - 1) // LN_BT):"),
    "swapped names": ("layernorm_affine_swapped",
                      "layernorm_affine(x[r : r + LA_BLOCK, :], weight, bias, y[r : r + LA_BLOCK, :], eps)"),
    "sibling name": ("welford_merge_counts_swapped", "mean_a = mean_a + delta * n_b / n"),
    "loop variable swapped": ("bias_silu_bias_row_index",
                              "bias_silu_tile(x[r : r + BA_BR, c : c + BA_BC], bias[:, c : c + BA_BC], "
                              "y[r : r + BA_BR, c : c + BA_BC])"),
    "sibling slice": ("rope_sin_table_no_offset",
                      "rope_tokens(x[p : p + RP_BLOCK, :, :], cos[p : p + RP_BLOCK, :], sin[p : p + RP_BLOCK, :], "
                      "y[p : p + RP_BLOCK, :, :])"),
    "shifted slice": ("kv_append_one_slot_early",
                      "k_cache[b, h, pos : pos + KV_NEW, :], v_cache[b, h, pos : pos + KV_NEW, :])"),
    "stride": ("avg_pool_rows_stride_one",
               "avg_pool_2x2_row(x[n, 2 * i, :, :], x[n, 2 * i + 1, :, :], y[n, i, :, :])"),
    "index clamp": ("vocab_shard_gather_unclamped", "rows = ts.load_rows(emb, ts.where(keep, local, 0), VP_D)"),
    "offset": ("proj_residual_missing_chunk_offset", "r = ts.load(res, [0, n], [RS_BM, RS_BN])"),
    "sibling op": ("softmax_max_wrong_axis", "mx = ts.row_max(t)"),
    "transpose": ("similarity_missing_transpose", "ts.store(s, [0, 0], ts.matmul(xt, yt, transpose_b=True) * inv_temp)"),
    "broadcast axis": ("w8a8_token_scale_wrong_axis",
                       "ts.store(y, [0, 0], ts.cast(acc, ts.f32) * ts.transpose(sx_t) * sw_t)"),
    "epilogue order": ("linear_gelu_before_bias", "ts.store(y, [0, 0], ts.gelu(acc + bias))"),
    "constant": ("layernorm_mean_divisor", "mean = total * (1.0 / LN_COLS)"),
    "-inf guard": ("alibi_docs_running_max_neg_inf", "m = ts.full([AL_BQ, 1], -1e30, ts.f32)"),
    "missing epsilon": ("rmsnorm_missing_eps", "inv = ts.rsqrt(ms + eps)"),
    "exp without the max": ("softmax_no_max_subtraction", "e = ts.exp(t - ts.row_max(t))"),
    "narrow accumulation": ("bias_grad_bf16_chunk_sums", "acc = acc + ts.col_sum(ts.cast(t, ts.f32))"),
}  # fmt: skip
ELSEWHERE = {"sibling helper", "variance by cancellation", "accumulator"}


def test_every_rule_has_its_realistic_bug():
    assert set(REPAIRS) | ELSEWHERE == {r.name for r in CATALOGUE}


@pytest.mark.slow
@pytest.mark.parametrize("rule", sorted(REPAIRS))
def test_the_rule_repairs_its_bug_verified_on_two_input_sets(rule, tmp_path):
    name, after = REPAIRS[rule]
    bug = next(b for b in BUGS if b.name == name)
    fn = getattr(bug.line[0], "fn", bug.line[0])
    source = Path(sys.modules[fn.__module__].__file__)
    before = source.read_bytes()
    with contextlib.redirect_stdout(io.StringIO()):
        work = build(bug)
    fix = triage(work, fix=True, progress=lambda _: None).fix
    assert fix.verified is True and fix.kind == "dsl" and fix.rule == rule, (fix.rule, fix.why_none, fix.edit)
    assert fix.edit.after.strip() == after and fix.also == []
    assert fix.verified_on == "the saved data and a second input set (seed 1)"
    assert "on the second input set (seed 1): every output within" in fix.comparison
    assert source.read_bytes() == before  # the user's file is only read
    # the diff is the edit, and git applies it to a copy of the file
    copy = tmp_path / "repo"
    (copy / "tests" / "blind_bugs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    (copy / "tests" / "blind_bugs" / source.name).write_bytes(before)
    patch = tmp_path / "fix.diff"
    patch.write_text(fix.diff)
    assert (work / "dfx_outputs" / "triage" / "fix.diff").read_text() == fix.diff
    subprocess.run(["git", "apply", str(patch)], cwd=copy, check=True)
    lines = (copy / "tests" / "blind_bugs" / source.name).read_text().splitlines()
    assert lines[fix.edit.line - 1].strip() == after


NEW_USER = {  # the three bugs a new user wrote into their own programs, and their repairs
    "xent_chunk_offset": ("hit = ts.iota([1, XE_CHUNK]) + c == lab",),
    # c0 is g * GN_CPG: either spelling is the group's channel offset
    "groupnorm_beta_slice": (
        "group_norm_group(x[n, c0 : c0 + GN_CPG, :], gamma[c0 : c0 + GN_CPG, :], beta[c0 : c0 + GN_CPG, :],",
        "group_norm_group(x[n, c0 : c0 + GN_CPG, :], gamma[c0 : c0 + GN_CPG, :], "
        "beta[g * GN_CPG : g * GN_CPG + GN_CPG, :],",
    ),
    "im2col_swapped_khkw": ("patch = ts.load(xp, [kh, kw, 0], [1, CV_W, CV_C])",),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEW_USER))
def test_a_new_users_bug_gets_its_fix_from_one_triage_fix(name):
    bug = next(b for b in BUGS if b.name == name)
    with contextlib.redirect_stdout(io.StringIO()):
        work = build(bug)
    rep = triage(work, fix=True, progress=lambda _: None)
    assert rep.fix.verified is True and rep.fix.verified_on == "the saved data and a second input set (seed 1)"
    assert rep.fix.edit.after.strip() in NEW_USER[name]
    assert f"git apply {work / 'dfx_outputs' / 'triage' / 'fix.diff'}" in " ".join(rep.next)
