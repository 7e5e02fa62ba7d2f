"""The DSL's operations. These are markers the front-end recognises by identity; calling one
from ordinary Python raises, because kernels and orchestrations are compiled, not executed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from tilescope.errors import TilescopeError


class DSLOp:
    """A DSL operation: ``kind`` says where it may appear ("kernel", "orch" or "both")."""

    def __init__(self, name: str, kind: str, signature: str, doc: str):
        self.name = name
        self.kind = kind
        self.signature = signature
        self.__doc__ = doc

    def __repr__(self) -> str:
        return f"ts.{self.name}"

    def __call__(self, *args, **kwargs):
        """Always raises a TilescopeError: DSL ops are compiled from source, never called."""
        where = {"kernel": "a @ts.kernel", "orch": "a @ts.jit function", "both": "@ts.kernel / @ts.jit code"}
        raise TilescopeError(
            f"ts.{self.name}{self.signature} can only be used inside {where[self.kind]}; "
            "DSL functions are compiled from their source, not called as Python"
        )


def _op(name: str, kind: str, signature: str, doc: str) -> DSLOp:
    return DSLOp(name, kind, signature, doc)


# kernel ops
load = _op(
    "load",
    "kernel",
    "(tensor, offsets, sizes, valid=None, fill=0)",
    "Read a tile of `sizes` at `offsets` from a tensor param; with `valid=(rows, cols)` only that "
    "part is read and the rest is `fill`.",
)
store = _op(
    "store",
    "kernel",
    "(tensor, offsets, tile, valid=None)",
    "Write a tile into an Out/InOut tensor param at `offsets` (only its `valid=(rows, cols)` part).",
)
load_rows = _op(
    "load_rows",
    "kernel",
    "(tensor, rows, cols, valid=None, fill=0)",
    "Gather the rows of a 2-D tensor param named by the integer tile `rows`: columns `cols` "
    "(a count, or (start, count)); rows at or past `valid` are `fill`.",
)
iota = _op(
    "iota",
    "kernel",
    "(shape, dtype=ts.i32, dim=-1)",
    "A tile whose elements are their index along `dim`.",
)
probe = _op(
    "probe",
    "kernel",
    '(tile, "name")',
    "Capture the tile's value (with its task and line) when a run has probes on; nothing otherwise.",
)
zeros = _op("zeros", "kernel", "(shape, dtype)", "A tile of zeros.")
full = _op("full", "kernel", "(shape, value, dtype)", "A tile filled with `value`.")
exp = _op("exp", "kernel", "(x)", "Elementwise e**x.")
log = _op("log", "kernel", "(x)", "Elementwise natural logarithm.")
sqrt = _op("sqrt", "kernel", "(x)", "Elementwise square root.")
rsqrt = _op("rsqrt", "kernel", "(x)", "Elementwise 1 / sqrt(x).")
abs = _op("abs", "kernel", "(x)", "Elementwise absolute value.")  # noqa: A001
neg = _op("neg", "kernel", "(x)", "Elementwise negation.")
tanh = _op("tanh", "kernel", "(x)", "Elementwise hyperbolic tangent.")
sigmoid = _op("sigmoid", "kernel", "(x)", "Elementwise 1 / (1 + exp(-x)).")
silu = _op("silu", "kernel", "(x)", "Elementwise x * sigmoid(x).")
erf = _op("erf", "kernel", "(x)", "Elementwise error function.")
exp2 = _op("exp2", "kernel", "(x)", "Elementwise 2**x.")
log2 = _op("log2", "kernel", "(x)", "Elementwise base-2 logarithm.")
reciprocal = _op("reciprocal", "kernel", "(x)", "Elementwise 1 / x.")
gelu = _op(
    "gelu",
    "kernel",
    '(x, approximate="none")',
    'Elementwise GELU as torch computes it: x * Phi(x) (erf form), or the tanh form with approximate="tanh".',
)
pow = _op("pow", "kernel", "(x, exponent)", "Elementwise x**exponent (tiles or a scalar, broadcasting).")  # noqa: A001
clamp = _op(
    "clamp", "kernel", "(x, min=None, max=None)", "Elementwise min(max(x, min), max), as torch.clamp."
)
maximum = _op(
    "maximum", "both", "(a, b)", "Elementwise maximum (broadcasting); of two scalars or indices, the larger."
)
minimum = _op(
    "minimum", "both", "(a, b)", "Elementwise minimum (broadcasting); of two scalars or indices, the smaller."
)
where = _op("where", "kernel", "(cond, a, b)", "Elementwise select: a where cond else b.")
logical_and = _op("logical_and", "kernel", "(a, b)", "Elementwise and of bool tiles.")
logical_or = _op("logical_or", "kernel", "(a, b)", "Elementwise or of bool tiles.")
logical_not = _op("logical_not", "kernel", "(a)", "Elementwise not of a bool tile.")
cast = _op("cast", "kernel", '(x, dtype, mode="rint")', "Convert to `dtype`; float->int rounds by `mode`.")
row_sum = _op("row_sum", "kernel", "(x)", "Sum over columns: [R, C] -> [R, 1].")
row_max = _op("row_max", "kernel", "(x)", "Max over columns: [R, C] -> [R, 1].")
row_min = _op("row_min", "kernel", "(x)", "Min over columns: [R, C] -> [R, 1].")
row_mean = _op("row_mean", "kernel", "(x)", "Mean over columns: [R, C] -> [R, 1].")
col_sum = _op("col_sum", "kernel", "(x)", "Sum over rows: [R, C] -> [1, C].")
col_max = _op("col_max", "kernel", "(x)", "Max over rows: [R, C] -> [1, C].")
col_min = _op("col_min", "kernel", "(x)", "Min over rows: [R, C] -> [1, C].")
col_mean = _op("col_mean", "kernel", "(x)", "Mean over rows: [R, C] -> [1, C].")
matmul = _op(
    "matmul",
    "kernel",
    "(a, b, acc=None, transpose_a=False, transpose_b=False)",
    "[M, K] @ [K, N] (after the transposes asked for) with fp32 accumulation (i32 for int8), + acc.",
)
transpose = _op("transpose", "kernel", "(x)", "[R, C] -> [C, R].")

# orchestration ops
create_tensor = _op(
    "create_tensor", "orch", "(shape, dtype)", "Allocate an intermediate tensor for this run."
)
submit = _op(
    "submit",
    "orch",
    "(kernel, *args, name=None, deps=(), dumps=())",
    "Submit one task (long form of a kernel call).",
)
dump_tag = _op("dump_tag", "orch", "(tensor)", "Mark a tensor for partial (level 1) tensor dumps.")

# both
range = _op("range", "both", "([start,] stop[, step])", "A real loop (not unrolled) in the generated code.")  # noqa: A001


def op_names(kind: str | None = None) -> list[str]:
    """The names of the DSL ops usable in ``kind`` code ("kernel" or "orch"; None: every op)."""
    return sorted(
        n for n, v in globals().items() if isinstance(v, DSLOp) and (kind is None or v.kind in (kind, "both"))
    )


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three of ``candidates`` spelled like ``name``, closest first; only those about as
    close as the closest (``ts.arange`` suggests ``ts.range``, not also ``ts.triage``)."""
    found = difflib.get_close_matches(name, sorted(set(candidates)), n=3, cutoff=0.6)
    score = {c: difflib.SequenceMatcher(None, name, c).ratio() for c in found}
    return [c for c in found if score[c] >= score[found[0]] - 0.15] if found else []


def unknown_op_message(
    prefix: str, name: str, candidates: Iterable[str], kind: str | None = None
) -> tuple[str, str]:
    """``<prefix><name> is not a tilescope op`` with the close matches among ``candidates``, and
    the list of the ops that exist (those usable in ``kind`` code, or every op)."""
    matches = close_matches(name, candidates)
    text = f"{prefix}{name} is not a tilescope op"
    if matches:
        text += f"; did you mean {' or '.join(prefix + m for m in matches)}?"
    where = {"kernel": " in a @ts.kernel", "orch": " in a @ts.jit orchestration"}.get(kind or "", "")
    return text, f"the ops{where}: {', '.join(prefix + n for n in op_names(kind))}"
