"""Lowering of the DSL's operations (``ts.load``, ``ts.store``, ``ts.matmul``, kernel calls,
``ts.submit``, ...): the op half of the front-end, mixed into its lowering class.

Invariants: each ``op_<name>`` handles the call of ``ts.<name>``, binds its arguments by name
(positional or keyword), types the node with ``ir.type_rules`` and reports every misuse as a
VerifyError at the user's line; kernel calls are checked against the kernel's parameters.
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
    Kernel,
    Load,
    MatMul,
    Param,
    Probe,
    Reduce,
    Slice,
    Store,
    Submit,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
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

    # kernel ops

    def op_load(self, node: ast.Call) -> Load:
        """``ts.load(tensor, offsets, sizes)``: a tile of static ``sizes`` read from a tensor parameter."""
        a = self.bind(node, ["tensor", "offsets", "sizes"])
        loc = self.loc(node)
        tensor = self.tensor_param(a["tensor"], node, "ts.load's tensor")
        sizes = self.static_ints(a["sizes"], node, "ts.load sizes")
        offsets = self._offsets(a["offsets"], tensor, node, "ts.load")
        shape = rules.load_tile_shape(tensor.type, sizes, "ts.load", loc)
        return Load(tensor, offsets, sizes, TileType(shape, tensor.type.dtype), loc)

    def _offsets(self, offs: Any, tensor: Var, node: ast.AST, what: str) -> tuple:
        if not isinstance(offs, list | tuple) or len(offs) != len(tensor.type.shape):
            raise VerifyError(
                f"{what}: give one offset per dim of {tensor.name} ({len(tensor.type.shape)}-D), got {value_str(offs)}",
                self.loc(node),
            )
        return tuple(self.index(o, node, f"{what} offset") for o in offs)

    def op_store(self, node: ast.Call) -> None:
        """``ts.store(tensor, offsets, tile)``: emits a Store into a tensor parameter; the tile's dtype
        must be the tensor's. Returns None (the call has no value).
        """
        a = self.bind(node, ["tensor", "offsets", "tile"])
        loc = self.loc(node)
        tensor = self.tensor_param(a["tensor"], node, "ts.store's tensor")
        value = a["tile"]
        if is_number(value):
            raise VerifyError("ts.store needs a tile", loc, "make one with ts.full(shape, value, dtype)")
        value = self.tile_arg(value, node, "ts.store's value")
        if value.type.dtype != tensor.type.dtype:
            raise VerifyError(
                f"ts.store: dtype mismatch: storing a {value.type} into {tensor.name}: {tensor.type}",
                loc,
                f"cast first: ts.cast(value, ts.{tensor.type.dtype.name})",
            )
        if len(value.type.shape) > len(tensor.type.shape):
            raise VerifyError(f"ts.store: a {value.type} does not fit the {tensor.type} {tensor.name}", loc)
        offsets = self._offsets(a["offsets"], tensor, node, "ts.store")
        self.emit(Store(tensor, offsets, value, loc))
        return None

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

    def _unary(self, node: ast.Call) -> UnOp:
        name = self.expr(node.func).name
        return self.unop(name, self.bind(node, ["x"])["x"], node)

    op_exp = op_log = op_sqrt = op_rsqrt = op_abs = op_neg = op_tanh = op_sigmoid = op_silu = _unary
    op_logical_not = _unary

    def _binary(self, node: ast.Call) -> BinOp:
        name = self.expr(node.func).name
        a = self.bind(node, ["a", "b"])
        return self.binop(name, a["a"], a["b"], node)

    op_maximum = op_minimum = op_logical_and = op_logical_or = _binary

    def op_where(self, node: ast.Call) -> Where:
        """``ts.where(cond, a, b)``: a bool tile selects between two tiles or numbers."""
        a = self.bind(node, ["cond", "a", "b"])
        loc = self.loc(node)
        cond = self.tile_arg(a["cond"], node, "ts.where's condition")
        for k in ("a", "b"):
            if not is_expr(a[k]) and not is_number(a[k]):
                raise VerifyError(f"ts.where's {k} must be a tile or number, got {described(a[k])}", loc)
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

    def _reduce(self, node: ast.Call) -> Reduce:
        name = self.expr(node.func).name
        loc = self.loc(node)
        x = self.tile_arg(self.bind(node, ["x"])["x"], node, f"ts.{name}'s operand")
        return Reduce(name, x, rules.reduce_type(name, x, loc), loc)

    op_row_sum = op_row_max = op_row_min = op_col_sum = op_col_max = _reduce

    def op_matmul(self, node: ast.Call) -> MatMul:
        """``ts.matmul(a, b, acc=None)``: ``a @ b`` accumulated in f32, plus ``acc`` if given."""
        a = self.bind(node, ["a", "b", "acc"], {"acc": None})
        return self.matmul(a["a"], a["b"], a["acc"], node)

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
        """``ts.create_tensor(shape, dtype)``: an intermediate tensor of 1 to 4 static positive dims."""
        a = self.bind(node, ["shape", "dtype"])
        loc = self.loc(node)
        shape = self.static_ints(a["shape"], node, "ts.create_tensor shape")
        if not 1 <= len(shape) <= 4 or any(s <= 0 for s in shape):
            raise VerifyError(
                f"ts.create_tensor shape must have 1 to 4 positive dims, got {list(shape)}", loc
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

        Records the kernel (two different kernels may not share a name), checks the options
        (``name`` a string, ``deps`` task handles, ``dumps`` tensors) and each positional argument
        against its parameter.
        """
        loc = self.loc(node)
        kernel = self.kernel_ir(kfn)
        known = self.kernels.get(kernel.name)
        if known is not None and known != kernel:
            raise VerifyError(f"two different kernels are named {kernel.name!r}", loc, "rename one of them")
        self.kernels[kernel.name] = kernel
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
        return Submit(kernel.name, lowered, name, tuple(deps), tuple(dumps), TASK, loc)

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
