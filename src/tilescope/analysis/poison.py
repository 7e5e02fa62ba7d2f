"""Never-written memory, found by poisoning it: two serial runs of a build on the same data, with
intermediates and Out arguments starting as two different byte patterns (``PATTERNS``), compared
task by task (``analyze``).

Invariants:
- Both runs are serial, so their tasks, ids and dumps pair one to one. An element holds *raw
  poison* when it shows pattern A in run A and pattern B in run B: nothing ever wrote it.
- A task's Out argument holding raw poison after the task is a region it declared as its output
  but did not store (``Unstored``; an InOut keeps what it does not write, so it is not judged),
  unless the task read at least as many raw-poison elements as it left: then it may have copied
  them, and it is a read of never-written memory instead.
- A task *read* never-written memory (``PoisonedRead``) when an input it was given holds raw
  poison and the elements it stored differ between the runs: what it computed depended on it.
- A program output element that differs between the runs depends on the poison
  (``PoisonReport.outputs``): that is what the user saw as wrong.

Running it:
Never-written memory, found by running twice with it poisoned (``--poison``, and the
``uninitialized`` step of ``tilescope triage``).

``poison_run`` runs the build twice on sim, serially, on copies of the same inputs, with every
intermediate (``create_tensor``) and every Out argument starting as byte pattern 0xA5 in one run
and 0x5A in the other, each run recording a level-2 tensor dump and the graph; then
``debug.triage.poison.analyze`` compares them task by task. The compile-time finding for a
kernel that cannot write part of an Out param (``report/report.json``'s ``unwritten``) is joined
to the task that did not store there, so the DSL line comes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.hazards import intersect
from tilescope.analysis.localize.tasks import CapturedTask, captured_tasks
from tilescope.analysis.recorded import recorded_run
from tilescope.build.build_report import load_report
from tilescope.build.manifest import Build
from tilescope.debug.deps_json import buffer_names, region_box
from tilescope.ir.unwritten import slice_text
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.records import RunReport
from tilescope.runtime.run_config import Recording

PATTERNS = (0xA5, 0x5A)
_INT_OF = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

Box = tuple[tuple[int, int], ...]


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as integers of the same size (bit patterns, comparable exactly)."""
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    return t.contiguous().view(_INT_OF[t.element_size()])


def pattern_bits(t: torch.Tensor, byte: int) -> torch.Tensor:
    """The bit pattern of an element of ``t``'s dtype whose bytes are all ``byte``."""
    if t.dtype == torch.bool:
        return torch.tensor(byte & 1, dtype=torch.uint8)
    return torch.full((t.element_size(),), byte, dtype=torch.uint8).view(_INT_OF[t.element_size()])[0]


def raw_poison(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where ``a`` (run A) and ``b`` (run B) hold the two patterns: elements nothing wrote."""
    return (bits(a) == pattern_bits(a, PATTERNS[0])) & (bits(b) == pattern_bits(b, PATTERNS[1]))


def differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where the two runs' elements differ bit for bit."""
    return bits(a) != bits(b)


def mask_boxes(mask: torch.Tensor, limit: int = 16) -> list[Box]:
    """Disjoint boxes covering exactly the True elements of ``mask`` (slabs of the first dim with
    the same rest merged); the bounding box alone when more than ``limit`` boxes would be needed."""
    if not bool(mask.any()):
        return []
    boxes = _boxes(mask)
    if len(boxes) <= limit:
        return boxes
    nz = mask.nonzero()
    lo, hi = nz.min(0).values.tolist(), nz.max(0).values.tolist()
    return [tuple((a, b + 1) for a, b in zip(lo, hi))]


def _boxes(mask: torch.Tensor) -> list[Box]:
    if mask.dim() == 0:  # a 0-dim tensor: its one element, a box of no dims
        return [()] if bool(mask) else []
    if mask.dim() == 1:
        m = torch.cat([torch.zeros(1, dtype=torch.int8), mask.to(torch.int8), torch.zeros(1, dtype=torch.int8)])
        edges = (m[1:] - m[:-1]).nonzero().reshape(-1).tolist()
        return [((a, b),) for a, b in zip(edges[0::2], edges[1::2])]
    slabs: list[tuple[int, int, tuple[Box, ...]]] = []
    for i in range(mask.shape[0]):
        rest = tuple(_boxes(mask[i])) if bool(mask[i].any()) else ()
        if slabs and slabs[-1][1] == i and slabs[-1][2] == rest:
            slabs[-1] = (slabs[-1][0], i + 1, rest)
        else:
            slabs.append((i, i + 1, rest))
    return [((lo, hi), *r) for lo, hi, rest in slabs for r in rest]


def box_text(name: str, boxes: list[Box], shape) -> str:
    """``y[:, 448:512]`` (``:`` for a whole dim), several joined by ``, ``."""
    return ", ".join(slice_text(name, b, shape) for b in boxes)


@dataclass
class Unstored:
    """Part of a task's Out region it did not store: raw poison there after it ran."""

    task: int
    kernel: str
    func_id: int
    arg: int
    param: str
    region: str  # the task's declared region, ``h[0:64, 0:512]``
    where: str  # the part not stored, in the parameter's coordinates: ``y[:, 448:512]``
    elements: int
    numel: int
    read_later: bool = False  # a later task read raw poison there, or a program output kept it
    buffer: int = 0
    boxes: list[Box] = field(default_factory=list)  # what it did not store, in its buffer's index space

    def text(self) -> str:
        """One line: the task, its kernel, its Out param and region, and what it did not store."""
        return (
            f"task {self.task} (kernel {self.kernel}) declared {self.param} = {self.region} as its output but did not "
            f"store {self.where} ({self.elements} of {self.numel} elements)"
        )


@dataclass
class PoisonedRead:
    """A task that read elements nothing wrote, and stored results that depend on them."""

    task: int
    kernel: str
    arg: int
    param: str
    region: str
    where: str
    elements: int
    writers: list[int] = field(default_factory=list)  # tasks whose declared Out covered what it read
    # which of the argument's elements nothing wrote (the argument's shape)
    mask: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def text(self) -> str:
        """One line: the reader, what it read that nothing wrote, and who declared it."""
        who = (f"declared as the output of task(s) {', '.join(map(str, self.writers))}, which did not store it"
               if self.writers else "no task declares it as its output")  # fmt: skip
        return (
            f"task {self.task} (kernel {self.kernel}) read {self.where} of its input {self.param} = {self.region}, "
            f"which nothing wrote ({self.elements} elements; {who}), and its results depend on it"
        )


@dataclass
class PoisonReport:
    """What the two poisoned runs show (see the module docstring)."""

    outputs: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # name -> (elements, numel, where)
    masks: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> where it differs between the runs
    unstored: list[Unstored] = field(default_factory=list)
    reads: list[PoisonedRead] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # tasks whose dump payloads were lost (not judged)

    @property
    def clean(self) -> bool:
        """Whether no output depends on never-written memory and every task stored its whole output."""
        return not self.outputs and not self.unstored and not self.reads


def analyze(
    build: Build,
    report: RunReport,
    tasks_a: list[CapturedTask],
    tasks_b: list[CapturedTask],
    outputs_a: dict[str, torch.Tensor],
    outputs_b: dict[str, torch.Tensor],
) -> PoisonReport:
    """Compare two poisoned serial runs (see the module docstring); ``report`` is run A's (with
    ``record_edges``), which places each task's regions in its buffers."""
    places = _Places(build, report)
    rep = PoisonReport()
    final_raw: dict[int, torch.Tensor] = {}
    for name, a in outputs_a.items():
        d = differs(a, outputs_b[name])
        if bool(d.any()):
            rep.outputs[name] = (int(d.sum()), d.numel(), box_text(name, mask_boxes(d), d.shape))
            rep.masks[name] = d
        buffer = places.program_buffer(name)
        if buffer is not None:
            final_raw[buffer] = raw_poison(a, outputs_b[name])
    by_id_b = {t.task_id: t for t in tasks_b}
    for ta in tasks_a:
        tb = by_id_b.get(ta.task_id)
        if tb is None or ta.lost or tb.lost:
            rep.lost.append(ta.task_id)
            continue
        params = build.kernels[ta.func_id].get("params", [])
        raw_in = {i: raw_poison(a, tb.inputs[i]) for i, a in ta.inputs.items()
                  if torch.is_tensor(a) and torch.is_tensor(tb.inputs.get(i)) and a.shape == tb.inputs[i].shape}  # fmt: skip
        read_raw = sum(int(m.sum()) for m in raw_in.values())
        raw_out: dict[int, torch.Tensor] = {}
        depends = False
        for i, a in ta.outputs.items():
            b = tb.outputs.get(i)
            if b is None or a.shape != b.shape:
                continue
            raw = raw_poison(a, b)
            # NOTE: a task that read at least as much raw poison as it left may have copied it (a copy,
            # a transpose, + 0.0): that is a read of memory nothing wrote, not a store it left out
            if params[i]["direction"] == "out" and bool(raw.any()) and int(raw.sum()) > read_raw:
                raw_out[i] = raw
            depends = depends or bool(differs(a, b).any() if read_raw else (differs(a, b) & ~raw).any())
        for i, raw in raw_out.items():
            name, local = params[i]["name"], mask_boxes(raw)
            buffer, boxes = places.of(ta.task_id, i, local)
            rep.unstored.append(Unstored(ta.task_id, ta.kernel, ta.func_id, i, name, ta.regions.get(i, "?"),
                                         box_text(name, local, raw.shape), int(raw.sum()), raw.numel(), False,
                                         buffer, boxes))  # fmt: skip
        if not depends:
            continue
        for i, raw in raw_in.items():
            if not bool(raw.any()):
                continue
            name, local = params[i]["name"], mask_boxes(raw)
            buffer, boxes = places.of(ta.task_id, i, local)
            writers = [u.task for u in rep.unstored if u.buffer == buffer and _meets(u.boxes, boxes)]
            for u in rep.unstored:
                u.read_later = u.read_later or u.task in writers
            rep.reads.append(PoisonedRead(ta.task_id, ta.kernel, i, name, ta.regions.get(i, "?"),
                                          box_text(name, local, raw.shape), int(raw.sum()), writers, raw))  # fmt: skip
    for u in rep.unstored:
        raw = final_raw.get(u.buffer)
        if raw is not None and any(bool(raw[tuple(slice(lo, hi) for lo, hi in b)].any()) for b in u.boxes):
            u.read_later = True
    return rep


def _meets(a: list[Box], b: list[Box]) -> bool:
    return any(intersect(x, y) is not None for x in a for y in b)


class _Places:
    """Where each task argument lies in its buffer (from a run recorded with ``record_edges``)."""

    def __init__(self, build: Build, report: RunReport):
        names = buffer_names(build, report, program_shapes=True)
        self.boxes = {
            (a.task_id, a.arg_index): (a.buffer_id, region_box(a, names.get(a.buffer_id, (None, None))[1]))
            for a in report.task_args
            if a.kind == "tensor"
        }
        args = {b.program_arg: b.buffer_id for b in report.buffers if b.program_arg >= 0}
        self.programs = {build.args[i].name: buf for i, buf in args.items() if i < len(build.args)}

    def program_buffer(self, name: str) -> int | None:
        """The buffer of the program argument ``name``."""
        return self.programs.get(name)

    def of(self, task: int, arg: int, local: list[Box]) -> tuple[int, list[Box]]:
        """Boxes in an argument's own coordinates, moved into its buffer's index space (none when
        the view's dims are not the buffer's)."""
        buffer, box = self.boxes.get((task, arg), (0, None))
        if box is None:
            return buffer, []
        out = [tuple((lo + s, hi + s) for (lo, hi), (s, _) in zip(b, box)) for b in local if len(b) == len(box)]
        return buffer, out


@dataclass
class Poisoned:
    """The two poisoned runs' comparison, and the compile's coverage findings by kernel."""

    report: PoisonReport
    static: dict[str, list[dict[str, Any]]]  # kernel -> report.json's ``unwritten`` entries

    def static_for(self, kernel: str, param: str) -> dict[str, Any] | None:
        """The compile-time finding for ``kernel``'s Out param ``param``, if the compile made one."""
        return next((u for u in self.static.get(kernel, []) if u.get("param") == param), None)

    def lines(self) -> list[str]:
        """What the runs show, one finding a line (outputs first, then unstored regions, then reads)."""
        rep = self.report
        out = [
            f"{n} of {total} elements of output {name} depend on memory nothing wrote: {where}"
            for name, (n, total, where) in rep.outputs.items()
        ]
        groups: dict[tuple[str, str, str], list] = {}
        for u in rep.unstored:  # NOTE: one line for the tasks of one kernel that miss the same part
            groups.setdefault((u.kernel, u.param, u.where), []).append(u)
        for (kernel, param, _), same in groups.items():
            found = self.static_for(kernel, param)
            at = f"; the compile saw it: {found['message']} (at {found['at']})" if found else ""
            also = f"; the same in task(s) {', '.join(str(u.task) for u in same[1:])}" if len(same) > 1 else ""
            out.append(same[0].text() + also + at)
        out += [r.text() for r in rep.reads]
        return out


def poison_run(build: CompiledProgram, inputs: dict[str, Any]) -> Poisoned:
    """Run ``build`` twice poisoned and compare (see the module docstring).

    Raises:
        RuntimeFailure: a poisoned run failed (poison can turn into a bad index, or an Inf).
    """
    capture = Recording(record_edges=True, dump_level=2)
    runs = [recorded_run(build, inputs, capture, poison=p) for p in PATTERNS]
    (args_a, rep_a), (args_b, rep_b) = runs
    outs = [{a.name: args[i] for i, a in enumerate(build.args) if a.is_output} for args in (args_a, args_b)]
    report = analyze(build, rep_a, captured_tasks(build, rep_a), captured_tasks(build, rep_b), *outs)
    return Poisoned(report, _static(build))


def _static(build: CompiledProgram) -> dict[str, list[dict[str, Any]]]:
    """report.json's ``unwritten`` entries by kernel (none when the report is missing or older)."""
    found = load_report(build.work_dir).get("unwritten")
    out: dict[str, list[dict[str, Any]]] = {}
    for u in found if isinstance(found, list) else []:
        if isinstance(u, dict) and isinstance(u.get("kernel"), str):
            out.setdefault(u["kernel"], []).append(u)
    return out
