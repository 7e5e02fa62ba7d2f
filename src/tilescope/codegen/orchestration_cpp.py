"""Orchestration IR -> C++ that builds the task graph through ``tilescope/orchestration.hpp``
(``add_input`` / ``add_output`` / ``add_inout`` / ``add_scalar`` + ``submit``).

Invariants:
- Every IR variable is a C++ variable declared at its first assignment and assigned after,
  so one reassigned in a loop or branch carries its value across iterations: task handles
  are ``int64_t`` (-1 until a task is submitted, and after a failed submit), tensor variables
  ``ts::TensorHandle``, indices ``int64_t``, scalars their element type.
- A dependency on a handle that holds -1 (no task) is skipped.
- Nothing unused is declared (g++ -Wall -Wextra stays quiet): a task handle nothing reads is
  not kept, and an assignment without effects (no task, no tensor) to a variable nothing
  reads is not emitted.
- Each kernel's func_id constant (``FUNC_<NAME>``) is unique, also for names equal but for
  case; task names are escaped C++ string literals.
"""

from __future__ import annotations

from tilescope._version import __version__
from tilescope.codegen.cpp_common import (
    CppNames,
    ExprEmitter,
    function_names,
    header_comment,
    marker,
    string_literal,
)
from tilescope.ir.analysis import bound_text, range_text, runtime_bounds, stmt_uses
from tilescope.ir.nodes import (
    Assign,
    CreateTensor,
    DumpTag,
    Evaluate,
    Expr,
    For,
    If,
    Program,
    Slice,
    Stmt,
    Submit,
    TensorRead,
    Var,
)
from tilescope.ir.traverse import walk_exprs, walk_stmts
from tilescope.ir.types import Direction, IndexType, ScalarType, TaskType, TensorType

_ADD = {Direction.IN: "add_input", Direction.OUT: "add_output", Direction.INOUT: "add_inout"}


def func_id_names(kernels: list[str]) -> dict[str, str]:
    """``FUNC_<NAME>`` for each kernel name, made unique with a ``_<n>`` suffix where two
    names differ only in case (``copy`` and ``Copy``) or would meet another's suffix."""
    out: dict[str, str] = {}
    taken = {f"FUNC_{k.upper()}" for k in kernels}
    for k in kernels:
        base = f"FUNC_{k.upper()}"
        name, i = base, 0
        while name in out.values() or (i and name in taken):
            i += 1
            name = f"{base}_{i}"
        out[k] = name
    return out


def _where(e: Expr) -> str:
    """``moe.py:41``: the expression's DSL line as errors name it ("" when it has none)."""
    return f"{e.loc.file.rsplit('/', 1)[-1]}:{e.loc.line}" if e.loc is not None else ""


class _OrchEmitter(ExprEmitter):
    def emit_other(self, e: Expr, ctx) -> str:
        match e:
            case Slice(tensor=t, ranges=ranges):
                dims = ", ".join(f"{{{self.emit(r.start)}, {self.emit(r.stop)}}}" for r in ranges)
                s = f"{self.name(t.name)}.slice({{{dims}}})"
                squeezed = [str(i) for i, r in enumerate(ranges) if r.squeeze]
                if squeezed:
                    s += f".squeeze({{{', '.join(squeezed)}}})"
                return s
            case TensorRead(tensor=t, indices=indices, type=ty):
                index = ", ".join(self.emit(i) for i in indices)
                name = string_literal(t.name)
                return f"orch.read<{ty.dtype.cpp}>({self.name(t.name)}, {{{index}}}, {name}, {string_literal(_where(e))})"
        raise TypeError(f"cannot emit {type(e).__name__} in an orchestration")


def _pure(s: Stmt) -> bool:
    return isinstance(s, Assign) and not isinstance(s.value, Submit | CreateTensor | TensorRead)


def _needed_names(p: Program) -> set[str]:
    """Variables the emitted code reads: the least fixed point where a pure assignment counts
    only if its target is needed."""
    stmts = list(walk_stmts(p.body))
    needed: set[str] = set()
    while True:
        reads: set[str] = set()
        for s in stmts:
            if not (_pure(s) and s.target not in needed):
                reads |= stmt_uses(s)
        if reads <= needed:
            return needed
        needed |= reads


def orchestration_cpp(p: Program) -> str:
    """The C++ source of ``p``'s ``orchestration_entry``, which submits the task graph."""
    func_ids = func_id_names([k.name for k in p.kernels])
    name_of = CppNames(function_names(p.params, p.body), reserved=func_ids.values())
    em = _OrchEmitter(name_of)
    needed = _needed_names(p)
    lines = header_comment(f"orchestration {p.name}", p.loc, __version__)
    lines += ["#include <tilescope/index.hpp>", "#include <tilescope/orchestration.hpp>"]
    lines += ["#include <tilescope/tile_types.hpp>", ""]  # bf16 / f16 scalars
    lines.append("// func_id of each kernel: its index in kernel_config.KERNELS")
    for i, k in enumerate(p.kernels):
        lines.append(f"constexpr int32_t {func_ids[k.name]} = {i};")
    lines += ["", 'extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args,']
    lines += [
        "                                   int32_t nargs) {",
        "    ts::Orchestrator orch(api, ctx, args, nargs);",
    ]
    for i, prm in enumerate(p.params):
        name = name_of(prm.name)
        if prm.direction is Direction.SCALAR:
            c = prm.type.dtype.cpp
            lines.append(f"    const {c} {name} = orch.scalar_arg<{c}>({i});{marker(prm.loc)}")
        else:
            lines.append(f"    ts::TensorHandle {name} = orch.tensor_arg({i}, {string_literal(prm.name)});{marker(prm.loc)}")
    kernels = {k.name: k for k in p.kernels}
    seen: list[set[str]] = [set()]
    loop_vars: set[str] = set()

    def declare(name: str, ctype: str) -> str:
        """``ctype `` at a variable's first assignment in scope, else nothing."""
        if any(name in scope for scope in seen):
            return ""
        seen[-1].add(name)
        return f"{ctype} "

    def submit(e: Submit, ind: str, target: str | None, m: str) -> None:
        k = kernels[e.kernel]
        if target is not None:
            prefix = declare(target, "int64_t")
            if prefix:
                lines.append(f"{ind}{prefix}{name_of(target)} = -1;")
        lines.append(f"{ind}{{{m}")
        inner = ind + "    "
        display = string_literal(e.name or e.kernel)
        lines.append(f"{inner}ts::Task task = orch.task({func_ids[e.kernel]}, {display}, {string_literal(_where(e))});")
        for prm, a in zip(k.params, e.args):
            if prm.direction is Direction.SCALAR:
                dtype = prm.type.dtype
                value = em.emit(a, dtype)
                lines.append(f"{inner}task.add_scalar(TS_{dtype.name.upper()}, {value});")
            else:
                shape = ", ".join(map(str, prm.type.shape)) or "1"  # a 0-dim tensor is one element: [1]
                lines.append(f"{inner}task.{_ADD[prm.direction]}({em.emit(a)}, {{{shape}}});")
        for d in e.deps:
            dep = em.emit(d)
            lines.append(f"{inner}if ({dep} >= 0) task.depends_on({dep});")
        for t in e.dumps:
            lines.append(f"{inner}orch.dump_in_next_task({em.emit(t)});")
        result = f"{name_of(target)} = " if target is not None else ""
        lines.append(f"{inner}{result}orch.submit(task);")
        lines.append(f"{ind}}}")

    def stmt(s: Stmt, ind: str) -> None:
        m = marker(s.loc)
        em.at = s.loc
        if _pure(s) and s.target not in needed:
            return
        match s:
            case Assign(target=t, value=Submit() as e):
                submit(e, ind, t if t in needed else None, m)
            case Assign(target=t, value=CreateTensor(type=tt)):
                shape = ", ".join(map(str, tt.shape))
                prefix = declare(t, "ts::TensorHandle")
                dtype = f"TS_{tt.dtype.name.upper()}"
                lines.append(f'{ind}{prefix}{name_of(t)} = orch.create_tensor({dtype}, {{{shape}}}, "{t}");{m}')
            case Assign(target=t, value=TensorRead() as v) if t not in needed:
                lines.append(f"{ind}{em.emit(v)};{m}")  # read for its wait and its checks alone
            case Assign(target=t, value=Var() as v) if isinstance(v.type, TensorType | TaskType):
                ctype = "ts::TensorHandle" if isinstance(v.type, TensorType) else "int64_t"
                lines.append(f"{ind}{declare(t, ctype)}{name_of(t)} = {em.emit(v)};{m}")
            case Assign(target=t, value=v) if isinstance(v.type, IndexType | ScalarType):
                ctype = "int64_t" if isinstance(v.type, IndexType) else v.type.dtype.cpp
                lines.append(f"{ind}{declare(t, ctype)}{name_of(t)} = {em.emit(v)};{m}")
            case Evaluate(value=Submit() as e):
                submit(e, ind, None, m)
            case Evaluate(value=DumpTag(tensor=t)):
                lines.append(f"{ind}orch.dump_tag({em.emit(t)});{m}")
            case For(var=v, start=a, stop=b, step=c, body=body):
                var = name_of(v)
                for which, e in runtime_bounds(s, loop_vars):
                    value = em.emit(e)
                    label = string_literal(bound_text(s, which, e))
                    lines.append(f"{ind}if ({value} < 0) orch.fail(ts::negative_bound_message({value}, {label}));{m}")
                submits = any(isinstance(e, Submit) for e in walk_exprs(body))
                if submits:  # NOTE: a runaway loop is refused before it fills memory with tasks
                    bounds = f"{em.emit(a)}, {em.emit(b)}, {em.emit(c)}"
                    lines.append(f"{ind}if (!orch.loop_fits({bounds}, {string_literal(range_text(s))})) return orch.status();{m}")
                lines.append(
                    f"{ind}for (int64_t {var} = {em.emit(a)}; {var} < {em.emit(b)}; {var} += {em.emit(c)}) {{{m}"
                )
                if submits:
                    lines.append(f"{ind}    if (orch.failed()) return orch.status();")
                loop_vars.add(v)
                nested(body, ind, v)
                loop_vars.discard(v)
                lines.append(f"{ind}}}")
            case If(cond=c, then=a, orelse=b):
                lines.append(f"{ind}if ({em.emit(c)}) {{{m}")
                nested(a, ind)
                if b:
                    lines.append(f"{ind}}} else {{")
                    nested(b, ind)
                lines.append(f"{ind}}}")
            case _:
                raise TypeError(f"cannot emit {s!r} in an orchestration")

    def nested(body: tuple[Stmt, ...], ind: str, loop_var: str | None = None) -> None:
        seen.append(set() if loop_var is None else {loop_var})
        for x in body:
            stmt(x, ind + "    ")
        seen.pop()

    for s in p.body:
        stmt(s, "    ")
    lines += ["    return orch.status();", "}"]
    return "\n".join(lines) + "\n"
