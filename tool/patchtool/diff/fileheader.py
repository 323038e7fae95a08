"""What a file's extended header says besides its names: whether it copies, renames, creates or
deletes, and its modes, read as git's ``parse_git_diff_header`` (apply.c) reads them.

The names themselves come from ``gitpaths`` through the model; a copy and a rename look the same
there (two names), and only the header tells that a copy keeps its source.
"""

from __future__ import annotations

import dataclasses

from patchtool.diff.model import Diff, FileDiff


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileHeader:
    copy: bool = False
    rename: bool = False
    new: bool = False
    deleted: bool = False
    old_mode: str | None = None  # None where the header names none: the file's own mode stays
    new_mode: str | None = None
    inconsistent: str | None = None  # git's refusal of a header that says two of the four at once


def read(diff: Diff, fd: FileDiff) -> FileHeader:
    """The extended header of ``fd`` in ``diff``."""
    flags: dict[str, bool] = {}
    old_mode = new_mode = inconsistent = None
    first: int | None = None
    for n, line in enumerate(diff.file_header(fd).splitlines(), fd.at):
        if line.startswith("--- "):
            break
        flag = _flag(line)
        if flag is not None:
            flags[flag] = True
            if len(flags) > 1 and inconsistent is None:
                inconsistent = f"inconsistent header lines {first} and {n}"
            first = first or n
        if line.startswith(("old mode ", "deleted file mode ")):
            old_mode = line.rsplit(" ", 1)[1]
        elif line.startswith(("new mode ", "new file mode ")):
            new_mode = line.rsplit(" ", 1)[1]
        elif line.startswith("index ") and len(fields := line.split()) > 2:
            old_mode = fields[2]  # git reads only the old mode there; the new one is the file's
    return FileHeader(copy="copy" in flags, rename="rename" in flags,
                      new="new" in flags or fd.old_path is None, deleted="deleted" in flags or fd.new_path is None,
                      old_mode=old_mode, new_mode=new_mode, inconsistent=inconsistent)


def _flag(line: str) -> str | None:
    if line.startswith(("copy from ", "copy to ")):
        return "copy"
    if line.startswith(("rename from ", "rename to ", "rename old ", "rename new ")):
        return "rename"
    if line.startswith("new file mode "):
        return "new"
    if line.startswith("deleted file mode "):
        return "deleted"
    return None
