"""The one table of tilescope's operations: every ``ts.<name>`` op, every operator the IR
computes (``a + b``, ``a < b``) and every keyword form of an op (``ts.gelu(x, approximate="tanh")``
is the IR op ``gelu_tanh``), each described once by an ``OpDef``.

Everything that used to list ops reads this table instead: the DSL stubs and ``ts.__all__``
(``language/ops.py``), the op lists of the IR and its type rules, the front-end's lowering of
plain elementwise ops and reductions, the printer's spelling of keyword forms, the C++ names the
kernel emitter calls and fuses (``codegen/``), the interpreter's torch functions
(``runtime/interp.py``), the error bounds of ``tilescope localize`` (``analysis/localize/bound.py``)
and the tests' op grids. ``tests/ir/test_op_registry.py`` checks every entry against what it names:
the tile library's functor and tile function (``runtime/include/tilescope/``), the interpreter,
the bound, the torch reference, its row in ``docs/dsl.md`` and its ``ts.<name>`` stub.

Invariants:
- Names are unique; an op's ``name`` is the op string of its IR node (``UnOp.op``, ``BinOp.op``,
  ``Reduce.op``) and, for ``surface="ts"``, the name of its ``ts.`` stub.
- Entries are in a fixed order (siblings of a family stay together: row reductions before
  column ones), which every derived list keeps.
- This module imports nothing heavy (no torch): torch references are named, and resolved by
  whoever calls them (``torch_reference``).

Adding an elementwise op: one ``OpDef`` here; its float math in ``tile_math.hpp``, its functor
in ``tile_elementwise.hpp`` and its ``TS_FUSED_UNARY`` line in ``tile_fused.hpp`` when fusable;
its row in ``docs/dsl.md``; its tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# categories
UNARY = "unary"  # elementwise math of one tile (exp, gelu, neg, ...)
BINARY = "binary"  # elementwise arithmetic of two operands (+, ts.maximum, ts.pow, ...)
COMPARE = "compare"  # == != < <= > >=: a bool result
LOGICAL = "logical"  # and / or / not of bool tiles
REDUCE = "reduce"  # a row or column reduction of a 2-D tile
CAST = "cast"
MATMUL = "matmul"
LAYOUT = "layout"  # transpose
SCAN = "scan"  # cumsum, cumprod
SELECT = "select"  # where
COMPOSITE = "composite"  # lowered to other ops (clamp)
CREATE = "create"  # a tile made from nothing (zeros, full, iota)
MEMORY = "memory"  # load, store, gathers
DEBUG = "debug"  # probe
ORCHESTRATION = "orchestration"  # tensors and tasks
CONTROL = "control"  # ts.range

# what the op's operands may be
FLOAT = "float"  # float tiles
NUMBER = "number"  # any tile but bool
BOOL = "bool"  # bool tiles
ANY = "any"  # the op's own rules decide


@dataclass(frozen=True, slots=True)
class ErrorModel:
    """How ``tilescope localize`` bounds the op's result (``analysis/localize/bound.py``).

    ``ulps``: the op's documented error, sim's and torch's alike, in ulps of the result (of
    ``max(|f(x)|, |x|)`` when ``of_x``: gelu's ``1 + erf`` cancels for negative x in torch).
    ``rule`` says how an input's error propagates:

    - ``exact``: the result carries the input's bound unchanged (neg, abs).
    - ``slope``: the input's bound times ``slope``, the largest ``|f'|`` on the whole line.
    - ``exp``: ``f(x) = b^x`` with ``scale = ln b``: ``f(hi) (exp(scale e) - 1)``.
    - ``expm1``: ``f(x) = e^x - 1``: ``e^hi (exp(e) - 1)``.
    - ``log``: ``|f'(x)| <= 1 / (scale (x - pole))`` for ``x > pole``, unbounded at the pole.
    - ``sqrt``, ``rsqrt``, ``reciprocal``, ``pow``: the bound's own formula for that function.
    """

    ulps: float
    rule: str
    slope: float = 0.0
    scale: float = 1.0
    pole: float = 0.0
    of_x: bool = False


@dataclass(frozen=True, slots=True)
class Spelling:
    """How the DSL writes an IR op that is a keyword form of another op:
    ``Spelling("gelu", "approximate", "tanh")`` is ``ts.gelu(x, approximate="tanh")``."""

    op: str
    keyword: str
    value: str


@dataclass(frozen=True, slots=True)
class OpDef:
    """One operation.

    Attributes:
        name: the IR op string, and the ``ts.<name>`` stub's name for ``surface="ts"``.
        category: one of the category constants above.
        kind: where it may appear: "kernel", "orch" or "both".
        surface: "ts" (a ``ts.<name>`` op), "operator" (``a + b``, ``a < b``) or "form" (a keyword
            form of another op, ``spelled``).
        signature, doc: the stub's call signature and one-line docstring.
        arity: operands of an elementwise op or reduction; None for ops with their own binding.
        dtypes: the tiles it takes (FLOAT, NUMBER, BOOL, ANY).
        torch: the torch reference, a dotted name inside the torch module (``nn.functional.gelu``
            for ``torch.nn.functional.gelu``), called with ``torch_kwargs``.
        interp: how the interpreter computes it: "torch" (the reference), "f32" (the reference,
            bf16/f16 computed in f32 and rounded once, as the tile library does), "f64" (the
            reference in float64, rounded once: torch's f32 kernels of some functions round
            differently on AVX2 and AVX-512 CPUs, its float64 ones do not) or "own" (a function of
            the interpreter's own, correctly rounded like the tile library's).
        cpp: the tile library's function the kernel C++ calls (``gelu(t)``); None for an infix operator.
        functor: the tile library's elementwise functor (``detail::gelu_op``).
        fusable: computed element by element inside a fused expression (``tile_fused.hpp``).
        error: the error model of ``tilescope localize``; None for ops it bounds by their own code.
        keyword: the keyword whose values select the op's forms, and its default (``("approximate",
            "none")``); the forms are the entries ``spelled`` with it.
        spelled: for ``surface="form"``, how the DSL writes it.
        python: how to compute the op on a compile-time number in Python (``math.exp({})``), for hints.
    """

    name: str
    category: str
    kind: str = "kernel"
    surface: str = "ts"
    signature: str = ""
    doc: str = ""
    arity: int | None = None
    dtypes: str = ANY
    torch: str | None = None
    torch_kwargs: tuple[tuple[str, Any], ...] = ()
    interp: str = "torch"
    cpp: str | None = None
    functor: str | None = None
    fusable: bool = False
    error: ErrorModel | None = None
    keyword: tuple[str, str] | None = None
    spelled: Spelling | None = None
    python: str | None = None

    @property
    def elementwise(self) -> bool:
        """An op applied element by element (unary, binary, comparison, logical)."""
        return self.category in (UNARY, BINARY, COMPARE, LOGICAL)

    @property
    def dsl_name(self) -> str:
        """The ``ts.`` op the DSL writes it with (``gelu`` for ``gelu_tanh``)."""
        return self.spelled.op if self.spelled else self.name


def _unary(name: str, doc: str, torch: str, error: ErrorModel | None, **kw: Any) -> OpDef:
    """An elementwise op of one float tile, fusable, in the tile library as ``name``/``name_op``."""
    fields: dict[str, Any] = {
        "signature": "(x)",
        "arity": 1,
        "dtypes": FLOAT,
        "cpp": name,
        "functor": f"{name}_op",
        "fusable": True,
    }
    return OpDef(name, UNARY, doc=doc, torch=torch, error=error, **{**fields, **kw})


def _op(name: str, category: str, signature: str, doc: str, **kw: Any) -> OpDef:
    return OpDef(name, category, signature=signature, doc=doc, **kw)


def _operator(name: str, category: str, functor: str | None, cpp: str | None, torch: str, **kw: Any) -> OpDef:
    return OpDef(name, category, kind="both", surface="operator", arity=2, cpp=cpp, functor=functor, torch=torch, **kw)


def _reduce(name: str, doc: str, torch: str) -> OpDef:
    dim = -1 if name.startswith("row_") else 0
    floats = name.endswith(("_mean", "_logsumexp"))
    return OpDef(name, REDUCE, signature="(x)", doc=doc, arity=1, dtypes=FLOAT if floats else NUMBER,
                 torch=torch, torch_kwargs=(("dim", dim), ("keepdim", True)), cpp=name)  # fmt: skip


_SLOPE = "slope"
_GELU_ERROR = ErrorModel(4.0, _SLOPE, slope=1.13, of_x=True)  # max |gelu'| = 1.1290 at x = +-1.41

_DEFS: tuple[OpDef, ...] = (
    # memory
    _op("load", MEMORY, "(tensor, offsets, sizes, valid=None, fill=0, pad=None, dims=None, strides=None)",
        "Read a tile of `sizes` at `offsets` from a tensor param (over any two `dims`, every `strides` "
        "elements); with `valid=(rows, cols)` only that part is read and the rest is `fill`; with `pad=` "
        "the elements outside the tensor read as `pad`.", cpp="load"),
    _op("store", MEMORY, "(tensor, offsets, tile, valid=None, dims=None, strides=None)",
        "Write a tile into an Out/InOut tensor param at `offsets`, along `dims` every `strides` elements "
        "(only its `valid=(rows, cols)` part).", cpp="store"),
    _op("load_rows", MEMORY, "(tensor, rows, cols, valid=None, fill=0)",
        "Gather the rows of a 2-D tensor param named by the integer tile `rows`: columns `cols` "
        "(a count, or (start, count)); rows at or past `valid` are `fill`.", cpp="load_rows"),
    # creation and debugging
    _op("iota", CREATE, "(shape, dtype=ts.i32, dim=-1)", "A tile whose elements are their index along `dim`.",
        cpp="iota"),
    _op("rand", CREATE, "(shape, seed, offset=0)",
        "A tile of uniform [0, 1) f32 numbers, element i (row-major) a function of (`seed`, `offset` + i) only "
        "(Philox4x32-10): the same on sim and interp and on every schedule.", cpp="rand"),
    _op("probe", DEBUG, '(tile, "name")',
        "Capture the tile's value (with its task and line) when a run has probes on; nothing otherwise.", cpp="probe"),
    _op("zeros", CREATE, "(shape, dtype)", "A tile of zeros.", cpp="zeros"),
    _op("full", CREATE, "(shape, value, dtype)", "A tile filled with `value`.", cpp="full"),
    # unary math
    _unary("exp", "Elementwise e**x.", "exp", ErrorModel(1.0, "exp"), python="math.exp({})"),
    _unary("log", "Elementwise natural logarithm.", "log", ErrorModel(1.0, "log"), python="math.log({})"),
    _unary("sqrt", "Elementwise square root.", "sqrt", ErrorModel(0.5, "sqrt"), interp="own",
           python="math.sqrt({})"),
    _unary("rsqrt", "Elementwise 1 / sqrt(x).", "rsqrt", ErrorModel(1.5, "rsqrt"), interp="own",
           python="1 / math.sqrt({})"),
    _unary("abs", "Elementwise absolute value.", "abs", ErrorModel(0.0, "exact"), dtypes=NUMBER, python="abs({})"),
    _unary("neg", "Elementwise negation.", "neg", ErrorModel(0.0, "exact"), dtypes=NUMBER, python="-{}"),
    _unary("tanh", "Elementwise hyperbolic tangent.", "tanh", ErrorModel(1.0, _SLOPE, slope=1.0),
           python="math.tanh({})"),
    _unary("sigmoid", "Elementwise 1 / (1 + exp(-x)).", "sigmoid", ErrorModel(3.0, _SLOPE, slope=0.25),
           python="1 / (1 + math.exp(-{}))"),
    _unary("silu", "Elementwise x * sigmoid(x).", "nn.functional.silu", ErrorModel(3.0, _SLOPE, slope=1.1)),
    _unary("erf", "Elementwise error function.", "erf", ErrorModel(2.0, _SLOPE, slope=1.1284), interp="f64"),
    _unary("exp2", "Elementwise 2**x.", "exp2", ErrorModel(1.0, "exp", scale=0.6931471805599453)),
    _unary("log2", "Elementwise base-2 logarithm.", "log2", ErrorModel(1.0, "log", scale=0.6931471805599453)),
    _unary("reciprocal", "Elementwise 1 / x.", "reciprocal", ErrorModel(0.5, "reciprocal")),
    _unary("gelu", 'Elementwise GELU as torch computes it: x * Phi(x) (erf form), or the tanh form with '
           'approximate="tanh".', "nn.functional.gelu", _GELU_ERROR, interp="own",
           signature='(x, approximate="none")', keyword=("approximate", "none")),
    _unary("gelu_tanh", "torch's GELU with approximate=\"tanh\".", "nn.functional.gelu", _GELU_ERROR,
           surface="form", signature="(x)", torch_kwargs=(("approximate", "tanh"),),
           spelled=Spelling("gelu", "approximate", "tanh")),
    _unary("softplus", "Elementwise log(1 + exp(x)), x itself above 20 (torch's softplus, beta=1, threshold=20).",
           "nn.functional.softplus", ErrorModel(2.0, _SLOPE, slope=1.0), interp="f64"),  # softplus' = sigmoid
    _unary("log1p", "Elementwise log(1 + x), accurate for x near 0.", "log1p",
           ErrorModel(1.0, "log", pole=-1.0), interp="f64", python="math.log1p({})"),
    _unary("expm1", "Elementwise e**x - 1, accurate for x near 0.", "expm1", ErrorModel(1.0, "expm1"), interp="own",
           python="math.expm1({})"),
    _unary("elu", "Elementwise ELU (alpha 1): x for x >= 0, else e**x - 1.", "nn.functional.elu",
           ErrorModel(1.0, _SLOPE, slope=1.0), interp="own"),
    _unary("selu", "Elementwise SELU: scale * (x for x >= 0, else alpha * (e**x - 1)).", "nn.functional.selu",
           ErrorModel(2.0, _SLOPE, slope=1.7581), interp="own"),
    _unary("hardsigmoid", "Elementwise min(max(x + 3, 0), 6) / 6.", "nn.functional.hardsigmoid",
           ErrorModel(1.0, _SLOPE, slope=1.0 / 6.0), interp="own"),
    _unary("hardswish", "Elementwise x * min(max(x + 3, 0), 6) / 6.", "nn.functional.hardswish",
           ErrorModel(2.0, _SLOPE, slope=1.5), interp="own"),
    _unary("mish", "Elementwise x * tanh(softplus(x)).", "nn.functional.mish", ErrorModel(4.0, _SLOPE, slope=1.09),
           interp="own"),
    _unary("softsign", "Elementwise x / (1 + |x|).", "nn.functional.softsign", ErrorModel(2.0, _SLOPE, slope=1.0),
           interp="own"),
    _unary("logsigmoid", "Elementwise log(sigmoid(x)) = -softplus(-x).", "nn.functional.logsigmoid",
           ErrorModel(2.0, _SLOPE, slope=1.0), interp="own"),
    # binary
    _op("pow", BINARY, "(x, exponent)", "Elementwise x**exponent (tiles or a scalar, broadcasting).", arity=2,
        dtypes=FLOAT, torch="pow", cpp="pow", functor="pow_op", error=ErrorModel(2.0, "pow")),
    _op("clamp", COMPOSITE, "(x, min=None, max=None)", "Elementwise min(max(x, min), max), as torch.clamp.",
        torch="clamp"),
    _op("relu", COMPOSITE, "(x)", "Elementwise max(x, 0), as torch.relu.", torch="relu"),
    _op("leaky_relu", COMPOSITE, "(x, negative_slope=0.01)",
        "Elementwise x where x > 0, else x * negative_slope, as torch's leaky_relu.", torch="nn.functional.leaky_relu"),
    _op("hardtanh", COMPOSITE, "(x, min_val=-1.0, max_val=1.0)",
        "Elementwise min(max(x, min_val), max_val), as torch's hardtanh.", torch="nn.functional.hardtanh"),
    _op("maximum", BINARY, "(a, b)", "Elementwise maximum (broadcasting); of two scalars or indices, the larger.",
        kind="both", arity=2, dtypes=NUMBER, torch="maximum", cpp="maximum", functor="maximum_op", fusable=True),
    _op("minimum", BINARY, "(a, b)", "Elementwise minimum (broadcasting); of two scalars or indices, the smaller.",
        kind="both", arity=2, dtypes=NUMBER, torch="minimum", cpp="minimum", functor="minimum_op", fusable=True),
    _op("where", SELECT, "(cond, a, b)", "Elementwise select: a where cond else b.", torch="where", cpp="where"),
    _op("logical_and", LOGICAL, "(a, b)", "Elementwise and of bool tiles.", arity=2, dtypes=BOOL,
        torch="logical_and", cpp="logical_and", functor="logical_and_op"),
    _op("logical_or", LOGICAL, "(a, b)", "Elementwise or of bool tiles.", arity=2, dtypes=BOOL,
        torch="logical_or", cpp="logical_or", functor="logical_or_op"),
    _op("logical_not", LOGICAL, "(a)", "Elementwise not of a bool tile.", arity=1, dtypes=BOOL,
        torch="logical_not", cpp="logical_not", functor="logical_not_op", error=ErrorModel(0.0, "exact")),
    _op("cast", CAST, '(x, dtype, mode="rint")', "Convert to `dtype`; float->int rounds by `mode`.", cpp="cast"),
    # reductions (row ones first: fix rules read the siblings of each side in this order)
    _reduce("row_sum", "Sum over columns: [R, C] -> [R, 1].", "sum"),
    _reduce("row_max", "Max over columns: [R, C] -> [R, 1].", "amax"),
    _reduce("row_min", "Min over columns: [R, C] -> [R, 1].", "amin"),
    _reduce("row_mean", "Mean over columns: [R, C] -> [R, 1].", "mean"),
    _reduce("col_sum", "Sum over rows: [R, C] -> [1, C].", "sum"),
    _reduce("col_max", "Max over rows: [R, C] -> [1, C].", "amax"),
    _reduce("col_min", "Min over rows: [R, C] -> [1, C].", "amin"),
    _reduce("row_logsumexp", "log(sum(exp(x))) over columns, stable: [R, C] -> [R, 1].", "logsumexp"),
    _reduce("row_argmax", "Index (i32) of the first maximum over columns: [R, C] -> [R, 1].", "argmax"),
    _reduce("row_argmin", "Index (i32) of the first minimum over columns: [R, C] -> [R, 1].", "argmin"),
    _reduce("col_mean", "Mean over rows: [R, C] -> [1, C].", "mean"),
    _reduce("col_logsumexp", "log(sum(exp(x))) over rows, stable: [R, C] -> [1, C].", "logsumexp"),
    _reduce("col_argmax", "Index (i32) of the first maximum over rows: [R, C] -> [1, C].", "argmax"),
    _reduce("col_argmin", "Index (i32) of the first minimum over rows: [R, C] -> [1, C].", "argmin"),
    _op("matmul", MATMUL, "(a, b, acc=None, transpose_a=False, transpose_b=False)",
        "[M, K] @ [K, N] (after the transposes asked for) with fp32 accumulation (i32 for int8), + acc.",
        torch="matmul", cpp="matmul"),
    _op("transpose", LAYOUT, "(x)", "[R, C] -> [C, R].", torch="transpose", cpp="transpose"),
    _op("cumsum", SCAN, "(x, dim=-1, reverse=False, exclusive=False)",
        "Running sum along `dim` (from the end with `reverse`; without the element itself with `exclusive`).",
        dtypes=NUMBER, torch="cumsum", cpp="cumsum"),
    _op("cumprod", SCAN, "(x, dim=-1, reverse=False, exclusive=False)",
        "Running product along `dim` (from the end with `reverse`; without the element itself with `exclusive`).",
        dtypes=NUMBER, torch="cumprod", cpp="cumprod"),
    # orchestration
    _op("create_tensor", ORCHESTRATION, "(shape, dtype)", "Allocate an intermediate tensor for this run.", kind="orch"),
    _op("submit", ORCHESTRATION, "(kernel, *args, name=None, deps=(), dumps=())",
        "Submit one task (long form of a kernel call).", kind="orch"),
    _op("dump_tag", ORCHESTRATION, "(tensor)", "Mark a tensor for partial (level 1) tensor dumps.", kind="orch"),
    _op("range", CONTROL, "([start,] stop[, step])", "A real loop (not unrolled) in the generated code.",
        kind="both"),
    # operators
    _operator("add", BINARY, "add_op", None, "add", dtypes=NUMBER, fusable=True),
    _operator("sub", BINARY, "sub_op", None, "sub", dtypes=NUMBER, fusable=True),
    _operator("mul", BINARY, "mul_op", None, "mul", dtypes=NUMBER, fusable=True),
    _operator("div", BINARY, "div_op", None, "div", dtypes=FLOAT, fusable=True),
    _operator("floordiv", BINARY, None, "floordiv", "floor_divide", dtypes=NUMBER),
    _operator("mod", BINARY, None, "floormod", "remainder", dtypes=NUMBER),
    *(_operator(n, COMPARE, f"{n}_op", n, n) for n in ("eq", "ne", "lt", "le", "gt", "ge")),
)  # fmt: skip

OPS: Mapping[str, OpDef] = MappingProxyType({d.name: d for d in _DEFS})
assert len(OPS) == len(_DEFS), "two ops share a name"


def ops_in(*categories: str) -> tuple[str, ...]:
    """The names of the ops of ``categories``, in registry order."""
    return tuple(d.name for d in _DEFS if d.category in categories)


def unary_ops() -> tuple[str, ...]:
    """The IR's unary elementwise ops (``UnOp.op``): the unary math and ``logical_not``."""
    return tuple(d.name for d in _DEFS if d.elementwise and d.arity == 1)


def binary_ops() -> tuple[str, ...]:
    """Arithmetic ``BinOp.op`` values: + - * / // %, maximum, minimum, pow."""
    return ops_in(BINARY)


def compare_ops() -> tuple[str, ...]:
    """The comparisons (a bool result)."""
    return ops_in(COMPARE)


def logical_ops() -> tuple[str, ...]:
    """The binary logical ops (``logical_not`` is a unary op)."""
    return tuple(d.name for d in _DEFS if d.category == LOGICAL and d.arity == 2)


def reduce_ops() -> tuple[str, ...]:
    """The row and column reductions (``Reduce.op``), row ones first."""
    return ops_in(REDUCE)


def dsl_ops() -> tuple[OpDef, ...]:
    """The ops written ``ts.<name>(...)``: one stub each in ``language/ops.py``."""
    return tuple(d for d in _DEFS if d.surface == "ts")


def fusable_ops() -> frozenset[str]:
    """The elementwise ops the tile library computes inside a fused expression."""
    return frozenset(d.name for d in _DEFS if d.fusable)


def forms_of(name: str) -> dict[str, str]:
    """``{keyword value: IR op}`` of an op with a ``keyword``: ``{"none": "gelu", "tanh": "gelu_tanh"}``."""
    d = OPS[name]
    if d.keyword is None:
        return {}
    key, default = d.keyword
    forms = {default: name}
    forms.update({f.spelled.value: f.name for f in _DEFS if f.spelled and f.spelled.op == name and f.spelled.keyword == key})
    return forms


def cpp_names() -> frozenset[str]:
    """Every tile-library function the kernel C++ calls for an op (names a variable must not take)."""
    return frozenset(d.cpp for d in _DEFS if d.cpp)


def torch_reference(op: str | OpDef) -> Callable[..., Any]:
    """The op's torch function with its keyword arguments bound (imports torch)."""
    d = OPS[op] if isinstance(op, str) else op
    if d.torch is None:
        raise KeyError(f"{d.name} has no torch reference")
    fn: Any = importlib.import_module("torch")
    for part in d.torch.split("."):
        fn = getattr(fn, part)
    if not d.torch_kwargs:
        return fn
    kwargs = dict(d.torch_kwargs)
    return lambda *args: fn(*args, **kwargs)
