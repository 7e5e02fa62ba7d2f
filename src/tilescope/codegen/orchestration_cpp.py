"""Orchestration IR -> C++ that builds the task graph through ``tilescope/orchestration.hpp``
(``add_input`` / ``add_output`` / ``add_inout`` / ``add_scalar`` + ``submit``)."""

from __future__ import annotations

from tilescope._version import __version__
from tilescope.codegen.cpp_common import ExprEmitter, cpp_name, header_comment, marker
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
    Var,
)
from tilescope.ir.types import Direction, IndexType, ScalarType

_ADD = {Direction.IN: "add_input", Direction.OUT: "add_output", Direction.INOUT: "add_inout"}


def func_id_name(kernel: str) -> str:
    return f"FUNC_{kernel.upper()}"


class _OrchEmitter(ExprEmitter):
    def emit_other(self, e: Expr, ctx) -> str:
        match e:
            case Slice(tensor=t, ranges=ranges):
                dims = ", ".join(f"{{{self.emit(r.start)}, {self.emit(r.stop)}}}" for r in ranges)
                s = f"{cpp_name(t.name)}.slice({{{dims}}})"
                squeezed = [str(i) for i, r in enumerate(ranges) if r.squeeze]
                if squeezed:
                    s += f".squeeze({{{', '.join(squeezed)}}})"
                return s
            case Var(name=n):
                return cpp_name(n)
        raise TypeError(f"cannot emit {type(e).__name__} in an orchestration")


def orchestration_cpp(p: Program) -> str:
    em = _OrchEmitter()
    lines = header_comment(f"orchestration {p.name}", p.loc, __version__)
    lines += ["#include <tilescope/index.hpp>", "#include <tilescope/orchestration.hpp>"]
    lines += ["#include <tilescope/tile_types.hpp>", ""]  # bf16 / f16 scalars
    lines.append("// func_id of each kernel: its index in kernel_config.KERNELS")
    for i, k in enumerate(p.kernels):
        lines.append(f"constexpr int32_t {func_id_name(k.name)} = {i};")
    lines += ["", 'extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args,']
    lines += [
        "                                   int32_t nargs) {",
        "    ts::Orchestrator orch(api, ctx, args, nargs);",
    ]
    for i, prm in enumerate(p.params):
        name = cpp_name(prm.name)
        if prm.direction is Direction.SCALAR:
            c = prm.type.dtype.cpp
            lines.append(f"    const {c} {name} = orch.scalar_arg<{c}>({i});{marker(prm.loc)}")
        else:
            lines.append(f"    ts::TensorHandle {name} = orch.tensor_arg({i});{marker(prm.loc)}")
    kernels = {k.name: k for k in p.kernels}

    def submit(e: Submit, ind: str, target: str | None, m: str) -> None:
        k = kernels[e.kernel]
        if target is not None:
            lines.append(f"{ind}int64_t {cpp_name(target)} = -1;")
        lines.append(f"{ind}{{{m}")
        inner = ind + "    "
        display = e.name or e.kernel
        lines.append(f'{inner}ts::Task task = orch.task({func_id_name(e.kernel)}, "{display}");')
        for prm, a in zip(k.params, e.args):
            if prm.direction is Direction.SCALAR:
                dtype = prm.type.dtype
                value = em.emit(a, dtype)
                lines.append(f"{inner}task.add_scalar(TS_{dtype.name.upper()}, {value});")
            else:
                shape = ", ".join(map(str, prm.type.shape))
                lines.append(f"{inner}task.{_ADD[prm.direction]}({em.emit(a)}, {{{shape}}});")
        for d in e.deps:
            lines.append(f"{inner}task.depends_on({em.emit(d)});")
        for t in e.dumps:
            lines.append(f"{inner}orch.dump_tag({em.emit(t)});")
        result = f"{cpp_name(target)} = " if target is not None else ""
        lines.append(f"{inner}{result}orch.submit(task);")
        lines.append(f"{ind}}}")

    def stmt(s: Stmt, ind: str) -> None:
        m = marker(s.loc)
        match s:
            case Assign(target=t, value=Submit() as e):
                submit(e, ind, t, m)
            case Assign(target=t, value=CreateTensor(type=tt)):
                shape = ", ".join(map(str, tt.shape))
                lines.append(
                    f"{ind}ts::TensorHandle {cpp_name(t)} = orch.create_tensor(TS_{tt.dtype.name.upper()}, "
                    f"{{{shape}}});{m}"
                )
            case Assign(target=t, value=v) if isinstance(v.type, IndexType | ScalarType):
                declared = any(t in scope for scope in seen)
                seen[-1].add(t)
                ctype = "int64_t" if isinstance(v.type, IndexType) else v.type.dtype.cpp
                prefix = "" if declared else f"{ctype} "
                lines.append(f"{ind}{prefix}{cpp_name(t)} = {em.emit(v)};{m}")
            case Evaluate(value=Submit() as e):
                submit(e, ind, None, m)
            case Evaluate(value=DumpTag(tensor=t)):
                lines.append(f"{ind}orch.dump_tag({em.emit(t)});{m}")
            case For(var=v, start=a, stop=b, step=c, body=body):
                var = cpp_name(v)
                lines.append(
                    f"{ind}for (int64_t {var} = {em.emit(a)}; {var} < {em.emit(b)}; {var} += {em.emit(c)}) {{{m}"
                )
                nested(body, ind)
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

    def nested(body: tuple[Stmt, ...], ind: str) -> None:
        seen.append(set())
        for x in body:
            stmt(x, ind + "    ")
        seen.pop()

    seen: list[set[str]] = [set()]
    for s in p.body:
        stmt(s, "    ")
    lines += ["    return orch.status();", "}"]
    return "\n".join(lines) + "\n"
