"""Names and scopes of the front-end: where a DSL name resolves and what assigning it makes.

Invariants:
- Names resolve first to DSL variables (innermost scope first), then to the function's
  closure, globals and builtins (compile-time values).
- A variable assigned inside a real loop (or run-time ``if``) that held a compile-time value
  before it is materialised as an IR variable first, so loop-carried values are real.
- IR variables are only assigned in place when the name owns them: a loop variable, an inline
  helper's parameter (the caller's variable) and a tensor alias are never overwritten;
  rebinding one makes a new IR variable, and one reassigned inside a real loop or branch is
  first copied into a variable of its own (``materialize``). Tensor variables copied that way
  are run-time handles (``handles``); other tensor names are compile-time aliases.
- Loop variables get an IR name of their own when the name is already visible, so a nested
  loop or a helper's loop never captures an enclosing loop's variable.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from typing import Any

from tilescope.errors import DSLError, SourceLoc, UnsupportedSyntaxError, VerifyError
from tilescope.ir import type_rules as rules
from tilescope.ir.analysis import uses
from tilescope.ir.dtypes import from_torch
from tilescope.ir.nodes import (
    Assign,
    Slice,
    Stmt,
    Submit,
    Var,
)
from tilescope.ir.printer import dtype_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
    ScalarType,
    TensorType,
)
from tilescope.language.op_lowering import is_number

_UNDEFINED_HINT = (
    "a variable first assigned inside a loop or branch exists only there; assign it before the loop to use it after"
)


@dataclass
class Frame:
    """One function being lowered: the top-level DSL function or an inlined helper."""

    name: str
    file: str
    namespace: dict[str, Any]
    scopes: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    returned: Any = None
    # Parameters of an inlined helper still bound to the caller's values: assigning one binds
    # a new variable of the helper instead of overwriting the caller's.
    borrowed: set[str] = field(default_factory=set)


class Scopes:
    """Name resolution and binding, mixed into the front-end's lowering class (which provides
    ``frames``, ``blocks``, ``loop_vars``, ``handles``, ``expr`` and ``body``)."""

    @property
    def frame(self) -> Frame:
        """The function being lowered now (the innermost inlined helper, else the DSL function)."""
        return self.frames[-1]

    def loc(self, node: ast.AST) -> SourceLoc:
        """``node``'s place in the current function's file."""
        return SourceLoc(self.frame.file, getattr(node, "lineno", 0), getattr(node, "col_offset", 0))

    def error(self, node: ast.AST, msg: str, hint: str | None = None) -> DSLError:
        """An UnsupportedSyntaxError at ``node`` (returned for the caller to raise)."""
        return UnsupportedSyntaxError(msg, self.loc(node), hint)

    def emit(self, stmt: Stmt) -> None:
        """Append ``stmt`` to the innermost block being built."""
        self.blocks[-1].append(stmt)

    def what(self) -> str:
        """How messages name the code being lowered: a kernel or an orchestration."""
        return "a @ts.kernel" if self.mode == "kernel" else "a @ts.jit orchestration"

    def lookup(self, name: str, node: ast.AST) -> Any:
        """What ``name`` resolves to: a DSL variable (innermost scope first), else a compile-time
        value from the function's namespace; a DSLError if it is neither."""
        for scope in reversed(self.frame.scopes):
            if name in scope:
                return scope[name]
        if name in self.frame.namespace:
            return self.frame.namespace[name]
        raise DSLError(f"name {name!r} is not defined here", self.loc(node), _UNDEFINED_HINT)

    def value_of_name(self, name: str, node: ast.AST) -> Any:
        """``lookup(name)`` used as a value: a torch tensor from the enclosing scope is an error
        that says to pass it as a parameter (DSL code reads tensors only through its parameters;
        ``W.shape`` of one is still a compile-time value, see the front-end's attributes)."""
        value = self.lookup(name, node)
        torch = sys.modules.get("torch")  # not imported: no torch tensor exists
        if torch is not None and torch.is_tensor(value):
            shape = list(value.shape)
            try:
                dtype = dtype_str(from_torch(value.dtype))
            except ValueError:
                dtype = str(value.dtype)
            raise DSLError(
                f"{name} is a torch tensor (shape {shape}, {value.dtype}) from the enclosing scope: "
                f"{self.what()} reads tensors only through its parameters",
                self.loc(node),
                f"pass it as a parameter: '{name}: ts.Tensor[{shape}, {dtype}]' in the kernel and in the "
                "@ts.jit function, and the tensor as an argument when you call it",
            )
        return value

    def _binding_scope(self, name: str) -> dict[str, Any] | None:
        for scope in reversed(self.frame.scopes):
            if name in scope:
                return scope
        return None

    def _visible_cpp_names(self) -> set[str]:
        names = set(self.params)
        for frame in self.frames:
            for scope in frame.scopes:
                names.update(v.name for v in scope.values() if isinstance(v, Var))
        return names

    def _fresh(self, name: str) -> str:
        taken = self._visible_cpp_names()
        if name not in taken:
            return name
        i = 1
        while f"{name}_{i}" in taken:
            i += 1
        return f"{name}_{i}"

    def _owns(self, name: str, scope: dict[str, Any], v: Var) -> bool:
        """Whether assigning ``name`` may overwrite the IR variable ``v`` it is bound to in
        ``scope``: not a loop variable, a caller's variable seen through a helper's parameter,
        nor a tensor that is not a run-time handle (an alias of a parameter or a new tensor)."""
        if v.name in self.loop_vars:
            return False
        if scope is self.frame.scopes[0] and name in self.frame.borrowed:
            return False
        return not isinstance(v.type, TensorType) or v.name in self.handles

    def assign(self, name: str, value: Any, node: ast.AST) -> None:
        """Bind ``name`` to ``value`` (see the module's invariants): assigns the owned IR variable in
        place when the type is unchanged; otherwise binds a compile-time value, a tensor alias or a new
        IR variable. A VerifyError when a loop or branch changes a carried variable's type.
        """
        loc = self.loc(node)
        if name in self.params and self.inline_depth == 0:
            raise DSLError(
                f"cannot assign to parameter {name!r}",
                loc,
                "tensor params are written with ts.store (kernels) or by the tasks they are passed to",
            )
        scope = self._binding_scope(name)
        existing = scope[name] if scope is not None else None
        if value is None:
            raise DSLError(f"the value assigned to {name!r} has no value (did you assign ts.store?)", loc)
        if isinstance(existing, Var) and self._owns(name, scope, existing):
            if not is_expr(value):
                value = self.as_expr(value, node, like=existing.type)
            if value.type == existing.type:
                self.emit(Assign(existing.name, value, loc))
                return
            if scope is not self.frame.scopes[-1]:
                raise VerifyError(
                    f"{name!r} changes type from {existing.type} to {value.type} inside a loop or branch",
                    loc,
                    "a value carried across iterations must keep its shape and dtype; use a new name",
                )
        if scope is self.frame.scopes[0]:
            self.frame.borrowed.discard(name)
        if not is_expr(value):
            self.frame.scopes[-1][name] = value
            return
        if isinstance(value, Var) and isinstance(value.type, TensorType) and value.name not in self.handles:
            self.frame.scopes[-1][name] = value  # an alias of a tensor that is never reassigned
            return
        if isinstance(value, Slice):
            raise DSLError(
                f"a tensor region cannot be stored in a variable ({name!r})",
                loc,
                "write the slice directly in the kernel call",
            )
        self.frame.scopes[-1][name] = self.new_var(name, value, loc)

    def new_var(self, name: str, value: Any, loc: SourceLoc) -> Var:
        """Assign ``value`` to a new IR variable named after ``name``."""
        if isinstance(value.type, TensorType) and self.mode == "kernel":
            raise DSLError(
                f"{name!r} names a tensor parameter and is reassigned in a loop; kernels have no "
                "tensor variables",
                loc,
                "use the tensor parameters themselves in ts.load / ts.store",
            )
        cpp = self._fresh(name)
        self.emit(Assign(cpp, value, loc))
        if isinstance(value.type, TensorType):
            self.handles.add(cpp)  # a copy of a handle, or a tensor a loop/branch reassigns
        return Var(cpp, value.type, loc)

    def assign_many(self, names: list[str], values: list[Any], node: ast.AST) -> None:
        """``a, b = x, y``: every value is taken before any name is assigned. A value that reads
        a variable an earlier name overwrites is copied into a temporary first (and so is every
        task submitted before it, to keep the submission order)."""
        loc = self.loc(node)
        overwritten: list[set[str]] = []  # IR variables assigned in place by names[:j]
        seen: set[str] = set()
        for n in names:
            overwritten.append(set(seen))
            scope = self._binding_scope(n)
            if scope is not None and isinstance(scope[n], Var) and self._owns(n, scope, scope[n]):
                seen.add(scope[n].name)
        copy = [
            is_expr(v) and not isinstance(v, Slice) and bool(uses(v) & before)
            for v, before in zip(values, overwritten)
        ]
        last = max((j for j, c in enumerate(copy) if c), default=-1)
        for j in range(last):
            copy[j] = copy[j] or isinstance(values[j], Submit)
        taken = [self.new_var(n, v, loc) if c else v for n, v, c in zip(names, values, copy)]
        for n, v in zip(names, taken):
            self.assign(n, v, node)

    def materialize(self, body: list[ast.stmt], node: ast.AST, skip: str | None = None) -> None:
        """Before a real loop/branch: give every name it reassigns a variable it owns. A
        compile-time number becomes an IR variable (so loop-carried values are real); a loop
        variable, a helper's parameter or a tensor alias is copied into a new variable."""
        loc = self.loc(node)
        for name in sorted(_assigned_names(body) - {skip}):
            scope = self._binding_scope(name)
            if scope is None or (
                self.inline_depth == 0 and name in self.params and scope is self.frame.scopes[0]
            ):
                continue  # new here, or a parameter (assigning it is an error)
            v = scope[name]
            if is_number(v):
                expr = self.as_expr(v, node)
                if isinstance(expr.type, ScalarType):  # a float becomes an f32 variable: it must fit
                    what = f"{name!r}, carried by this loop or branch as a {expr.type}"
                    rules.check_literal(v, expr.type.dtype, what, loc)
                cpp = self._fresh(name)
                self.emit(Assign(cpp, expr, loc))
                scope[name] = Var(cpp, expr.type, loc)
            elif isinstance(v, Var) and not self._owns(name, scope, v):
                scope[name] = self.new_var(name, v, loc)
            else:
                continue
            if scope is self.frame.scopes[0]:
                self.frame.borrowed.discard(name)


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names
