"""Running a build in a child process, so that a crashing kernel becomes a report.

``run_isolated(program, args, config)`` runs one sim run in a child Python (``isolate.main(<dir>)``)
and returns its ``RunInfo`` as ``CompiledProgram.run`` would; a kernel that dies of a fatal
signal ends the child, not the caller, and is reported from the crash report the runtime core
writes (task, kernel, signal, C++ and DSL line; the task's inputs saved for
``tilescope replay --task``).

Invariants:
- Tensors travel through one shared file (``/dev/shm`` when it has room, else the temp dir):
  the parent copies every tensor argument in, the child runs on views of it, and the parent
  copies the Out and InOut regions back into the caller's tensors when the child has ended,
  however it ended (a crash leaves the outputs as an in-process run that died midway would).
  Arguments that share a storage share one region of the file, and each storage is its own
  buffer in the child too, so the runtime sees the same aliasing as in-process.
- Scalars, the run's ``RunConfig`` (``to_json``/``from_json``) and the result travel as JSON
  (``request.json``, ``result.json``); what the child runs is a ``ChildRun``.
- The child's stdout and stderr are streamed to the caller's as they come, and the last lines
  of its stderr are kept for the report of a child that died without a crash report.
- Backstop: the in-child watchdog (``task_timeout_s``) stops stalled tasks. Should the child
  still hang while idle (no CPU time used, nothing printed, not stopped by a debugger) for
  ``idle_limit_s(config)`` = max(60 s, 10 x task_timeout_s), the parent kills it and reports a
  timeout. A busy child is never killed by the parent.
- The shared file and the request directory are removed on every path; what the crash report
  saved (under the build directory) is kept.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import signal
import sys
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from tilescope import errors
from tilescope._logging import configure
from tilescope.build.manifest import Build
from tilescope.build.paths import CRASH_REPORT, DFX_DIR, inside
from tilescope.debug.crash import read_crash_report
from tilescope.debug.failures import Failure
from tilescope.errors import RuntimeFailure, TilescopeError
from tilescope.ir import dtypes as dt
from tilescope.launch.child import Exit, run_contained
from tilescope.launch.run import RunInfo, launch, load_binaries
from tilescope.runtime.abi import GUARD_BYTE
from tilescope.runtime.guarded import adopt_zones, guard_span, map_guarded
from tilescope.runtime.run_config import RunConfig

SHM_DIR = Path("/dev/shm")
REQUEST = "request.json"
RESULT = "result.json"
MIN_IDLE_LIMIT_S = 60.0
_ZONE = 64  # guard zone bytes around each span of the shared file (runtime/guarded.py)
# the core's line for exit() during a run (signal_guard.cpp, on_exit_in_run)
_EXIT_CALLED = re.compile(r"\[tilescope\] exit\(\) was called by task (?P<task>\d+) \(kernel (?P<kernel>[^)]*)\) on worker (?P<worker>-?\d+)")


def idle_limit_s(config: RunConfig) -> float:
    """How long an isolated child may sit idle (no CPU time, no output) before it is killed."""
    return max(MIN_IDLE_LIMIT_S, 10.0 * config.task_timeout_s)


@dataclass(frozen=True)
class ChildRun:
    """What an isolated child runs, and how the parent reads its crash report."""

    kernel_index: int | None = None  # None: the whole program; i: kernel i alone (tilescope replay --task)
    crash_kernels: list[dict[str, Any]] | None = None  # the kernels by func_id a crash report names (None: the build's)
    crash_task_id: int | None = None  # the task id a crash is reported as (None: the core's)
    save_inputs: bool = True  # a crash saves the task's inputs (a replayed task's are saved already)


# -- the shared file ---------------------------------------------------------------------------


@dataclass
class _Region:
    """Where one tensor argument lives in the shared file."""

    group: int  # index of its storage's span
    offset: int  # bytes from the start of that span
    dtype: str  # tilescope dtype name
    shape: list[int]
    direction: str  # in | out | inout


@dataclass
class _Span:
    offset: int  # bytes from the start of the file
    nbytes: int

    @property
    def zones(self) -> tuple[int, int]:
        """Bytes of GUARD_BYTE just before and just after the span, in the file: the span's pages
        hold the zones and the span, nothing else."""
        return _ZONE, self.pages - _ZONE - self.nbytes

    @property
    def pages(self) -> int:
        """Bytes of the whole pages the span and its zones fill (the file's offset of them is
        ``offset - _ZONE``, a page boundary)."""
        return -(-(_ZONE + self.nbytes + _ZONE) // mmap.PAGESIZE) * mmap.PAGESIZE


def _layout(args: list[Any], directions: list[str]) -> tuple[list[_Span], list[_Region | None]]:
    """One span per distinct storage, covering the bytes of every argument on it."""

    extents: dict[int, list[int]] = {}
    for a, direction in zip(args, directions):
        if direction != "scalar":
            lo = a.storage_offset() * a.element_size()
            span = extents.setdefault(a.untyped_storage().data_ptr(), [lo, lo])
            span[0], span[1] = min(span[0], lo), max(span[1], lo + a.numel() * a.element_size())
    spans: list[_Span] = []
    group_of: dict[int, int] = {}
    end = 0
    for key, (lo, hi) in extents.items():
        group_of[key] = len(spans)
        spans.append(_Span(end + _ZONE, hi - lo))
        end += spans[-1].pages  # NOTE: each span on pages of its own: the child maps it alone (map_guarded)
    regions: list[_Region | None] = []
    for a, direction in zip(args, directions):
        if direction == "scalar":
            regions.append(None)
            continue
        key = a.untyped_storage().data_ptr()
        offset = a.storage_offset() * a.element_size() - extents[key][0]
        regions.append(_Region(group_of[key], offset, dt.from_torch(a.dtype).name, list(a.shape), direction))
    return spans, regions


def _storages(mm: mmap.mmap, spans: list[_Span]) -> list[Any]:
    """A byte storage per span, on the mapped file."""
    import torch

    return [torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.offset) if s.nbytes else
            torch.empty(0, dtype=torch.uint8) for s in spans]  # fmt: skip


def _guarded_storages(path: Path, spans: list[_Span]) -> list[tuple[Any, Any, int]] | None:
    """A byte storage per span, each span's pages of the file mapped alone inside inaccessible
    address space (``map_guarded``), as an in-process run's guarded arguments lie: a kernel writing
    far past one faults as it would there. Each with the mapping that holds it and the inaccessible
    bytes on each side of it (its zones fill its pages); None where the mappings cannot be made (the
    caller maps the file whole)."""
    import torch

    out = []
    with open(path, "r+b") as f:
        for s in spans:
            if not s.nbytes:
                out.append((torch.empty(0, dtype=torch.uint8), None, 0))
                continue
            body = map_guarded(s.pages, f.fileno(), s.offset - _ZONE)
            if body is None:
                return None
            out.append((torch.frombuffer(body, dtype=torch.uint8, count=s.nbytes, offset=_ZONE), body,
                        guard_span(s.pages)))  # fmt: skip
    return out


def _views(storages: list[Any], regions: list[_Region | None]) -> list[Any]:
    """A tensor per region, on its span's storage."""
    out: list[Any] = []
    for r in regions:
        if r is None:
            out.append(None)
            continue
        dtype = dt.by_name(r.dtype)
        n = dtype.itemsize
        for s in r.shape:
            n *= s
        out.append(storages[r.group][r.offset : r.offset + n].view(dtype.torch).view(r.shape))
    return out


def _shared_file(nbytes: int) -> Path:
    """A new file of ``nbytes`` in /dev/shm when it has room, else in the temp directory."""
    candidates = [SHM_DIR, Path(tempfile.gettempdir())]
    for d in candidates:
        try:
            st = os.statvfs(d)
            if not os.access(d, os.W_OK) or st.f_bavail * st.f_frsize < nbytes + (64 << 20):
                continue
            fd, name = tempfile.mkstemp(prefix="tilescope-isolate-", suffix=".bin", dir=d)
        except OSError:
            continue
        try:
            os.ftruncate(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        return Path(name)
    raise TilescopeError(
        f"isolate: no room for {nbytes} bytes of arguments in {SHM_DIR} or {tempfile.gettempdir()}"
    )


def _map(path: Path, nbytes: int) -> mmap.mmap:
    with open(path, "r+b") as f:
        return mmap.mmap(f.fileno(), max(nbytes, 1))


class _SharedArgs:
    """The tensor arguments of one isolated run in the shared file: laid out, copied in, copied
    back, and the file removed on ``close``."""

    def __init__(self, args: list[Any], directions: list[str]) -> None:
        self.spans, self.regions = _layout(args, directions)
        last = self.spans[-1] if self.spans else None
        self.nbytes = last.offset + last.nbytes + last.zones[1] if last is not None else 0
        self.path: Path | None = None
        self.mm: mmap.mmap | None = None
        self.views: list[Any] = []

    def fill(self, args: list[Any]) -> None:
        """Make the file, write its guard zones and copy every tensor argument in."""
        self.path = _shared_file(self.nbytes)
        self.mm = _map(self.path, self.nbytes)
        for s in self.spans:  # NOTE: the child registers them; the kernels write the file itself
            before, after = s.zones
            self.mm[s.offset - before : s.offset] = bytes([GUARD_BYTE]) * before
            self.mm[s.offset + s.nbytes : s.offset + s.nbytes + after] = bytes([GUARD_BYTE]) * after
        self.views = _views(_storages(self.mm, self.spans), self.regions)
        for view, a in zip(self.views, args):
            if view is not None:
                view.copy_(a)

    def copy_back(self, args: list[Any], directions: list[str]) -> None:
        """Copy the Out and InOut regions into the caller's tensors."""
        for view, a, d in zip(self.views, args, directions):
            if view is not None and d in ("out", "inout"):
                a.copy_(view)

    def request_args(self, args: list[Any]) -> list[dict[str, Any]]:
        """``request.json``'s arguments: where each tensor lies, or the scalar's value."""
        return [{"tensor": asdict(r)} if r is not None else {"scalar": _scalar(a)} for r, a in zip(self.regions, args)]

    def close(self) -> None:
        """Unmap and remove the file."""
        self.views = []
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # a view is still referenced somewhere; the GC unmaps it later
                pass
        if self.path is not None:
            self.path.unlink(missing_ok=True)


# -- the parent --------------------------------------------------------------------------------


def _raise(
    failure: Failure, error: str | None = None, cls: type[TilescopeError] = RuntimeFailure
) -> NoReturn:
    exc = cls(error or failure.render())
    exc.failure = failure  # type: ignore[attr-defined]
    raise exc


def run_isolated(program: Any, args: tuple, config: RunConfig) -> Any:
    """Run ``program`` on ``args`` in a child process; see the module docstring.

    Args:
        program: a ``CompiledProgram``, already loaded (and refreshed) from its build directory.
        args: its arguments, checked (Out and InOut tensors are written in place).
        config: the run's validated options.

    Returns:
        The child's ``RunInfo``.

    Raises:
        RuntimeFailure: the run failed, crashed or hung; ``exc.failure`` holds the ``Failure``.
        TilescopeError: the child reported another tilescope error (same class), or the
            arguments do not fit in shared memory.
    """
    directions = [spec.direction.value for spec in program.args]
    return run_child(program, list(args), directions, config, ChildRun())


def run_child(program: Any, args: list[Any], directions: list[str], config: RunConfig, child: ChildRun) -> RunInfo:
    """Run ``child`` (the whole program, or one kernel alone) of ``program`` on ``args`` in a child
    process with the options ``config``; returns its RunInfo or raises what it reported, or how
    it died."""
    shared = _SharedArgs(args, directions)
    request_dir = Path(tempfile.mkdtemp(prefix="tilescope-isolate-"))
    crash_path = _crash_path(program, request_dir)
    try:
        shared.fill(args)
        _write_request(request_dir, program, shared, args, config.replace(isolate=False, crash_report=str(crash_path)),
                       child)  # fmt: skip
        ended = _run(request_dir, config)
        shared.copy_back(args, directions)  # however the child ended
        if ended.returncode == 0 and (request_dir / RESULT).is_file():
            return _reported(request_dir / RESULT)
        _raise(_death(program, ended, crash_path, config, child))
    finally:
        shared.close()
        shutil.rmtree(request_dir, ignore_errors=True)


def _crash_path(program: Any, request_dir: Path) -> Path:
    """Where the child's crash report goes: in the build, so the path the dying child prints stays
    true (made only on a crash), or, in a build that cannot be written, in ``request_dir``."""
    crash_path = inside(Path(program.work_dir).resolve(), DFX_DIR, f"{CRASH_REPORT[:-4]}_{request_dir.name}.txt")
    try:
        crash_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # the report lives only as long as this call
        crash_path = request_dir / crash_path.name
    return crash_path


def _write_request(
    request_dir: Path, program: Any, shared: _SharedArgs, args: list[Any], config: RunConfig, child: ChildRun
) -> None:
    """``request.json``: what the child reads to run (``_child``)."""
    request = {
        "work_dir": str(Path(program.work_dir).resolve()),
        "kernel_index": child.kernel_index,
        "shared_file": str(shared.path),
        "shared_bytes": shared.nbytes,
        "spans": [asdict(s) for s in shared.spans],
        "args": shared.request_args(args),
        "config": config.to_json(),
    }
    (request_dir / REQUEST).write_text(json.dumps(request))


def _reported(result_path: Path) -> RunInfo:
    """The RunInfo the child wrote, or the error it reported, raised with its class and Failure."""
    result = json.loads(result_path.read_text())
    if result.get("ok"):
        known = {f.name for f in fields(RunInfo)}
        return RunInfo(**{k: _decode(v) for k, v in result["info"].items() if k in known})
    failure = Failure.from_json(result["failure"]) if result.get("failure") else None
    cls = getattr(errors, result.get("error_type") or "", None)
    if not (isinstance(cls, type) and issubclass(cls, TilescopeError | errors.RunInterrupted)):
        cls = RuntimeFailure
    exc = cls(result.get("error") or "the isolated run failed")
    exc.failure = failure  # type: ignore[attr-defined]
    raise exc


def _death(
    program: Any, ended: Exit, crash_path: Path, config: RunConfig, child: ChildRun
) -> Failure:
    """How a child that reported no result ended: killed as idle, a crash (from its report, or
    the signal), exit() called by a kernel, or an unexplained exit status."""
    last, rc = ended.last_lines(), ended.returncode
    said = ["the child's last words (stderr):", *(f"  {line}" for line in last)] if last else []
    if ended.hung:
        return Failure(
            "timeout",
            f"the isolated run of {program.name} sat idle (no CPU time used, nothing printed) for "
            f"{idle_limit_s(config):.0f}s and was killed",
            details=said,
            next_steps=["run it without isolation under gdb to see where it waits"],
        )
    if rc < 0 and crash_path.is_file() and crash_path.stat().st_size > 0:
        return read_crash_report(
            crash_path, program, kernels=child.crash_kernels, task_id=child.crash_task_id, save_inputs=child.save_inputs
        )
    if rc < 0:
        name = ended.signal_name
        if -rc == signal.SIGKILL:
            why = " (killed from outside: the kernel's out-of-memory killer, or a user)"
        elif any(line.startswith("[tilescope] task ") and " died of " in line for line in last):
            why = " in a kernel, but its crash report could not be written"
        else:
            why = " outside a kernel, so there is no crash report"
        return Failure("crash", f"the isolated run of {program.name} died of {name}{why}", details=said, signal=name)
    called = next((m for m in map(_EXIT_CALLED.search, last) if m), None)
    if called is not None:
        return Failure(
            "exit",
            f"task {called['task']} (kernel {called['kernel']}) called exit() during the run: the run "
            "did not finish and its outputs are not valid",
            task_id=int(called["task"]),
            kernel=called["kernel"],
            worker=int(called["worker"]),
            details=said,
            next_steps=[
                "remove the exit() (or the call that exits) from the kernel; an in-process run exits with status 1 "
                "instead"
            ],
        )
    return Failure(
        "error", f"the isolated run of {program.name} ended (exit status {rc}) without reporting a result", details=said
    )


def _encode(value: Any) -> Any:
    """A RunInfo field as JSON: a Failure (``RunInfo.nan``) is tagged so that it comes back as one."""
    return {"__failure__": value.to_json()} if isinstance(value, Failure) else value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__failure__" in value:
        return Failure.from_json(value["__failure__"])
    return value


def _scalar(a: Any) -> Any:
    import torch

    return a.item() if torch.is_tensor(a) else a


# NOTE: not ``-m tilescope.launch.isolate``: the package imports this module before runpy would
# run it as __main__, which warns (RuntimeWarning) on every isolated run.
_CHILD_MAIN = "import sys; from tilescope.launch.isolate import main; main(sys.argv[1:])"


def _run(request_dir: Path, config: RunConfig) -> Exit:
    """Start the child, pass its output through as it comes and wait for it; it is killed when
    idle past ``idle_limit_s``."""
    return run_contained(["-c", _CHILD_MAIN, str(request_dir)], stdout="pass", stderr="pass",
                         idle_s=idle_limit_s(config))  # fmt: skip


# -- the child ---------------------------------------------------------------------------------


def _child(request_dir: Path) -> int:
    """Run the request in ``request_dir`` and write its result; the process exits right after."""
    request = json.loads((request_dir / REQUEST).read_text())
    result: dict[str, Any] = {"ok": False, "info": None, "error": None, "error_type": None, "failure": None}
    try:
        config = RunConfig.from_json(request["config"])
        configure(config.log_level)
        build = Build(request["work_dir"])
        spans = [_Span(**s) for s in request["spans"]]
        regions = [_Region(**a["tensor"]) if "tensor" in a else None for a in request["args"]]
        mapped = _guarded_storages(Path(request["shared_file"]), spans)
        if mapped is None:
            mm = _map(Path(request["shared_file"]), request["shared_bytes"])
            mapped = [(storage, mm, 0) for storage in _storages(mm, spans)]
        storages = [storage for storage, _, _ in mapped]
        for s, (storage, owner, reach) in zip(spans, mapped):  # the parent filled them
            if s.nbytes:
                adopt_zones(storage, *s.zones, owner=owner, reach=reach)
        views = _views(storages, regions)
        args = [v if v is not None else a["scalar"] for v, a in zip(views, request["args"])]
        info = launch(build, load_binaries(build), args, config, kernel_index=request["kernel_index"])
        # NOTE: the core's records (``report``) stay in the child: what they hold is written by its observers
        sent = [f.name for f in fields(info) if f.name != "report"]
        result.update(ok=True, info={name: _encode(getattr(info, name)) for name in sent})
    except (TilescopeError, errors.RunInterrupted) as e:  # Ctrl-C: its report was printed already
        failure = getattr(e, "failure", None)
        result.update(
            error=str(e), error_type=type(e).__name__, failure=failure.to_json() if failure else None
        )
    except Exception as e:  # noqa: BLE001 - the parent reports whatever broke in the child
        import traceback

        traceback.print_exc()
        result.update(
            error=f"the isolated child failed: {type(e).__name__}: {e}", error_type="RuntimeFailure"
        )
    tmp = request_dir / f".{RESULT}.tmp"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, request_dir / RESULT)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(
            "usage: main(['REQUEST_DIR']) (the isolated child, started by tilescope itself)",
            file=sys.stderr,
        )
        return 2
    rc = _child(Path(argv[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    # NOTE: skip interpreter teardown (joining the runtime's parked workers, unmapping the shared
    # file under live views): the result is on disk, and nothing else is left to do.
    os._exit(rc)


__all__ = ["ChildRun", "idle_limit_s", "run_child", "run_isolated"]
