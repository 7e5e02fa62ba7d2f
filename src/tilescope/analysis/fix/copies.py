"""The copy of a user's DSL module that a candidate edit makes, imported under a name of its own
(``load_program``): what the screening and the verification of a fix build their program from.

Invariants:
- The copy lives in the proposal's own folder; the original's directory is importable while it
  imports (its siblings resolve), and no ``__pycache__`` is written beside anyone's files.
- While a copy imports, ``candidate_import()`` names it, so ``run_jit`` at a module's top level
  runs nothing then.
"""

from __future__ import annotations

import contextvars
import importlib.util
import sys
from pathlib import Path

from tilescope.launch.jit import JitFunction

NOT_TOP_LEVEL = "has no @ts.jit program named"


_importing: contextvars.ContextVar[Path | None] = contextvars.ContextVar("tilescope_fix_importing", default=None)


def candidate_import() -> Path | None:
    """The copy of a module being imported to try a fix, while it is (``run_jit`` at a module's
    top level runs nothing then)."""
    return _importing.get()


def load_program(path: Path, home: Path, name: str, tag: str) -> JitFunction:
    """The ``@ts.jit`` program ``name`` of the module at ``path`` (imported under its own name,
    with ``home``, the original's directory, importable). When ``home`` is a package's folder,
    the copy is imported as a module of that package (its relative imports and its imports of
    sibling modules resolve as the original's do), with the package's root importable."""
    package, root = _package_of(home)
    qualified = f"{package}._tilescope_fix_{path.stem}_{tag}" if package else f"_tilescope_fix_{path.stem}_{tag}"
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    added = [str(p) for p in dict.fromkeys((home, root)) if str(p) not in sys.path]
    sys.path[:0] = added
    token = _importing.set(path)
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # NOTE: no __pycache__ beside anyone's files
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = bytecode
        _importing.reset(token)
        for p in added:
            sys.path.remove(p)
    found = [v for v in vars(module).values() if isinstance(v, JitFunction) and v.name == name]
    if not found:
        raise ImportError(f"{path} {NOT_TOP_LEVEL} {name!r} at its top level")
    return found[0]


def _package_of(folder: Path) -> tuple[str, Path]:
    """The dotted name of the package ``folder`` is (``''`` when it holds no ``__init__.py``) and
    the folder its top package lies in."""
    parts: list[str] = []
    at = folder.resolve()
    while (at / "__init__.py").is_file() and at.name.isidentifier():
        parts.insert(0, at.name)
        at = at.parent
    return ".".join(parts), at
