"""Failure reports: what went wrong in a run, named by task, kernel, tensor and source line.

Every way a sim run can fail (an orchestration error, a deadlock, a task past its time budget,
a kernel that threw, a crash in an isolated child, a NaN/Inf) ends in one ``Failure``. It
renders as the text the user reads, converts to and from JSON (an isolated child hands it to
its parent), and says where the failing task's inputs were saved for ``tilescope replay --task``.

Invariants:
  - What tools decide on is a field, set where the failure is made (the runtime's failure record,
    the crash report, the isolated child): ``kind`` and ``cause``, the task and kernel, the op, the
    argument and tensor, the DSL and C++ lines, the signal. ``message`` and ``details`` are for a
    person; no tool reads them.
  - ``Failure.render()`` needs nothing but the Failure: every name, region and source line is
    resolved when the Failure is built, while the run's records and binaries are at hand.
  - Saved task inputs live in ``<build>/dfx_outputs/failure/task_<id>/`` (``task.json`` plus one
    ``.pt`` per argument); an existing directory of that name is never overwritten: a new one
    gets a ``_<n>`` suffix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tilescope.build.paths import DFX_DIR, FAILURE_DIR, TASK_JSON, atomic_write, inside, torch_save

KINDS = (
    "error", "deadlock", "timeout", "kernel_error", "guard", "crash", "exit", "interrupted", "nan", "input_written",
)  # fmt: skip
# What a failure was, finer than its kind, when the place that made it knew:
#   bounds  (kernel_error) a load or store outside its tensor, or valid counts outside its tile
#   region  (error) the orchestration gave a task a region, or read an element, outside its tensor
#   fault   (crash) a kernel touched memory it may not (SIGSEGV, SIGBUS)
CAUSES = ("", "bounds", "region", "fault")


@dataclass
class SourceFrame:
    """One frame of a stopped or crashed thread, resolved as far as the binaries allow."""

    pc: int
    module: str = ""  # the shared object's path ("" if unknown)
    function: str = ""
    cpp: str = ""  # "path/to/kernel.cpp:41" when the module has line info
    dsl: str = ""  # "model.py:17" from the C++ line's `// @ file:line` marker
    dsl_source: str = ""  # that DSL line's text, stripped

    def describe(self) -> str:
        """One line: the function, its C++ place (or module + offset) and the DSL line, as known."""
        where = self.cpp or f"{Path(self.module).name or '?'}+{self.pc:#x}"
        text = f"{self.function or '??'} at {where}"
        if self.dsl:
            text += f" (DSL {self.dsl}" + (f": {self.dsl_source}" if self.dsl_source else "") + ")"
        return text


@dataclass
class Failure:
    """How a run failed, worded for a person: what, where, the saved inputs, and what to run next."""

    kind: str  # one of KINDS
    message: str  # one line: what happened
    task_id: int = -1
    task_name: str = ""
    kernel: str = ""
    worker: int = -1
    details: list[str] = field(default_factory=list)  # further lines of the report, already worded
    frames: list[SourceFrame] = field(default_factory=list)
    saved_inputs: str = ""  # directory of the saved task inputs, "" if none
    # nan: every task saved, "<id>: <dir>" in task id order (saved_inputs is the first's)
    saved_tasks: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)  # commands worth running next
    cause: str = ""  # one of CAUSES
    op: str = ""  # the DSL op that failed ("load", "store", "load_rows"), "" if not known
    arg: int = -1  # the failing kernel argument, -1 if not known
    tensor: str = ""  # that argument's kernel parameter name
    dsl_line: str = ""  # "model.py:17": the user's line, "" if not known
    cpp_line: str = ""  # "/abs/build/kernels/vec/k.cpp:41": the generated line, "" if not known
    signal: str = ""  # crash: "SIGSEGV"

    def locate(self) -> None:
        """Set ``dsl_line`` and ``cpp_line`` from the frames, where not already known."""
        frame = self.where()
        if frame is not None:
            self.dsl_line = self.dsl_line or frame.dsl
            self.cpp_line = self.cpp_line or frame.cpp

    def where(self) -> SourceFrame | None:
        """The innermost frame with a DSL line (the user's code), else the innermost frame."""
        for f in self.frames:
            if f.dsl:
                return f
        return self.frames[0] if self.frames else None

    def render(self) -> str:
        """The multi-line report: message, details, up to eight frames, the saved inputs, next steps."""
        lines = [f"[{self.kind}] {self.message}"]
        lines += [f"  {d}" for d in self.details]
        if self.frames:
            lines.append("  where:")
            lines += [f"    #{i} {f.describe()}" for i, f in enumerate(self.frames[:8])]
        if len(self.saved_tasks) > 1:
            lines.append("  the inputs of these tasks are saved:")
            lines += [f"    task {s}" for s in self.saved_tasks]
        elif self.saved_inputs:
            lines.append(f"  the task's inputs are saved in {self.saved_inputs}")
        lines += [f"  next: {s}" for s in self.next_steps]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The failure as plain JSON data (``from_json`` reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Failure:
        """The Failure ``to_json`` wrote."""
        data = dict(data)
        data["frames"] = [SourceFrame(**f) for f in data.get("frames", [])]
        return cls(**data)


@dataclass
class SavedArg:
    """One argument of a task, as saved for replaying the task alone."""

    index: int
    name: str  # the kernel parameter's name
    role: str  # input | inout | output | scalar
    value: Any  # a torch tensor (the region, contiguous) or a Python number
    partial: bool = False  # an inout captured after the kernel had partly run
    region: str = ""  # the part of the run's tensor it was, ``h[0:64, 0:128]`` ("" if unknown)


def _fresh_dir(base: Path) -> Path:
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            path = base.with_name(f"{base.name}_{n}")
            n += 1


def save_task_inputs(
    work_dir: Path,
    task_id: int,
    task_name: str,
    kernel: str,
    kernel_index: int,
    args: list[SavedArg],
    why: str,
) -> Path:
    """Write a task's arguments to ``dfx_outputs/failure/task_<id>[_n]/``; returns the directory.

    ``task.json`` names the kernel and lists every argument (its kernel parameter name, role,
    dtype, shape, and file or scalar value); tensors are ``<name>.pt``. Outputs are listed
    without a file (the kernel writes them).
    """
    import torch

    out = _fresh_dir(inside(work_dir, DFX_DIR, FAILURE_DIR, f"task_{task_id}"))
    entries = []
    for a in args:
        entry: dict[str, Any] = {"index": a.index, "name": a.name, "role": a.role, "partial": a.partial}
        if a.region:
            entry["region"] = a.region
        if torch.is_tensor(a.value):
            entry.update(dtype=str(a.value.dtype).removeprefix("torch."), shape=list(a.value.shape))
            if a.role != "output":
                entry["file"] = f"{a.name}.pt"
                torch_save(a.value.clone(), out / entry["file"])
        else:
            entry["value"] = a.value
        entries.append(entry)
    meta = {
        "task_id": task_id,
        "task_name": task_name,
        "kernel": kernel,
        "kernel_index": kernel_index,
        "why": why,
        "args": entries,
    }
    atomic_write(inside(out, TASK_JSON), json.dumps(meta, indent=2) + "\n")
    return out


__all__ = ["CAUSES", "FAILURE_DIR", "KINDS", "Failure", "SavedArg", "SourceFrame", "save_task_inputs"]
