"""The fuzz net: random DSL programs (tests/fuzz_programs.py) checked against three invariants.

a. sim equals interp: bit for bit wherever every op on the way is exactly rounded, else within
   a sound bound built from each op's documented error (see docs/testing.md);
b. printed IR parses back to the same IR (front-end IR and final IR; text stable too);
c. dependency ordering: every two tasks whose regions overlap, one of them writing, are
   connected by a path in the recorded task graph (overlaps recomputed from the tasks' views).

One generated program is compiled once and checked for all three. `pytest` runs the "ci"
profile (a fixed seed; about a minute on 2 cores); `make fuzz SEED=n` runs the "fuzz" profile
(>= 10,000 programs in shards, each with its own seed derived from SEED, spread over every core
by pytest-xdist). A failure prints what differed, the DSL source, the seed and shard, and
hypothesis's falsifying example; docs/testing.md says how to reproduce it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import textwrap
from itertools import product

import fuzz_programs as fp
import pytest
import torch
from hypothesis import HealthCheck, event, given, seed, settings

# --- profiles ----------------------------------------------------------------------------------
# "ci" and "fuzz" are registered in tests/conftest.py (so `--hypothesis-profile fuzz` works);
# a run without --hypothesis-profile uses "ci" for these tests.

PROFILE = settings.get_current_profile_name()
FUZZ = PROFILE == "fuzz"
SEED = int(os.environ.get("TILESCOPE_FUZZ_SEED", "0"))
SHARDS = int(os.environ.get("TILESCOPE_FUZZ_SHARDS", "32")) if FUZZ else 1
TOTAL = int(
    os.environ.get("TILESCOPE_FUZZ_EXAMPLES", settings.get_profile("fuzz" if FUZZ else "ci").max_examples)
)
PER_SHARD = -(-TOTAL // SHARDS)
ONLY_SHARD = os.environ.get("TILESCOPE_FUZZ_SHARD") or None
# Known bugs (fp.KNOWN_BUGS, each pinned by an xfail(strict=True) test below) are allowed for
# by the bounds, so the net keeps finding new ones; TILESCOPE_FUZZ_KNOWN_BUGS=1 checks for them
# too.
STRICT = os.environ.get("TILESCOPE_FUZZ_KNOWN_BUGS") == "1"
TOLERATE = frozenset() if STRICT else frozenset(fp.KNOWN_BUGS)
OPTS = fp.GenOptions(max_stages=4 if FUZZ else 3)
FRONTEND_EXAMPLES = 250  # the front-end-only property (no g++): cheap, so more examples in ci


def shard_seed(shard: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}:{shard}".encode()).digest()[:8], "little")


def reproduce_hint(shard: int | None) -> str:
    """How to run the failing example again (shard None: test_fuzz_frontend)."""
    if not FUZZ:
        return f"ci profile, seed {SEED}; reproduce: TILESCOPE_FUZZ_SEED={SEED} pytest tests/system/test_fuzz.py"
    if shard is None:
        return (
            f"fuzz seed {SEED}, test_fuzz_frontend; reproduce: TILESCOPE_FUZZ_SEED={SEED} "
            "pytest tests/system/test_fuzz.py -k test_fuzz_frontend --hypothesis-profile=fuzz"
        )
    return (
        f"fuzz seed {SEED}, shard {shard} of {SHARDS} (derived hypothesis seed {shard_seed(shard)}); "
        f"reproduce: make fuzz SEED={SEED} FUZZ_SHARDS={SHARDS} FUZZ_SHARD={shard}"
    )


# --- checks --------------------------------------------------------------------------------------


def describe(prog: fp.FuzzProgram, hint: str) -> str:
    return f"{hint}\nfeatures: {sorted(prog.features)}\nDSL source:\n{textwrap.indent(prog.source(), '    ')}"


def check_roundtrip(program, what: str) -> None:
    """Printed IR is DSL source that parses back to the same IR, and prints the same again."""
    text = fp.program_str(program)
    reparsed = fp.parse_dsl(text, f"<fuzz {what} printed>")
    assert reparsed == program, f"{what}: the printed IR parses back to a different IR:\n{text}"
    again = fp.program_str(reparsed)
    assert again == text, f"{what}: print -> parse -> print is not stable:\n{text}\n---\n{again}"


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: the same bits (any NaN equals any NaN)."""
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        width = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
        return (a.view(width) == b.view(width)) | both_nan
    return a == b


def compare(name: str, sim: torch.Tensor, interp: torch.Tensor, bound: torch.Tensor):
    """Problems of one output: elements with bound 0 must be bit-exact, others within the bound."""
    exact = bound == 0
    same = bits_equal(sim, interp)
    s64, i64 = sim.double(), interp.double()
    diff = (s64 - i64).abs()
    finite = torch.isfinite(i64) & torch.isfinite(bound)
    within = torch.where(finite, diff <= bound, same | ~torch.isfinite(bound))
    ok = torch.where(exact, same, within)
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero().tolist()
    lines = [f"{name}: {len(bad)} of {ok.numel()} elements differ beyond the bound"]
    for idx in bad[:8]:
        i = tuple(idx)
        lines.append(
            f"  [{', '.join(map(str, i))}] sim {s64[i].item()!r} interp {i64[i].item()!r} "
            f"|diff| {diff[i].item():.6g} bound {bound[i].item():.6g}" + (" (exact)" if exact[i] else "")
        )
    return "\n".join(lines)


def element_set(arg: dict) -> set[int]:
    """The buffer elements a task argument views, from its shape, strides and offset."""
    ranges = [range(n) for n in arg["shape"]]
    return {arg["offset"] + sum(i * s for i, s in zip(idx, arg["strides"])) for idx in product(*ranges)}


def check_deps(deps: dict, explicit: list[tuple[int, int]]) -> list[str]:
    """Every pair of tasks touching a common element, one writing it, is ordered by a path of
    recorded edges (overlaps recomputed here, not taken from the file); explicit deps= too."""
    problems = []
    if deps["status"] != "ok":
        problems.append(f"deps.json status {deps['status']!r}: {deps.get('error')}")
    tasks = deps["tasks"]
    succ: dict[int, set[int]] = {t["id"]: set() for t in tasks}
    for e in deps["edges"]:
        if not e["pred"] < e["succ"]:
            problems.append(f"edge {e['pred']} -> {e['succ']} does not follow submission order")
        succ[e["pred"]].add(e["succ"])
    reach: dict[int, set[int]] = {}
    for t in sorted(succ, reverse=True):  # edges go forward, so later tasks are done first
        r = set(succ[t])
        for s in succ[t]:
            r |= reach.get(s, set())
        reach[t] = r
    views = []
    for t in tasks:
        if t["worker"] < 0:
            problems.append(f"task {t['id']} ({t['name']}) did not run")
        for a in t["args"]:
            if a["role"] != "scalar":
                views.append((t["id"], a["tensor"], a["role"] in ("output", "inout"), element_set(a), a))
    for (ti, bi, wi, si, ai), (tj, bj, wj, sj, aj) in product(views, views):
        if ti < tj and bi == bj and (wi or wj) and si & sj and tj not in reach[ti]:
            problems.append(
                f"tasks {ti} and {tj} conflict on tensor {bi} (arg {ai['index']} {ai['role']} region "
                f"{ai['region']}, arg {aj['index']} {aj['role']} region {aj['region']}) but no path of "
                "edges orders them"
            )
    for a, b in explicit:
        if b not in reach.get(a, set()):
            problems.append(f"explicit deps=: no path from task {a} to task {b}")
    return problems


def run_checks(prog: fp.FuzzProgram, directory, hint: str) -> None:
    jit, specs, path = fp.load_program(prog, directory)
    args = fp.make_inputs(prog)

    def fail(message: str) -> None:
        inputs = path.with_suffix(".inputs.pt")
        torch.save(args, inputs)
        files = f"source: {path}\ninputs: {inputs} (torch.load: the arguments, in order)"
        pytest.fail(f"{message}\n{files}\n{describe(prog, hint)}", pytrace=False)

    # the pass pipeline (verifying after every pass), then C++ and g++
    try:
        front = jit.program()
        compiled = jit.compile()
    except Exception as e:  # noqa: BLE001 - any compile failure of a valid program is a finding
        fail(f"a valid program failed to compile: {type(e).__name__}: {e}")
    # (b) printed IR parses back
    try:
        check_roundtrip(front, "front-end IR")
        check_roundtrip(compiled.program(), "final IR")
    except AssertionError as e:
        fail(str(e))

    runs = {}
    for platform in ("interp", "sim"):
        a = [x.clone() if torch.is_tensor(x) else x for x in args]
        cfg = {"enable_dep_gen": True, "num_workers": 3} if platform == "sim" else {}
        try:
            compiled.run(*a, platform=platform, **cfg)
        except Exception as e:  # noqa: BLE001
            fail(f"{platform} run failed: {type(e).__name__}: {e}")
        runs[platform] = a
    outs, bounds, info = prog.evaluate(args, TOLERATE)

    problems = []
    exact = total = 0
    for spec, model, bound, sim, interp in zip(specs, outs, bounds, runs["sim"], runs["interp"]):
        if spec.kind in ("in", "scalar"):
            continue
        # the model is the error bound's reference: it must compute what interp computes
        if not bool(bits_equal(model, interp).all()):
            bad = (~bits_equal(model, interp)).nonzero().tolist()[:4]
            problems.append(
                f"{spec.name}: the fuzz model disagrees with interp at {bad} "
                f"(model {[model[tuple(i)].item() for i in bad]}, interp {[interp[tuple(i)].item() for i in bad]})"
            )
            continue
        p = compare(spec.name, sim, interp, bound)
        if p:
            problems.append(p)
        exact += int((bound == 0).sum())
        total += bound.numel()
    # (c) dependency ordering
    deps = json.loads((compiled.work_dir / "dfx_outputs" / "deps.json").read_text())
    if len(deps["tasks"]) != info["tasks"]:
        problems.append(f"deps.json has {len(deps['tasks'])} tasks, the program submits {info['tasks']}")
    problems += check_deps(deps, info["explicit"])
    if total:
        event(f"bit-exact elements: {'all' if exact == total else 'none' if exact == 0 else 'some'}")
    for f in sorted(prog.features):
        event(f"pattern {f}")
    if problems:
        fail("\n".join(problems) + f"\nbuild: {compiled.work_dir}")
    # thousands of programs: keep only the builds and sources of failures
    shutil.rmtree(compiled.work_dir, ignore_errors=True)
    path.unlink(missing_ok=True)


# --- properties -----------------------------------------------------------------------------------

SHARD_IDS = range(SHARDS) if ONLY_SHARD is None else [int(ONLY_SHARD)]


@pytest.mark.slow
@pytest.mark.parametrize("shard", SHARD_IDS)
def test_fuzz_programs(shard, tmp_path_factory):
    """(a), (b) and (c) on random programs, compiled and run on sim and interp."""
    directory = tmp_path_factory.mktemp(f"fuzz_shard{shard}")

    @seed(shard_seed(shard))
    @settings(
        settings.get_profile(PROFILE if FUZZ else "ci"),
        max_examples=PER_SHARD,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(prog=fp.programs(OPTS))
    def inner(prog):
        run_checks(prog, directory, reproduce_hint(shard))

    inner()


@pytest.mark.slow
@settings(
    settings.get_profile(PROFILE if FUZZ else "ci"),
    max_examples=FRONTEND_EXAMPLES * (10 if FUZZ else 1),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@seed(SEED)
@given(prog=fp.programs(OPTS))
def test_fuzz_frontend(tmp_path_factory, prog):
    """(b) and the pass pipeline on many more programs: no g++, so it is cheap."""
    where = describe(prog, reproduce_hint(None))
    jit, _, path = fp.load_program(prog, tmp_path_factory.getbasetemp() / "fuzz_frontend")
    try:
        program = jit.program()
        final, _ = fp.PassManager(fp.DEFAULT_PIPELINE).run(program)
    except Exception as e:  # noqa: BLE001
        pytest.fail(
            f"a valid program failed in the front-end or passes: {type(e).__name__}: {e}\nsource: {path}\n{where}",
            pytrace=False,
        )
    try:
        check_roundtrip(program, "front-end IR")
        check_roundtrip(final, "final IR")
    except AssertionError as e:
        pytest.fail(f"{e}\nsource: {path}\n{where}", pytrace=False)
    path.unlink(missing_ok=True)


# --- the checkers themselves ----------------------------------------------------------------------


def _task(tid: int, *args: tuple[str, int, list[int]]) -> dict:
    """A deps.json task whose args are (role, offset, shape) views of tensor 0 ([8, 8], row-major)."""
    return {
        "id": tid,
        "name": f"t{tid}",
        "worker": 0,
        "args": [
            {
                "index": i,
                "role": role,
                "tensor": 0,
                "shape": shape,
                "strides": [8, 1],
                "offset": off,
                "region": None,
            }
            for i, (role, off, shape) in enumerate(args)
        ],
    }


def test_deps_checker_finds_missing_and_transitive_orderings():
    write_top = ("output", 0, [4, 8])
    read_middle = ("input", 16, [4, 8])  # rows 2..5: overlaps the top half
    left_cols, right_cols = ("output", 0, [8, 4]), ("output", 4, [8, 4])  # interleaved, disjoint
    ok = {"status": "ok", "tasks": [_task(0, write_top), _task(1, read_middle)], "edges": []}
    assert len(check_deps(ok, [])) == 1  # RAW without an edge
    ok["edges"] = [{"pred": 0, "succ": 1}]
    assert check_deps(ok, []) == []
    chain = {
        "status": "ok",
        "tasks": [_task(0, write_top), _task(1, ("inout", 0, [2, 8])), _task(2, write_top)],
        "edges": [{"pred": 0, "succ": 1}, {"pred": 1, "succ": 2}],
    }
    assert check_deps(chain, []) == []  # 0 -> 2 (WAW) is ordered through 1
    assert len(check_deps(chain, [(0, 2), (2, 0)])) == 1  # an explicit dep needs a path too
    cols = {"status": "ok", "tasks": [_task(0, left_cols), _task(1, right_cols)], "edges": []}
    assert check_deps(cols, []) == []


def test_compare_demands_bits_where_the_bound_is_zero():
    interp = torch.tensor([1.0, 2.0, 3.0, 0.0])
    sim = interp.clone()
    sim[1] = torch.nextafter(sim[1], torch.tensor(9.0))
    sim[3] = -0.0
    bound = torch.tensor([0.0, 0.0, 1e-3, 0.0], dtype=torch.float64)
    assert "2 of 4 elements" in compare("y", sim, interp, bound)
    bound[3] = fp.ZERO_SIGN  # a zero whose sign may differ: equal, not bit-exact
    assert "1 of 4 elements" in compare("y", sim, interp, bound)
    bound[1] = 1e-6
    assert compare("y", sim, interp, bound) is None
    sim[3] = 2.0**-149
    assert "1 of 4 elements" in compare("y", sim, interp, bound)


# --- the assumptions of the tolerance model --------------------------------------------------------


def _float_sample() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 2**31, (400_000,), generator=gen, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = x[torch.isfinite(x) & (x.abs() < 60)]
    return torch.cat([x, -x, torch.linspace(-60, 60, 100_001)])


def _reference_magnitude(name: str, xs: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """The magnitude whose ulps the model counts: |f(x)|, for gelu max(|gelu(x)|, |x|) = |x|."""
    return torch.maximum(want.abs(), xs.double().abs()) if name.startswith("gelu") else want


@pytest.mark.slow
def test_torch_transcendental_error_assumptions():
    """interp's exp/log/tanh/sigmoid/silu/exp2/log2/erf/gelu/gelu_tanh/softplus/log1p (torch, CPU) stay within
    fp.TORCH_ULPS of the exact value (float64) on a sample of floats, through both torch's
    vectorized and scalar loops; bf16/f16 within that plus half an ulp of their own."""
    x = _float_sample()
    for name, fn in fp._TORCH_UNARY.items():
        if name not in fp.TORCH_ULPS:
            continue
        xs = x.abs() + 2.0**-20 if name in ("log", "log2") else x
        xs = xs[xs > -0.999] if name == "log1p" else xs
        want = fn(xs.double())
        ref = _reference_magnitude(name, xs, want)
        for got in (fn(xs), fn(torch.stack([xs, xs], 1)[:, 0])):  # contiguous / strided
            err = (got.double() - want).abs() / fp.ulp(fp.F32, ref)
            assert err.max().item() <= fp.TORCH_ULPS[name], (name, err.max().item())
        for d, dt in ((torch.bfloat16, fp.BF16), (torch.float16, fp.F16)):
            h = xs.to(d).unique()  # at most 2^16 values
            h = h[torch.isfinite(h) & (h > 0 if name in ("log", "log2") else h > -0.999 if name == "log1p" else h == h)]
            want = fn(h.double())
            ref = _reference_magnitude(name, h, want)
            got = fn(h).double()
            ok = torch.isfinite(want) & (want.abs() < 60000)
            limit = fp.TORCH_ULPS[name] * fp.ulp(fp.F32, ref) + 0.5 * fp.ulp(dt, ref)
            assert bool(((got - want).abs() <= limit)[ok].all()), (name, d)


@pytest.mark.slow
def test_torch_pow_and_reciprocal_assumptions():
    """interp's pow (a positive base; tile^tile, tile^scalar and scalar^tile, the scalar a 0-dim
    tensor of the tile's dtype as interp passes it) is within fp.TORCH_ULPS['pow'] of the exact
    value, bf16/f16 its f32 pow rounded once; reciprocal is correctly rounded (1 / x)."""
    gen = torch.Generator().manual_seed(2)
    b = torch.rand(500_000, generator=gen) * 8 + 2.0**-4
    e = (torch.rand(500_000, generator=gen) * 2 - 1) * 6
    cases = [(b, e), (torch.stack([b, b], 1)[:, 0], e)]
    cases += [(b, torch.tensor(v)) for v in (2.0, 0.5, 3.0, -1.0, 2.5, -1.5, 1.5, -0.5, 0.0, 1.0, -2.0)]
    cases += [(torch.tensor(v), e) for v in (2.0, 0.5, 1.5, 3.0, 0.75)]
    for x, y in cases:
        want = torch.pow(x.double(), y.double())
        err = (torch.pow(x, y).double() - want).abs() / fp.ulp(fp.F32, want)
        assert err.max().item() <= fp.TORCH_ULPS["pow"], (y if y.dim() == 0 else x, err.max().item())
        for d in (torch.bfloat16, torch.float16):
            got, once = torch.pow(x.to(d), y.to(d)), torch.pow(x.to(d).float(), y.to(d).float()).to(d)
            assert bool(bits_equal(got, once).all()), d
    x = _float_sample()
    x = x[x != 0]
    assert bool(bits_equal(torch.reciprocal(x), (1 / x.double()).float()).all())
    for d in (torch.bfloat16, torch.float16):
        h = x.to(d)
        h = h[(h != 0) & torch.isfinite(h)]
        assert bool(bits_equal(torch.reciprocal(h), (1 / h.float()).to(d)).all()), d


def test_torch_half_reductions_accumulate_in_f32():
    """interp's bf16/f16 row/col sums and means equal the f32 sum (mean) rounded once (the
    bound assumes it); the f32 mean is within one ulp of the f32 sum over n."""
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(256, 32, generator=gen) * 4 - 2
    for dim in (0, -1):
        want = x.sum(dim=dim, keepdim=True).double() / x.shape[dim]
        got = x.mean(dim=dim, keepdim=True).double()
        assert ((got - want).abs() <= fp.ulp(fp.F32, want)).all()
    for d in (torch.bfloat16, torch.float16):
        h = x.to(d)
        for dim in (0, -1):
            u = fp.ulp(fp.BF16 if d == torch.bfloat16 else fp.F16, h.float().sum(dim=dim, keepdim=True))
            want = h.float().sum(dim=dim, keepdim=True)
            got = h.sum(dim=dim, keepdim=True, dtype=d).float()
            assert ((got - want).abs() <= u).all()
            want = h.float().mean(dim=dim, keepdim=True)
            got = h.mean(dim=dim, keepdim=True).float()
            assert ((got - want).abs() <= fp.ulp(fp.BF16 if d == torch.bfloat16 else fp.F16, want)).all()


# --- known bugs found by the fuzz net: each pinned by a strict xfail ---------------------------------
# The generator produces every one of them; by default the bounds allow for them (fp.KNOWN_BUGS)
# so that the net keeps finding new bugs. When a fix lands, its test XPASSes (a failure under
# strict=True): it becomes a plain regression test and the fp.KNOWN_BUGS entry goes.

KNOWN_BUGS_SOURCE = """import tilescope as ts


@ts.kernel
def bugs(x: ts.Tensor[[1, 16], ts.f32], lit: ts.Out[[1, 16], ts.f32], fma: ts.Out[[1, 16], ts.f32],
         root: ts.Out[[1, 16], ts.f32]):
    a = ts.load(x, [0, 0], [1, 16])
    ts.store(lit, [0, 0], a * 1.0000000596046448)
    ts.store(fma, [0, 0], a * -1.7322763204574585 + a)
    ts.store(root, [0, 0], ts.sqrt(ts.abs(a)))


@ts.kernel
def zeros4(x: ts.Tensor[[1, 4], ts.f32], zero: ts.Out[[1, 4], ts.f32]):
    ts.store(zero, [0, 0], ts.maximum(ts.load(x, [0, 0], [1, 4]), ts.zeros([1, 4], ts.f32)))


@ts.kernel
def sum4(x: ts.Tensor[[1, 4], ts.f32], total: ts.Out[[1, 1], ts.f32]):
    ts.store(total, [0, 0], ts.row_sum(ts.load(x, [0, 0], [1, 4])))


@ts.kernel
def tiny(x: ts.Tensor[[1, 16], ts.f32], herf: ts.Out[[1, 16], ts.bf16], hgelu: ts.Out[[1, 16], ts.bf16]):
    a = ts.load(x, [0, 0], [1, 16])
    ts.store(herf, [0, 0], ts.erf(ts.cast(a * 1e-05, ts.bf16)))
    ts.store(hgelu, [0, 0], ts.gelu(ts.cast(a * 2.5e-38, ts.bf16)))


@ts.jit
def regress(x: ts.Tensor[[1, 16], ts.f32], lit: ts.Out[[1, 16], ts.f32], fma: ts.Out[[1, 16], ts.f32],
            root: ts.Out[[1, 16], ts.f32], zero: ts.Out[[1, 16], ts.f32], total: ts.Out[[1, 16], ts.f32],
            herf: ts.Out[[1, 16], ts.bf16], hgelu: ts.Out[[1, 16], ts.bf16]):
    bugs(x, lit, fma, root)
    tiny(x, herf, hgelu)
    zeros4(x[:, 0:4], zero[:, 0:4])
    sum4(x[:, 12:16], total[:, 0:1])
"""
# [0]: the midpoint literal; [1]: -0.0 for maximum; [2:4]: sqrt off by one ulp; [12:16]: -0.0 sum
BUG_INPUT = [1.0, -0.0, 1.3549762, 2.6488924, -1.25, 0.3, -0.0, 1.75, -1.9, 0.6, -0.45, 1.1] + [-0.0] * 4


@pytest.fixture(scope="module")
def known_bug_outputs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILESCOPE_BUILD_DIR", str(tmp_path_factory.mktemp("known_bugs")))
    try:
        jit, _ = fp.load_module_source(
            KNOWN_BUGS_SOURCE, "regress", tmp_path_factory.mktemp("known_bugs_src")
        )
        prog = jit.compile()
        x = torch.tensor([BUG_INPUT], dtype=torch.float32)
        outs = {}
        for platform in ("sim", "interp"):
            ys = [torch.full((1, 16), 7.0) for _ in range(5)]
            ys += [torch.full((1, 16), 7.0, dtype=torch.bfloat16) for _ in range(2)]
            prog.run(x, *ys, platform=platform)
            outs[platform] = dict(zip(("lit", "fma", "root", "zero", "total", "herf", "hgelu"), ys))
        yield outs
    finally:
        mp.undo()


def _assert_bit_exact(outs, name):
    sim, interp = outs["sim"][name], outs["interp"][name]
    same = bits_equal(sim, interp)
    assert bool(same.all()), (
        f"{name}: sim {sim[~same].tolist()} != interp {interp[~same].tolist()} at {(~same).nonzero().tolist()}"
    )


@pytest.mark.slow
def test_a_literal_halfway_between_two_f32_values_rounds_as_on_interp(known_bug_outputs):
    # x * 1.0000000596046448 (1 + 2**-24) at x = 1.0: g++ read the decimal as 1.0000001; the
    # literal is now emitted as the f32 interp rounds it to (ties to even: 1.0)
    _assert_bit_exact(known_bug_outputs, "lit")
    assert known_bug_outputs["sim"]["lit"][0, 0].item() == 1.0


@pytest.mark.slow
def test_a_multiply_add_rounds_twice_on_sim_as_on_interp(known_bug_outputs):
    # a * c + a was fused into one rounding by g++ (-ffp-contract=fast): 1 ulp apart on most
    # elements; kernels are compiled with -ffp-contract=off
    _assert_bit_exact(known_bug_outputs, "fma")


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="known bug zero_sign_minmax: " + fp.KNOWN_BUGS["zero_sign_minmax"])
def test_known_bug_maximum_of_signed_zeros(known_bug_outputs):
    _assert_bit_exact(known_bug_outputs, "zero")  # maximum(-0.0, 0.0) in a [1, 4] tile: sim +0.0, interp -0.0


@pytest.mark.slow
def test_sqrt_is_correctly_rounded_on_interp_as_on_sim(known_bug_outputs):
    # sqrt(1.3549762): sim 1.1640345 (exact); torch's f32 CPU sqrt gave 1.1640344
    _assert_bit_exact(known_bug_outputs, "root")


@pytest.mark.slow
def test_a_sum_of_negative_zeros_is_positive_zero_as_on_interp(known_bug_outputs):
    # row_sum([-0.0] * 4) was -0.0 on sim (its lanes started from the terms), +0.0 on interp
    _assert_bit_exact(known_bug_outputs, "total")
    assert not torch.signbit(known_bug_outputs["sim"]["total"][0, 0])


@pytest.mark.slow
def test_half_erf_and_gelu_compute_in_f32_on_interp_as_on_sim(known_bug_outputs):
    # bf16 erf(1e-5 x) and gelu(2.5e-38 x): torch's bf16 erf is up to ~3e-7 off near 0 (erf(1e-5)
    # 2.5% high, erf(1e-7) = 0) and its bf16 gelu flushes results below 2^-126 to zero; interp
    # now computes both in f32 and rounds once, as the tile library does
    _assert_bit_exact(known_bug_outputs, "herf")
    _assert_bit_exact(known_bug_outputs, "hgelu")
    assert bool((known_bug_outputs["interp"]["hgelu"][0, 2:] != 0).any())
