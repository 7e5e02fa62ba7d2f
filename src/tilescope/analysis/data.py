"""Data snapshots of a run: ``<build>/data/in/<name>.pt`` and ``<build>/data/out/<name>.pt``.

Invariants:
- ``in/`` holds every input and the initial value of every InOut; ``out/`` holds every golden
  output. InOuts appear in both. Scalars are 0-dim tensors of their dtype.
- Loading uses ``torch.load(weights_only=True)`` and checks the files against the program's
  argument specs; every problem (missing or extra file, wrong shape or dtype, unreadable file)
  is listed in one error. Nothing in the data directory is ever modified or deleted by loading.
- A snapshot is whole or absent: it is written into a temporary directory beside its place and
  renamed into place last; a failed save (a full disk: torch.save's RuntimeError included) removes
  it and is one DataError, and what a killed save left is no snapshot to any reader
  (``paths.saved_data`` counts only one with ``meta.json``, written last) and is removed by the
  next save there.
- Saving never overwrites an existing snapshot, nor files a save that did not finish left: it
  refuses and says where the data already is.
- ``intermediates/<name>.pt`` holds what ``golden_fn`` filled besides the outputs (``t["h"] = ...``):
  the references of intermediates and probes that ``tilescope localize`` compares with.
- ``golden/trace.pt`` holds every step ``golden_fn`` computed, with its op and line
  (``golden_trace``): the references localize aligns the kernels' tiles with.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.compare import tolerance_problem
from tilescope.analysis.golden_trace import GoldenTrace
from tilescope.build.manifest import ArgSpec
from tilescope.build.paths import (
    DATA_DIR,
    DATA_META,
    DATA_SECOND,
    GOLDEN_TRACE,
    atomic_dir,
    atomic_write,
    complete_snapshot,
    inside,
    torch_save,
    write_problem,
)
from tilescope.build.paths import DATA_REFERENCES as REFERENCES
from tilescope.errors import TilescopeError
from tilescope.ir.types import Direction


class DataError(TilescopeError):
    """A data directory does not match the program it is replayed against."""


def _as_tensor(arg: ArgSpec, value: Any) -> torch.Tensor:
    if arg.shape is None:
        return torch.tensor(value, dtype=arg.dtype.torch)
    return value.detach().cpu().contiguous()


def save_snapshot(
    data_dir: Path,
    args: list[ArgSpec],
    inputs: dict[str, Any],
    golden: dict[str, Any],
    meta: dict[str, Any],
    references: dict[str, Any] | None = None,
    trace: GoldenTrace | None = None,
    second: Second | None = None,
) -> Path:
    """Write ``inputs`` (values before the run) to ``in/``, ``golden`` to ``out/``, ``references``
    (golden intermediates and probes) to ``intermediates/``, the golden's ``trace`` of its steps to
    ``golden/trace.pt``, ``meta`` (the tolerances and seed of the run) to ``meta.json`` and the
    ``second`` input set, when there is one, to ``second/``.

    The snapshot is written whole into a temporary directory beside ``data_dir`` and renamed into
    place last (``paths.atomic_dir``): a failed or killed save leaves no snapshot behind.

    Raises:
        DataError: ``data_dir`` already holds files (a snapshot, or what a save that did not finish
            left), or the snapshot cannot be written (a full disk, a read-only build).
    """
    _refuse_to_save_over(data_dir)

    def write(folder: Path) -> None:
        _save_set(folder, args, inputs, golden)
        if references:
            inside(folder, REFERENCES).mkdir()
            for name, value in references.items():
                torch_save(value.detach().cpu().contiguous(), inside(folder, REFERENCES, f"{name}.pt"))
        if trace is not None:
            trace.save(inside(folder, GOLDEN_TRACE))
        if second is not None:
            _save_second(inside(folder, DATA_SECOND), args, second, meta)
        atomic_write(inside(folder, DATA_META), json.dumps(meta, indent=2) + "\n")  # last

    try:
        atomic_dir(data_dir, write)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and data_dir.is_dir():
            _refuse_to_save_over(data_dir)  # another process saved there first
        fix = ("free space there" if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else
               "make the build writable" if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else
               "move what is in the way")  # fmt: skip
        raise DataError(
            f"cannot save the data snapshot into {data_dir}: {write_problem(e, data_dir)}; nothing was kept. "
            f"To keep it, {fix} and run again with --save-data"
        ) from None
    return data_dir


def _refuse_to_save_over(data_dir: Path) -> None:
    """A DataError when ``data_dir`` holds anything: a saved snapshot, or files a save left."""
    try:
        held = data_dir.is_dir() and any(data_dir.iterdir())
    except OSError:
        held = False
    if not held:
        return
    if complete_snapshot(data_dir):
        raise DataError(f"{data_dir} already holds a data snapshot; it is kept as it is (save into a new build)")
    raise DataError(
        f"{data_dir} holds an incomplete data snapshot (no {DATA_META}: a save that was interrupted, or files put "
        f"there by hand); it is kept as it is: remove it (rm -r {data_dir}) and save again, or save into a new build"
    )


def _save_set(folder: Path, args: list[ArgSpec], inputs: dict[str, Any], golden: dict[str, Any]) -> None:
    """``in/`` and ``out/`` of a snapshot: the inputs before the run and the golden outputs."""
    for sub in ("in", "out"):
        (folder / sub).mkdir(parents=True)
    for a in args:
        if a.is_input:
            torch_save(_as_tensor(a, inputs[a.name]), folder / "in" / f"{a.name}.pt")
        if a.is_output:
            torch_save(_as_tensor(a, golden[a.name]), folder / "out" / f"{a.name}.pt")


@dataclass(frozen=True)
class Second:
    """A second input set (drawn from the specs with ``seed``) and its golden outputs."""

    inputs: dict[str, Any]
    golden: dict[str, torch.Tensor]
    seed: int


def second_seed(seed: int) -> int:
    """The seed the second input set is drawn with: the next one (the one before, at the top of
    the range ``torch.manual_seed`` takes)."""
    return seed + 1 if seed < 2**64 - 1 else seed - 1


def _save_second(folder: Path, args: list[ArgSpec], second: Second, meta: dict[str, Any]) -> None:
    _save_set(folder, args, second.inputs, second.golden)
    keep = {k: meta[k] for k in ("rtol", "atol") if k in meta}
    atomic_write(inside(folder, DATA_META), json.dumps({**keep, "seed": second.seed}, indent=2) + "\n")


def load_second(data_dir: str | os.PathLike, args: list[ArgSpec]) -> tuple[Second | None, str]:
    """The second input set saved beside a snapshot, or None and why there is none."""
    folder = inside(data_dir, DATA_SECOND)
    if not folder.is_dir():
        return None, (f"{data_dir} holds no second input set (it is saved by run_jit with specs: --save-data, "
                      "--triage or --localize)")  # fmt: skip
    try:
        inputs, golden = load_snapshot(folder, args)
        seed = load_meta(folder).get("seed")
    except DataError as e:
        return None, f"the second input set cannot be read: {str(e).splitlines()[0]}"
    if not isinstance(seed, int) or isinstance(seed, bool):
        return None, f"{folder}/{DATA_META} names no seed"
    return Second(inputs, golden, seed), ""


def load_meta(data_dir: str | os.PathLike, given: Iterable[str] = ()) -> dict[str, Any]:
    """The tolerances and seed a snapshot was saved with ({} if it has no meta.json).

    The tolerances the caller does not give itself (``given``: ``"rtol"``, ``"atol"``) are checked:
    a DataError names the file, the key, what was expected and what to do.
    """
    path = inside(data_dir, DATA_META)
    if not path.is_file():
        return {}
    fix = "correct it, pass --rtol/--atol, or save the data again (--save-data, into a new build)"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path} is corrupt or unreadable ({e}); {fix}") from None
    if not isinstance(meta, dict):
        raise DataError(
            f"{path} holds a JSON {type(meta).__name__}, expected an object with rtol, atol and seed; {fix}"
        )
    # NOTE: the seed is only a record of how the inputs were made; a replay does not read it.
    problems = [tolerance_problem(k, meta[k]) for k in ("rtol", "atol") if k in meta and k not in given]
    problems = [p for p in problems if p]
    if problems:
        raise DataError(f"{path}: {'; '.join(problems)}; {fix}")
    return meta


def _load(path: Path, problems: list[str]) -> torch.Tensor | None:
    try:
        value = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - a corrupt file is one more listed problem
        # NOTE: torch's message for a file it cannot unpickle advises weights_only=False, the wrong advice for a
        # corrupt file (and an unsafe one for a file from elsewhere): only the error's kind is kept
        problems.append(f"{path}: cannot be loaded: not a tensor saved with torch.save, or corrupt ({type(e).__name__})")
        return None
    if not torch.is_tensor(value):
        problems.append(f"{path}: holds a {type(value).__name__}, expected a tensor")
        return None
    return value


def _check(a: ArgSpec, value: torch.Tensor, path: Path, problems: list[str]) -> None:
    shape = () if a.shape is None else a.shape
    if tuple(value.shape) != shape:
        problems.append(f"{path}: shape {list(value.shape)}, expected {list(shape)} for argument {a.name!r}")
    if value.dtype != a.dtype.torch:
        problems.append(f"{path}: dtype {value.dtype}, expected {a.dtype.torch} for argument {a.name!r}")


def load_references(data_dir: str | os.PathLike) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The references a snapshot holds (``intermediates/<name>.pt``), and a problem line for each
    file that is not a tensor or cannot be loaded."""
    folder = inside(data_dir, REFERENCES)
    problems: list[str] = []
    out: dict[str, torch.Tensor] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.pt")):
            value = _load(path, problems)
            if value is not None:
                out[path.stem] = value
    return out, problems


def load_snapshot(
    data_dir: str | os.PathLike, args: list[ArgSpec]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Every argument's value before the run (from ``in/``; scalars as Python numbers; Out-only
    tensors as zeros) and the golden outputs (from ``out/``)."""
    data_dir = Path(data_dir)
    what = "a data directory holds in/ and out/ .pt files, as --save-data writes them into <build>/data"
    if data_dir.is_file():
        raise DataError(f"golden data {data_dir} is a file, not a data directory ({what})")
    if not data_dir.is_dir():
        raise DataError(f"golden data directory {data_dir} does not exist ({what})")
    if not (data_dir / "in").is_dir() and inside(data_dir, DATA_DIR, "in").is_dir():
        raise DataError(
            f"{data_dir} is a build directory; pass its data directory instead: --golden-data {data_dir}/{DATA_DIR}"
        )
    problems: list[str] = []
    inputs: dict[str, Any] = {}
    golden: dict[str, torch.Tensor] = {}
    for sub, wanted, store in (
        ("in", [a for a in args if a.is_input], inputs),
        ("out", [a for a in args if a.is_output], golden),
    ):
        folder = data_dir / sub
        if not folder.is_dir():
            problems.append(f"{folder}: missing (expected {', '.join(f'{a.name}.pt' for a in wanted)})")
            continue
        present = {p.stem: p for p in folder.glob("*.pt")}
        for a in wanted:
            path = folder / f"{a.name}.pt"
            if a.name not in present:
                problems.append(f"{path}: missing (argument {a.name!r}, {a.direction.value})")
                continue
            value = _load(path, problems)
            if value is None:
                continue
            found = len(problems)
            _check(a, value, path, problems)
            if len(problems) == found:  # NOTE: a scalar file of several values has no .item()
                store[a.name] = value.item() if a.shape is None else value
        extra = sorted(set(present) - {a.name for a in wanted})
        problems += [
            f"{present[n]}: not an {'input' if sub == 'in' else 'output'} of the program" for n in extra
        ]
    for a in args:
        if a.direction is Direction.OUT:  # written by the program; starts as zeros, like a generated run
            inputs[a.name] = torch.zeros(a.shape, dtype=a.dtype.torch)
    if problems:
        raise DataError(
            f"golden data {data_dir} does not match the program ({len(problems)} problem(s)):\n  "
            + "\n  ".join(problems)
        )
    return inputs, golden
