"""The rules that turn a culprit into candidate edits of the DSL source (``debug.triage.fix``).

Each rule reads the culprit's line (and, for the numerically stable forms, the lines that feed
it) and returns the edits its evidence points to, in the order they are worth trying:

- ``cast_mode_edits``: the cast's ``mode`` (a rounding-signature mismatch);
- ``loop_variable_edits``: an index (a slice bound, a load/store offset) with its loop variable
  swapped for another in scope (a block written where another block belongs);
- ``sibling_op_edits``: a reduction for its siblings (``row_sum``/``row_max``/``row_min``,
  ``col_sum``/``col_max``), an operator for the others, ``maximum`` for ``minimum``;
  ``sibling_call_edits`` the same for every reduction and max/min call on the lines that feed a
  NaN;
- ``stable_exp_edits``: ``exp(x)`` as ``exp(x - row_max(x))`` (exp overflow);
- ``stable_variance_edits``: ``sum(t * t) * c - m * m`` as ``sum((t - m) * (t - m)) * c``
  (cancellation);
- ``orchestration_loop_edits``: an orchestration loop one step longer (an output region no task
  was given);
- ``inout_edits``: an Out param that the kernel reads, declared ``InOut``.
"""

from __future__ import annotations

import ast

from tilescope.analysis.fix.edit import Edit, Source, callee, unique
from tilescope.ir.nodes import CAST_MODES  # rint first, as torch rounds
from tilescope.ir.op_registry import reduce_ops

_MODE_WORDS = {"rint": "to nearest, ties to even, as torch", "round": "to nearest, ties away from zero",
               "floor": "toward -Inf", "ceil": "toward +Inf", "trunc": "toward zero"}  # fmt: skip
# siblings: the reductions of one side giving values, and those giving indices (argmax, argmin)
REDUCTIONS = tuple(tuple(r for r in reduce_ops() if r.startswith(side) and r.endswith(("_argmax", "_argmin")) == index)
                   for side in ("row_", "col_") for index in (False, True))  # fmt: skip
_OPERATORS = {"add": ast.Add, "sub": ast.Sub, "mul": ast.Mult, "div": ast.Div}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def cast_mode_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Each other rounding ``mode`` of the ``ts.cast`` calls on ``lines``."""
    out = []
    for call in src.calls(lines, "cast"):
        kw = next((k for k in call.keywords if k.arg == "mode"), None)
        given = kw.value if kw is not None else (call.args[2] if len(call.args) > 2 else None)
        if given is not None and not isinstance(given, ast.Constant):
            continue  # NOTE: a mode the code computes is not a literal to change
        now = given.value if given is not None else "rint"
        last = max((*call.args, *(k.value for k in call.keywords)), key=lambda n: (n.end_lineno, n.end_col_offset),
                   default=None)  # fmt: skip
        for mode in CAST_MODES:
            if mode == now:
                continue
            why = f"the cast rounds {_MODE_WORDS.get(now, now)} (mode={now!r}); the golden rounds {_MODE_WORDS[mode]}"
            if given is not None:
                out.append(src.edit(given, f'"{mode}"', why))
            elif last is not None:  # NOTE: the default is rint: another mode is a keyword after the last argument
                out.append(src.splice(last.end_lineno, last.end_col_offset, last.end_col_offset, f', mode="{mode}"', why))
    return unique(out)


def loop_variable_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Every index on ``lines`` (one dim of a slice, one offset of a load or store) that uses a
    loop variable, with that variable swapped for each other loop variable in scope (and, in an
    orchestration, each run-time index it read before the call)."""
    out = []
    for call in src.starting_in(lines, ast.Call):
        scope = list(dict.fromkeys(src.loop_vars(call) + _orchestration_indices(src, call)))
        if len(scope) < 2:
            continue
        for where, index in _indices(call):
            if index.lineno != index.end_lineno:
                continue
            used = [v for v in scope if any(isinstance(n, ast.Name) and n.id == v for n in ast.walk(index))]
            for v in used:
                for w in scope:
                    if w != v:
                        why = f"{where} steps with loop variable {v}: the block it names belongs to {w}"
                        out.append(src.edit(index, src.renamed(index, v, w), why))
    return unique(out)


def _orchestration_indices(src: Source, call: ast.Call) -> list[str]:
    """In an orchestration (a ``@ts.jit`` function), the names it assigns before ``call`` whose
    value is read from a tensor (``tok = token_ids[e, i]``) or computed from numbers: run-time
    indices a slice may be meant to step with."""
    fn = src.function_of(call)
    if fn is None or not any("jit" in src.text_of(d) for d in fn.decorator_list):
        return []
    return [a.targets[0].id for a in ast.walk(fn) if isinstance(a, ast.Assign) and a.lineno < call.lineno
            and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
            and isinstance(a.value, ast.Subscript | ast.BinOp | ast.Name | ast.Constant)]  # fmt: skip


def _indices(call: ast.Call) -> list[tuple[str, ast.expr]]:
    """The index expressions of a call: each dim of a subscripted argument, each element of a
    list argument (a load's or store's offsets)."""
    out = []
    for k, arg in enumerate(call.args):
        if isinstance(arg, ast.Subscript):
            dims = arg.slice.elts if isinstance(arg.slice, ast.Tuple) else [arg.slice]
            name = arg.value.id if isinstance(arg.value, ast.Name) else f"argument {k}"
            out += [(f"dim {d} of the slice of {name}", dim) for d, dim in enumerate(dims)]
        elif isinstance(arg, ast.List | ast.Tuple) and callee(call) in ("load", "store") and k == 1:
            out += [(f"offset {d} of the {callee(call)}", e) for d, e in enumerate(arg.elts)]
    return out


def sibling_op_edits(src: Source, lines: list[int], op: str) -> list[Edit]:
    """The op ``op`` on ``lines`` replaced by each of its siblings (and, for ``-`` and ``/``, its
    operands swapped)."""
    out: list[Edit | None] = []
    family = next((f for f in REDUCTIONS if op in f), None)
    if family is not None:  # NOTE: and the same reduction over the other axis (a max over columns for rows)
        axis, _, kind = op.partition("_")
        other_axis = f"{'col' if axis == 'row' else 'row'}_{kind}"
        family = (*family, other_axis) if other_axis in reduce_ops() else family
    if op in ("maximum", "minimum"):
        family = ("maximum", "minimum")
    for call in src.calls(lines, op) if family is not None else []:
        func = call.func
        for other in family:
            if other != op:  # NOTE: `ts.row_max` -> `ts.row_sum`: only the name changes
                end = func.end_col_offset
                out.append(src.splice(func.end_lineno, end - len(op), end, other, _sibling_why(op, other)))
    kind = _OPERATORS.get(op)
    for node in src.starting_in(lines, ast.BinOp) if kind is not None else []:
        if not isinstance(node.op, kind) or node.left.end_lineno != node.right.lineno:
            continue
        line = node.right.lineno
        gap = src.line(line).encode()[node.left.end_col_offset : node.right.col_offset].decode()
        at = node.left.end_col_offset + len(gap[: gap.index(_SYMBOLS[kind])].encode())
        for other, symbol in _SYMBOLS.items():
            if other is not kind:
                out.append(src.splice(line, at, at + 1, symbol, _sibling_why(_SYMBOLS[kind], symbol)))
        if kind in (ast.Sub, ast.Div):
            swapped = f"{_operand(src, node.right)} {_SYMBOLS[kind]} {_operand(src, node.left)}"
            out.append(src.edit(node, swapped, f"the operands of {_SYMBOLS[kind]} are the other way round"))
    return unique(out)


def sibling_call_edits(src: Source, lines: list[int]) -> list[Edit]:
    """Every reduction and ``maximum``/``minimum`` call on ``lines`` replaced by each sibling (a
    NaN from the line after a running max that is a running min)."""
    names = dict.fromkeys(callee(c) for c in src.starting_in(lines, ast.Call))
    return unique([e for name in names if name in ("maximum", "minimum") or name in reduce_ops()
                    for e in sibling_op_edits(src, lines, name)])  # fmt: skip


def _sibling_why(now: str, other: str) -> str:
    return f"`{other}` where the program has `{now}`: with it, the outputs match the golden"


def stable_exp_edits(src: Source, lines: list[int]) -> list[Edit]:
    """``exp(x)`` on ``lines`` as ``exp(x - row_max(x))`` (then ``col_max``): the shift a softmax
    does not see, and that keeps exp in range. The exps of one ``x`` on one line are shifted
    together (``exp(t) / row_sum(exp(t))``), then each alone."""
    groups: dict[tuple[int, str], list[ast.Call]] = {}
    for call in src.calls(lines, "exp"):
        x = call.args[0] if call.args else None
        if x is None or x.lineno != x.end_lineno or _subtracts_max(src, src.function_at(call.lineno), x, call.lineno):
            continue
        groups.setdefault((x.lineno, src.text_of(x)), []).append(call)
    out: list[Edit | None] = []
    for (line, _), calls in groups.items():
        prefix = src.text_of(calls[0].func)[: -len("exp")]
        x = _operand(src, calls[0].args[0])
        for red in ("row_max", "col_max"):
            why = (f"exp overflows for large inputs: subtract the {red.split('_')[0]} max first (a ratio of exps is "
                   "unchanged by the shift)")  # fmt: skip
            spots = sorted((c.args[0].col_offset, c.args[0].end_col_offset) for c in calls)
            if len(spots) > 1:
                raw, text, at = src.line(line).encode(), b"", 0
                for a, b in spots:
                    text += raw[at:a] + f"{x} - {prefix}{red}({x})".encode()
                    at = b
                out.append(src.splice(line, 0, len(raw), (text + raw[at:]).decode(), why))
            out += [src.edit(c.args[0], f"{x} - {prefix}{red}({x})", why) for c in calls]
    return unique(out)


def _subtracts_max(src: Source, fn: ast.FunctionDef | None, node: ast.expr, line: int) -> bool:
    """``node`` is ``x - m`` where ``m`` is a max (a ``row_max``/``col_max``/``maximum`` in it, or
    in the definition of the name it is): exp of it cannot overflow."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
        return False
    right = node.right
    if isinstance(right, ast.Name) and fn is not None:
        d = src.definition(fn, right.id, line)
        right = d.value if d is not None else right
    return any(isinstance(n, ast.Call) and callee(n) in ("row_max", "col_max", "maximum") for n in ast.walk(right))


def stable_variance_edits(src: Source, lines: list[int]) -> list[Edit]:
    """A variance by cancellation, ``sum(t * t) * c - m * m`` with ``m = sum(t) * c``, on
    ``lines``, as the mean of squared deviations ``sum((t - m) * (t - m)) * c``."""
    out = []
    for node in src.starting_in(lines, ast.BinOp):
        fn = src.function_at(node.lineno)
        if fn is None or not isinstance(node.op, ast.Sub) or node.lineno != node.end_lineno:
            continue
        left = _scaled_sum(node.left)
        square = left[1] if left else None
        if not (isinstance(square, ast.BinOp) and isinstance(square.op, ast.Mult)
                and src.text_of(square.left) == src.text_of(square.right)):  # fmt: skip
            continue
        mean = _square_of(src, node.right)
        if mean is None or not _is_mean_of(src, fn, mean, left[0], square.left, node.lineno):
            continue
        t, m = _operand(src, square.left), _operand(src, mean)
        dev = f"({t} - {m}) * ({t} - {m})"
        raw = src.line(node.lineno).encode()
        text = (raw[node.left.col_offset : square.col_offset] + dev.encode()
                + raw[square.end_col_offset : node.left.end_col_offset]).decode()  # fmt: skip
        out.append(src.edit(node, text, "E[x*x] - E[x]*E[x] cancels when the mean is large against the spread "
                                        "(and can go negative): take the mean of the squared deviations instead"))  # fmt: skip
    return unique(out)


def _scaled_sum(node: ast.expr) -> tuple[str, ast.expr] | None:
    """``(reduction, its operand)`` of ``row_sum(a)``, ``row_sum(a) * c``, ``c * row_sum(a)`` or ``row_sum(a) / c``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div):
        for side in (node.left, node.right) if isinstance(node.op, ast.Mult) else (node.left,):
            found = _scaled_sum(side)
            if found is not None:
                return found
        return None
    if isinstance(node, ast.Call) and callee(node) in ("row_sum", "col_sum") and len(node.args) == 1:
        return callee(node), node.args[0]
    return None


def _square_of(src: Source, node: ast.expr) -> ast.expr | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and src.text_of(node.left) == src.text_of(node.right):
        return node.left
    return None


def _is_mean_of(src: Source, fn: ast.FunctionDef, mean: ast.expr, reduction: str, t: ast.expr, line: int) -> bool:
    """``mean`` (a name, or an expression) is ``reduction(t)``, scaled."""
    if isinstance(mean, ast.Name):
        d = src.definition(fn, mean.id, line)
        if d is None:
            return False
        mean = d.value
    found = _scaled_sum(mean)
    return found is not None and found[0] == reduction and src.text_of(found[1]) == src.text_of(t)


def orchestration_loop_edits(src: Source, fn: ast.FunctionDef) -> list[Edit]:
    """Each ``ts.range`` loop of the orchestration ``fn`` one step longer: its stop's offset dropped
    (``R - B`` -> ``R``), or a literal stop moved by one literal step."""
    out = []
    for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.iter, ast.Call)):
        call = loop.iter
        if callee(call) != "range" or len(call.args) < 2:
            continue
        stop = call.args[1]
        step = call.args[2] if len(call.args) > 2 else ast.Constant(1)
        why = "the loop stops before the end of the output, so no task is given its last region: "
        if isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.Add | ast.Sub):
            out.append(src.edit(stop, src.text_of(stop.left), why + "drop the offset"))
        elif isinstance(stop, ast.Constant) and isinstance(step, ast.Constant) and isinstance(stop.value, int) and (
                isinstance(step.value, int) and step.value > 0):  # fmt: skip
            out.append(src.edit(stop, str(stop.value + step.value), why + "one more step"))
    return unique(out)


def inout_edits(src: Source, kernel: str, param: str, line: int | None = None) -> list[Edit]:
    """Kernel ``kernel``'s param ``param``, declared ``ts.Out[...]``, declared ``ts.InOut[...]``;
    the kernel is the function of that name, else (a kernel named apart from its ``def``) the
    innermost function around ``line`` (the read's) that has a param ``param``."""
    fn = src.function(kernel)
    if fn is None and line is not None:
        around = [f for f in ast.walk(src.tree) if isinstance(f, ast.FunctionDef) and f.lineno <= line <= f.end_lineno
                  and any(a.arg == param for a in f.args.args)]  # fmt: skip
        fn = max(around, key=lambda f: f.lineno, default=None)
    arg = next((a for a in fn.args.args if a.arg == param), None) if fn is not None else None
    ann = arg.annotation if arg is not None else None
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Attribute | ast.Name)):
        return []
    head = ann.value
    name = head.attr if isinstance(head, ast.Attribute) else head.id
    if name != "Out":
        return []
    end = head.end_col_offset
    edit = src.splice(head.lineno, end - len("Out"), end, "InOut",
                      f"kernel {kernel} reads its param {param}: a param that is read and written is an InOut")  # fmt: skip
    return [edit] if edit is not None else []


def _operand(src: Source, node: ast.expr) -> str:
    """``node``'s text, parenthesized unless it is a name, a call, a subscript or a constant."""
    text = src.text_of(node)
    return text if isinstance(node, ast.Name | ast.Call | ast.Subscript | ast.Constant | ast.Attribute) else f"({text})"



def every_sibling_edits(src: Source, lines: list[int]) -> list[Edit]:
    """``sibling_op_edits`` for every reduction, max/min call and arithmetic operator on
    ``lines`` (the wider search, where no culprit op is known)."""
    ops = [callee(c) for c in src.starting_in(lines, ast.Call)]
    ops += [name for node in src.starting_in(lines, ast.BinOp) for name, kind in _OPERATORS.items() if isinstance(node.op, kind)]
    return unique([e for op in dict.fromkeys(ops) for e in sibling_op_edits(src, lines, op)])
