"""Crash reports: what the runtime core's fatal-signal handler wrote, as a ``Failure``.

When a kernel dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) and the run has a
``crash_report_path``, the handler writes, with write(2) only, a text header (signal, task,
kernel, worker, return addresses, the task's arguments, ``/proc/self/maps``), then the raw bytes
of every input and inout region, then ``end``::

    TSCRASH 1
    signal 11 SIGSEGV
    code 1
    fault_addr 0x10
    task 3
    func_id 0
    worker 1
    kernel rms_rows
    fault_near 2 after 4096          (only when the address is in the guard pages of arg 2's tensor)
    frames 0x7f0012345678 0x7f00123456aa ...
    nargs 4
    arg 0 tensor in 0 2 64 512 ; 512 1 ; 0 131072
    arg 3 scalar 0 0x3eb0c6f7a0b5ed8d
    maps_begin
    ...
    maps_end
    payload 0 131072
    <131072 raw bytes>
    end

Invariants:
- ``read_crash_report`` never raises: a missing, empty, cut-short or garbled report still gives
  a ``Failure`` (kind ``crash``) that says what could not be read.
- The task's inputs are saved (``failures.save_task_inputs``) only when every input and inout
  payload was read whole; otherwise the report says which one is missing and nothing is saved.
- An inout's payload is taken after the kernel partly ran, so it is saved as ``partial``.
"""

from __future__ import annotations

import os
import signal
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope.debug.failures import Failure, SavedArg, SourceFrame, save_task_inputs
from tilescope.debug.symbolize import kernel_frame, symbolize
from tilescope.ir import dtypes as dt

MAGIC = b"TSCRASH"
FORMAT_VERSION = 1
_DIRECTIONS = {"in": "input", "out": "output", "inout": "inout"}

_SI_CODES = {
    0: "SI_USER (sent by kill)",
    -1: "SI_QUEUE (sent by sigqueue)",
    -6: "SI_TKILL (sent by tkill/raise/abort)",
}
_SIGNAL_CODES = {
    "SIGSEGV": {1: "SEGV_MAPERR (address not mapped)", 2: "SEGV_ACCERR (no permission for the access)"},
    "SIGBUS": {1: "BUS_ADRALN (misaligned address)", 2: "BUS_ADRERR (no such physical address)",
               3: "BUS_OBJERR (object-specific error)"},
    "SIGFPE": {1: "FPE_INTDIV (integer divide by zero)", 2: "FPE_INTOVF (integer overflow)",
               3: "FPE_FLTDIV (float divide by zero)", 4: "FPE_FLTOVF (float overflow)",
               5: "FPE_FLTUND (float underflow)", 6: "FPE_FLTRES (float inexact result)",
               7: "FPE_FLTINV (invalid float operation)", 8: "FPE_FLTSUB (subscript out of range)"},
    "SIGILL": {1: "ILL_ILLOPC (illegal opcode)", 2: "ILL_ILLOPN (illegal operand)",
               3: "ILL_ILLADR (illegal addressing mode)", 4: "ILL_ILLTRP (illegal trap)",
               5: "ILL_PRVOPC (privileged opcode)", 8: "ILL_BADSTK (internal stack error)"},
}  # fmt: skip


@dataclass
class CrashArg:
    """One argument of the crashed task, as the handler described it."""

    index: int
    kind: str  # tensor | scalar
    direction: str  # in | out | inout | scalar
    dtype_code: int
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    start_offset: int = 0
    nbytes: int = 0
    value: float | int | bool | None = None  # scalars
    payload: bytes | None = None  # in / inout tensors: the region, row-major contiguous

    @property
    def dtype(self) -> dt.DType | None:
        """The DType of ``dtype_code``, or None for a code this version does not know."""
        return dt.BY_CODE.get(self.dtype_code)

    def describe(self, name: str) -> str:
        """One line naming the argument ``name``: a scalar's value, or a tensor's view of its buffer."""
        dtype = self.dtype.name if self.dtype else f"dtype code {self.dtype_code}"
        if self.kind == "scalar":
            return f"arg {self.index} {name}: scalar {dtype} = {_scalar_text(self.value, self.dtype)}"
        return (
            f"arg {self.index} {name}: {self.direction} {dtype} {list(self.shape)} (strides "
            f"{list(self.strides)}, from element {self.start_offset} of its buffer, {self.nbytes} bytes)"
        )


@dataclass
class CrashReport:
    """The parsed contents of a crash report; ``problems`` lists what could not be read."""

    signo: int = 0
    signame: str = ""
    code: int | None = None
    fault_addr: int | None = None
    fault_near: tuple[int, str, int] | None = None  # (arg, "after" | "before", bytes): in its guard pages
    task_id: int = -1
    func_id: int = -1
    worker: int = -1
    kernel: str = ""
    frames: list[int] = field(default_factory=list)
    nargs: int | None = None
    args: dict[int, CrashArg] = field(default_factory=dict)
    maps: str | None = None
    complete: bool = False  # the final `end` was read
    problems: list[str] = field(default_factory=list)


def _scalar_text(value: Any, dtype: dt.DType | None) -> str:
    """A scalar as its dtype holds it: f32 1e-06, not the double 9.999999974752427e-07."""
    if isinstance(value, float) and dtype is not None and dtype.name in ("f32", "f16"):
        import numpy as np

        return str((np.float32 if dtype.name == "f32" else np.float16)(value))
    return repr(value)


def _int(text: str) -> int:
    return int(text, 0)


def _scalar(dtype_code: int, bits: int) -> float | int | bool:
    dtype = dt.BY_CODE.get(dtype_code)
    raw = (bits & (2**64 - 1)).to_bytes(8, "little")
    if dtype is not None and dtype.is_float:
        return struct.unpack("<d", raw)[0]
    value = struct.unpack("<q", raw)[0]
    return bool(value) if dtype is dt.bool_ else value


def _parse_arg(fields: list[str]) -> CrashArg:
    """``<i> tensor <dir> <dtype> <ndim> <shape...> ; <strides...> ; <start> <bytes>`` or
    ``<i> scalar <dtype> 0x<bits>``; raises ValueError/IndexError when malformed."""
    index, kind = int(fields[0]), fields[1]
    if kind == "scalar":
        code = int(fields[2])
        return CrashArg(index, "scalar", "scalar", code, value=_scalar(code, _int(fields[3])))
    if kind != "tensor" or fields[2] not in _DIRECTIONS:
        raise ValueError(f"unknown argument kind {kind!r} / direction {fields[2]!r}")
    code, ndim = int(fields[3]), int(fields[4])
    rest = fields[5:]
    shape = tuple(int(x) for x in rest[:ndim])
    if len(shape) != ndim or rest[ndim] != ";":
        raise ValueError("bad shape")
    strides = tuple(int(x) for x in rest[ndim + 1 : 2 * ndim + 1])
    if len(strides) != ndim or rest[2 * ndim + 1] != ";":
        raise ValueError("bad strides")
    start, nbytes = (int(x) for x in rest[2 * ndim + 2 : 2 * ndim + 4])
    return CrashArg(index, "tensor", fields[2], code, shape, strides, start, nbytes)


def parse_crash_report(data: bytes) -> CrashReport:
    """Parse a crash report's bytes as far as they go. Never raises."""
    rep = CrashReport()
    pos, n = 0, len(data)

    def next_line() -> str | None:
        nonlocal pos
        if pos >= n:
            return None
        end = data.find(b"\n", pos)
        if end < 0:  # a line without its newline: cut short while it was being written
            rep.problems.append(f"the last line is cut short: {data[pos : pos + 60]!r}")
            pos = n
            return None
        line = data[pos:end].decode("utf-8", errors="replace")
        pos = end + 1
        return line

    first = next_line()
    if first is None:
        rep.problems.append("the report is empty")
        return rep
    if not first.startswith(MAGIC.decode()):
        rep.problems.append(f"not a tilescope crash report (it starts with {first[:40]!r})")
        return rep
    version = first.split()[1:2]
    if version != [str(FORMAT_VERSION)]:
        rep.problems.append(
            f"crash report format {' '.join(version) or '?'}; this tilescope reads {FORMAT_VERSION}"
        )
    while (line := next_line()) is not None:
        key, _, rest = line.partition(" ")
        fields = rest.split()
        try:
            if key == "signal":
                rep.signo = int(fields[0])
                rep.signame = fields[1] if len(fields) > 1 else _signal_name(rep.signo)
            elif key == "code":
                rep.code = int(fields[0])
            elif key == "fault_addr":
                rep.fault_addr = _int(fields[0])
            elif key == "fault_near":
                rep.fault_near = (int(fields[0]), fields[1], int(fields[2]))
            elif key == "task":
                rep.task_id = int(fields[0])
            elif key == "func_id":
                rep.func_id = int(fields[0])
            elif key == "worker":
                rep.worker = int(fields[0])
            elif key == "kernel":
                rep.kernel = rest.strip()
            elif key == "frames":
                rep.frames = [_int(f) for f in fields]
            elif key == "nargs":
                rep.nargs = int(fields[0])
            elif key == "arg":
                arg = _parse_arg(fields)
                rep.args[arg.index] = arg
            elif key == "maps_begin":
                end = data.find(b"\nmaps_end\n", pos - 1)
                if end < 0:
                    rep.maps = data[pos:].decode("utf-8", errors="replace")
                    rep.problems.append("the memory map is cut short (no maps_end)")
                    pos = n
                else:
                    rep.maps = data[pos : end + 1].decode("utf-8", errors="replace")
                    pos = end + len(b"\nmaps_end\n")
            elif key == "payload":
                index, size = int(fields[0]), int(fields[1])
                chunk = data[pos : pos + size]
                pos += len(chunk)
                if pos < n and data[pos : pos + 1] == b"\n":
                    pos += 1  # a newline after the raw bytes, if the handler writes one
                arg = rep.args.get(index)
                if arg is None:
                    rep.problems.append(f"a payload for arg {index}, which the report does not describe")
                    continue
                arg.payload = chunk
                if len(chunk) < size:
                    rep.problems.append(
                        f"the payload of arg {index} is cut short ({len(chunk)} of {size} bytes)"
                    )
            elif key == "end":
                rep.complete = True
                break
            else:
                rep.problems.append(f"an unknown line {line[:60]!r}")
        except (ValueError, IndexError):
            rep.problems.append(f"a malformed line {line[:80]!r}")
    if not rep.complete:
        rep.problems.append("no `end` line: the handler died, or was killed, while writing the report")
    if not rep.signame and rep.signo:
        rep.signame = _signal_name(rep.signo)
    if rep.nargs is not None and len(rep.args) < rep.nargs:
        missing = [i for i in range(rep.nargs) if i not in rep.args]
        rep.problems.append(f"arguments {missing} are not described")
    return rep


def _signal_name(signo: int) -> str:
    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


def _code_text(signame: str, code: int) -> str:
    return _SIGNAL_CODES.get(signame, {}).get(code) or _SI_CODES.get(code) or str(code)


def _param_names(kernel: dict[str, Any] | None, nargs: int) -> list[str]:
    params = (kernel or {}).get("params") or []
    return [params[i]["name"] if i < len(params) else f"arg{i}" for i in range(nargs)]


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


def _source_line(cpp: str) -> str:
    path, _, line = cpp.rpartition(":")
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        return lines[int(line) - 1].strip()
    except (OSError, ValueError, IndexError):
        return ""


def _tensor(arg: CrashArg) -> Any:
    import torch

    assert arg.dtype is not None and arg.payload is not None
    raw = torch.frombuffer(bytearray(arg.payload), dtype=torch.uint8)
    return raw.view(arg.dtype.torch).reshape(arg.shape).clone()


def _saved_args(rep: CrashReport, names: list[str]) -> tuple[list[SavedArg], list[str]]:
    """The task's arguments for ``save_task_inputs``, or why they cannot all be saved."""
    import torch

    saved: list[SavedArg] = []
    missing: list[str] = []
    if rep.nargs is None:
        missing.append("the report does not say how many arguments the task has")
    for i in range(rep.nargs or 0):
        arg = rep.args.get(i)
        name = names[i] if i < len(names) else f"arg{i}"
        if arg is None:
            missing.append(f"arg {i} {name} is not described")
            continue
        if arg.kind == "scalar":
            saved.append(SavedArg(i, name, "scalar", arg.value))
            continue
        if arg.dtype is None:
            missing.append(f"arg {i} {name} has an unknown dtype code {arg.dtype_code}")
            continue
        role = _DIRECTIONS[arg.direction]
        if role == "output":
            saved.append(SavedArg(i, name, role, torch.zeros(arg.shape, dtype=arg.dtype.torch)))
            continue
        expected = arg.dtype.itemsize
        for s in arg.shape:
            expected *= s
        if arg.payload is None:
            missing.append(f"the payload of arg {i} {name} is missing")
        elif len(arg.payload) != expected:
            missing.append(f"the payload of arg {i} {name} has {len(arg.payload)} of {expected} bytes")
        else:
            saved.append(SavedArg(i, name, role, _tensor(arg), partial=role == "inout"))
    return saved, missing


def read_crash_report(
    path: str | os.PathLike,
    program: Any,
    *,
    kernels: list[dict[str, Any]] | None = None,
    task_id: int | None = None,
    save_inputs: bool = True,
) -> Failure:
    """The ``Failure`` a crash report describes, its frames resolved to C++ and DSL lines.

    Args:
        path: the report the runtime core's fatal-signal handler wrote.
        program: the ``CompiledProgram`` that ran (its build names kernels and parameters).
        kernels: the kernel table of the run, by func_id (default: the program's kernels).
        task_id: the id to report instead of the report's own (a task replayed alone).
        save_inputs: save the task's inputs for ``tilescope replay --task``.

    Never raises: what could not be read is said in the Failure.
    """
    kernels = program.kernels if kernels is None else kernels
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return Failure("crash", f"{program.name} crashed, but its crash report {path} cannot be read: {e}")
    rep = parse_crash_report(data)
    work = Path(program.work_dir)
    kernel = kernels[rep.func_id] if 0 <= rep.func_id < len(kernels) else None
    kernel_name = rep.kernel or (kernel or {}).get("name", "")
    tid = rep.task_id if task_id is None else task_id
    frames: list[SourceFrame] = symbolize(rep.frames, rep.maps or "", build=work) if rep.frames else []
    here = kernel_frame(frames)
    signame = rep.signame or "an unknown signal"

    where = ""
    if here is not None:
        where = f" at {_relative(here.cpp.rpartition(':')[0], work)}:{here.cpp.rpartition(':')[2]}"
        if here.dsl:
            where += f" (DSL {here.dsl})"
    elif frames:
        where = f" at {frames[0].describe()}"
    address = (
        f" (address {rep.fault_addr:#x})"
        if rep.fault_addr is not None and signame in ("SIGSEGV", "SIGBUS")
        else ""
    )
    who = f"task {tid} '{kernel_name}' (kernel {kernel_name or '?'})" if tid >= 0 else "a task"
    on = f" on worker {rep.worker}" if rep.worker >= 0 else ""
    message = f"{who}{on} died of {signame}{address}{where}"
    if not rep.signo and rep.problems:
        message = f"{program.name} crashed; its crash report {path} is unreadable: {rep.problems[0]}"

    details = []
    if rep.signo:
        code = f", code {_code_text(signame, rep.code)}" if rep.code is not None else ""
        details.append(f"signal {signame} ({rep.signo}){code}")
    names = _param_names(kernel, max(rep.nargs or 0, len(rep.args)))
    if address:
        details.append(f"fault address {rep.fault_addr:#x}")
    if rep.fault_near is not None:
        arg, side, distance = rep.fault_near
        name = names[arg] if 0 <= arg < len(names) else f"arg{arg}"
        edge = "past the end" if side == "after" else "before the start"
        details.append(
            f"that address is {distance} byte(s) {edge} of {name} (arg {arg}), in the guard pages around "
            "it: the kernel went outside that tensor"
        )
    if here is not None:
        text = _source_line(here.cpp)
        details.append(f"C++ {here.cpp}" + (f": {text}" if text else ""))
        if here.dsl:
            details.append(f"DSL {here.dsl}" + (f": {here.dsl_source}" if here.dsl_source else ""))
    if rep.args:
        details.append(f"arguments of task {tid}:")
        details += [
            f"  {a.describe(names[i] if i < len(names) else f'arg{i}')}" for i, a in sorted(rep.args.items())
        ]
    details += [f"crash report incomplete: {p}" for p in rep.problems]

    failure = Failure(
        kind="crash",
        message=message,
        task_id=tid,
        task_name=kernel_name,
        kernel=kernel_name,
        worker=rep.worker,
        details=details,
        frames=frames,
        signal=rep.signame if rep.signo else "",
        cause="fault" if rep.signame in ("SIGSEGV", "SIGBUS") else "",
    )
    if rep.fault_near is not None:
        failure.arg = rep.fault_near[0]
        failure.tensor = names[failure.arg] if 0 <= failure.arg < len(names) else ""
    failure.locate()
    if save_inputs and rep.signo and tid >= 0:
        _save(failure, rep, program, kernel, names)
    return failure


def _save(failure: Failure, rep: CrashReport, program: Any, kernel: dict | None, names: list[str]) -> None:
    saved, missing = _saved_args(rep, names)
    if kernel is None:
        missing.append(f"func_id {rep.func_id} is not a kernel of {program.name}")
    if missing:
        failure.details.append("the task's inputs are not saved: " + "; ".join(missing))
        return
    try:
        out = save_task_inputs(
            Path(program.work_dir),
            failure.task_id,
            failure.task_name,
            failure.kernel,
            rep.func_id,
            saved,
            f"crash: {failure.message}",
        )
    except OSError as e:
        failure.details.append(f"the task's inputs could not be saved: {e}")
        return
    failure.saved_inputs = str(out)
    build = str(program.work_dir)
    pick = "" if out.name == f"task_{failure.task_id}" else f" --from {out}"
    failure.next_steps += [
        f"tilescope replay {build} --task {failure.task_id}{pick}",
        f"tilescope replay {build} --task {failure.task_id}{pick} -p interp",
    ]


__all__ = ["CrashArg", "CrashReport", "parse_crash_report", "read_crash_report"]
