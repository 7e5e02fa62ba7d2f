"""Lowering of the DSL's tensor accesses in kernels: ``ts.load`` (a box, ragged with
``valid=``/``fill=``, padded with ``pad=``, along any two dims with ``dims=``, strided with
``strides=``), ``ts.store`` (the same forms) and ``ts.load_rows`` (a gather of rows).

Invariants: sizes, dims and strides are compile-time; offsets, valid counts, fill and pad may be
run-time. The IR keeps ``dims`` and ``strides`` as ``()`` when they are the default (the last
dims, unit steps), so the default form prints, hashes and compiles as it always did. Every
misuse is a VerifyError at the user's line naming the argument and what it takes.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from tilescope.errors import VerifyError
from tilescope.ir import type_rules as rules
from tilescope.ir.nodes import Load, LoadRows, Store, Var
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import IndexType, ScalarType, TileType, shape_str
from tilescope.language.op_lowering import is_number


class AccessLowering:
    """Handlers of ``ts.load``, ``ts.store`` and ``ts.load_rows``; the host class provides
    ``bind``, ``loc``, ``emit``, ``index``, ``as_expr``, ``static_ints``, ``tensor_param`` and
    ``tile_arg``."""

    def op_load(self, node: ast.Call) -> Load:
        """``ts.load(tensor, offsets, sizes, valid=None, fill=0, pad=None, dims=None, strides=None)``:
        a tile of static ``sizes`` read from a tensor parameter; with ``valid`` only the elements
        below those counts are read, with ``pad`` only those inside the tensor."""
        names = ["tensor", "offsets", "sizes", "valid", "fill", "pad", "dims", "strides"]
        a = self.bind(node, names, {k: None for k in names[3:]})
        loc = self.loc(node)
        tensor = self.tensor_param(a["tensor"], node, "ts.load's tensor")
        nd = len(tensor.type.shape)
        sizes = self.static_ints(a["sizes"], node, "ts.load sizes")
        offsets = self._offsets(a["offsets"], tensor, node, "ts.load")
        given = None if a["dims"] is None else rules.tile_dims_given(a["dims"], nd, None, "ts.load", loc)
        shape, dims = rules.load_tile(tensor.type, sizes, given, "ts.load", loc)
        tile = TileType(shape, tensor.type.dtype)
        strides = rules.access_strides(a["strides"], nd, dims, len(shape), "ts.load", loc)
        if a["pad"] is not None and a["valid"] is not None:
            raise VerifyError(
                "ts.load takes pad= or valid=, not both",
                loc,
                "pad= reads every element outside the tensor as pad: it covers a ragged edge without valid=",
            )
        valid = self._valid(a["valid"], tile.shape, node, "ts.load")
        fill = self._fill_value(a["fill"], valid, tile, node, "ts.load")
        pad = None if a["pad"] is None else self._scalar_for(a["pad"], tile, node, "ts.load pad")
        return Load(tensor, offsets, sizes, valid, fill, tile, loc, pad, dims, strides)

    def _valid(self, v: Any, shape: tuple[int, ...], node: ast.AST, what: str) -> tuple:
        """``valid=``: one count per tile dim, each a compile-time int in ``[0, size]`` or a run-time
        integer (checked when the load or store runs); ``()`` for None."""
        if v is None:
            return ()
        loc = self.loc(node)
        counts = v if isinstance(v, list | tuple) else [v]
        dims = "(rows, cols)" if len(shape) == 2 else "(count,)"
        if len(counts) != len(shape):
            raise VerifyError(
                f"{what} valid= takes one count per tile dim {dims} of the [{shape_str(shape)}] tile, "
                f"got {value_str(v)}",
                loc,
            )
        out = []
        for dim, (c, size) in enumerate(zip(counts, shape)):
            e = self.index(c, node, f"{what} valid count of dim {dim}")
            if isinstance(c, int) and not 0 <= c <= size:
                raise VerifyError(
                    f"{what} valid= {value_str(list(counts))}: dim {dim} count {c} is outside [0, {size}] "
                    f"(the [{shape_str(shape)}] tile)",
                    loc,
                    "valid counts how many leading rows/columns of the tile are real; it is at most the tile's size",
                )
            out.append(e)
        return tuple(out)

    def _fill_value(self, v: Any, valid: tuple, tile: TileType, node: ast.AST, what: str) -> Any:
        """``fill=``: the scalar the elements outside ``valid`` take (0 by default); None without ``valid``."""
        if v is None:
            return None if not valid else self.as_expr(0, node, like=ScalarType(tile.dtype), what=f"{what} fill")
        if not valid:
            raise VerifyError(
                f"{what} fill= without valid=: every element of the tile is read",
                self.loc(node),
                "give valid=(rows, cols) to say which part is real, or pad= for the elements outside the tensor",
            )
        return self._scalar_for(v, tile, node, f"{what} fill")

    def _scalar_for(self, v: Any, tile: TileType, node: ast.AST, what: str) -> Any:
        """A scalar some elements of ``tile`` take (``fill=``, ``pad=``): a number or a scalar
        expression the tile's dtype holds."""
        if is_expr(v):
            if not isinstance(v.type, ScalarType | IndexType):
                raise VerifyError(f"{what} must be a scalar, got {described(v)}", self.loc(node))
            if isinstance(v.type, ScalarType) and v.type.dtype.is_float and not tile.dtype.is_float:
                raise VerifyError(f"{what}: a float scalar for a {tile}", self.loc(node))
            return v
        if isinstance(v, float) and not tile.dtype.is_float and not math.isfinite(v):
            raise VerifyError(f"{what} {v!r} for a {tile}: an integer tile holds no infinity", self.loc(node))
        return self.as_expr(v, node, like=ScalarType(tile.dtype), what=what)

    def _offsets(self, offs: Any, tensor: Var, node: ast.AST, what: str) -> tuple:
        if not isinstance(offs, list | tuple) or len(offs) != len(tensor.type.shape):
            raise VerifyError(
                f"{what}: give one offset per dim of {tensor.name} ({len(tensor.type.shape)}-D), got {value_str(offs)}",
                self.loc(node),
                "a 0-dim tensor takes [] offsets" if not tensor.type.shape else None,
            )
        return tuple(self.index(o, node, f"{what} offset") for o in offs)

    def op_store(self, node: ast.Call) -> None:
        """``ts.store(tensor, offsets, tile, valid=None, dims=None, strides=None)``: emits a Store
        into a tensor parameter, the tile's dims along ``dims`` (default: the last ones); the
        tile's dtype must be the tensor's. Returns None (the call has no value).
        """
        a = self.bind(node, ["tensor", "offsets", "tile", "valid", "dims", "strides"],
                      {"valid": None, "dims": None, "strides": None})  # fmt: skip
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
        nd, shape = len(tensor.type.shape), value.type.shape
        if nd == 0:
            if shape not in ((1, 1), (1,)) or a["dims"] is not None or a["strides"] is not None:
                raise VerifyError(
                    f"ts.store: a {value.type} into the 0-dim {tensor.name}: {tensor.type}",
                    loc,
                    "store a [1, 1] tile (a reduction's ts.row_sum(ts.col_sum(t)), say) with [] offsets",
                )
        elif len(shape) > nd and a["dims"] is None:
            column = nd == 1 and shape[1] == 1
            raise VerifyError(
                f"ts.store: a {value.type} does not fit {tensor.name}: {tensor.type}",
                loc,
                f"dims=[0, None] stores the [{shape[0]}, 1] column along its one dim" if column else None,
            )
        dims = () if a["dims"] is None or nd == 0 else rules.tile_dims_given(a["dims"], nd, len(shape), "ts.store", loc)
        if any(d is None and n != 1 for d, n in zip(dims, shape)):
            raise VerifyError(
                f"ts.store: dims={list(dims)}: None is a tile dim of size 1, but the tile is a {value.type}",
                loc,
                "None adds no tensor dim, so the tile's size there must be 1",
            )
        dims = rules.canonical_dims(nd, dims) if dims else ()
        strides = rules.access_strides(a["strides"], nd, dims, len(shape), "ts.store", loc)
        offsets = self._offsets(a["offsets"], tensor, node, "ts.store")
        valid = self._valid(a["valid"], shape, node, "ts.store")
        self.emit(Store(tensor, offsets, value, valid, loc, dims, strides))
        return None

    def op_load_rows(self, node: ast.Call) -> LoadRows:
        """``ts.load_rows(tensor, rows, cols, valid=None, fill=0)``: the rows of a 2-D tensor parameter
        named by an integer tile, columns ``cols`` (a count from column 0, or ``(start, count)``)."""
        a = self.bind(node, ["tensor", "rows", "cols", "valid", "fill"], {"valid": None, "fill": None})
        loc = self.loc(node)
        tensor = self.tensor_param(a["tensor"], node, "ts.load_rows's tensor")
        if len(tensor.type.shape) != 2:
            raise VerifyError(
                f"ts.load_rows gathers rows of a 2-D tensor, got {tensor.name}: {tensor.type}",
                loc,
                "pass the kernel a 2-D region (x[b, :, :] in the orchestration)",
            )
        rows = self.tile_arg(a["rows"], node, "ts.load_rows's rows")
        rt = rows.type
        if not (rt.dtype.is_int and (len(rt.shape) == 1 or 1 in rt.shape)):
            raise VerifyError(
                f"ts.load_rows's rows must be an integer tile of shape [N], [N, 1] or [1, N], got a {rt}",
                loc,
                "make row indices with ts.load of an integer tensor, ts.iota or ts.cast(t, ts.i32)",
            )
        cols = a["cols"]
        if isinstance(cols, list | tuple) and len(cols) == 2:
            col, width = self.index(cols[0], node, "ts.load_rows column start"), cols[1]
        else:
            col, width = self.index(0, node, "ts.load_rows column start"), cols
        if not isinstance(width, int) or isinstance(width, bool) or width <= 0:
            raise VerifyError(
                f"ts.load_rows cols must be a positive compile-time count or (start, count), got {value_str(cols)}",
                loc,
            )
        if width > tensor.type.shape[1]:
            raise VerifyError(
                f"ts.load_rows: {width} columns of {tensor.name}, which has {tensor.type.shape[1]}",
                loc,
            )
        n = max(rt.shape)
        tile = TileType((n, width), tensor.type.dtype)
        valid = () if a["valid"] is None else self._valid([a["valid"]], (n,), node, "ts.load_rows")
        fill = self._fill_value(a["fill"], valid, tile, node, "ts.load_rows")
        return LoadRows(tensor, rows, col, valid[0] if valid else None, fill, tile, loc)

