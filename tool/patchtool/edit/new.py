"""``patchtool new``: an empty commit on the checkout branch for a patch to write there.

The commit carries the new id in its trailer; the metadata given waits under ``.patchtool/``
until the ``export`` that creates the patch's entry.
"""

from __future__ import annotations

import dataclasses

from patchtool import git
from patchtool.edit.branch import TRAILER, worktree_of
from patchtool.errors import UsageError
from patchtool.paths import id_problem
from patchtool.project.repository import Project
from patchtool.series import metadata
from patchtool.series.metadata import Metadata
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import CheckoutBranch


def new(
    project: Project,
    cache: Cache,
    *,
    ident: str,
    branch: str,
    given: Metadata | None = None,
    subject: str | None = None,
) -> str:
    """An empty commit on the checkout branch, carrying the new id and made by the user, as
    ``git commit`` would make it; export creates its entry, with the values ``given`` (checked by
    the manifest's rules first) and the skeleton's placeholders for the rest. ``subject`` is the
    commit's subject; without it, a placeholder that ``check`` flags until the commit is reworded."""
    if (why := id_problem(ident)) is not None:
        raise UsageError(why)
    if subject is not None and (not subject.strip() or any(c in subject for c in "\r\n")):
        raise UsageError(
            f"--subject {subject!r}: give one line of text", hint="the body goes in with `git commit --amend`"
        )
    given = given or Metadata()
    if given.id is not None and given.id != ident:
        raise UsageError(f"the metadata names id {given.id!r}, the new patch is {ident!r}")
    given = metadata.validate(dataclasses.replace(given, id=ident))
    if any(e.id == ident for e in project.manifest.patches):
        raise UsageError(f"a patch {ident!r} exists already")
    if ident in (dropped := {d.entry.id: d for d in project.manifest.dropped}):
        raise UsageError(
            f"{ident!r} is the id of a dropped patch ({dropped[ident].reason})",
            hint="pick another id; to bring that patch back, put its commit on the branch and "
            f"`patchtool export --revive {ident}`",
        )
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    if (worktree := worktree_of(repo, names)) is None:
        raise UsageError(f"no worktree for branch {branch!r} of this repository", hint="run `patchtool checkout` first")
    author, committer = git.user_idents(worktree)
    git.Worktree(worktree).commit_empty(
        f"{(subject or '').strip() or metadata.placeholder_subject(ident)}\n\n{TRAILER}: {ident}",
        author=author,
        committer=committer,
    )
    metadata.save_pending(project.root, ident, given)
    return str(worktree)
