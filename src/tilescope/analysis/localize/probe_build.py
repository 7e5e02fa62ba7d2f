"""The probe build of a kernel: its C++ as the build holds it (hand edits included), with a
probe after every statement, so that one task replayed alone shows the tile each statement
made; and the op-by-op comparison of those tiles with the error bound from the same inputs.

Invariants:
- The math is the build's own: the only lines changed are probe calls appended after a
  statement on its line (a tile assignment probes its variable, a store probes the box it
  wrote back from the tensor), and the build's own ``ts.probe`` calls renumbered. Probe ``i`` is
  the statement at position ``i`` of a pre-order walk of the kernel body (``source_map``).
- The probe build lives in ``dfx_outputs/localize/probe/`` and is compiled with the same
  compiler and flags as the build's kernels (through the object cache).
- The comparison pairs the build's captures with the bounded float64 run's values of the same
  statements in the order both ran; a capture that pairs with another statement (the C++ does
  more or less than the IR says) stops the comparison and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded
from tilescope.analysis.localize.metrics import coords, diffs
from tilescope.analysis.localize.source_map import StmtSite
from tilescope.analysis.localize.tasks import outside
from tilescope.build.manifest import Build
from tilescope.build.paths import LOCALIZE_DIR, PROBE_DIR, atomic_write, dfx_dir
from tilescope.codegen.cpp_common import tile_dims
from tilescope.ir.nodes import Assign, Kernel, Probe, Store
from tilescope.ir.types import TileType
from tilescope.runtime.interp import _KernelInterp
from tilescope.toolchain import BuildJob
from tilescope.toolchain import build as build_objects

_TARGET = re.compile(r"^(?:matmul_acc\((?P<acc>\w+),|(?:[\w:]+(?:<[^=]*>)?\s+)?(?P<name>\w+)\s*=)")
_STORE = re.compile(r"^store(?:<(?P<axes>.*?)>)?\((?P<view>\w+),\s*(?P<offs>\{[^}]*\})")
_USER_PROBE = re.compile(r"^probe\(probe_sink,\s*\d+")
_SINK = [
    "// localize's probe build: probe_sink is pointed at the runtime's recorder for the replayed task.",
    "static ProbeSink probe_sink = nullptr;",
    'extern "C" void ts_probe_install(ProbeSink sink) { probe_sink = sink; }',
]


class ProbeBuildError(Exception):
    """The probe build of a kernel could not be made (a line it cannot instrument, a compile error)."""


def instrument(text: str, sites: dict[int, StmtSite]) -> str:
    """``text`` (a kernel's C++) with a probe after every statement ``sites`` pairs with a line."""
    lines = text.splitlines()
    for site in sites.values():
        i = site.cpp_line - 1
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        if isinstance(site.stmt, Probe):  # the build's own probe, renumbered as its statement
            lines[i] = indent + _USER_PROBE.sub(f"probe(probe_sink, {site.index}", line.lstrip(), count=1)
            continue
        probe = _probe_call(site, site.text)
        if probe is None:
            continue
        code_end = line.rfind(";")
        if code_end < 0:
            raise ProbeBuildError(f"line {site.cpp_line} ({site.text!r}) is not one statement ending in ';'")
        lines[i] = line[: code_end + 1] + " " + probe + line[code_end + 1 :]
    out = "\n".join(lines) + "\n"
    if "#include <tilescope/probe.hpp>" not in out:
        out = out.replace("#include <tilescope/kernel.hpp>", "#include <tilescope/kernel.hpp>\n#include <tilescope/probe.hpp>", 1)
    if "ts_probe_install" not in out:
        entry = out.index('extern "C" void kernel_entry')
        out = out[:entry] + "\n".join(_SINK) + "\n\n" + out[entry:]
    return out


def _probe_call(site: StmtSite, code: str) -> str | None:
    s = site.stmt
    if isinstance(s, Assign) and isinstance(s.value.type, TileType):
        # NOTE: a recomputed tile's line computes its parts first: the statement's own is the last
        m = _TARGET.match(code.strip().rstrip(";").rsplit(";", 1)[-1].strip())
        if m is None:
            raise ProbeBuildError(f"cannot tell which variable line {site.cpp_line} ({code!r}) assigns")
        return f"probe(probe_sink, {site.index}, {m.group('acc') or m.group('name')});"
    if isinstance(s, Store):
        m = _STORE.match(code)
        if m is None:
            raise ProbeBuildError(f"cannot tell which box line {site.cpp_line} ({code!r}) stores")
        r, c = tile_dims(s.value.type)
        axes = f", {m.group('axes')}" if m.group("axes") else ""
        return f"probe_box<{r}, {c}{axes}>(probe_sink, {site.index}, {m.group('view')}, {m.group('offs')});"
    return None


def compile_probe_build(build: Build, kernel: str, text: str) -> Path:
    """Write the probe build of ``kernel`` into ``dfx_outputs/localize/probe/`` and compile it;
    returns the shared object. ProbeBuildError (with the compiler's message) if it does not compile."""
    folder = dfx_dir(build.work_dir, LOCALIZE_DIR, PROBE_DIR)
    src, so = folder / f"{kernel}.cpp", folder / f"{kernel}.so"
    atomic_write(src, text)
    try:
        build_objects([BuildJob(src, so)])
    except Exception as e:  # noqa: BLE001 - whatever the compiler says is the reason
        raise ProbeBuildError(f"the probe build {src} does not compile: {e}") from None
    return so


class _Recorded(_KernelInterp):
    """interp in the program's dtypes, keeping every tile assigned, stored or probed, in order."""

    def __init__(self, kernel: Kernel):
        super().__init__(kernel, float64=False)
        self.values: list[tuple[Any, torch.Tensor]] = []

    def assigned(self, s: Assign, value: Any) -> None:
        if torch.is_tensor(value):
            self.values.append((s, value.clone()))

    def probed(self, s: Probe, value: Any) -> None:
        self.values.append((s, value.clone()))

    def stored(self, s: Store, region: torch.Tensor) -> None:
        self.values.append((s, region.clone()))


def interp_values(kernel: Kernel, args: list[Any]) -> list[tuple[Any, torch.Tensor]]:
    """Every tile interp makes running ``kernel`` on ``args`` (updated in place), in the order it made them."""
    run = _Recorded(kernel)
    with torch.no_grad():
        run.run(args)
    return run.values


@dataclass
class OpDivergence:
    """The first statement whose tile leaves its bound in the probe build's replay."""

    site: StmtSite
    index: tuple[int, ...]
    got: float
    expected: float
    bound: float
    bad: int
    numel: int
    pair: int = 0  # its place among the values compared
    flat: int = 0  # the element's row-major position in the tile
    interp: float | None = None  # interp's value there, in the program's dtypes

    def text(self, task: int) -> str:
        """The evidence line, for the replay of task ``task``."""
        where = self.site.dsl_line or self.site.cpp
        interp = f", interp in the program's dtypes {self.interp:.9g}" if self.interp is not None else ""
        return (
            f"op by op in task {task}: the first statement whose tile leaves its bound is {where} "
            f"(`{self.site.text}`): {self.bad} of {self.numel} elements; at {list(self.index)} the build gave "
            f"{self.got:.9g}, float64 {self.expected:.9g} (bound +-{self.bound:.3g}){interp}"
        )


def compare_ops(
    sites: dict[int, StmtSite], captures: list[tuple[int, torch.Tensor]], values: list[tuple[Any, Bounded]]
) -> tuple[OpDivergence | None, str | None, int]:
    """Pair the probe build's ``captures`` (statement index, tile) with the bounded run's ``values``
    (statement, value) in the order both ran; returns the first statement that leaves its bound,
    why the pairing stopped early (None if it did not), and how many pairs were compared."""
    by_index = {s.index: s for s in sites.values()}
    compared = 0
    for (index, tile), (stmt, value) in zip(captures, values):
        site = by_index.get(index)
        if site is None or site.stmt is not stmt:
            return None, (
                f"the probe build's capture {compared} (statement {index}) pairs with another statement of the IR: "
                "the C++ does more or less than the IR says"
            ), compared
        if value.v.numel() != tile.numel():
            return None, (
                f"the probe build's capture {compared} (statement {index}) holds {tile.numel()} elements where the IR's "
                f"value holds {value.v.numel()}: the C++ does other than the IR says"
            ), compared
        compared += 1
        v, e = value.v.reshape(tile.shape), value.e.reshape(tile.shape)
        bad = outside(tile, v, e)
        if not bool(bad.any()):
            continue
        excess = torch.where(bad, diffs(tile, v)[0] - e, torch.zeros_like(e))
        flat = int(excess.reshape(-1).argmax())
        return OpDivergence(
            site, coords(flat, tile.shape), float(tile.reshape(-1)[flat]), float(v.reshape(-1)[flat]),
            float(e.reshape(-1)[flat]), int(bad.sum()), tile.numel(), compared - 1, flat,
        ), None, compared  # fmt: skip
    if len(captures) != len(values):
        return None, (
            f"the probe build captured {len(captures)} tiles where the IR makes {len(values)}: the C++ does more or "
            "less than the IR says"
        ), compared
    return None, None, compared


__all__ = [
    "OpDivergence", "ProbeBuildError", "compare_ops", "compile_probe_build", "instrument", "interp_values",
]  # fmt: skip
