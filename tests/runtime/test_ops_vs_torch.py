"""The DSL's ops against torch, on sim and interp, through one helper (``op_grid.check_kernel``):
elementwise functions (every float unary op of the op registry), pow/clamp, means, transposed and int8 matmuls, iota, tile slices,
ragged loads and stores, row gathers, run-time loop bounds and scalar arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from op_grid import Arg, check_kernel, uniform

from tilescope.ir import op_registry as reg

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

FLOATS = ["f32", "bf16", "f16"]


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory):
    """Where this module's programs are written: one file per distinct program text, so a
    program run on several values (the ragged grid) compiles once."""
    return tmp_path_factory.mktemp("op_grid")
SHAPES_2D = [(8, 16), (3, 40)]


def _tile_args(shape, dtype, outs: list[str], out_dtype=None, out_shape=None):
    """Inputs ``a`` in [-3, 3) and ``b`` in [0.25, 4) of ``shape``, and one Out per name."""
    return [
        Arg("a", shape, dtype, init=uniform(-3.0, 3.0, shape, dtype)),
        Arg("b", shape, dtype, init=uniform(0.25, 4.0, shape, dtype)),
        *(Arg(o, out_shape or shape, out_dtype or dtype, kind="out") for o in outs),
    ]


def _loads(shape) -> str:
    zero, sizes = ([0], [shape[0]]) if len(shape) == 1 else ([0, 0], list(shape))
    return f"x = ts.load(a, {zero}, {sizes})\ny = ts.load(b, {zero}, {sizes})\n"


def _stores(shape, exprs: dict[str, str]) -> str:
    zero = [0] if len(shape) == 1 else [0, 0]
    return "".join(f"ts.store({o}, {zero}, {e})\n" for o, e in exprs.items())


# The operand of each float unary op of the registry where x in [-3, 3) is outside its domain
# (y is in [0.25, 4)); torch evaluates the same expression on the inputs.
UNARY_ARG = {"log": "y", "log2": "y", "sqrt": "y", "rsqrt": "y", "reciprocal": "y", "log1p": "y - 1.0"}


def _unary(d: reg.OpDef) -> tuple[str, Callable]:
    """``ts.<op>(arg)`` as the DSL writes it (a keyword form with its keyword), and torch's."""
    arg = UNARY_ARG.get(d.name, "x")
    form = f', {d.spelled.keyword}="{d.spelled.value}"' if d.spelled else ""
    ref = reg.torch_reference(d)
    return f"ts.{d.dsl_name}({arg}{form})", lambda x, y: ref(eval(arg, {"x": x, "y": y}))


def _fused(d: reg.OpDef) -> tuple[str, Callable]:
    """The op inside an expression of three ops, which the kernel C++ computes fused."""
    text, ref = _unary(d)
    return f"{text} * 0.5 + x", lambda x, y: ref(x, y) * 0.5 + x


FLOAT_UNARY = [reg.OPS[n] for n in reg.unary_ops() if reg.OPS[n].dtypes == reg.FLOAT]
ELEMENTWISE = {  # output -> (DSL expression of tiles x in [-3, 3) and y in [0.25, 4), torch)
    **{f"o_{d.name}": _unary(d) for d in FLOAT_UNARY},
    **{f"f_{d.name}": _fused(d) for d in FLOAT_UNARY if d.fusable},
    "pow_tt": ("ts.pow(y, x)", lambda x, y: torch.pow(y, x)),
    "pow_ts": ("ts.pow(y, 2.5)", lambda x, y: torch.pow(y, 2.5)),
    "pow_neg": ("ts.pow(x, 3.0)", lambda x, y: torch.pow(x, 3.0)),
    "pow_st": ("ts.pow(2.0, x)", lambda x, y: torch.pow(torch.tensor(2.0, dtype=x.dtype), x)),
    "clamp_s": ("ts.clamp(x, min=-1.0, max=0.5)", lambda x, y: torch.clamp(x, -1.0, 0.5)),
    "clamp_lo": ("ts.clamp(x, min=0.0)", lambda x, y: torch.clamp(x, min=0.0)),
    "clamp_t": ("ts.clamp(x, max=y)", lambda x, y: torch.clamp(x, max=y)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [*SHAPES_2D, (64,)], ids=lambda s: "x".join(map(str, s)))
def test_elementwise_ops_match_torch(grid_dir, shape, dtype):
    body = _loads(shape) + _stores(shape, {o: e for o, (e, _) in ELEMENTWISE.items()})

    def golden(t):
        return {o: fn(t["a"], t["b"]) for o, (_, fn) in ELEMENTWISE.items()}

    check_kernel(grid_dir, _tile_args(shape, dtype, list(ELEMENTWISE)), body, golden)


# softplus and log1p on their edges (+-0, +-inf, NaN, log1p's pole at -1, softplus' threshold at
# 20, results down in the subnormals) and on a spread of values, each dtype
EDGES = {
    "softplus": [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 20.0, 19.5, 20.5, 21.0, -20.0, 30.0,
                 -87.0, -95.0, -103.0, -110.0, 1e-3, -1e-3, 1e-30, 88.0, -1.0, 1.0, 0.5],
    "log1p": [0.0, -0.0, -1.0, -1.5, -2.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 1e-7,
              -1e-7, -0.999, -0.5, 0.5, 1.0, 1e3, 3e38, 5.9e-8, -0.25, 0.25, 2.0],
}


def _edge_values(op: str, dtype: str) -> torch.Tensor:
    """The op's edges, then values spread over its interesting range, as ``dtype`` (16 x 8)."""
    gen = torch.Generator().manual_seed(7)
    spread = torch.rand(128 - len(EDGES[op]), generator=gen, dtype=torch.float64)
    spread = spread * 50 - 30 if op == "softplus" else torch.exp(spread * 30 - 25) - 0.9
    x = torch.cat([torch.tensor(EDGES[op], dtype=torch.float64), spread]).reshape(16, 8)
    return x.to(getattr(torch, {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[dtype]))


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable values of their dtype lie between a and b (NaN = NaN, 0 = 0)."""
    bits = {2: torch.int16, 4: torch.int32}[a.element_size()]
    top = torch.iinfo(bits).max

    def ordinal(t):
        i = t.view(bits).to(torch.int64)
        return torch.where(i < 0, -(i & top), i)

    both_nan = torch.isnan(a) & torch.isnan(b)
    return torch.where(both_nan, torch.zeros_like(ordinal(a)), (ordinal(a) - ordinal(b)).abs())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["softplus", "log1p"])
def test_softplus_and_log1p_edges_match_torch_on_sim_and_interp(grid_dir, op, dtype):
    """Against torch's float64 result rounded once to the dtype: sim within one unit of the dtype
    (computed in double, rounded once; a bf16/f16 result through float), interp (torch, f32 for
    bf16/f16) within two units in f32 (torch's f32 softplus is up to 1.5 ulp off) and one in
    bf16/f16; sim and interp as close to each other; the edges (signed zeros, infinities, NaN,
    log1p's pole, softplus' threshold, underflow to zero) exactly."""
    x = _edge_values(op, dtype)
    args = [Arg("a", (16, 8), dtype, init=lambda g: x.clone()), Arg("out", (16, 8), dtype, kind="out")]
    body = f"ts.store(out, [0, 0], ts.{op}(ts.load(a, [0, 0], [16, 8])))\n"
    ref = reg.torch_reference(op)

    def golden(t):
        return {"out": ref(t["a"].double()).to(t["a"].dtype)}

    sim, interp = check_kernel(grid_dir, args, body, golden)
    want = golden({"a": x})["out"]
    slack = 2 if dtype == "f32" else 1
    edges = slice(0, len(EDGES[op]))
    w = want.flatten()[edges]
    special = (torch.isinf(w) | (w == 0)) & ~torch.isnan(w)
    for o, allowed in ((sim, 1), (interp, slack)):
        got = o.outputs["out"]
        assert int(_ulps_apart(got, want).max()) <= allowed, o.platform
        g = got.flatten()[edges]
        assert torch.equal(torch.isnan(g), torch.isnan(w)), o.platform
        assert torch.equal(g[special], w[special]) and torch.equal(g[special].signbit(), w[special].signbit()), (
            o.platform, g[special].tolist(), w[special].tolist()
        )
    assert int(_ulps_apart(sim.outputs["out"], interp.outputs["out"]).max()) <= slack
    g = sim.outputs["out"].flatten()
    if op == "log1p":  # log1p(-0) = -0, log1p(-1) = -inf, log1p(-1.5) = NaN
        assert g[1].item() == 0.0 and bool(g[1].signbit()) and g[2].item() == -math.inf and bool(g[3].isnan())
    else:  # softplus(+inf) = +inf, softplus(-inf) = +0, x itself above 20
        assert g[2].item() == math.inf and g[3].item() == 0.0 and not bool(g[3].signbit())
        assert g[7].item() == x.flatten()[7].item() and g[8].item() == x.flatten()[8].item()


REDUCTIONS = {
    "row_mean": lambda x: x.mean(-1, keepdim=True),
    "col_mean": lambda x: x.mean(0, keepdim=True),
    "col_min": lambda x: x.amin(0, keepdim=True),
    "row_min": lambda x: x.amin(-1, keepdim=True),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [*SHAPES_2D, (1, 200)], ids=lambda s: "x".join(map(str, s)))
def test_means_and_minimums_match_torch(grid_dir, shape, dtype):
    r, c = shape
    args = [Arg("a", shape, dtype, init=uniform(-3.0, 3.0, shape, dtype))]
    args += [Arg(o, (r, 1) if o.startswith("row") else (1, c), dtype, kind="out") for o in REDUCTIONS]
    body = f"x = ts.load(a, [0, 0], [{r}, {c}])\n" + "".join(
        f"ts.store({o}, [0, 0], ts.{o}(x))\n" for o in REDUCTIONS
    )
    check_kernel(grid_dir, args, body, lambda t: {o: fn(t["a"]) for o, fn in REDUCTIONS.items()})


def _with_edges(shape, dtype):
    """Values in [-3, 3) rounded to quarters (so rows and columns have ties), with a NaN, two
    infinities, a row of -inf and a signed zero planted (float dtypes)."""

    def init(g: torch.Generator) -> torch.Tensor:
        t = torch.floor(uniform(-3.0, 3.0, shape, "f32")(g) * 4) / 4
        if dtype != "i32":
            r, c = shape
            t[0, c // 2] = math.nan
            t[1 % r, 0] = math.inf
            t[2 % r, :] = -math.inf
            t[(3 % r), c - 1] = -0.0
        return t.to(DTYPES_BY_NAME[dtype])

    return init


DTYPES_BY_NAME = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32}
ARG_REDUCTIONS = {  # output -> torch
    "row_argmax": lambda x: x.argmax(-1, keepdim=True).int(),
    "row_argmin": lambda x: x.argmin(-1, keepdim=True).int(),
    "col_argmax": lambda x: x.argmax(0, keepdim=True).int(),
    "col_argmin": lambda x: x.argmin(0, keepdim=True).int(),
}
LOGSUMEXP = {  # computed in float64, rounded to f32 (and then to bf16/f16)
    "row_logsumexp": lambda x: torch.logsumexp(x.double(), -1, keepdim=True).float().to(x.dtype),
    "col_logsumexp": lambda x: torch.logsumexp(x.double(), 0, keepdim=True).float().to(x.dtype),
}


@pytest.mark.parametrize("dtype", [*FLOATS, "i32"])
@pytest.mark.parametrize("shape", [(8, 16), (5, 40)], ids=lambda s: "x".join(map(str, s)))
def test_arg_reductions_and_logsumexp_match_torch_on_ties_nan_and_infinities(grid_dir, shape, dtype):
    """argmax/argmin give torch's index exactly: the first extreme, a NaN counting as one; logsumexp
    is torch's float64 value rounded (through f32): NaN for a NaN, +inf for a +inf, -inf for a row of -inf."""
    r, c = shape
    args = [Arg("a", shape, dtype, init=_with_edges(shape, dtype))]
    args += [Arg(o, (r, 1) if o.startswith("row") else (1, c), "i32", kind="out") for o in ARG_REDUCTIONS]
    lse = LOGSUMEXP if dtype != "i32" else {}
    args += [Arg(o, (r, 1) if o.startswith("row") else (1, c), dtype, kind="out") for o in lse]
    body = f"x = ts.load(a, [0, 0], [{r}, {c}])\n" + "".join(
        f"ts.store({o}, [0, 0], ts.{o}(x))\n" for o in [*ARG_REDUCTIONS, *lse]
    )
    outcomes = check_kernel(grid_dir, args, body, lambda t: {o: fn(t["a"]) for o, fn in {**ARG_REDUCTIONS, **lse}.items()},
                            tolerance={d: (0.0, 0.0) for d in FLOATS})  # fmt: skip
    if dtype != "i32":
        got = outcomes[0].outputs
        assert int(got["row_argmax"][0, 0]) == c // 2 and int(got["row_argmin"][0, 0]) == c // 2  # the NaN
        assert math.isnan(float(got["row_logsumexp"][0, 0])) and float(got["row_logsumexp"][2 % r, 0]) == -math.inf
        assert float(got["row_logsumexp"][1 % r, 0]) == math.inf


def _scan_ref(op: str, dim: int, reverse: bool, exclusive: bool):
    """torch's cumsum/cumprod in float64 (int64), flipped and shifted as asked, rounded once."""

    def ref(x: torch.Tensor) -> torch.Tensor:
        v = x.flip(dim) if reverse else x
        run = getattr(torch, op)(v.double() if x.is_floating_point() else v.long(), dim=dim)
        if exclusive:
            first = torch.full_like(run.narrow(dim, 0, 1), 1 if op == "cumprod" else 0)
            run = torch.cat([first, run.narrow(dim, 0, run.shape[dim] - 1)], dim=dim)
        run = run.flip(dim) if reverse else run
        return run.float().to(x.dtype) if x.is_floating_point() else run.to(x.dtype)

    return ref


SCANS = {  # output -> (DSL call, torch)
    f"{op}_{dim}_{int(rev)}{int(exc)}": (
        f"ts.{op}(x{'' if dim == 1 else ', dim=0'}{', reverse=True' if rev else ''}{', exclusive=True' if exc else ''})",
        _scan_ref(op, dim, rev, exc),
    )
    for op in ("cumsum", "cumprod") for dim in (0, 1) for rev in (False, True) for exc in (False, True)
}  # fmt: skip


@pytest.mark.parametrize("dtype", [*FLOATS, "i32"])
def test_scans_along_each_dim_reversed_and_exclusive_match_torch(grid_dir, dtype):
    """Every cumsum/cumprod form on rows and columns equals torch's float64 (int64) scan rounded once:
    exactly, on sim and interp (products of values in [0.5, 1.5) stay far from overflow)."""
    shape = (6, 12)
    lo, hi = (0.5, 1.5) if dtype != "i32" else (-3, 4)
    args = [Arg("a", shape, dtype, init=uniform(lo, hi, shape, dtype))]
    args += [Arg(o, shape, dtype, kind="out") for o in SCANS]
    body = "x = ts.load(a, [0, 0], [6, 12])\n" + "".join(f"ts.store({o}, [0, 0], {call})\n" for o, (call, _) in SCANS.items())
    check_kernel(grid_dir, args, body, lambda t: {o: ref(t["a"]) for o, (_, ref) in SCANS.items()},
                 tolerance={d: (0.0, 0.0) for d in FLOATS})  # fmt: skip


def test_a_scan_of_a_1d_tile_and_its_errors(grid_dir):
    from tilescope.errors import VerifyError
    from tilescope.language.frontend import load_source

    args = [Arg("a", (16,), "f32", init=uniform(-2.0, 2.0, (16,), "f32")), Arg("y", (16,), "f32", kind="out")]
    check_kernel(grid_dir, args, "ts.store(y, [0], ts.cumsum(ts.load(a, [0], [16]), reverse=True))\n",
                 lambda t: {"y": t["a"].double().flip(0).cumsum(0).flip(0).float()}, tolerance={"f32": (0.0, 0.0)})  # fmt: skip
    head = "import tilescope as ts\n\n@ts.kernel\ndef k(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):\n"
    tail = "\n@ts.jit\ndef p(x: ts.Tensor[[4, 8], ts.f32], y: ts.Out[[4, 8], ts.f32]):\n    k(x, y)\n"
    for call, message in [("ts.cumsum(t, dim=2)", r"ts.cumsum dim must be a compile-time int in \[-2, 1\]"),
                          ("ts.cumprod(t, exclusive=1)", "ts.cumprod exclusive= must be a compile-time True or False"),
                          ("ts.cumsum(t > 0.0)", "ts.cumsum of a bool tile")]:  # fmt: skip
        text = head + f"    t = ts.load(x, [0, 0], [4, 8])\n    ts.store(y, [0, 0], {call})\n" + tail
        with pytest.raises(VerifyError, match=message):
            load_source(text, "<scan>")


def test_an_arg_reduction_is_an_i32_tile_and_logsumexp_needs_floats(tmp_path):
    from tilescope.errors import VerifyError
    from tilescope.language.frontend import load_source

    def source(d: str, o: str, call: str) -> str:
        params = f"x: ts.Tensor[[4, 8], ts.{d}], y: ts.Out[[4, 1], ts.{o}]"
        return (f"import tilescope as ts\n\n@ts.kernel\ndef k({params}):\n"
                f"    ts.store(y, [0, 0], ts.{call}(ts.load(x, [0, 0], [4, 8])))\n\n"
                f"@ts.jit\ndef p({params}):\n    k(x, y)\n")  # fmt: skip

    assert load_source(source("f32", "i32", "row_argmax"), "<argmax>").kernels[0].name == "k"
    with pytest.raises(VerifyError, match="i32"):
        load_source(source("f32", "f32", "row_argmin"), "<argmin into f32>")
    with pytest.raises(VerifyError, match="row_logsumexp needs a float tile"):
        load_source(source("i32", "i32", "row_logsumexp"), "<logsumexp of ints>")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "i8"])
@pytest.mark.parametrize("mkn", [(16, 32, 8), (5, 7, 3)], ids=lambda s: "x".join(map(str, s)))
def test_matmul_with_transposes_matches_torch(grid_dir, mkn, dtype):
    m, k, n = mkn
    lo, hi = (-128, 128) if dtype == "i8" else (-2.0, 2.0)
    acc = "i32" if dtype == "i8" else "f32"
    args = [
        Arg("a", (m, k), dtype, init=uniform(lo, hi, (m, k), dtype)),
        Arg("at", (k, m), dtype, init=uniform(lo, hi, (k, m), dtype)),
        Arg("b", (k, n), dtype, init=uniform(lo, hi, (k, n), dtype)),
        Arg("bt", (n, k), dtype, init=uniform(lo, hi, (n, k), dtype)),
        Arg("c", (m, n), acc, init=uniform(-100, 100, (m, n), acc)),
        *(Arg(o, (m, n), acc, kind="out") for o in ("nn", "tn", "nt", "tt", "acc")),
    ]
    body = f"""
x = ts.load(a, [0, 0], [{m}, {k}])
xt = ts.load(at, [0, 0], [{k}, {m}])
y = ts.load(b, [0, 0], [{k}, {n}])
yt = ts.load(bt, [0, 0], [{n}, {k}])
ts.store(nn, [0, 0], ts.matmul(x, y))
ts.store(tn, [0, 0], ts.matmul(xt, y, transpose_a=True))
ts.store(nt, [0, 0], ts.matmul(x, yt, transpose_b=True))
ts.store(tt, [0, 0], ts.matmul(xt, yt, transpose_a=True, transpose_b=True))
s = ts.load(c, [0, 0], [{m}, {n}])
s = ts.matmul(x, yt, acc=s, transpose_b=True)
ts.store(acc, [0, 0], s)
"""

    def golden(t):
        wide = torch.int64 if dtype == "i8" else torch.float64
        x, xt, y, yt = (t[n_].to(wide) for n_ in ("a", "at", "b", "bt"))
        out = {"nn": x @ y, "tn": xt.T @ y, "nt": x @ yt.T, "tt": xt.T @ yt.T}
        out["acc"] = t["c"].to(wide) + x @ yt.T
        return {o: v.to(torch.int32 if dtype == "i8" else torch.float32) for o, v in out.items()}

    check_kernel(grid_dir, args, body, golden, tolerance={"f32": (1e-5, 1e-5)})


@pytest.mark.parametrize("dtype", ["i32", "f32", "bf16", "i8"])
def test_iota_along_each_dim_matches_torch_arange(grid_dir, dtype):
    args = [Arg(o, s, dtype, kind="out") for o, s in (("rows", (4, 8)), ("cols", (4, 8)), ("flat", (16,)))]
    body = f"""
ts.store(rows, [0, 0], ts.iota([4, 8], ts.{dtype}, dim=0))
ts.store(cols, [0, 0], ts.iota([4, 8], ts.{dtype}, dim=1))
ts.store(flat, [0], ts.iota([16], ts.{dtype}))
"""
    t = {"i32": torch.int32, "f32": torch.float32, "bf16": torch.bfloat16, "i8": torch.int8}[dtype]

    def golden(_):
        return {
            "rows": torch.arange(4).reshape(4, 1).expand(4, 8).to(t),
            "cols": torch.arange(8).reshape(1, 8).expand(4, 8).to(t),
            "flat": torch.arange(16).to(t),
        }

    check_kernel(grid_dir, args, body, golden)


def test_causal_mask_from_iota_and_where(grid_dir):
    args = [
        Arg("s", (16, 16), "f32", init=uniform(-3.0, 3.0, (16, 16), "f32")),
        Arg("o", (16, 16), "f32", kind="out"),
        Arg("q0", None, "i32", kind="scalar", value=4),
    ]
    body = """
x = ts.load(s, [0, 0], [16, 16])
row = ts.iota([16, 1], dim=0) + q0
col = ts.iota([1, 16], dim=1)
ts.store(o, [0, 0], ts.where(col <= row, x, float("-inf")))
"""

    def golden(t):
        mask = torch.arange(16).reshape(1, 16) <= torch.arange(16).reshape(16, 1) + 4
        return {"o": torch.where(mask, t["s"], float("-inf"))}

    check_kernel(grid_dir, args, body, golden)


def test_where_between_two_numbers_makes_a_tile_of_the_conditions_shape(grid_dir):
    args = [
        Arg("s", (8, 16), "f32", init=uniform(-3.0, 3.0, (8, 16), "f32")),
        Arg("o", (8, 16), "f32", kind="out"),
        Arg("n", (8, 16), "i32", kind="out"),
    ]
    body = """
x = ts.load(s, [0, 0], [8, 16])
ts.store(o, [0, 0], ts.where(x > 0.0, 1.0, 0.0))
ts.store(n, [0, 0], ts.where(x > 0.0, 2, -1))
"""

    def golden(t):
        pos = t["s"] > 0
        return {"o": pos.float(), "n": torch.where(pos, 2, -1).to(torch.int32)}

    check_kernel(grid_dir, args, body, golden)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32"])
def test_static_tile_slices_match_torch_indexing(grid_dir, dtype):
    args = [
        Arg("a", (8, 16), dtype, init=uniform(-50, 50, (8, 16), dtype)),
        Arg("v", (32,), dtype, init=uniform(-50, 50, (32,), dtype)),
        Arg("block", (2, 4), dtype, kind="out"),
        Arg("tail", (3, 16), dtype, kind="out"),
        Arg("row", (1, 16), dtype, kind="out"),
        Arg("col", (8,), dtype, kind="out"),
        Arg("half", (16,), dtype, kind="out"),
    ]
    body = """
x = ts.load(a, [0, 0], [8, 16])
w = ts.load(v, [0], [32])
ts.store(block, [0, 0], x[2:4, 8:12])
ts.store(tail, [0, 0], x[-3:])
ts.store(row, [0, 0], x[5])
ts.store(col, [0], x[:, -1] + 0)
ts.store(half, [0], w[16:])
"""

    def golden(t):
        x, w = t["a"], t["v"]
        return {"block": x[2:4, 8:12], "tail": x[-3:], "row": x[5:6], "col": x[:, -1], "half": w[16:]}

    check_kernel(grid_dir, args, body, golden)


RAGGED_BODY = """
x = ts.load(a, [16, 0], [8, 16], valid=(r, c), fill=-1)
ts.store(o, [0, 0], x)
ts.store(part, [16, 0], x + 1, valid=(r, c))
"""


def _ragged_args(dtype: str, rows: int, cols: int, sentinel: int = 7) -> list[Arg]:
    return [
        Arg("a", (20, 16), dtype, init=uniform(-50, 50, (20, 16), dtype)),
        Arg("o", (8, 16), dtype, kind="out"),
        Arg("part", (20, 16), dtype, kind="inout", init=lambda g: torch.full((20, 16), sentinel).to(_t(dtype))),
        Arg("r", None, "i32", kind="scalar", value=rows),
        Arg("c", None, "i32", kind="scalar", value=cols),
    ]


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
@pytest.mark.parametrize("rows,cols", [(4, 16), (0, 16), (3, 5), (4, 0)])
def test_ragged_load_and_store_touch_only_the_valid_part(grid_dir, dtype, rows, cols):
    # the full 8-row tile at row 16 would pass a's 20 rows: only the valid part is read and written

    def golden(t):
        x = torch.full((8, 16), -1).to(t["a"].dtype)
        x[:rows, :cols] = t["a"][16 : 16 + rows, :cols]
        part = torch.full((20, 16), 7).to(t["a"].dtype)
        part[16 : 16 + rows, :cols] = x[:rows, :cols] + 1
        return {"o": x, "part": part}

    for cfg in ({}, {"check_bounds": True}):
        check_kernel(grid_dir, _ragged_args(dtype, rows, cols), RAGGED_BODY, golden, compile_cfg=cfg)


def _t(dtype: str) -> torch.dtype:
    return {"f32": torch.float32, "bf16": torch.bfloat16, "i8": torch.int8, "i32": torch.int32}[dtype]


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
def test_load_rows_gathers_like_torch_indexing(grid_dir, dtype):
    args = [
        Arg("x", (64, 24), dtype, init=uniform(-50, 50, (64, 24), dtype)),
        Arg("idx", (8, 1), "i32", init=lambda g: torch.tensor([[3], [63], [0], [3], [17], [40], [41], [5]], dtype=torch.int32)),
        Arg("all_rows", (8, 24), dtype, kind="out"),
        Arg("some", (8, 8), dtype, kind="out"),
        Arg("n", None, "i32", kind="scalar", value=5),
    ]
    body = """
i = ts.load(idx, [0, 0], [8, 1])
ts.store(all_rows, [0, 0], ts.load_rows(x, i, 24))
ts.store(some, [0, 0], ts.load_rows(x, i, (8, 8), valid=n, fill=0))
"""

    def golden(t):
        i = t["idx"].reshape(-1).long()
        some = torch.zeros(8, 8).to(t["x"].dtype)
        some[:5] = t["x"][i[:5], 8:16]
        return {"all_rows": t["x"][i], "some": some}

    check_kernel(grid_dir, args, body, golden)


def test_run_time_loop_bounds_and_scalar_arithmetic(grid_dir):
    args = [
        Arg("a", (4, 256), "f32", init=uniform(-3.0, 3.0, (4, 256), "f32")),
        Arg("o", (4, 1), "f32", kind="out"),
        Arg("o2", (4, 8), "f32", kind="out"),
        Arg("n", None, "i32", kind="scalar", value=150),
    ]
    body = """
acc = ts.zeros([4, 1], ts.f32)
for j in ts.range(0, n, 64):
    t = ts.load(a, [0, j], [4, 64], valid=(4, min(n - j, 64)))
    acc = acc + ts.row_sum(t)
ts.store(o, [0, 0], acc)
k = ts.maximum(n // 64, 1) * 64 - n % 64
ts.store(o2, [0, 0], ts.load(a, [0, k], [4, 8]))
"""

    def golden(t):
        return {"o": t["a"][:, :150].sum(-1, keepdim=True), "o2": t["a"][:, 106:114]}

    check_kernel(grid_dir, args, body, golden, tolerance={"f32": (1e-5, 1e-5)})


def test_a_loop_may_start_at_a_run_time_scalar(grid_dir):
    args = [
        Arg("a", (4, 256), "f32", init=uniform(-3.0, 3.0, (4, 256), "f32")),
        Arg("o", (4, 256), "f32", kind="inout", init=lambda g: torch.zeros(4, 256)),
        Arg("start", None, "i32", kind="scalar", value=64),
        Arg("end", None, "i32", kind="scalar", value=192),
    ]
    body = """
for c in ts.range(start, end, 32):
    ts.store(o, [0, c], ts.load(a, [0, c], [4, 32]) * 2.0)
"""

    def golden(t):
        out = torch.zeros(4, 256)
        out[:, 64:192] = t["a"][:, 64:192] * 2.0
        return {"o": out}

    check_kernel(grid_dir, args, body, golden, tolerance={"f32": (0.0, 0.0)})


def test_int8_quantize_matmul_and_per_channel_dequantize(grid_dir):
    args = [
        Arg("x", (16, 64), "f32", init=uniform(-4.0, 4.0, (16, 64), "f32")),
        Arg("w", (64, 32), "i8", init=uniform(-127, 128, (64, 32), "i8")),
        Arg("scale", (1, 32), "f32", init=uniform(0.001, 0.01, (1, 32), "f32")),
        Arg("y", (16, 32), "f32", kind="out"),
        Arg("q", (16, 64), "i8", kind="out"),
    ]
    body = """
t = ts.load(x, [0, 0], [16, 64])
qx = ts.cast(t * 40.0, ts.i8)
ts.store(q, [0, 0], qx)
acc = ts.matmul(qx, ts.load(w, [0, 0], [64, 32]))
ts.store(y, [0, 0], ts.cast(acc, ts.f32) * (ts.load(scale, [0, 0], [1, 32]) / 40.0))
"""

    def golden(t):
        q = torch.round(t["x"] * 40.0).clamp(-128, 127).to(torch.int8)  # saturating, ties to even
        acc = q.long() @ t["w"].long()
        return {"q": q, "y": acc.float() * (t["scale"] / 40.0)}

    check_kernel(grid_dir, args, body, golden)


