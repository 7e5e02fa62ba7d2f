"""The git side of ``tilescope bisect``: the revisions between a good and a bad commit, a commit's
description, and temporary worktrees that leave the user's checkout as it was.

Invariants:
- Nothing here changes the user's working tree, index, HEAD or branches: a revision is checked
  out in a detached worktree under the bisect's own folder, removed (and pruned) after.
- Every git failure is a ``BisectError`` naming the command and git's own first line.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tilescope.errors import TilescopeError


class BisectError(TilescopeError):
    """A bisect that cannot start or go on: not a repository, an unknown revision, a range with
    nothing in it, a good revision that fails or a bad one that passes."""


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s stdout (stripped); BisectError with git's message when it fails."""
    try:
        p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise BisectError(f"git cannot run: {e}: install git") from None
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no message"])[0]
        raise BisectError(f"git {' '.join(args)} failed in {repo}: {why}")
    return p.stdout.strip()


def top_level(path: Path) -> Path:
    """The repository ``path`` lies in (its top level)."""
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except BisectError:
        raise BisectError(f"{path} is not inside a git repository: bisect runs the command at commits of the "
                          "repository you run it in (or --tool-repo DIR)") from None  # fmt: skip


def commit(repo: Path, rev: str, what: str) -> str:
    """The full hash of ``rev``; BisectError naming ``what`` (``--good``) when it is no commit."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except BisectError:
        raise BisectError(f"{what} {rev!r} is not a commit of {repo}") from None


def between(repo: Path, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` (included), oldest first, along the ancestry path."""
    if git(repo, "merge-base", good, bad) != good:
        raise BisectError(f"--good {good[:10]} is not an ancestor of --bad {bad[:10]}: give a good commit older than the bad one")
    out = git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}").split()
    if not out:
        raise BisectError("--good and --bad are the same commit: there is nothing to bisect")
    return out


@dataclass(frozen=True)
class Commit:
    """A commit as the report shows it."""

    hash: str
    subject: str
    author: str
    date: str
    files: list[str]


def describe(repo: Path, rev: str) -> Commit:
    """``rev``'s hash, subject, author, date and the files it changed."""
    h, subject, author, date = git(repo, "show", "-s", "--format=%H%n%s%n%an <%ae>%n%aI", rev).split("\n", 3)
    files = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", rev).split()
    return Commit(h, subject, author, date, files)


def add_worktree(repo: Path, rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where``."""
    git(repo, "worktree", "add", "--detach", "--force", str(where), rev)
    return where


def remove_worktree(repo: Path, where: Path) -> None:
    """Remove the worktree at ``where`` (and git's record of it); quietly when it is gone."""
    try:
        git(repo, "worktree", "remove", "--force", str(where))
    except BisectError:
        pass
    try:
        git(repo, "worktree", "prune")
    except BisectError:
        pass
