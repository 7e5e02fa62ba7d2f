"""Precompiled headers of the tile library: built once, reused, keyed, rebuilt when corrupt."""

from __future__ import annotations

import ctypes
import logging
import subprocess
import threading
from pathlib import Path

import pytest

from tilescope.errors import ConfigError
from tilescope.toolchain import BuildJob, build, compiler
from tilescope.toolchain import pch as pchmod

pytestmark = pytest.mark.usefixtures("private_cache")


def source(tmp_path: Path, name: str, value: int) -> Path:
    path = tmp_path / "src" / f"{name}.cpp"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "// generated\n#include <tilescope/tile_types.hpp>\n\n"
        f'extern "C" int value() {{ return {value} + int(sizeof(ts::bf16)); }}\n'
    )
    return path


def gchs(cache: Path) -> list[Path]:
    return sorted((cache / "pch").rglob("*.gch"))


def value(so: Path) -> int:
    return ctypes.CDLL(str(so)).value()


@pytest.mark.slow
def test_pch_is_built_once_reused_and_really_used(tmp_path, private_cache):
    first = build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])[0]
    [gch] = gchs(private_cache)
    built_at = gch.stat().st_mtime_ns
    second = build([BuildJob(source(tmp_path, "b", 2), tmp_path / "b.so")])[0]
    assert gchs(private_cache) == [gch] and gch.stat().st_mtime_ns == built_at
    assert value(tmp_path / "a.so") == 3 and value(tmp_path / "b.so") == 4
    for result in (first, second):
        at = result.command.index("-include")
        assert result.command[at + 1] == str(gch)[: -len(".gch")] and "-Winvalid-pch" in result.command
    # g++ -H marks a precompiled header it used with "!"
    check = [*second.command[:-3], "-H", "-fsyntax-only", second.command[-1]]
    used = subprocess.run(check, capture_output=True, text=True)
    assert used.returncode == 0 and f"! {gch}" in used.stderr, used.stderr


@pytest.mark.slow
def test_a_source_without_leading_tilescope_includes_gets_no_pch(tmp_path, private_cache):
    src = tmp_path / "plain.cpp"
    src.write_text('int x = 1;\n#include <tilescope/tile_types.hpp>\nextern "C" int value() { return x; }\n')
    assert pchmod.leading_includes(src) == ()
    result = build([BuildJob(src, tmp_path / "plain.so")])[0]
    assert "-include" not in result.command and gchs(private_cache) == []


def test_pch_key_changes_with_flags_headers_target_and_includes():
    parts = {"compiler": "c", "headers": "h", "target": "t", "abi": "1"}
    base = pchmod.pch_key(["tilescope/kernel.hpp"], ["-O3"], parts).digest
    assert pchmod.pch_key(["tilescope/kernel.hpp"], ["-O3"], dict(parts)).digest == base
    assert pchmod.pch_key(["tilescope/kernel.hpp"], ["-O2"], parts).digest != base
    assert pchmod.pch_key(["tilescope/index.hpp"], ["-O3"], parts).digest != base
    for name in parts:
        assert pchmod.pch_key(["tilescope/kernel.hpp"], ["-O3"], {**parts, name: "other"}).digest != base, (
            name
        )


@pytest.mark.slow
def test_extra_flags_get_their_own_pch(tmp_path, private_cache):
    build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])
    build([BuildJob(source(tmp_path, "b", 1), tmp_path / "b.so", extra_flags=("-DTS_TEST_FLAG=1",))])
    assert len(gchs(private_cache)) == 2


def _target_hash(cxx: str, march: str) -> str:
    macros = subprocess.run(
        [cxx, "-std=c++17", f"-march={march}", "-E", "-dM", "-x", "c++", "/dev/null"],
        capture_output=True,
        text=True,
    ).stdout
    return compiler.cache.sha256_bytes("\n".join(sorted(macros.splitlines())).encode())


@pytest.mark.slow
def test_object_key_has_the_resolved_native_target(tmp_path, private_cache, monkeypatch):
    monkeypatch.delenv("TILESCOPE_MARCH", raising=False)  # the default target: -march=native
    cxx = compiler.find_cxx()
    expected = _target_hash(cxx, "native")
    assert compiler.target_macros(cxx) == expected
    job = BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")
    before = compiler.cache_key(job, cxx, "h")
    assert before.parts["target"] == expected
    monkeypatch.setattr(compiler, "target_macros", lambda _cxx, _march: "an-avx2-only-host")
    assert compiler.cache_key(job, cxx, "h").digest != before.digest


@pytest.mark.slow
def test_tilescope_march_compiles_for_a_lower_target_with_its_own_key(tmp_path, private_cache, monkeypatch):
    cxx = compiler.find_cxx()
    job = BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")
    native = compiler.cache_key(job, cxx, "h")
    monkeypatch.setenv("TILESCOPE_MARCH", "x86-64-v2")
    lower = compiler.cache_key(job, cxx, "h")
    assert lower.parts["target"] == _target_hash(cxx, "x86-64-v2") != native.parts["target"]
    assert lower.parts["flags"] != native.parts["flags"]
    [result] = build([job])
    assert "-march=x86-64-v2" in result.command and "-march=native" not in result.command
    assert value(tmp_path / "a.so") == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("march", "says"),
    [("x86-64-v99", "g++ does not accept -march=x86-64-v99"), ("a b", "expected a g++ -march value")],
)
def test_a_march_g_plus_plus_rejects_is_a_config_error_naming_the_variable(tmp_path, private_cache, monkeypatch, march, says):
    monkeypatch.setenv("TILESCOPE_MARCH", march)
    with pytest.raises(ConfigError, match="TILESCOPE_MARCH") as info:
        build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])
    assert says in str(info.value)


@pytest.mark.slow
def test_a_march_beyond_this_cpu_is_refused_before_anything_runs(tmp_path, private_cache, monkeypatch):
    cxx = compiler.find_cxx()
    native = compiler._isa_macros(compiler._predefined(cxx, "native"))
    beyond = next((m for m in ("sapphirerapids", "graniterapids", "znver5") if
                   compiler._isa_macros(compiler._predefined(cxx, m)) - native), None)
    if beyond is None:
        pytest.skip("this CPU has every instruction set of the newest -march values g++ 12 knows")
    monkeypatch.setenv("TILESCOPE_MARCH", beyond)
    with pytest.raises(ConfigError, match=f"TILESCOPE_MARCH='{beyond}' compiles for .*which this CPU lacks"):
        build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])


@pytest.mark.slow
def test_truncated_pch_is_rebuilt(tmp_path, private_cache, caplog):
    build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])
    [gch] = gchs(private_cache)
    whole = gch.stat().st_size
    gch.write_bytes(gch.read_bytes()[: whole // 2])
    with caplog.at_level(logging.WARNING, logger="tilescope.toolchain"):
        result = build([BuildJob(source(tmp_path, "b", 2), tmp_path / "b.so")])[0]
    assert any("truncated" in r.getMessage() for r in caplog.records)
    assert gch.stat().st_size > whole // 2 and int(Path(f"{gch}.size").read_text()) == gch.stat().st_size
    assert "-include" in result.command and value(tmp_path / "b.so") == 4


@pytest.mark.slow
def test_pch_that_gcc_rejects_is_logged_removed_and_rebuilt(tmp_path, private_cache, caplog):
    build([BuildJob(source(tmp_path, "a", 1), tmp_path / "a.so")])
    [gch] = gchs(private_cache)
    size = gch.stat().st_size
    gch.write_bytes(b"gpch" + b"\x00" * (size - 4))  # right size and magic, garbage inside
    with caplog.at_level(logging.WARNING, logger="tilescope.toolchain"):
        build([BuildJob(source(tmp_path, "b", 2), tmp_path / "b.so")])
    assert value(tmp_path / "b.so") == 4
    assert any(
        "not used and removed" in r.getMessage() and str(gch) in r.getMessage() for r in caplog.records
    )
    build([BuildJob(source(tmp_path, "c", 3), tmp_path / "c.so")])
    assert gch.read_bytes()[:4] == b"gpch" and gch.read_bytes()[4:64] != b"\x00" * 60
    assert value(tmp_path / "c.so") == 5


@pytest.mark.slow
def test_concurrent_builds_share_one_whole_pch(tmp_path, private_cache):
    errors = []

    def one(i):
        try:
            build([BuildJob(source(tmp_path, f"t{i}", i), tmp_path / f"t{i}.so")])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    [gch] = gchs(private_cache)
    assert int(Path(f"{gch}.size").read_text()) == gch.stat().st_size
    assert [value(tmp_path / f"t{i}.so") for i in range(3)] == [2, 3, 4]
    assert not list((private_cache / "pch").rglob("*.tmp"))


@pytest.mark.slow
def test_kernel_folders_on_the_include_path_share_one_pch(tmp_path, private_cache):
    # the audit build puts each build's kernel folder on the include path: one PCH must serve them all
    jobs = []
    for n in range(3):
        folder = tmp_path / f"build{n}"
        folder.mkdir()
        (folder / "beside.hpp").write_text(f"inline int beside() {{ return {10 * n}; }}\n")
        src = folder / "k.cpp"
        src.write_text(
            '#include <tilescope/tile_types.hpp>\n#include "beside.hpp"\n'
            'extern "C" int value() { return beside() + int(sizeof(ts::bf16)); }\n'
        )
        extra = ("-DTS_AUDIT_ACCESSES", f"-I{folder}") if n == 2 else ("-DTS_AUDIT_ACCESSES",)
        include_dirs = (folder,) if n < 2 else ()
        jobs.append(BuildJob(src, folder / "k.so", include_dirs=include_dirs, extra_flags=extra))
    results = build(jobs)
    [gch] = gchs(private_cache)
    assert [value(j.output) for j in jobs] == [2, 12, 22]
    assert all(r.command[r.command.index("-include") + 1] == str(gch)[: -len(".gch")] for r in results)
