"""What git says changed between trees, read from its ``--raw -z`` output."""

from __future__ import annotations

import dataclasses

_ABSENT_BLOB = "0" * 40
_ABSENT_MODE = "000000"


@dataclasses.dataclass(frozen=True, slots=True)
class RawChange:
    """One file of a commit, as ``git log --raw -M`` names it (None where a side is absent)."""

    status: str  # "A", "M", "D", "R", "T" (or "C")
    old_path: str | None
    new_path: str | None
    old_mode: str | None
    new_mode: str | None
    old_blob: str | None
    new_blob: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class TreeChange:
    status: str  # "A" added, "D" deleted, "M" modified, "T" type changed
    path: str
    old_mode: str  # "000000" when added
    new_mode: str  # "000000" when deleted


def _raw_change(meta: str, old_path: str, new_path: str) -> RawChange:
    """A change from its ``:old_mode new_mode old_blob new_blob status`` field and its path(s)."""
    old_mode, new_mode, old_blob, new_blob, status = meta.lstrip(":").split()
    return RawChange(
        status=status[0],
        old_path=None if status[0] == "A" else old_path,
        new_path=None if status[0] == "D" else new_path,
        old_mode=None if old_mode == _ABSENT_MODE else old_mode,
        new_mode=None if new_mode == _ABSENT_MODE else new_mode,
        old_blob=None if old_blob == _ABSENT_BLOB else old_blob,
        new_blob=None if new_blob == _ABSENT_BLOB else new_blob,
    )


def parse_log(out: str) -> list[tuple[str, tuple[RawChange, ...]]]:
    """``git log -z --raw --format=%x01%H`` output: each commit with its files (renames found)."""
    commits: list[tuple[str, list[RawChange]]] = []
    tokens = out.split("\0")
    i = 0
    while i < len(tokens):
        token = tokens[i].strip("\n")
        i += 1
        if token.startswith("\x01"):
            commits.append((token[1:], []))
        elif token.startswith(":") and commits:
            paths = [tokens[i]]
            i += 1
            if token.split()[-1][0] in "RC":
                paths.append(tokens[i])
                i += 1
            commits[-1][1].append(_raw_change(token, paths[0], paths[-1]))
    return [(sha, tuple(files)) for sha, files in commits]


def parse_raw(out: str) -> tuple[RawChange, ...]:
    """``git diff-tree -r -z --raw --no-renames`` output."""
    fields = out.split("\0")
    return tuple(_raw_change(meta, path, path) for meta, path in zip(fields[0:-1:2], fields[1::2], strict=False))


def parse_tree_changes(out: bytes) -> list[TreeChange]:
    """``git diff-tree -r -z --no-renames`` output, as paths and modes."""
    fields = out.split(b"\0")
    changes = []
    for meta, path in zip(fields[0:-1:2], fields[1::2], strict=False):
        old_mode, new_mode, _, _, status = meta.decode().lstrip(":").split()
        changes.append(
            TreeChange(
                status=status[0], path=path.decode("utf-8", "surrogateescape"), old_mode=old_mode, new_mode=new_mode
            )
        )
    return changes


def parse_renames(out: str) -> dict[str, str]:
    """``git diff-tree -r -z -M --diff-filter=R`` output: old path -> new path."""
    fields = out.split("\0")
    found = {}
    i = 0
    while i + 2 < len(fields):
        if fields[i].startswith(":"):
            found[fields[i + 1]] = fields[i + 2]
            i += 3
        else:
            i += 1
    return found
