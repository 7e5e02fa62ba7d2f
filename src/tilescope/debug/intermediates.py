"""The intermediate value printer (``--print-intermediates 1|2``, ``runtime_cfg`` ``print_intermediates``).

Level 1 saves every task's inputs (before it ran) and outputs (after) as ``.pt`` files under
``<build>/dfx_outputs/intermediates/task_<id>_<kernel>/{in,out}/<param>.pt``; level 2 prints one
line of statistics per argument (shape, dtype, min/max/mean, NaN and Inf counts). Both read a
level-2 tensor dump restricted to ``kernel_filter``'s kernels. Level 3 (a line as each task
starts and finishes) is written live by the runtime core and needs nothing here.

Invariant: an existing ``intermediates`` directory is never overwritten; a new run writes
``intermediates_<n>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from tilescope.build.manifest import Build
from tilescope.build.paths import DFX_DIR, INTERMEDIATES_DIR, inside, torch_save
from tilescope.debug.deps_json import buffer_names, region_text
from tilescope.debug.tensor_dump import probe_of, view_of
from tilescope.ir import dtypes
from tilescope.runtime.records import DumpRecord, RunReport

_STAGE_DIR = {"before_dispatch": "in", "after_completion": "out", "probe": "probe"}


def record_tensor(payload: np.ndarray, r: DumpRecord) -> torch.Tensor | None:
    """A tensor record's payload (from the dump's or the saved inputs' ``payload``) as a tensor of
    its region's shape (None: none kept)."""
    if r.bin_offset is None or r.truncated or r.overwritten:
        return None
    dtype = dtypes.by_name(r.dtype).torch
    raw = np.array(payload[r.bin_offset : r.bin_offset + r.bin_size])
    return torch.from_numpy(raw).view(dtype).reshape(r.shape)


def _params(program: Build, func_id: int) -> list[str]:
    return [p["name"] for p in program.kernels[func_id].get("params", [])]


def value_stats(t: torch.Tensor) -> dict[str, float | int | None]:
    """A tensor's statistics as numbers: ``numel``, ``min``/``max``/``mean`` over its finite values
    (None when none is finite), and its ``nan`` and ``inf`` counts; the one computation behind every
    statistics line and the JSON that ``tilescope mcp`` returns."""
    x = t.detach().double()
    finite = x[torch.isfinite(x)]
    out: dict[str, float | int | None] = {"numel": t.numel(), "min": None, "max": None, "mean": None}
    out.update(nan=int(torch.isnan(x).sum()), inf=int(torch.isinf(x).sum()))
    if finite.numel():
        out.update(min=finite.min().item(), max=finite.max().item(), mean=finite.mean().item())
    return out


def stats_line(t: torch.Tensor) -> str:
    """``[64, 512] f32 min -3.1 max 3.2 mean 0.0104 nan 0 inf 0`` (float stats over finite values)."""
    head = f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}"
    if t.numel() == 0:
        return head + " (empty)"
    s = value_stats(t)
    if s["min"] is None:
        return f"{head} no finite values nan {s['nan']} inf {s['inf']}"
    return f"{head} min {s['min']:.6g} max {s['max']:.6g} mean {s['mean']:.6g} nan {s['nan']} inf {s['inf']}"


def write_intermediates(
    program: Build, report: RunReport, level: int, out: TextIO | None = None
) -> Path | None:
    """Save (level 1) or print (level 2) every task argument ``report``'s dump holds; returns the
    level-1 directory. Level 2 names each tensor argument's region (``x = h[0:64, 0:128]``)."""
    out = out or sys.stdout
    dump = report.dump
    assert dump is not None
    buffers = buffer_names(program, report)
    kernels = [k["name"] for k in program.kernels]
    base = None
    if level == 1:
        base = inside(program.work_dir, DFX_DIR, INTERMEDIATES_DIR)
        n = 1
        while base.exists():
            base = base.with_name(f"{INTERMEDIATES_DIR}_{n}")
            n += 1
        base.mkdir(parents=True)
    last_task = None
    captures: dict[tuple[int, str], int] = {}  # (task, probe) -> captures so far
    for r in dump.records:
        params = _params(program, r.func_id)
        probe = probe_of(program, r)
        if probe is not None:
            name = probe["name"]
        else:
            name = params[r.arg_index] if r.arg_index < len(params) else f"arg{r.arg_index}"
        kernel = kernels[r.func_id] if 0 <= r.func_id < len(kernels) else f"func{r.func_id}"
        side = _STAGE_DIR[r.stage]
        if level == 2 and r.task_id != last_task:
            print(f"[intermediates] task {r.task_id} (kernel {kernel})", file=out)
            last_task = r.task_id
        if r.kind == "scalar":
            if level == 2:
                print(f"  {side:<3} {name} = {r.value!r}", file=out)
            continue
        t = record_tensor(dump.payload, r)
        if level == 2:
            region = f"(probe at {probe.get('line')})" if probe is not None else region_text(view_of(r), buffers)
            print(
                f"  {side:<3} {name} = {region} " + (stats_line(t) if t is not None else "(payload not kept)"),
                file=out,
            )
            continue
        if t is not None:
            d = base / f"task_{r.task_id}_{kernel}" / side
            d.mkdir(parents=True, exist_ok=True)
            # a probe may run more than once in a task (in a loop): one file per capture, numbered from 0 in order
            if probe is not None:
                n = captures[(r.task_id, name)] = captures.get((r.task_id, name), -1) + 1
                torch_save(t.clone(), d / f"{name}.{n}.pt")
            else:
                torch_save(t.clone(), d / f"{name}.pt")
    if level == 1:
        print(f"[intermediates] saved every task's inputs and outputs under {base}", file=out)
    return base


__all__ = ["record_tensor", "stats_line", "value_stats", "write_intermediates"]
