"""The commit-msg hook (`ci/commit_subject.py`) holds a subject to 72 characters, run by real git."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from helpers import git

HOOK = Path(__file__).resolve().parent.parent / "ci" / "commit_subject.py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    hook = tmp_path / ".git" / "hooks" / "commit-msg"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HOOK}" "$1"\n')
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "a.txt").write_text("a\n")
    git(tmp_path, "add", "a.txt")
    return tmp_path


def test_a_subject_of_72_characters_is_taken(repo: Path) -> None:
    subject = "x" * 72
    git(repo, "commit", "-q", "-m", subject, "-m", "a body of any length " * 10)
    assert git(repo, "log", "-1", "--format=%s").strip() == subject


def test_a_subject_of_73_characters_is_refused_and_nothing_is_committed(repo: Path) -> None:
    with pytest.raises(RuntimeError) as failure:
        git(repo, "commit", "-q", "-m", "y" * 73)
    assert "the subject is 73 characters, over 72" in str(failure.value)
    assert "say what in the subject and why in the body" in str(failure.value)
    assert git(repo, "rev-list", "--all").strip() == ""


def test_git_comment_lines_are_not_the_subject(repo: Path) -> None:
    message = repo / "msg"
    message.write_text("# " + "z" * 100 + "\n\nshort subject\n")
    git(repo, "commit", "-q", "--cleanup=strip", "-F", str(message))
    assert git(repo, "log", "-1", "--format=%s").strip() == "short subject"
