"""A checkout branch in the cache: its commits and their ``Patchtool-Id`` trailers, and its
worktree.

Each commit of a checkout carries a trailer that maps it to its manifest entry; the trailer is
a checkout artefact and never reaches a patch file. The branch is created with a reflog (the
cache logs no ref updates of its own), so a commit lost on it can be found again.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from . import git
from .cachespace import CheckoutBranch
from .errors import UsageError
from .paths import id_problem
from .project import LoadedPatch

TRAILER = "Patchtool-Id"
_TRAILER_RE = re.compile(rf"^{TRAILER}:\s*(\S+)\s*$", re.MULTILINE)


def commit_message(lp: LoadedPatch) -> str:
    return lp.patch.message.rstrip("\n") + f"\n\n{TRAILER}: {lp.id}\n"


def trailer_id(message: str) -> str | None:
    found = _TRAILER_RE.findall(message)
    return found[-1] if found else None


# -- the branch in the cache and its worktree --------------------------------------------------

def worktree_of(repo: git.Repo, names: CheckoutBranch) -> Path | None:
    """The worktree that has the checkout branch checked out, if one does."""
    listing = repo.out("worktree", "list", "--porcelain").split("\n\n")
    for block in listing:
        lines = dict(line.split(" ", 1) for line in block.splitlines() if " " in line)
        if lines.get("branch") == names.ref:
            return Path(lines["worktree"])
    return None


def require_clean(worktree: Path | None) -> None:
    if worktree is not None:
        dirty = git.run(["git", "status", "--porcelain"], cwd=worktree).stdout.decode().strip()
        if dirty:
            raise UsageError(f"the worktree {worktree} has uncommitted changes:\n{dirty}",
                             hint="commit (or stash) them first; patchtool works on commits only")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BranchCommit:
    commit: str
    subject: str
    message: str
    ident: str | None  # the Patchtool-Id trailer


def branch_commits(repo: git.Repo, names: CheckoutBranch, base: str, tip: str) -> list[BranchCommit]:
    """base..tip oldest first; refused unless the branch is a line of commits on its base."""
    if repo.git("merge-base", "--is-ancestor", base, tip, check=False).returncode != 0:
        raise UsageError(f"branch {names.branch!r} does not contain the pinned base {base[:12]}: a commit sits "
                         "below the base or the branch was rebased elsewhere",
                         hint="rebase the branch back onto the pin's base")
    out = []
    for row in repo.out("rev-list", "--reverse", "--parents", f"{base}..{tip}").splitlines():
        commit, *parents = row.split()
        subject = repo.out("log", "-1", "--format=%s", commit)
        if len(parents) != 1:
            raise UsageError(f"commit {commit[:12]} ({subject}) is a merge commit; a series is linear",
                             hint="rebase the branch to drop the merge (git rebase -i)")
        message = repo.commit_message(commit)
        ident = trailer_id(message)
        if ident is not None and id_problem(ident) is not None:
            raise UsageError(f"commit {commit[:12]} ({subject}): {TRAILER} {ident!r} is not a valid id "
                             "(lower-case letters, digits, '.', '_', '-')",
                             hint="fix the trailer with `git commit --amend` (or `git rebase -i`)")
        out.append(BranchCommit(commit=commit, subject=subject, message=message, ident=ident))
    return out


def create_branch(repo: git.Repo, names: CheckoutBranch, tip: str, action: str) -> None:
    """The checkout branch, with a reflog (the cache logs no ref updates by default), so a commit
    lost on it can be found again with ``git reflog``."""
    res = repo.git("update-ref", "--create-reflog", "-m", action, names.ref, tip, "", check=False,
                   env={"GIT_COMMITTER_NAME": git.FIXED_IDENT[0], "GIT_COMMITTER_EMAIL": git.FIXED_IDENT[1]})
    if res.returncode:
        raise UsageError(f"branch {names.branch!r} cannot be created: {res.stderr.decode(errors='replace').strip()}",
                         hint="pick another --branch (a name cannot be both a branch and a folder of branches)")


def without_trailer(message: str) -> str:
    """The commit message as it was before checkout added the trailer."""
    lines = [ln for ln in message.rstrip("\n").split("\n") if not _TRAILER_RE.match(ln)]
    return "\n".join(lines).rstrip("\n") + "\n"


def export_commit(repo: git.Repo, commit: str) -> str:
    """The canonical patch file for a checkout commit: git's own format, without the trailer."""
    message = repo.commit_message(commit)
    if not _TRAILER_RE.search(message):
        return repo.format_patch(commit)
    name, email = repo.out("log", "-1", "--format=%an%x00%ae", commit).split("\0")
    parent = repo.out("rev-parse", f"{commit}^")
    plain = repo.commit_tree(repo.tree_of(commit), [parent], without_trailer(message),
                             author=git.Ident(name, email), committer=git.Ident(*git.FIXED_IDENT))
    return repo.format_patch(plain)
