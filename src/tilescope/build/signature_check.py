"""Does hand-edited C++ still match the build's signatures?

A build's ``kernel_config.py`` fixes every kernel's and the orchestration's signature
(argument count, tensor or scalar, dtype, direction). Edits to the generated C++ may change
the code freely but not those: a kernel reading ``args[i]`` beyond its arguments, reading a
tensor as a scalar, storing into an In argument, or an orchestration adding a task's arguments
with other directions would make the build's arguments, dependencies and replay data wrong.
This module reads the C++ (the generated shape of it) and lists every such mismatch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope.errors import TilescopeError
from tilescope.ir import dtypes as dt
from tilescope.ir.types import Direction

FIX = "a signature change needs a new build: edit the DSL source and re-run without --runtime-dir"

_VIEW = re.compile(r"TensorView\s*<\s*([\w:]+)\s*>\s+(\w+)\s*\(\s*args\s*\[\s*(\d+)\s*\]\s*\)")
_SCALAR = re.compile(r"scalar_arg\s*<\s*([\w:]+)\s*>\s*\(\s*args\s*\[\s*(\d+)\s*\]\s*\)")
_ANY_ARG = re.compile(r"\bargs\s*\[\s*(\d+)\s*\]")
_STORE = re.compile(r"\bstore\s*\(\s*(\w+)\s*,")
_ORCH_TENSOR = re.compile(r"\borch\.tensor_arg\s*\(\s*(\d+)\s*(?:,\s*(?:\"(?:[^\"\\\\]|\\\\.)*\"|nullptr)\s*)?\)")
_ORCH_SCALAR = re.compile(r"\borch\.scalar_arg\s*<\s*([\w:]+)\s*>\s*\(\s*(\d+)\s*\)")
_FUNC_ID = re.compile(r"constexpr\s+int32_t\s+(\w+)\s*=\s*(\d+)\s*;")
_TASK = re.compile(r"\borch\.task\s*\(\s*(\w+)\s*,")
_ADD = re.compile(r"\.add_(input|output|inout|scalar)\s*\(")
_SUBMIT = re.compile(r"\borch\.submit\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)

_DIR = {"input": Direction.IN, "output": Direction.OUT, "inout": Direction.INOUT, "scalar": Direction.SCALAR}


@dataclass(frozen=True)
class Mismatch:
    """One way edited C++ differs from the build's signatures: the file (its path in the build),
    the line when known (0: not), what differs, and the kernel whose signature it breaks (None:
    the program's own, or a call naming no kernel)."""

    file: str
    line: int
    what: str
    kernel: str | None = None

    @property
    def where(self) -> str:
        """``kernels/vec/k.cpp:19``, or the file alone when the line is not known."""
        return f"{self.file}:{self.line}" if self.line else self.file

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class SignatureMismatch(TilescopeError):
    """Edited C++ no longer matches the signatures recorded in kernel_config.py; ``problems``
    lists each mismatch."""

    def __init__(self, message: str, problems: list[Mismatch] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


def _direction(d: Any) -> Direction:
    return d if isinstance(d, Direction) else Direction(getattr(d, "value", d))


def _cpp_dtype(ctype: str) -> str | None:
    for d in dt.ALL_DTYPES:
        if ctype in (d.cpp, d.cpp.removeprefix("ts::")):
            return d.name
    return None


def _sig(sig: list) -> str:
    return ", ".join(f"D.{_direction(d).name}" for d in sig)


def _code(path: Path) -> str:
    """The C++ of ``path`` without its comments; a comment's newlines are kept, so a match's
    offset gives its line."""
    return _COMMENT.sub(lambda m: "\n" * m[0].count("\n"), path.read_text())


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def kernel_problems(path: Path, kernel: dict) -> list[Mismatch]:
    """Mismatches between a kernel's C++ and its recorded signature and params."""
    text = _code(path)
    sig = [_direction(d) for d in kernel["signature"]]
    params = kernel.get("params", [])
    rel = f"{path.parent.parent.name}/{path.parent.name}/{path.name}"
    problems = []

    def mismatch(pos: int, what: str) -> None:
        problems.append(Mismatch(rel, _line(text, pos), what, kernel["name"]))

    beyond = [m for m in _ANY_ARG.finditer(text) if int(m[1]) >= len(sig)]
    if beyond:
        last = max(beyond, key=lambda m: int(m[1]))
        mismatch(last.start(), f"reads args[{last[1]}], but kernel {kernel['name']} has {len(sig)} arguments ({_sig(sig)})")
    views: dict[str, int] = {}
    for m in _VIEW.finditer(text):
        ctype, name, i = m[1], m[2], int(m[3])
        views[name] = i
        if i < len(sig) and sig[i] is Direction.SCALAR:
            mismatch(m.start(), f"reads args[{i}] as a tensor, but argument {i} is a scalar")
        elif i < len(params) and _cpp_dtype(ctype) not in (None, params[i]["dtype"]):
            mismatch(m.start(), f"reads args[{i}] as {ctype}, but argument {i} is {params[i]['dtype']}")
    for m in _SCALAR.finditer(text):
        i = int(m[2])
        if i < len(sig) and sig[i] is not Direction.SCALAR:
            mismatch(m.start(), f"reads args[{i}] as a scalar, but argument {i} is a tensor ({_sig([sig[i]])})")
    stores = {}
    for m in _STORE.finditer(text):
        stores.setdefault(m[1], m.start())
    for name in sorted(stores):
        i = views.get(name)
        if i is not None and i < len(sig) and sig[i] is Direction.IN:
            mismatch(stores[name], f"stores into {name} (args[{i}]), which the signature declares D.IN")
    return problems


def orchestration_problems(path: Path, orch: dict, kernels: list[dict]) -> list[Mismatch]:
    """Mismatches between the orchestration's C++ and the program and kernel signatures."""
    text = _code(path)
    sig = [_direction(d) for d in orch["signature"]]
    rel = f"orchestration/{path.name}"
    problems = []
    for m in _ORCH_TENSOR.finditer(text):
        i = int(m[1])
        if i >= len(sig) or sig[i] is Direction.SCALAR:
            what = "a scalar" if i < len(sig) else f"beyond the program's {len(sig)} arguments"
            problems.append(Mismatch(rel, _line(text, m.start()), f"orch.tensor_arg({i}) but argument {i} is {what}"))
    for m in _ORCH_SCALAR.finditer(text):
        i = int(m[2])
        if i >= len(sig) or sig[i] is not Direction.SCALAR:
            what = "a tensor" if i < len(sig) else f"beyond the program's {len(sig)} arguments"
            problems.append(Mismatch(rel, _line(text, m.start()), f"orch.scalar_arg({i}) but argument {i} is {what}"))
    ids = {name: int(v) for name, v in _FUNC_ID.findall(text)}
    for m in _TASK.finditer(text):
        token = m[1]
        func_id = int(token) if token.isdigit() else ids.get(token)
        line = _line(text, m.start())
        if func_id is None or not 0 <= func_id < len(kernels):
            what = f"orch.task({token}, ...) names no kernel of this build (0..{len(kernels) - 1})"
            problems.append(Mismatch(rel, line, what))
            continue
        end = _SUBMIT.search(text, m.end())
        block = text[m.end() : end.start() if end else len(text)]
        adds = [_DIR[a] for a in _ADD.findall(block)]
        kernel = kernels[func_id]
        want = [_direction(d) for d in kernel["signature"]]
        if adds != want:
            what = f"a {kernel['name']} task is given ({_sig(adds)}), but kernel {kernel['name']} takes ({_sig(want)})"
            problems.append(Mismatch(rel, line, what, kernel["name"]))
    return problems


def check_sources(work: Path, config: dict, edited: list[str]) -> None:
    """Raise SignatureMismatch listing every problem in the ``edited`` sources."""
    problems: list[Mismatch] = []
    by_source = {k["source"]: k for k in config["KERNELS"]}
    for rel in edited:
        if rel in by_source:
            problems += kernel_problems(work / rel, by_source[rel])
        elif rel == config["ORCHESTRATION"]["source"]:
            problems += orchestration_problems(work / rel, config["ORCHESTRATION"], config["KERNELS"])
    if problems:
        raise SignatureMismatch(
            f"edited C++ in {work} no longer matches the build's signatures:\n  "
            + "\n  ".join(map(str, problems))
            + f"\n  {FIX}",
            problems,
        )
