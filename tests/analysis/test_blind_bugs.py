"""`tilescope triage` on every blind-written bug of tests/blind_bugs: it names the category, the
kernel, the op and the DSL line of the mistake. A bug it does not name yet is listed in MISSES
with what triage says instead; the list is strict (a bug that becomes named fails until it is
taken off), so it only ever shrinks."""

import contextlib
import io

import pytest
from blind_bugs.all import BUGS
from blind_bugs.score import build, triage_named

# name -> what triage names instead (category kernel op line), as of the last measurement
MISSES: dict[str, str] = {
    "decay_scan_carry_not_decayed": "algorithm decay_scan_rows matmul reductions.py:217 (the add on that line)",
    "moe_combine_slot_not_token": "algorithm add_row add scans_and_gathers.py:114 (the add that accumulates the row an "
    "orchestration read misplaces)",
    "w8a16_scale_wrong_axis": "algorithm w8a16_linear_tile matmul blocks.py:100 (the matmul the scale multiplies "
    "afterwards)",
    "mqa_left_pad_block_nan": "nan mqa_decode_seq sub blocks.py:262 (exp(m - m_new) with both -inf: the op that makes "
    "the NaN, where the -inf mask is written)",
    "argmax_chunk_index_no_offset": "algorithm argmax_rows row_max blocks.py:752 (the max the index is compared with)",
    "mean_pool_tail_reads_padding": "algorithm mean_pool_seq col_sum blocks.py:809 (the sum of the unmasked tile, not "
    "its load)",
    "alibi_docs_running_max_neg_inf": "nan alibi_doc_attention_block sub repairs.py:412 (exp(-inf - -inf): the op that "
    "makes the NaN, not the -inf the running max starts from)",
    "welford_merge_counts_swapped": "algorithm welford_chunk col_sum repairs.py:480 (the chunk's sum that feeds the merge, "
    "not the merge's swapped count)",
    "repetition_penalty_branches_swapped": "algorithm penalize_logits gt repairs.py:553 (the line is right; the comparison "
    "is named, not the where whose branches are swapped)",
    "mlm_position_from_batch_column": "algorithm mlm_logits_block mul repairs.py:839 (the product of the gathered position, "
    "not the load from the wrong column)",
}


def _params():
    for bug in BUGS:
        marks = [pytest.mark.xfail(strict=True, reason=f"not named yet: {MISSES[bug.name]}")] if bug.name in MISSES else []
        yield pytest.param(bug, id=bug.name, marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(_params()))
def test_triage_names_the_mistake(bug):
    with contextlib.redirect_stdout(io.StringIO()):
        work = build(bug)
    named = triage_named(bug, work)
    assert named.hits(bug) == {"category": True, "kernel": True, "op": True, "line": True}, (
        f"{bug.name} ({bug.what}): triage named {named.category} {named.kernel} {named.op} {named.line}; "
        f"the mistake is {bug.category} {bug.kernel} {bug.op} at {bug.line[1]!r}"
    )
