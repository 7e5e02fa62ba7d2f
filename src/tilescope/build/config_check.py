"""Checking the data a build directory's ``kernel_config.py`` and ``build_state.json`` hold,
before anything reads it.

Invariants:
- A build is checked when it is loaded, as a whole: every key its readers use is there, with the
  type they use it as, and every path it names lies inside the build (``paths.confined``). All
  the problems of one file are listed in one ``BuildFileError`` that names the file, each key,
  what was expected and what to do; nothing in the build is changed.
- Past these checks no reader of a build meets a ``KeyError`` or ``TypeError`` from its data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope.build.paths import BUILD_STATE, outside_reason
from tilescope.errors import BuildFileError
from tilescope.ir import dtypes as dt
from tilescope.ir.types import Direction

RECOMPILE = "compile the program again (a new build directory; this one is left as it is)"
_DIRECTIONS = tuple(d.value for d in Direction)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Problems:
    """The problems found in one file, each naming its key."""

    def __init__(self, work: Path, file: str):
        self.work = work
        self.file = file
        self.lines: list[str] = []

    def add(self, key: str, got: Any, expected: str) -> None:
        shown = repr(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        self.lines.append(f"{key} is {shown}, expected {expected}")

    def missing(self, key: str, expected: str) -> None:
        self.lines.append(f"{key} is missing, expected {expected}")

    def field(self, row: dict[str, Any], where: str, key: str, ok: Any, expected: str) -> bool:
        if key not in row:
            self.missing(f"{where}[{key!r}]", expected)
            return False
        if not ok(row[key]):
            self.add(f"{where}[{key!r}]", row[key], expected)
            return False
        return True

    def path(self, row: dict[str, Any], where: str, key: str) -> None:
        if self.field(row, where, key, lambda v: isinstance(v, str) and v != "", "a path inside the build"):
            why = outside_reason(self.work, row[key])
            if why is not None:
                self.lines.append(
                    f"{where}[{key!r}] is {row[key]!r}: {why} (a build only names files inside it: refused)"
                )

    def raise_if_any(self, path: Path) -> None:
        if self.lines:
            raise BuildFileError(
                f"{path} cannot be used ({len(self.lines)} problem(s)):\n  "
                + "\n  ".join(self.lines)
                + f"\n  {RECOMPILE}"
            )


def _dtype_ok(v: Any) -> bool:
    return isinstance(v, str) and v in dt.BY_NAME


def _shape_ok(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(_is_int(d) and d >= 0 for d in v))


def _arg_rows(p: _Problems, rows: Any, where: str) -> None:
    if not isinstance(rows, list):
        p.add(where, rows, "a list of {'name', 'direction', 'shape', 'dtype'} dicts")
        return
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        if not isinstance(row, dict):
            p.add(at, row, "a dict with 'name', 'direction', 'shape' and 'dtype'")
            continue
        p.field(row, at, "name", lambda v: isinstance(v, str) and v.isidentifier(), "a parameter name")
        p.field(row, at, "direction", lambda v: v in _DIRECTIONS, f"one of {', '.join(_DIRECTIONS)}")
        p.field(row, at, "dtype", _dtype_ok, f"one of {', '.join(dt.BY_NAME)}")
        shape = row.get("shape")
        if not _shape_ok(shape):
            p.add(f"{at}['shape']", shape, "a list of sizes >= 0 (None for a scalar)")
        elif (shape is None) != (row.get("direction") == "scalar") and row.get("direction") in _DIRECTIONS:
            p.add(f"{at}['shape']", shape, "None for a scalar and a list of sizes for a tensor")
        if "weight" in row and not (row["weight"] is True and row.get("direction") == "in"):
            p.add(f"{at}['weight']", row["weight"], "True, on an 'in' tensor (a ts.Weight), or no 'weight' key")


def _signature_ok(v: Any) -> bool:
    return isinstance(v, list) and all(getattr(d, "value", d) in _DIRECTIONS for d in v)


def _binary_row(p: _Problems, row: Any, where: str) -> bool:
    if not isinstance(row, dict):
        p.add(where, row, "a dict with 'name', 'source', 'binary', 'function_name' and 'signature'")
        return False
    p.field(row, where, "name", lambda v: isinstance(v, str) and v.isidentifier(), "a function name")
    p.path(row, where, "source")
    p.path(row, where, "binary")
    p.field(row, where, "function_name", lambda v: isinstance(v, str) and v != "", "an exported symbol name")
    p.field(row, where, "signature", _signature_ok, "a list of D.IN, D.OUT, D.INOUT, D.SCALAR")
    return True


def check_config(work: Path, path: Path, cfg: dict[str, Any]) -> None:
    """Check the names ``kernel_config.py`` defines (``cfg``): types, keys and paths."""
    p = _Problems(work, path.name)
    program = cfg["PROGRAM"]
    if not (isinstance(program, str) and program.isidentifier()):
        p.add("PROGRAM", program, "the program's name (a Python identifier)")
    rc = cfg.get("RUNTIME_CONFIG")
    if not isinstance(rc, dict):
        p.add("RUNTIME_CONFIG", rc, "a dict with 'platforms', 'local_memory_bytes' and 'target'")
    else:
        platforms = rc.get("platforms", [])
        if not (isinstance(platforms, list) and all(isinstance(x, str) for x in platforms)):
            p.add("RUNTIME_CONFIG['platforms']", rc["platforms"], "a list of platform names")
        p.field(rc, "RUNTIME_CONFIG", "local_memory_bytes", lambda v: _is_int(v) and v >= 0, "a byte count")
        if not isinstance(rc.get("check_bounds", False), bool):
            p.add("RUNTIME_CONFIG['check_bounds']", rc["check_bounds"], "True or False")
        if rc.get("bf16_matmul", "exact") not in knobs.BF16_MATMULS:
            p.add("RUNTIME_CONFIG['bf16_matmul']", rc["bf16_matmul"], " or ".join(map(repr, knobs.BF16_MATMULS)))
        target = rc.get("target")
        if target is not None and not (
            isinstance(target, dict)
            and isinstance(target.get("arch"), str)
            and isinstance(target.get("cpu_flags", []), list)
        ):
            p.add("RUNTIME_CONFIG['target']", target, "a dict with 'arch' and a 'cpu_flags' list")
    _binary_row(p, cfg["ORCHESTRATION"], "ORCHESTRATION")
    kernels = cfg["KERNELS"]
    if not isinstance(kernels, list):
        p.add("KERNELS", kernels, "a list of kernel entries (one dict per kernel, in func_id order)")
    else:
        for i, row in enumerate(kernels):
            if _binary_row(p, row, f"KERNELS[{i}]"):
                at = f"KERNELS[{i}]"
                p.field(row, at, "func_id", lambda v, i=i: _is_int(v) and v == i, f"{i} (its position)")
                if "params" not in row:
                    p.missing(f"{at}['params']", "the kernel's parameters")
                else:
                    _arg_rows(p, row["params"], f"{at}['params']")
    _arg_rows(p, cfg["ARGS"], "ARGS")
    p.raise_if_any(path)


def _hex(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def check_state(work: Path, path: Path, state: Any, config: dict[str, Any]) -> None:
    """Check ``build_state.json`` (``state``) against the build's ``config``: types, keys, paths."""
    p = _Problems(work, BUILD_STATE)
    if not isinstance(state, dict):
        p.add("the file", state, "a JSON object with 'format', 'sources' and 'ir'")
        p.raise_if_any(path)
    sources = state.get("sources")
    expected = "a dict: C++ source -> {'sha256', 'generated_sha256', 'binary', 'binary_sha256'}"
    if "sources" not in state:
        p.missing("'sources'", expected)
    elif not isinstance(sources, dict):
        p.add("'sources'", sources, expected)
    else:
        wanted = [k["source"] for k in config["KERNELS"]] + [config["ORCHESTRATION"]["source"]]
        for src in wanted:
            rec = sources.get(src)
            if not isinstance(rec, dict):
                p.add(f"sources[{src!r}]", rec, "the hashes its binary was built from")
                continue
            for key in ("sha256", "generated_sha256"):
                p.field(rec, f"sources[{src!r}]", key, _hex, "a sha256 hex digest")
    ir = state.get("ir")
    if not isinstance(ir, dict):
        expected = "{'file', 'sha256', 'kernels', 'orchestration'}: the IR dump's hashes"
        if "ir" in state:
            p.add("'ir'", ir, expected)
        else:
            p.missing("'ir'", expected)
    else:
        p.path(ir, "ir", "file")
        p.field(ir, "ir", "sha256", _hex, "a sha256 hex digest")
        p.field(ir, "ir", "orchestration", _hex, "a sha256 hex digest")
        p.field(ir, "ir", "kernels", lambda v: isinstance(v, dict) and all(map(_hex, v.values())),
                "a dict: kernel name -> sha256 hex digest")  # fmt: skip
    p.raise_if_any(path)
