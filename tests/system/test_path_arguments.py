"""Every path the ``tilescope`` command (and a model script's harness flags) takes goes through one
check: a path the system cannot look up (too long, a loop of links, no permission) is a clear
error naming the argument, the condition and what to do, never a traceback, and a long path is
echoed shortened."""

import argparse
import errno
import os

import pytest

import tilescope as ts
from tilescope.build.path_args import PathArg, path_problem
from tilescope.cli import build_parser, main
from tilescope.errors import TilescopeError, clipped
from tilescope.harness import add_harness_args

LONG = "a" * 5000


@pytest.mark.parametrize(
    "argv, argument",
    [
        (["dump", LONG], "DIR"),
        (["dump", "--export", LONG], "--export"),
        (["deps", LONG], "DIR"),
        (["trace", LONG], "DIR"),
        (["builds", LONG], "BASE"),
        (["clean", "--keep", "0", LONG], "BASE"),
        (["replay", LONG], "BUILD_DIR"),
        (["replay", "b", "--golden-data", LONG], "--golden-data"),
        (["replay", "b", "--task", "0", "--from", LONG], "--from"),
        (["localize", LONG], "BUILD"),
        (["localize", "b", "--golden-data", LONG], "--golden-data"),
        (["triage", LONG], "BUILD"),
        (["triage", "b", "--golden-data", LONG], "--golden-data"),
    ],
)
def test_a_path_too_long_is_a_clear_error_naming_the_argument(argv, argument, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a" * 300 not in err  # shortened, not echoed whole
    assert f"tilescope {argv[0]}: error: argument {argument}: {clipped(LONG)}: " in err
    assert err.rstrip().endswith(
        "too long for the file system: a name in it has 5000 bytes, the limit is 255 (and 4096 for a whole "
        "path); pass a shorter path (a relative one, or a symbolic link to a directory deep down)"
    ), err


def test_a_model_scripts_path_flags_are_checked_too(capsys):
    parser = add_harness_args(argparse.ArgumentParser(prog="model.py"))
    for flag in ("--runtime-dir", "--golden-data"):
        with pytest.raises(SystemExit):
            parser.parse_args([flag, LONG])
        assert f"model.py: error: argument {flag}: {clipped(LONG)}: too long" in capsys.readouterr().err


def test_a_loop_of_links_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(SystemExit):
        main(["builds", str(tmp_path / "a")])
    assert capsys.readouterr().err.rstrip().endswith(
        f"argument BASE: {tmp_path / 'a'}: too many levels of symbolic links (a link on it leads back to "
        "itself); fix or remove the link"
    )


def test_no_permission_and_other_conditions_are_named(monkeypatch):
    def refuse(code):
        def stat(path, *args, **kwargs):
            raise OSError(code, os.strerror(code), path)

        return stat

    monkeypatch.setattr(os, "stat", refuse(errno.EACCES))
    assert path_problem("/secret/build") == (
        "permission denied (a directory on it cannot be searched by this user); check the permissions of "
        "each directory on it (ls -ld), or pass a path this user can read"
    )
    monkeypatch.setattr(os, "stat", refuse(errno.EIO))
    assert path_problem("/disk/build") == "cannot be looked up: Input/output error"
    monkeypatch.undo()
    assert path_problem("nowhere/at/all") is None  # not there: the command says what it expected
    assert path_problem("a\0b") == "contains a NUL character; pass the path without it"


def test_a_long_path_is_shown_shortened():
    assert clipped("short/path") == "short/path"
    text = clipped("x" * 1000 + "END")
    assert len(text) <= 200 and text.endswith("xEND (1003 characters)") and "…" in text
    assert clipped(LONG) == "a" * 133 + "…" + "a" * 33 + " (5000 characters)"


def test_the_api_refuses_a_long_build_path_clearly():
    with pytest.raises(TilescopeError) as e:
        ts.CompiledProgram.from_dir(LONG)
    assert str(e.value).startswith(f"build directory {clipped(LONG)}: too long for the file system")
    assert "too long for the file system" in str(e.value)
    result = ts.replay_compiled(LONG)
    assert not result.passed and "too long for the file system" in result.error


def test_every_path_argument_of_the_command_is_checked():
    """A string argument is either a path (checked by ``PathArg``) or one of these, which are not."""
    not_paths = {"--kernel", "--stage", "--role", "--tensor", "--kernel-filter", "--platform", "--log-level",
                 "--dump-tensor", "--print-intermediates", "--grid", "command", "--good", "--bad", "--ray-address"}  # fmt: skip
    unchecked = []

    def walk(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
                continue
            if action.nargs == 0 or action.choices is not None or isinstance(action.type, PathArg):
                continue
            if action.type not in (None, str):
                continue
            name = action.option_strings[-1] if action.option_strings else action.metavar or action.dest
            if name not in not_paths:
                unchecked.append(f"{where}: {name}")

    walk(build_parser(), "tilescope")
    assert unchecked == []


@pytest.mark.parametrize("command", [["replay", ""], ["builds", ""], ["triage", ""], ["dump", ""]])
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(command, capsys):
    from tilescope.cli import main as cli

    with pytest.raises(SystemExit) as e:
        cli(command)
    assert e.value.code == 2
    assert "an empty path; name a directory (`.` for this one)" in capsys.readouterr().err
