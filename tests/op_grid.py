"""One helper that checks DSL code against torch on both platforms.

``check_kernel`` writes a one-task program around a kernel body (the kernel and the
orchestration take the same parameters, and the orchestration passes them whole), compiles it
once, runs it on sim and on interp, and compares every output with what ``golden`` computes
from the same inputs in torch. Op tests build their shape x dtype grids by parametrizing the
body text and the golden, so every op goes through exactly the same path: front-end, passes,
codegen, the C++ tile library on sim, the reference interpreter on interp.

Tolerances are per dtype (``TOLERANCE``): the tile library and torch may round a
transcendental differently by an ulp or two, and a bf16/f16 result that rounds differently is
one of its ulps away.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from fuzz_programs import load_module_source

import tilescope as ts

TORCH = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f64": torch.float64,
    "i32": torch.int32,
    "i64": torch.int64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool_": torch.bool,
}
TOLERANCE = {  # (rtol, atol) of a result against torch's
    "f32": (2e-6, 1e-6),
    "f64": (1e-12, 1e-12),
    "bf16": (1.6e-2, 1e-2),
    "f16": (2e-3, 1e-3),
}


@dataclass(frozen=True)
class Arg:
    """A parameter of the generated kernel and program: a tensor (In, Out or InOut) or a scalar."""

    name: str
    shape: tuple[int, ...] | None  # None: a scalar
    dtype: str
    kind: str = "in"  # in, out, inout, scalar
    init: Callable[[torch.Generator], torch.Tensor] | None = None  # an input's values
    value: Any = None  # a scalar's value

    def annotation(self) -> str:
        if self.kind == "scalar":
            return f"ts.Scalar[ts.{self.dtype}]"
        wrapper = {"in": "ts.Tensor", "out": "ts.Out", "inout": "ts.InOut"}[self.kind]
        return f"{wrapper}[{list(self.shape)}, ts.{self.dtype}]"


def uniform(lo: float, hi: float, shape: tuple[int, ...], dtype: str) -> Callable[[torch.Generator], torch.Tensor]:
    """Values uniform in [lo, hi) (integers: rounded down), as ``dtype``."""

    def make(gen: torch.Generator) -> torch.Tensor:
        x = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
        return (x.floor() if not TORCH[dtype].is_floating_point else x).to(TORCH[dtype])

    return make


@dataclass
class Outcome:
    """What one platform's run gave, and the golden."""

    platform: str
    outputs: dict[str, torch.Tensor]
    golden: dict[str, torch.Tensor]
    inputs: dict[str, Any] = field(default_factory=dict)


def program_source(args: list[Arg], body: str, *, kernel: str = "k", program: str = "p") -> str:
    """A module with one kernel of ``body`` over ``args`` and a program that submits it once."""
    params = ", ".join(f"{a.name}: {a.annotation()}" for a in args)
    names = ", ".join(a.name for a in args)
    body = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return (
        "import tilescope as ts\n\n\n"
        f"@ts.kernel\ndef {kernel}({params}):\n{body}\n\n\n"
        f"@ts.jit\ndef {program}({params}):\n    {kernel}({names})\n"
    )


def load_grid_program(source: str, directory: Path) -> Any:
    """The ``p`` of ``source``, from a module file named by the source's hash in ``directory``: the
    same program text is the same file, so its generated C++ (whose line markers name the file)
    is the same and the compile cache serves it (a grid runs one program on many values)."""
    stem = "grid_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    return load_module_source(source, "p", directory, stem)[0]


def make_inputs(args: list[Arg], seed: int = 0) -> dict[str, Any]:
    """Every argument's value: inputs from their ``init`` (seeded), outputs zeros, scalars as given."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for a in args:
        if a.kind == "scalar":
            out[a.name] = a.value
        elif a.kind == "out":
            out[a.name] = torch.zeros(a.shape, dtype=TORCH[a.dtype])
        else:
            if a.init is None:
                raise ValueError(f"input {a.name} needs init=")
            out[a.name] = a.init(gen).contiguous()
    return out


def check_kernel(
    directory: Path,
    args: list[Arg],
    body: str,
    golden: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
    *,
    platforms: tuple[str, ...] = ("sim", "interp"),
    tolerance: dict[str, tuple[float, float]] | None = None,
    seed: int = 0,
    compile_cfg: dict[str, Any] | None = None,
) -> list[Outcome]:
    """Run the kernel ``body`` over ``args`` (its module written under ``directory``, where a
    program of the same text is reused) on each platform and assert every output equals
    ``golden(inputs)`` (a dict of the outputs' expected tensors, computed in torch) within the
    output dtype's tolerance (``TOLERANCE``, overridden per dtype by ``tolerance``); integer and
    bool outputs must be equal. Returns what each platform gave."""
    tol = {**TOLERANCE, **(tolerance or {})}
    prog = load_grid_program(program_source(args, body), directory)
    compiled = prog.compile(**(compile_cfg or {}))
    outcomes = []
    for platform in platforms:
        values = make_inputs(args, seed)
        want = golden({k: (v.clone() if torch.is_tensor(v) else v) for k, v in values.items()})
        compiled.run(*(values[a.name] for a in args), platform=platform)
        got = {a.name: values[a.name] for a in args if a.kind in ("out", "inout")}
        for name, expected in want.items():
            _assert_close(got[name], expected, tol, f"{platform}: {name}")
        outcomes.append(Outcome(platform, got, want, values))
    return outcomes


def _assert_close(got: torch.Tensor, want: torch.Tensor, tol: dict, what: str) -> None:
    want = want.to(got.dtype) if got.dtype != want.dtype else want
    assert got.shape == want.shape, f"{what}: shape {list(got.shape)}, expected {list(want.shape)}"
    if not got.is_floating_point():
        bad = got != want
        assert not bool(bad.any()), f"{what}: {int(bad.sum())} elements differ, first at {_first(bad)}: " \
            f"{got[bad][:4].tolist()} vs {want[bad][:4].tolist()}"
        return
    rtol, atol = tol[_dtype_name(got.dtype)]
    g, w = got.double(), want.double()
    same_special = (torch.isnan(g) & torch.isnan(w)) | ((g == w) & torch.isinf(w))
    close = same_special | ((g - w).abs() <= atol + rtol * w.abs())
    if not bool(close.all()):
        bad = ~close
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ beyond rtol={rtol}, atol={atol}; "
            f"first at {_first(bad)}: got {g[bad][:4].tolist()}, expected {w[bad][:4].tolist()}"
        )


def _first(mask: torch.Tensor) -> list[int]:
    return [int(i) for i in mask.nonzero()[0]]


def _dtype_name(d: torch.dtype) -> str:
    return next(k for k, v in TORCH.items() if v == d)


def ts_dtype(name: str):
    """The tilescope dtype of a name (``"bf16"`` -> ``ts.bf16``)."""
    return getattr(ts, name)
