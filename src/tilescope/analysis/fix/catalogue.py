"""The catalogue of repairs ``triage --fix`` tries: one ``Rule`` per kind of real kernel bug.

Each rule names the bug class it stands for (the fixes public trackers of attention, MoE,
quantized matmul, RoPE and normalization kernels are full of), an example of its edit, the
verdicts it answers first, and where it applies: at the culprit's statement, or at the
statements that feed it (a NaN or a precision loss is made upstream of where it shows). Its
edits are a pure function of the parsed DSL source and those lines (``fix.rules``,
``fix.index_rules``, ``fix.operand_rules``).

Every rule applies at the culprit's line, those answering the verdict first; when the culprit
names no line, or no candidate there makes the outputs match, every rule applies over the
statements of the kernels and calls upstream of the wrong outputs (``fix.search``). The screening
on the interpreter decides which edits are worth compiling: a rule proposes every form of its
repair. docs/triage.md's catalogue table lists the rules (a test keeps the two the same).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilescope.analysis.fix import index_rules as ix
from tilescope.analysis.fix import operand_rules as op
from tilescope.analysis.fix import rules
from tilescope.analysis.fix.edit import Edit, Source


@dataclass(frozen=True)
class Rule:
    """One kind of repair: ``bug_class`` (the real bug it stands for), an ``example`` edit
    (before, after), the verdicts it answers first (``categories``, None: any; ``ops``: the
    culprit's op, None: any), where it applies (``at``: ``statement`` or ``feeding``) and its
    ``edits(src, lines, op)``."""

    name: str
    bug_class: str
    example: tuple[str, str]
    categories: tuple[str, ...] | None
    ops: tuple[str, ...] | None
    at: str
    edits: Callable[[Source, list[int], str], list[Edit]]

    def answers(self, category: str, culprit_op: str) -> bool:
        """Whether a verdict of ``category`` at ``culprit_op`` is this rule's to answer first."""
        return (self.categories is None or category in self.categories) and (
            self.ops is None or culprit_op in self.ops)  # fmt: skip

    def rank(self, category: str, culprit_op: str) -> int:
        """How closely the rule answers a verdict: 0 it names the culprit's op, 1 it answers any op
        of the verdict's category, 2 it does not answer it (its edits are tried after)."""
        if not self.answers(category, culprit_op):
            return 2
        return 0 if self.ops is not None else 1


def _lines(fn: Callable[[Source, list[int]], list[Edit]]) -> Callable[[Source, list[int], str], list[Edit]]:
    return lambda src, lines, _op: fn(src, lines)


_ALG = ("algorithm",)
_NUM = ("nan", "precision")

CATALOGUE: tuple[Rule, ...] = (
    Rule("cast mode", "a cast rounding the wrong way (trunc or floor where the reference rounds to nearest)",
         ('ts.cast(t * inv, ts.i8, mode="trunc")', 'ts.cast(t * inv, ts.i8, mode="rint")'), None, ("cast",),
         "statement", _lines(rules.cast_mode_edits)),
    Rule("comparison", "a mask's comparison too strict, too loose or reversed (causal and padding masks, thresholds)",
         ("ts.where(k_pos < q_pos, s, -inf)", "ts.where(k_pos <= q_pos, s, -inf)"), None,
         ("lt", "le", "gt", "ge", "eq", "ne", "where"), "statement", _lines(ix.comparison_edits)),
    Rule("iota offset", "a block's mask built from a block-local iota, missing the block's offset",
         ("hit = ts.iota([1, C]) == lab", "hit = ts.iota([1, C]) + c == lab"), None, None, "statement",
         _lines(ix.iota_offset_edits)),
    Rule("tail mask", "the tail block loaded or stored whole: no valid= (reads padding or past the end), "
         "or filled with 0 under a max", ("ts.load(x, [t, 0], [B, D])", "ts.load(x, [t, 0], [B, D], valid=(min(n - t, B), D))"),
         None, ("load", "store", "col_sum", "row_sum", "row_max", "col_max"), "statement", _lines(ix.tail_mask_edits)),
    Rule("bound off by one", "a run-time bound one off: n // B for (n + B - 1) // B, blk + 1, min(a - 1, b), a loop "
         "stopping a block short", ("ts.range(0, n // B)", "ts.range(0, (n + B - 1) // B)"), None, ("range", "call"),
         "statement", _lines(ix.bound_edits)),
    Rule("swapped names", "two same-shaped operands exchanged (q for k, weight for bias, gate for up, offsets "
         "in the wrong order)", ("layernorm(x, bias, weight, y)", "layernorm(x, weight, bias, y)"), None, None,
         "statement", _lines(ix.swapped_name_edits)),
    Rule("sibling name", "a name for its sibling (n_a for n_b, x0 for x1): the same-shaped value of the other side",
         ("mean_a + delta * n_a / n", "mean_a + delta * n_b / n"), None, None, "statement",
         _lines(ix.sibling_name_edits)),
    Rule("loop variable swapped", "an index stepping with the wrong loop's variable (a block written where another "
         "belongs)", ("bias[:, r : r + B]", "bias[:, c : c + B]"), _ALG, ("call", "load", "store"), "statement",
         _lines(rules.loop_variable_edits)),
    Rule("sibling slice", "one argument of a call sliced with a stale index, where its siblings are right",
         ("gamma[c0 : c0 + G], beta[n * G : n * G + G]", "gamma[c0 : c0 + G], beta[c0 : c0 + G]"), _ALG, ("call",),
         "statement", _lines(ix.sibling_slice_edits)),
    Rule("shifted slice", "a slice one element over (a cache slot early, labels not shifted)",
         ("k_cache[pos - 1 : pos - 1 + n]", "k_cache[pos : pos + n]"), _ALG, ("call",), "statement",
         _lines(ix.shifted_slice_edits)),
    Rule("stride", "a call's slices of one tensor stepping with stride 1 where its blocks are 2 apart",
         ("pool(x[n, i], x[n, i + 1], y[n, i])", "pool(x[n, 2 * i], x[n, 2 * i + 1], y[n, i])"), _ALG, ("call",),
         "statement", _lines(ix.stride_edits)),
    Rule("index clamp", "an index read past its table: no clamp, or no mask on the ids outside a shard",
         ("ts.load_rows(emb, local, D)", "ts.load_rows(emb, ts.where(keep, local, 0), D)"), None,
         ("load_rows",), "statement", _lines(ix.clamp_edits)),
    Rule("offset", "a constant offset where the loop's block belongs, a reversed index, an index read from the "
         "neighbouring column", ("ts.load(res, [0, 0], [M, N])", "ts.load(res, [0, n], [M, N])"), _ALG,
         ("load", "store", "load_rows"), "statement", _lines(ix.offset_edits)),
    Rule("sibling op", "a reduction of the wrong kind or axis, an operator for its sibling, max for min (at the "
         "culprit's op; in the wider search, at every one)",
         ("mx = ts.col_max(t)", "mx = ts.row_max(t)"), _ALG, None, "statement",
         lambda src, lines, culprit_op: (rules.sibling_op_edits(src, lines, culprit_op) if culprit_op
                                         else rules.every_sibling_edits(src, lines))),
    Rule("sibling helper", "a helper call for its sibling on the lines that feed a NaN (a running min for a max)",
         ("m = ts.minimum(m, r)", "m = ts.maximum(m, r)"), None, None, "feeding", _lines(rules.sibling_call_edits)),
    Rule("transpose", "a matmul missing transpose_b=True (weights stored [N, K]), or its operands exchanged",
         ("ts.matmul(a, w)", "ts.matmul(a, w, transpose_b=True)"), _ALG, ("matmul",), "statement",
         _lines(op.transpose_edits)),
    Rule("broadcast axis", "a per-channel scale broadcast over the wrong axis ([N, 1] where [1, N] belongs)",
         ("acc * sc", "acc * ts.transpose(sc)"), _ALG, ("mul", "div", "add", "sub"), "statement",
         _lines(op.broadcast_edits)),
    Rule("epilogue order", "an epilogue applied in the wrong order (activation before the bias, alpha * (a @ b) + "
         "bias for alpha * (a @ b + bias))", ("ts.gelu(acc) + bias", "ts.gelu(acc + bias)"), _ALG, None, "statement",
         _lines(op.epilogue_edits)),
    Rule("constant", "a size constant where another belongs, an attention scale of 1 / d for 1 / sqrt(d), a stray "
         "factor", ("total * (1.0 / CHUNK)", "total * (1.0 / COLS)"), _ALG, ("mul", "div"), "statement",
         _lines(op.constant_edits)),
    Rule("accumulator", "an accumulator overwritten in every iteration of its loop instead of added to (the K loop "
         "of a GEMM)", ("acc = ts.matmul(a, b)", "acc = acc + ts.matmul(a, b)"), _ALG, ("matmul", "add", "row_sum",
         "col_sum"), "statement", _lines(op.accumulator_edits)),
    Rule("-inf guard", "an online softmax without the -inf guard: exp(-inf - -inf) is NaN on a fully masked block",
         ("p = ts.exp(s - m_new)", 'p = ts.exp(s - ts.where(m_new == float("-inf"), 0.0, m_new))'), ("nan",), None,
         "feeding", _lines(op.inf_guard_edits)),
    Rule("missing epsilon", "a square root, log or division without its epsilon or floor",
         ("inv = ts.rsqrt(ms)", "inv = ts.rsqrt(ms + eps)"), ("nan",), None, "feeding", _lines(op.missing_guard_edits)),
    Rule("exp without the max", "a softmax's exp without the max subtracted: exp overflows",
         ("e = ts.exp(t)", "e = ts.exp(t - ts.row_max(t))"), _NUM, None, "feeding", _lines(rules.stable_exp_edits)),
    Rule("variance by cancellation", "a variance as E[x^2] - E[x]^2, which cancels (and goes negative)",
         ("ts.row_sum(t * t) * c - m * m", "ts.row_sum((t - m) * (t - m)) * c"), _NUM, None, "feeding",
         _lines(rules.stable_variance_edits)),
    Rule("narrow accumulation", "an accumulation in a narrow dtype: the cast after the reduction, operands "
         "narrowed before a matmul, an f16 accumulator", ("ts.cast(ts.col_sum(t), ts.f32)", "ts.col_sum(ts.cast(t, ts.f32))"),
         ("precision", "nan"), None, "feeding", _lines(op.narrow_edits)),
)  # fmt: skip
"""Every rule, in the order its edits are tried when the interpreter cannot screen them."""

OTHER_REPAIRS = (
    ("store loop bound", "a store loop stopping a block short: part of the Out param never written",
     ("ts.range(0, W - 64, 64)", "ts.range(0, W, 64)")),
    ("orchestration loop", "an orchestration loop one step short: no task is given the last region",
     ("ts.range(0, R - B, B)", "ts.range(0, R, B)")),
    ("InOut", "an Out param that the kernel reads (a compile error): declare it InOut",
     ("y: ts.Out[[16, 64], ts.f32]", "y: ts.InOut[[16, 64], ts.f32]")),
    ("hand edit", "a hand edit of the build's C++: the line as the generator writes it", ("0.25f", "0.5f")),
)
"""The repairs made from a finding rather than at a line: an unwritten region, a compile error,
an edited build (``fix.candidates``)."""
