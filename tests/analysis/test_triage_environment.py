"""Triage and localize on a machine that refuses them: a build they cannot write into (read only,
a file where ``dfx_outputs`` belongs, a full disk) and an absurd argument are said as what they
are, with what to do; never "a tilescope defect", never an argument echoed back whole."""

from __future__ import annotations

import errno
import shutil

import pytest
import torch
import triage_programs as tp

import tilescope as ts
from tilescope.agents.tools import TOOLS, answer
from tilescope.analysis.data import save_snapshot
from tilescope.analysis.localize.localize_command import internal_error, localize
from tilescope.build import paths
from tilescope.cli import main

HUGE = "x" * 20_000_000


def test_an_absurd_build_argument_is_refused_at_once_and_quoted_short():
    tool = next(t for t in TOOLS if t.name == "triage")
    for call in (lambda: ts.triage(HUGE), lambda: localize(HUGE)):
        with pytest.raises(ts.TilescopeError) as e:
            call()
        said = str(e.value)
        assert "too long for the file system" in said and "(20000000 characters)" in said and len(said) < 500
    ok, err = answer(tool, {"build_dir": HUGE})
    assert not ok and err["argument"] == "build_dir" and len(err["message"]) < 400
    assert "too long for the file system" in err["message"] and "defect" not in err["message"]


def test_an_os_error_inside_a_tool_is_the_machine_s_state_not_a_defect(tmp_path):
    said = internal_error(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "dfx_outputs")), "triage")
    assert said.startswith(f"triage stopped: {tmp_path / 'dfx_outputs'} is on a read-only file system")
    assert "defect" not in said
    long = internal_error(ValueError(HUGE), "triage")
    assert "tilescope defect" in long and len(long) < 600


@pytest.fixture(scope="module")
def masked_build(tmp_path_factory):
    """A correct program's build with its data saved (copied by each test that breaks it)."""
    root = tmp_path_factory.mktemp("masked")
    prog = tp.masked.compile(build_dir=str(root))
    x = torch.randn(tp.B, tp.C)
    save_snapshot(prog.work_dir / "data", list(prog.args), {"x": x, "y": torch.zeros(tp.B, tp.C)},
                  {"y": torch.where(x > 0, x, float("-inf"))}, {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    return prog.work_dir


def _copy(work, tmp_path):
    return shutil.copytree(work, tmp_path / work.name, ignore=shutil.ignore_patterns(".lock"))


@pytest.mark.slow
def test_a_file_where_dfx_outputs_belongs_is_named_with_what_to_do(masked_build, tmp_path, capsys):
    work = _copy(masked_build, tmp_path)
    shutil.rmtree(work / "dfx_outputs", ignore_errors=True)
    (work / "dfx_outputs").write_text("not a directory")
    for tool in ("triage", "localize"):
        assert main([tool, str(work)]) == 1
        err = capsys.readouterr().err
        assert err == (f"[ERROR] {tool} cannot write {work}/dfx_outputs/{tool}: {work}/dfx_outputs is a file where a "
                       "directory belongs: move it away (tilescope keeps its outputs in a directory of that name)\n")  # fmt: skip
    assert (work / "dfx_outputs").read_text() == "not a directory"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "said"),
    [(errno.EROFS, "is on a read-only file system: work on a copy"), (errno.ENOSPC, "no space left on the device")],
)
def test_a_build_triage_cannot_write_into_is_said_before_any_run(masked_build, tmp_path, monkeypatch, code, said):
    work = _copy(masked_build, tmp_path)

    def refused(path):
        raise OSError(code, "refused", None if code == errno.ENOSPC else str(path.parent))

    monkeypatch.setattr(paths, "_open_temp", refused)
    with pytest.raises(ts.TilescopeError) as e:
        ts.triage(work)
    text = str(e.value)
    assert text.startswith(f"triage cannot write {work}/dfx_outputs/triage: ") and said in text, text
    assert "defect" not in text and "Errno" not in text
    assert not any(s for s in (work / "dfx_outputs" / "triage").glob("*"))  # nothing ran


@pytest.mark.slow
def test_a_disk_that_fills_during_triage_is_said_as_such(masked_build, tmp_path, monkeypatch, capsys):
    work = _copy(masked_build, tmp_path)
    import tilescope.analysis.triage.triage_command as tc

    def full(obj, f, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(f))

    monkeypatch.setattr(tc.torch, "save", full)
    assert main(["triage", str(work)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"[ERROR] triage stopped: no space left on the device holding {work}/dfx_outputs/triage/"), err
    assert "free some space" in err and "defect" not in err
