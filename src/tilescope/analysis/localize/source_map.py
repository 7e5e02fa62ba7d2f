"""Where a kernel's IR statements are in its C++, and which C++ lines were edited by hand.

Invariants:
- The kernel generator writes one C++ line per IR statement, in the order a pre-order walk of
  the body meets them, each ending in ``// @ file:line`` (its DSL line). ``kernel_sites`` pairs
  them up by that order and checks each pair's shape (an assignment names its target, a store
  calls ``store``, a loop opens ``for``); a C++ file whose statements no longer pair up (lines
  added or removed by hand) gives no sites, and ``why`` says so.
- ``edited_lines`` compares a kernel's C++ with what the generator writes from the build's IR,
  ignoring the DSL locations (a loaded IR names its own file), so only hand edits differ.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass

from tilescope.build.manifest import Build
from tilescope.build.paths import confined
from tilescope.codegen.kernel_cpp import kernel_cpp
from tilescope.codegen.kernel_fusion import streamed_outputs
from tilescope.debug.symbolize import dsl_file
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Assign, Evaluate, For, If, Kernel, Probe, Program, Stmt, Store, Submit

_MARKER = re.compile(r"//\s*@\s*(?P<loc>\S+:\d+)\s*$")
_LOC = re.compile(r'[^\s"{},]+:\d+')
_STORE_CALL = re.compile(r"store(_valid)?(<.*?>)?\(")


@dataclass(frozen=True)
class StmtSite:
    """One IR statement of a kernel and its C++ line."""

    index: int  # position in a pre-order walk of the kernel body
    stmt: Stmt
    cpp_file: str  # relative to the build directory
    cpp_line: int  # 1-based
    dsl_line: str | None  # "file:line", from the line's marker
    text: str  # the C++ statement, without its marker

    @property
    def cpp(self) -> str:
        """``kernels/vec/k.cpp:31``."""
        return f"{self.cpp_file}:{self.cpp_line}"


def statements(body: tuple[Stmt, ...]) -> list[Stmt]:
    """A kernel body's statements in pre-order (a loop before its body)."""
    out: list[Stmt] = []
    for s in body:
        out.append(s)
        if isinstance(s, For):
            out += statements(s.body)
    return out


def _kernel_row(build: Build, name: str) -> dict:
    return next(k for k in build.kernels if k["name"] == name)


def kernel_text(build: Build, name: str) -> tuple[str, str]:
    """The C++ source of kernel ``name`` as the build holds it now, and its path in the build."""
    rel = _kernel_row(build, name)["source"]
    path = confined(build.work_dir, rel, "kernel source")
    return path.read_text(encoding="utf-8", errors="replace"), rel


def _fits(s: Stmt, text: str) -> bool:
    match s:
        case Assign(target=t):  # a name C++ reserves is written with a trailing underscore (gt -> gt_)
            return re.search(rf"\b{re.escape(t)}_?\b", text) is not None
        case Store():  # store(, store_valid(, either with its axes: store<Axes<0, 2, 1, 2>>(
            return _STORE_CALL.match(text) is not None
        case Probe():
            return text.startswith("probe(")
        case For():
            return text.startswith("for (")
    return False


def kernel_sites(build: Build, kernel: Kernel) -> tuple[dict[int, StmtSite], str | None]:
    """The C++ line of every statement of ``kernel`` (keyed by ``id(stmt)``), and why there are
    none when the C++ no longer pairs up with the IR."""
    try:
        text, rel = kernel_text(build, kernel.name)
    except (OSError, StopIteration, TilescopeError) as e:
        return {}, f"the C++ of kernel {kernel.name} cannot be read ({e})"
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if 'extern "C"' in line and "kernel_entry" in line)
    except StopIteration:
        return {}, f"{rel} has no kernel_entry"
    marked = []
    for no, line in enumerate(lines[start + 1 :], start + 2):
        m = _MARKER.search(line)
        code = line[: m.start()].strip() if m else line.strip()
        # NOTE: parameters carry markers too, and so does a run-time loop bound's check before its loop
        if m and not code.startswith(("TensorView<", "const ", "check_bound(")):
            marked.append((no, code, m.group("loc")))
    stmts = statements(kernel.body)
    if len(marked) != len(stmts):
        return {}, (
            f"{rel}'s statements no longer pair up with kernel {kernel.name}'s IR ({len(marked)} marked C++ "
            f"lines for {len(stmts)} statements): lines were added or removed by hand"
        )
    unfit = next(((s, no, c) for s, (no, c, _) in zip(stmts, marked) if not _fits(s, c)), None)
    if unfit is not None:
        s, no, code = unfit
        return {}, (
            f"{rel}'s statements no longer pair up with kernel {kernel.name}'s IR: line {no} (`{code}`) is not "
            f"the {type(s).__name__.lower()} the IR has there: it was edited by hand"
        )
    sites = {
        id(s): StmtSite(i, s, rel, no, loc, code) for i, (s, (no, code, loc)) in enumerate(zip(stmts, marked))
    }
    return sites, None


def statement_site(build: Build, kernel: Kernel, stmt: Stmt, limitations: list[str]) -> StmtSite | None:
    """``stmt``'s site in ``kernel``; None when it has none, with the reason added to
    ``limitations`` (once) when the kernel's C++ no longer pairs up with its IR."""
    sites, why = kernel_sites(build, kernel)
    site = sites.get(id(stmt))
    if site is None and why and why not in limitations:
        limitations.append(why)
    return site


def site_lines(site: StmtSite | None) -> tuple[str | None, str | None]:
    """A culprit's DSL and C++ lines from its statement's site (None, None without one)."""
    return (site.dsl_line, site.cpp) if site is not None else (None, None)


@dataclass(frozen=True)
class EditedLine:
    """A C++ line that differs from what the generator writes."""

    cpp_file: str
    cpp_line: int  # 1-based, in the file as it is now (0: a line removed)
    generated: str
    now: str

    @property
    def cpp(self) -> str:
        """``path/in/build.cpp:line``."""
        return f"{self.cpp_file}:{self.cpp_line}"


def edited_lines(build: Build, kernel: Kernel) -> list[EditedLine]:
    """The lines of ``kernel``'s C++ that differ from what the generator writes from the build's IR."""
    try:
        now, rel = kernel_text(build, kernel.name)
    except (OSError, StopIteration, TilescopeError):
        return []
    streamed = streamed_outputs(build.program()).get(kernel.name, frozenset())
    generated = kernel_cpp(
        kernel,
        check_bounds=bool(build.runtime_config.get("check_bounds")),
        streamed=streamed,
        bf16_dot=build.runtime_config.get("bf16_matmul") == "dot",
    )
    return diff_lines(rel, generated, now)


def diff_lines(rel: str, generated: str, now: str) -> list[EditedLine]:
    """The lines of ``now`` (the C++ file ``rel`` as it is) that differ from ``generated`` (what
    the generator writes), ignoring the DSL locations."""
    a = [_LOC.sub("<loc>", line) for line in generated.splitlines()]
    b = [_LOC.sub("<loc>", line) for line in now.splitlines()]
    gen_lines, now_lines = generated.splitlines(), now.splitlines()
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            g = gen_lines[i1 + k] if i1 + k < i2 else ""
            n = now_lines[j1 + k] if j1 + k < j2 else ""
            out.append(EditedLine(rel, j1 + k + 1 if j1 + k < j2 else 0, _strip(g), _strip(n)))
    return out


def _strip(line: str) -> str:
    m = _MARKER.search(line)
    return (line[: m.start()] if m else line).strip()




@dataclass(frozen=True)
class SubmitSite:
    """A kernel call of the orchestration and its C++ block."""

    index: int  # position among the orchestration's calls, in pre-order
    kernel: str
    cpp_file: str
    cpp_line: int  # the block's first line
    dsl_line: str | None
    arg_lines: tuple[int, ...]  # the C++ line adding each argument, in parameter order

    @property
    def cpp(self) -> str:
        """``path/in/build.cpp:line``."""
        return f"{self.cpp_file}:{self.cpp_line}"


def submits(body: tuple[Stmt, ...]) -> list[Submit]:
    """The orchestration's kernel calls in pre-order (a loop's or a branch's before what follows)."""
    out: list[Submit] = []
    for s in body:
        match s:
            case Assign(value=Submit() as e) | Evaluate(value=Submit() as e):
                out.append(e)
            case For(body=inner):
                out += submits(inner)
            case If(then=a, orelse=b):
                out += submits(a) + submits(b)
    return out


def orchestration_sites(build: Build, program: Program) -> tuple[dict[int, SubmitSite], str | None]:
    """The C++ block of every kernel call (keyed by ``id(submit)``), and why there are none when
    the orchestration's C++ no longer pairs up with the IR."""
    rel = build.config["ORCHESTRATION"].get("source", "")
    try:
        text = confined(build.work_dir, rel, "orchestration source").read_text(encoding="utf-8", errors="replace")
    except (OSError, TilescopeError) as e:
        return {}, f"the orchestration's C++ cannot be read ({e})"
    lines = text.splitlines()
    blocks = []
    for no, line in enumerate(lines, 1):
        m = _MARKER.search(line)
        if m and line[: m.start()].strip() == "{":
            blocks.append((no, m.group("loc")))
    calls = submits(program.body)
    if len(blocks) != len(calls):
        return {}, f"{rel} has {len(blocks)} task blocks for {len(calls)} kernel calls: lines were added or removed by hand"
    sites = {}
    for i, (e, (no, loc)) in enumerate(zip(calls, blocks)):
        first = no + 1  # ts::Task task = orch.task(...)
        nargs = len(e.args)
        sites[id(e)] = SubmitSite(i, e.kernel, rel, no, loc, tuple(range(first + 1, first + 1 + nargs)))
    return sites, None


def argument_line(dsl_line: str | None, arg: int, cpp_path: str) -> int | None:
    """The line of positional argument ``arg`` of the kernel call at ``dsl_line`` (``model.py:41``)
    in the user's source: a call written over several lines names the argument's own (None when
    the source cannot be read or holds no such call there)."""
    if not dsl_line:
        return None
    path, _, no = dsl_line.rpartition(":")
    found = dsl_file(path, cpp_path)
    try:
        tree = ast.parse(found.read_text(encoding="utf-8", errors="replace")) if found is not None else None
    except (OSError, SyntaxError, ValueError):
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == int(no)] if tree is not None else []
    call = max(calls, key=lambda n: len(n.args), default=None)  # NOTE: the kernel call, not a call inside an argument
    return call.args[arg].lineno if call is not None and arg < len(call.args) else None


def loops(body: tuple[Stmt, ...]) -> list[For]:
    """The orchestration's loops in pre-order (an outer loop before the loops in its body)."""
    out: list[For] = []
    for s in body:
        match s:
            case For(body=inner):
                out += [s, *loops(inner)]
            case If(then=a, orelse=b):
                out += loops(a) + loops(b)
    return out


def orchestration_loops(build: Build, program: Program) -> tuple[dict[int, tuple[str | None, str]], str | None]:
    """The DSL line and the C++ line (``path:line``) of every loop of the orchestration (keyed by
    ``id(for)``), and why there are none when its C++ no longer pairs up with the IR."""
    rel = build.config["ORCHESTRATION"].get("source", "")
    try:
        text = confined(build.work_dir, rel, "orchestration source").read_text(encoding="utf-8", errors="replace")
    except (OSError, TilescopeError) as e:
        return {}, f"the orchestration's C++ cannot be read ({e})"
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        m = _MARKER.search(line)
        if m and line[: m.start()].strip().startswith("for ("):
            found.append((m.group("loc"), f"{rel}:{no}"))
    fors = loops(program.body)
    if len(found) != len(fors):
        return {}, f"{rel} has {len(found)} marked loops for {len(fors)} in the program: lines were added or removed by hand"
    return {id(f): at for f, at in zip(fors, found)}, None


__all__ = [
    "EditedLine", "StmtSite", "SubmitSite", "argument_line", "edited_lines", "kernel_sites", "kernel_text", "loops", "site_lines", "statement_site",
    "orchestration_loops", "orchestration_sites", "statements", "submits",
]  # fmt: skip
