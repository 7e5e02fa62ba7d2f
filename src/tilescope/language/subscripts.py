"""Subscripts in DSL code: ``x[a:b, c]`` of a tensor in an orchestration (a region, or with
every dim indexed a run-time read of one element), ``t[r0:r1, c0:c1]`` of a tile in a kernel
(a static sub-tile), and a compile-time list's item. Mixed into the front-end's lowering class.

Invariants: a region holds at least one element and its compile-time bounds lie inside the
tensor; a tile slice has compile-time bounds inside the tile; a read is of an integer tensor
and runs once, where it is written (``name = t[i]``, else it gets a variable of its own).
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from tilescope.errors import VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir.affine import affine
from tilescope.ir.nodes import BinOp, Const, Slice, SliceRange, TensorRead, TileSlice, Var
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import INDEX, ScalarType, TensorType, TileType

# the dtypes an orchestration may read (TensorRead): the integer ones
_READABLE = tuple(d for d in dt.ALL_DTYPES if d.is_int)


class Subscripts:
    """``base[...]`` of every kind; the host class provides ``expr``, ``index``, ``loc``, ``error``,
    ``fold``, ``mode``, ``what`` and ``new_var``."""

    def subscript(self, base: Any, sl: ast.expr, node: ast.AST) -> Any:
        """``base[sl]``: a compile-time list item, or a tensor region in an orchestration; anything
        else (a kernel tensor, a region, a tile) is an error saying what to write instead.
        """
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
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            if len(elts) == len(base.type.shape) and not any(isinstance(e, ast.Slice) for e in elts):
                return self.tensor_read(base, elts, node)
            return self.slice(base, sl, node)
        if isinstance(base, Slice):
            raise self.error(node, "a region cannot be sliced again", "slice the tensor once: x[a:b, c:d]")
        if is_expr(base) and isinstance(base.type, TileType):
            return self.tile_slice(base, sl, node)
        if is_expr(base):
            raise self.error(node, f"a {base.type} cannot be indexed")
        raise self.error(node, f"{described(base)} cannot be indexed in {self.what()}")

    def slice(self, base: Var, sl: ast.expr, node: ast.AST) -> Slice:
        """The region ``base[sl]``: one SliceRange per dim (missing dims are whole, an integer index
        squeezes its dim, negative compile-time bounds count from the end). A dim whose extent is not
        constant is -1 in the type; compile-time bounds must lie inside the tensor.
        """
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
            if (
                isinstance(start, int)
                and isinstance(stop, int)
                and 0 <= start
                and stop <= size
                and start >= stop
            ):
                raise VerifyError(
                    f"slice of {base.name} dim {dim}: [{start}, {stop}) is empty (start {start} >= stop {stop}); "
                    "a region holds at least one element",
                    loc,
                    "slice a:b with a < b",
                )
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

    def tensor_read(self, base: Var, elts: list[ast.expr], node: ast.AST) -> Any:
        """``counts[e]`` (every dim indexed) in an orchestration: a run-time read of one element of
        an integer tensor. Compile-time indices must lie inside the tensor (a negative one counts
        from the end). Read as the whole value of ``name = ...`` it is that assignment's value;
        anywhere else it gets a variable of its own first, so it runs once, where it is written."""
        loc = self.loc(node)
        t: TensorType = base.type
        if not t.dtype.is_int:
            raise VerifyError(
                f"the orchestration reads an element of {base.name} ({t}): only integer tensors "
                f"({', '.join(dt.name for dt in _READABLE)}) can be read; orchestrations never touch tile data",
                loc,
                f"pass {base.name} to a kernel, or slice it ({base.name}[a:a + 1, ...]) to give a kernel a region",
            )
        indices = []
        for dim, (e, size) in enumerate(zip(elts, t.shape)):
            i = self.expr(e)
            if isinstance(i, int) and not isinstance(i, bool):
                if not -size <= i < size:
                    raise VerifyError(
                        f"index {i} of {base.name} dim {dim} is outside the tensor's shape {list(t.shape)}", loc
                    )
                i %= size
            indices.append(self.index(i, e, f"index {dim} of {base.name}"))
        read = TensorRead(base, tuple(indices), ScalarType(t.dtype), loc)
        if getattr(self, "bare_read", None) is node:
            return read
        return self.new_var(f"{base.name}_read", read, loc)


    def tile_slice(self, base: Any, sl: ast.expr, node: ast.AST) -> TileSlice:
        """``t[r0:r1, c0:c1]``: a static sub-tile (compile-time bounds, step 1, negative bounds count
        from the end, missing dims whole); an integer index drops its dim as numpy does."""
        loc = self.loc(node)
        shape = base.type.shape
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if len(elts) > len(shape):
            raise VerifyError(f"{len(elts)} indices for a {base.type}", loc)
        starts, sizes, kept = [], [], []
        for dim, size in enumerate(shape):
            e = elts[dim] if dim < len(elts) else ast.Slice()
            if isinstance(e, ast.Slice):
                if e.step is not None and self.expr(e.step) != 1:
                    raise self.error(e, "tile slices take step 1", "write t[a:b]")
                bounds = [self.expr(b) if b is not None else d for b, d in ((e.lower, 0), (e.upper, size))]
            else:
                i = self.expr(e)
                bounds = [i, (size if i == -1 else i + 1) if isinstance(i, int) else i]
            for b in bounds:
                if not isinstance(b, int) or isinstance(b, bool):
                    raise VerifyError(
                        f"tile slice bounds must be compile-time ints, got {value_str(b)}"
                        + (f" (a {b.type}, known only at run time)" if is_expr(b) else ""),
                        loc,
                        "a tile's shape is static; to take a run-time part of a tensor use ts.load(..., valid=)",
                    )
            a, b = (x + size if x < 0 else x for x in bounds)
            if not 0 <= a < b <= size:
                raise VerifyError(
                    f"tile slice dim {dim}: [{bounds[0]}, {bounds[1]}) is empty or outside the {base.type}",
                    loc,
                    f"bounds must satisfy 0 <= start < stop <= {size}",
                )
            starts.append(a)
            sizes.append(b - a)
            if isinstance(e, ast.Slice):
                kept.append(b - a)
        if not kept:
            raise VerifyError(
                f"indexing every dim of a {base.type} leaves a single element, not a tile",
                loc,
                "keep a dim: t[i:i + 1, j:j + 1]",
            )
        return TileSlice(base, tuple(starts), tuple(sizes), TileType(tuple(kept), base.type.dtype), loc)
