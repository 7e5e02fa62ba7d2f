"""Kernel names: an explicit ``@ts.kernel(name=...)`` checked, and one distinct name for each
kernel of a program.

A kernel's name is the stem of its files in a build (``kernels/<core>/<name>.cpp`` and ``.so``),
its ``FUNC_<NAME>`` constant in the orchestration's C++, a string in reports, traces and dumps,
and its ``def`` name in the printed IR (``ir/<program>.py``): a Python module that also names
``ts``, ``float`` (``float('-inf')``), the orchestration and the orchestration's variables, and
whose kernel calls find a kernel by that name.

Invariants:
- An explicit name is a letter, then ASCII letters, digits and underscores, without ``__`` (C++
  reserves such identifiers), at most ``MAX_NAME_LENGTH`` characters, not a Python keyword or
  builtin and not ``ts``; it is kept as written. Two different kernels of one program may not
  share one, and it may not be the orchestration's name or one of its variables.
- Kernels are the same kernel when their IR is equal (one kernel object called twice, or one
  factory called twice with the same constants, is one kernel).
- A kernel named by its ``def`` keeps that name unless another kernel of the program has it or
  the printed IR needs it. Then each kernel of that name gets the closure constants of its
  factory that tell them apart as a suffix (``mm_block_BM128`` and ``mm_block_BM64``), or, when
  the constants do not, the first keeps the name and the others get ``_2``, ``_3`` in first-use
  order. A name depends only on the program's source and constants: the same in every run and
  process, so build caches, replays and ``--task`` ids keep working.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from tilescope.errors import SourceLoc, VerifyError
from tilescope.ir.dtypes import DType
from tilescope.ir.nodes import Assign, For, Kernel, Param, Program, Stmt, Submit
from tilescope.ir.traverse import map_exprs, walk_stmts

MAX_NAME_LENGTH = 64
NAME_RULE = (
    f"a kernel name is a letter, then letters, digits and underscores (no '__'), at most {MAX_NAME_LENGTH} "
    "characters, and not a Python keyword or builtin or 'ts'"
)
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_PRINTED_IR_NAMES = frozenset({"ts", "float"})  # what the printed IR's module itself calls


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a kernel, in words; None when it can."""
    if not isinstance(name, str):
        return f"a string is needed, got {name!r} ({type(name).__name__})"
    if not name:
        return "the name is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"{name[:20]!r}... is {len(name)} characters long, more than {MAX_NAME_LENGTH}"
    if not _IDENTIFIER.match(name):
        bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))), None)
        if bad is not None:
            return f"{name!r} has {bad!r}, which is not a letter, digit or underscore"
        return f"{name!r} does not start with a letter"
    if "__" in name:
        return f"{name!r} has '__', which C++ reserves (the build names the kernel FUNC_{name.upper()})"
    if keyword.iskeyword(name):
        return f"{name!r} is a Python keyword (the printed IR defines the kernel as 'def {name}(...)')"
    if name == "ts":
        return "'ts' is the tilescope module in DSL code and in the printed IR"
    if hasattr(builtins, name):
        return f"{name!r} is a Python builtin, which the kernel's name would hide in the printed IR"
    return None


def _constant_text(value: Any) -> str | None:
    """A closure constant as part of an identifier (``128``, ``m3``, ``0p5``, ``f32``); None
    for a value that is not a plain number, string or dtype."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value).replace("-", "m")
    if isinstance(value, float):
        return (
            repr(value).replace("-", "m").replace("+", "").replace(".", "p") if math.isfinite(value) else None
        )
    if isinstance(value, DType):
        return value.name
    if isinstance(value, str) and value.isascii() and value.replace("_", "").isalnum():
        return value
    return None


def _closure_constants(fn: Any) -> dict[str, str]:
    """The closure variables of a factory's kernel function that are constants, as text."""
    out = {}
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            text = _constant_text(cell.cell_contents)
        except ValueError:  # a cell not yet assigned
            continue
        if text is not None:
            out[var] = text
    return out


@dataclass
class _Use:
    """A distinct kernel of the program, as its first call found it."""

    kernel: Kernel
    given: bool  # named by @ts.kernel(name=...)
    fn: Any  # the kernel's Python function (its closure holds the factory's constants)
    ref: str  # the name its Submits carry until ``program`` renames them
    loc: SourceLoc | None  # its first call


def _where(loc: SourceLoc | None) -> str:
    return f" at {loc}" if loc is not None else ""


class ProgramKernels:
    """The distinct kernels an orchestration submits, in first-use order, and their names."""

    def __init__(self) -> None:
        self._uses: list[_Use] = []

    def use(self, kfn: Any, kernel: Kernel, loc: SourceLoc | None) -> str:
        """Record a call of ``kfn`` (whose IR is ``kernel``) and return the name its Submit
        carries until ``program`` gives every kernel its final name. Two different kernels
        explicitly given one name are an error at the second's call."""
        for u in self._uses:
            if u.kernel.name == kernel.name and u.kernel == kernel:
                return u.ref
        given = kfn.name_given
        clash = next((u for u in self._uses if u.given and given and u.kernel.name == kernel.name), None)
        if clash is not None:
            same_def = str(clash.kernel.loc) == str(kernel.loc)
            which = (
                f"this one and the one first called{_where(clash.loc)}, both made by the def{_where(kernel.loc)} "
                "(a factory's, with different constants)"
                if same_def
                else f"this one (defined{_where(kernel.loc)}) and the one first called{_where(clash.loc)} "
                f"(defined{_where(clash.kernel.loc)})"
            )
            raise VerifyError(
                f"two different kernels are named {kernel.name!r} by @ts.kernel(name=...): {which}",
                loc,
                "give each kernel its own name= (in a factory, from its parameters: "
                'name=f"mm_{BM}x{BN}"), or leave name= out and tilescope names them apart',
            )
        refs = {u.ref for u in self._uses}
        ref, n = kernel.name, 1
        while ref in refs:
            n += 1
            ref = f"{kernel.name}#{n}"  # never an identifier: replaced by ``program``
        self._uses.append(_Use(kernel, given, kfn.fn, ref, loc))
        return ref

    def program(
        self, name: str, params: tuple[Param, ...], body: tuple[Stmt, ...], loc: SourceLoc | None
    ) -> Program:
        """The orchestration's Program: its kernels with their final names, and its Submits
        naming them."""
        orch = {name: f"the orchestration's name ({name})"}
        orch.update({p.name: f"a parameter of the orchestration {name}" for p in params})
        for s in walk_stmts(body):
            if isinstance(s, Assign | For):
                orch.setdefault(
                    s.target if isinstance(s, Assign) else s.var, f"a variable of the orchestration {name}"
                )
        for u in self._uses:
            if u.given and u.kernel.name in orch:
                raise VerifyError(
                    f"kernel name {u.kernel.name!r} (@ts.kernel(name=...)) is also {orch[u.kernel.name]}",
                    u.loc,
                    "the printed IR calls the kernel by its name there: give the kernel another name=",
                )
        final = self._final_names(set(orch) | _PRINTED_IR_NAMES)
        renamed = {u.ref: final[u.ref] for u in self._uses if final[u.ref] != u.ref}
        if renamed:
            body = map_exprs(
                body,
                lambda e: (
                    replace(e, kernel=renamed[e.kernel]) if type(e) is Submit and e.kernel in renamed else e
                ),
            )
        kernels = tuple(
            replace(u.kernel, name=final[u.ref]) if u.ref in renamed else u.kernel for u in self._uses
        )
        return Program(name, params, body, kernels, loc)

    def _final_names(self, reserved: set[str]) -> dict[str, str]:
        """Each use's final name, by its ``ref``."""
        given = {u.kernel.name for u in self._uses if u.given}
        taken = given | reserved
        used = taken | {u.kernel.name for u in self._uses}
        groups: dict[str, list[_Use]] = {}
        for u in self._uses:
            if not u.given:
                groups.setdefault(u.kernel.name, []).append(u)
        final = {u.ref: u.kernel.name for u in self._uses if u.given}
        for base, group in groups.items():
            if len(group) == 1 and base not in taken:
                final[group[0].ref] = base
                continue
            names = _by_constants(base, group, used) or _numbered(
                base, group, used, keep_base=base not in taken
            )
            used |= set(names)
            final.update(zip((u.ref for u in group), names))
        return final


def _by_constants(base: str, group: list[_Use], used: set[str]) -> list[str] | None:
    """``base`` with the closure constants that differ between the group's kernels
    (``mm_block_BM128``), or None when they do not tell every kernel apart."""
    if len(group) < 2:
        return None
    consts = [_closure_constants(u.fn) for u in group]
    keys = sorted(set.intersection(*(set(c) for c in consts)))
    differ = [k for k in keys if len({c[k] for c in consts}) > 1]
    if not differ:
        return None
    names = []
    for c in consts:
        parts = [f"{k}{'_' if k[-1].isdigit() else ''}{c[k]}" for k in differ]
        names.append(f"{base.rstrip('_') or base}_{re.sub('_+', '_', '_'.join(parts)).strip('_')}")
    if len(set(names)) < len(names) or any(n in used or len(n) > MAX_NAME_LENGTH for n in names):
        return None
    return names


def _numbered(base: str, group: list[_Use], used: set[str], keep_base: bool) -> list[str]:
    """``base`` for the first kernel (when it is free), then ``base_2``, ``base_3``, ..."""
    names = [base] if keep_base else []
    n = 1
    while len(names) < len(group):
        n += 1
        candidate = f"{base}_{n}"
        if candidate not in used:
            names.append(candidate)
    return names
