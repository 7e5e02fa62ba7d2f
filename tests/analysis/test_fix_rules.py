"""The fix rules on source text alone (no compile): the edits each proposes, on lines as Python
counts them, with non-ASCII text, wrapped statements and trailing commas."""

from __future__ import annotations

import pytest

from tilescope.analysis.fix import rules
from tilescope.analysis.fix.edit import Edit, Source, loop_bound_edits


def src(text: str) -> Source:
    return Source("k.py", text)


def afters(edits) -> list[str]:
    return [e.after.strip() for e in edits]


def test_a_form_feed_is_not_a_line_break_for_the_edit_or_its_line():
    text = "import tilescope as ts\n\x0c\ndef k(t):\n    total = ts.row_max(t)  # é\n    return total\n"
    s = src(text)
    (first, *_) = rules.sibling_op_edits(s, [4], "row_max")
    assert first.line == 4 and first.after == "    total = ts.row_sum(t)  # é"
    assert first.apply(text) == text.replace("row_max", "row_sum")


def test_edits_keep_crlf_line_breaks_and_refuse_a_line_that_changed():
    text = "a = 1\r\nb = ts.row_max(t)\r\n"
    e = rules.sibling_op_edits(src(text), [2], "row_max")[0]
    assert e.apply(text) == "a = 1\r\nb = ts.row_sum(t)\r\n"
    with pytest.raises(ValueError, match="is not `b = ts.row_max"):
        e.apply("a = 1\nb = 2\n")


def test_non_ascii_before_the_node_keeps_the_offsets_right():
    text = "def k(t):\n    é = 1; y = ts.cast(t, ts.bf16, mode=\"trunc\")\n"
    assert afters(rules.cast_mode_edits(src(text), [2]))[0] == 'é = 1; y = ts.cast(t, ts.bf16, mode="rint")'


def test_a_cast_without_a_mode_gets_one_after_its_last_argument_even_with_a_trailing_comma():
    text = "def k(t):\n    y = ts.cast(t, ts.bf16,)\n"
    got = afters(rules.cast_mode_edits(src(text), [2]))
    assert got[0] == 'y = ts.cast(t, ts.bf16, mode="round",)'
    assert len(got) == 4  # every mode but the default rint
    # a mode the code computes is not a literal to change
    assert rules.cast_mode_edits(src("def k(t, m):\n    y = ts.cast(t, ts.bf16, mode=m)\n"), [2]) == []


def test_a_wrapped_call_gets_its_loop_variable_swaps_on_the_lines_it_spans():
    text = ("def p(x, y):\n    for i in ts.range(0, 4):\n        for j in ts.range(0, 4):\n            k(\n"
            "                x[i * 16 : i * 16 + 16, i * 16 : i * 16 + 16],\n"
            "                y[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16],\n            )\n")  # fmt: skip
    s = src(text)
    edits = rules.loop_variable_edits(s, s.statement_lines(4))
    assert {e.line for e in edits} == {5, 6}
    assert "x[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16]," in afters(edits)


def test_variance_by_cancellation_is_recognised_through_the_names_that_feed_it():
    text = ("def k(t):\n    m = ts.row_sum(t) * (1.0 / 64)\n    sq = ts.row_sum(t * t) * (1.0 / 64)\n"
            "    var = ts.row_sum(t * t) * (1.0 / 64) - m * m\n    y = ts.rsqrt(var + 1e-5)\n")  # fmt: skip
    s = src(text)
    (e,) = rules.stable_variance_edits(s, s.feeding(5))
    assert e.line == 4 and e.after.strip() == "var = ts.row_sum((t - m) * (t - m)) * (1.0 / 64)"
    # a difference of two unrelated sums is left alone
    other = src("def k(t, u):\n    m = ts.row_sum(u) * 0.5\n    v = ts.row_sum(t * t) * 0.5 - m * m\n")
    assert rules.stable_variance_edits(other, [3]) == []


def test_exp_of_a_shift_by_a_running_max_is_not_rewritten():
    text = "def k(t, m):\n    m_new = ts.maximum(m, ts.row_max(t))\n    e = ts.exp(t - m_new)\n"
    s = src(text)
    assert rules.stable_exp_edits(s, s.feeding(3)) == []
    assert afters(rules.stable_exp_edits(src("def k(t):\n    e = ts.exp(t * 2.0)\n"), [2]))[0] == (
        "e = ts.exp((t * 2.0) - ts.row_max((t * 2.0)))")


def test_inout_for_a_kernel_defined_inside_a_builder_function():
    text = "def build():\n    @ts.kernel\n    def acc(x: ts.Tensor[[4], ts.f32], y: ts.Out[[4], ts.f32]):\n        pass\n"
    (e,) = rules.inout_edits(src(text), "acc", "y")
    assert e.line == 3 and "y: ts.InOut[[4], ts.f32]" in e.after
    assert rules.inout_edits(src(text), "acc", "x") == []


def test_inout_for_a_kernel_named_apart_from_its_def_is_found_by_the_line_of_the_read():
    text = (
        "def build():\n    @ts.kernel(name='acc_4')\n    def acc(x: ts.Tensor[[4], ts.f32], y: ts.Out[[4], ts.f32]):\n"
        "        t = ts.load(y, [0], [4])\n"
    )
    assert rules.inout_edits(src(text), "acc_4", "y") == []  # no function of that name
    (e,) = rules.inout_edits(src(text), "acc_4", "y", line=4)
    assert e.line == 3 and "y: ts.InOut[[4], ts.f32]" in e.after


def test_a_loop_bound_with_literal_numbers_gives_each_distinct_stop_once():
    text = "def k(x, y):\n    for c in ts.range(0, 256 - 64, 64):\n        pass\n"
    got = afters(loop_bound_edits(src(text), 2, 256, 64))
    assert got == ["for c in ts.range(0, 256, 64):"]


def test_the_size_of_an_edit_is_the_characters_it_changes():
    assert Edit("f", 1, "ts.row_max(t)", "ts.row_sum(t)", "").size == 3
    assert Edit("f", 1, "range(0, W - 64, 64)", "range(0, W, 64)", "").size == 5


def test_the_exps_of_one_value_on_one_line_are_shifted_together_first():
    s = src("def k(t):\n    y = ts.exp(t) / ts.row_sum(ts.exp(t))\n")
    got = afters(rules.stable_exp_edits(s, [2]))
    assert got[0] == "y = ts.exp(t - ts.row_max(t)) / ts.row_sum(ts.exp(t - ts.row_max(t)))"
    assert "y = ts.exp(t - ts.row_max(t)) / ts.row_sum(ts.exp(t))" in got


def test_an_exp_wrapped_over_lines_is_still_shifted():
    s = src("def k(t):\n    e = ts.exp(\n        t\n    )\n")
    assert afters(rules.stable_exp_edits(s, s.statement_lines(2)))[0] == "t - ts.row_max(t)"


def test_a_loop_bound_with_a_named_step_uses_the_start_and_step_the_ir_folded():
    text = "def k(x, y):\n    for c in ts.range(0, 96, CH):\n        pass\n"
    assert loop_bound_edits(src(text), 2, 128, 32) == []
    assert afters(loop_bound_edits(src(text), 2, 128, 32, known=(0, 32))) == ["for c in ts.range(0, 128, CH):"]


def test_the_catalogue_orders_the_rules_answering_a_verdict_first():
    from tilescope.analysis.fix.catalogue import CATALOGUE

    def names(category, op):
        return [r.name for r in CATALOGUE if r.answers(category, op)]

    assert names("precision", "cast")[0] == "cast mode" and "sibling helper" in names("precision", "cast")
    assert "narrow accumulation" in names("precision", "row_sum") and "cast mode" not in names("precision", "row_sum")
    assert names("algorithm", "load")[:3] == ["iota offset", "tail mask", "swapped names"]
    assert "offset" in names("algorithm", "load") and "transpose" not in names("algorithm", "load")
    assert "-inf guard" in names("nan", "sub") and "-inf guard" not in names("algorithm", "sub")
    assert {r.at for r in CATALOGUE} == {"statement", "feeding"}
    assert len({r.name for r in CATALOGUE}) == len(CATALOGUE)


def test_an_edit_that_changes_nothing_is_never_a_candidate():
    from tilescope.analysis.fix.candidates import Found

    found = Found()
    line = "    store(z, {0, 0}, t + 1.0f);  // @ k.py:3"
    found.add([Edit("k.cpp", 3, line, line, "same"), Edit("k.cpp", 3, line, line.replace("  //", " //"), "spacing"),
               Edit("k.cpp", 3, line, line.replace("1.0f", "2.0f"), "a change")], "build", "hand edit")  # fmt: skip
    assert [c.edit.why for c in found.candidates] == ["a change"]
    assert found.rules == {"hand edit": 1}
