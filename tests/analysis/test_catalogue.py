"""The repair catalogue's rules, each a pure function of the source: for a line written with the
bug class it stands for, the repair is among its edits (and nothing it proposes is the line
unchanged); the catalogue table in docs/triage.md lists every rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilescope.analysis.fix import index_rules as ix
from tilescope.analysis.fix import operand_rules as op
from tilescope.analysis.fix.catalogue import CATALOGUE, OTHER_REPAIRS
from tilescope.analysis.fix.edit import Edit, Source, changed_op

KERNEL = '''import math
import tilescope as ts

def k(x, w: ts.Tensor[[W, 64], ts.f32], y, lab, n, eps):
    for c in ts.range(0, n, 64):
        for j in ts.range(0, 4):
            {line}
'''


def after(line: str, rule, **kw) -> list[str]:
    """The lines ``rule`` proposes for ``line`` written at the heart of a two-loop kernel."""
    text = KERNEL.format(line=line) + ("                pass\n" if line.endswith(":") else "")
    src = Source("k.py", text)
    edits = rule(src, [7], **kw)
    assert all(isinstance(e, Edit) and e.after != e.before for e in edits)
    return [e.after.strip() for e in edits]


CASES = [
    (ix.swapped_name_edits, "layer_norm(x, bias, weight, y)", "layer_norm(x, weight, bias, y)"),
    (ix.swapped_name_edits, "t = ts.load(w, [k0, n0], [16, 32])", "t = ts.load(w, [n0, k0], [16, 32])"),
    (ix.offset_edits, "r = ts.load(x, [0, 0], [16, 64])", "r = ts.load(x, [0, c], [16, 64])"),
    (ix.offset_edits, "wk = ts.load(w, [K - 1 - j, 0], [1, 64])", "wk = ts.load(w, [j, 0], [1, 64])"),
    (ix.offset_edits, "i = ts.load(lab, [0, 0], [16, 1])", "i = ts.load(lab, [0, 1], [16, 1])"),
    (ix.sibling_slice_edits, "g(x[j, c : c + 8], w[c : c + 8, :], y[j * 8 : j * 8 + 8, :])",
     "g(x[j, c : c + 8], w[c : c + 8, :], y[c : c + 8, :])"),
    (ix.shifted_slice_edits, "f(k[pos - 1 : pos - 1 + 4, :])", "f(k[pos : pos + 4, :])"),
    (ix.shifted_slice_edits, "f(lab[c : c + 64, :])", "f(lab[c + 1 : c + 1 + 64, :])"),
    (ix.bound_edits, "for i in ts.range(0, n // 64):", "for i in ts.range(0, (n + 64 - 1) // 64):"),
    (ix.bound_edits, "m = min(n - 1, 64)", "m = min(n, 64)"),
    (ix.bound_edits, "for i in ts.range(0, blk + 1):", "for i in ts.range(0, blk):"),
    (ix.tail_mask_edits, "t = ts.load(x, [c, 0], [64, 32])", "t = ts.load(x, [c, 0], [64, 32], valid=(min(n - c, 64), 32))"),
    (ix.tail_mask_edits, "t = ts.load(x, [0, c], [8, 64], valid=(8, m))",
     't = ts.load(x, [0, c], [8, 64], valid=(8, m), fill=float("-inf"))'),
    (ix.iota_offset_edits, "hit = ts.iota([1, 64]) == lab", "hit = ts.iota([1, 64]) + c == lab"),
    (ix.comparison_edits, "s = ts.where(ts.iota([1, 64]) + c < n, s, 0.0)", "s = ts.where(ts.iota([1, 64]) + c <= n, s, 0.0)"),
    (ix.comparison_edits, "y = ts.where(a > d, q, l)", "y = ts.where(a < d, q, l)"),
    (op.transpose_edits, "u = ts.matmul(a, b)", "u = ts.matmul(a, b, transpose_b=True)"),
    (op.transpose_edits, "u = ts.matmul(w, h, transpose_b=True)", "u = ts.matmul(h, w, transpose_b=True)"),
    (op.broadcast_edits, "y = acc * sc", "y = acc * ts.transpose(sc)"),
    (op.epilogue_edits, "y = ts.gelu(acc) + bias", "y = ts.gelu(acc + bias)"),
    (op.epilogue_edits, "y = alpha * acc + bias", "y = alpha * (acc + bias)"),
    (op.inf_guard_edits, "p = ts.exp(s - m_new)", 'p = ts.exp(s - ts.where(m_new == float("-inf"), 0.0, m_new))'),
    (op.inf_guard_edits, 's = ts.where(c >= pad, s, float("-inf"))', "s = ts.where(c >= pad, s, -1e30)"),
    (op.missing_guard_edits, "inv = ts.rsqrt(ms)", "inv = ts.rsqrt(ms + eps)"),
    (op.missing_guard_edits, "y = total / count", "y = total / ts.maximum(count, 1.0)"),
    (op.narrow_edits, "acc = acc + ts.cast(ts.col_sum(t), ts.f32)", "acc = acc + ts.col_sum(ts.cast(t, ts.f32))"),
    (op.narrow_edits, "s = ts.cast(ts.row_sum(a * b), ts.f32)", "s = ts.row_sum(ts.cast(a, ts.f32) * ts.cast(b, ts.f32))"),
    (op.narrow_edits, "acc = acc + ts.matmul(ts.cast(a, ts.f16), b)", "acc = acc + ts.matmul(a, b)"),
    (op.constant_edits, "mean = total * (1.0 / CHUNK) + 0 * COLS", "mean = total * (1.0 / COLS) + 0 * COLS"),
    (op.constant_edits, "s = ts.matmul(q, k) * (1.0 / D)", "s = ts.matmul(q, k) * (1.0 / math.sqrt(D))"),
    (op.constant_edits, "d = t - ts.row_mean(t) * 0.5", "d = t - ts.row_mean(t)"),
    (ix.sibling_name_edits, "mean_a = mean_a + delta * n_a / n + 0 * n_b", "mean_a = mean_a + delta * n_b / n + 0 * n_b"),
    (ix.stride_edits, "pool(x[j, c, :], x[j, c + 1, :], y[j, c, :])", "pool(x[j, 2 * c, :], x[j, 2 * c + 1, :], y[j, c, :])"),
    (ix.clamp_edits, "rows = ts.load_rows(w, lab, 64)", "rows = ts.load_rows(w, ts.minimum(ts.maximum(lab, 0), W - 1), 64)"),
    (op.epilogue_edits, "ts.store(y, [0, 0], r + g * acc + bias)", "ts.store(y, [0, 0], r + g * (acc + bias))"),
    (op.narrow_edits, "d = ts.cast(ts.row_sum(g * dy * x), ts.f32)",
     "d = ts.row_sum(ts.cast(g, ts.f32) * ts.cast(dy, ts.f32) * ts.cast(x, ts.f32))"),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "line", "repair"), CASES, ids=[f"{r.__name__}:{line}" for r, line, _ in CASES])
def test_a_rule_proposes_the_repair_of_its_bug_class(rule, line, repair):
    assert repair in after(line, rule)


def test_a_guarded_value_computed_and_not_read_is_read_where_its_source_is():
    text = "import tilescope as ts\n\ndef k(s, m, m_new):\n    m_safe = ts.where(m_new == 0, 0.0, m_new)\n    p = ts.exp(s - m_new)\n"
    src = Source("k.py", text)
    assert "p = ts.exp(s - m_safe)" in [e.after.strip() for e in op.inf_guard_edits(src, [5])]


def test_a_gather_gets_the_count_the_kernel_computed_and_the_mask_it_computed():
    text = ("import tilescope as ts\n\ndef k(w: ts.Tensor[[V, 8], ts.f32], ids, n):\n    for j in ts.range(0, n, 4):\n"
            "        cnt = min(n - j, 4)\n        keep = ids >= 0\n        rows = ts.load_rows(w, ids, 8)\n")
    src = Source("k.py", text)
    assert "rows = ts.load_rows(w, ids, 8, valid=cnt)" in [e.after.strip() for e in ix.tail_mask_edits(src, [7])]
    assert "rows = ts.load_rows(w, ts.where(keep, ids, 0), 8)" in [e.after.strip() for e in ix.clamp_edits(src, [7])]


def test_an_accumulator_overwritten_in_its_loop_is_added_to():
    text = "import tilescope as ts\n\ndef k(a, b):\n    acc = ts.zeros([8, 8], ts.f32)\n    for k in ts.range(0, 64, 8):\n        acc = ts.matmul(a, b)\n        t = ts.exp(a)\n"
    src = Source("k.py", text)
    assert [e.after.strip() for e in op.accumulator_edits(src, [6, 7])] == ["acc = acc + ts.matmul(a, b)"]


def test_rules_write_ops_with_the_files_own_alias():
    text = "import tilescope as tl\n\ndef k(acc, sc):\n    y = acc * sc\n"
    assert "y = acc * tl.transpose(sc)" in [e.after.strip() for e in op.broadcast_edits(Source("k.py", text), [4])]


def test_every_edit_keeps_the_rest_of_the_line():
    text = KERNEL.format(line="y = ts.gelu(acc) + bias  # the epilogue")
    for rule in CATALOGUE:
        for e in rule.edits(Source("k.py", text), [7], ""):
            assert e.after.endswith("# the epilogue") and e.after.startswith("            "), (rule.name, e.after)


@pytest.mark.parametrize(("before", "after_", "want"), [
    ("hit = ts.iota([1, C]) == lab", "hit = ts.iota([1, C]) + c == lab", "eq"),
    ("ci = ts.row_min(ts.where(t == m, ts.iota([B, C]), V))", "ci = ts.row_min(ts.where(t == m, ts.iota([B, C]) + c, V))", "where"),
    ("p = ts.load(xp, [kw, kh, 0], [1, W, C])", "p = ts.load(xp, [kh, kw, 0], [1, W, C])", "load"),
    ("norm(x[r : r + B, :], bias, weight, y)", "norm(x[r : r + B, :], weight, bias, y)", "call"),
    ("a = ts.exp(m_new - m)", "a = ts.exp(m - m_new)", "sub"),
    ("y = ts.cast(acc * sc, ts.bf16)", "y = ts.cast(acc * ts.transpose(sc), ts.bf16)", "mul"),
    ("mx = ts.col_max(t)", "mx = ts.row_max(t)", "col_max"),
])  # fmt: skip
def test_the_op_an_edit_changes(before, after_, want):
    src = Source("f.py", f"def f():\n    {before}\n")
    assert changed_op(src, Edit("f.py", 2, f"    {before}", f"    {after_}", "")) == want


def test_the_op_of_an_edit_inside_a_call_written_over_lines_and_of_a_loop_header():
    text = "def g():\n    for h in ts.range(0, A - B, B):\n        k(\n            sin[r : r + B, :], cos[r : r + B, :],\n            y)\n"
    src = Source("g.py", text)
    assert changed_op(src, Edit("g.py", 2, src.line(2), "    for h in ts.range(0, A, B):", "")) == "range"
    assert changed_op(src, Edit("g.py", 4, src.line(4), "            cos[r : r + B, :], sin[r : r + B, :],", "")) == "call"


def test_the_docs_table_lists_every_rule():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "triage.md").read_text()
    table = docs[docs.index("## The repair catalogue"):]
    for name in [r.name for r in CATALOGUE] + [name for name, _, _ in OTHER_REPAIRS]:
        assert f"| {name} |" in table, name
