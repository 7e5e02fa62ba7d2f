"""Catalogue rules for what a statement computes from its operands (see ``catalogue``): pure
functions of the parsed DSL source and the lines they apply at, each returning the edits of one
line its bug class suggests.

The bug classes, as public trackers show them:

- ``transpose_edits``: a matmul missing ``transpose_b=True`` (or with one too many), or its two
  operands exchanged;
- ``broadcast_edits``: a ``[N, 1]`` scale broadcast over rows where it belongs to columns;
- ``epilogue_edits``: an epilogue in the wrong order (``gelu(acc) + bias`` for ``gelu(acc + bias)``,
  ``alpha * acc + bias`` for ``alpha * (acc + bias)``);
- ``inf_guard_edits``: an online softmax without the ``-inf`` guard (``exp(-inf - -inf)`` is NaN on
  a fully masked block), a guarded value computed but not used;
- ``missing_guard_edits``: a square root, a log or a division without its epsilon or its floor;
- ``narrow_edits``: an accumulation in a narrow dtype (the cast after the reduction instead of
  before it, operands narrowed before a matmul, a narrow accumulator);
- ``constant_edits``: a size constant where another belongs (``1 / CHUNK`` for ``1 / COLS``), an
  attention scale of ``1 / d`` for ``1 / sqrt(d)``, a stray factor;
- ``accumulator_edits``: an accumulator overwritten in a loop instead of added to.
"""

from __future__ import annotations

import ast

from tilescope.analysis.fix.edit import Edit, Source, callee, unique

_NARROW = ("f16", "bf16")
_WIDE = "f32"
_REDUCTIONS = ("row_sum", "col_sum", "row_mean", "col_mean")


def _wrapped(src: Source, node: ast.expr) -> str:
    text = src.text_of(node)
    return text if isinstance(node, ast.Name | ast.Call | ast.Subscript | ast.Constant | ast.Attribute) else f"({text})"


def _ts(src: Source, call: ast.Call) -> str:
    """The module prefix a call is written with (``ts.``, or '' for a bare name)."""
    return src.text_of(call.func)[: -len(callee(call))]


def transpose_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each ``ts.matmul`` on ``lines`` with ``transpose_b`` (then ``transpose_a``) turned on or
    off, and with its two operands exchanged."""
    out = []
    for call in src.calls(lines, "matmul"):
        given = {k.arg: k for k in call.keywords}
        for flag in ("transpose_b", "transpose_a"):
            kw = given.get(flag)
            if kw is None:
                last = max((*call.args, *(k.value for k in call.keywords)), key=lambda n: (n.end_lineno, n.end_col_offset))
                out.append(src.splice(last.end_lineno, last.end_col_offset, last.end_col_offset, f", {flag}=True",
                                      f"the second operand is stored transposed ([N, K]): the matmul needs {flag}=True"))  # fmt: skip
            elif isinstance(kw.value, ast.Constant):
                out.append(src.edit(kw.value, str(not kw.value.value), f"{flag}={kw.value.value} is the wrong layout"))
        if len(call.args) >= 2 and call.args[0].lineno == call.args[1].end_lineno:
            a, b = call.args[0], call.args[1]
            raw = src.line(a.lineno).encode()
            text = raw[: a.col_offset] + src.text_of(b).encode() + raw[a.end_col_offset : b.col_offset] + \
                src.text_of(a).encode() + raw[b.end_col_offset :]  # fmt: skip
            out.append(src.splice(a.lineno, 0, len(raw), text.decode(), "the matmul's operands are exchanged"))
    return unique(out)


def broadcast_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each operand of ``*``, ``/``, ``+`` and ``-`` on ``lines`` transposed: a ``[N, 1]`` column
    meant as a ``[1, N]`` row (a per-channel scale broadcast over tokens)."""
    out = []
    for node in src.starting_in(lines, ast.BinOp):
        if not isinstance(node.op, ast.Mult | ast.Div | ast.Add | ast.Sub) or node.lineno != node.end_lineno:
            continue
        for side in (node.left, node.right):
            if isinstance(side, ast.Name | ast.Call | ast.Subscript):
                out.append(src.edit(side, f"{src.ts}transpose({src.text_of(side)})",
                                    f"`{src.text_of(side)}` broadcasts over the other axis: transpose it"))  # fmt: skip
    return unique(out)


def epilogue_edits(src: Source, lines: list[int]) -> list[Edit]:
    """The order of an epilogue on ``lines``: ``f(a) + b`` as ``f(a + b)`` (and back), ``x * y + z``
    as ``x * (y + z)`` (and back)."""
    out = []
    for node in src.starting_in(lines, ast.BinOp):
        if node.lineno != node.end_lineno or not isinstance(node.op, ast.Add | ast.Sub):
            continue
        sym = "+" if isinstance(node.op, ast.Add) else "-"
        left, right = node.left, node.right
        if isinstance(left, ast.Call) and len(left.args) == 1 and not left.keywords and callee(left):
            out.append(src.edit(node, f"{src.text_of(left.func)}({src.text_of(left.args[0])} {sym} {_wrapped(src, right)})",
                                f"`{callee(left)}` is applied before the `{sym} {src.text_of(right)}`: apply it to the sum"))  # fmt: skip
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mult):
            out.append(src.edit(node, f"{_wrapped(src, left.left)} * ({src.text_of(left.right)} {sym} {src.text_of(right)})",
                                f"the scale is applied before the `{sym} {src.text_of(right)}`: scale the sum"))  # fmt: skip
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and isinstance(left.right, ast.BinOp) \
                and isinstance(left.right.op, ast.Mult):  # fmt: skip
            m = left.right  # `r + g * acc + b` as `r + g * (acc + b)`
            out.append(src.edit(node, f"{src.text_of(left.left)} + {_wrapped(src, m.left)} * ({src.text_of(m.right)} "
                                      f"{sym} {src.text_of(right)})",
                                f"the scale is applied before the `{sym} {src.text_of(right)}`: scale the sum"))  # fmt: skip
    for call in src.starting_in(lines, ast.Call):
        arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add | ast.Sub) and call.lineno == call.end_lineno:
            sym = "+" if isinstance(arg.op, ast.Add) else "-"
            out.append(src.edit(call, f"{src.text_of(call.func)}({src.text_of(arg.left)}) {sym} {_wrapped(src, arg.right)}",
                                f"`{callee(call)}` applies to `{src.text_of(arg.left)}` alone; the `{sym}` comes after"))  # fmt: skip
    for node in src.starting_in(lines, ast.BinOp):
        if isinstance(node.op, ast.Mult) and isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Add | ast.Sub) \
                and node.lineno == node.end_lineno:  # fmt: skip
            inner = node.right
            sym = "+" if isinstance(inner.op, ast.Add) else "-"
            out.append(src.edit(node, f"{_wrapped(src, node.left)} * {_wrapped(src, inner.left)} {sym} {_wrapped(src, inner.right)}",
                                f"only `{src.text_of(inner.left)}` is scaled; `{src.text_of(inner.right)}` is added after"))  # fmt: skip
    return unique(out)


def inf_guard_edits(src: Source, lines: list[int]) -> list[Edit]:
    """An online softmax's ``exp(a - m)`` on ``lines`` with ``m`` guarded against ``-inf`` (a fully
    masked block's max); a guarded value the function computes but never reads, read where its
    source is; a ``-inf`` mask value as a large finite negative."""
    out = []
    for call in src.calls(lines, "exp"):
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Sub) and arg.lineno == arg.end_lineno:
            m = src.text_of(arg.right)
            guard = f"{_ts(src, call)}where({_wrapped(src, arg.right)} == float(\"-inf\"), 0.0, {m})"
            out.append(src.edit(arg.right, guard, f"when every score of a row is masked, {m} is -inf and "
                                                  f"exp(-inf - -inf) is NaN: subtract 0 there"))  # fmt: skip
    fn = src.function_at(lines[0]) if lines else None
    if fn is not None:
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for a in ast.walk(fn):
            if not (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)):
                continue
            unused = a.targets[0].id
            if unused in read or a.lineno >= max(lines):
                continue
            sources = {n.id for n in ast.walk(a.value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            for line in lines:
                for n in src.on_line(line, ast.Name):
                    if n.id in sources and isinstance(n.ctx, ast.Load):
                        out.append(src.edit(n, unused, f"{unused} (line {a.lineno}) is computed and never read: it "
                                                       f"belongs where {n.id} is"))  # fmt: skip
    for call in src.calls(lines, "where", "full"):
        for n in call.args:
            if isinstance(n, ast.Call) and callee(n) == "float" and n.args and isinstance(n.args[0], ast.Constant) \
                    and n.args[0].value == "-inf":  # fmt: skip
                out.append(src.edit(n, "-1e30", "a -inf mask value makes a fully masked row NaN (-inf - -inf): a "
                                                "large finite negative gives it weight 0 instead"))  # fmt: skip
    return unique(out)


def missing_guard_edits(src: Source, lines: list[int]) -> list[Edit]:
    """The argument of ``rsqrt``/``sqrt``/``log`` on ``lines`` plus the function's epsilon (a name
    with ``eps`` in it), and a divisor floored with ``ts.maximum`` (at the epsilon, or at 1 for a
    count)."""
    out = []
    fn = src.function_at(lines[0]) if lines else None
    eps = []
    if fn is not None:
        eps = [a.arg for a in fn.args.args if "eps" in a.arg.lower()]
        eps += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and "eps" in n.id.lower()]
    eps = list(dict.fromkeys(eps))[:2]
    for call in src.calls(lines, "rsqrt", "sqrt", "log"):
        if call.args and call.args[0].lineno == call.args[0].end_lineno:
            x = call.args[0]
            out += [src.edit(x, f"{src.text_of(x)} + {e}", f"{callee(call)} of 0 is inf (or -inf): add {e} first")
                    for e in eps]  # fmt: skip
    for node in src.starting_in(lines, ast.BinOp):
        if isinstance(node.op, ast.Div) and node.lineno == node.end_lineno and not isinstance(node.right, ast.Constant):
            d = src.text_of(node.right)
            for floor in (*eps, "1.0"):
                out.append(src.edit(node.right, f"{src.ts}maximum({d}, {floor})",
                                    f"a divisor of 0 makes inf or NaN: floor {d} at {floor}"))  # fmt: skip
    return unique(out)


def narrow_edits(src: Source, lines: list[int]) -> list[Edit]:
    """An accumulation on ``lines`` widened: ``cast(reduce(x), f32)`` as ``reduce(cast(x, f32))``
    (for a product, each factor cast); a narrowing ``cast(x, f16)`` into a matmul dropped; a
    narrow ``ts.zeros``/``ts.full`` accumulator made f32."""
    out = []
    for call in src.calls(lines, "cast"):
        if len(call.args) < 2 or call.lineno != call.end_lineno:
            continue
        inner, dtype = call.args[0], src.text_of(call.args[1])
        p = _ts(src, call)
        if isinstance(inner, ast.Call) and callee(inner) in _REDUCTIONS and inner.args:
            x = inner.args[0]
            red = src.text_of(inner.func)
            why = "the reduction adds in the narrow dtype and only its result is widened: widen before it"
            out.append(src.edit(call, f"{red}({p}cast({src.text_of(x)}, {dtype}))", why))
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult):
                factors = " * ".join(f"{p}cast({src.text_of(f)}, {dtype})" for f in _factors(x))
                out.append(src.edit(call, f"{red}({factors})", why + " (each factor: the product overflows too)"))
        if dtype.split(".")[-1] in _NARROW and isinstance(src.parents.get(call), ast.Call) and \
                callee(src.parents[call]) in ("matmul", *_REDUCTIONS):  # fmt: skip
            out.append(src.edit(call, src.text_of(inner), f"the operand is narrowed to {dtype} before it accumulates: keep it"))
    for call in src.calls(lines, "matmul", *_REDUCTIONS):  # NOTE: every operand narrowed: all kept wide at once
        narrowed = [a for a in call.args if isinstance(a, ast.Call) and callee(a) == "cast" and len(a.args) >= 2
                    and src.text_of(a.args[1]).split(".")[-1] in _NARROW and a.lineno == a.end_lineno]  # fmt: skip
        if len(narrowed) > 1 and all(a.lineno == call.lineno for a in narrowed):
            raw, text, at = src.line(call.lineno).encode(), b"", 0
            for a in sorted(narrowed, key=lambda a: a.col_offset):
                text += raw[at : a.col_offset] + src.text_of(a.args[0]).encode()
                at = a.end_col_offset
            out.append(src.splice(call.lineno, 0, len(raw), (text + raw[at:]).decode(),
                                  f"the operands are narrowed before the {callee(call)} accumulates them: keep them"))  # fmt: skip
    for call in src.calls(lines, "zeros", "full"):
        for arg in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(arg, ast.Attribute) and arg.attr in _NARROW:
                out.append(src.edit(arg, src.text_of(arg)[: -len(arg.attr)] + _WIDE,
                                    f"the accumulator is {arg.attr}: partial sums lose precision (or overflow)"))  # fmt: skip
    return unique(out)


def accumulator_edits(src: Source, lines: list[int]) -> list[Edit]:
    """``v = e`` in a loop, where ``v`` was given a value before the loop and ``e`` does not read it,
    as ``v = v + e``: an accumulator overwritten each iteration instead of added to."""
    out = []
    for a in src.starting_in(lines, ast.Assign):
        if not (len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and a.lineno == a.end_lineno):
            continue
        v = a.targets[0].id
        if any(isinstance(n, ast.Name) and n.id == v for n in ast.walk(a.value)):
            continue
        loop = src.parents.get(a)
        while loop is not None and not isinstance(loop, ast.For | ast.FunctionDef):
            loop = src.parents.get(loop)
        fn = src.function_of(a)
        if not isinstance(loop, ast.For) or fn is None or src.definition(fn, v, loop.lineno) is None:
            continue
        out.append(src.edit(a.value, f"{v} + {_wrapped(src, a.value)}",
                            f"{v} is overwritten in every iteration of the loop: add to it"))  # fmt: skip
    return unique(out)


def constant_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each upper-case constant on ``lines`` as each other upper-case constant its function uses
    (a size where another size belongs); ``1.0 / D`` as ``1.0 / math.sqrt(D)`` (an attention scale);
    a stray numeric factor dropped (``row_mean(t) * 0.5`` as ``row_mean(t)``)."""
    out = []
    for node in src.starting_in(lines, ast.BinOp):
        if isinstance(node.op, ast.Mult | ast.Div) and node.lineno == node.end_lineno:
            sides = [(node.right, node.left)] + ([(node.left, node.right)] if isinstance(node.op, ast.Mult) else [])
            for factor, other in sides:
                if isinstance(factor, ast.Constant) and isinstance(factor.value, int | float) and factor.value not in (0, 1):
                    out.append(src.edit(node, src.text_of(other), f"the factor {factor.value} does not belong here"))
    fn = src.function_at(lines[0]) if lines else None
    if fn is None:
        return []
    consts = list(dict.fromkeys(n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id.isupper() and len(n.id) > 1))
    for line in lines:
        for n in src.on_line(line, ast.Name):
            if n.id in consts and isinstance(n.ctx, ast.Load):
                out += [src.edit(n, c, f"{n.id} is the wrong size here: {c} is meant") for c in consts if c != n.id]
    for node in src.starting_in(lines, ast.BinOp):
        if isinstance(node.op, ast.Div) and isinstance(node.left, ast.Constant) and node.lineno == node.end_lineno \
                and not (isinstance(node.right, ast.Call) and callee(node.right) == "sqrt"):  # fmt: skip
            out.append(src.edit(node.right, f"math.sqrt({src.text_of(node.right)})" if _imports_math(src) else
                                f"({src.text_of(node.right)}) ** 0.5",
                                "an attention scale is 1 / sqrt(d), not 1 / d"))  # fmt: skip
    return unique(out)


def _imports_math(src: Source) -> bool:
    return any(isinstance(n, ast.Import) and any(a.name == "math" and a.asname is None for a in n.names)
               for n in src.tree.body)  # fmt: skip


def _factors(node: ast.expr) -> list[ast.expr]:
    """The factors of a product ``a * b * c``, left to right."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]
