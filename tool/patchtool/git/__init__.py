"""patchtool's git layer: every git command patchtool runs, and every stream git reads, is built
here and nowhere else.

It stands on GitPython: its command wrapper (``git.Git``) runs each command, isolated from the
user's configuration and inherited ``GIT_*`` variables, with ``GitCommandError`` mapped to
``GitError`` (``command``); its persistent ``cat-file`` reads objects (``objects``). No git object
leaves the layer: callers get SHAs, paths, bytes and the small dataclasses exported here.

- ``repo``: a repository by its git directory (the cache): refs, commits, trees, fast-import,
  worktrees, exports, temporary indexes;
- ``filemerge``: one file's 3-way merge as merge-ort makes it (``FileMerger``);
- ``treemerge``: a patch merged onto a tree being built in memory, file by file, as merge-ort
  would (``Workspace``, ``merge_patch``);
- ``worktree``: a checked-out tree of the user's (a conflict recorded in its index), and who the
  user is to git and how they like conflicts shown;
- ``stream``: commits as a fast-import stream, where paths are quoted;
- ``changes``: git's ``--raw`` output as data;
- ``limits``: how long and how much one fetch from a remote may take (the user's to set);
- ``memo``: answers about immutable objects, remembered (only while the objects they name exist,
  as the one reader finds them); ``materialise``: a commit put on disk.
"""

from patchtool.git.changes import RawChange, TreeChange
from patchtool.git.command import Pending
from patchtool.git.filemerge import FileMerger
from patchtool.git.objects import ObjectReader
from patchtool.git.repo import ApplyResult, Index, LoggedCommit, Repo, WalkedCommit, WorktreeEntry
from patchtool.git.stream import FIXED_IDENT, FileWrite, Ident, NewCommit
from patchtool.git.worktree import Worktree, conflict_style, in_work_tree, init_repository, ref_format_ok, user_idents

__all__ = [
    "FIXED_IDENT",
    "ApplyResult",
    "FileMerger",
    "FileWrite",
    "Ident",
    "Index",
    "LoggedCommit",
    "NewCommit",
    "ObjectReader",
    "Pending",
    "RawChange",
    "Repo",
    "TreeChange",
    "WalkedCommit",
    "Worktree",
    "WorktreeEntry",
    "conflict_style",
    "in_work_tree",
    "init_repository",
    "ref_format_ok",
    "user_idents",
]
