"""Refs and objects read in this process, without starting git: for the warm paths.

A command that only needs what the cache already holds (``status`` on an imported pin, a memo
whose objects must still exist) should not pay for a git process, nor for importing GitPython's
command wrapper. Objects are read with GitPython's object database, ``gitdb`` (packs, loose
objects, alternates, all in Python); a ref from its loose file or ``packed-refs``.

Every function here answers only when it is sure, and None otherwise (a symbolic ref, another
ref storage, an object it cannot read): the caller then asks git (``objects.ObjectReader``),
which stays the authority. An object that exists never changes, so what is read here is what
git would give.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from patchtool.git.objects import CommitObject

_SHA = re.compile(r"[0-9a-f]{40}")
_REF_PART = re.compile(r"[A-Za-z0-9._+-]+")


def _database(git_dir: Path) -> Any:
    from gitdb.db import GitDB  # type: ignore[import-untyped]  # GitPython's object database

    return GitDB(str(git_dir / "objects"))


def _errors() -> tuple[type[BaseException], ...]:
    from gitdb.exc import ODBError  # type: ignore[import-untyped]

    return ODBError, OSError, ValueError, TypeError, zlib.error


def objects_exist(git_dir: Path, shas: Iterable[str]) -> bool:
    """Whether every object named (full hex SHA-1s) is in the repository at ``git_dir``: its packs,
    loose objects or alternates. False for anything that is not a full SHA-1."""
    wanted = list(shas)
    if not wanted:
        return True
    if not all(isinstance(s, str) and _SHA.fullmatch(s) for s in wanted):
        return False
    try:
        db = _database(git_dir)
        return all(db.has_object(bytes.fromhex(s)) for s in wanted)
    except _errors():
        return False


def ref(git_dir: Path, name: str) -> str | None:
    """The object a ref (``refs/...``, spelled in full) points at, read from its loose file, else
    from ``packed-refs``, as git reads them; None when it is not there or not plainly so."""
    parts = name.split("/")
    if parts[0] != "refs" or len(parts) < 2 or not all(_REF_PART.fullmatch(p) and p not in (".", "..")
                                                        for p in parts):
        return None
    try:
        text = (git_dir / name).read_bytes().decode("ascii").strip()
    except FileNotFoundError:
        return _packed(git_dir, name)
    except (OSError, UnicodeDecodeError):  # a directory of refs, another ref storage
        return None
    return text if _SHA.fullmatch(text) else None  # "ref: ..." (symbolic) is left to git


def _packed(git_dir: Path, name: str) -> str | None:
    try:
        lines = (git_dir / "packed-refs").read_bytes().decode("utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        sha, _, refname = line.partition(" ")
        if refname == name and _SHA.fullmatch(sha):
            return sha
    return None


def commit(git_dir: Path, rev: str) -> CommitObject | None:
    """The commit ``rev`` (a full SHA-1 or a full ref name) names, annotated tags peeled; None when
    it cannot be read here (git is then asked)."""
    sha = rev if _SHA.fullmatch(rev) else ref(git_dir, rev)
    if sha is None:
        return None
    try:
        db = _database(git_dir)
        for _ in range(8):  # a tag of a tag of ... a commit
            stream = db.stream(bytes.fromhex(sha))
            kind, data = stream.type, stream.read()
            if kind == b"commit":
                return CommitObject.parse(sha, data)
            if kind != b"tag" or not data.startswith(b"object "):
                return None
            sha = data[7:47].decode("ascii")
            if not _SHA.fullmatch(sha):
                return None
    except _errors():
        return None
    return None
