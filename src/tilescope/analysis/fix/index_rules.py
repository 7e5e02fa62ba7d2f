"""Catalogue rules for where a tile or a region is: offsets, slices, bounds and masks (see
``catalogue``). Each is a pure function of the parsed DSL source and the lines it applies at,
returning the edits of one line its bug class suggests; whether an edit is right is for the
screening and the verification to say, so a rule proposes every form of its repair and leaves
out only what cannot parse.

The bug classes, as public trackers show them:

- ``swapped_name_edits``: two names exchanged in one statement (``q`` for ``k``, ``[k, n0]`` for
  ``[n0, k]``, ``silu(u) * g`` for ``silu(g) * u``);
- ``offset_edits``: a constant offset where the loop's variable belongs (``[0, 0]`` for
  ``[0, n]``), a reversed index (``K - 1 - k`` for ``k``), a neighbouring column;
- ``sibling_slice_edits``: one argument of a call sliced with another argument's index or bounds
  (``beta[n * G : ...]`` beside ``gamma[c0 : ...]``);
- ``shifted_slice_edits``: a slice one element off (``pos - 1 : pos - 1 + n``, labels not shifted);
- ``bound_edits``: a run-time bound off by one (``n // B`` for ``(n + B - 1) // B``, ``blk + 1``,
  ``min(a - 1, b)``, a loop stopping one block short);
- ``tail_mask_edits``: a load or store of the tail block without ``valid=``, or a ``valid=`` load
  filled with the wrong value for what reduces it;
- ``iota_offset_edits``: an ``iota`` mask missing its block's offset;
- ``comparison_edits``: a mask's comparison too strict, too loose, or the wrong way round.
"""

from __future__ import annotations

import ast
import itertools

from tilescope.analysis.fix.edit import Edit, Source, callee, unique

# names that are never a value to exchange: modules, builtins the DSL reads, dtypes' namespace
_NOT_VALUES = frozenset({"ts", "math", "float", "int", "min", "max", "abs", "range", "len", "True", "False", "None"})
_OFFSET_CALLS = ("load", "store")


def _value_names(src: Source, nodes: list[ast.AST]) -> list[str]:
    """The names read in ``nodes`` that stand for values (not a call's function, not a module)."""
    called = {id(n.func) for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call)}
    seen = [n.id for node in nodes for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in called and n.id not in _NOT_VALUES]  # fmt: skip
    return list(dict.fromkeys(seen))


def _one_line_statements(src: Source, lines: list[int]) -> list[ast.stmt]:
    """The simple statements that start on ``lines``, and the one-line pieces (arguments) of a
    statement written over several lines."""
    out: list[ast.AST] = []
    for s in src.starting_in(lines, ast.stmt):
        if hasattr(s, "body"):
            if isinstance(s, ast.For) and s.iter.lineno == s.iter.end_lineno:
                out.append(s.iter)
            continue
        out.append(s)
    return out


def swapped_name_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Every pair of names read on one of ``lines`` exchanged, everywhere on that line."""
    out = []
    for line in dict.fromkeys(lines):
        nodes = [n for n in src.on_line(line, ast.expr) if not _inside_line(src.parents.get(n), line)]
        names = _value_names(src, nodes)[:10]
        raw = src.line(line).encode()
        for a, b in itertools.combinations(names, 2):
            spots = sorted((n.col_offset, n.end_col_offset, n.id) for node in nodes for n in ast.walk(node)
                           if isinstance(n, ast.Name) and n.id in (a, b) and isinstance(n.ctx, ast.Load))  # fmt: skip
            text, at = b"", 0
            for s, e, name in spots:
                text += raw[at:s] + (b if name == a else a).encode()
                at = e
            out.append(src.splice(line, 0, len(raw), (text + raw[at:]).decode(),
                                  f"`{a}` and `{b}` are exchanged on this line: each stands where the other belongs"))  # fmt: skip
    return unique(out)


def _inside_line(node: ast.AST | None, line: int) -> bool:
    """``node`` is an expression lying on ``line`` alone."""
    return isinstance(node, ast.expr) and node.lineno == node.end_lineno == line


def _offsets(call: ast.Call) -> list[ast.expr]:
    """The offset expressions of a ``ts.load``/``ts.store`` (its second argument's elements) and
    the column start of a ``ts.load_rows``' ``(c0, n)``."""
    name = callee(call)
    if name in _OFFSET_CALLS and len(call.args) > 1 and isinstance(call.args[1], ast.List | ast.Tuple):
        return list(call.args[1].elts)
    if name == "load_rows" and len(call.args) > 2 and isinstance(call.args[2], ast.Tuple) and call.args[2].elts:
        return [call.args[2].elts[0]]
    return []


def offset_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each offset of a load or store on ``lines``: a literal 0 as each loop variable in scope;
    ``N - 1 - v`` as ``v``; a small literal one more or one less; two offsets exchanged."""
    out = []
    for call in src.starting_in(lines, ast.Call):
        offs = _offsets(call)
        scope = src.loop_vars(call)
        for o in offs:
            lit = o.value if isinstance(o, ast.Constant) and isinstance(o.value, int) and not isinstance(o.value, bool) else None
            if lit == 0:
                out += [src.edit(o, v, f"the offset is 0 in every iteration: the block of loop variable {v} is meant")
                        for v in scope]  # fmt: skip
            if lit is not None and 0 <= lit < 8:
                out += [src.edit(o, str(k), "the offset names the neighbouring column (an index taken from the wrong "
                                             "column)") for k in (lit + 1, lit - 1) if k >= 0]  # fmt: skip
            if isinstance(o, ast.BinOp) and isinstance(o.op, ast.Sub) and isinstance(o.right, ast.Name):
                left = o.left
                if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and _is_int(left.right, 1):
                    out.append(src.edit(o, o.right.id, f"`{src.text_of(o)}` reverses the order: the index is "
                                                       f"{o.right.id} itself"))  # fmt: skip
        for a, b in itertools.combinations(offs, 2):
            if a.lineno == a.end_lineno == b.lineno == b.end_lineno and src.text_of(a) != src.text_of(b):
                raw = src.line(a.lineno).encode()
                (s1, e1, t1), (s2, e2, t2) = sorted([(a.col_offset, a.end_col_offset, src.text_of(b)),
                                                     (b.col_offset, b.end_col_offset, src.text_of(a))])  # fmt: skip
                text = raw[:s1] + t1.encode() + raw[e1:s2] + t2.encode() + raw[e2:]
                out.append(src.splice(a.lineno, 0, len(raw), text.decode(), "two offsets are exchanged"))
    return unique(out)


def _is_int(node: ast.AST, value: int) -> bool:
    return isinstance(node, ast.Constant) and node.value == value and not isinstance(node.value, bool)


def _dims(sub: ast.Subscript) -> list[ast.expr]:
    return list(sub.slice.elts) if isinstance(sub.slice, ast.Tuple) else [sub.slice]


def sibling_slice_edits(src: Source, lines: list[int]) -> list[Edit]:
    """In a call whose arguments are slices, each argument's index in one dim written as another
    argument's index in the same dim (a slice copied from the line above and not updated)."""
    out = []
    for call in src.starting_in(lines, ast.Call):
        subs = [a for a in call.args if isinstance(a, ast.Subscript)]
        for target, model in itertools.permutations(subs, 2):
            if target.lineno not in lines:
                continue
            for d, (mine, theirs) in enumerate(zip(_dims(target), _dims(model), strict=False)):
                if isinstance(mine, ast.Slice) != isinstance(theirs, ast.Slice):
                    continue
                if (isinstance(mine, ast.Slice) and mine.lower is None) or src.text_of(mine) == src.text_of(theirs):
                    continue
                name = target.value.id if isinstance(target.value, ast.Name) else "the argument"
                out.append(src.edit(mine, src.text_of(theirs),
                                    f"dim {d} of {name} is indexed as the other arguments are (`{src.text_of(theirs)}`)"))  # fmt: skip
    return unique(out)


def shifted_slice_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each ``a : b`` slice on ``lines`` one element over: ``v - 1 : v - 1 + n`` as ``v : v + n``,
    and ``v : v + n`` as ``v + 1 : v + 1 + n`` or ``v - 1 : v - 1 + n`` (labels not shifted); a
    slice written the same in several arguments (a cache's k and v) also moved in all of them."""
    out: list[Edit | None] = []
    groups: dict[tuple[int, str], list[ast.Slice]] = {}
    for sub in src.starting_in(lines, ast.Subscript):
        for d in _dims(sub):
            if isinstance(d, ast.Slice) and d.lower is not None and d.upper is not None and d.lineno == d.end_lineno:
                groups.setdefault((d.lineno, src.text_of(d)), []).append(d)
    for (line, _), same in groups.items():
        for text, why in _shifted(src, same[0]):
            out += [src.edit(d, text, why) for d in same]
            if len(same) > 1:
                raw, new, at = src.line(line).encode(), b"", 0
                for d in sorted(same, key=lambda d: d.col_offset):
                    new += raw[at : d.col_offset] + text.encode()
                    at = d.end_col_offset
                out.append(src.splice(line, 0, len(raw), (new + raw[at:]).decode(), f"{why} (in every argument)"))
    return unique(out)


def _shifted(src: Source, d: ast.Slice) -> list[tuple[str, str]]:
    """Slice ``d`` one element over, each way, or its shift dropped: (text, why)."""
    low, text = d.lower, src.text_of(d)
    if isinstance(low, ast.BinOp) and isinstance(low.op, ast.Add | ast.Sub) and _is_int(low.right, 1):
        return [(text.replace(src.text_of(low), src.text_of(low.left)), "the slice is one element over: drop the shift")]
    if isinstance(low, ast.Name):
        return [(f"{shift} : {src.renamed(d.upper, low.id, shift)}",
                 f"the slice starts one element over ({shift}): its data are one position apart")
                for shift in (f"{low.id} + 1", f"{low.id} - 1")]  # fmt: skip
    return []


def _bound_variants(src: Source, e: ast.expr) -> list[tuple[str, str]]:
    """The off-by-one variants of a run-time bound ``e``: (text, why)."""
    text = src.text_of(e)
    out = []
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add | ast.Sub):
        out.append((src.text_of(e.left), "the bound's offset makes it one step off: drop it"))
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.FloorDiv):
        a, b = src.text_of(e.left), src.text_of(e.right)
        out.append((f"({a} + {b} - 1) // {b}", "a floor division drops the partial last block: round up"))
        if isinstance(e.left, ast.BinOp) and isinstance(e.left.op, ast.Sub) and _is_int(e.left.right, 1):
            n = src.text_of(e.left.left)
            out.append((f"({n} + {b} - 1) // {b}", f"`({n} - 1) // {b}` drops the last block: round {n} up"))
            out.append((f"{n} // {b} - 1", "`(n - 1) // B` is not the last block's index"))
    if not isinstance(e, ast.Constant):
        wrap = text if isinstance(e, ast.Name | ast.Call | ast.Attribute | ast.Subscript) else f"({text})"
        out += [(f"{wrap} + 1", "the bound is one short"), (f"{wrap} - 1", "the bound is one too far")]
    return out


def bound_edits(src: Source, lines: list[int]) -> list[Edit]:
    """The run-time bounds on ``lines`` one off: a ``ts.range`` stop, the arguments of ``min`` and
    ``ts.minimum``, the counts of ``valid=``."""
    out = []
    for call in src.starting_in(lines, ast.Call):
        name = callee(call)
        bounds: list[ast.expr] = []
        if name == "range" and len(call.args) >= 2:
            bounds.append(call.args[1])
        elif name in ("min", "minimum"):
            bounds += [a for a in call.args if not isinstance(a, ast.Constant)]
        for kw in call.keywords:
            if kw.arg == "valid" and isinstance(kw.value, ast.Tuple):
                bounds += [v for v in kw.value.elts if not isinstance(v, ast.Constant)]
        for e in bounds:
            out += [src.edit(e, text, why) for text, why in _bound_variants(src, e)]
    return unique(out)


def _loop_of(src: Source, node: ast.AST, var: str) -> ast.For | None:
    p = src.parents.get(node)
    while p is not None and not isinstance(p, ast.FunctionDef):
        if isinstance(p, ast.For) and isinstance(p.target, ast.Name) and p.target.id == var:
            return p
        p = src.parents.get(p)
    return None


def tail_mask_edits(src: Source, lines: list[int]) -> list[Edit]:
    """A ``ts.load`` or ``ts.store`` on ``lines`` without ``valid=``, given the counts of the tail
    block (``min(stop - offset, size)`` for an offset stepped by a loop, or a count the kernel
    already computed with ``min``); a ``valid=`` load given the fill of a max (``-inf``) or of a
    sum (0)."""
    out = []
    for call in src.calls(lines, "load_rows"):
        if "valid" not in {k.arg for k in call.keywords}:
            out += [_keyword(src, call, f"valid={n}", f"the gather reads every row of the index tile: only the first "
                                                      f"{n} are indices of this block") for n in _counted(src, call)]  # fmt: skip
    for call in src.calls(lines, *_OFFSET_CALLS):
        kws = {k.arg for k in call.keywords}
        offs = _offsets(call)
        if "valid" in kws:
            if callee(call) == "load" and "fill" not in kws:
                out += [_keyword(src, call, f"fill={v}", f"the tail is filled with 0, which a max (or min) sees: "
                                                        f"fill it with {v}") for v in ('float("-inf")', 'float("inf")')]  # fmt: skip
            continue
        sizes = _sizes(src, call)
        if sizes is None or len(sizes) < len(offs):
            continue
        sizes = sizes[len(sizes) - len(offs):] if len(sizes) > len(offs) else sizes
        counts = _counted(src, call)
        for d, o in enumerate(offs):
            for count in _tail_counts(src, call, o, sizes[d]) + counts:
                valid = ", ".join(count if k == d else sizes[k] for k in range(len(offs)))
                valid = f"({valid},)" if len(offs) == 1 else f"({valid})"
                out.append(_keyword(src, call, f"valid={valid}",
                                    f"the last block runs past the data in dim {d}: only its first {count} count"))  # fmt: skip
    return unique(out)


def _sizes(src: Source, call: ast.Call) -> list[str] | None:
    if callee(call) == "load" and len(call.args) > 2 and isinstance(call.args[2], ast.List | ast.Tuple):
        return [src.text_of(e) for e in call.args[2].elts]
    return None  # NOTE: a store's size is its tile's: only a load's is written out


def _tail_counts(src: Source, call: ast.Call, offset: ast.expr, size: str) -> list[str]:
    """``min(stop - offset, size)`` for each loop variable in ``offset`` whose loop's stop is an
    expression (a run-time or a ragged length)."""
    out = []
    for n in ast.walk(offset):
        if isinstance(n, ast.Name):
            loop = _loop_of(src, call, n.id)
            if loop is not None and isinstance(loop.iter, ast.Call) and len(loop.iter.args) >= 2:
                stop = src.text_of(loop.iter.args[1])
                stop = stop if isinstance(loop.iter.args[1], ast.Name | ast.Constant | ast.Attribute) else f"({stop})"
                out.append(f"min({stop} - {src.text_of(offset)}, {size})")
    return list(dict.fromkeys(out))


def _counted(src: Source, call: ast.Call) -> list[str]:
    """The names the kernel assigns from a ``min(...)`` before ``call``: counts already computed."""
    fn = src.function_of(call)
    if fn is None:
        return []
    out = [a.targets[0].id for a in ast.walk(fn) if isinstance(a, ast.Assign) and a.lineno < call.lineno
           and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Call)
           and callee(a.value) in ("min", "minimum")]  # fmt: skip
    return list(dict.fromkeys(out))


def _keyword(src: Source, call: ast.Call, text: str, why: str) -> Edit | None:
    """``call`` with the keyword argument ``text`` added after its last argument (on that line)."""
    last = max((*call.args, *(k.value for k in call.keywords)), key=lambda n: (n.end_lineno, n.end_col_offset),
               default=None)  # fmt: skip
    if last is None:
        return None
    return src.splice(last.end_lineno, last.end_col_offset, last.end_col_offset, f", {text}", why)


def iota_offset_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each ``ts.iota(...)`` on ``lines`` that is not already offset, plus each loop variable in
    scope: the mask of a block counts from the block's start."""
    out = []
    for call in src.calls(lines, "iota"):
        parent = src.parents.get(call)
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):
            continue
        text = src.text_of(call)
        out += [src.edit(call, f"{text} + {v}", f"the iota counts from 0 in every block: add the block's offset {v}")
                for v in src.loop_vars(call)]  # fmt: skip
    return unique(out)


_FLIPS = {ast.Lt: ("<=", ">"), ast.LtE: ("<", ">="), ast.Gt: (">=", "<"), ast.GtE: (">", "<="),
          ast.Eq: ("!=",), ast.NotEq: ("==",)}  # fmt: skip


def comparison_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each comparison on ``lines`` made strict or loose, and turned the other way round."""
    out = []
    for cmp in src.starting_in(lines, ast.Compare):
        if len(cmp.ops) != 1 or cmp.left.end_lineno != cmp.comparators[0].lineno:
            continue
        line = cmp.left.end_lineno
        raw = src.line(line).encode()
        gap = raw[cmp.left.end_col_offset : cmp.comparators[0].col_offset].decode()
        symbol = gap.strip()
        at = cmp.left.end_col_offset + len(gap[: gap.index(symbol)].encode())
        for other in _FLIPS.get(type(cmp.ops[0]), ()):
            out.append(src.splice(line, at, at + len(symbol.encode()), other,
                                  f"`{other}` where the program has `{symbol}`: the mask's edge (or its side) is off"))  # fmt: skip
    return unique(out)


def clamp_edits(src: Source, lines: list[int]) -> list[Edit]:
    """The row indices of a ``ts.load_rows`` on ``lines`` kept inside the table: clamped to its
    first dim (read from the param's annotation), or set to 0 where a mask the kernel computed
    is false (an id outside this shard, a padding slot)."""
    out = []
    for call in src.calls(lines, "load_rows"):
        if len(call.args) < 2 or call.args[1].lineno != call.args[1].end_lineno:
            continue
        rows, table = call.args[1], call.args[0]
        text = src.text_of(rows)
        bound = _first_dim(src, call, table)
        if bound is not None:
            out.append(src.edit(rows, f"{src.ts}minimum({src.ts}maximum({text}, 0), {bound} - 1)",
                                f"an index outside the table reads past it: clamp {text} to [0, {bound})"))  # fmt: skip
        for mask in _masks(src, call):
            out.append(src.edit(rows, f"{src.ts}where({mask}, {text}, 0)",
                                f"the rows {mask} excludes are still gathered: read row 0 for them"))  # fmt: skip
    return unique(out)


def _first_dim(src: Source, call: ast.Call, table: ast.expr) -> str | None:
    """The text of the first dim of the kernel param ``table`` names (``ts.Tensor[[V, D], ...]``)."""
    fn = src.function_of(call)
    if fn is None or not isinstance(table, ast.Name):
        return None
    arg = next((a for a in fn.args.args if a.arg == table.id), None)
    ann = arg.annotation if arg is not None else None
    if isinstance(ann, ast.Subscript):
        spec = ann.slice.elts[0] if isinstance(ann.slice, ast.Tuple) and ann.slice.elts else None
        if isinstance(spec, ast.List) and spec.elts:
            return src.text_of(spec.elts[0])
    return None


def _masks(src: Source, call: ast.Call) -> list[str]:
    """The names the kernel assigns a comparison or a logical op to before ``call``."""
    fn = src.function_of(call)
    if fn is None:
        return []
    out = [a.targets[0].id for a in ast.walk(fn) if isinstance(a, ast.Assign) and a.lineno < call.lineno
           and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
           and (isinstance(a.value, ast.Compare) or (isinstance(a.value, ast.Call)
                and callee(a.value) in ("logical_and", "logical_or", "logical_not")))]  # fmt: skip
    return list(dict.fromkeys(out))


def sibling_name_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each name on ``lines`` written as a sibling of it the function also uses: one that differs
    in its last ``_`` part or its last character (``n_a`` for ``n_b``, ``x0`` for ``x1``)."""
    out = []
    fn = src.function_at(lines[0]) if lines else None
    if fn is None:
        return []
    known = list(dict.fromkeys([a.arg for a in fn.args.args] + [n.id for n in ast.walk(fn) if isinstance(n, ast.Name)]))
    for line in dict.fromkeys(lines):
        for n in src.on_line(line, ast.Name):
            if not isinstance(n.ctx, ast.Load) or n.id in _NOT_VALUES or _is_callee(src, n):
                continue
            for other in known:
                if other != n.id and _siblings(n.id, other):
                    out.append(src.edit(n, other, f"`{n.id}` stands where its sibling `{other}` belongs"))
    return unique(out)


def _is_callee(src: Source, n: ast.Name) -> bool:
    p = src.parents.get(n)
    return isinstance(p, ast.Call) and p.func is n


def _siblings(a: str, b: str) -> bool:
    """Two names of one family: the same but for their last ``_`` part, or their last character."""
    if len(a) > 1 and len(b) > 1 and len(a) == len(b) and a[:-1] == b[:-1]:
        return True
    head_a, _, tail_a = a.rpartition("_")
    head_b, _, tail_b = b.rpartition("_")
    return bool(head_a) and head_a == head_b and tail_a != tail_b


def stride_edits(src: Source, lines: list[int]) -> list[Edit]:
    """In a call's arguments that slice one tensor, each loop variable scaled by 2 in every one of
    them (``x[n, i]``, ``x[n, i + 1]`` as ``x[n, 2 * i]``, ``x[n, 2 * i + 1]``): a stride left out."""
    out = []
    for call in src.starting_in(lines, ast.Call):
        subs: dict[str, list[ast.Subscript]] = {}
        for a in call.args:
            if isinstance(a, ast.Subscript) and isinstance(a.value, ast.Name) and a.lineno == a.end_lineno:
                subs.setdefault(a.value.id, []).append(a)
        for tensor, group in subs.items():
            line = group[0].lineno
            if any(g.lineno != line for g in group):
                continue
            for v in src.loop_vars(call):
                spots = sorted((n.col_offset, n.end_col_offset) for g in group for n in ast.walk(g.slice)
                               if isinstance(n, ast.Name) and n.id == v)  # fmt: skip
                if not spots:
                    continue
                raw, text, at = src.line(line).encode(), b"", 0
                for a, b in spots:
                    text += raw[at:a] + f"2 * {v}".encode()
                    at = b
                out.append(src.splice(line, 0, len(raw), (text + raw[at:]).decode(),
                                      f"{tensor} is indexed with stride 1 in {v}: its blocks are 2 apart"))  # fmt: skip
    return unique(out)
