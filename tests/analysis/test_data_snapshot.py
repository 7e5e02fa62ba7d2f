"""Data snapshots (``analysis/data.py``) are whole or absent: a full disk (torch.save raises a
RuntimeError, not an OSError, when it runs out of space) and a save killed halfway leave nothing a
reader takes for a snapshot."""

import errno
import os
import subprocess
import sys

import pytest
import torch

from tilescope.analysis.data import DataError, load_snapshot, save_snapshot
from tilescope.build.manifest import ArgSpec
from tilescope.build.paths import saved_data
from tilescope.ir import dtypes as dt
from tilescope.ir.types import Direction

ARGS = [
    ArgSpec("x", Direction.IN, (4, 8), dt.f32),
    ArgSpec("w", Direction.IN, (8,), dt.f32),
    ArgSpec("y", Direction.OUT, (4, 8), dt.f32),
]
INPUTS = {"x": torch.ones(4, 8), "w": torch.ones(8)}
GOLDEN = {"y": torch.full((4, 8), 2.0)}
FULL = (
    "cannot save the data snapshot into {data}: no space left on its device; nothing was kept. "
    "To keep it, free space there and run again with --save-data"
)


def dead_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def full_on_second_file(monkeypatch, error):
    """torch.save writes the first file, then fails as ``error`` does (a half snapshot, if kept)."""
    real_save, calls = torch.save, []

    def save(value, f, *args, **kwargs):
        calls.append(f)
        if len(calls) == 2:
            raise error
        return real_save(value, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    return calls


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598: No space left on device"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
    ids=["torch-runtime-error", "oserror"],
)
def test_a_full_disk_is_a_clear_error_and_leaves_no_half_snapshot(tmp_path, monkeypatch, error):
    data = tmp_path / "data"
    calls = full_on_second_file(monkeypatch, error)
    with pytest.raises(DataError) as e:
        save_snapshot(data, ARGS, INPUTS, GOLDEN, {"rtol": 1e-5, "atol": 1e-5})
    assert str(e.value) == FULL.format(data=data)
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no torch traceback behind it
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []  # neither the snapshot nor its temporary directory
    assert saved_data(tmp_path) == []


def test_torchs_own_message_on_a_full_disk_is_told_by_the_free_space(tmp_path, monkeypatch):
    # NOTE: torch's writer says only "unexpected pos A vs B" when a write comes up short
    full_on_second_file(monkeypatch, RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"))
    real_statvfs = os.statvfs

    class Full:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return 0 if name == "f_bavail" else getattr(self.real, name)

    monkeypatch.setattr(os, "statvfs", lambda p: Full(real_statvfs(p)))
    with pytest.raises(DataError) as e:
        save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {})
    assert str(e.value) == FULL.format(data=tmp_path / "data")


def test_another_torch_write_failure_names_torchs_words(tmp_path, monkeypatch):
    full_on_second_file(monkeypatch, RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"))
    with pytest.raises(DataError) as e:
        save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {})
    assert str(e.value).startswith(
        f"cannot save the data snapshot into {tmp_path / 'data'}: torch.save could not write "
    )
    assert "(unexpected pos 704 vs 598)" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_torch_error_that_is_not_a_write_is_not_hidden(tmp_path, monkeypatch):
    full_on_second_file(monkeypatch, RuntimeError("something else went wrong"))
    with pytest.raises(RuntimeError, match="something else went wrong"):
        save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {})
    assert list(tmp_path.iterdir()) == []


def test_a_save_killed_halfway_is_no_snapshot_and_the_next_save_clears_it(tmp_path):
    # what a save killed inside the temporary directory leaves: its directory beside data/
    left = tmp_path / f".data.{dead_pid()}.1.0.tmp"
    (left / "in").mkdir(parents=True)
    torch.save(torch.ones(4, 8), left / "in" / "x.pt")
    assert saved_data(tmp_path) == []
    save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {"rtol": 1e-5, "atol": 1e-5})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # the dead save's directory went
    assert saved_data(tmp_path) == [("data", tmp_path / "data")]
    inputs, golden = load_snapshot(tmp_path / "data", ARGS)
    assert torch.equal(golden["y"], GOLDEN["y"]) and torch.equal(inputs["w"], INPUTS["w"])


def test_a_live_saves_temporary_directory_is_left_alone(tmp_path):
    busy = tmp_path / f".data.{os.getppid()}.1.0.tmp"  # a process that is alive
    busy.mkdir()
    save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {})
    assert busy.is_dir()


def test_a_half_snapshot_an_older_save_left_is_no_snapshot_and_is_not_saved_over(tmp_path):
    data = tmp_path / "data"
    (data / "in").mkdir(parents=True)
    torch.save(torch.ones(4, 8), data / "in" / "x.pt")
    (data / "in" / ".w.pt.123.456.0.tmp").write_bytes(b"PK")  # killed mid-write: no out/, no meta.json
    assert saved_data(tmp_path) == []
    with pytest.raises(DataError) as e:
        save_snapshot(data, ARGS, INPUTS, GOLDEN, {})
    assert str(e.value) == (
        f"{data} holds an incomplete data snapshot (no meta.json: a save that was interrupted, or files put "
        f"there by hand); it is kept as it is: remove it (rm -r {data}) and save again, or save into a new build"
    )
    assert sorted(p.name for p in (data / "in").iterdir()) == [".w.pt.123.456.0.tmp", "x.pt"]


def test_a_complete_snapshot_is_never_saved_over(tmp_path):
    save_snapshot(tmp_path / "data", ARGS, INPUTS, GOLDEN, {})
    with pytest.raises(DataError, match="already holds a data snapshot; it is kept as it is"):
        save_snapshot(tmp_path / "data", ARGS, INPUTS, {"y": torch.zeros(4, 8)}, {})
    assert torch.equal(load_snapshot(tmp_path / "data", ARGS)[1]["y"], GOLDEN["y"])
