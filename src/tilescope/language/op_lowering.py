"""Lowering of the DSL's operations (``ts.load``, ``ts.store``, ``ts.matmul``, kernel calls,
``ts.submit``, ...): the op half of the front-end, mixed into its lowering class.

Invariants: each ``op_<name>`` handles the call of ``ts.<name>``; an op of ``ir.op_registry``
without one (a plain elementwise op, a reduction) is lowered by the generic handler of its
category. Each binds its arguments by name (positional or keyword), types the node with
``ir.type_rules`` and reports every misuse as a VerifyError at the user's line; kernel calls are
checked against the kernel's parameters.
"""

from __future__ import annotations

import ast
from typing import Any

from tilescope.errors import VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir import type_rules as rules
from tilescope.ir.nodes import (
    BinOp,
    Cast,
    CreateTensor,
    DumpTag,
    Evaluate,
    Full,
    Iota,
    Kernel,
    MatMul,
    Param,
    Probe,
    Rand,
    Reduce,
    Scan,
    Slice,
    Submit,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.op_registry import REDUCE, OpDef, forms_of
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
    MAX_TENSOR_DIMS,
    MAX_TILE_DIMS,
    TASK,
    Direction,
    IndexType,
    ScalarType,
    TaskType,
    TensorType,
    TileType,
    shape_str,
)
from tilescope.language.decorators import KernelFunction


def is_number(v: object) -> bool:
    """Whether ``v`` is a Python number (bools included), not an IR expression."""
    return isinstance(v, int | float)  # bool is an int


class OpLowering:
    """Op handlers; the host class provides ``expr``, ``bind``, ``loc``, ``emit`` and friends."""

    def tensor_param(self, v: Any, node: ast.AST, what: str) -> Var:
        """``v`` if it is a tensor parameter, else a VerifyError naming ``what``."""
        if not (isinstance(v, Var) and isinstance(v.type, TensorType)):
            raise VerifyError(
                f"{what} must be a tensor parameter of the kernel, got {described(v)}", self.loc(node)
            )
        return v

    def tile_arg(self, v: Any, node: ast.AST, what: str) -> Any:
        """``v`` if it is a tile expression, else a VerifyError naming ``what`` and what it got."""
        if not (is_expr(v) and isinstance(v.type, TileType)):
            raise VerifyError(f"{what} must be a tile, got {described(v)}", self.loc(node))
        return v

    def lower_op(self, op: OpDef, node: ast.Call) -> Any:
        """The call of ``ts.<op>``: its own ``op_<name>`` handler where it has one, else the generic
        lowering of its category (a plain unary or binary elementwise op, a reduction)."""
        special = getattr(self, f"op_{op.name}", None)
        if special is not None:
            return special(node)
        if op.category == REDUCE:
            return self.reduce_op(op, node)
        if op.elementwise and op.arity == 1:
            return self.unary_op(op, node)
        if op.elementwise and op.arity == 2:
            return self.binary_op(op, node)
        raise AssertionError(f"ts.{op.name} has no lowering")  # test_op_registry lowers every op

    # kernel ops

    def op_iota(self, node: ast.Call) -> Iota:
        """``ts.iota(shape, dtype=ts.i32, dim=-1)``: each element's index along ``dim``."""
        a = self.bind(node, ["shape", "dtype", "dim"], {"dtype": dt.i32, "dim": -1})
        loc = self.loc(node)
        shape = self.static_ints(a["shape"], node, "ts.iota shape")
        if not 1 <= len(shape) <= MAX_TILE_DIMS or any(s <= 0 for s in shape):
            raise VerifyError(f"ts.iota shape must have 1 or 2 positive dims, got {list(shape)}", loc)
        dtype = self.dtype_arg(a["dtype"], node, "ts.iota dtype")
        dim = self.static_dim(a["dim"], len(shape), node, "ts.iota dim")
        if dtype == dt.bool_:
            raise VerifyError("ts.iota makes numbers, not bools", loc, "use ts.i32 (the default)")
        rules.check_literal(shape[dim] - 1, dtype, f"ts.iota of {shape[dim]} along dim {dim}", loc)
        return Iota(dim, TileType(shape, dtype), loc)

    def op_rand(self, node: ast.Call) -> Rand:
        """``ts.rand(shape, seed, offset=0)``: uniform [0, 1) f32 numbers of counter ``offset + i``."""
        a = self.bind(node, ["shape", "seed", "offset"], {"offset": 0})
        loc = self.loc(node)
        shape = self.static_ints(a["shape"], node, "ts.rand shape")
        if not 1 <= len(shape) <= MAX_TILE_DIMS or any(s <= 0 for s in shape):
            raise VerifyError(f"ts.rand shape must have 1 or 2 positive dims, got {list(shape)}", loc)
        seed = self.index(a["seed"], node, "ts.rand seed")
        offset = self.index(a["offset"], node, "ts.rand offset")
        return Rand(seed, offset, TileType(shape, dt.f32), loc)

    def op_probe(self, node: ast.Call) -> None:
        """``ts.probe(tile, "name")``: emits a Probe of a tile (captured when a run has probes on).
        Returns None (the call has no value)."""
        a = self.bind(node, ["tile", "name"])
        loc = self.loc(node)
        name = a["name"]
        if not isinstance(name, str):
            raise VerifyError(
                f"ts.probe's name must be a string, got {described(name)}", loc, 'write ts.probe(t, "t")'
            )
        if is_number(a["tile"]):
            raise VerifyError("ts.probe needs a tile, got a number", loc)
        value = self.tile_arg(a["tile"], node, "ts.probe's tile")
        self.emit(Probe(value, name, loc))
        return None

    def _fill(self, node: ast.Call, shape: Any, value: Any, dtype: Any) -> Full:
        loc = self.loc(node)
        shape = self.static_ints(shape, node, "tile shape")
        if not 1 <= len(shape) <= MAX_TILE_DIMS or any(s <= 0 for s in shape):
            raise VerifyError(f"tile shape must have 1 or 2 positive dims, got {list(shape)}", loc)
        dtype = self.dtype_arg(dtype, node, f"{ast.unparse(node.func)} dtype")
        tile = TileType(shape, dtype)
        if is_expr(value):
            if not isinstance(value.type, ScalarType | IndexType):
                raise VerifyError(f"ts.full value must be a scalar, got {value.type}", loc)
        else:
            value = self.as_expr(value, node, like=ScalarType(dtype), what="ts.full value")
        return Full(value, tile, loc)

    def op_zeros(self, node: ast.Call) -> Full:
        """``ts.zeros(shape, dtype=ts.f32)``: a 1-D or 2-D tile of zeros."""
        a = self.bind(node, ["shape", "dtype"], {"dtype": dt.f32})
        return self._fill(node, a["shape"], 0, a["dtype"])

    def op_full(self, node: ast.Call) -> Full:
        """``ts.full(shape, value, dtype=ts.f32)``: a tile filled with a scalar ``value``."""
        a = self.bind(node, ["shape", "value", "dtype"], {"dtype": dt.f32})
        return self._fill(node, a["shape"], a["value"], a["dtype"])

    def unary_op(self, op: OpDef, node: ast.Call) -> UnOp:
        """``ts.<op>(x)`` of a registry unary op; an op with a ``keyword`` (``approximate=``) picks
        the IR op of the keyword's value among its forms (``op_registry.forms_of``)."""
        if op.keyword is None:
            return self.unop(op.name, self.bind(node, ["x"])["x"], node)
        key, default = op.keyword
        a = self.bind(node, ["x", key], {key: default})
        forms = forms_of(op.name)
        if a[key] not in forms:
            allowed = " or ".join(f'"{v}"' for v in forms)
            raise VerifyError(
                f"ts.{op.name} {key}= must be {allowed} (as torch's), got {value_str(a[key])}", self.loc(node)
            )
        return self.unop(forms[a[key]], a["x"], node)

    def binary_op(self, op: OpDef, node: ast.Call) -> Any:
        """``ts.<op>(a, b)`` of a registry binary op; ``ts.maximum``/``ts.minimum`` of two numbers fold."""
        a = self.bind(node, ["a", "b"])
        if op.name in ("maximum", "minimum") and is_number(a["a"]) and is_number(a["b"]):
            return (max if op.name == "maximum" else min)(a["a"], a["b"])  # both known now
        return self.binop(op.name, a["a"], a["b"], node)

    def op_pow(self, node: ast.Call) -> BinOp:
        """``ts.pow(x, exponent)``: elementwise power of float tiles (a scalar broadcasts)."""
        a = self.bind(node, ["x", "exponent"])
        if not is_expr(a["x"]) and not is_expr(a["exponent"]):
            raise VerifyError(
                f"ts.pow needs a tile, got {value_str(a['x'])} and {value_str(a['exponent'])}",
                self.loc(node),
                "compute a compile-time power in Python: x ** y",
            )
        return self.binop("pow", a["x"], a["exponent"], node)

    def op_clamp(self, node: ast.Call) -> Any:
        """``ts.clamp(x, min=None, max=None)``: ``ts.minimum(ts.maximum(x, min), max)`` as torch.clamp
        (NaN stays NaN; with min > max every element is max)."""
        a = self.bind(node, ["x", "min", "max"], {"min": None, "max": None})
        x = self.tile_arg(a["x"], node, "ts.clamp's operand")
        if a["min"] is None and a["max"] is None:
            raise VerifyError("ts.clamp needs min=, max= or both", self.loc(node))
        if a["min"] is not None:
            x = self.binop("maximum", x, a["min"], node)
        if a["max"] is not None:
            x = self.binop("minimum", x, a["max"], node)
        return x

    def op_relu(self, node: ast.Call) -> BinOp:
        """``ts.relu(x)``: ``ts.maximum(x, 0)`` as torch.relu (NaN stays NaN, -0 stays -0)."""
        x = self.tile_arg(self.bind(node, ["x"])["x"], node, "ts.relu's operand")
        return self.binop("maximum", x, 0, node)

    def op_leaky_relu(self, node: ast.Call) -> Where:
        """``ts.leaky_relu(x, negative_slope=0.01)``: ``ts.where(x > 0, x, x * negative_slope)``,
        torch's formula (NaN stays NaN)."""
        a = self.bind(node, ["x", "negative_slope"], {"negative_slope": 0.01})
        x = self.tile_arg(a["x"], node, "ts.leaky_relu's operand")
        loc = self.loc(node)
        cond, lhs, rhs = self.binop("gt", x, 0, node), x, self.binop("mul", x, a["negative_slope"], node)
        return Where(cond, lhs, rhs, rules.where_type(cond, lhs, rhs, loc), loc)

    def op_hardtanh(self, node: ast.Call) -> Any:
        """``ts.hardtanh(x, min_val=-1.0, max_val=1.0)``: ``ts.minimum(ts.maximum(x, min_val), max_val)``."""
        a = self.bind(node, ["x", "min_val", "max_val"], {"min_val": -1.0, "max_val": 1.0})
        x = self.tile_arg(a["x"], node, "ts.hardtanh's operand")
        return self.binop("minimum", self.binop("maximum", x, a["min_val"], node), a["max_val"], node)

    def op_where(self, node: ast.Call) -> Where:
        """``ts.where(cond, a, b)``: a bool tile selects between two tiles or numbers (two numbers
        make a tile of the condition's shape: f32, or i32 when both are ints)."""
        a = self.bind(node, ["cond", "a", "b"])
        loc = self.loc(node)
        cond = self.tile_arg(a["cond"], node, "ts.where's condition")
        for k in ("a", "b"):
            if not is_expr(a[k]) and not is_number(a[k]):
                raise VerifyError(f"ts.where's {k} must be a tile or number, got {described(a[k])}", loc)
        if not any(is_expr(a[k]) and isinstance(a[k].type, TileType) for k in ("a", "b")):
            # NOTE: two numbers (ts.where(t > 0, 1.0, 0.0)): a tile of the condition's shape, f32 unless both are ints
            floats = any(isinstance(a[k], float) or (is_expr(a[k]) and a[k].type.dtype.is_float) for k in ("a", "b"))
            dtype = dt.f32 if floats else dt.i32
            value = self.as_expr(a["a"], node, like=ScalarType(dtype), what="ts.where value")
            lhs = Full(value, TileType(cond.type.shape, dtype), loc)
            rhs = self.as_expr(a["b"], node, like=ScalarType(dtype), what="ts.where value")
            return Where(cond, lhs, rhs, rules.where_type(cond, lhs, rhs, loc), loc)
        lhs, rhs = self.as_expr(a["a"], node), self.as_expr(a["b"], node)
        return Where(cond, lhs, rhs, rules.where_type(cond, lhs, rhs, loc), loc)

    def op_cast(self, node: ast.Call) -> Cast:
        """``ts.cast(x, dtype, mode="rint")``: a tile as ``dtype``; ``mode`` rounds float -> int."""
        a = self.bind(node, ["x", "dtype", "mode"], {"mode": "rint"})
        loc = self.loc(node)
        dtype = self.dtype_arg(a["dtype"], node, "ts.cast dtype")
        x = a["x"]
        if not is_expr(x):
            raise VerifyError(
                f"ts.cast needs a tile, got {described(x)}",
                loc,
                "a compile-time number takes the dtype of the tile it meets",
            )
        return Cast(x, a["mode"], rules.cast_type(x, dtype, a["mode"], loc), loc)

    def reduce_op(self, op: OpDef, node: ast.Call) -> Reduce:
        """``ts.<op>(x)`` of a registry reduction: ``[R, C] -> [R, 1]`` (row) or ``[1, C]`` (column)."""
        loc = self.loc(node)
        x = self.tile_arg(self.bind(node, ["x"])["x"], node, f"ts.{op.name}'s operand")
        return Reduce(op.name, x, rules.reduce_type(op.name, x, loc), loc)

    def op_matmul(self, node: ast.Call) -> MatMul:
        """``ts.matmul(a, b, acc=None, transpose_a=False, transpose_b=False)``: ``a @ b`` (either
        transposed first) accumulated in f32 (i32 for int8), plus ``acc`` if given."""
        names = ["a", "b", "acc", "transpose_a", "transpose_b"]
        a = self.bind(node, names, {"acc": None, "transpose_a": False, "transpose_b": False})
        for flag in ("transpose_a", "transpose_b"):
            self.static_flag(a[flag], node, f"ts.matmul {flag}=")
        return self.matmul(a["a"], a["b"], a["acc"], node, a["transpose_a"], a["transpose_b"])

    def op_cumsum(self, node: ast.Call) -> Scan:
        """``ts.cumsum(x, dim=-1, reverse=False, exclusive=False)``: a running sum along ``dim``."""
        return self._scan("cumsum", node)

    def op_cumprod(self, node: ast.Call) -> Scan:
        """``ts.cumprod(x, dim=-1, reverse=False, exclusive=False)``: a running product along ``dim``."""
        return self._scan("cumprod", node)

    def _scan(self, op: str, node: ast.Call) -> Scan:
        a = self.bind(node, ["x", "dim", "reverse", "exclusive"], {"dim": -1, "reverse": False, "exclusive": False})
        loc = self.loc(node)
        x = self.tile_arg(a["x"], node, f"ts.{op}'s operand")
        dim = self.static_dim(a["dim"], len(x.type.shape), node, f"ts.{op} dim")
        for flag in ("reverse", "exclusive"):
            self.static_flag(a[flag], node, f"ts.{op} {flag}=")
        if x.type.dtype == dt.bool_:
            raise VerifyError(f"ts.{op} of a bool tile", loc, "cast to a number type first: ts.cast(t, ts.i32)")
        return Scan(op, x, dim, a["reverse"], a["exclusive"], x.type, loc)

    def static_dim(self, dim: Any, rank: int, node: ast.Call, what: str) -> int:
        """``dim`` of a tile of ``rank`` dims as a compile-time int in ``[0, rank)`` (a negative one
        counts from the end); a VerifyError naming ``what`` otherwise."""
        if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
            raise VerifyError(f"{what} must be a compile-time int in [{-rank}, {rank - 1}], got {value_str(dim)}",
                              self.loc(node))  # fmt: skip
        return dim % rank

    def static_flag(self, value: Any, node: ast.Call, what: str) -> None:
        """A VerifyError naming ``what`` unless ``value`` is a compile-time True or False."""
        if not isinstance(value, bool):
            raise VerifyError(f"{what} must be a compile-time True or False, got {described(value)}", self.loc(node))

    def op_transpose(self, node: ast.Call) -> Transpose:
        """``ts.transpose(x)``: a 2-D tile ``[R, C]`` as ``[C, R]``."""
        loc = self.loc(node)
        x = self.tile_arg(self.bind(node, ["x"])["x"], node, "ts.transpose's operand")
        if len(x.type.shape) != 2:
            raise VerifyError(f"ts.transpose needs a 2-D tile, got {x.type}", loc)
        r, c = x.type.shape
        return Transpose(x, TileType((c, r), x.type.dtype), loc)

    # orchestration ops

    def op_create_tensor(self, node: ast.Call) -> CreateTensor:
        """``ts.create_tensor(shape, dtype)``: an intermediate tensor of 1 to MAX_TENSOR_DIMS (8) static positive dims."""
        a = self.bind(node, ["shape", "dtype"])
        loc = self.loc(node)
        shape = self.static_ints(a["shape"], node, "ts.create_tensor shape")
        if not 1 <= len(shape) <= MAX_TENSOR_DIMS or any(s <= 0 for s in shape):
            raise VerifyError(
                f"ts.create_tensor shape must have 1 to {MAX_TENSOR_DIMS} positive dims, got {list(shape)}", loc
            )
        return CreateTensor(
            TensorType(shape, self.dtype_arg(a["dtype"], node, "ts.create_tensor dtype")), loc
        )

    def op_dump_tag(self, node: ast.Call) -> Var:
        """``ts.dump_tag(t)``: emits a DumpTag for a tensor and returns the tensor unchanged."""
        t = self.bind(node, ["tensor"])["tensor"]
        if isinstance(t, Slice):
            raise VerifyError(
                f"ts.dump_tag tags a whole tensor, got the region {value_str(t)}",
                self.loc(node),
                f"tag the tensor itself: ts.dump_tag({t.tensor.name})",
            )
        if not (isinstance(t, Var) and isinstance(t.type, TensorType)):
            raise VerifyError(f"ts.dump_tag needs a tensor, got {described(t)}", self.loc(node))
        self.emit(Evaluate(DumpTag(t, t.type, self.loc(node)), self.loc(node)))
        return t

    def op_submit(self, node: ast.Call) -> Submit:
        """``ts.submit(kernel, *args, name=, deps=, dumps=)``: the long form of a kernel call."""
        if not node.args:
            raise self.error(node, "ts.submit(kernel, *args, name=None, deps=(), dumps=()) needs a kernel")
        kfn = self.expr(node.args[0])
        if not isinstance(kfn, KernelFunction):
            raise VerifyError(
                f"ts.submit's first argument must be a @ts.kernel, got {described(kfn)}", self.loc(node)
            )
        return self.submit_call(kfn, node.args[1:], node.keywords, node)

    def submit_call(
        self, kfn, arg_nodes: list[ast.expr], keywords: list[ast.keyword], node: ast.AST
    ) -> Submit:
        """A call of ``kfn`` as a task (a plain kernel call or ``ts.submit``).

        Records the kernel (``kernel_names.ProgramKernels``: the Submit names it as the program
        will), checks the options (``name`` a string, ``deps`` task handles, ``dumps`` tensors) and
        each positional argument against its parameter.
        """
        loc = self.loc(node)
        kernel = self.kernel_ir(kfn)
        ref = self.kernels.use(kfn, kernel, loc)
        opts: dict[str, Any] = {"name": None, "deps": [], "dumps": []}
        for kw in keywords:
            if kw.arg not in opts:
                if kw.arg in [p.name for p in kernel.params]:
                    raise self.error(
                        node, "kernel arguments are passed by position", "pass every argument in order"
                    )
                raise self.error(
                    node, f"unknown option {kw.arg!r}; options: name=, deps=, dumps= (via ts.submit)"
                )
            opts[kw.arg] = self.expr(kw.value)
        args = [self.expr(a) for a in arg_nodes]
        params = kernel.params
        if len(args) != len(params):
            names = ", ".join(p.name for p in params)
            raise VerifyError(
                f"kernel {kernel.name}({names}) takes {len(params)} arguments, got {len(args)}", loc
            )
        lowered = tuple(self.kernel_arg(kernel, p, a, node) for p, a in zip(params, args))
        name = opts["name"]
        if name is not None and not isinstance(name, str):
            raise VerifyError(f"ts.submit name= must be a string, got {described(name)}", loc)
        deps = opts["deps"] if isinstance(opts["deps"], list | tuple) else [opts["deps"]]
        for d in deps:
            if not (isinstance(d, Var) and isinstance(d.type, TaskType)):
                raise VerifyError(
                    f"deps= takes tasks returned by ts.submit / kernel calls, got {described(d)}", loc
                )
        dumps = opts["dumps"] if isinstance(opts["dumps"], list | tuple) else [opts["dumps"]]
        for d in dumps:
            if not (is_expr(d) and isinstance(d.type, TensorType)):
                raise VerifyError(f"dumps= takes tensors, got {described(d)}", loc)
        return Submit(ref, lowered, name, tuple(deps), tuple(dumps), TASK, loc)

    def kernel_arg(self, kernel: Kernel, p: Param, a: Any, node: ast.AST) -> Any:
        """An argument checked against kernel parameter ``p``: a scalar of its dtype (a number
        adopts it), or a tensor region of its dtype and shape (a run-time dim, -1, matches any).
        """
        loc = self.loc(node)
        where = f"kernel {kernel.name} parameter {p.name!r}"
        if p.direction is Direction.SCALAR:
            if is_number(a):
                return self.as_expr(a, node, like=p.type, what=where)
            if is_expr(a) and isinstance(a.type, ScalarType | IndexType):
                # NOTE: an orchestration has no ts.cast: the fix is a parameter's dtype. In the kernel a
                # scalar adopts the dtype of the tile it meets, so an integer parameter serves an f32 tile.
                if isinstance(a.type, ScalarType) and a.type.dtype != p.type.dtype:
                    raise VerifyError(
                        f"{where} expects a {p.type}, got a {a.type}",
                        loc,
                        "an orchestration does not convert scalars: declare both parameters with one dtype "
                        f"(the kernel's as ts.Scalar[ts.{a.type.dtype.name}]: in the kernel a scalar adopts the "
                        f"dtype of the tile it meets, t * {p.name})",
                    )
                if isinstance(a.type, IndexType) and not p.type.dtype.is_int:
                    raise VerifyError(
                        f"{where} expects a {p.type}, got an index (an integer)",
                        loc,
                        "declare the kernel's parameter as ts.Scalar[ts.i32] (or ts.i64): in the kernel a "
                        f"scalar adopts the dtype of the tile it meets, t * {p.name}",
                    )
                return a
            raise VerifyError(f"{where} expects a {p.type}, got {described(a)}", loc)
        if not (is_expr(a) and isinstance(a.type, TensorType)):
            raise VerifyError(f"{where} expects a tensor region {p.type}, got {described(a)}", loc)
        t: TensorType = a.type
        if t.dtype != p.type.dtype:
            raise VerifyError(f"{where} expects {p.type}, got a {t.dtype.name} region", loc)
        if len(t.shape) != len(p.type.shape) or any(s not in (-1, e) for s, e in zip(t.shape, p.type.shape)):
            raise VerifyError(
                f"{where} expects a region of shape [{shape_str(p.type.shape)}], got [{shape_str(t.shape)}]",
                loc,
                "slice the tensor to the kernel's parameter shape",
            )
        return a
