"""The contained child (launch/child.py): how it ends, what it said, and that it never outlives the wait."""

import os
import signal
import threading

import pytest

from tilescope.launch.child import Exit, child_env, run_contained


def test_a_captured_child_gives_back_both_streams_and_its_status():
    ended = run_contained(["-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                          stdout="capture", stderr="capture")  # fmt: skip
    assert (ended.returncode, ended.stdout, ended.stderr) == (3, "out\n", "err\n")
    assert not ended.hung and not ended.timed_out and ended.signal_name is None


def test_lines_an_on_line_consumes_are_not_its_last_words():
    seen = []

    def progress(line: str) -> bool:
        seen.append(line)
        return line.startswith("[step] ")

    code = "import sys\nfor w in ('[step] one', 'a warning', '[step] two', 'last words'): print(w, file=sys.stderr)"
    ended = run_contained(["-c", code], stderr="lines", on_line=progress)
    assert seen == ["[step] one", "a warning", "[step] two", "last words"]
    assert ended.last_lines() == ["a warning", "last words"]


def test_a_child_killed_by_a_signal_is_named_by_it():
    ended = run_contained(["-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert ended.returncode == -signal.SIGSEGV and ended.signal_name == "SIGSEGV"


def test_a_child_past_its_time_is_killed_and_says_so():
    ended = run_contained(["-c", "import time; time.sleep(600)"], timeout_s=0.5)
    assert ended.timed_out and ended.returncode == -signal.SIGKILL and not ended.hung


def test_an_idle_child_is_killed_but_a_busy_one_is_not():
    idle = run_contained(["-c", "import time; time.sleep(600)"], idle_s=1.0)
    assert idle.hung and idle.returncode == -signal.SIGKILL
    busy = run_contained(["-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.0: pass"],
                         idle_s=1.0)  # fmt: skip
    assert busy.returncode == 0 and not busy.hung


def test_ctrl_c_in_the_caller_kills_the_child_and_is_raised(tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_contained(["-c", code])
    finally:
        timer.cancel()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # NOTE: killed and reaped: no such process


def test_ctrl_c_at_a_terminal_lets_the_child_stop_and_report_first(tmp_path):
    # a terminal's Ctrl-C reaches the caller and the child: the child's report is not cut off
    pid_file = tmp_path / "pid"
    code = (
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 1.0: pass  # stopping takes a while\n"
        "    print('stopped and reported', flush=True)\n"
        "    os._exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    lines: list[str] = []

    def ctrl_c() -> None:
        os.kill(int(pid_file.read_text()), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(2.0, ctrl_c)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_contained(["-c", code], stdout="lines", on_line=lambda line: lines.append(line) or True)
    finally:
        timer.cancel()
    assert lines == ["stopped and reported"]


def test_an_on_line_that_raises_loses_nothing_and_the_child_finishes():
    def broken(line: str) -> bool:
        raise RuntimeError("a progress printer that fails")

    code = "import sys\nfor i in range(2000): print('line', i, file=sys.stderr)"
    ended = run_contained(["-c", code], stderr="lines", on_line=broken)
    assert ended.returncode == 0 and ended.last_lines(n=1) == ["line 1999"]


def test_a_stream_mode_it_does_not_know_is_refused():
    with pytest.raises(ValueError, match=r"stream mode 'keep': expected one of pass, lines, capture, drop"):
        run_contained(["-c", "pass"], stdout="keep")


def test_the_child_runs_this_tilescope():
    ended = run_contained(["-c", "import tilescope, sys; print(tilescope.__file__)"], stdout="capture")
    import tilescope

    assert ended.stdout.strip() == tilescope.__file__
    assert child_env()["PYTHONUNBUFFERED"] == "1"
    assert Exit(0).last_lines() == []
