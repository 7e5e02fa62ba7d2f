"""AST front-end: the source of a ``@ts.kernel`` / ``@ts.jit`` function -> IR.

The lowering class is assembled from five parts: this module (statements, loops, branches,
calls, inlined helpers, the signature and the entry points), ``scopes`` (names and what
assigning one makes), ``expressions`` (operators, compile-time folding, attributes),
``subscripts`` (regions, reads and tile slices) and ``op_lowering`` (the ``ts.*`` ops). ``source`` reads a function's source.

Invariants:
- The front-end reads source, never executes the function (see ``source``).
- ``if`` on a compile-time value picks a branch; ``for v in ts.range(...)`` is always a real
  loop; a run-time ``if`` and a real loop materialise the compile-time values they rebind
  first (``scopes``), so loop-carried values are real.
- A call is a DSL op, a kernel (a task, in an orchestration), an inline helper, or a
  compile-time call of a builtin in ``_SAFE_BUILTINS`` or a ``math`` function; anything else
  is an error that says what to use.
- Every error is a DSLError at the user's file:line that says what to write instead.
"""

from __future__ import annotations

import ast
import builtins
import math
import traceback
import types
from collections.abc import Callable
from typing import Any

from tilescope._tracebacks import api_boundary
from tilescope.errors import DSLError, SourceLoc, TilescopeError, VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir.nodes import (
    Const,
    Evaluate,
    For,
    If,
    Kernel,
    Param,
    Program,
    Stmt,
    Submit,
    Var,
)
from tilescope.ir.printer import described
from tilescope.ir.traverse import MAX_EXPR_DEPTH, is_expr, recursion_room
from tilescope.ir.types import (
    INDEX,
    ScalarType,
    TensorType,
)
from tilescope.language import ops
from tilescope.language.access_lowering import AccessLowering
from tilescope.language.annotations import ParamSpec
from tilescope.language.decorators import InlineFunction, KernelFunction, Orchestration
from tilescope.language.expressions import (
    INDEX_MAX,
    SHADOWED_HINT,
    Expressions,
    is_dsl_name,
    shadowed_message,
)
from tilescope.language.kernel_names import ProgramKernels
from tilescope.language.op_lowering import OpLowering
from tilescope.language.scopes import Frame, Scopes
from tilescope.language.source import FunctionSource, function_source, syntax_name
from tilescope.language.subscripts import Subscripts

_SAFE_BUILTINS = {
    builtins.min,
    builtins.max,
    builtins.abs,
    builtins.int,
    builtins.float,
    builtins.len,
    builtins.bool,
}

_SUPPORTED_HINT = (
    "the Python that DSL code may use is listed in docs/dsl.md ('Python that works, and what does not')"
)

# ---------------------------------------------------------------------------------------------
# Lowering


class _Lowering(Scopes, Expressions, Subscripts, OpLowering, AccessLowering):
    """Lowers one DSL function (and the helpers it inlines): statements, calls and the entry;
    names and scopes come from ``Scopes``, operators and values from ``Expressions``."""

    def __init__(self, mode: str, src: FunctionSource, kernel_ir: Callable | None = None):
        self.mode = mode  # "kernel" | "orch"
        self.tree = src.tree
        self.annotations = src.annotations
        self.frames = [Frame(src.tree.name, src.file, src.namespace)]
        self.blocks: list[list[Stmt]] = [[]]
        self.params: dict[str, Param] = {}
        self.kernels = ProgramKernels()  # the kernels an orchestration submits
        self.kernel_ir = kernel_ir
        self.inline_depth = 0
        self.expr_depth = 0  # expressions being lowered, innermost last (MAX_EXPR_DEPTH at most)
        self.loop_vars: set[str] = set()  # IR names of the loop variables of enclosing loops
        self.handles: set[str] = set()  # IR names of run-time tensor handles (orchestrations)
        self.bare_read: ast.expr | None = None  # see Expressions.tensor_read

    # -- names ---------------------------------------------------------------------------------

    # -- statements ----------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt]) -> None:
        for i, s in enumerate(stmts):
            if self.frame.returned is not None:
                raise self.error(s, "code after 'return' in an @ts.inline helper")
            self.stmt(s, last=i == len(stmts) - 1)

    def stmt(self, node: ast.stmt, last: bool = False) -> None:
        match node:
            case ast.Assign(targets=[ast.Name(id=name)], value=value):
                self.bare_read = value  # a tensor read that is the whole value needs no variable of its own
                self.assign(name, self.expr(value), node)
            case ast.Assign(targets=[ast.Tuple(elts=elts)], value=value) if all(
                isinstance(e, ast.Name) for e in elts
            ):
                v = self.expr(value)
                if not isinstance(v, tuple | list) or len(v) != len(elts):
                    raise self.error(node, f"cannot unpack {described(v)} into {len(elts)} names")
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
                v = self.call(call)  # called for its effect: a call without a value is fine here
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
                raise self.error(
                    node,
                    f"{syntax_name(node)} statements are not supported in {self.what()}",
                    _SUPPORTED_HINT,
                )

    def for_loop(self, node: ast.For) -> None:
        it = node.iter
        func = self.expr(it.func) if isinstance(it, ast.Call) else None
        if func is not ops.RANGE:
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
                f"ts.range step must be a positive compile-time int, got {described(step)}",
                self.loc(it),
                "loops count upwards; compute a descending index from the loop variable",
            )
        step = self.check_index(step, it, "ts.range step")
        start_e = self.index(start, it, "ts.range start")
        stop_e = self.index(stop, it, "ts.range stop")
        self.check_loop_end(start, stop, step, it)
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

    def check_loop_end(self, start: Any, stop: Any, step: int, node: ast.AST) -> None:
        """Refuse a loop whose variable would step past the largest 64-bit index after its last
        iteration (the generated ``i += step`` would overflow and the loop never end)."""
        if not isinstance(stop, int):
            return
        if isinstance(start, int):
            if start >= stop:
                return
            last = start + (stop - start - 1) // step * step
        else:
            last = stop - 1  # the last value a run-time start can give
        if last + step > INDEX_MAX:
            raise VerifyError(
                f"{ast.unparse(node)}: the loop variable would pass the largest 64-bit index ({INDEX_MAX}) after its last "
                f"iteration ({last} + step {step})",
                self.loc(node),
                "use a smaller stop or step",
            )

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
        """The value of ``node``: a compile-time Python value or a typed IR expression."""
        self.expr_depth += 1
        try:
            if self.expr_depth > MAX_EXPR_DEPTH:
                raise DSLError(
                    f"this expression is nested more than {MAX_EXPR_DEPTH} levels deep (counting the "
                    "@ts.inline helpers it calls), more than tilescope compiles",
                    self.loc(node),
                    "split it into temporaries: a = x + x + ... (a few hundred terms); b = a + x + ...",
                )
            return self._expr(node)
        finally:
            self.expr_depth -= 1

    def _expr(self, node: ast.expr) -> Any:
        match node:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                return self.value_of_name(name, node)
            case ast.Attribute(value=ast.Name(id=name) as base, attr=attr):
                return self.attribute(self.lookup(name, base), attr, node)  # W.shape of a captured tensor
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
                return self.value_of_call(node)
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
                    node, f"{syntax_name(node)} are not supported in {self.what()}", _SUPPORTED_HINT
                )

    # -- calls ---------------------------------------------------------------------------------

    def value_of_call(self, node: ast.Call) -> Any:
        """The value of a call used as a value; an error for a call that has none (``ts.store``, an
        ``@ts.inline`` helper without ``return``), naming it rather than where None ends up."""
        v = self.call(node)
        if v is not None:
            return v
        func = self.expr(node.func)
        if isinstance(func, InlineFunction):
            raise self.error(
                node,
                f"@ts.inline helper {func.fn.__name__} has no value: it ends without 'return'",
                "end the helper with 'return <value>', or call it on a line of its own",
            )
        raise self.error(
            node,
            f"{ast.unparse(node.func)}(...) has no value",
            "call it on a line of its own, not as a value",
        )

    def call(self, node: ast.Call) -> Any:
        func = self.expr(node.func)
        if isinstance(func, ops.DSLOp):
            if func is ops.RANGE:
                raise self.error(node, "ts.range is only used as 'for v in ts.range(...)'")
            if func.kind != "both" and func.kind != self.mode:
                where = "@ts.kernel" if func.kind == "kernel" else "@ts.jit orchestration"
                raise self.error(node, f"ts.{func.name} can only be used in a {where}, not in {self.what()}")
            return self.lower_op(func.op, node)
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
            if func in (builtins.min, builtins.max) and any(is_expr(a) for a in args) and not node.keywords:
                return self.runtime_min_max(func, args, node)
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
        self.frames.append(Frame(src.tree.name, src.file, src.namespace, [values], borrowed=set(values)))
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
                    "e.g. ts.Tensor[[64, 128], ts.f32], ts.Out[...], ts.InOut[...], ts.Weight[...] or ts.Scalar[ts.f32]",
                )
            # Annotations evaluated at definition time see the enclosing function's locals; string
            # annotations (``from __future__ import annotations``) are evaluated here.
            spec = self.annotations.get(a.arg)
            if not isinstance(spec, ParamSpec):
                try:
                    code = compile(ast.Expression(a.annotation), self.frame.file, "eval")
                    spec = eval(code, self.frame.namespace)
                except Exception as e:  # noqa: BLE001 - any failure is the user's annotation
                    raise self.annotation_error(a, e) from None
            if not isinstance(spec, ParamSpec):
                raise DSLError(
                    f"parameter {a.arg!r}: annotation {ast.unparse(a.annotation)} is not a tilescope parameter type",
                    self.loc(a),
                    "use ts.Tensor[[shape], dtype], ts.Out[...], ts.InOut[...], ts.Weight[...] or ts.Scalar[dtype]",
                )
            ptype = ScalarType(spec.dtype) if spec.shape is None else TensorType(spec.shape, spec.dtype)
            params.append(Param(a.arg, spec.direction, ptype, self.loc(a), spec.weight))
        return tuple(params)

    def annotation_error(self, a: ast.arg, e: Exception) -> DSLError:
        """Evaluating parameter ``a``'s annotation raised ``e``; says so, and when ``ts`` (or the
        name the annotation starts with) no longer is the tilescope module, that it was shadowed."""
        root = a.annotation
        while isinstance(root, ast.Subscript | ast.Attribute):
            root = root.value
        if isinstance(e, AttributeError) and isinstance(root, ast.Name) and root.id in self.frame.namespace:
            value = self.frame.namespace[root.id]
            attr = next(
                (n.attr for n in ast.walk(a.annotation) if isinstance(n, ast.Attribute) and n.value is root),
                "",
            )
            if not (isinstance(value, types.ModuleType) and value.__name__ == "tilescope") and is_dsl_name(
                attr
            ):
                return DSLError(
                    f"parameter {a.arg!r}: {shadowed_message(root.id, value, attr)}",
                    self.loc(a),
                    SHADOWED_HINT,
                )
        return DSLError(f"parameter {a.arg!r}: cannot evaluate its annotation: {e}", self.loc(a))

    def lower_function(self) -> tuple[tuple[Param, ...], tuple[Stmt, ...]]:
        params = self.signature(self.tree)
        self.params = {p.name: p for p in params}
        self.frame.scopes[0].update({p.name: Var(p.name, p.type, p.loc) for p in params})
        self.body(self.tree.body)
        return params, tuple(self.blocks[0])


def parse_kernel(fn: Callable, name: str | None = None) -> Kernel:
    """Lower a ``@ts.kernel`` function's source to a Kernel (named ``name``, else its ``def`` name)."""
    src = function_source(fn)
    low = _Lowering("kernel", src)
    params, body = low.lower_function()
    return Kernel(name or src.tree.name, params, body, SourceLoc(src.file, src.tree.lineno))


@api_boundary
@recursion_room()
def kernel_ir(k: KernelFunction) -> Kernel:
    """The IR of a ``@ts.kernel`` (parsed on first use, then cached on it)."""
    if k.cached_ir is None:
        k.cached_ir = parse_kernel(k.fn, k.name)
    return k.cached_ir


def parse_program(fn: Callable) -> Program:
    """Lower a ``@ts.jit`` function's source and every kernel it calls to a Program."""
    src = function_source(fn)
    low = _Lowering("orch", src, kernel_ir)
    params, body = low.lower_function()
    return low.kernels.program(src.tree.name, params, body, SourceLoc(src.file, src.tree.lineno))


@recursion_room()
def program_ir(orch: Orchestration) -> Program:
    """The front-end IR of an orchestration and its kernels (parsed on first use, then cached)."""
    if orch.cached_program is None:
        orch.cached_program = parse_program(orch.fn)
    return orch.cached_program


@recursion_room()
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
    try:
        exec(code, namespace)  # defines decorated functions only; their bodies are never run
    except TilescopeError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the module's top level raises is its own line's fault
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == filename]
        raise DSLError(
            f"{type(e).__name__}: {e} (raised while loading the file)",
            SourceLoc(filename, frames[-1].lineno or 0) if frames else None,
            "the file defines one @ts.jit function and its kernels, as the printed IR does; "
            "fix this line (or undo the edit)",
        ) from None
    jits = [v for v in namespace.values() if isinstance(v, Orchestration)]
    if len(jits) != 1:
        raise DSLError(f"{filename} must define exactly one @ts.jit function, found {len(jits)}")
    return program_ir(jits[0])
