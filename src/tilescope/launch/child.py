"""A contained child process: the one way tilescope runs work that may crash or hang the caller.

An isolated run (``launch.isolate``), the steps of ``tilescope triage`` that run the program
again (``analysis.triage``) and the agent tools' ``localize`` each run in a child Python of this
interpreter, started by ``run_contained``: what kills the child (a signal in a kernel, an
``exit()``, the out-of-memory killer) or hangs it leaves the caller standing, with what the
child said and how it ended.

Invariants:
  - The child runs this tilescope: a source tree (``src/``) goes first on its ``PYTHONPATH``,
    and it is unbuffered, so what it prints arrives as it happens.
  - Each of its streams is one of: ``pass`` (copied to ours as it comes), ``lines`` (each line
    handed to ``on_line``, which says whether it consumed it), ``capture`` (kept whole), or
    ``drop``. The tail of every stream but a dropped one is kept (``Exit.last_lines``).
  - It is killed past ``timeout_s`` of wall time, or past ``idle_s`` without using CPU time or
    printing (a child stopped by a debugger is never idle), and on any exception in the caller
    (Ctrl-C included), which is then raised again: no child outlives its caller's wait.
  - A Ctrl-C first lets the child end on its own while it works at it: a terminal's Ctrl-C
    reaches the whole process group, so the child has it too and is stopping its run and
    printing its report. It is killed at a second Ctrl-C, once it is idle (no CPU time, no
    output) for ``SETTLE_IDLE_S``, or past ``INTERRUPT_GRACE_S``.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STREAM_MODES = ("pass", "lines", "capture", "drop")
TAIL_BYTES = 8192  # the tail of a stream kept for the report of how the child ended
POLL_S = 0.2
INTERRUPT_GRACE_S = 30.0  # the longest a Ctrl-C waits for the child to stop and report
SETTLE_IDLE_S = 2.0  # a child idle this long after a Ctrl-C is not stopping: it did not get it


@dataclass
class Exit:
    """How a contained child ended: its exit status (negative: killed by that signal), whether it
    was killed as idle (``hung``) or past its time (``timed_out``), and what it said."""

    returncode: int
    hung: bool = False
    timed_out: bool = False
    stdout: str = ""  # all of it, for a captured stdout
    stderr: str = ""  # all of it, for a captured stderr
    tails: dict[str, str] = field(default_factory=dict)  # stream name -> the last TAIL_BYTES

    @property
    def signal_name(self) -> str | None:
        """``SIGSEGV`` for a child killed by a signal, else None."""
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def last_lines(self, stream: str = "stderr", n: int = 12) -> list[str]:
        """The last ``n`` non-blank lines of ``stream`` that no ``on_line`` consumed."""
        return [line for line in self.tails.get(stream, "").splitlines() if line.strip()][-n:]


class _Reader(threading.Thread):
    """Reads one of the child's pipes to its end, as its mode says."""

    def __init__(self, pipe: Any, name: str, mode: str, on_line: Callable[[str], bool] | None,
                 touched: Callable[[], None]):  # fmt: skip
        super().__init__(daemon=True, name=f"tilescope-child-{name}")
        self.pipe, self.stream, self.mode, self.on_line, self.touched = pipe, name, mode, on_line, touched
        self.tail = ""
        self.whole: list[str] = []
        self._partial = ""

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self.pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            text = decoder.decode(chunk, final=not chunk)
            if text:
                self.touched()
                self._take(text)
            if not chunk:
                break
        if self._partial:
            self._line(self._partial)

    def _take(self, text: str) -> None:
        if self.mode == "pass":
            out = getattr(sys, self.stream)
            try:
                out.write(text)
                out.flush()
            except (OSError, ValueError):  # NOTE: our stream is closed: the child goes on regardless
                pass
        elif self.mode == "capture":
            self.whole.append(text)
        if self.mode == "lines":
            *done, self._partial = (self._partial + text).split("\n")
            for line in done:
                self._line(line)
        elif self.mode != "drop":
            self.tail = (self.tail + text)[-TAIL_BYTES:]

    def _line(self, line: str) -> None:
        try:
            consumed = self.on_line is not None and self.on_line(line)
        except Exception:  # noqa: BLE001 - the pipe must be read to its end whatever on_line does
            consumed = False
        if not consumed:
            self.tail = (self.tail + line + "\n")[-TAIL_BYTES:]


def child_env() -> dict[str, str]:
    """The environment of a contained child: ours, with this tilescope first on its path."""
    env = dict(os.environ)
    root = Path(__file__).resolve().parent.parent.parent  # the directory holding this tilescope package
    if root.name not in ("site-packages", "dist-packages"):
        # NOTE: a source tree (src/, or a path a script put on sys.path) goes first, so that the
        # child runs this tilescope; an installed one is found by the same interpreter anyway, and
        # putting site-packages ahead of the standard library could shadow it.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # its prints reach us (and the user) as they happen
    return env


def cpu_ticks(pid: int) -> tuple[int, str] | None:
    """(utime + stime of every thread, state letter) of a process, or None if unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    parts = text.rpartition(")")[2].split()
    try:
        return int(parts[11]) + int(parts[12]), parts[0]
    except (IndexError, ValueError):
        return None


def _settle(proc: subprocess.Popen, last_output: list[float]) -> None:
    """After a Ctrl-C: wait for the child to end on its own while it works at it (CPU time or
    output); kill it once idle, past the grace, or at a second Ctrl-C."""
    try:
        started = active = time.monotonic()
        seen = cpu_ticks(proc.pid)
        while proc.poll() is None:
            now = time.monotonic()
            stat = cpu_ticks(proc.pid)
            if stat != seen or last_output[0] > active:
                seen, active = stat, now
            if now - active > SETTLE_IDLE_S or now - started > INTERRUPT_GRACE_S:
                break
            time.sleep(POLL_S / 4)
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def run_contained(
    args: list[str],
    *,
    stdout: str = "drop",
    stderr: str = "capture",
    on_line: Callable[[str], bool] | None = None,
    timeout_s: float | None = None,
    idle_s: float | None = None,
    cwd: str | None = None,
) -> Exit:
    """Run ``python <args>`` (this interpreter) as a contained child and wait for it (see the
    module docstring), in ``cwd`` (default: this process's). ``on_line`` receives the lines of a
    stream in ``lines`` mode.

    Raises:
        ValueError: a stream mode not in STREAM_MODES.
    """
    for mode in (stdout, stderr):
        if mode not in STREAM_MODES:
            raise ValueError(f"stream mode {mode!r}: expected one of {', '.join(STREAM_MODES)}")
    last_output = [time.monotonic()]

    def touched() -> None:
        last_output[0] = time.monotonic()

    pipe = {m: (subprocess.DEVNULL if m == "drop" else subprocess.PIPE) for m in (stdout, stderr)}
    proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL, stdout=pipe[stdout],
                            stderr=pipe[stderr], env=child_env(), cwd=cwd)  # fmt: skip
    readers = [_Reader(p, name, mode, on_line, touched)
               for p, name, mode in ((proc.stdout, "stdout", stdout), (proc.stderr, "stderr", stderr)) if p is not None]  # fmt: skip
    for r in readers:
        r.start()
    hung = timed_out = False
    started = active = time.monotonic()
    cpu_seen: int | None = None
    try:
        while True:
            try:
                proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if timeout_s is not None and now - started > timeout_s:
                timed_out = True
                break
            stat = cpu_ticks(proc.pid) if idle_s is not None else None
            if stat is None:
                continue  # NOTE: idle cannot be told from busy: no backstop
            ticks, state = stat
            if ticks != cpu_seen or state in "tT" or last_output[0] > active:
                cpu_seen, active = ticks, now
            elif now - active > idle_s:
                hung = True
                break
        if hung or timed_out:
            proc.kill()
            proc.wait()
    except KeyboardInterrupt:
        _settle(proc, last_output)
        raise
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        for r in readers:
            r.join(timeout=5.0)
        for p in (proc.stdout, proc.stderr):
            if p is not None:
                p.close()
    out = Exit(proc.returncode, hung, timed_out, tails={r.stream: r.tail for r in readers})
    for r in readers:
        if r.mode == "capture":
            setattr(out, r.stream, "".join(r.whole))
    return out


__all__ = ["STREAM_MODES", "Exit", "child_env", "cpu_ticks", "run_contained"]
