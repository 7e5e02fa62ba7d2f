"""``tilescope trace``'s kernel ranking from the per-task counters a ``trace.json`` carries
(``enable_pmu``, ``debug/pmu_csv.py``): time, bytes moved and how far each kernel's bandwidth is
from the copy limit measured in the same process.

Invariants: a trace without counters has no ranking (None); GB/s is a kernel's bytes read plus
written over its tasks' summed wall time, and its roof fraction that over the copy limit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class KernelRate:
    """One kernel's counters summed over its tasks."""

    name: str
    calls: int
    wall_ns: int
    cpu_ns: int
    share: float  # of all tasks' wall time
    bytes: int  # read plus written
    gbs: float  # bytes per wall nanosecond
    roof: float  # gbs / the copy limit
    page_faults: int
    ctx_switches: int
    instructions: int | None  # None where the machine does not expose it
    cycles: int | None


@dataclass(frozen=True, slots=True)
class PmuRanking:
    """The kernels by total time (largest first), the copy limit, and the run's counter note."""

    note: str
    copy_limit_gbs: float
    kernels: tuple[KernelRate, ...]

    def by_rate(self) -> tuple[KernelRate, ...]:
        """The kernels by GB/s, fastest first."""
        return tuple(sorted(self.kernels, key=lambda k: (-k.gbs, k.name)))


def _sum(values: list[Any]) -> int | None:
    return None if any(v is None for v in values) else sum(values)


def pmu_ranking(tasks: list[dict[str, Any]], other: dict[str, Any]) -> PmuRanking | None:
    """The ranking of the task slices ``tasks`` whose args carry ``pmu``; None when none does.

    Raises:
        KeyError, TypeError, ValueError: a malformed ``pmu`` entry (the caller reports the file).
    """
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in tasks:
        counters = e.get("args", {}).get("pmu")
        if counters is not None:
            per[e["name"]].append(counters)
    if not per:
        return None
    summary = other.get("pmu") or {}
    limit = float(summary.get("copy_limit_gbs") or 0.0)
    total = sum(int(c["wall_ns"]) for cs in per.values() for c in cs) or 1
    kernels = []
    for name, cs in per.items():
        wall = sum(int(c["wall_ns"]) for c in cs)
        moved = sum(int(c["bytes_read"]) + int(c["bytes_written"]) for c in cs)
        gbs = moved / wall if wall > 0 else 0.0
        kernels.append(
            KernelRate(name, len(cs), wall, sum(int(c["cpu_ns"]) for c in cs), wall / total, moved, gbs,
                       gbs / limit if limit > 0 else 0.0, sum(int(c["page_faults"]) for c in cs),
                       sum(int(c["ctx_switches"]) for c in cs), _sum([c.get("instructions") for c in cs]),
                       _sum([c.get("cycles") for c in cs]))  # fmt: skip
        )
    kernels.sort(key=lambda k: (-k.wall_ns, k.name))
    return PmuRanking(str(summary.get("note", "")), limit, tuple(kernels))


def format_ranking(r: PmuRanking) -> list[str]:
    """The lines ``tilescope trace`` prints for ``r``."""
    width = max([len("kernel"), *(len(k.name) for k in r.kernels)])
    lines = [
        f"kernels by time (per-task counters; copy limit {r.copy_limit_gbs:.2f} GB/s):",
        f"{'kernel':<{width}}  {'calls':>6}  {'wall ms':>9}  {'cpu ms':>9}  {'share %':>7}  {'MB moved':>9}  "
        f"{'GB/s':>7}  {'% roof':>6}  {'faults':>7}  {'ctxsw':>6}",
    ]
    for k in r.kernels:
        lines.append(
            f"{k.name:<{width}}  {k.calls:>6}  {k.wall_ns / 1e6:>9.3f}  {k.cpu_ns / 1e6:>9.3f}  {100 * k.share:>7.1f}  "
            f"{k.bytes / 1e6:>9.3f}  {k.gbs:>7.2f}  {100 * k.roof:>6.1f}  {k.page_faults:>7}  {k.ctx_switches:>6}"
        )
    ipc = [f"{k.name} {k.instructions / k.cycles:.2f}" for k in r.kernels if k.instructions and k.cycles]
    if ipc:
        lines.append("instructions per cycle: " + ", ".join(ipc))
    lines.append(
        "kernels by GB/s (share of the copy limit): "
        + ", ".join(f"{k.name} {k.gbs:.2f} ({100 * k.roof:.1f}%)" for k in r.by_rate())
    )
    lines.append(f"counters: {r.note or '?'}")
    return lines
