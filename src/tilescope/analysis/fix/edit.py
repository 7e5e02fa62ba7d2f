"""Fix proposals: one concrete edit of a source line (``file``, ``line``, ``before``, ``after``,
``why``), drawn from the evidence that named the culprit.

Invariants:
- A proposal is only text: this module never writes a file. Applying an edit to a copy and
  checking it on the build's saved data is ``verify``'s.
- An edit changes one line, and only the span of the node it rewrites: the rest of the line
  (its comment included) is kept. A node that spans several lines gives no edit.
- Candidates come from the evidence, in the order they are worth trying, the smallest first;
  the rules that make them (``rules``) read the DSL source with Python's ``ast`` and never
  guess an edit that no evidence points to.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

LINE_BREAK = re.compile(r"(\r\n|\r|\n)")  # the line breaks Python's parser counts (not a form feed)


@dataclass(frozen=True)
class Edit:
    """Replace line ``line`` of ``file`` (``before``, exactly) by ``after``, because ``why``."""

    file: str
    line: int
    before: str
    after: str
    why: str

    def apply(self, text: str) -> str:
        """``text`` (the file's) with this edit made; ValueError if the line is not ``before``.
        Lines are counted as Python counts them (``\n``, ``\r\n``, ``\r``; a form feed is not a
        line break)."""
        parts = LINE_BREAK.split(text)
        lines, breaks = parts[0::2], parts[1::2]
        if not 1 <= self.line <= len(lines) or lines[self.line - 1] != self.before:
            raise ValueError(f"{self.file}:{self.line} is not `{self.before.strip()}` any more")
        lines[self.line - 1] = self.after
        return "".join(a + b for a, b in zip(lines, [*breaks, ""]))

    @property
    def changes_nothing(self) -> bool:
        """The line stays the same but for spacing: no candidate (a restored C++ line whose edit
        was only spacing or a comment, a rule whose rewrite gives the text back)."""
        return self.before.split() == self.after.split()

    @property
    def size(self) -> int:
        """How many characters the edit changes (what "the smallest edit" means)."""
        a, b = self.before, self.after
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        return max(len(a), len(b)) - head - tail


class Source:
    """A Python file of DSL source, parsed: the nodes on a line, their text, and edits of one node."""

    def __init__(self, file: str, text: str):
        self.file, self.text = file, text
        self.lines = LINE_BREAK.split(text)[0::2]
        self.tree = ast.parse(text)  # NOTE: SyntaxError is the caller's: a file that does not parse has no edits
        self.parents: dict[ast.AST, ast.AST] = {
            child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)
        }

    @property
    def ts(self) -> str:
        """The prefix the file writes tilescope's ops with: ``ts.`` for ``import tilescope as ts``."""
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "tilescope":
                        return f"{a.asname or a.name}."
        return "ts."

    def line(self, no: int) -> str:
        """Line ``no`` (1-based), or '' past the end."""
        return self.lines[no - 1] if 1 <= no <= len(self.lines) else ""

    def text_of(self, node: ast.AST) -> str:
        """The source text of a node (its lines joined as they are, for one on several)."""
        return ast.get_source_segment(self.text, node) or ""

    def on_line(self, no: int, kind: type | tuple[type, ...] = ast.AST) -> list:
        """The nodes of type ``kind`` that lie on line ``no`` alone, outermost first."""
        return [n for n in ast.walk(self.tree) if isinstance(n, kind) and getattr(n, "lineno", None) == no
                and n.end_lineno == no]  # fmt: skip

    def starting_in(self, lines: list[int], kind: type | tuple[type, ...] = ast.AST) -> list:
        """The nodes of type ``kind`` that start on one of ``lines``, outermost first."""
        wanted = set(lines)
        return [n for n in ast.walk(self.tree) if isinstance(n, kind) and getattr(n, "lineno", None) in wanted]

    def statement_lines(self, no: int) -> list[int]:
        """The lines of the innermost simple statement that holds line ``no`` (a call the formatter
        wrapped over several lines, say); ``[no]`` when none does."""
        found = [s for s in ast.walk(self.tree) if isinstance(s, ast.stmt) and not hasattr(s, "body")
                 and s.lineno <= no <= s.end_lineno]  # fmt: skip
        inner = max(found, key=lambda s: s.lineno, default=None)
        return list(range(inner.lineno, inner.end_lineno + 1)) if inner is not None else [no]

    def calls(self, lines: list[int], *names: str) -> list[ast.Call]:
        """The calls that start on ``lines`` of ``ts.<name>`` (any module alias) or a bare ``<name>``."""
        return [c for c in self.starting_in(lines, ast.Call) if callee(c) in names]

    def edit(self, node: ast.AST, new: str, why: str) -> Edit | None:
        """The edit that writes ``new`` in place of ``node``'s text (None for a node on several lines,
        or one whose text is already ``new``)."""
        if node.lineno != node.end_lineno:
            return None
        return self.splice(node.lineno, node.col_offset, node.end_col_offset, new, why)

    def splice(self, no: int, start: int, end: int, new: str, why: str) -> Edit | None:
        """The edit that writes ``new`` over bytes ``start:end`` of line ``no``."""
        before = self.line(no)
        raw = before.encode()
        after = (raw[:start] + new.encode() + raw[end:]).decode()
        return Edit(self.file, no, before, after, why) if after != before else None

    def renamed(self, node: ast.AST, old: str, new: str) -> str:
        """``node``'s text (a node on one line) with every name ``old`` in it written ``new``."""
        raw = self.line(node.lineno).encode()
        spots = sorted((n.col_offset, n.end_col_offset) for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == old)
        out, at = b"", node.col_offset
        for a, b in spots:
            out += raw[at:a] + new.encode()
            at = b
        return (out + raw[at : node.end_col_offset]).decode()

    def function_of(self, node: ast.AST) -> ast.FunctionDef | None:
        """The function that holds ``node``."""
        while node is not None and not isinstance(node, ast.FunctionDef):
            node = self.parents.get(node)
        return node

    def function_at(self, no: int) -> ast.FunctionDef | None:
        """The innermost function whose body holds line ``no``."""
        found = [f for f in ast.walk(self.tree) if isinstance(f, ast.FunctionDef) and f.lineno <= no <= f.end_lineno]
        return max(found, key=lambda f: f.lineno, default=None)

    def function(self, name: str) -> ast.FunctionDef | None:
        """The function ``name`` (the first, outermost first: a kernel may be defined inside a
        function that builds the program)."""
        return next((f for f in ast.walk(self.tree) if isinstance(f, ast.FunctionDef) and f.name == name), None)

    def loop_vars(self, node: ast.AST) -> list[str]:
        """The variables of the ``for`` loops around ``node``, innermost first."""
        out = []
        node = self.parents.get(node)
        while node is not None and not isinstance(node, ast.FunctionDef):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                out.append(node.target.id)
            node = self.parents.get(node)
        return out

    def definition(self, fn: ast.FunctionDef, name: str, before: int) -> ast.Assign | None:
        """The last ``name = ...`` of ``fn`` on a line before ``before``."""
        found = [a for a in ast.walk(fn) if isinstance(a, ast.Assign) and a.lineno < before and len(a.targets) == 1
                 and isinstance(a.targets[0], ast.Name) and a.targets[0].id == name]  # fmt: skip
        return max(found, key=lambda a: a.lineno, default=None)

    def feeding(self, no: int, depth: int = 8) -> list[int]:
        """The lines of the statement on line ``no`` and of the assignments whose names it uses,
        transitively (within its function), nearest first; at most ``depth`` statements."""
        fn = self.function_at(no)
        first = self.statement_lines(no)
        if fn is None:
            return first
        out: list[int] = []
        todo, seen = [first], 0
        while todo and seen < depth:
            lines = todo.pop(0)
            if lines[0] in out:
                continue
            seen += 1
            out += lines
            for name in sorted({n.id for n in self.starting_in(lines, ast.Name) if isinstance(n.ctx, ast.Load)}):
                d = self.definition(fn, name, lines[0])
                if d is not None:
                    todo.append(list(range(d.lineno, d.end_lineno + 1)))
        return out


def callee(call: ast.Call) -> str:
    """``row_max`` for ``ts.row_max(...)`` or ``row_max(...)``; '' for any other call."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f.attr
    return f.id if isinstance(f, ast.Name) else ""


def loop_bound_edits(src: Source, loop_line: int, extent: int, size: int,
                     known: tuple[int, int] | None = None) -> list[Edit]:  # fmt: skip
    """Edits of the ``ts.range(start, stop, step)`` on ``loop_line`` whose iterations reach
    ``extent`` with a store of ``size`` elements: the stop's ``± offset`` dropped, then (for a
    literal start and step, or ``known`` ``(start, step)`` from the IR) the stop set to ``extent``
    when the steps land on it, else one step past the last start that reaches it."""
    loops = [n for n in src.on_line(loop_line, ast.Call) if callee(n) == "range" and isinstance(src.parents.get(n), ast.For)]
    if not loops or len(loops[0].args) < 2:
        return []
    call = loops[0]
    start, stop = call.args[0], call.args[1]
    out = []
    if isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.Add | ast.Sub):
        # NOTE: `W - 64` -> `W`, `cols - chunk` -> `cols`: the bound as the code names it
        out.append(src.edit(stop, src.text_of(stop.left),
                            f"the loop stops short of the end of its Out param (extent {extent}): drop the offset"))  # fmt: skip
    first, stride = _const(start), _const(call.args[2]) if len(call.args) > 2 else 1
    if (first is None or stride is None) and known is not None:
        first, stride = known
    if first is not None and stride is not None and stride > 0:  # NOTE: the numbers need a literal start and step
        for new_stop in dict.fromkeys((extent, extent - size + stride)):
            if new_stop <= first or (new_stop - 1 - first) // stride * stride + first + size < extent:
                continue  # does not reach the end
            out.append(src.edit(stop, str(new_stop),
                                f"the loop's last iteration must store up to {extent} (a store of {size} from the last value)"))  # fmt: skip
    return list({e.after: e for e in reversed(out) if e is not None}.values())[::-1]  # NOTE: one per text, first kept


def _const(node: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unique(edits: list[Edit | None]) -> list[Edit]:
    """``edits`` without the Nones and without a second edit making the same line."""
    seen, out = set(), []
    for e in edits:
        if e is not None and (e.line, e.after) not in seen:
            seen.add((e.line, e.after))
            out.append(e)
    return out


_CMP = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv", ast.Mod: "mod",
        ast.MatMult: "matmul"}  # fmt: skip


def changed_op(src: Source, edit: Edit) -> str | None:
    """The op ``edit`` (of ``src``) changes: the innermost comparison, operator or call around
    what differs in its statement (``call`` for a call of a kernel, not of a ``ts.`` op); None
    when the statement does not parse on its own."""
    lines = src.statement_lines(edit.line)
    before = [src.line(n) for n in lines]
    after = [edit.after if n == edit.line else src.line(n) for n in lines]
    old, new = _parse_piece("\n".join(before)), _parse_piece("\n".join(after))
    if old is None or new is None:
        return None
    trail: list[ast.AST] = []
    a, b = old, new
    while True:
        if type(a) is not type(b):
            break
        trail.append(a)
        kids = list(zip(ast.iter_child_nodes(a), ast.iter_child_nodes(b), strict=False))
        differ = [(x, y) for x, y in kids if ast.dump(x) != ast.dump(y)]
        if len(differ) != 1 or len(list(ast.iter_child_nodes(a))) != len(list(ast.iter_child_nodes(b))):
            break
        a, b = differ[0]
    for node in reversed(trail):
        name = _op_name(node)
        if name:
            return name
    return None


def _op_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _CMP.get(type(node.ops[0]))
    if isinstance(node, ast.BinOp):
        return _BIN.get(type(node.op))
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            return f.attr
        return "call" if isinstance(f, ast.Name) and f.id not in ("min", "max", "float", "int", "range") else (
            f.id if isinstance(f, ast.Name) else None)  # fmt: skip
    return None


def _parse_piece(text: str) -> ast.AST | None:
    """A statement's lines parsed on their own (a ``for`` header: its iterable)."""
    text = textwrap.dedent(text).strip()
    for attempt in (text, f"{text}\n    pass"):
        try:
            tree = ast.parse(attempt)
        except SyntaxError:
            continue
        node = tree.body[0] if tree.body else None
        if isinstance(node, ast.For):
            return node.iter
        return node.value if isinstance(node, ast.Expr | ast.Assign | ast.AugAssign) else node
    return None
