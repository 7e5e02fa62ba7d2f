"""Hostile and broken files, paths and arguments: every one is a clear error (it names the thing,
what was expected and what to do) or a correct report; nothing outside a build is read or run
because a build's data file names it; nothing the user made is overwritten."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import private_copy, vector_dag_build

import tilescope as ts
from tilescope.build.paths import confined
from tilescope.cli import main as cli
from tilescope.errors import BuildFileError
from tilescope.harness import run_jit
from tilescope.launch.task import replay_task

import vector_dag


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One vector_dag build with saved data, a full tensor dump and a saved task 0."""
    return vector_dag_build(tmp_path_factory.mktemp("pristine"), {"enable_dump_tensor": 2})


@pytest.fixture
def build(pristine, tmp_path):
    """A private copy of the pristine build, free to break."""
    return private_copy(pristine, tmp_path)


def edit_json(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def evil_script(tmp_path):
    """A Python file outside every build that leaves a marker when it is run."""
    marker = tmp_path / "ran"
    evil = tmp_path / "elsewhere" / "evil.py"
    evil.parent.mkdir()
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return evil, marker


# -- one check for every path a build's data file names -------------------------------------------


def test_confined_accepts_paths_inside_and_refuses_every_way_out(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link").symlink_to("/etc")
    assert confined(tmp_path, "sub/x.pt", "task.json's file") == tmp_path / "sub" / "x.pt"
    cases = {
        "/etc/passwd": "an absolute path, expected one relative to",
        "../x.pt": "a path that climbs out with '..'",
        "sub/../sub/x.pt": "a path that climbs out with '..'",
        "sub/link/passwd": f"{tmp_path}/sub/link is a symbolic link to /etc, outside {tmp_path}",
        "": "expected a path relative to",
        5: "expected a path relative to",
    }
    for relative, why in cases.items():
        with pytest.raises(BuildFileError) as e:
            confined(tmp_path, relative, "task.json's file", "save it again")
        msg = str(e.value)
        assert msg.startswith(f"task.json's file is {relative!r}: {why}"), msg
        assert "name only files inside the build" in msg and msg.endswith("so it is refused: save it again")


@pytest.mark.slow
def test_build_state_naming_a_script_elsewhere_is_refused_and_never_run(build, tmp_path, capsys):
    evil, marker = evil_script(tmp_path)
    edit_json(build / "build_state.json", lambda s: s["ir"].update(file=str(evil)))
    assert cli(["replay", str(build), "-p", "interp"]) == 1
    err = capsys.readouterr().err
    assert not marker.exists()
    assert f"{build}/build_state.json cannot be used (1 problem(s))" in err
    assert f"ir['file'] is {str(evil)!r}: an absolute path, expected one relative to {build}" in err
    assert "compile the program again" in err


@pytest.mark.slow
def test_an_ir_dump_that_is_a_link_out_of_the_build_is_refused(build, tmp_path):
    evil, marker = evil_script(tmp_path)
    ir = build / "ir" / "vector_dag.py"
    ir.unlink()
    ir.symlink_to(evil)
    with pytest.raises(
        BuildFileError, match=r"ir\['file'\] is 'ir/vector_dag.py': .*/ir/vector_dag.py is a symbolic link to .*/evil.py, outside"
    ):
        ts.CompiledProgram.from_dir(build)
    assert not marker.exists()


@pytest.mark.slow
def test_kernel_config_paths_outside_the_build_are_refused(build):
    config = build / "kernel_config.py"
    config.write_text(
        config.read_text() + "\nKERNELS[0]['binary'] = '/etc/passwd'\nORCHESTRATION['source'] = '../x.cpp'\n"
    )
    with pytest.raises(BuildFileError) as e:
        ts.CompiledProgram.from_dir(build)
    msg = str(e.value)
    assert f"{config} cannot be used (2 problem(s))" in msg
    assert "KERNELS[0]['binary'] is '/etc/passwd': an absolute path" in msg
    assert "ORCHESTRATION['source'] is '../x.cpp': a path that climbs out with '..'" in msg
    assert msg.endswith("compile the program again (a new build directory; this one is left as it is)")


@pytest.mark.slow
def test_a_tensor_dump_naming_a_payload_file_elsewhere_is_refused(build, capsys):
    manifest = build / "dfx_outputs" / "tensor_dump" / "tensor_dump.json"
    edit_json(manifest, lambda d: d.update(bin_file="/etc/passwd"))
    out_dir = build / "exported"
    assert cli(["dump", str(build), "-i", "0", "--export", str(out_dir)]) == 1
    err = capsys.readouterr().err
    assert f"tilescope dump: error: {manifest}'s bin_file is '/etc/passwd': an absolute path" in err
    assert "re-run with --dump-tensor to write a new dump" in err
    assert not out_dir.exists()
    edit_json(manifest, lambda d: d.update(bin_file="../../data/in/x.pt"))
    assert cli(["dump", str(build)]) == 1
    assert "a path that climbs out with '..'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_saved_task_naming_files_elsewhere_is_refused(build, tmp_path):
    outside = tmp_path / "outside.pt"
    torch.save(torch.ones(64, 128), outside)
    task_json = build / "dfx_outputs" / "failure" / "task_0" / "task.json"

    def point_outside(meta):
        meta["args"][0]["file"] = str(outside)
        meta["args"][1]["file"] = "../../../../data/in/y.pt"

    edit_json(task_json, point_outside)
    with pytest.raises(ts.TilescopeError) as e:
        replay_task(build, 0, platform="interp")
    msg = str(e.value)
    assert "does not match kernel add" in msg and "(2 problem(s))" in msg
    assert f"arg 0 'a''s file is {str(outside)!r}: an absolute path" in msg
    assert "arg 1 'b''s file is '../../../../data/in/y.pt': a path that climbs out with '..'" in msg
    assert "replay a task this build saved itself" in msg


@pytest.mark.slow
def test_a_saved_task_with_wrong_types_is_reported(build):
    task_json = build / "dfx_outputs" / "failure" / "task_0" / "task.json"
    edit_json(task_json, lambda m: m["args"][0].update(index="zero"))
    with pytest.raises(
        ts.TilescopeError, match=r"not a readable saved task \(TypeError: args\[0\].index is 'zero'"
    ):
        replay_task(build, 0, platform="interp")
    task_json.write_text("[1, 2]")
    with pytest.raises(
        ts.TilescopeError, match=r"a JSON list, not an object\).*re-run to save this one again"
    ):
        replay_task(build, 0, platform="interp")


# -- kernel_config.py and build_state.json that lack keys or hold the wrong types ----------------


@pytest.mark.slow
def test_kernel_config_with_wrong_types_lists_every_problem(build):
    config = build / "kernel_config.py"
    text = config.read_text()
    config.write_text(text + "\nKERNELS = 5\n")
    with pytest.raises(BuildFileError) as e:
        ts.CompiledProgram.from_dir(build)
    assert str(e.value) == (
        f"{config} cannot be used (1 problem(s)):\n"
        "  KERNELS is 5, expected a list of kernel entries (one dict per kernel, in func_id order)\n"
        "  compile the program again (a new build directory; this one is left as it is)"
    )
    config.write_text(
        text + "\nARGS = [{'name': 'x', 'direction': 'sideways', 'shape': [64], 'dtype': 'f33'}]\n"
    )
    with pytest.raises(BuildFileError) as e:
        ts.CompiledProgram.from_dir(build)
    msg = str(e.value)
    assert "(2 problem(s))" in msg
    assert "ARGS[0]['direction'] is 'sideways', expected one of in, out, inout, scalar" in msg
    assert "ARGS[0]['dtype'] is 'f33', expected one of f32, f16, bf16" in msg
    config.write_text(
        text + "\nRUNTIME_CONFIG = {}\nKERNELS[1].pop('params')\nKERNELS[2]['signature'] = 'in'\n"
    )
    with pytest.raises(BuildFileError) as e:
        ts.CompiledProgram.from_dir(build)
    msg = str(e.value)
    assert "(3 problem(s))" in msg
    assert "RUNTIME_CONFIG['local_memory_bytes'] is missing, expected a byte count" in msg
    assert "KERNELS[1]['params'] is missing, expected the kernel's parameters" in msg
    assert "KERNELS[2]['signature'] is 'in', expected a list of D.IN, D.OUT, D.INOUT, D.SCALAR" in msg
    config.write_text(text + "\nARGS[0]['weight'] = 1\nARGS[-1]['weight'] = True\n")  # not True; on an output
    with pytest.raises(BuildFileError) as e:
        ts.CompiledProgram.from_dir(build)
    msg = str(e.value)
    assert "(2 problem(s))" in msg
    assert "ARGS[0]['weight'] is 1, expected True, on an 'in' tensor (a ts.Weight), or no 'weight' key" in msg


@pytest.mark.slow
def test_build_state_missing_keys_is_reported_not_a_key_error(build, capsys):
    (build / "build_state.json").write_text('{"format": 1}')
    assert cli(["replay", str(build), "-p", "interp"]) == 1
    err = capsys.readouterr().err
    assert f"[ERROR] {build}/build_state.json cannot be used (2 problem(s)):" in err
    assert "'sources' is missing, expected a dict: C++ source -> {'sha256'" in err
    assert (
        "'ir' is missing, expected {'file', 'sha256', 'kernels', 'orchestration'}: the IR dump's hashes"
        in err
    )
    assert "KeyError" not in err and "Traceback" not in err
    (build / "build_state.json").write_text("[1, 2]")
    with pytest.raises(BuildFileError, match=r"the file is \[1, 2\], expected a JSON object with 'format'"):
        ts.CompiledProgram.from_dir(build)


# -- paths given on the command line --------------------------------------------------------------


@pytest.mark.slow
def test_a_file_given_as_a_build_directory_says_it_is_a_file(build, tmp_path, capsys):
    some_file = tmp_path / "notes.txt"
    some_file.write_text("hello")
    assert cli(["replay", str(some_file)]) == 1
    err = capsys.readouterr().err
    assert (
        f"[ERROR] {some_file} is a file, not a build directory (a build directory is what a compile writes"
        in err
    )
    assert "does not exist" not in err
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, runtime_dir=str(build / "kernel_config.py"))
    assert not result.passed
    assert result.error.endswith(
        f"holding kernel_config.py, the C++ and its binaries); pass the directory it is in: {build}"
    )
    missing = ts.replay_compiled(tmp_path / "nope")
    assert f"build directory {tmp_path / 'nope'} does not exist (a build directory is" in missing.error
    assert "`tilescope builds` lists them" in missing.error


@pytest.mark.slow
def test_a_file_given_as_golden_data_or_a_saved_task_says_it_is_a_file(build, tmp_path, capsys):
    some_file = tmp_path / "notes.txt"
    some_file.write_text("hello")
    assert cli(["replay", str(build), "-p", "interp", "--golden-data", str(some_file)]) == 1
    err = capsys.readouterr().err
    assert (
        f"golden data {some_file} is a file, not a data directory (a data directory holds in/ and out/" in err
    )
    assert cli(["replay", str(build), "-p", "interp", "--task", "0", "--from", str(some_file)]) == 1
    err = capsys.readouterr().err
    assert f"{some_file} is a file, not a saved task's directory (dfx_outputs/failure/task_<id>/" in err
    task_json = build / "dfx_outputs" / "failure" / "task_0" / "task.json"
    assert cli(["replay", str(build), "-p", "interp", "--task", "0", "--from", str(task_json)]) == 0
    assert "[REPLAY] ran to the end" in capsys.readouterr().out


# -- tilescope dump --export never overwrites what is there ---------------------------------------


@pytest.mark.slow
def test_dump_export_refuses_to_overwrite_unless_forced(build, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert cli(["dump", str(build), "-i", "0", "--export", str(notes)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        f"tilescope dump: error: --export {notes}: a file, not a directory; name a directory (created if missing)"
    )
    assert notes.read_text() == "my notes"

    assert cli(["dump", str(build), "-i", "0", "-i", "1", "--export"]) == 0
    txt = build / "dfx_outputs" / "tensor_dump" / "txt" / "r0000_t0_add_before_input_a0.txt"
    txt.write_text("annotated by hand")
    capsys.readouterr()
    assert cli(["dump", str(build), "-i", "0", "-i", "1", "--export"]) == 1
    err = capsys.readouterr().err
    assert (
        f"4 file(s) of this export already exist in {txt.parent}: r0000_t0_add_before_input_a0.txt, " in err
    )
    assert "and 1 more; nothing was written: pass --force to replace them, or --export ANOTHER_DIR" in err
    assert txt.read_text() == "annotated by hand"

    assert cli(["dump", str(build), "-i", "0", "--export", "--force"]) == 0
    assert txt.read_text().startswith("# tilescope tensor dump: record 0")
    assert cli(["dump", str(build), "-i", "0", "--force"]) == 1
    assert "--force only applies to --export" in capsys.readouterr().err


@pytest.mark.slow
def test_dump_export_force_replaces_a_link_and_never_writes_through_it(build, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    assert cli(["dump", str(build), "-i", "0", "--export"]) == 0
    txt = build / "dfx_outputs" / "tensor_dump" / "txt" / "r0000_t0_add_before_input_a0.txt"
    txt.unlink()
    txt.symlink_to(victim)
    assert cli(["dump", str(build), "-i", "0", "--export", "--force"]) == 0
    assert victim.read_text() == "the user's own file"
    assert not txt.is_symlink() and txt.read_text().startswith("# tilescope tensor dump: record 0")
    (build / "dfx_outputs" / "tensor_dump" / "txt").rename(tmp_path / "elsewhere")
    (build / "dfx_outputs" / "tensor_dump" / "txt").symlink_to(tmp_path / "elsewhere")
    capsys.readouterr()
    assert cli(["dump", str(build), "-i", "0", "--export", "--force"]) == 1
    assert "txt is a symbolic link to " in capsys.readouterr().err


@pytest.mark.slow
def test_dump_export_on_a_full_disk_is_one_line_and_leaves_no_half_file(build, tmp_path, capsys, monkeypatch):
    import errno

    import tilescope.build.paths as paths

    def full(path, data, parents=True):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(paths, "atomic_write_bytes", full)
    out = tmp_path / "export"
    assert cli(["dump", str(build), "-i", "0", "--export", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "--export stopped: no space left on the device holding " in err and err.endswith("; nothing was written\n")
    assert list(out.iterdir()) == []


# -- numbers on the command line and in data/meta.json ---------------------------------------------


def harness_parser():
    import argparse

    from tilescope.harness import add_harness_args

    return add_harness_args(argparse.ArgumentParser(prog="model.py"))


@pytest.mark.parametrize(
    "seed, message",
    [
        ("1e23", "argument --seed: '1e23' is not a whole number (e.g. --seed 0)"),
        ("1" + "0" * 23, "seed 100000000000000000000000: expected a whole number from -9223372036854775808"),
    ],
)
def test_a_seed_torch_cannot_take_is_an_argparse_error(seed, message, capsys):
    with pytest.raises(SystemExit) as e:
        harness_parser().parse_args(["--seed", seed])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert harness_parser().parse_args(["--seed", "-5"]).seed == -5


def test_a_bad_seed_or_tolerance_given_to_run_jit_is_reported():
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, seed=10**23)
    assert not result.passed and result.error.startswith(
        "seed 100000000000000000000000: expected a whole number"
    )
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, rtol=-1.0, atol=float("nan"))
    assert result.error == (
        "rtol -1.0: expected a finite number >= 0; atol nan: expected a finite number >= 0 "
        "(an output matches where |actual - expected| <= atol + rtol * |expected|)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("flag, value, message", [("--rtol", "-1", "-1: expected a finite number >= 0"),
                                                   ("--atol", "nan", "nan: expected a finite number >= 0"),
                                                   ("--atol", "abc", "'abc' is not a number (e.g. 1e-5)")])  # fmt: skip
def test_replay_tolerances_are_checked_by_argparse(build, flag, value, message, capsys):
    with pytest.raises(SystemExit):
        cli(["replay", str(build), flag, value])
    assert f"tilescope replay: error: argument {flag}: {message}" in capsys.readouterr().err


@pytest.mark.slow
def test_meta_json_with_wrong_types_names_the_file_and_key(build, capsys):
    meta = build / "data" / "meta.json"
    meta.write_text('{"rtol": "abc", "atol": 1e-5, "seed": 0}')
    assert cli(["replay", str(build), "-p", "interp"]) == 1
    err = capsys.readouterr().err
    assert f"[ERROR] {meta}: rtol 'abc': expected a finite number >= 0; correct it, pass --rtol/--atol" in err
    assert "save the data again (--save-data, into a new build)" in err and "TypeError" not in err
    assert cli(["replay", str(build), "-p", "interp", "--rtol", "1e-5"]) == 0  # the value given wins
    meta.write_text("[]")
    assert cli(["replay", str(build), "-p", "interp"]) == 1
    assert f"{meta} holds a JSON list, expected an object with rtol, atol and seed" in capsys.readouterr().err


# -- binaries the loader refuses -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, reason", [(b"", "file too short"), (b"not an ELF file " * 256, "invalid ELF header")]
)
def test_a_garbage_binary_is_rebuilt_on_refresh_and_named_when_loaded_as_is(build, content, reason, capsys):
    import hashlib

    from tilescope.toolchain import cache_dir

    binary = build / "kernels" / "vec" / "add.so"
    binary.write_bytes(content)
    # loaded as it is (no refresh): the loader's refusal names the file, and its copy goes
    copy = cache_dir() / "loaded" / f"{hashlib.sha256(content).hexdigest()}.so"
    x, y = torch.randn(vector_dag.R, vector_dag.C), torch.randn(vector_dag.R, vector_dag.C)
    with pytest.raises(ts.TilescopeError) as info:
        ts.CompiledProgram(build).run(x, y, torch.zeros(vector_dag.R, vector_dag.C))
    assert f"{binary} cannot be loaded ({reason}): it is not a shared object tilescope built" in str(info.value)
    assert "Delete it and run again: tilescope rebuilds a missing binary from its C++ source" in str(info.value)
    assert not copy.exists()
    # replay refreshes the build first: the binary is not the one recorded, so it is rebuilt
    assert cli(["replay", str(build), "--no-isolate"]) == 0
    err = capsys.readouterr().err
    assert "1 binary not built from its source (replaced or corrupt): kernels/vec/add.so" in err
    assert "Traceback" not in err


# -- a log, cache or build directory that cannot be written ---------------------------------------


@pytest.fixture
def log_files():
    """Removes the log-file handlers a test attached to the tilescope logger."""
    import logging

    logger = logging.getLogger("tilescope")
    before = list(logger.handlers)
    yield
    for h in logger.handlers[:]:
        if h not in before:
            logger.removeHandler(h)
            h.close()


def enospc(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_log_dir_that_is_a_file_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys, log_files):
    blocker = tmp_path / "logs"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILESCOPE_LOG_DIR", str(blocker))
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        runtime_cfg={"platform": "interp"},
    )
    assert result.passed, result.error
    err = capsys.readouterr().err
    assert err.count("cannot write the log file") == 1, err
    assert f"[WARNING] cannot write the log file {blocker}/tilescope_" in err
    assert f"({blocker} is a file, not a directory): going on without it (messages still go to stderr)" in err
    assert "make TILESCOPE_LOG_DIR a writable directory with free space" in err
    assert blocker.read_text() == "not a directory"


def test_a_log_file_on_a_full_disk_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys, log_files):
    import logging

    from tilescope._logging import configure

    monkeypatch.setenv("TILESCOPE_LOG_DIR", str(tmp_path / "logs"))
    configure("v5")
    (handler,) = [h for h in logging.getLogger("tilescope").handlers if hasattr(h, "_tilescope_file")]
    monkeypatch.setattr(handler.stream, "write", enospc)
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        runtime_cfg={"platform": "interp"},
    )
    assert result.passed, result.error
    logging.getLogger("tilescope").info("one more message")
    err = capsys.readouterr().err
    assert err.count("cannot write the log file") == 1, err
    assert "(no space left on its device): going on without it" in err
    assert "Logging error" not in err and "Traceback" not in err
    assert "one more message" in err


@pytest.fixture
def core_loaded():
    """The runtime core, loaded from the usual cache before a test makes the cache unusable."""
    from tilescope.runtime import library

    library.load_core()


@pytest.mark.slow
def test_a_cache_dir_that_is_a_file_warns_once_and_the_run_goes_on(
    tmp_path, monkeypatch, capsys, core_loaded
):
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(blocker))
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden)
    assert result.passed, result.error
    err = capsys.readouterr().err
    assert err.count("cannot be written") == 1, err
    assert (
        f"[WARNING] the compiler cache {blocker} cannot be written (it is a file, not a directory): this process "
        in err
    )
    assert "goes on with a temporary cache" in err and "set TILESCOPE_CACHE_DIR to one" in err
    doctor = {name: (ok, detail) for name, ok, detail in ts.toolchain.check()}
    assert doctor["cache dir"][0] is False and str(blocker) in doctor["cache dir"][1]


@pytest.mark.slow
def test_a_full_cache_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys, core_loaded):
    import tempfile

    from tilescope.toolchain import cache

    root = tmp_path / "cache"
    monkeypatch.setenv("TILESCOPE_CACHE_DIR", str(root))
    real_mkstemp = tempfile.mkstemp

    def full_below_objects(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).is_relative_to(root) and Path(dir) != root:
            enospc()
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", full_below_objects)
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden)
    assert result.passed, result.error
    err = capsys.readouterr().err
    assert err.count("cannot be written") == 1, err
    assert f"the compiler cache {root} cannot be written (no space left on its device)" in err
    assert cache.cache_dir() != root and not list(root.rglob("*.so"))


def test_a_build_base_that_is_a_file_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "builds"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(blocker / "sub"))
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden)
    assert not result.passed
    assert result.error == (
        f"cannot create a build directory under {blocker / 'sub'}: {blocker} is a file, not a directory; "
        "set TILESCOPE_BUILD_DIR (or compile_cfg build_dir) to a directory you can write"
    )


def test_a_full_build_base_is_a_clear_error_and_leaves_no_partial_build(tmp_path, monkeypatch):
    base = tmp_path / "builds"
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(base))
    from tilescope.build import paths

    real_open_temp = paths._open_temp

    def full(path, *args, **kwargs):  # every file of a build is written through a temporary file beside it
        if path.is_relative_to(base) and "kernels" in path.parts:
            enospc()
        return real_open_temp(path, *args, **kwargs)

    monkeypatch.setattr(paths, "_open_temp", full)
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden)
    assert not result.passed
    assert result.error.startswith(f"cannot write {base}/_jit_vector_dag_")
    assert ": no space left on its device; the partial build directory " in result.error
    assert result.error.endswith(
        "was removed. Free space there, or set TILESCOPE_BUILD_DIR (or compile_cfg build_dir) to a directory you "
        "can write, and compile again"
    )
    assert list(base.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "error",
    [
        # what torch.save raises when the disk fills up: a RuntimeError, not an OSError
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598: No space left on device"),
        OSError(28, "No space left on device"),
    ],
    ids=["torch", "oserror"],
)
def test_save_data_on_a_full_disk_is_a_clear_error_and_keeps_no_half_snapshot(build, monkeypatch, capsys, error):
    from tilescope.cli import main

    real_save, saved = torch.save, []

    def full_after_one_file(value, f, *args, **kwargs):
        saved.append(f)
        if len(saved) > 1:
            raise error
        return real_save(value, f, *args, **kwargs)

    shutil.rmtree(build / "data")
    monkeypatch.setattr(torch, "save", full_after_one_file)
    result = run_jit(
        vector_dag.vector_dag,
        vector_dag.SPECS,
        golden_fn=vector_dag.golden,
        save_data=True,
        runtime_dir=str(build),
    )
    assert result.error == (
        f"cannot save the data snapshot into {build / 'data'}: no space left on its device; nothing was kept. "
        "To keep it, free space there and run again with --save-data"
    )
    assert len(saved) == 2
    assert not (build / "data").exists()
    assert not [p for p in build.iterdir() if p.name.startswith(".data")]  # nor its temporary directory
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["builds", str(build.parent)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(build.name))
    assert re.split(r"\s{2,}", line)[4] == "-"  # DATA: none


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True])
def test_a_build_that_cannot_be_written_still_runs(build, monkeypatch, isolate):
    import errno

    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.is_relative_to(build.resolve()) or self.is_relative_to(build):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    shutil.rmtree(build / "dfx_outputs")
    prog = ts.CompiledProgram.from_dir(build)
    monkeypatch.setattr(Path, "mkdir", read_only)
    x, y, out = torch.randn(64, 128), torch.randn(64, 128), torch.zeros(64, 128)
    prog.run(x, y, out, isolate=isolate)
    expected = {"out": torch.zeros(64, 128)}
    vector_dag.golden({"x": x, "y": y, **expected})
    torch.testing.assert_close(out, expected["out"])
    assert not (build / "dfx_outputs").exists()


# -- further broken files ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_deps_json_with_a_task_without_an_id_is_reported(build, capsys):
    deps = build / "dfx_outputs" / "deps.json"
    deps.write_text('{"tasks": [{"name": "a"}], "edges": []}')
    assert cli(["deps", str(build)]) == 1
    err = capsys.readouterr().err
    assert (
        f'{deps} is not a tilescope deps.json: it holds a task {{"name": "a"}} without an integer \'id\''
        in err
    )
    assert "run again to rewrite it" in err and "KeyError" not in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "text, error",
    [
        ("x\n", "NameError: name 'x' is not defined"),
        ("import ts\n", "ModuleNotFoundError: No module named 'ts'"),
    ],
)
def test_an_ir_dump_whose_top_level_raises_names_its_line(build, text, error, capsys):
    ir = build / "ir" / "vector_dag.py"
    ir.write_text(ir.read_text() + text)
    line = len(ir.read_text().splitlines())
    assert cli(["replay", str(build), "-p", "interp"]) == 1
    err = capsys.readouterr().err
    assert f"[ERROR] {ir}:{line}: {error} (raised while loading the file)" in err
    assert "hint: the file defines one @ts.jit function and its kernels, as the printed IR does" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_corrupt_last_run_json_is_listed_as_unknown(build, capsys):
    (build / "last_run.json").write_text('{"passed": "yes"}')
    assert cli(["builds", str(build.parent)]) == 0
    out = capsys.readouterr().out
    assert (
        "unknown (last_run.json is not one the harness wrote)" in out
        and "passed" not in out.split("LAST RUN")[1]
    )
    (build / "last_run.json").write_text("garbage")
    assert cli(["builds", str(build.parent)]) == 0
    assert "unknown (last_run.json is not one the harness wrote)" in capsys.readouterr().out
