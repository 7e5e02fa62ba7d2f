"""A build directory, read back: its ``kernel_config.py`` manifest, argument specs and final IR.

Invariants:
- ``Build`` needs only the build directory: ``kernel_config.py`` for signatures and argument
  specs, and ``ir/<program>.py`` (the final IR as DSL source) for what reads the IR. It never
  runs anything; ``launch.program.CompiledProgram`` adds running.
- A directory without ``kernel_config.py`` is not a build (or an interrupted one), and one
  written in another build format is refused with what to do; nothing in it is changed.
- ``check_args`` lists every argument that does not match, in one error.
- A ``Build`` holds a shared lock on its directory (``build.lock``) for as long as it lives, so
  ``tilescope clean`` never removes a build some process has loaded.
"""

from __future__ import annotations

import math
import os
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilescope.build.config_check import check_config
from tilescope.build.lock import hold_build
from tilescope.build.path_args import checked_path
from tilescope.build.paths import IR_DIR, KERNEL_CONFIG, inside
from tilescope.build.state import refresh
from tilescope.codegen.kernel_config import BUILD_FORMAT
from tilescope.errors import ArgumentError, BuildFileError, TilescopeError, clipped
from tilescope.ir import dtypes as dt
from tilescope.ir.nodes import Program
from tilescope.ir.types import Direction
from tilescope.language.frontend import load_source


@dataclass(frozen=True)
class ArgSpec:
    """One parameter of a program (or of a kernel): its name, direction, shape (None for a
    scalar) and dtype."""

    name: str
    direction: Direction
    shape: tuple[int, ...] | None
    dtype: dt.DType
    weight: bool = False  # a ts.Weight: kept the same from run to run

    @property
    def is_input(self) -> bool:
        """Whether the caller supplies a value: every direction but OUT (scalars included)."""
        return self.direction is not Direction.OUT

    @property
    def is_output(self) -> bool:
        """Whether a run writes the argument (OUT, INOUT)."""
        return self.direction.writes

    def describe(self) -> str:
        """How messages name the parameter: ``inout tensor [64, 512] f32``, ``scalar f32``."""
        if self.shape is None:
            return f"scalar {self.dtype.name}"
        what = "weight" if self.weight else self.direction.value
        return f"{what} tensor {list(self.shape)} {self.dtype.name}"


def _array_hint(spec: ArgSpec, a: Any) -> str:
    """What to do with a NumPy array given for a tensor parameter ("" for anything else)."""
    flags = getattr(a, "flags", None)
    if type(a).__module__.split(".")[0] != "numpy" or flags is None or not hasattr(a, "__array_interface__"):
        return ""
    if spec.is_output and not flags.writeable:
        return (f" that is read-only (a np.memmap opened with mode='r', or writeable=False), and a run writes its "
                f"{spec.direction.value} parameters: pass torch.from_numpy of a writable array (a memmap opened with "
                f"mode='r+' or 'c', or {spec.name}.copy())")  # fmt: skip
    return f": pass torch.from_numpy({spec.name}), which shares its memory"


def arg_specs(entries: list[dict[str, Any]]) -> list[ArgSpec]:
    """ArgSpecs from ``kernel_config.py`` rows (``ARGS``, or a kernel's ``params``)."""
    return [
        ArgSpec(
            a["name"],
            Direction(a["direction"]),
            None if a.get("shape") is None else tuple(a["shape"]),
            dt.by_name(a["dtype"]),
            a.get("weight") is True,
        )
        for a in entries
    ]


WHAT_A_BUILD_IS = (
    "a build directory is what a compile writes: build_output/_jit_<program>_<YYYYMMDD_HHMMSS>/, "
    "holding kernel_config.py, the C++ and its binaries"
)


def as_build_dir(value: Any) -> Path:
    """``value`` as a build directory's path; an ArgumentError when it is no path at all."""
    if isinstance(value, str | os.PathLike):
        return Path(value)
    shown = f" {value!r}"[:61] if isinstance(value, int | float | bytes) else ""
    raise ArgumentError(
        f"a build directory is given as a path (a str or os.PathLike), got {type(value).__name__}{shown}; "
        "pass the directory a compile wrote, e.g. prog.work_dir"
    )


def load_config(work: Path) -> dict[str, Any]:
    """The namespace of ``<work>/kernel_config.py``, checked for format and required names."""
    checked_path(work, "build directory")  # too long, a loop of links, no permission
    path = inside(work, KERNEL_CONFIG)
    shown = clipped(str(work))  # NOTE: the argument as given: quoted, never echoed whole
    if work.is_file():
        hint = f"; pass the directory it is in: {clipped(str(work.parent))}" if work.name == KERNEL_CONFIG else ""
        raise TilescopeError(f"{shown} is a file, not a build directory ({WHAT_A_BUILD_IS}){hint}")
    if not work.is_dir():
        raise TilescopeError(
            f"build directory {shown} does not exist ({WHAT_A_BUILD_IS}; `tilescope builds` lists them)"
        )
    if not path.is_file():
        raise TilescopeError(
            f"{shown} has no kernel_config.py: it is not a tilescope build directory, or its compile was "
            "interrupted; compile again"
        )
    try:
        cfg = runpy.run_path(str(path))
    except Exception as e:  # noqa: BLE001 - a corrupt config is reported, whatever broke
        raise TilescopeError(f"{path} cannot be loaded: {type(e).__name__}: {e}") from None
    fmt = cfg.get("BUILD_FORMAT")
    if fmt != BUILD_FORMAT:
        raise TilescopeError(
            f"{work} was written by tilescope {cfg.get('TILESCOPE_VERSION', '?')} (build format {fmt}); this "
            f"version reads format {BUILD_FORMAT}: compile the program again"
        )
    missing = [k for k in ("PROGRAM", "ORCHESTRATION", "KERNELS", "ARGS") if k not in cfg]
    if missing:
        raise TilescopeError(f"{path} lacks {', '.join(missing)}: compile the program again")
    check_config(work, path, cfg)
    return cfg


def scalar_out_of_range(value: int | float | bool, dtype: dt.DType) -> str | None:
    """Why the number ``value`` cannot be passed as a scalar of ``dtype`` (outside an integer
    dtype's range, not 0 or 1 for bool, a finite number beyond a float dtype's largest value,
    which would become inf), or None if it can. Infinities and NaN are float values."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    lo, hi = dt.value_range(dtype)
    if lo <= value <= hi:
        return None
    w = dt.wider(dtype)
    wider = f", or declare the parameter ts.Scalar[ts.{w.name}]" if w is not None else ""
    return (
        f"{dt.number_str(value)} does not fit a scalar {dtype.name} {dt.range_str(dtype)}; "
        f"pass a value in that range{wider}"
    )


class Build:
    """A build directory's manifest: ``name``, ``args`` (ArgSpecs), ``kernels`` (the
    ``KERNELS`` rows of ``kernel_config.py``) and ``config`` (the whole namespace)."""

    def __init__(self, work_dir: str | os.PathLike, program: Program | None = None):
        self.work_dir = as_build_dir(work_dir)
        self.config = load_config(self.work_dir)
        self._build_lock = hold_build(self.work_dir)  # `tilescope clean` leaves it alone while this lives
        self.name: str = self.config["PROGRAM"]
        self.args = arg_specs(self.config["ARGS"])
        self.kernels: list[dict] = self.config["KERNELS"]
        self.runtime_config: dict[str, Any] = self.config.get("RUNTIME_CONFIG", {})
        self._program = program

    @classmethod
    def refreshed(cls, path: str | os.PathLike) -> Build:
        """Load a build directory, first rebuilding only what was edited in it by hand (C++
        sources, or the IR dump ``ir/<program>.py``)."""
        path = as_build_dir(path)
        config = load_config(path)
        held = hold_build(path)  # not removed by `tilescope clean` while it is rebuilt
        refresh(path, config)
        build = cls(path)
        if held is not None:
            held.close()
        return build

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} at {self.work_dir}>"

    def kernel_params(self, index: int) -> list[ArgSpec]:
        """The parameters of kernel ``index`` (its func_id)."""
        return arg_specs(self.kernels[index].get("params") or [])

    def program(self) -> Program:
        """The final IR (read back from ``ir/<program>.py`` for a loaded build)."""
        if self._program is None:
            path = inside(self.work_dir, IR_DIR, f"{self.name}.py")
            if not path.is_file():
                raise BuildFileError(
                    f"{path} is missing: the build is incomplete (its compile was interrupted, or the file was "
                    "removed by hand), and the interpreter, localize, triage and --fix read the build's final IR "
                    "there: compile the program again"
                )
            self._program = load_source(path.read_text(), str(path))
        return self._program

    def check_args(self, args: tuple | list) -> None:
        """Raise ArgumentError listing every argument that does not match the program."""
        import torch

        problems = []
        if len(args) != len(self.args):
            names = ", ".join(a.name for a in self.args)
            raise ArgumentError(f"{self.name}({names}) takes {len(self.args)} arguments, got {len(args)}")
        for spec, a in zip(self.args, args):
            where = f"argument {spec.name!r}"
            if spec.shape is None:
                if torch.is_tensor(a) and a.device.type == "meta":
                    problems.append(
                        f"{where}: a meta tensor, which has no value (expected a Python "
                        f"{'number' if spec.dtype.is_float else 'int'}, {spec.describe()}): pass the value itself"
                    )
                    continue
                value = a.item() if torch.is_tensor(a) and a.dim() == 0 else a
                ok = (
                    isinstance(value, int | float | bool)
                    if spec.dtype.is_float
                    else isinstance(value, int | bool)
                )
                if not ok:
                    number = "number" if spec.dtype.is_float else "int"
                    shown = f" {value!r}" if isinstance(value, int | float) else ""
                    problems.append(
                        f"{where}: expected a Python {number} ({spec.describe()}), got {type(a).__name__}{shown}"
                    )
                elif (bad := scalar_out_of_range(value, spec.dtype)) is not None:
                    problems.append(f"{where}: {bad}")
                continue
            if not torch.is_tensor(a):
                problems.append(
                    f"{where}: expected a torch.Tensor ({spec.describe()}), got {type(a).__name__}{_array_hint(spec, a)}"
                )
                continue
            got = []
            if tuple(a.shape) != spec.shape:
                got.append(f"shape {list(a.shape)} (expected {list(spec.shape)})")
            if a.dtype != spec.dtype.torch:
                got.append(f"dtype {a.dtype} (expected {spec.dtype.torch})")
            if a.device.type == "meta":
                got.append("device meta (a meta tensor has a shape but no data; expected a CPU tensor holding the values)")
            elif a.device.type != "cpu":
                got.append(f"device {a.device} (expected cpu: move it with .cpu())")
            if a.layout != torch.strided:
                got.append(f"layout {a.layout} (expected a dense tensor, torch.strided: pass .to_dense())")
            elif not a.is_contiguous():
                got.append("a non-contiguous tensor (expected contiguous: pass .contiguous())")
            if spec.is_output and a.requires_grad and torch.is_grad_enabled():
                got.append(
                    "requires grad (a run writes its outputs in place, which autograd cannot record: pass "
                    f"{spec.name}.detach(), which shares its memory, or call under torch.no_grad())"
                )
            if got:
                problems.append(f"{where}: " + "; ".join(got))
        if problems:
            raise ArgumentError(
                f"{len(problems)} argument(s) of {self.name} do not match the compiled program:\n  "
                + "\n  ".join(problems)
            )
