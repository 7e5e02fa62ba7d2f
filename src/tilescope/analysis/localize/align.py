"""The kernels' values aligned with the golden's own steps: which op of which task first computes
a value the golden never does, from values it does.

Each implicated task is run again alone (from the inputs sim gave it) on the bounded float64
interpreter (``bound.py``), recording every tile-valued expression it evaluates — an
*instance*: its statement, its op, its value with its error bound, and the instances it was
computed from (a variable stands for the instance last assigned to it). Every instance is then
looked up among the golden's values (``golden_match``): ``matched`` when a window of one holds
it; a constant (``ts.full``, ``ts.iota`` and what is computed from constants only) needs no
match; a store is compared with the golden at its destination when the destination is a program
output (``wrong`` when it differs).

The culprit is the first instance, in task order then in the order it ran, that

- is unmatched (or a store whose destination is wrong),
- was computed from matched values and constants only,
- leads to no matched value later (a partial result, such as a chunk's row max in an online
  softmax, leads to the matched final max and is not a culprit),
- and leads to a wrong store (or an unmatched store into an intermediate a later task read
  wrong).

A store whose value is a load, unchanged, is data movement: when the golden's values for the
destination are elsewhere in the loaded tensor, the load read the wrong window and is the
culprit. A task whose wrong values come from an intermediate it loaded (no culprit of its own)
passes the blame upstream: the tasks that wrote that intermediate are aligned next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.golden_trace import GoldenTrace, GoldenValue
from tilescope.analysis.localize.bound import Bounded, _BoundKernel
from tilescope.analysis.localize.golden_match import GoldenIndex, Window, tile_close
from tilescope.analysis.localize.op_naming import expr_op
from tilescope.analysis.localize.tasks import CapturedTask
from tilescope.build.manifest import Build
from tilescope.ir.nodes import (
    Assign,
    Cast,
    Expr,
    Full,
    Iota,
    Kernel,
    Load,
    LoadRows,
    Store,
    TileSlice,
    Transpose,
    Var,
)
from tilescope.ir.type_rules import access_sizes
from tilescope.ir.types import TileType

MATCHED, CONSTANT, UNMATCHED, WRONG = "matched", "constant", "unmatched", "wrong"


@dataclass
class Instance:
    """One value a task computed: a tile-valued expression, or a store."""

    n: int
    stmt: Any
    expr: Any  # the expression (for a store: the Store)
    value: Bounded
    reads: tuple[int, ...]
    load: tuple[str, tuple[int, ...]] | None = None  # a load: (param, offsets)
    dest: tuple[str, tuple[int, ...]] | None = None  # a store: (param, offsets)
    status: str = UNMATCHED
    windows: list[Window] = field(default_factory=list)

    @property
    def op(self) -> str:
        """The DSL op (``store`` for a store)."""
        return "store" if isinstance(self.expr, Store) else expr_op(self.expr)


class _Traced(_BoundKernel):
    """A kernel on Bounded tiles, keeping every tile-valued expression as an Instance."""

    def __init__(self, kernel: Kernel):
        super().__init__(kernel)
        self.instances: list[Instance] = []
        self.latest: dict[str, int] = {}  # variable -> the instance last assigned to it
        self.stack: list[list[int]] = []

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        if isinstance(e, Var):
            if self.stack and e.name in self.latest:
                self.stack[-1].append(self.latest[e.name])
            return super().expr(e, env)
        load = None
        if isinstance(e, Load):
            load = (e.tensor.name, tuple(int(super(_Traced, self).expr(o, env)) for o in e.offsets))
        self.stack.append([])
        try:
            value = super().expr(e, env)
        finally:
            reads = tuple(dict.fromkeys(self.stack.pop()))
        if isinstance(value, Bounded) and isinstance(getattr(e, "type", None), TileType):
            n = len(self.instances)
            self.instances.append(Instance(n, self.now, e, value, reads, load=load))
            if self.stack:
                self.stack[-1].append(n)
        elif self.stack:
            self.stack[-1].extend(reads)
        return value

    def assigned(self, s: Assign, value: Any) -> None:
        if not isinstance(value, Bounded):
            return
        if isinstance(s.value, Var) and s.value.name in self.latest:
            self.latest[s.target] = self.latest[s.value.name]
        elif self.instances and self.instances[-1].expr is s.value:
            self.latest[s.target] = self.instances[-1].n

    def stmt(self, s, env) -> None:
        if not isinstance(s, Store):
            super().stmt(s, env)
            return
        offs = tuple(int(super(_Traced, self).expr(o, env)) for o in s.offsets)
        self.stack.append([])
        self.keep_values = True
        try:
            super().stmt(s, env)
        finally:
            reads = tuple(dict.fromkeys(self.stack.pop()))
            self.keep_values = False
        tile = self.values.pop()[1]
        self.instances.append(Instance(len(self.instances), s, s, tile, reads, dest=(s.tensor.name, offs)))


def trace_task(kernel: Kernel, task: CapturedTask, params: list) -> list[Instance]:
    """Every instance of ``task`` run again alone on the bounded interpreter."""
    k = _Traced(kernel)
    args = task.arguments(params, Bounded.exact)
    with torch.no_grad():
        k.run(args)
    return k.instances


@dataclass
class TaskView:
    """What alignment knows of one task: its instances and where its params sit."""

    task: CapturedTask
    kernel: Kernel
    instances: list[Instance]
    params: dict[str, int]  # param name -> arg index


@dataclass
class Culprit:
    """What alignment names."""

    task: int
    kernel: str
    instance: Instance
    evidence: list[str]
    expected: GoldenValue | None = None  # the golden value the culprit should have matched
    stmt: Any = None  # the statement to name (a load's, when the load read the wrong window)
    view: TaskView | None = None  # the culprit task's instances


class Aligner:
    """The golden's values indexed once; tasks aligned with them one at a time."""

    def __init__(self, build: Build, trace: GoldenTrace, golden: dict[str, torch.Tensor], rtol: float, atol: float,
                 outputs: set[str], inputs: dict[str, Any]):  # fmt: skip
        self.build, self.trace, self.golden, self.rtol, self.atol = build, trace, golden, rtol, atol
        self.outputs, self.inputs = outputs, inputs
        values = {v.index: v.value for v in trace.values if v.value is not None and v.op != "input" or (
            v.op == "input" and v.name not in outputs and v.value is not None)}  # fmt: skip
        self.index = GoldenIndex(values, rtol, atol)

    def view(self, task: CapturedTask, kernel: Kernel) -> TaskView:
        """``task`` traced, each instance matched or judged."""
        params = self.build.kernel_params(task.func_id)
        instances = trace_task(kernel, task, params)
        tv = TaskView(task, kernel, instances, {p.name: i for i, p in enumerate(params)})
        for inst in instances:
            self.judge(tv, inst)
        return tv

    def judge(self, tv: TaskView, inst: Instance) -> None:
        """Set ``inst``'s status: constant, matched (with the golden windows holding it), unmatched,
        or for a store into a program output, matched or wrong at its destination."""
        reads = [tv.instances[r] for r in inst.reads]
        if isinstance(inst.expr, Full | Iota) or (not isinstance(inst.expr, Load | Store) and (
                all(r.status == CONSTANT for r in reads))):  # fmt: skip
            inst.status = CONSTANT
            return
        if inst.dest is not None:
            at = self.destination(tv, inst)
            if at is not None:
                name, box = at
                want = self.golden[name][box]
                inst.status = MATCHED if tile_close(inst.value.v, inst.value.e, want, self.rtol, self.atol) else WRONG
                return
        found = self.index.find(inst.value.v, inst.value.e)
        # NOTE: arithmetic equal to what an operand already matched did nothing (m + log(1) is m): no evidence; a
        # cast, a transpose or a slice keeps its operand's values by design
        keeps = isinstance(inst.expr, Cast | Transpose | TileSlice | Load | LoadRows)
        mine = set() if keeps else {w.value for r in reads for w in r.windows}
        inst.windows = [w for w in found if w.value not in mine]
        inst.status = MATCHED if inst.windows else UNMATCHED

    def destination(self, tv: TaskView, inst: Instance) -> tuple[str, tuple[slice, ...]] | None:
        """The program output and its box a store writes (None: an intermediate, or a region
        that does not map onto the output's dims)."""
        param, offs = inst.dest
        i = tv.params.get(param)
        at = tv.task.boxes.get(i) if i is not None else None
        if at is None or at[0] not in self.outputs or at[0] not in self.golden:
            return None
        name, box = at
        shape = tuple(inst.value.v.shape)
        store: Store = inst.expr
        extra = len(box) - len(offs)  # dims an integer index dropped from the view (extent 1)
        # NOTE: a tile dim with no tensor dim (dims=[d, None]) takes no dim of the box
        if extra < 0 or any(hi - lo != 1 for lo, hi in box[:extra]) or len(shape) - store.dims.count(None) > len(box):
            return None
        offs = (0,) * extra + tuple(offs)
        sizes = (1,) * extra + access_sizes(len(box) - extra, shape, store.dims)
        steps = (1,) * extra + (store.strides or (1,) * (len(box) - extra))
        return name, tuple(
            slice(lo + o, lo + o + (n - 1) * st + 1, st) for (lo, _), o, n, st in zip(box, offs, sizes, steps)
        )

    # -- the culprit ---------------------------------------------------------------------------

    def culprit(self, tv: TaskView, bad_into: str | None = None) -> tuple[Culprit | None, list[int]]:
        """The culprit of ``tv`` (see the module docstring) and the instances of loads from an
        intermediate that lead to its wrong values (where blame goes upstream).

        ``bad_into``: an intermediate a later task read wrong; this task's unmatched stores into
        it are wrong too."""
        inst = tv.instances
        bad = {i.n for i in inst if i.status == WRONG}
        if bad_into is not None:  # NOTE: its reader found its values wrong, whatever they look like alone
            bad |= {i.n for i in inst if i.dest is not None
                    and tv.task.boxes.get(tv.params.get(i.dest[0], -1), ("",))[0] == bad_into}  # fmt: skip
        consumers: dict[int, list[int]] = {}
        for i in inst:
            for r in i.reads:
                consumers.setdefault(r, []).append(i.n)
        reaches_good: dict[int, bool] = {}
        reaches_bad: dict[int, bool] = {}
        for i in reversed(inst):
            kids = consumers.get(i.n, [])
            reaches_good[i.n] = any(inst[k].status == MATCHED or reaches_good[k] for k in kids)
            reaches_bad[i.n] = i.n in bad or any(reaches_bad[k] for k in kids)
        upstream: list[int] = []
        for i in inst:
            if (i.status not in (UNMATCHED, WRONG) and i.n not in bad) or reaches_good[i.n] or not reaches_bad[i.n]:
                continue
            if isinstance(i.expr, Load):
                if self.is_intermediate(tv, i.load[0]):
                    upstream.append(i.n)
                continue
            if any(inst[r].status not in (MATCHED, CONSTANT) for r in i.reads):
                continue
            return self.named(tv, i), upstream
        return None, upstream

    def is_intermediate(self, tv: TaskView, param: str) -> bool:
        """Whether ``param`` is bound to an intermediate (a tensor no program argument is)."""
        at = tv.task.boxes.get(tv.params.get(param, -1))
        return at is not None and at[0] not in self.inputs

    def named(self, tv: TaskView, i: Instance) -> Culprit:
        """The culprit ``i`` with its evidence and the golden value it should have matched; a
        store of a loaded tile whose golden values are elsewhere in the loaded tensor names the load."""
        t = tv.task
        reads = [tv.instances[r] for r in i.reads]
        ev = []
        matched = [r for r in reads if r.status == MATCHED]
        what = ", ".join(f"{r.op} (golden {self.trace.values[r.windows[0].value].where()})" for r in matched[:3])
        if i.status == WRONG:
            name, box = self.destination(tv, i)
            where = name + _box_text(box)
            ev.append(f"aligned with the golden, task {t.task_id} (kernel {tv.kernel.name}) first computes a value the "
                      f"golden does not where its {i.op} writes {where}" + (f", from {what}" if what else ""))  # fmt: skip
            moved = self.moved_load(tv, i)
            if moved is not None:
                load, text = moved
                ev.append(text)
                return Culprit(t.task_id, tv.kernel.name, load, ev, stmt=load.stmt)
            flipped = [r for r in matched if all(w.transposed for w in r.windows) and not isinstance(r.expr, Load)]
            if flipped:  # the golden's values, transposed: the op that made them has its operands the other way
                r = flipped[0]
                ev.append(f"the {r.op} it stores computes the golden's {self.trace.values[r.windows[0].value].where()} "
                          "transposed: its operands are in the wrong order, or a transpose is missing")  # fmt: skip
                return Culprit(t.task_id, tv.kernel.name, r, ev, stmt=r.stmt)
            return Culprit(t.task_id, tv.kernel.name, i, ev, stmt=i.stmt)
        expected = self.expected(matched, i)
        ev.append(
            f"aligned with the golden, the first value of task {t.task_id} (kernel {tv.kernel.name}) that no golden "
            f"step computes is its {i.op}" + (f", computed from {what}" if what else "")
            + (f"; expected golden {expected.where()} (`{expected.text}`)" if expected is not None else "")
        )
        return Culprit(t.task_id, tv.kernel.name, i, ev, expected, stmt=i.stmt)

    def expected(self, matched: list[Instance], i: Instance) -> GoldenValue | None:
        """The golden value of ``i``'s op computed from the golden values ``i``'s operands matched:
        what ``i`` should have been (None when the golden computes none)."""
        sources = {w.value for r in matched for w in r.windows}
        if not sources:
            return None
        used = [v for v in self.trace.values if v.op != "input" and set(v.inputs) & sources]
        same = [v for v in used if v.op.rstrip("_") == i.op or (i.op, v.op) in _SAME_OP]
        return same[0] if same else None

    def moved(self, tv: TaskView, store: Instance) -> list[Instance]:
        """The loads a store's value is copied from unchanged (through casts and transposes)."""
        chain = store
        while len(chain.reads) == 1 and not isinstance(chain.expr, Load):
            chain = tv.instances[chain.reads[0]]
            if not isinstance(chain.expr, Load | Store) and chain.op not in ("cast", "transpose"):
                return []
        return [chain] if isinstance(chain.expr, Load) and chain.load is not None else []

    def moved_load(self, tv: TaskView, store: Instance) -> tuple[Instance, str] | None:
        """For a store of a tile loaded unchanged: the load, when the golden's values for the
        store's destination are in the loaded tensor at another window (it read the wrong place)."""
        loads = self.moved(tv, store)
        if not loads:
            return None
        chain = loads[0]
        name, box = self.destination(tv, store)
        want = self.golden[name][box].to(torch.float64)
        param, offs = chain.load
        source = tv.task.inputs.get(tv.params.get(param, -1))
        if not torch.is_tensor(source):
            return None
        idx = GoldenIndex({0: source}, self.rtol, self.atol)
        found = idx.find(want.reshape(chain.value.v.shape), torch.zeros(()), first=True)
        if not found:
            return None
        w = found[0]
        at = _origin(w, source.shape)
        if at is None or tuple(at) == tuple(offs):
            return None
        return chain, (
            f"the values {name}{_box_text(box)} should hold are in {param} at offsets {list(at)}; the {chain.op} read "
            f"{param} at offsets {list(offs)}"
        )


_SAME_OP = {("row_sum", "sum"), ("col_sum", "sum"), ("row_max", "amax"), ("col_max", "amax"), ("row_min", "amin"),
            ("col_min", "amin"), ("row_max", "max"), ("col_max", "max"), ("row_min", "min"), ("col_min", "min"), ("row_mean", "mean"), ("col_mean", "mean"), ("matmul", "mm"), ("matmul", "bmm"),
            ("cast", "_to_copy"), ("maximum", "amax"), ("eq", "eq")}  # fmt: skip


def _origin(w: Window, shape: torch.Size) -> list[int] | None:
    """A window's origin as offsets of a tensor of ``shape`` laid out as its own rows."""
    if w.transposed or len(shape) == 0 or shape[-1] != w.cols:
        return None
    lead, out = w.row, []
    for n in reversed(shape[:-1]):
        lead, r = divmod(lead, n)
        out.append(r)
    return list(reversed(out)) + [w.col]


def _box_text(box: tuple[slice, ...]) -> str:
    return "[" + ", ".join(_slice_text(s) for s in box) + "]"


def _slice_text(s: slice) -> str:
    return f"{s.start}:{s.stop}" + (f":{s.step}" if s.step not in (None, 1) else "")


def writers_of(tasks: list[CapturedTask], name: str, box: tuple[tuple[int, int], ...], before: int) -> list[CapturedTask]:
    """The tasks before task ``before`` that wrote a part of ``name``'s ``box``, in task order."""
    out = []
    for t in tasks:
        if t.task_id >= before:
            break
        for i, (n, b) in t.boxes.items():
            if n == name and t.roles.get(i) in ("output", "inout") and all(
                    lo < h2 and l2 < hi for (lo, hi), (l2, h2) in zip(b, box)):  # fmt: skip
                out.append(t)
                break
    return out


def align_culprit(aligner: Aligner, kernels: dict[str, Kernel], tasks: list[CapturedTask], first_wrong: int,
                  depth: int = 3) -> tuple[Culprit | None, list[str]]:  # fmt: skip
    """The culprit of the wrong values task ``first_wrong`` wrote, following wrong intermediates
    upstream (at most ``depth`` producers deep); and the evidence of where the search went."""
    by_id = {t.task_id: t for t in tasks}
    said: list[str] = []
    queue: list[tuple[CapturedTask, str | None]] = [(by_id[first_wrong], None)]
    seen: set[int] = set()
    while queue and depth >= 0:
        task, bad = queue.pop(0)
        if task.task_id in seen or task.lost:
            continue
        seen.add(task.task_id)
        tv = aligner.view(task, kernels[task.kernel])
        found, upstream = aligner.culprit(tv, bad)
        if found is not None:
            found.evidence = said + found.evidence
            found.view = tv
            return found, said
        depth -= 1
        for n in upstream:
            load = tv.instances[n]
            i = tv.params[load.load[0]]
            name, box = task.boxes[i]
            ws = writers_of(tasks, name, box, task.task_id)
            said.append(
                f"task {task.task_id} (kernel {task.kernel}) computes what the golden does from what it loads, but "
                f"{load.load[0]} = {task.regions.get(i, name)} holds values the golden never computes: written by "
                + (", ".join(f"task {w.task_id} ({w.kernel})" for w in ws[:4]) or "no task")
            )
            queue += [(w, name) for w in ws[:2]]
    return None, said


__all__ = ["Aligner", "Culprit", "Instance", "TaskView", "align_culprit", "trace_task", "writers_of"]
