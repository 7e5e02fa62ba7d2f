"""build/paths.py: atomic replacement of the files in a build directory; an OSError and an
absurd path argument said in words."""

import errno
import os
import stat
import threading

import pytest

from tilescope.build import path_args, paths
from tilescope.build.paths import atomic_replace, atomic_write, atomic_write_bytes
from tilescope.errors import TilescopeError


def test_threads_writing_one_file_never_collide_and_leave_no_temporary_files(tmp_path):
    target = tmp_path / "deps.json"
    texts = [f"{i}:" + "x" * (1000 + i) for i in range(16)]
    errors = []

    def writer(text: str) -> None:
        try:
            for _ in range(50):
                atomic_write(target, text)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text() in texts  # one writer's whole text, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["deps.json"]


def test_a_replaced_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.txt", "text")
        atomic_write_bytes(tmp_path / "b.bin", b"\0\1")
    finally:
        os.umask(umask)
    for name in ("a.txt", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert (tmp_path / "b.bin").read_bytes() == b"\0\1"


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary_file(tmp_path):
    target = tmp_path / "trace.json"
    atomic_write(target, "old")

    def fails(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_replace(target, fails)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_replacing_a_file_swaps_in_a_new_one_and_an_open_reader_keeps_the_old(tmp_path, monkeypatch):
    target = tmp_path / "tensor_dump.bin"
    atomic_write_bytes(target, b"old" * 1000)  # no file there yet: a plain rename
    old_inode = target.stat().st_ino
    assert paths._renameat2() is not None  # Linux: an existing file is exchanged, never renamed over

    def no_rename_over(*args):
        raise AssertionError(f"os.replace{args}: an existing regular file must be exchanged")

    monkeypatch.setattr(paths.os, "replace", no_rename_over)
    with open(target, "rb") as reader:
        atomic_write_bytes(target, b"new")
        assert reader.read() == b"old" * 1000  # the old file, whole
    assert target.read_bytes() == b"new" and target.stat().st_ino != old_inode
    assert [p.name for p in tmp_path.iterdir()] == ["tensor_dump.bin"]


def test_a_directory_in_the_way_is_an_error_and_stays(tmp_path):
    target = tmp_path / "tensor_dump.json"
    (target / "inner").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        atomic_write(target, "{}")
    assert (target / "inner").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["tensor_dump.json"]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (errno.EROFS, "is on a read-only file system: work on a copy in a directory you can write"),
        (errno.ENOSPC, "no space left on the device holding"),
        (errno.EDQUOT, "no space left on the device holding"),
        (errno.EACCES, "permission denied on"),
        (errno.ENAMETOOLONG, "is a name too long for the file system"),
    ],
)
def test_an_os_error_is_the_condition_in_words_with_what_to_do(tmp_path, code, said):
    text = paths.os_problem(OSError(code, os.strerror(code), str(tmp_path / "dfx_outputs")))
    assert said in text and str(tmp_path) in text and "Errno" not in text


def test_a_file_where_a_directory_belongs_is_named_whatever_the_errno(tmp_path):
    (tmp_path / "dfx_outputs").write_text("")
    for e in (FileExistsError(errno.EEXIST, "File exists", str(tmp_path / "dfx_outputs")),
              NotADirectoryError(errno.ENOTDIR, "Not a directory", str(tmp_path / "dfx_outputs" / "triage"))):  # fmt: skip
        assert paths.os_problem(e) == (f"{tmp_path / 'dfx_outputs'} is a file where a directory belongs: move it away "
                                       "(tilescope keeps its outputs in a directory of that name)")  # fmt: skip
    with pytest.raises(TilescopeError, match=r"^triage cannot write .*dfx_outputs/triage: .* is a file where a directory"):
        paths.writable_dir(tmp_path / "dfx_outputs" / "triage", "triage")


def test_an_absurd_path_is_refused_at_once_and_never_echoed_whole():
    huge = "x" * 20_000_000
    said = path_args.path_problem(huge)
    assert said.startswith("too long for the file system: a name in it has 20000000 bytes") and len(said) < 400
    assert "a name in it has 300 bytes, the limit is 255" in path_args.path_problem("/tmp/" + "y" * 300)
    assert path_args.path_problem("/tmp/some/build") is None
    text = paths.os_problem(OSError(errno.ENAMETOOLONG, "File name too long", huge))
    assert len(text) < 400


def test_a_file_too_large_names_the_size_limit_and_what_to_do():
    import errno
    import resource

    from tilescope.build.paths import os_problem

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
    text = os_problem(OSError(errno.EFBIG, "File too large", "/x/out.txt"))
    assert text == (f"/x/out.txt would be larger than the file size limit of this process (ulimit -f: {limit}): "
                    "raise it (ulimit -f unlimited) and run again")  # fmt: skip
