"""``dfx_outputs/localize/report.html``: the report as a page (no network access at view time).

For each mismatching output, a heatmap of ``|sim - golden|`` (log scale; an output over 200 x 200
cells is shown one cell per block, the block's largest error), with every task's region of it
outlined and the culprit task's in blue; then the fingerprint, the evidence, the limitations and
what to run next. Outputs of other than 2 dims are shown as one row (1-D) or with their leading
dims flattened, without task regions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.localize.metrics import diffs
from tilescope.analysis.localize.signatures import Writer
from tilescope.analysis.report import Report
from tilescope.build.paths import LOCALIZE_DIR, LOCALIZE_HTML, atomic_write, dfx_dir, inside

TEMPLATE = Path(__file__).resolve().parent.parent.parent / "tools" / "localize_report_template.html"
MAX_CELLS = 200


def heatmap(name: str, sim: torch.Tensor, golden: torch.Tensor, mismatch: torch.Tensor, ws: list[Writer]) -> dict[str, Any]:
    """One output's map: a grid of log10 errors (None: within rtol/atol; "nan", "inf") and the task boxes."""
    err, _ = diffs(sim, golden)
    shape = list(sim.shape)
    if err.dim() != 2:
        err = err.reshape(1, -1) if err.dim() < 2 else err.reshape(-1, err.shape[-1])
        mismatch = mismatch.reshape(err.shape)
        ws = []
    rows, cols = err.shape
    step = (max(1, math.ceil(rows / MAX_CELLS)), max(1, math.ceil(cols / MAX_CELLS)))
    shown = torch.where(mismatch, err, torch.full_like(err, -1.0))
    nan = torch.isnan(sim.to(torch.float64)).reshape(err.shape) & mismatch if sim.is_floating_point() else None
    pooled = torch.nn.functional.max_pool2d(shown[None, None], step, step, ceil_mode=True)[0, 0]
    grid: list[list[Any]] = []
    nan_cells = (
        torch.nn.functional.max_pool2d(nan.to(torch.float64)[None, None], step, step, ceil_mode=True)[0, 0] > 0
        if nan is not None else torch.zeros_like(pooled, dtype=torch.bool)
    )  # fmt: skip
    for i in range(pooled.shape[0]):
        row: list[Any] = []
        for j in range(pooled.shape[1]):
            v = float(pooled[i, j])
            if bool(nan_cells[i, j]):
                row.append("nan")
            elif v < 0:
                row.append(None)
            elif math.isinf(v):
                row.append("inf")
            else:
                row.append(math.log10(v) if v > 0 else -300.0)
        grid.append(row)
    boxes = [
        {"task": w.task_id, "kernel": w.kernel, "region": w.region, "box": [w.box[0][0], w.box[0][1], w.box[1][0], w.box[1][1]]}
        for w in ws
        if len(w.box) == 2
    ]
    return {"name": name, "shape": shape, "step": list(step), "grid": grid, "boxes": boxes, "mismatches": int(mismatch.sum())}


def render_html(rep: Report, maps: list[dict[str, Any]]) -> str:
    """The page for ``rep`` and its outputs' ``maps``."""
    data = {"report": rep.to_json(), "maps": maps}
    # NOTE: "</" inside an inline <script> could close it; "<\/" means the same to JS and JSON.
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    title = f"localize: {rep.program}".replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return TEMPLATE.read_text(encoding="utf-8").replace("/*@DATA@*/null", payload).replace("@TITLE@", title)


def write_html(work_dir: Path, rep: Report, maps: list[dict[str, Any]]) -> Path:
    """Write ``<build>/dfx_outputs/localize/report.html``; returns its path."""
    folder = dfx_dir(work_dir, LOCALIZE_DIR)
    path = inside(folder, LOCALIZE_HTML)
    atomic_write(path, render_html(rep, maps))
    return path


__all__ = ["heatmap", "render_html", "write_html"]
