"""The static race proof over a run's recorded graph: every two tasks whose accesses to one
buffer overlap, at least one of them a write, must be ordered by a path of edges; the pairs that
are not are listed with their regions (``hazards``).

Invariants:
- An access (``Span``) is a region a task declared (one of its tensor arguments, with the
  argument's direction) or, from an access audit (``debug.triage.audit``), a box its kernel
  actually loaded or stored. Two accesses overlap when their boxes in the buffer's layout
  intersect, the layout and boxes taken exactly as the runtime's dependency inference takes them
  (``layout_of``, ``layout_box``, mirroring ``runtime/csrc/region.cpp``); when either has no box,
  when their byte ranges intersect (never a missed overlap, maybe one too many).
- Program arguments that alias one storage share one buffer (the storage's address), so a
  tensor passed twice, or two overlapping views of it, are compared like any two regions.
- ``Order.ordered(a, b)`` is whether a path of recorded edges (inferred and explicit) leads from
  one task to the other. Descendant sets are bitsets over the tasks, computed once in reverse
  topological order; a graph of more than ``_MAX_CLOSURE`` tasks answers each query by a search
  instead (memoized per source).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

Box = tuple[tuple[int, int], ...]

_MAX_CLOSURE = 20000


@dataclass(frozen=True)
class Span:
    """One access of one task to one buffer: ``box`` in the buffer's layout as the runtime takes it
    (``layout_box``; None: not a box there), ``lo``/``hi`` the byte range that holds it; ``op`` is
    the declared direction (``in``, ``out``, ``inout``) or, audited, ``load``/``store`` with the
    C++ ``line`` of the call; ``shown`` the same region in the buffer's shape, for display."""

    task: int
    buffer: int
    op: str
    write: bool
    box: Box | None
    lo: int
    hi: int
    arg: int | None = None
    line: int | None = None
    shown: Box | None = None  # the region in its buffer's shape, for display (None: as bytes)

    @property
    def audited(self) -> bool:
        """Whether this is what the kernel did (an audit record), not what the task declared."""
        return self.op in ("load", "store")


@dataclass(frozen=True)
class Hazard:
    """Two unordered tasks whose accesses overlap, at least one a write."""

    first: Span
    second: Span
    overlap: Box | None

    @property
    def kind(self) -> str:
        """``write/write`` or ``read/write`` (in the order of the two spans)."""
        return "/".join("write" if s.write else "read" for s in (self.first, self.second))


class Order:
    """Whether one task is ordered before another by the recorded edges."""

    def __init__(self, num_tasks: int, edges: list[tuple[int, int]]):
        self.n = num_tasks
        self.succ: list[list[int]] = [[] for _ in range(num_tasks)]
        for a, b in edges:
            if 0 <= a < num_tasks and 0 <= b < num_tasks and a != b:
                self.succ[a].append(b)
        self.desc: list[int] | None = self._closure() if num_tasks <= _MAX_CLOSURE else None
        self.memo: dict[int, set[int]] = {}

    def _closure(self) -> list[int]:
        indeg = [0] * self.n
        for out in self.succ:
            for b in out:
                indeg[b] += 1
        ready = deque(i for i in range(self.n) if indeg[i] == 0)
        topo = []
        while ready:
            v = ready.popleft()
            topo.append(v)
            for b in self.succ[v]:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
        desc = [0] * self.n
        for v in reversed(topo):  # NOTE: tasks on a cycle (a deadlock) keep no descendants
            bits = 0
            for b in self.succ[v]:
                bits |= desc[b] | (1 << b)
            desc[v] = bits
        return desc

    def reaches(self, a: int, b: int) -> bool:
        """Whether a path of edges leads from task ``a`` to task ``b``."""
        if self.desc is not None:
            return bool(self.desc[a] >> b & 1)
        seen = self.memo.get(a)
        if seen is None:
            seen, todo = set(), [a]
            while todo:
                for s in self.succ[todo.pop()]:
                    if s not in seen:
                        seen.add(s)
                        todo.append(s)
            self.memo[a] = seen
        return b in seen

    def ordered(self, a: int, b: int) -> bool:
        """Whether tasks ``a`` and ``b`` are ordered one way or the other."""
        return a == b or self.reaches(a, b) or self.reaches(b, a)


def layout_of(shape, strides) -> tuple[int, ...] | None:
    """The layout a buffer's full tensor defines, as the runtime's ``layout_of`` (region.cpp): its
    strides of dims longer than 1, largest first, with a unit stride last; None when there is none
    (a stride <= 0, or two dims with one stride)."""
    s = sorted((st for n, st in zip(shape, strides) if n > 1), reverse=True)
    if any(x <= 0 for x in s) or len(set(s)) != len(s):
        return None
    return tuple(s) if s and s[-1] == 1 else (*s, 1)


def layout_box(shape, strides, offset: int, layout: tuple[int, ...] | None) -> Box | None:
    """A view's box in ``layout`` (``offset`` in elements from the buffer's start), as the runtime's
    ``fit_box``: None when the view does not fit the layout, or an address would have two places."""
    if layout is None or offset < 0 or any(n == 0 for n in shape):
        return None
    extent, used = [1] * len(layout), [False] * len(layout)
    for n, st in zip(shape, strides):
        if n <= 1:
            continue
        if st not in layout or used[layout.index(st)]:
            return None
        k = layout.index(st)
        used[k], extent[k] = True, n
    start, rest = [], offset
    for st in layout:
        start.append(rest // st)
        rest %= st
    inner = 0
    for k in range(len(layout) - 1, 0, -1):
        inner += (start[k] + extent[k] - 1) * layout[k]
        if inner >= layout[k - 1]:
            return None
    return tuple((a, a + e) for a, e in zip(start, extent))


def intersect(a: Box | None, b: Box | None) -> Box | None:
    """The intersection of two boxes of one index space (None: empty, or not comparable)."""
    if a is None or b is None or len(a) != len(b):
        return None
    box = tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b))
    return None if any(lo >= hi for lo, hi in box) else box


def overlaps(a: Span, b: Span) -> bool:
    """Whether two accesses of one buffer touch a common element (see the invariants)."""
    if a.box is not None and b.box is not None and len(a.box) == len(b.box):
        return intersect(a.box, b.box) is not None
    return a.lo < b.hi and b.lo < a.hi


def contains(outer: Box | None, inner: Box | None) -> bool:
    """Whether box ``inner`` lies inside box ``outer``."""
    if outer is None or inner is None or len(outer) != len(inner):
        return False
    return all(o[0] <= i[0] and i[1] <= o[1] for o, i in zip(outer, inner))


def hazards(spans: list[Span], order: Order, limit: int = 1000) -> list[Hazard]:
    """Every pair of unordered tasks whose spans overlap with a write (one per pair of tasks,
    buffer and pair of access kinds; at most ``limit``), in task order."""
    by_buffer: dict[int, list[Span]] = {}
    for s in spans:
        by_buffer.setdefault(s.buffer, []).append(s)
    found: dict[tuple, Hazard] = {}
    for group in by_buffer.values():
        group.sort(key=lambda s: (s.lo, s.hi))
        active: list[Span] = []
        for s in group:
            active = [a for a in active if a.hi > s.lo]
            for a in active:
                if a.task == s.task or not (a.write or s.write) or not overlaps(a, s):
                    continue
                first, second = (a, s) if (a.task, a.op) <= (s.task, s.op) else (s, a)
                key = (first.task, second.task, s.buffer, first.op, second.op)
                if key in found or order.ordered(a.task, s.task):
                    continue
                found[key] = Hazard(first, second, intersect(first.shown, second.shown))
                if len(found) >= limit:
                    return _sorted(found)
            active.append(s)
    return _sorted(found)


def dead_writes(spans: list[Span], limit: int = 200_000) -> list[tuple[Span, Span]]:
    """Writes no task reads: every declared Out region (``op`` ``out``) that a later task's Out
    region wholly overwrites before any task reads an element of it, with the task that
    overwrites it, in task order. Only declared spans count; ``limit`` caps the pairs compared."""
    by_buffer: dict[int, list[Span]] = {}
    for s in spans:
        if not s.audited:
            by_buffer.setdefault(s.buffer, []).append(s)
    out: list[tuple[Span, Span]] = []
    compared = 0
    for group in by_buffer.values():
        group.sort(key=lambda s: s.task)
        for i, a in enumerate(group):
            if a.op != "out":
                continue
            for b in group[i + 1 :]:
                compared += 1
                if compared > limit:
                    return out
                if b.task == a.task or not overlaps(a, b):
                    continue
                if b.op == "out" and contains(b.box, a.box):
                    out.append((a, b))
                break  # NOTE: the next task to touch a's region read it, or only part was overwritten
    return sorted(out, key=lambda p: p[0].task)


def _sorted(found: dict[tuple, Hazard]) -> list[Hazard]:
    return sorted(found.values(), key=lambda h: (h.first.task, h.second.task, h.first.op, h.second.op))
