"""One file's 3-way merge as merge-ort makes it: the content merges of a rebase.

merge-ort merges contents with xdiff, diffing with histogram. ``git merge-file`` is told so
from git 2.42 (the fast path: one process); an older one diffs with myers only, and its
clean/conflict verdict can differ from merge-ort's, so there the three sides become one-file
commits and ``git merge-tree --write-tree`` merges them: merge-ort's own answer, its markers
relabelled as merge-file's. Those commits are written by gitdb, in this process, as one pack
per merge in a throwaway object store that holds every object the merge reads (no alternate:
git sees nothing of the cache's objects), one store for all the merges of a ``FileMerger``:
merge-tree is the one git process a merge costs, and the cache is left as it was, as by
merge-file.
"""

from __future__ import annotations

import hashlib
import io
import re
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Self

from patchtool.errors import GitError
from patchtool.git.command import Runner, config_env
from patchtool.git.objects import tree_entries
from patchtool.git.stream import FIXED_IDENT, Ident

if TYPE_CHECKING:
    from patchtool.git.repo import Repo

CONFLICT_STYLES = ("merge", "diff3", "zdiff3")  # git's merge.conflictStyle values

_HISTOGRAM = [True]  # False once git's merge-file says it has no --diff-algorithm (before 2.42)
_FILE = "file"  # the one path of the commits merge-tree merges
_IDENT = Ident(*FIXED_IDENT, 0).line().encode()


class FileMerger:
    """The content merges of one replay, git run on ``repo`` (the cache) with its objects in a
    throwaway store; ``close`` removes the store, if a merge needed one."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._packed: dict[str, tuple[str, bytes]] = {}  # sha -> (type, content) of what the store's packs hold
        # merge-tree labels its markers with the sides' commit ids, which ``_relabelled`` finds and
        # replaces: a secret in each commit keeps a file's content from predicting (and so holding)
        # a line that looks like one of them
        self._nonce = secrets.token_hex(16).encode()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._packed.clear()

    def merge(
        self, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], *, style: str = "merge"
    ) -> tuple[bytes, int]:
        """The merge of ``ours`` and ``theirs`` from ``base``: the result, with conflict markers
        where needed (``labels``: ours, base, theirs; ``style``: a ``merge.conflictStyle``; diff3
        and zdiff3 show the base between ``|||||||`` and ``=======``), and the number of conflicts."""
        if style not in CONFLICT_STYLES:
            raise ValueError(f"unknown conflict style {style!r}")
        if _HISTOGRAM[0]:
            found = _merge_file(ours, base, theirs, labels, style)
            if found is not None:
                return found
        return self._merge_ort(ours, base, theirs, labels, style)

    def _objects(self) -> Path:
        """The throwaway store's object directory, made on the first call."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="patchtool-merge-ort-")
            (Path(self._tmp.name) / "objects" / "pack").mkdir(parents=True)
        return Path(self._tmp.name) / "objects"

    def _sides(self, ours: bytes, base: bytes, theirs: bytes) -> tuple[str, str, str]:
        """(ours, base, theirs) as one-file commits (ours and theirs on base), written as one pack."""
        from git.objects.fun import tree_to_stream
        from gitdb import OStream  # type: ignore[import-untyped]
        from gitdb.pack import PackEntity  # type: ignore[import-untyped]

        new: dict[str, tuple[str, bytes]] = {}

        def put(kind: str, data: bytes) -> str:
            name = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)), usedforsecurity=False)  # git's object name
            name.update(data)
            sha = name.hexdigest()
            if sha not in self._packed:
                new[sha] = (kind, data)
            return sha

        def commit(data: bytes, parent: str | None) -> str:
            tree = io.BytesIO()
            tree_to_stream([(bytes.fromhex(put("blob", data)), 0o100644, _FILE)], tree.write)
            head = b"tree %s\n" % put("tree", tree.getvalue()).encode()
            if parent is not None:
                head += b"parent %s\n" % parent.encode()
            return put("commit", head + b"author " + _IDENT + b"\ncommitter " + _IDENT + b"\n\n" + self._nonce + b"\n")

        base_sha = commit(base, None)
        shas = commit(ours, base_sha), base_sha, commit(theirs, base_sha)
        if new:
            objects = [OStream(bytes.fromhex(sha), k.encode(), len(d), io.BytesIO(d)) for sha, (k, d) in new.items()]
            PackEntity.create(objects, str(self._objects() / "pack"), object_count=len(objects))
            self._packed.update(new)
        return shas

    def _read(self, sha: str, kind: str) -> bytes:
        """An object of the store: one merge-tree wrote (loose), or one of the packs (git writes
        no object that is there already)."""
        from gitdb import LooseObjectDB

        loose = LooseObjectDB(str(self._objects()))
        binsha = bytes.fromhex(sha)
        if loose.has_object(binsha):
            stream = loose.stream(binsha)
            found: tuple[str, bytes] | None = (stream.type.decode(), bytes(stream.read()))
        else:
            found = self._packed.get(sha)
        if found is None or found[0] != kind:
            raise GitError(f"git merge-tree left no {kind} {sha}")
        return found[1]

    def _merge_ort(
        self, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], style: str
    ) -> tuple[bytes, int]:
        """``git merge-tree --write-tree`` of two one-file commits on a third: merge-ort's answer."""
        shas = self._sides(ours, base, theirs)
        env = {"GIT_OBJECT_DIRECTORY": str(self._objects()), **config_env(("merge.conflictStyle", style))}
        res = self.repo.git("merge-tree", "--write-tree", args=[shas[0], shas[2]], env=env, check=False)
        if res.returncode not in (0, 1):
            raise GitError(f"git merge-tree failed: {res.stderr.strip()}")
        tree = res.stdout.decode().split("\n", 1)[0].strip()
        entry = tree_entries(tree, self._read(tree, "tree")).get(_FILE)
        if entry is None:
            raise GitError(f"git merge-tree left no {_FILE} in {tree}")
        data = self._read(entry[1], "blob")
        if res.returncode == 0:
            return data, 0
        merged, count = _relabelled(data, shas, labels)
        return merged, max(count, 1)  # merge-tree says it conflicts, whatever the markers look like


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


_MARKER = re.compile(rb"^(<{7}|\|{7}|>{7}) (\S+?)(\r?)$")  # a CRLF file's markers end in CR too


def _relabelled(data: bytes, shas: tuple[str, str, str], labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """merge-tree's markers (labelled by commit: ours and theirs in full, the base abbreviated)
    with merge-file's labels, and the number of conflicts. Only the markers of a conflict are
    relabelled: ``<<<<<<< ours`` opens one, ``||||||| base`` and ``>>>>>>> theirs`` count only
    inside it (a secret in each commit keeps content from naming them, ``FileMerger``)."""
    lines = data.split(b"\n")
    count, inside = 0, False
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if m is None:
            continue
        kind, name = m.group(1), m.group(2).decode()
        side = {b"<<<<<<<": 0, b"|||||||": 1, b">>>>>>>": 2}[kind]
        if (side == 0) == inside:
            continue
        if name == shas[side] or (side == 1 and len(name) >= 7 and shas[1].startswith(name)):
            lines[i] = kind + b" " + labels[side].encode() + m.group(3)
            count += side == 0
            inside = side != 2
    return b"\n".join(lines), count
