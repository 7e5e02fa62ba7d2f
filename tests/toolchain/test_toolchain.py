"""Toolchain: content-addressed cache, parallel builds, compile errors, missing compiler."""

from __future__ import annotations

import ctypes
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tilescope.errors import ConfigError, ToolchainError
from tilescope.toolchain import (
    BuildJob,
    CompileError,
    build,
    cache_dir,
    check,
    compiler,
    compiler_identity,
    find_cxx,
    object_path,
    stats,
)

pytestmark = pytest.mark.usefixtures("private_cache")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def value_source(value: int, header: str | None = None) -> str:
    include = f'#include "{header}"\n' if header else ""
    return f'{include}extern "C" int value() {{ return {value}; }}\n'


def call_value(so: Path) -> int:
    return ctypes.CDLL(str(so)).value()


@pytest.mark.slow
def test_second_build_is_a_cache_hit_without_compiling(tmp_path, private_cache):
    src = write(tmp_path / "a.cpp", value_source(7))
    first = build([BuildJob(src, tmp_path / "out1" / "a.so")])
    assert stats() == {"compiles": 1, "cache_hits": 0}
    assert not first[0].cache_hit and first[0].command[0] == find_cxx()

    second = build([BuildJob(src, tmp_path / "out2" / "a.so")])
    assert stats() == {"compiles": 1, "cache_hits": 1}
    assert second[0].cache_hit and second[0].command == []
    assert second[0].key == first[0].key
    assert (tmp_path / "out2" / "a.so").read_bytes() == (tmp_path / "out1" / "a.so").read_bytes()
    assert call_value(tmp_path / "out2" / "a.so") == 7


@pytest.mark.slow
def test_a_warm_process_runs_no_compiler_process(tmp_path, monkeypatch):
    src = write(tmp_path / "a.cpp", value_source(9))
    compiler_identity.cache_clear()  # so this cache dir learns the compiler's identity
    build([BuildJob(src, tmp_path / "first.so")])
    compiler_identity.cache_clear()  # as in a fresh process

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"unexpected subprocess: {args}")

    monkeypatch.setattr(compiler.subprocess, "run", no_subprocess)
    result = build([BuildJob(src, tmp_path / "second.so")])[0]
    assert result.cache_hit
    assert call_value(tmp_path / "second.so") == 9


@pytest.mark.slow
def test_changed_source_recompiles(tmp_path):
    src = write(tmp_path / "a.cpp", value_source(1))
    key1 = build([BuildJob(src, tmp_path / "v1.so")])[0].key
    write(src, value_source(2))
    result = build([BuildJob(src, tmp_path / "v2.so")])[0]
    assert not result.cache_hit and result.key != key1
    assert stats()["compiles"] == 2
    assert call_value(tmp_path / "v2.so") == 2


@pytest.mark.slow
def test_changed_header_recompiles(tmp_path):
    include = tmp_path / "include"
    write(include / "sub" / "answer.hpp", "#define ANSWER 41\n")
    src = write(tmp_path / "a.cpp", '#include "sub/answer.hpp"\nextern "C" int value() { return ANSWER; }\n')
    job1 = BuildJob(src, tmp_path / "v1.so", include_dirs=(include,))
    build([job1])
    build([job1])
    assert stats() == {"compiles": 1, "cache_hits": 1}

    write(include / "sub" / "answer.hpp", "#define ANSWER 42\n")
    result = build([BuildJob(src, tmp_path / "v2.so", include_dirs=(include,))])[0]
    assert not result.cache_hit
    assert stats()["compiles"] == 2
    assert call_value(tmp_path / "v2.so") == 42


@pytest.mark.slow
def test_changed_flags_recompile(tmp_path):
    src = write(tmp_path / "a.cpp", 'extern "C" int value() { return VALUE; }\n')
    build([BuildJob(src, tmp_path / "v1.so", extra_flags=("-DVALUE=1",))])
    build([BuildJob(src, tmp_path / "v2.so", extra_flags=("-DVALUE=2",))])
    assert stats() == {"compiles": 2, "cache_hits": 0}
    assert call_value(tmp_path / "v1.so") == 1 and call_value(tmp_path / "v2.so") == 2


@pytest.mark.slow
def test_debug_info_is_line_tables_unless_full_is_asked_for(tmp_path, monkeypatch):
    """TILESCOPE_DEBUG_INFO: lines (default) compiles with -g1, full with -g; each is its own
    object in the cache; any other value is an error naming the variable."""
    src = write(tmp_path / "a.cpp", value_source(3))
    monkeypatch.delenv("TILESCOPE_DEBUG_INFO", raising=False)
    lines = build([BuildJob(src, tmp_path / "lines.so")])[0]
    assert "-g1" in lines.command and "-g" not in lines.command
    monkeypatch.setenv("TILESCOPE_DEBUG_INFO", "full")
    full = build([BuildJob(src, tmp_path / "full.so")])[0]
    assert "-g" in full.command and "-g1" not in full.command
    assert not full.cache_hit and full.key != lines.key
    assert call_value(tmp_path / "full.so") == 3
    monkeypatch.setenv("TILESCOPE_DEBUG_INFO", "max")
    with pytest.raises(ConfigError) as info:
        build([BuildJob(src, tmp_path / "bad.so")])
    assert str(info.value) == "environment variable TILESCOPE_DEBUG_INFO='max' (debug_info): expected lines or full"


@pytest.mark.slow
def test_parallel_build_of_several_files(tmp_path):
    jobs = [
        BuildJob(write(tmp_path / f"k{i}.cpp", value_source(100 + i)), tmp_path / "out" / f"k{i}.so")
        for i in range(4)
    ]
    results = build(jobs, max_parallel=4)
    assert [r.job for r in results] == jobs
    assert stats() == {"compiles": 4, "cache_hits": 0}
    assert [call_value(j.output) for j in jobs] == [100, 101, 102, 103]
    assert len({r.key for r in results}) == 4

    again = build(jobs, max_parallel=4)
    assert all(r.cache_hit for r in again)
    assert stats() == {"compiles": 4, "cache_hits": 4}


@pytest.mark.slow
def test_cache_dir_env_is_respected(tmp_path, private_cache):
    src = write(tmp_path / "a.cpp", value_source(3))
    result = build([BuildJob(src, tmp_path / "a.so")])[0]
    assert cache_dir() == private_cache
    obj = object_path(result.key)
    assert obj == private_cache / "objects" / result.key[:2] / f"{result.key}.so"
    assert obj.is_file()
    leftovers = [p.name for p in obj.parent.iterdir() if p != obj] + [
        p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")
    ]
    assert leftovers == []


BROKEN = """\
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    float acc = 0.0f;  // @ models/rms_norm.py:11
    acc = acc + row_sum(args);  // @ models/rms_norm.py:12
    (void)acc;
}
"""


@pytest.mark.slow
def test_compile_error_names_cpp_line_dsl_line_and_command(tmp_path, monkeypatch):
    monkeypatch.delenv("TILESCOPE_MARCH", raising=False)  # the default target: -march=native
    src = write(tmp_path / "rms_rows.cpp", BROKEN)
    with pytest.raises(CompileError) as info:
        build([BuildJob(src, tmp_path / "rms_rows.so")])
    err = info.value
    assert err.cpp_file == src and err.cpp_line == 4
    assert err.dsl_loc == "models/rms_norm.py:12"
    text = str(err)
    assert str(src) in text
    assert "'row_sum' was not declared" in text.replace("\u2018", "'").replace("\u2019", "'")
    assert "acc = acc + row_sum(args);" in text
    assert "models/rms_norm.py:12" in text
    assert f"reproduce with: {shlex.join(err.command)}" in text
    assert err.command[0] == find_cxx() and err.command[-1] == str(src)
    assert err.command[err.command.index("-o") + 1] == str(tmp_path / "rms_rows.so")
    assert "-std=c++17" in err.command and "-march=native" in err.command
    assert "row_sum" in err.stderr
    assert stats() == {"compiles": 0, "cache_hits": 0}
    assert not (tmp_path / "rms_rows.so").exists()


@pytest.mark.slow
def test_compile_error_uses_nearest_preceding_marker(tmp_path):
    src = write(
        tmp_path / "k.cpp",
        """\
extern "C" int value() {
    int x = 1;  // @ models/k.py:5
    int y = x +
        undefined_name;
    return y;
}
""",
    )
    with pytest.raises(CompileError) as info:
        build([BuildJob(src, tmp_path / "k.so")])
    assert info.value.cpp_line == 4
    assert info.value.dsl_loc == "models/k.py:5"


@pytest.mark.slow
def test_compile_error_inside_a_header_points_at_the_generating_line(tmp_path):
    include = tmp_path / "include"
    write(include / "lib.hpp", "template <class T> T twice(T x) { return x.twice(); }\n")
    src = write(
        tmp_path / "k.cpp",
        """\
#include "lib.hpp"
extern "C" float value() {
    float v = twice(2.0f);  // @ models/k.py:9
    return v;
}
""",
    )
    with pytest.raises(CompileError) as info:
        build([BuildJob(src, tmp_path / "k.so", include_dirs=(include,))])
    err = info.value
    assert (err.cpp_file, err.cpp_line, err.dsl_loc) == (src, 3, "models/k.py:9")
    assert "lib.hpp" in str(err)  # the header's own error line is shown too


@pytest.mark.slow
def test_one_failing_job_does_not_stop_the_others(tmp_path):
    good = BuildJob(write(tmp_path / "good.cpp", value_source(5)), tmp_path / "good.so")
    bad = BuildJob(write(tmp_path / "bad.cpp", BROKEN), tmp_path / "bad.so")
    with pytest.raises(CompileError):
        build([bad, good])
    assert call_value(tmp_path / "good.so") == 5


def test_missing_compiler_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent")
    src = write(tmp_path / "a.cpp", value_source(1))
    with pytest.raises(ToolchainError) as info:
        build([BuildJob(src, tmp_path / "a.so")])
    text = str(info.value)
    assert "g++ was not found" in text
    assert "'/nonexistent'" in text
    assert "C++17" in text and "apt-get install g++" in text and "CXX" in text
    assert not isinstance(info.value, CompileError)
    results = {name: (ok, detail) for name, ok, detail in check()}
    assert results["g++"][0] is False and "apt-get install g++" in results["g++"][1]


def test_a_compiler_that_writes_nothing_is_named_not_its_empty_output(tmp_path, monkeypatch, private_cache):
    fake = write(tmp_path / "quiet-cxx", "#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    src = write(tmp_path / "a.cpp", value_source(1))
    with pytest.raises(ToolchainError) as info:
        build([BuildJob(src, tmp_path / "a.so")])
    assert f"the compiler '{fake}' exited with status 0 but wrote no object file" in str(info.value)
    assert "set CXX to a C++17 g++" in str(info.value)
    assert not (tmp_path / "a.so").exists()


@pytest.mark.slow
def test_check_passes_with_a_working_toolchain(private_cache):
    results = check()
    assert [name for name, _, _ in results] == ["g++", "C++17", "cache dir"]
    assert all(ok for _, ok, _ in results), results
    assert str(private_cache) in results[2][2]


@pytest.mark.slow
def test_commands_and_key_parts_are_logged(tmp_path, caplog):
    src = write(tmp_path / "a.cpp", value_source(1))
    with caplog.at_level(logging.DEBUG, logger="tilescope.toolchain"):
        result = build([BuildJob(src, tmp_path / "a.so")])[0]
    messages = [r.getMessage() for r in caplog.records]
    for part in ("source", "flags", "compiler", "headers", "target", "abi"):
        assert any(m.startswith(f"cache key part {part} for {src}") for m in messages), part
    assert any(shlex.join(result.command) in m for m in messages if m.startswith("compiling"))


@pytest.mark.slow
def test_unusable_cache_dir_warns_once_and_builds_without_it(tmp_path, monkeypatch, caplog):
    blocker = write(tmp_path / "not_a_dir", "")
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(blocker / "cache"))
    src = write(tmp_path / "a.cpp", value_source(1))
    with caplog.at_level(logging.WARNING, logger="tilescope.toolchain"):
        first = build([BuildJob(src, tmp_path / "a.so")])[0]
        second = build([BuildJob(src, tmp_path / "b.so")])[0]
    assert call_value(tmp_path / "a.so") == 1 and not first.cache_hit and second.cache_hit
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"the compiler cache {blocker / 'cache'} cannot be written" in warnings[0]
    assert cache_dir() != blocker / "cache" and object_path(first.key).is_file()
    results = {name: ok for name, ok, _ in check()}
    assert results["cache dir"] is False


@pytest.mark.slow
def test_a_file_size_limit_smaller_than_an_object_is_named_with_what_to_do(tmp_path, private_cache):
    src = tmp_path / "k.cpp"
    src.write_text('extern "C" int value() { return 7; }\n')
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "from tilescope.toolchain import BuildJob, build\n"
        "from tilescope.errors import ToolchainError\n"
        f"try:\n    build([BuildJob(Path({str(src)!r}), Path({str(tmp_path / 'k.so')!r}))])\n"
        "except ToolchainError as e:\n    print(e)\n    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert "the file size limit of this process (ulimit -f: 4096 bytes) is smaller than the object g++ writes" in done.stdout
    assert "raise it (ulimit -f unlimited)" in done.stdout and "Traceback" not in done.stdout
