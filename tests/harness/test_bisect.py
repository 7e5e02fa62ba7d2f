"""tilescope bisect over a synthetic repository of ten commits: the commit that breaks a model
named with its culprit line, a precision drift found by --metric, a k-ary search giving the same
answer in fewer rounds, revisions that cannot build skipped, and the user's checkout untouched."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tilescope.cli import main

MODEL = '''
import sys

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, run_jit

SCALE = {scale}
DRIFT = {drift}


@ts.kernel
def scaled(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * SCALE + DRIFT)


@ts.jit
def twice(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]):
    for r in ts.range(0, 16, 8):
        scaled(x[r : r + 8, :], y[r : r + 8, :])


def golden(t):
    t["y"][:] = t["x"] * 2.0


if __name__ == "__main__":
    specs = [TensorSpec("x", [16, 16], torch.float32), TensorSpec("y", [16, 16], torch.float32, is_output=True)]
    r = run_jit(twice, specs, golden_fn=golden, save_data=True, rtol=1e-1, atol=1e-1)
    sys.exit(0 if r.passed else 1)
'''
# the model at each commit: (scale, drift); commit 6 breaks it, the drift passes 1e-3 at commit 4
HISTORY = [(2.0, 0.0), (2.0, 1e-6), (2.0, 1e-5), (2.0, 1e-4), (2.0, 2e-3), (2.0, 3e-3), (2.5, 3e-3), (2.5, 3e-3),
           (2.5, 4e-3), (2.5, 5e-3)]  # fmt: skip


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A repository of ten commits of models/model.py (and a README that changes too); the hashes."""
    repo = tmp_path_factory.mktemp("kernels")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "Kernel Dev")
    (repo / "models").mkdir()
    hashes = []
    for i, (scale, drift) in enumerate(HISTORY):
        (repo / "models" / "model.py").write_text(MODEL.format(scale=scale, drift=drift))
        (repo / "README.md").write_text(f"revision {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"step {i}: scale {scale}, drift {drift}")
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    (repo / "notes.txt").write_text("an untracked file of the user's\n")
    return repo, hashes


def _bisect(repo, monkeypatch, capsys, *flags):
    monkeypatch.chdir(repo / "models")
    before = (_git(repo, "status", "--porcelain"), _git(repo, "rev-parse", "HEAD"), _git(repo, "branch", "--list"))
    rc = main(["bisect", *flags, "--json", "--work", str(repo.parent / f"work{len(flags)}_{flags[-1]}"), "--",
               sys.executable, "model.py"])  # fmt: skip
    out = capsys.readouterr()
    after = (_git(repo, "status", "--porcelain"), _git(repo, "rev-parse", "HEAD"), _git(repo, "branch", "--list"))
    assert after == before, "the user's checkout changed"
    assert _git(repo, "worktree", "list").count("\n") == 0, "a worktree was left behind"
    return rc, json.loads(out.out) if out.out.strip().startswith("{") else out.err


@pytest.mark.slow  # g++ builds at each tested revision and a triage
def test_the_commit_that_broke_the_model_is_named_with_its_culprit_line(history, monkeypatch, capsys):
    repo, hashes = history
    rc, r = _bisect(repo, monkeypatch, capsys, "--good", hashes[0], "--bad", "main")
    assert rc == 0, r
    first = r["first_bad"]
    assert first["hash"] == hashes[6] and first["subject"] == "step 6: scale 2.5, drift 0.003"
    assert first["author"] == "Kernel Dev <dev@example.com>" and first["kernel_files"] == ["models/model.py"]
    line = MODEL.splitlines().index(next(x for x in MODEL.splitlines() if "* SCALE + DRIFT" in x)) + 1
    c = r["culprit"]
    assert c["ran"] and (c["category"], c["kernel"], c["line"]) == ("algorithm", "scaled", f"models/model.py:{line}"), c
    assert r["rounds"] <= 6 and {t["state"] for t in r["tested"]} <= {"good", "bad"}


@pytest.mark.slow
def test_a_precision_drift_is_found_by_its_metric_and_a_k_ary_search_agrees_in_fewer_rounds(history, monkeypatch,
                                                                                            capsys):  # fmt: skip
    repo, hashes = history
    flags = ["--good", hashes[0], "--bad", hashes[5], "--metric", "max_abs_err", "--threshold", "1e-3"]
    rc, binary = _bisect(repo, monkeypatch, capsys, *flags)
    assert rc == 0 and binary["first_bad"]["hash"] == hashes[4], binary
    assert any(t["why"].startswith("max_abs_err 0.002 > 0.001") for t in binary["tested"]), binary["tested"]
    rc, kary = _bisect(repo, monkeypatch, capsys, *flags, "-j", "4")
    assert rc == 0 and kary["first_bad"]["hash"] == hashes[4]
    assert kary["rounds"] < binary["rounds"], (kary["rounds"], binary["rounds"])


@pytest.mark.slow
@pytest.mark.serial  # one local Ray on the machine at a time
def test_the_k_ary_search_on_a_local_ray_cluster_names_the_same_commit_and_culprit(history, monkeypatch, capsys):
    repo, hashes = history
    rc, r = _bisect(repo, monkeypatch, capsys, "--good", hashes[0], "--bad", "main", "--engine", "ray", "-j", "3")
    assert rc == 0, r
    assert r["engine"] == "ray" and r["ray_nodes"] == ["127.0.0.1"]  # a local Ray on the loopback
    assert r["first_bad"]["hash"] == hashes[6]
    line = MODEL.splitlines().index(next(x for x in MODEL.splitlines() if "* SCALE + DRIFT" in x)) + 1
    assert (r["culprit"]["kernel"], r["culprit"]["line"]) == ("scaled", f"models/model.py:{line}"), r["culprit"]


def _scales(repo, scales) -> list[str]:
    """A repository whose commits set the model's scale to each of ``scales`` in turn; the hashes."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "d@example.com")
    _git(repo, "config", "user.name", "D")
    hashes = []
    for i, scale in enumerate(scales):
        (repo / "model.py").write_text(MODEL.format(scale=2.0, drift=0.0).replace("* SCALE", f"* {scale}"))
        (repo / "VERSION").write_text(f"{i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"scale {scale}")
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    return hashes


@pytest.mark.slow
def test_a_revision_that_cannot_build_is_skipped_with_its_reason(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "r"
    hashes = _scales(repo, ["2.0", "2.0", "2.0", "undefined_name", "2.0", "2.5", "2.5"])
    monkeypatch.chdir(repo)
    rc = main(["bisect", "--good", hashes[0], "--bad", hashes[6], "--json", "--work", str(tmp_path / "work"), "--",
               sys.executable, "model.py"])  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    assert rc == 0 and r["first_bad"]["hash"] == hashes[5], r["tested"]
    skipped = [t for t in r["tested"] if t["state"] == "skip"]
    assert [t["rev"] for t in skipped] == [hashes[3]]
    assert "the program could not be built at this revision" in skipped[0]["why"]
    assert "undefined_name" in skipped[0]["why"]


@pytest.mark.slow
def test_a_skipped_revision_next_to_the_break_leaves_both_as_candidates(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "r"
    hashes = _scales(repo, ["2.0", "2.0", "undefined_name", "2.5", "2.5"])
    monkeypatch.chdir(repo)
    rc = main(["bisect", "--good", hashes[0], "--bad", hashes[4], "--work", str(tmp_path / "work"), "--",
               sys.executable, "model.py"])  # fmt: skip
    assert rc == 1
    out = capsys.readouterr().out
    assert out.startswith(f"the first bad commit is one of {hashes[2][:10]}, {hashes[3][:10]}: "), out


def test_a_range_that_cannot_be_bisected_is_an_error_naming_it(history, monkeypatch, capsys):
    repo, hashes = history
    monkeypatch.chdir(repo)
    assert main(["bisect", "--good", "nope", "--bad", "main", "--", "true"]) == 2
    assert "--good 'nope' is not a commit of" in capsys.readouterr().err
    assert main(["bisect", "--good", hashes[5], "--bad", hashes[2], "--", "true"]) == 2
    assert "is not an ancestor of --bad" in capsys.readouterr().err
    assert main(["bisect", "--good", hashes[0], "--bad", hashes[3], "--", "true"]) == 2
    assert "--bad " + hashes[3] + " is not bad" in capsys.readouterr().err
    assert main(["bisect", "--good", hashes[0], "--bad", hashes[3], "--metric", "max_abs_err", "--", "true"]) == 2
    assert "--metric and --threshold go together" in capsys.readouterr().err
    monkeypatch.chdir(repo.parent)
    assert main(["bisect", "--good", "a", "--bad", "b", "--", "true"]) == 2
    assert "is not inside a git repository" in capsys.readouterr().err
    assert main(["bisect", "--good", hashes[0], "--bad", hashes[3], "--case-cpus", "2", "--", "true"]) == 2
    assert "--case-cpus is for --engine ray" in capsys.readouterr().err
    monkeypatch.chdir(repo)
    assert main(["bisect", "--good", hashes[0], "--bad", hashes[3], "--engine", "ray", "--ray-address", "auto", "--",
                 "true"]) == 2  # fmt: skip
    assert "--ray-address: give --work, a folder every node of the cluster sees" in capsys.readouterr().err


def test_a_revision_the_engine_could_not_run_stops_the_bisect_instead_of_counting_as_bad(history, monkeypatch,
                                                                                        capsys):  # fmt: skip
    from tilescope.harness.sweep import case_run

    repo, hashes = history
    real = case_run.run_in_group

    def no_such_folder(argv, log, env, timeout, cwd):  # the worktree is not there on the node that runs it
        return real(argv, log, env, timeout, cwd + "-elsewhere")

    monkeypatch.setattr(case_run, "run_in_group", no_such_folder)
    monkeypatch.chdir(repo)
    assert main(["bisect", "--good", hashes[0], "--bad", hashes[3], "--work", str(repo.parent / "w_broken"), "--",
                 "true"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "could not be run: the command could not start: [Errno 2] No such file or directory" in err, err
    assert "nothing was concluded from it" in err
    assert _git(repo, "worktree", "list").count("\n") == 0
