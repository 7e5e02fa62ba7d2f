"""``tilescope builds`` and ``tilescope clean``: listing build directories and removing old ones,
never one a process uses, never anything that is not a build."""

import gc
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilescope as ts
from tilescope.build.lock import BuildBusyError, hold_build, in_use
from tilescope.cli import main
from tilescope.harness import TensorSpec, run_jit

F = ts.f32


@ts.kernel
def plus_one(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 8]) + 1.0)


@ts.jit
def prog_a(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    plus_one(x, y)


@ts.jit
def prog_b(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    plus_one(x, y)


SPECS = [TensorSpec("x", [4, 8], torch.float32), TensorSpec("y", [4, 8], torch.float32, is_output=True)]


def golden(t):
    t["y"][:] = t["x"] + 1.0


@pytest.fixture
def base(tmp_path):
    return tmp_path / "build_output"  # TILESCOPE_BUILD_DIR (conftest)


def compile_builds(base):
    """prog_a four times (a passed run with saved data, a failed run, a compile only, a compile
    only), prog_b once; and three entries that are not builds."""
    a1 = run_jit(prog_a, SPECS, golden_fn=golden, save_data=True).work_dir
    a2 = run_jit(prog_a, SPECS, golden_fn=lambda t: None).work_dir  # outputs differ: failed
    a3 = prog_a.compile().work_dir
    a4 = prog_a.compile().work_dir
    b1 = prog_b.compile().work_dir
    gc.collect()  # nothing of this process holds them now
    (base / "notes").mkdir()
    (base / "README.txt").write_text("not a build\n")
    (base / "_jit_half_20260101_000000" / "kernels").mkdir(parents=True)  # an interrupted compile
    return a1, a2, a3, a4, b1


def rows(out: str) -> dict[str, list[str]]:
    """The listing's rows by build directory name: its columns."""
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "BUILD",
        "PROGRAM",
        "BUILT",
        "SIZE",
        "DATA",
        "IN USE",
        "LAST RUN",
    ]
    table = {}
    for line in lines[1:]:
        if not line.startswith("_jit_"):
            break
        cols = re.split(r"\s{2,}", line)
        table[cols[0]] = cols[1:]
    return table


@pytest.mark.slow
def test_builds_lists_program_time_size_data_use_and_last_result(base, capsys):
    a1, a2, a3, a4, b1 = compile_builds(base)
    capsys.readouterr()
    shutil.copytree(a1 / "data", a2 / "dfx_outputs" / "triage" / "data")  # what --triage saves for its tool
    held = ts.CompiledProgram.from_dir(a3)  # loaded in this process: in use
    assert main(["builds"]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    assert list(table) == [d.name for d in (a1, a2, a3, a4, b1)]  # oldest first
    stamp = re.fullmatch(r"_jit_prog_a_(\d{4})(\d\d)(\d\d)_(\d\d)(\d\d)(\d\d)(_\d+)?", a1.name).groups()
    assert table[a1.name][:2] == ["prog_a", "{}-{}-{} {}:{}:{}".format(*stamp[:6])]
    assert re.fullmatch(r"\d+\.\d (KB|MB)", table[a1.name][2])
    assert [table[d.name][3:5] for d in (a1, a2, a3, a4, b1)] == [
        ["yes", "-"], ["triage copy", "-"], ["-", "yes"], ["-", "-"], ["-", "-"]
    ]  # fmt: skip
    last = [table[d.name][5] for d in (a1, a2, a3, a4, b1)]
    assert re.fullmatch(r"passed \(sim, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)", last[0])
    assert re.fullmatch(r"failed \(sim, .*\)", last[1]) and last[2:] == ["-", "-", "-"]
    assert re.search(rf"^5 build\(s\), \d+\.\d (KB|MB) under {re.escape(str(base))}$", out, re.M), out
    assert out.splitlines()[-3:] == [
        f"not a build, left alone: {base / 'README.txt'} (not a directory)",
        f"not a build, left alone: {base / '_jit_half_20260101_000000'} (no kernel_config.py: an interrupted "
        "compile, or not a tilescope build)",
        f"not a build, left alone: {base / 'notes'} (not named _jit_<program>_<YYYYMMDD_HHMMSS>)",
    ]
    last_run = json.loads((a1 / "last_run.json").read_text())
    assert last_run.keys() == {"passed", "platform", "time", "outputs"}
    # each compared output's figures, what `tilescope bisect --metric` reads
    assert last_run["outputs"] and all(o.keys() == {"max_abs_err", "max_rel_err", "mismatches", "numel"}
                                       and o["mismatches"] == 0 for o in last_run["outputs"].values())  # fmt: skip
    del held
    gc.collect()
    assert not in_use(a3)  # the lock goes with the program
    assert main(["builds", str(base)]) == 0 and "yes" not in "".join(
        c[4] for c in rows(capsys.readouterr().out).values()
    )


@pytest.mark.slow
def test_clean_keeps_the_newest_of_each_program_and_never_a_build_in_use(base, capsys):
    a1, a2, a3, a4, b1 = compile_builds(base)
    held_here = ts.CompiledProgram.from_dir(a1)
    elsewhere = subprocess.Popen(  # another process holds a2, as a run of it would
        [sys.executable, "-c", "import sys; from tilescope.build.lock import hold_build; "
         f"lock = hold_build({str(a2)!r}); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(ts.__file__).parents[1])},
    )  # fmt: skip
    try:
        assert elsewhere.stdout.readline() == "held\n"
        capsys.readouterr()
        assert main(["clean", "--keep", "1", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == f"would remove {a3} (prog_a, {size_of(out, a3)})"
        assert all(d.is_dir() for d in (a1, a2, a3, a4, b1))  # a dry run removes nothing
        assert main(["clean", "--keep", "1"]) == 0
        out = capsys.readouterr().out
    finally:
        elsewhere.communicate("")
    lines = out.splitlines()
    assert lines[:3] == [
        f"removed {a3} (prog_a, {size_of(out, a3)})",
        f"skipped {a1}: in use by a running process",
        f"skipped {a2}: in use by a running process",
    ]
    assert re.fullmatch(
        r"removed 1 build\(s\), freed \d+\.\d KB; kept 2 \(--keep 1: the newest of each program\); skipped 2",
        lines[-1],
    )
    assert sorted(p.name for p in base.iterdir()) == sorted(
        [a1.name, a2.name, a4.name, b1.name, "README.txt", "_jit_half_20260101_000000", "notes"]
    )
    del held_here
    gc.collect()
    assert main(["clean", "--keep", "0"]) == 0  # no process holds any now: every build goes
    assert sorted(p.name for p in base.iterdir()) == ["README.txt", "_jit_half_20260101_000000", "notes"]
    assert capsys.readouterr().out.splitlines()[-1].startswith("removed 4 build(s), freed ")


def size_of(out: str, build) -> str:
    return re.search(rf"{re.escape(str(build))} \(prog_a, ([^)]+)\)", out).group(1)


@pytest.mark.slow
def test_a_build_being_removed_cannot_be_loaded(base):
    work = prog_a.compile().work_dir
    gc.collect()
    import fcntl

    with open(work / ".lock", "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # what clean holds while it removes the build
        with pytest.raises(
            BuildBusyError, match=r"is being removed by `tilescope clean`; compile the program again"
        ):
            hold_build(work)
    assert hold_build(work) is not None


def test_bad_arguments_are_clear(base, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["clean", "--keep", "-1"])
    assert e.value.code == 2
    assert "argument --keep: expected a number of builds >= 0, got -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["clean", "--keep", "all"])
    assert "argument --keep: expected a number of builds >= 0, got 'all'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["clean"])
    assert "the following arguments are required: --keep" in capsys.readouterr().err
    missing = tmp_path / "nowhere"
    for argv, where in (
        (["builds"], base),  # nothing was compiled: the default base does not exist
        (["clean", "--keep", "1"], base),
        (["builds", str(missing)], missing),
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"tilescope {argv[0]}: error: build base directory {where} does not exist"), err
    (tmp_path / "file").write_text("")
    assert main(["builds", str(tmp_path / "file")]) == 1
    assert f"tilescope builds: error: {tmp_path / 'file'} is not a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_clean_removes_only_what_tilescope_wrote(base, capsys):
    notes = base / "_jit_notes_20260101_000000"  # named like a build, made by a user
    notes.mkdir(parents=True)
    (notes / "results.csv").write_text("run,loss\n1,0.5\n")
    (notes / "kernel_config.py").write_text("BLOCK = 64  # my tuning notes\n")
    forged = base / "_jit_forged_20260101_000000"  # a real header, but no build_state.json
    forged.mkdir()
    (forged / "kernel_config.py").write_text('"""Build configuration of forged, generated by tilescope 0.1.0.\n"""\n')
    (forged / "mine.txt").write_text("keep me\n")
    work = prog_a.compile().work_dir
    gc.collect()
    (work / "results.csv").write_text("mine\n")  # a user's files put into a real build
    (work / "plots").mkdir()
    (work / "plots" / "a.png").write_bytes(b"\x89PNG")
    (work / "plots" / "b.png").write_bytes(b"\x89PNG")
    (work / ".kernel_config.py.123.456.0.tmp").write_text("")  # a write a killed compile left: tilescope's
    capsys.readouterr()
    assert main(["builds"]) == 0
    out = capsys.readouterr().out
    assert list(rows(out)) == [work.name]
    assert f"not a build, left alone: {notes} (its kernel_config.py was not written by tilescope)" in out
    assert (
        f"not a build, left alone: {forged} (no build_state.json, which every build tilescope compiles holds: "
        "not a tilescope build)"
    ) in out
    assert main(["clean", "--keep", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"would remove {work} (prog_a, ")
    assert out.splitlines()[1] == (
        "  would keep the directory: 3 files tilescope did not write: plots/, results.csv"
    )
    assert (work / "kernel_config.py").is_file()
    assert main(["clean", "--keep", "0"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "  kept the directory: 3 files tilescope did not write: plots/, results.csv"
    assert out.splitlines()[-1].startswith("removed 1 build(s), freed ")
    assert out.splitlines()[-1].endswith("(--keep 0); 1 directory kept for files tilescope did not write")
    assert sorted(p.name for p in work.iterdir()) == ["plots", "results.csv"]
    assert (work / "results.csv").read_text() == "mine\n" and len(list((work / "plots").iterdir())) == 2
    assert sorted(p.name for p in notes.iterdir()) == ["kernel_config.py", "results.csv"]
    assert sorted(p.name for p in forged.iterdir()) == ["kernel_config.py", "mine.txt"]
    assert main(["builds"]) == 0  # what is left is no build: listed as left alone, never removed
    assert f"not a build, left alone: {work} (no kernel_config.py: " in capsys.readouterr().out


@pytest.mark.slow
def test_clean_keeps_a_link_named_like_a_build_file(base, tmp_path, capsys):
    work = prog_a.compile().work_dir
    gc.collect()
    shutil.rmtree(work / "report")
    elsewhere = tmp_path / "my_reports"
    elsewhere.mkdir()
    (elsewhere / "q3.txt").write_text("mine\n")
    (work / "report").symlink_to(elsewhere)  # tilescope never writes a link
    assert main(["clean", "--keep", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "  kept the directory: 1 file tilescope did not write: report (a link)"
    )
    assert [p.name for p in work.iterdir()] == ["report"] and (elsewhere / "q3.txt").is_file()


def test_a_build_state_that_is_not_tilescopes_is_not_a_build(base, capsys):
    fake = base / "_jit_x_20260101_000000"
    fake.mkdir(parents=True)
    (fake / "kernel_config.py").write_text('"""Build configuration of x, generated by tilescope 0.1.0.\n"""\n')
    (fake / "build_state.json").write_text('{"format": 1}\n')
    assert main(["clean", "--keep", "0"]) == 0
    out = capsys.readouterr().out
    assert (
        f"not a build, left alone: {fake} (its build_state.json is not one tilescope writes: "
        "no 'sources' and 'ir')"
    ) in out
    assert sorted(p.name for p in fake.iterdir()) == ["build_state.json", "kernel_config.py"]


@pytest.mark.slow
def test_what_a_killed_or_failed_save_left_is_no_data_and_clean_removes_it(base, capsys):
    killed = prog_a.compile().work_dir  # a save killed in its temporary directory
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process that is gone
    left = killed / f".data.{child.pid}.1.0.tmp"
    (left / "in").mkdir(parents=True)
    torch.save(torch.ones(4, 8), left / "in" / "x.pt")
    old = prog_a.compile().work_dir  # a half snapshot, as a save killed mid-file left it before
    (old / "data" / "in").mkdir(parents=True)
    torch.save(torch.ones(4, 8), old / "data" / "in" / "x.pt")
    (old / "data" / "in" / ".y.pt.123.456.0.tmp").write_bytes(b"PK")
    gc.collect()
    capsys.readouterr()
    assert main(["builds"]) == 0
    table = rows(capsys.readouterr().out)
    assert table[killed.name][3] == "interrupted save" and table[old.name][3] == "interrupted save"
    from tilescope.harness.replay import replay_compiled

    replayed = replay_compiled(killed)  # a reader never takes it for data
    assert not replayed.passed and replayed.error.startswith(f"{killed} has no saved data ({killed / 'data'})")
    assert main(["clean", "--keep", "0"]) == 0
    assert list(base.iterdir()) == []  # tilescope's own leftovers go with the build
