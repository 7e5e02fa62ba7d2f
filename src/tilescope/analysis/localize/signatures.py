"""Error signatures of a mismatching output: the shape of the error, mapped to the tasks that
wrote it through their regions.

Each signature is a fact about the output's elements against their golden (``mismatch``: the
elements outside rtol/atol):

- ``writers``: which tasks wrote the mismatching elements (a task's Out/InOut region of it);
- ``unstored``: mismatching elements a task was given as output but its kernel never stored;
- ``unwritten``: mismatching elements no task wrote;
- ``misplaced``: a task's block equals the golden of another task's block (a slice with the
  wrong index, on an input or on the output);
- ``transposed``: a block (or the whole output) equals the golden transposed;
- ``scaled``: each mismatching row (or column) is the golden times one factor of its own;
- ``ulps``: every mismatching element is off by exactly 1 or 2 ulps of a narrower float dtype
  the program casts to (a rounding difference: the casts are named, with their modes);
- ``nonfinite``: the first task whose outputs hold NaN/Inf while its inputs are finite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.localize.bound import ulp
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.localize.source_map import statements
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.debug.deps_json import buffer_names, region_box, region_text
from tilescope.ir.nodes import Cast, For, Kernel, Program
from tilescope.ir.traverse import walk_exprs
from tilescope.runtime.records import RunReport

Box = list[list[int]]


@dataclass(frozen=True)
class Writer:
    """A task's Out/InOut region of a program output."""

    task_id: int
    kernel: str
    arg_index: int
    box: tuple[tuple[int, int], ...]
    region: str

    def index(self) -> tuple[slice, ...]:
        """The region as an index of the output."""
        return tuple(slice(lo, hi) for lo, hi in self.box)


@dataclass
class Signature:
    """One fact about a mismatching output, and the task, kernel or cast it points at."""

    kind: str
    output: str
    text: str
    task: int | None = None
    kernel: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def writers(build: Build, report: RunReport) -> dict[int, list[Writer]]:
    """Every task's Out/InOut region of each program argument (by its index), in task order."""
    kernels = [k["name"] for k in build.kernels]
    names = buffer_names(build, report, program_shapes=True)
    arg_of = {b.buffer_id: b.program_arg for b in report.buffers if b.program_arg >= 0}
    func = {t.task_id: t.func_id for t in report.tasks}
    out: dict[int, list[Writer]] = {}
    for a in report.task_args:
        if a.kind != "tensor" or a.direction not in ("out", "inout") or a.buffer_id not in arg_of:
            continue
        box = region_box(a, names.get(a.buffer_id, (None, None))[1])
        if box is None:
            continue
        kernel = kernels[func[a.task_id]] if a.task_id in func else "?"
        w = Writer(a.task_id, kernel, a.arg_index, tuple((lo, hi) for lo, hi in box), region_text(a, names))
        out.setdefault(arg_of[a.buffer_id], []).append(w)
    for ws in out.values():
        ws.sort(key=lambda w: w.task_id)
    return out


def box_text(name: str, mask: torch.Tensor) -> str:
    """``y[0:64, 128:256]``: the bounding box of ``mask``'s true elements."""
    idx = mask.nonzero()
    lo, hi = idx.min(dim=0).values.tolist(), idx.max(dim=0).values.tolist()
    return f"{name}[" + ", ".join(f"{a}:{b + 1}" for a, b in zip(lo, hi)) + "]"


def _task_list(ws: list[Writer]) -> str:
    ids = [w.task_id for w in ws]
    shown = ", ".join(map(str, ids[:8])) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
    kernels = sorted({w.kernel for w in ws})
    return f"task{'s' if len(ids) > 1 else ''} {shown} (kernel {', '.join(kernels)})"


def output_signatures(
    name: str,
    sim: torch.Tensor,
    golden: torch.Tensor,
    mismatch: torch.Tensor,
    ws: list[Writer],
    rtol: float,
    atol: float,
    given: dict[int, str] | None = None,
    unstored: torch.Tensor | None = None,
) -> list[Signature]:
    """The signatures of one output (see the module docstring), most telling first. ``given``:
    how each task's arguments read (``x = x[0:16, 0:16], y = y[0:16, 16:32]``), by task id;
    ``unstored``: the mismatching elements no kernel stored (though a task's region covers them)."""
    given = given or {}
    sigs: list[Signature] = []
    if unstored is not None and bool(unstored.any()):
        owners = [w for w in ws if bool(unstored[w.index()].any())]
        first = owners[0] if owners else None
        sigs.append(
            Signature(
                "unstored", name,
                f"{int(unstored.sum())} mismatching elements of {name} (within {box_text(name, unstored)}) were never "
                f"stored: {_task_list(owners) + ' were given them' if owners else 'no task was given them'}, and their "
                "kernel left them as they were (a missing store, or a loop that stops short)",
                first.task_id if first else None, first.kernel if first else None,
            )
        )  # fmt: skip
    bad_writers = [w for w in ws if bool(mismatch[w.index()].any())]
    covered = torch.zeros_like(mismatch)
    for w in ws:
        covered[w.index()] = True
    misplaced = []
    for w in bad_writers:
        found = _golden_block_of(sim[w.index()], golden, ws, w, rtol, atol)
        if found is not None:
            misplaced.append((w, found))
    if misplaced:
        shown = "; ".join(
            f"task {w.task_id} ({given.get(w.task_id, w.region)}) wrote the golden's {found}" for w, found in misplaced[:3]
        )
        more = f" and {len(misplaced) - 3} more" if len(misplaced) > 3 else ""
        first = misplaced[0][0]
        sigs.append(
            Signature(
                "misplaced", name,
                f"{len(misplaced)} task(s) wrote blocks of {name} whose values the golden has elsewhere, a slice with "
                f"the wrong index: {shown}{more}",
                first.task_id, first.kernel, {"tasks": [w.task_id for w, _ in misplaced]},
            )
        )  # fmt: skip
    unwritten = mismatch & ~covered
    if bool(unwritten.any()):
        sigs.append(
            Signature(
                "unwritten", name,
                f"{int(unwritten.sum())} mismatching elements of {name} were written by no task "
                f"(within {box_text(name, unwritten)}): a missing store or a slice that skips them",
            )
        )  # fmt: skip
    if sim.dim() == 2 and sim.shape[0] == sim.shape[1] and bool(close(sim, golden.transpose(0, 1), rtol, atol).all()):
        sigs.append(Signature("transposed", name, f"{name} equals its golden transposed: a transpose too many or too few"))
    else:
        for w in bad_writers:
            block, want = sim[w.index()], golden[w.index()]
            if block.dim() == 2 and block.shape[0] == block.shape[1] and block.shape[0] > 1:
                if bool(close(block, want.transpose(0, 1), rtol, atol).all()):
                    sigs.append(
                        Signature("transposed", name, f"task {w.task_id} wrote {w.region} transposed", w.task_id, w.kernel)
                    )
                    break
    sigs += _scaled(name, sim, golden, mismatch, bad_writers)
    if bad_writers:
        n = int(mismatch.sum())
        sigs.append(
            Signature(
                "writers", name,
                f"the {n} mismatching elements of {name} lie in the output regions of {_task_list(bad_writers)}: "
                + ", ".join(w.region for w in bad_writers[:4]) + (" ..." if len(bad_writers) > 4 else ""),
                bad_writers[0].task_id, bad_writers[0].kernel, {"tasks": [w.task_id for w in bad_writers]},
            )
        )  # fmt: skip
    return sigs


def _golden_block_of(
    block: torch.Tensor, golden: torch.Tensor, ws: list[Writer], w: Writer, rtol: float, atol: float
) -> str | None:
    """Where else the golden holds ``block`` (written by ``w``): another task's region, or a
    position on the grid of the block's shape; None when nowhere."""
    candidates = [other.box for other in ws if other.box != w.box]
    if golden.dim() == block.dim() == 2:
        h, c = block.shape
        candidates += [((i, i + h), (j, j + c)) for i in range(0, golden.shape[0] - h + 1, max(h, 1))
                       for j in range(0, golden.shape[1] - c + 1, max(c, 1))]  # fmt: skip
    seen = set()
    for box in candidates:
        if box in seen or box == w.box or tuple(b - a for a, b in box) != tuple(block.shape):
            continue
        seen.add(box)
        if bool(close(block, golden[tuple(slice(a, b) for a, b in box)], rtol, atol).all()):
            return golden_name(w.region) + "[" + ", ".join(f"{a}:{b}" for a, b in box) + "]"
    return None


def golden_name(region: str) -> str:
    """The tensor a region text names (``y`` of ``y[0:16, 16:32]``)."""
    return region.split("[", 1)[0]


def _line_factor(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """The one factor ``a`` is ``b`` times (within 1e-3), or None."""
    keep = (b.abs() > 0) & torch.isfinite(a) & torch.isfinite(b)
    if int(keep.sum()) < 2:
        return None
    r = a[keep] / b[keep]
    mean = float(r.mean())
    if mean == 0 or float((r - mean).abs().max()) > 1e-3 * abs(mean):
        return None
    return mean


def _scaled(name: str, sim: torch.Tensor, golden: torch.Tensor, mismatch: torch.Tensor, ws: list[Writer]) -> list[Signature]:
    """Rows (or columns) of mismatches that are the golden times one factor each."""
    if sim.dim() != 2 or not sim.is_floating_point():
        return []
    s, g = sim.to(torch.float64), golden.to(torch.float64)
    for dim, what in ((1, "row"), (0, "column")):
        lines = mismatch.any(dim=dim).nonzero().reshape(-1).tolist()[:256]
        factors = [(i, _line_factor(s[i], g[i]) if dim == 1 else _line_factor(s[:, i], g[:, i])) for i in lines]
        if not factors or any(f is None for _, f in factors) or all(abs(f - 1) < 1e-3 for _, f in factors):
            continue
        shown = ", ".join(f"{what} {i}: x{f:.4g}" for i, f in factors[:4])
        owner = ws[0] if ws else None
        return [
            Signature(
                "scaled", name,
                f"each mismatching {what} of {name} is its golden times a factor of its own ({shown}): "
                f"a per-{what} quantity (a sum, a max, a scale) computed wrong",
                owner.task_id if owner else None, owner.kernel if owner else None,
            )
        ]  # fmt: skip
    return []


@dataclass(frozen=True)
class CastSite:
    """A cast to a float dtype in a kernel."""

    kernel: Kernel
    cast: Cast
    stmt: Any


def casts_to(program: Program, dtype: str) -> list[CastSite]:
    """Every cast to float dtype ``dtype`` in the program's kernels, in source order."""
    out = []
    for k in program.kernels:
        for s in statements(k.body):
            if isinstance(s, For):  # its body's statements come next
                continue
            for e in walk_exprs(s):
                if isinstance(e, Cast) and e.type.dtype.name == dtype:
                    out.append(CastSite(k, e, s))
    return out


def ulp_signature(name: str, sim: torch.Tensor, golden: torch.Tensor, mismatch: torch.Tensor, program: Program) -> tuple[str, int] | None:
    """(dtype, k) when every mismatching element is off by exactly k in {1, 2} ulps of a narrower
    float dtype the program casts to; else None."""
    if not bool(mismatch.any()) or not sim.is_floating_point():
        return None
    s, g = sim.to(torch.float64)[mismatch], golden.to(torch.float64)[mismatch]
    for dtype in ("bf16", "f16"):
        if not casts_to(program, dtype):
            continue
        steps = (s - g).abs() / ulp(dtype, torch.minimum(s.abs(), g.abs()))
        k = steps.round()
        if bool(((steps - k).abs() < 1e-6).all()) and bool(((k >= 1) & (k <= 2)).all()):
            return dtype, int(k.max())
    return None


def first_nonfinite(tasks: list[CapturedTask]) -> CapturedTask | None:
    """The first task (in task order) whose outputs hold NaN/Inf while its inputs are all finite."""
    for t in tasks:
        def bad(x: Any) -> bool:
            return torch.is_tensor(x) and x.is_floating_point() and not bool(torch.isfinite(x).all())

        if any(bad(v) for v in t.outputs.values()) and not any(bad(v) for v in t.inputs.values()):
            return t
    return None


__all__ = [
    "CastSite", "Signature", "Writer", "box_text", "casts_to", "first_nonfinite", "output_signatures",
    "ulp_signature", "writers",
]  # fmt: skip
