"""Intermediates against their golden references: what ``golden_fn`` filled besides the outputs
(``t["h"] = ...``, ``t["rowsum"] = ...``), compared with what sim computed, in dependency order.

A reference is named like what it checks:

- an orchestration intermediate (``h = ts.create_tensor(...)``): the whole tensor, as the tasks
  that wrote it left it (elements no task wrote are not compared);
- a probe (``ts.probe(tile, "rowsum")`` in a kernel): every tile it captured, in task order, the
  reference given as one tile (a probe that ran once), one tile per capture stacked
  (``[n, R, C]``) or the tiles one after the other along the rows (``[n * R, C]``: what a
  row-tiled program's reference naturally is).

The first divergence is the one in the earliest task (a probe before the task's outputs); its
culprit is that task and, for a probe, the statement that computed the probed value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.localize.metrics import close, number, summary
from tilescope.analysis.localize.source_map import statements
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.debug.deps_json import buffer_names, region_box
from tilescope.debug.intermediates import record_tensor
from tilescope.debug.tensor_dump import view_of
from tilescope.ir.nodes import Assign, Kernel, Probe, Program, Var
from tilescope.runtime.records import RunReport


@dataclass
class Divergence:
    """A reference sim does not match: where it first does not."""

    name: str
    kind: str  # "probe" or "intermediate"
    task_id: int
    kernel: str
    text: str  # the evidence line
    stmt: Any = None  # for a probe: the statement that computed the probed value


@dataclass
class ReferenceCheck:
    """Every reference compared: the first divergence (None: all match), the evidence, the
    names without a reference, and the references that could not be used (with why)."""

    first: Divergence | None = None
    evidence: list[str] = field(default_factory=list)
    without: list[str] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)


def probe_sites(program: Program) -> dict[str, list[tuple[Kernel, int, Probe]]]:
    """Every probe of the program by name (kernels may share one): its kernels, ids (places in
    the kernel) and statements."""
    out: dict[str, list[tuple[Kernel, int, Probe]]] = {}
    for k in program.kernels:
        for i, s in enumerate(x for x in statements(k.body) if isinstance(x, Probe)):
            out.setdefault(s.name, []).append((k, i, s))
    return out


def producer(kernel: Kernel, probe: Probe) -> Any:
    """The statement that computed a probe's value: the last assignment to the probed variable
    before the probe; the probe itself when it probes an expression."""
    if not isinstance(probe.value, Var):
        return probe
    last = probe
    for s in statements(kernel.body):
        if s is probe:
            return last
        if isinstance(s, Assign) and s.target == probe.value.name:
            last = s
    return last


def intermediates(build: Build, report: RunReport) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every orchestration intermediate (by its name) as the tasks that wrote it left it, from
    the run's level-2 dump, and the mask of the elements a task wrote."""
    assert report.dump is not None
    names = buffer_names(build, report, program_shapes=True)
    inter = {b.buffer_id: b for b in report.buffers if b.program_arg < 0}
    out: dict[str, torch.Tensor] = {}
    written: dict[str, torch.Tensor] = {}
    for r in report.dump.records:
        if r.stage != "after_completion" or r.buffer_id not in inter:
            continue
        name, layout = names.get(r.buffer_id, (None, None))
        box = region_box(view_of(r), layout)
        value = record_tensor(report.dump.payload, r)
        if name is None or box is None or value is None:
            continue
        b = inter[r.buffer_id]
        if name not in out:
            dtype = value.dtype
            out[name] = torch.full(b.shape, float("nan"), dtype=dtype) if dtype.is_floating_point else torch.zeros(b.shape, dtype=dtype)
            written[name] = torch.zeros(b.shape, dtype=torch.bool)
        index = tuple(slice(lo, hi) for lo, hi in box)
        out[name][index] = value.reshape(out[name][index].shape)
        written[name][index] = True
    return {name: (value, written[name]) for name, value in out.items()}


def _writers_of(build: Build, report: RunReport, name: str) -> list[tuple[int, tuple[slice, ...]]]:
    names = buffer_names(build, report, program_shapes=True)
    ids = {b for b, (n, _) in names.items() if n == name}
    out = []
    for a in report.task_args:
        if a.kind == "tensor" and a.buffer_id in ids and a.direction in ("out", "inout"):
            box = region_box(a, names[a.buffer_id][1])
            if box is not None:
                out.append((a.task_id, tuple(slice(lo, hi) for lo, hi in box)))
    return sorted(out, key=lambda x: x[0])


def _captures(tasks: list[CapturedTask], sites: list[tuple[Kernel, int, Probe]]) -> list[tuple[int, str, torch.Tensor]]:
    """(task, kernel, tile) of every capture of a probe name, in task order."""
    ids = {k.name: pid for k, pid, _ in sites}
    return [(t.task_id, t.kernel, tile) for t in tasks if t.kernel in ids for pid, tile in t.probes if pid == ids[t.kernel]]


def _probe_reference(ref: torch.Tensor, n: int, tile: torch.Size) -> list[torch.Tensor] | None:
    """The reference of each of ``n`` captures of a ``tile``-shaped probe, or None if ``ref``'s
    shape is none of the accepted ones."""
    if tuple(ref.shape) == tuple(tile) and n == 1:
        return [ref]
    if tuple(ref.shape) == (n, *tile):
        return list(ref.unbind(0))
    if len(tile) == 2 and tuple(ref.shape) == (n * tile[0], tile[1]):
        return list(ref.split(tile[0], dim=0))
    return None


def check_references(
    build: Build,
    program: Program,
    report: RunReport,
    tasks: list[CapturedTask],
    refs: dict[str, torch.Tensor],
    rtol: float,
    atol: float,
) -> ReferenceCheck:
    """Compare every reference with what sim computed (see the module docstring)."""
    check = ReferenceCheck()
    probes = probe_sites(program)
    inter = intermediates(build, report)
    found: list[tuple[tuple[int, int], Divergence]] = []
    for name, ref in refs.items():
        if name in probes:
            sites = probes[name]
            kernel_names = ", ".join(k.name for k, _, _ in sites)
            caps3 = _captures(tasks, sites)
            if not caps3:
                check.unusable.append(f"reference {name!r}: probe {name} of kernel {kernel_names} captured nothing")
                continue
            caps = [(tid, tile) for tid, _, tile in caps3]
            tile = caps[0][1].shape
            wanted = _probe_reference(ref, len(caps), tile)
            if wanted is None:
                n, (r, c) = len(caps), (tuple(tile) + (1, 1))[:2]
                check.unusable.append(
                    f"reference {name!r} has shape {list(ref.shape)}; probe {name} of kernel {kernel_names} captured "
                    f"{n} tile(s) of {list(tile)}: give {list(tile)} (one capture), {[n, *tile]} (one per capture, "
                    f"in task order) or {[n * r, c]} (one after the other along the rows)"
                )
                continue
            bad = [(i, tid) for i, ((tid, got), want) in enumerate(zip(caps, wanted)) if not bool(close(got, want, rtol, atol).all())]
            if not bad:
                check.evidence.append(f"probe {name} ({kernel_names}): all {len(caps)} captures match their reference")
                continue
            i, tid = bad[0]
            kname = caps3[i][1]
            kernel, pid, stmt = next(s for s in sites if s[0].name == kname)
            n, mabs, mrel = summary(caps[i][1], wanted[i], rtol, atol)
            row = next((k for k in build.kernels if k["name"] == kernel.name), {})
            line = next((p.get("line") for p in row.get("probes", []) if p.get("id") == pid), None) or stmt.loc
            text = (
                f"probe {name} of kernel {kernel.name} (at {line}) leaves its reference first in task {tid}: "
                f"{n} of {caps[i][1].numel()} elements outside rtol/atol, max abs diff {number(mabs)}, max rel diff "
                f"{number(mrel)}; {len(bad)} of {len(caps)} captures differ"
            )
            found.append(((tid, 0), Divergence(name, "probe", tid, kernel.name, text, producer(kernel, stmt))))
        elif name in inter:
            got, wrote = inter[name]
            if tuple(ref.shape) != tuple(got.shape):
                check.unusable.append(
                    f"reference {name!r} has shape {list(ref.shape)}; the intermediate {name} is {list(got.shape)}"
                )
                continue
            mism = ~close(got, ref, rtol, atol) & wrote
            if not bool(mism.any()):
                check.evidence.append(f"intermediate {name}: every element the tasks wrote matches its reference")
                continue
            writers = [(tid, box) for tid, box in _writers_of(build, report, name) if bool(mism[box].any())]
            if not writers:
                continue
            tid = writers[0][0]
            kernel = next((t.kernel for t in tasks if t.task_id == tid), "?")
            text = (
                f"intermediate {name} leaves its reference first where task {tid} (kernel {kernel}) wrote it: "
                f"{int(mism.sum())} of {mism.numel()} elements differ, written by {len(writers)} task(s)"
            )
            found.append(((tid, 1), Divergence(name, "intermediate", tid, kernel, text)))
        else:
            known = sorted(probes) + sorted(inter)
            check.unusable.append(
                f"reference {name!r} names no probe or intermediate of {program.name} "
                f"(they are: {', '.join(known) or 'none'}); it was not compared"
            )
    found.sort(key=lambda x: x[0])
    check.evidence += [d.text for _, d in found]
    check.first = found[0][1] if found else None
    check.without = [f"probe {n}" for n in sorted(probes) if n not in refs] + [
        f"intermediate {n}" for n in sorted(inter) if n not in refs
    ]
    return check


__all__ = ["Divergence", "ReferenceCheck", "check_references", "intermediates", "probe_sites", "producer"]
