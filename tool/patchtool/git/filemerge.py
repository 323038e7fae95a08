"""One file's 3-way merge as merge-ort makes it: the content merge of a rebase.

merge-ort merges contents with xdiff, diffing with histogram. ``git merge-file`` is told so
from git 2.42 (the fast path: one process); an older one diffs with myers only, and its
clean/conflict verdict can differ from merge-ort's, so there the three sides become one-file
commits (one ``git fast-import``, which leaves no ref) and ``git merge-tree
--write-tree`` merges them: merge-ort's own answer, its markers relabelled as merge-file's.
Those objects go to a throwaway object store that borrows the cache's (an alternate): the
cache is left as it was, as by merge-file.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path

from patchtool.errors import GitError
from patchtool.git.command import Runner
from patchtool.git.repo import Repo
from patchtool.git.stream import FIXED_IDENT, FileWrite, Ident, NewCommit, fork_stream

CONFLICT_STYLES = ("merge", "diff3", "zdiff3")  # git's merge.conflictStyle values

_HISTOGRAM = [True]  # False once git's merge-file says it has no --diff-algorithm (before 2.42)
_FILE = "file"  # the one path of the commits merge-tree merges
_REFS = "refs/patchtool/merge-file/"  # a ref per merge, which its own stream deletes again


def merge_file(
    repo: Repo, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], *, style: str = "merge"
) -> tuple[bytes, int]:
    """The merge of ``ours`` and ``theirs`` from ``base``: the result, with conflict markers where
    needed (``labels``: ours, base, theirs; ``style``: a ``merge.conflictStyle``; diff3 and zdiff3
    show the base between ``|||||||`` and ``=======``), and the number of conflicts. ``repo``
    holds the objects where merge-ort is asked."""
    if style not in CONFLICT_STYLES:
        raise ValueError(f"unknown conflict style {style!r}")
    if _HISTOGRAM[0]:
        found = _merge_file(ours, base, theirs, labels, style)
        if found is not None:
            return found
    return _merge_ort(repo, ours, base, theirs, labels, style)


def _merge_file(
    ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], style: str
) -> tuple[bytes, int] | None:
    """``git merge-file --diff-algorithm=histogram``, or None where this git does not know it."""
    with tempfile.TemporaryDirectory(prefix="patchtool-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data)
            names.append(str(Path(tmp) / name))
        options = [*([] if style == "merge" else [f"--{style}"]), *(f"-L{label}" for label in labels)]
        res = Runner().run("merge-file", "-p", "--diff-algorithm=histogram", *options, args=names, check=False)
    if res.returncode == 129:  # usage: no --diff-algorithm in this git
        _HISTOGRAM[0] = False
        return None
    if res.returncode >= 128 or res.returncode < 0:
        raise GitError(f"git merge-file failed: {res.stderr.strip()}")
    return res.stdout, res.returncode


def _merge_ort(
    repo: Repo, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], style: str
) -> tuple[bytes, int]:
    """``git merge-tree --write-tree`` of two one-file commits on a third: merge-ort's answer."""
    ident = Ident(*FIXED_IDENT, 0)

    def commit(data: bytes) -> NewCommit:
        return NewCommit(message="", author=ident, committer=ident, files=(FileWrite(_FILE, "100644", None, data),))

    with tempfile.TemporaryDirectory(prefix="patchtool-merge-ort-") as tmp:
        # the objects go to a throwaway store beside the cache's (which stays as it was), so the merge writes nothing
        objects = Path(tmp) / "objects"
        (objects / "pack").mkdir(parents=True)
        env = {"GIT_OBJECT_DIRECTORY": str(objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo.git_dir / "objects")}
        marks = Path(tmp) / "marks"
        stream = fork_stream(commit(base), [commit(ours), commit(theirs)], f"{_REFS}{uuid.uuid4().hex}")
        res = repo.git(
            "fast-import",
            "--quiet",
            "--date-format=raw",
            "--done",
            f"--export-marks={marks}",
            input=b"".join(stream),
            env=env,
            check=False,
        )
        if res.returncode:
            raise GitError(f"git fast-import failed: {res.stderr.strip()}")
        found = dict(line.split() for line in marks.read_text().splitlines() if line)
        base_sha, ours_sha, theirs_sha = found[":1"], found[":2"], found[":3"]
        config = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "merge.conflictStyle", "GIT_CONFIG_VALUE_0": style}
        res = repo.git("merge-tree", "--write-tree", args=[ours_sha, theirs_sha], env={**env, **config}, check=False)
        if res.returncode not in (0, 1):
            raise GitError(f"git merge-tree failed: {res.stderr.strip()}")
        tree = res.stdout.decode().split("\n", 1)[0].strip()
        shown = repo.git("cat-file", "-p", args=[f"{tree}:{_FILE}"], env=env, check=False)
        if shown.returncode:
            raise GitError(f"git merge-tree left no {_FILE} in {tree}: {shown.stderr.strip()}")
        data = shown.stdout
    if res.returncode == 0:
        return data, 0
    return _relabelled(data, (ours_sha, base_sha, theirs_sha), labels)


_MARKER = re.compile(rb"^(<{7}|\|{7}|>{7}) (\S+)$")


def _relabelled(data: bytes, shas: tuple[str, str, str], labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """merge-tree's markers (labelled by commit: ours and theirs in full, the base abbreviated)
    with merge-file's labels, and the number of conflicts."""
    lines = data.split(b"\n")
    count = 0
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if m is None:
            continue
        kind, name = m.group(1), m.group(2).decode()
        side = {b"<<<<<<<": 0, b"|||||||": 1, b">>>>>>>": 2}[kind]
        if name == shas[side] or (side == 1 and len(name) >= 4 and shas[1].startswith(name)):
            lines[i] = kind + b" " + labels[side].encode()
            count += side == 0
    return b"\n".join(lines), count
