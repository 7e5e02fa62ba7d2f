"""Fix proposals: one concrete edit of the DSL source (``file``, ``line``, ``before``, ``after``,
``why``), drawn from the evidence that named the culprit.

Invariants:
- A proposal is only text: this module never writes a file. Applying an edit to a copy of the
  source and checking it on the build's saved data is the harness's (``harness/fix.py``).
- Candidates come from the evidence, in the order they are worth trying, smallest change first.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Edit:
    """Replace line ``line`` of ``file`` (``before``, exactly) by ``after``, because ``why``."""

    file: str
    line: int
    before: str
    after: str
    why: str

    def as_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)

    def apply(self, text: str) -> str:
        """``text`` (the file's) with this edit made; ValueError if the line is not ``before``."""
        lines = text.splitlines(keepends=True)
        if not 1 <= self.line <= len(lines) or lines[self.line - 1].rstrip("\r\n") != self.before:
            raise ValueError(f"{self.file}:{self.line} is not `{self.before.strip()}` any more")
        end = lines[self.line - 1][len(self.before):]
        lines[self.line - 1] = self.after + end
        return "".join(lines)


def loop_bound_edits(file: str, loop_line: int, text: str, extent: int, size: int) -> list[Edit]:
    """Edits of the ``ts.range(start, stop, step)`` on ``loop_line`` of ``text`` whose iterations
    reach ``extent`` with a store of ``size`` elements: its stop set to ``extent`` (when the steps
    land on it), then to the smallest stop whose last iteration covers the end."""
    lines = text.splitlines()
    if not 1 <= loop_line <= len(lines):
        return []
    source = lines[loop_line - 1]
    call = _range_call(source)
    if call is None or len(call.args) < 2:
        return []
    start, stop = call.args[0], call.args[1]
    step = call.args[2] if len(call.args) > 2 else None
    values = [_const(start), _const(step) if step is not None else 1]
    if None in values:
        return []
    first, stride = values
    out = []
    if isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.Add | ast.Sub) and _const(stop.right) is not None:
        # NOTE: `W - 64` -> `W`: the bound as the code names it, if dropping the offset is the fix
        bare = source[stop.left.col_offset : stop.left.end_col_offset]
        out.append(Edit(file, loop_line, source, source[: stop.col_offset] + bare + source[stop.end_col_offset :],
                        f"the loop stops short of the end of its Out param (extent {extent}): drop the offset"))  # fmt: skip
    for new_stop in dict.fromkeys((extent, extent - size + stride, extent - size + 1)):
        if new_stop <= first or (new_stop - 1 - first) // stride * stride + first + size < extent:
            continue  # does not reach the end
        after = source[: stop.col_offset] + str(new_stop) + source[stop.end_col_offset :]
        if after != source:
            out.append(
                Edit(file, loop_line, source, after,
                     f"the loop's last iteration must store up to {extent} (a store of {size} from the last value)")  # fmt: skip
            )
    return out


def _range_call(line: str) -> ast.Call | None:
    """The ``ts.range(...)`` call of a ``for`` line, its offsets those of ``line``."""
    stripped = line.lstrip()
    indent = len(line) - len(stripped)
    if not stripped.startswith("for "):
        return None
    try:
        tree = ast.parse(stripped.rstrip().rstrip(":") + ":\n    pass")
    except SyntaxError:
        return None
    loop = tree.body[0]
    if not isinstance(loop, ast.For) or not isinstance(loop.iter, ast.Call):
        return None
    call = loop.iter
    for node in ast.walk(call):
        if hasattr(node, "col_offset"):
            node.col_offset += indent
            node.end_col_offset += indent
    return call


def _const(node: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
