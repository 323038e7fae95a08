"""One patch, one tree, two appliers: patchtool's in-memory apply (``textapply``) and real
``git apply --cached`` in a temporary repository. Each gives a verdict and, where it accepts, the
tree it leaves (path -> (mode, bytes)); ``check`` asserts they agree.

patchtool may refuse what git accepts only for its own policy (a patch changes regular text files
only: no links, gitlinks or binary data); anything else it refuses, git must refuse too.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from helpers import git
from patchtool import errors
from patchtool import git as gitmod
from patchtool.diff import model
from patchtool.diff.patchfile import PatchFile
from patchtool.edit import import_
from patchtool.git import treemerge as merge
from patchtool.rebase import textapply

Tree = dict[str, tuple[str, bytes]]  # path -> (mode, content; a link's content is its target)
AUTHOR = "A U Thor <author@example.org>"
POLICY = ("a symbolic link", "a gitlink", "not a regular file", "binary", "something other than a regular file")


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    target: str


Entry = str | bytes | Link | tuple[str, str | bytes]  # text or bytes (100644), a link, or (mode, content)


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    tree: Tree | None  # None: refused
    message: str = ""


def make_repo(root: Path, files: Mapping[str, Entry]) -> str:
    """A repository at ``root`` whose one commit holds ``files``; its commit."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    write_files(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", "base")
    return git(root, "rev-parse", "HEAD").strip()


def write_files(root: Path, files: Mapping[str, Entry]) -> None:
    for path, entry in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(entry, Link):
            os.symlink(entry.target, target)
            continue
        mode, content = entry if isinstance(entry, tuple) else ("100644", entry)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(0o755 if mode == "100755" else 0o644)


def _index(root: Path) -> Tree:
    out = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=root, capture_output=True, check=True).stdout
    tree: Tree = {}
    for record in out.split(b"\0"):
        if record:
            info, path = record.split(b"\t", 1)
            mode, sha, _ = info.split(b" ")
            blob = subprocess.run(
                ["git", "cat-file", "blob", sha.decode()], cwd=root, capture_output=True, check=True
            ).stdout
            tree[path.decode()] = (mode.decode(), blob)
    return tree


def git_apply(root: Path, patch: str, *, reverse: bool = False) -> Verdict:
    """``git apply --cached`` of ``patch`` in ``root`` (its index reset to HEAD before and after)."""
    (root.parent / "p.diff").write_text(patch, encoding="utf-8", newline="")
    git(root, "reset", "-q")
    res = subprocess.run(
        ["git", "apply", "--cached", *(["-R"] if reverse else []), str(root.parent / "p.diff")],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )
    tree = _index(root) if res.returncode == 0 else None
    git(root, "reset", "-q")
    return Verdict(tree, res.stderr.strip())


def to_model(patch: str, *, exists: Callable[[str], bool] | None = None) -> model.Diff:
    """``patch`` as patchtool reads it: a git diff from its first 'diff --git' line, a plain diff
    as ``import`` reads one given as FILE without -p (``import_.read_sources``); its refusal as
    the DiffError it stands for."""
    if "diff --git " in patch:
        return model.parse(patch[patch.find("diff --git ") :])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plain.diff"
        path.write_text(patch, encoding="utf-8", errors="surrogateescape", newline="")
        try:
            (incoming,) = import_.read_sources([path], None, import_.Authorship(author=AUTHOR), exists=exists)
            return PatchFile.parse(incoming.text, name=str(path)).model
        except (errors.InvalidInput, errors.UsageError) as exc:
            raise model.DiffError(exc.message) from None


def patchtool_apply(root: Path, commit: str, patch: str, *, reverse: bool = False) -> Verdict:
    """patchtool's in-memory apply of ``patch`` onto ``commit``: the parse, then ``apply_or_refuse``."""
    start = _index_at(root, commit)
    try:
        diff = to_model(patch, exists=lambda path: path in start)
    except model.DiffError as exc:
        return Verdict(None, f"parse: {exc.message}")
    repo = gitmod.Repo(root / ".git")
    with repo.reader() as reader:
        ws = merge.Workspace(repo, reader, commit, (), lambda path: None)
        applied = textapply.apply_or_refuse(ws, diff, reverse=reverse)
    if isinstance(applied, textapply.Refusal):
        return Verdict(None, applied.message)
    tree = dict(start)
    for path, text in applied.texts.items():
        if text is None:
            tree.pop(path, None)
        else:
            tree[path] = (applied.modes[path], text.encode("utf-8", "surrogateescape"))
    return Verdict(tree)


def _index_at(root: Path, commit: str) -> Tree:
    git(root, "reset", "-q", commit)
    return _index(root)


def check(root: Path, commit: str, patch: str, *, reverse: bool = False) -> tuple[Verdict, Verdict]:
    """Both verdicts on ``patch``, asserted to agree: the same tree where both accept; a refusal
    by git is one by patchtool; patchtool refuses alone only for its policy."""
    ours = patchtool_apply(root, commit, patch, reverse=reverse)
    theirs = git_apply(root, patch, reverse=reverse)
    if theirs.tree is None:
        assert ours.tree is None, f"git refused ({theirs.message}) but patchtool applied it:\n{patch}"
    elif ours.tree is None:
        assert any(p in ours.message for p in POLICY), f"patchtool refused ({ours.message}) what git applies:\n{patch}"
    else:
        assert ours.tree == theirs.tree, f"the trees differ:\n{patch}"
    return ours, theirs
