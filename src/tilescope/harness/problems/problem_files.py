"""A problem's two files imported: the reference's ``Model``, ``get_inputs`` and
``get_init_inputs``, and the solution's ``ModelNew``.

Invariants:
- Each file is imported by its path under a module name of its own (two problems' ``Model``
  never meet), with its folder importable while it is imported (a solution may import a helper
  beside it, ``_common.py``).
- Whatever an import raises, and a name a file lacks, is one ProblemError whose first line
  names the file (and the line it raised at) and says what to do; never a traceback.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tilescope.analysis.user_code import user_failure, user_frame
from tilescope.errors import DSLError, RuntimeFailure, TilescopeError
from tilescope.harness.problems.pairing import FORMAT_HINT

_COUNT = itertools.count()


class ProblemError(TilescopeError):
    """One problem cannot be run, or its solution failed: the message says which file and why."""


@dataclass(frozen=True)
class Reference:
    """What a reference file defines."""

    model: type
    get_inputs: Any
    get_init_inputs: Any


def _import(path: Path, role: str) -> ModuleType:
    name = f"_tilescope_{role}_{next(_COUNT)}_{path.stem.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[name]
        raise ProblemError(f"{e.filename or path}:{e.lineno}: the {role} does not parse: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - a file that fails to import is this problem's error, not the suite's
        del sys.modules[name]
        raise ProblemError(_import_failure(path, role, e)) from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def _import_failure(path: Path, role: str, e: BaseException) -> str:
    if isinstance(e, DSLError):  # a decorator refused a kernel: its line is in the message
        return f"{path}: the {role}'s tilescope code does not compile: {e}"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
    where = f"{path}:{frames[-1].lineno}" if frames else str(path)
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    source = (frames[-1].line or "").strip() if frames else ""
    return f"{where}: importing the {role} raised {text}" + (f"\n    {source}" if source else "")


def load_reference(path: Path) -> Reference:
    """The reference's ``Model``, ``get_inputs`` and ``get_init_inputs``.

    Raises:
        ProblemError: the file does not import, or lacks one of them.
    """
    module = _import(path, "reference")
    model = getattr(module, "Model", None)
    missing = [what for what, ok in (
        ("class Model(nn.Module)", isinstance(model, type)),
        ("get_inputs()", callable(getattr(module, "get_inputs", None))),
        ("get_init_inputs()", callable(getattr(module, "get_init_inputs", None))),
    ) if not ok]  # fmt: skip
    if missing:
        raise ProblemError(f"{path}: the reference defines no {' and no '.join(missing)}; {FORMAT_HINT}")
    return Reference(model, module.get_inputs, module.get_init_inputs)


def load_solution(path: Path) -> type:
    """The solution's ``ModelNew`` class.

    Raises:
        ProblemError: the file does not import, or defines no class ModelNew.
    """
    module = _import(path, "solution")
    cls = getattr(module, "ModelNew", None)
    if isinstance(cls, type):
        return cls
    also = " (it defines Model: name the solution's class ModelNew)" if isinstance(getattr(module, "Model", None),
                                                                                   type) else ""  # fmt: skip
    raise ProblemError(
        f"{path}: the solution defines no class ModelNew{also}; a solution defines class ModelNew(nn.Module), "
        "made with the reference's get_init_inputs() and called with its get_inputs(), whose forward calls "
        "tilescope programs"
    )


def call_failure(what: str, fn: Any, e: BaseException) -> str:
    """How a failure of the user's ``fn`` reads: a tilescope program that does not compile, fails at
    run time or refuses its arguments, with the user's line that called it; anything else at the
    user's line it raised at (``user_failure``)."""
    if not isinstance(e, TilescopeError):
        return user_failure(what, fn, e)
    frame = user_frame(e)
    at = f" (called at {frame.filename}:{frame.lineno})" if frame is not None else ""
    if isinstance(e, DSLError):
        return f"{what} tilescope program does not compile{at}: {e}"
    if isinstance(e, RuntimeFailure):
        return f"{what} tilescope program failed at run time{at}: {e}"
    return f"{what} call of a tilescope program was refused{at}: {e}"


__all__ = ["ProblemError", "Reference", "call_failure", "load_reference", "load_solution"]
