"""AST front-end: the source of a ``@ts.kernel`` / ``@ts.jit`` function -> IR.

Invariants:
- The front-end reads source, never executes the function. Names resolve first to DSL
  variables, then to the function's closure, globals and builtins (compile-time values).
- Python values (ints, floats, tuples, dtypes, kernels) are folded at compile time; only
  tile, scalar, index and tensor values become IR. ``if`` on a compile-time value picks a
  branch; ``for v in ts.range(...)`` is always a real loop.
- A variable assigned inside a real loop (or run-time ``if``) that held a compile-time value
  before it is materialised as an IR variable first, so loop-carried values are real.
- IR variables are only assigned in place when the name owns them: a loop variable, an inline
  helper's parameter (the caller's variable) and a tensor alias are never overwritten;
  rebinding one makes a new IR variable, and one reassigned inside a real loop or branch is
  first copied into a variable of its own (``materialize``). Tensor variables copied that way
  are run-time handles (``handles``); other tensor names are compile-time aliases.
- Loop variables get an IR name of their own when the name is already visible, so a nested
  loop or a helper's loop never captures an enclosing loop's variable.
- Every error is a DSLError at the user's file:line that says what to write instead; errors
  raised by compile-time Python (``a.shape[2]``, ``math.sqrt(-1.0)``) are reported the same way.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilescope._tracebacks import api_boundary
from tilescope.errors import DSLError, SourceLoc, UnsupportedSyntaxError, VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir import type_rules as rules
from tilescope.ir.affine import affine
from tilescope.ir.analysis import uses
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Const,
    Evaluate,
    For,
    If,
    Kernel,
    MatMul,
    Param,
    Program,
    Slice,
    SliceRange,
    Stmt,
    Submit,
    UnOp,
    Var,
)
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
    INDEX,
    IndexType,
    ScalarType,
    TensorType,
)
from tilescope.language import ops
from tilescope.language.annotations import ParamSpec
from tilescope.language.decorators import InlineFunction, KernelFunction, Orchestration
from tilescope.language.op_lowering import OpLowering, is_number

# operator -> (IR op, fold); an IR op of None: folded on compile-time values only
_AST_BINOPS = {
    ast.Add: ("add", operator.add),
    ast.Sub: ("sub", operator.sub),
    ast.Mult: ("mul", operator.mul),
    ast.Div: ("div", operator.truediv),
    ast.FloorDiv: ("floordiv", operator.floordiv),
    ast.Mod: ("mod", operator.mod),
    ast.Pow: (None, operator.pow),
    ast.LShift: (None, operator.lshift),
    ast.RShift: (None, operator.rshift),
    ast.BitAnd: (None, operator.and_),
    ast.BitOr: (None, operator.or_),
    ast.BitXor: (None, operator.xor),
}
_AST_CMPOPS = {
    ast.Eq: ("eq", operator.eq),
    ast.NotEq: ("ne", operator.ne),
    ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le),
    ast.Gt: ("gt", operator.gt),
    ast.GtE: ("ge", operator.ge),
    ast.Is: (None, operator.is_),
    ast.IsNot: (None, operator.is_not),
    ast.In: (None, lambda a, b: a in b),
    ast.NotIn: (None, lambda a, b: a not in b),
}
_AST_UNARYOPS = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_OP_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.MatMult: "@",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Not: "not",
    ast.Invert: "~",
}
# what to write instead of an operator that only folds compile-time values, on run-time ones
_RUNTIME_OP_HINTS = {
    "**": "write x * x (or use ts.exp / ts.sqrt)",
    "<<": "multiply by a power of two instead (i * 4)",
    ">>": "floor-divide by a power of two instead (i // 4)",
    "&": "use ts.logical_and on bool tiles",
    "|": "use ts.logical_or on bool tiles",
    "^": "use ts.logical_and / ts.logical_or / ts.logical_not on bool tiles",
    "~": "use ts.logical_not on bool tiles",
    "not": "use ts.logical_not on bool tiles",
    "is": "compare values with == or !=",
    "is not": "compare values with == or !=",
    "in": "compare values with == or !=",
    "not in": "compare values with == or !=",
}
RUNTIME_OPERATORS = "+ - * / // % (and @ on tiles), unary -, and == != < <= > >="
# the largest integer (in bits) compile-time ** and << may produce: a typo such as 10 ** 10 ** 10
# would otherwise hang the compile
_MAX_FOLD_BITS = 4096
INDEX_MIN, INDEX_MAX = -(2**63), 2**63 - 1
_SAFE_BUILTINS = {
    builtins.min,
    builtins.max,
    builtins.abs,
    builtins.int,
    builtins.float,
    builtins.len,
    builtins.bool,
}


# ---------------------------------------------------------------------------------------------
# Reading a function's source


@dataclass(frozen=True)
class FunctionSource:
    tree: ast.FunctionDef
    file: str
    namespace: dict[str, Any]
    annotations: dict[str, Any]


def function_source(fn: Callable) -> FunctionSource:
    """Parse ``fn``'s source; line numbers are those of its file."""
    try:
        lines, start = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError):
        raise DSLError(
            f"cannot read the source of {fn.__qualname__}",
            None,
            "tilescope compiles DSL functions from their source: define them in a .py file",
        ) from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, start - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise DSLError(f"{fn.__qualname__} is not a plain function definition", SourceLoc(file, start))
    ns: dict[str, Any] = dict(vars(builtins))
    ns.update(fn.__globals__)
    if fn.__closure__:
        ns.update(inspect.getclosurevars(fn).nonlocals)
    return FunctionSource(fdef, file, ns, dict(getattr(fn, "__annotations__", {})))


# ---------------------------------------------------------------------------------------------
# Lowering


@dataclass
class _Frame:
    """One function being lowered: the top-level DSL function or an inlined helper."""

    name: str
    file: str
    namespace: dict[str, Any]
    scopes: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    returned: Any = None
    # Parameters of an inlined helper still bound to the caller's values: assigning one binds
    # a new variable of the helper instead of overwriting the caller's.
    borrowed: set[str] = field(default_factory=set)


class _Lowering(OpLowering):
    def __init__(self, mode: str, src: FunctionSource, kernel_ir: Callable | None = None):
        self.mode = mode  # "kernel" | "orch"
        self.tree = src.tree
        self.annotations = src.annotations
        self.frames = [_Frame(src.tree.name, src.file, src.namespace)]
        self.blocks: list[list[Stmt]] = [[]]
        self.params: dict[str, Param] = {}
        self.kernels: dict[str, Kernel] = {}
        self.kernel_ir = kernel_ir
        self.inline_depth = 0
        self.loop_vars: set[str] = set()  # IR names of the loop variables of enclosing loops
        self.handles: set[str] = set()  # IR names of run-time tensor handles (orchestrations)

    # -- helpers -------------------------------------------------------------------------------

    @property
    def frame(self) -> _Frame:
        return self.frames[-1]

    def loc(self, node: ast.AST) -> SourceLoc:
        return SourceLoc(self.frame.file, getattr(node, "lineno", 0), getattr(node, "col_offset", 0))

    def error(self, node: ast.AST, msg: str, hint: str | None = None) -> DSLError:
        return UnsupportedSyntaxError(msg, self.loc(node), hint)

    def emit(self, stmt: Stmt) -> None:
        self.blocks[-1].append(stmt)

    def what(self) -> str:
        return "a @ts.kernel" if self.mode == "kernel" else "a @ts.jit orchestration"

    # -- names ---------------------------------------------------------------------------------

    def lookup(self, name: str, node: ast.AST) -> Any:
        for scope in reversed(self.frame.scopes):
            if name in scope:
                return scope[name]
        if name in self.frame.namespace:
            return self.frame.namespace[name]
        raise DSLError(f"name {name!r} is not defined here", self.loc(node), self._undefined_hint(name))

    def _undefined_hint(self, name: str) -> str:
        return (
            "a variable first assigned inside a loop or branch exists only there; "
            "assign it before the loop to use it after"
        )

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
                cpp = self._fresh(name)
                self.emit(Assign(cpp, expr, loc))
                scope[name] = Var(cpp, expr.type, loc)
            elif isinstance(v, Var) and not self._owns(name, scope, v):
                scope[name] = self.new_var(name, v, loc)
            else:
                continue
            if scope is self.frame.scopes[0]:
                self.frame.borrowed.discard(name)

    def fold(self, node: ast.AST, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` on compile-time values; a Python error is a DSLError at ``node``."""
        try:
            return fn(*args)
        except DSLError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of compile-time Python is the user's
            raise self.fold_error(node, e) from None

    def fold_error(self, node: ast.AST, e: Exception) -> DSLError:
        if isinstance(e, ZeroDivisionError):
            return VerifyError(
                f"division by zero in the compile-time expression {ast.unparse(node)}", self.loc(node)
            )
        return DSLError(
            f"cannot evaluate {ast.unparse(node)} at compile time: {type(e).__name__}: {e}",
            self.loc(node),
            "this expression runs in Python while the program is compiled",
        )

    # -- conversions ---------------------------------------------------------------------------

    def as_expr(self, v: Any, node: ast.AST, like: Any = None, what: str | None = None) -> Any:
        """A Python number as an IR constant (typed like ``like`` when given; ``what`` names
        the value in errors)."""
        if is_expr(v):
            return v
        loc = self.loc(node)
        if isinstance(v, bool):
            return Const(v, ScalarType(dt.bool_), loc)
        if isinstance(like, ScalarType):
            if like.dtype.is_int and not float(v).is_integer():
                raise VerifyError(f"{v!r} is not an integer for a {like}", loc)
            value = int(v) if not like.dtype.is_float else float(v)
            rules.check_literal(value, like.dtype, what or f"a {like} value", loc)
            return Const(value, like, loc)
        if isinstance(v, int):
            return Const(self.check_index(v, node), INDEX, loc)
        if isinstance(v, float):
            return Const(v, ScalarType(dt.f32), loc)
        raise DSLError(f"{v!r} ({type(v).__name__}) cannot be used as a value here", loc)

    def index(self, v: Any, node: ast.AST, what: str) -> Any:
        if isinstance(v, bool) or not (isinstance(v, int) or is_expr(v)):
            raise VerifyError(f"{what} must be an integer index, got {v!r}", self.loc(node))
        if isinstance(v, int):
            return Const(self.check_index(v, node, what), INDEX, self.loc(node))
        t = v.type
        if isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int):
            return v
        raise VerifyError(f"{what} must be an integer index, got a {t}", self.loc(node))

    def check_index(self, v: int, node: ast.AST, what: str = "an integer") -> int:
        """A compile-time int that becomes an index: it must fit 64 bits."""
        if not INDEX_MIN <= v <= INDEX_MAX:
            raise VerifyError(
                f"{what} {v} does not fit a 64-bit index [{INDEX_MIN}, {INDEX_MAX}]", self.loc(node)
            )
        return v

    def static_ints(self, v: Any, node: ast.AST, what: str) -> tuple[int, ...]:
        if not isinstance(v, list | tuple) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v
        ):
            raise VerifyError(f"{what} must be a list of compile-time ints, got {v!r}", self.loc(node))
        return tuple(v)

    def dtype_arg(self, v: Any, node: ast.AST, what: str) -> dt.DType:
        if not isinstance(v, dt.DType):
            raise VerifyError(f"{what} must be a dtype such as ts.f32, got {v!r}", self.loc(node))
        return v

    # -- statements ----------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt]) -> None:
        for i, s in enumerate(stmts):
            if self.frame.returned is not None:
                raise self.error(s, "code after 'return' in an @ts.inline helper")
            self.stmt(s, last=i == len(stmts) - 1)

    def stmt(self, node: ast.stmt, last: bool = False) -> None:
        match node:
            case ast.Assign(targets=[ast.Name(id=name)], value=value):
                self.assign(name, self.expr(value), node)
            case ast.Assign(targets=[ast.Tuple(elts=elts)], value=value) if all(
                isinstance(e, ast.Name) for e in elts
            ):
                v = self.expr(value)
                if not isinstance(v, tuple | list) or len(v) != len(elts):
                    raise self.error(node, f"cannot unpack {v!r} into {len(elts)} names")
                self.assign_many([e.id for e in elts], list(v), node)
            case ast.Assign():
                raise self.error(
                    node, "only 'name = value' assignments are supported", "assign one name at a time"
                )
            case ast.AugAssign(target=ast.Name(id=name), op=op, value=value):
                cur = self.lookup(name, node)
                self.assign(name, self.binop(op, cur, self.expr(value), node), node)
            case ast.AnnAssign():
                raise self.error(
                    node, "annotated assignments are not supported", "write 'x = value'; types are inferred"
                )
            case ast.Expr(value=ast.Constant(value=str())):
                pass  # docstring
            case ast.Expr(value=ast.Call() as call):
                v = self.expr(call)
                if isinstance(v, Submit):
                    self.emit(Evaluate(v, self.loc(node)))
                elif v is not None and not (isinstance(v, Var) and isinstance(v.type, TensorType)):
                    raise self.error(node, "the value of this expression is unused", "assign it to a name")
            case ast.Expr():
                raise self.error(node, "the value of this expression is unused", "assign it to a name")
            case ast.For():
                self.for_loop(node)
            case ast.If():
                self.if_stmt(node)
            case ast.Pass():
                pass
            case ast.Return(value=value) if self.inline_depth > 0 and len(self.frame.scopes) == 1 and last:
                if value is None:
                    raise self.error(node, "an @ts.inline helper must return a value")
                self.frame.returned = self.expr(value)
            case ast.Return():
                hint = (
                    "kernels write results with ts.store(out, offsets, tile)"
                    if self.mode == "kernel" and self.inline_depth == 0
                    else "return once, as the last statement of the helper"
                    if self.inline_depth > 0
                    else "orchestrations write results through the Out tensors they pass to tasks"
                )
                raise self.error(node, f"'return' is not supported here in {self.what()}", hint)
            case ast.While():
                raise self.error(
                    node, "'while' loops are not supported", "use 'for i in ts.range(start, stop, step)'"
                )
            case (
                ast.With()
                | ast.Try()
                | ast.Raise()
                | ast.Assert()
                | ast.Delete()
                | ast.Global()
                | ast.Nonlocal()
            ):
                raise self.error(
                    node, f"'{type(node).__name__.lower()}' statements are not supported in {self.what()}"
                )
            case ast.FunctionDef() | ast.Lambda() | ast.ClassDef():
                raise self.error(
                    node,
                    "nested definitions are not supported",
                    "define helpers at module level with @ts.inline",
                )
            case _:
                raise self.error(node, f"{type(node).__name__} statements are not supported in {self.what()}")

    def for_loop(self, node: ast.For) -> None:
        it = node.iter
        func = self.expr(it.func) if isinstance(it, ast.Call) else None
        if func is not ops.range:
            hint = (
                "write 'for i in ts.range(start, stop, step)': it becomes a real loop in the generated code"
            )
            raise self.error(node, "only 'for v in ts.range(...)' loops are supported", hint)
        if node.orelse:
            raise self.error(node, "'for ... else' is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "the loop variable must be a single name")
        if it.keywords:
            raise self.error(it, "ts.range takes positional arguments: ts.range([start,] stop[, step])")
        args = [self.expr(a) for a in it.args]
        if not 1 <= len(args) <= 3:
            raise self.error(it, "ts.range takes 1 to 3 arguments: ts.range([start,] stop[, step])")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3] if len(args) == 2 else args
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            raise VerifyError(
                f"ts.range step must be a positive compile-time int, got {step!r}",
                self.loc(it),
                "loops count upwards; compute a descending index from the loop variable",
            )
        start_e = self.index(start, it, "ts.range start")
        stop_e = self.index(stop, it, "ts.range stop")
        name = node.target.id
        self.materialize(node.body, node, skip=name)
        # NOTE: a loop variable whose name is already visible (an enclosing loop's, or the
        # caller's seen from a helper) gets a new IR name, so the IR never shadows a variable.
        var = self._fresh(name)
        self.blocks.append([])
        self.frame.scopes.append({name: Var(var, INDEX, self.loc(node))})
        self.loop_vars.add(var)
        try:
            self.body(node.body)
        finally:
            self.loop_vars.discard(var)
            self.frame.scopes.pop()
        body = tuple(self.blocks.pop())
        self.emit(For(var, start_e, stop_e, Const(step, INDEX), body, self.loc(node)))

    def if_stmt(self, node: ast.If) -> None:
        cond = self.expr(node.test)
        if not is_expr(cond):
            self.body(node.body if self.fold(node.test, bool, cond) else node.orelse)
            return
        if self.mode == "kernel" or not (isinstance(cond.type, ScalarType) and cond.type.dtype == dt.bool_):
            raise self.error(
                node,
                f"'if' on a run-time value ({cond.type}) is not supported in {self.what()}",
                "use ts.where(cond, a, b) to select tile elements"
                if self.mode == "kernel"
                else "branch on index comparisons (e.g. 'if r == 0:')",
            )
        self.materialize(node.body + node.orelse, node)
        branches = []
        for stmts in (node.body, node.orelse):
            self.blocks.append([])
            self.frame.scopes.append({})
            self.body(stmts)
            self.frame.scopes.pop()
            branches.append(tuple(self.blocks.pop()))
        self.emit(If(cond, branches[0], branches[1], self.loc(node)))

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Any:
        match node:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                return self.lookup(name, node)
            case ast.Attribute(value=base, attr=attr):
                return self.attribute(self.expr(base), attr, node)
            case ast.BinOp(left=l, op=ast.MatMult(), right=r):
                return self.matmul(self.expr(l), self.expr(r), None, node)
            case ast.BinOp(left=l, op=op, right=r):
                return self.binop(op, self.expr(l), self.expr(r), node)
            case ast.UnaryOp(op=op, operand=a):
                return self.unary(op, self.expr(a), node)
            case ast.Compare(left=l, ops=[op], comparators=[r]):
                return self.compare(op, self.expr(l), self.expr(r), node)
            case ast.Compare(left=l, ops=cmpops, comparators=rs):
                return self.chained_compare(l, cmpops, rs, node)
            case ast.BoolOp(op=op, values=values):
                return self.bool_op(op, values, node)
            case ast.IfExp(test=t, body=b, orelse=o):
                cond = self.expr(t)
                if is_expr(cond):
                    raise self.error(
                        node, "'x if c else y' needs a compile-time condition", "use ts.where(c, x, y)"
                    )
                return self.expr(b if self.fold(t, bool, cond) else o)
            case ast.Call():
                return self.call(node)
            case ast.Subscript(value=base, slice=sl):
                return self.subscript(self.expr(base), sl, node)
            case ast.List(elts=elts) | ast.Tuple(elts=elts):
                return [self.expr(e) for e in elts]
            case ast.Starred():
                raise self.error(node, "'*' unpacking is not supported here")
            case ast.Lambda():
                raise self.error(node, "lambdas are not supported", "define a helper with @ts.inline")
            case ast.ListComp() | ast.GeneratorExp() | ast.DictComp() | ast.SetComp():
                raise self.error(node, "comprehensions are not supported", "use a for loop over ts.range")
            case _:
                raise self.error(
                    node, f"{type(node).__name__} expressions are not supported in {self.what()}"
                )

    def attribute(self, base: Any, attr: str, node: ast.AST) -> Any:
        if is_expr(base):
            t = base.type
            if attr == "shape" and hasattr(t, "shape"):
                if -1 in t.shape:
                    raise VerifyError(f"the shape of {t} is only known at run time", self.loc(node))
                return tuple(t.shape)
            if attr == "dtype" and hasattr(t, "dtype"):
                return t.dtype
            if attr == "ndim" and hasattr(t, "shape"):
                return len(t.shape)
            raise self.error(
                node, f"a {t} has no attribute {attr!r} in the DSL", "available: shape, dtype, ndim"
            )
        try:
            return getattr(base, attr)
        except AttributeError:
            raise self.no_attribute(base, attr, node) from None
        except Exception as e:  # noqa: BLE001 - a property of a compile-time object failed
            raise self.fold_error(node, e) from None

    def no_attribute(self, base: Any, attr: str, node: ast.Attribute) -> DSLError:
        """``ts.gelu``: which ops exist, with close matches; ``math.sqroot``: close matches."""
        prefix = f"{ast.unparse(node.value)}."
        if isinstance(base, types.ModuleType) and base.__name__ == "tilescope":  # the package, as `ts`
            dsl_names = [
                *ops.op_names(),
                *(n for n in base.__all__ if isinstance(getattr(base, n, None), dt.DType)),
            ]
            message, listing = ops.unknown_op_message(prefix, attr, dsl_names, self.mode)
            return DSLError(message, self.loc(node), f"{listing} (see docs/dsl.md)")
        matches = ops.close_matches(attr, [n for n in dir(base) if not n.startswith("_")])
        hint = f"did you mean {' or '.join(prefix + m for m in matches)}?" if matches else None
        what = f"module {base.__name__!r}" if isinstance(base, types.ModuleType) else repr(base)
        return DSLError(f"{what} has no attribute {attr!r}", self.loc(node), hint)

    def binop(self, op: ast.operator | str, lhs: Any, rhs: Any, node: ast.AST) -> Any:
        if isinstance(op, str):
            name, fold = op, None
        else:
            if type(op) not in _AST_BINOPS:
                raise self.error(node, f"operator {type(op).__name__} is not supported in {self.what()}")
            name, fold = _AST_BINOPS[type(op)]
        if not is_expr(lhs) and not is_expr(rhs):
            if fold is None:
                raise self.error(node, f"cannot apply {name} to {lhs!r} and {rhs!r}")
            self.check_fold_size(op, lhs, rhs, node)
            return self.fold(node, fold, lhs, rhs)
        if name is None:
            raise self.runtime_operator_error(op, lhs if is_expr(lhs) else rhs, node)
        loc = self.loc(node)
        lhs, rhs = self.operands(lhs, rhs, node)
        return BinOp(name, lhs, rhs, rules.binop_type(name, lhs, rhs, loc), loc)

    def operands(self, lhs: Any, rhs: Any, node: ast.AST) -> tuple[Any, Any]:
        for v in (lhs, rhs):
            if not is_expr(v) and not is_number(v):
                raise self.error(node, f"{v!r} cannot be used as an operand")
        return self.as_expr(lhs, node), self.as_expr(rhs, node)

    def runtime_operator_error(self, op: ast.AST, operand: Any, node: ast.AST) -> DSLError:
        """An operator that only folds compile-time values, applied to a run-time one."""
        sym = _OP_SYMBOLS.get(type(op), type(op).__name__)
        hint = _RUNTIME_OP_HINTS.get(sym)
        return self.error(
            node,
            f"operator {sym} ({type(op).__name__}) is not supported on {_a(operand.type)} in {self.what()}: "
            "it is only folded when every operand is a compile-time constant",
            (f"{hint}; " if hint else "") + f"run-time values support {RUNTIME_OPERATORS}",
        )

    def check_fold_size(self, op: ast.AST, lhs: Any, rhs: Any, node: ast.AST) -> None:
        """Refuse a compile-time ``**`` or ``<<`` whose integer result would be enormous."""
        if not (isinstance(lhs, int) and isinstance(rhs, int)) or lhs in (0, 1, -1) or rhs <= 0:
            return
        if isinstance(op, ast.Pow):
            bits = int(rhs * math.log2(abs(lhs))) + 1
        elif isinstance(op, ast.LShift):
            bits = abs(lhs).bit_length() + rhs
        else:
            return
        if bits > _MAX_FOLD_BITS:
            raise VerifyError(
                f"the compile-time value {ast.unparse(node)} has about {bits} bits, more than the "
                f"{_MAX_FOLD_BITS} bits tilescope folds",
                self.loc(node),
                "indices and literals must fit 64 bits",
            )

    def chained_compare(self, left: ast.expr, cmpops: list[ast.cmpop], rights: list[ast.expr], node) -> Any:
        """``a < b < c`` on compile-time values, with Python's short-circuit."""
        lhs = self.expr(left)
        result: Any = True
        for op, r in zip(cmpops, rights):
            rhs = self.expr(r)
            if is_expr(lhs) or is_expr(rhs):
                raise self.error(
                    node,
                    "chained comparisons work on compile-time values only",
                    "compare two run-time values at a time (a < b), and combine bool tiles with "
                    "ts.logical_and",
                )
            result = self.compare(op, lhs, rhs, node)
            if not self.fold(node, bool, result):
                return result
            lhs = rhs
        return result

    def bool_op(self, op: ast.boolop, values: list[ast.expr], node: ast.AST) -> Any:
        """``a and b`` / ``a or b`` on compile-time values: Python's value and short-circuit."""
        v: Any = None
        for e in values:
            v = self.expr(e)
            if is_expr(v):
                raise self.error(
                    node,
                    f"'and'/'or' need compile-time values, got a {v.type}",
                    "use ts.logical_and / ts.logical_or on bool tiles",
                )
            if self.fold(e, bool, v) == isinstance(op, ast.Or):
                return v
        return v

    def compare(self, op: ast.cmpop, lhs: Any, rhs: Any, node: ast.AST) -> Any:
        if type(op) not in _AST_CMPOPS:
            raise self.error(node, f"comparison {type(op).__name__} is not supported", "use == != < <= > >=")
        name, fold = _AST_CMPOPS[type(op)]
        if not is_expr(lhs) and not is_expr(rhs):
            return self.fold(node, fold, lhs, rhs)
        if name is None:
            raise self.runtime_operator_error(op, lhs if is_expr(lhs) else rhs, node)
        loc = self.loc(node)
        lhs, rhs = self.operands(lhs, rhs, node)
        return BinOp(name, lhs, rhs, rules.binop_type(name, lhs, rhs, loc), loc)

    def unary(self, op: ast.unaryop, v: Any, node: ast.AST) -> Any:
        if not is_expr(v):
            if type(op) not in _AST_UNARYOPS:
                raise self.error(node, f"operator {type(op).__name__} is not supported")
            return self.fold(node, _AST_UNARYOPS[type(op)], v)
        match op:
            case ast.USub():
                return self.unop("neg", v, node)
            case ast.UAdd():
                return v
        raise self.runtime_operator_error(op, v, node)

    def unop(self, name: str, v: Any, node: ast.AST) -> UnOp:
        loc = self.loc(node)
        if not is_expr(v):
            raise VerifyError(f"ts.{name} needs a tile operand, got {v!r}", loc)
        return UnOp(name, v, rules.unop_type(name, v, loc), loc)

    def matmul(self, a: Any, b: Any, acc: Any, node: ast.AST) -> MatMul:
        loc = self.loc(node)
        for v in (a, b):
            if not is_expr(v):
                raise VerifyError(f"ts.matmul needs tiles, got {v!r}", loc)
        return MatMul(a, b, acc, rules.matmul_type(a, b, acc, loc), loc)

    def subscript(self, base: Any, sl: ast.expr, node: ast.AST) -> Any:
        if isinstance(base, list | tuple):
            i = self.expr(sl)
            if not isinstance(i, int):
                raise self.error(node, "compile-time lists are indexed with compile-time ints")
            return self.fold(node, operator.getitem, base, i)
        if isinstance(base, Var) and isinstance(base.type, TensorType):
            if self.mode != "orch":
                raise self.error(
                    node,
                    "tensors are not sliced inside kernels",
                    "read a tile with ts.load(tensor, offsets, sizes)",
                )
            return self.slice(base, sl, node)
        if isinstance(base, Slice):
            raise self.error(node, "a region cannot be sliced again", "slice the tensor once: x[a:b, c:d]")
        if is_expr(base):
            raise self.error(node, f"a {base.type} cannot be indexed", "tiles are read and written whole")
        raise self.error(node, f"{base!r} cannot be indexed in {self.what()}")

    def slice(self, base: Var, sl: ast.expr, node: ast.AST) -> Slice:
        loc = self.loc(node)
        t: TensorType = base.type
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if len(elts) > len(t.shape):
            raise VerifyError(f"{len(elts)} indices for a {len(t.shape)}-D tensor {base.name}: {t}", loc)
        ranges, shape = [], []
        for dim, size in enumerate(t.shape):
            e = elts[dim] if dim < len(elts) else ast.Slice()
            if isinstance(e, ast.Slice):
                if e.step is not None and self.expr(e.step) != 1:
                    raise self.error(e, "slices with a step are not supported", "use step 1 (x[a:b])")
                start = self.expr(e.lower) if e.lower is not None else 0
                stop = self.expr(e.upper) if e.upper is not None else size
                squeeze = False
            else:
                start = self.expr(e)
                stop = start + 1 if isinstance(start, int) else None
                squeeze = True
            if isinstance(start, int) and start < 0:
                start += size
            if isinstance(stop, int) and stop < 0:
                stop += size
            start_e = self.index(start, node, f"slice start of dim {dim}")
            if stop is None:
                stop_e = BinOp("add", start_e, Const(1, INDEX), INDEX, loc)
            else:
                stop_e = self.index(stop, node, f"slice stop of dim {dim}")
            if isinstance(start, int) and isinstance(stop, int) and not (0 <= start < stop <= size):
                raise VerifyError(
                    f"slice of {base.name} dim {dim}: [{start}, {stop}) is outside the tensor's shape {list(t.shape)}",
                    loc,
                )
            ranges.append(SliceRange(start_e, stop_e, squeeze))
            if not squeeze:
                fa, fb = affine(start_e), affine(stop_e)
                ext = (fb - fa) if fa is not None and fb is not None else None
                shape.append(ext.const if ext is not None and ext.is_const else -1)
        if not shape:
            raise VerifyError(f"indexing every dim of {base.name} leaves no region", loc, "use a slice a:a+1")
        return Slice(base, tuple(ranges), TensorType(tuple(shape), t.dtype), loc)

    # -- calls ---------------------------------------------------------------------------------

    def call(self, node: ast.Call) -> Any:
        func = self.expr(node.func)
        if isinstance(func, ops.DSLOp):
            if func is ops.range:
                raise self.error(node, "ts.range is only used as 'for v in ts.range(...)'")
            if func.kind != "both" and func.kind != self.mode:
                where = "@ts.kernel" if func.kind == "kernel" else "@ts.jit orchestration"
                raise self.error(node, f"ts.{func.name} can only be used in a {where}, not in {self.what()}")
            return getattr(self, f"op_{func.name}")(node)
        if isinstance(func, KernelFunction):
            if self.mode != "orch":
                raise self.error(
                    node, "kernels cannot call kernels", "factor shared code into an @ts.inline helper"
                )
            return self.submit_call(func, node.args, node.keywords, node)
        if isinstance(func, InlineFunction):
            return self.inline(func, node)
        if isinstance(func, Orchestration):
            raise self.error(
                node, "a @ts.jit function cannot be called from DSL code", "call its kernels directly"
            )
        if func in _SAFE_BUILTINS:
            args = [self.expr(a) for a in node.args]
            if any(is_expr(a) for a in args) or node.keywords:
                raise self.error(
                    node,
                    f"{func.__name__}() works on compile-time values only",
                    "use ts.maximum / ts.minimum on tiles",
                )
            return self.fold(node, func, *args)
        if func is builtins.range:
            raise self.error(node, "Python's range() is not supported", "use ts.range(...): a real loop")
        if isinstance(func, type(math.sqrt)) and getattr(func, "__module__", None) == "math":
            args = [self.expr(a) for a in node.args]
            if any(is_expr(a) for a in args):
                raise self.error(
                    node, f"math.{func.__name__} works on compile-time values only", "use the ts.* op"
                )
            return self.fold(node, func, *args)
        name = ast.unparse(node.func)
        raise self.error(
            node,
            f"calls to {name} are not supported in {self.what()}",
            "use ts.* operations, kernels, or helpers decorated with @ts.inline",
        )

    def bind(
        self, node: ast.Call, names: list[str], defaults: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Bind a DSL op call's arguments by name (positional or keyword)."""
        defaults = defaults or {}
        op = ast.unparse(node.func)
        if len(node.args) > len(names):
            raise self.error(node, f"{op} takes at most {len(names)} arguments ({', '.join(names)})")
        out = {n: self.expr(a) for n, a in zip(names, node.args)}
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in names:
                raise self.error(node, f"{op} has no argument {kw.arg!r}; arguments: {', '.join(names)}")
            if kw.arg in out:
                raise self.error(node, f"{op} got argument {kw.arg!r} twice")
            out[kw.arg] = self.expr(kw.value)
        for n in names:
            if n not in out:
                if n not in defaults:
                    raise self.error(node, f"{op} is missing argument {n!r}")
                out[n] = defaults[n]
        return out

    # -- inline helpers ------------------------------------------------------------------------

    def inline(self, ifn, node: ast.Call) -> Any:
        src = function_source(ifn.fn)
        fargs = src.tree.args
        if fargs.vararg or fargs.kwarg or fargs.kwonlyargs or fargs.posonlyargs:
            raise DSLError(
                f"@ts.inline helper {ifn.__name__} must take plain positional parameters", self.loc(node)
            )
        names = [a.arg for a in fargs.args]
        values: dict[str, Any] = {}
        for n, a in zip(names, node.args):
            values[n] = self.expr(a)
        for kw in node.keywords:
            if kw.arg not in names or kw.arg in values:
                raise self.error(node, f"{ifn.__name__}() got an unexpected or repeated argument {kw.arg!r}")
            values[kw.arg] = self.expr(kw.value)
        defaults = dict(zip(names[len(names) - len(fargs.defaults) :], fargs.defaults))
        for n in names:
            if n not in values:
                if n not in defaults:
                    raise self.error(node, f"{ifn.__name__}() is missing argument {n!r}")
                values[n] = self.expr(defaults[n])
        if len(self.frames) > 32:
            raise self.error(node, f"@ts.inline helpers nest too deeply (recursion in {ifn.__name__}?)")
        self.frames.append(_Frame(src.tree.name, src.file, src.namespace, [values], borrowed=set(values)))
        self.inline_depth += 1
        try:
            self.body(src.tree.body)
            return self.frame.returned
        finally:
            self.inline_depth -= 1
            self.frames.pop()

    # -- entry ---------------------------------------------------------------------------------

    def signature(self, tree: ast.FunctionDef) -> tuple[Param, ...]:
        fargs = tree.args
        if fargs.vararg or fargs.kwarg or fargs.kwonlyargs or fargs.posonlyargs or fargs.defaults:
            raise self.error(
                tree, "DSL functions take plain annotated parameters (no defaults, *args or **kwargs)"
            )
        params = []
        for a in fargs.args:
            if a.annotation is None:
                raise DSLError(
                    f"parameter {a.arg!r} needs an annotation",
                    self.loc(a),
                    "e.g. ts.Tensor[[64, 128], ts.f32], ts.Out[...], ts.InOut[...] or ts.Scalar[ts.f32]",
                )
            # Annotations evaluated at definition time see the enclosing function's locals; string
            # annotations (``from __future__ import annotations``) are evaluated here.
            spec = self.annotations.get(a.arg)
            if not isinstance(spec, ParamSpec):
                try:
                    code = compile(ast.Expression(a.annotation), self.frame.file, "eval")
                    spec = eval(code, self.frame.namespace)
                except Exception as e:  # noqa: BLE001 - any failure is the user's annotation
                    raise DSLError(
                        f"parameter {a.arg!r}: cannot evaluate its annotation: {e}", self.loc(a)
                    ) from None
            if not isinstance(spec, ParamSpec):
                raise DSLError(
                    f"parameter {a.arg!r}: annotation {ast.unparse(a.annotation)} is not a tilescope parameter type",
                    self.loc(a),
                    "use ts.Tensor[[shape], dtype], ts.Out[...], ts.InOut[...] or ts.Scalar[dtype]",
                )
            ptype = ScalarType(spec.dtype) if spec.shape is None else TensorType(spec.shape, spec.dtype)
            params.append(Param(a.arg, spec.direction, ptype, self.loc(a)))
        return tuple(params)

    def lower_function(self) -> tuple[tuple[Param, ...], tuple[Stmt, ...]]:
        params = self.signature(self.tree)
        self.params = {p.name: p for p in params}
        self.frame.scopes[0].update({p.name: Var(p.name, p.type, p.loc) for p in params})
        self.body(self.tree.body)
        return params, tuple(self.blocks[0])


def _a(thing: Any) -> str:
    """``thing`` with its indefinite article: "a tile[4, 4] f32", "an index"."""
    text = str(thing)
    return f"{'an' if text[:1] in 'aeiou' else 'a'} {text}"


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names


def parse_kernel(fn: Callable) -> Kernel:
    """Lower a ``@ts.kernel`` function's source to a Kernel."""
    src = function_source(fn)
    low = _Lowering("kernel", src)
    params, body = low.lower_function()
    return Kernel(src.tree.name, params, body, SourceLoc(src.file, src.tree.lineno))


@api_boundary
def kernel_ir(k: KernelFunction) -> Kernel:
    """The IR of a ``@ts.kernel`` (parsed on first use, then cached on it)."""
    if k.cached_ir is None:
        k.cached_ir = parse_kernel(k.fn)
    return k.cached_ir


def parse_program(fn: Callable) -> Program:
    """Lower a ``@ts.jit`` function's source and every kernel it calls to a Program."""
    src = function_source(fn)
    low = _Lowering("orch", src, kernel_ir)
    params, body = low.lower_function()
    return Program(
        src.tree.name, params, body, tuple(low.kernels.values()), SourceLoc(src.file, src.tree.lineno)
    )


def program_ir(orch: Orchestration) -> Program:
    """The front-end IR of an orchestration and its kernels (parsed on first use, then cached)."""
    if orch.cached_program is None:
        orch.cached_program = parse_program(orch.fn)
    return orch.cached_program


def load_source(text: str, filename: str) -> Program:
    """The front-end IR of the one ``@ts.jit`` orchestration (and its kernels) that a DSL
    module's source defines, such as a printed IR dump."""
    import linecache

    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": f"tilescope_source_{abs(hash(filename))}", "__file__": filename}
    try:
        code = compile(text, filename, "exec")
    except SyntaxError as e:
        raise DSLError(f"invalid Python: {e.msg}", SourceLoc(filename, e.lineno or 0)) from None
    exec(code, namespace)  # defines decorated functions only; their bodies are never run
    jits = [v for v in namespace.values() if isinstance(v, Orchestration)]
    if len(jits) != 1:
        raise DSLError(f"{filename} must define exactly one @ts.jit function, found {len(jits)}")
    return program_ir(jits[0])
