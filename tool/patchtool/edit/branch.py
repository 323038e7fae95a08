"""A checkout branch in the cache: its commits and their ``Patchtool-Id`` trailers, the record of
the series it was made from, its worktree, and moving it without losing anything.

Each commit of a checkout carries a trailer that maps it to its manifest entry; the trailer is
a checkout artefact and never reaches a patch file. The branch is created with a reflog (the
cache logs no ref updates of its own), and every move patchtool makes is a checked one: the
worktree that has the branch checked out follows, or nothing moves at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import git
from patchtool.errors import InvalidInput, UsageError
from patchtool.paths import id_problem, read_inside
from patchtool.project.repository import LoadedPatch, Project
from patchtool.upstream.namespaces import CheckoutBranch, CheckoutRecord, RecordedPatch

TRAILER = "Patchtool-Id"
_TRAILER_RE = re.compile(rf"{TRAILER}:\s*(\S+)\s*")
# a trailer line as `git interpret-trailers` reads one (a token, a colon), and git's own trailers
# that let a block count with a quarter of its lines trailers
_ANY_TRAILER = re.compile(r"[A-Za-z0-9-]+\s*:")
_GIT_TRAILERS = ("Signed-off-by: ", "(cherry picked from commit ")


def commit_message(lp: LoadedPatch) -> str:
    return lp.patch.message.rstrip("\n") + f"\n\n{TRAILER}: {lp.id}\n"


def trailer_block(lines: list[str]) -> range:
    """Where the trailer block of a message's ``lines`` (no trailing blank ones) is, as git
    interpret-trailers finds it: its last paragraph, never the subject's, when every line of it
    is a trailer or a continuation, or a quarter are and one is git's own; else an empty range.
    Only there does patchtool read or write its own ``Patchtool-*`` keys: a line like one in the
    message's text (a message quoting another patch) is the message's."""
    start = len(lines)
    while start > 0 and lines[start - 1].strip():
        start -= 1
    if start == 0 or start == len(lines):  # one paragraph, the subject's: no trailers
        return range(len(lines), len(lines))
    block = lines[start:]
    trailers = sum(1 for ln in block if _ANY_TRAILER.match(ln))
    continued = sum(1 for ln in block if ln[:1] in (" ", "\t"))
    all_trailers = trailers + continued == len(block) and trailers and block[0][:1] not in (" ", "\t")
    if all_trailers or (4 * trailers >= len(block) and any(ln.startswith(_GIT_TRAILERS) for ln in block)):
        return range(start, len(lines))
    return range(len(lines), len(lines))


def _lines(message: str) -> list[str]:
    return message.rstrip("\n").split("\n")


def trailer_id(message: str) -> str | None:
    """The id of the message's last ``Patchtool-Id`` trailer, in its trailer block only."""
    lines = _lines(message)
    found = [m.group(1) for i in trailer_block(lines) if (m := _TRAILER_RE.fullmatch(lines[i]))]
    return found[-1] if found else None


# -- what a checkout was made from -----------------------------------------------------------


def sha256(data: bytes | str) -> str:
    """The digest a record keeps of a patch: of its file's bytes, or of its text as UTF-8."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def series_record(
    pin: str, base: str, patches: Sequence[tuple[str, str, bytes]], commits: Mapping[str, str]
) -> CheckoutRecord:
    """The series a checkout branch holds: the pin, its base, and each patch's id, file, bytes
    (sha256) and commit on the branch; ``patches`` is (id, file, bytes) in series order."""
    recorded = (RecordedPatch(id=i, file=f, sha256=sha256(data), commit=commits.get(i, "")) for i, f, data in patches)
    return CheckoutRecord(pin=pin, base=base, patches=tuple(recorded))


def loaded_record(pin: str, base: str, loaded: Sequence[LoadedPatch], commits: Mapping[str, str]) -> CheckoutRecord:
    return series_record(pin, base, [(lp.id, lp.entry.file, lp.text.encode()) for lp in loaded], commits)


def interrupted(repo: git.Repo, record: CheckoutRecord, tip: str) -> str | None:
    """The patch whose ``refresh`` was interrupted once it moved the branch (``repairing``):
    the next ``refresh`` of it finishes it; None where none was."""
    note = record.repairing
    return record.stopped if note is not None and repo.is_ancestor(note.commit, tip) else None


def branch_and_record(
    project: Project, repo: git.Repo, names: CheckoutBranch, why: str
) -> tuple[str, str, CheckoutRecord]:
    """(tip, base, record) of a checkout branch of this repository; UsageError when the branch or
    the record of the series it was made from is missing (``why``: what that record is needed for)."""
    tip, base = repo.resolve(names.ref), repo.resolve(names.base_ref)
    if tip is None or base is None:
        raise UsageError(
            f"no checkout branch {names.branch!r} for this repository ({project.root})",
            hint="create one with `patchtool checkout`; checkouts belong to the directory "
            "they were made in, so a moved or copied repository starts without one",
        )
    if (record := names.load_record(repo)) is None:
        raise UsageError(
            f"no record of the series checkout branch {names.branch!r} was made from, so {why}",
            hint="check out a fresh branch (`patchtool checkout --branch NEW`) and carry your "
            "commits over with `git cherry-pick`",
        )
    return tip, base, record


def changes_since(record: CheckoutRecord, project: Project) -> list[str]:
    """What changed in the series since ``record``: what an export from that checkout would undo.
    Metadata is not compared: export keeps the manifest's metadata as it finds it."""
    changes = []
    if record.pin != project.manifest.pin:
        changes.append(f"the pin is {project.manifest.pin}, the checkout was made on {record.pin}")
    old = {p.id: p for p in record.patches}
    new = {e.id: e for e in project.manifest.patches}
    note = record.repairing  # the repaired text, written before the record
    written = {record.stopped: note.sha256} if note and record.stopped else {}
    added = [i for i in new if i not in old]
    dropped = [i for i in old if i not in new]
    edited = []
    for ident, entry in new.items():
        if ident in old:
            try:  # bounded, never through a link; one at a time: only its hash is kept
                now = sha256(read_inside(project.root, entry.file))
            except (FileNotFoundError, InvalidInput):
                now = None
            if now not in (old[ident].sha256, written.get(ident)):
                edited.append(f"{ident} ({entry.file})")
    changes += [
        f"{what} {', '.join(ids)}" for what, ids in (("added", added), ("dropped", dropped), ("edited", edited)) if ids
    ]
    if [i for i in old if i in new] != [i for i in new if i in old]:
        changes.append("reordered")
    return changes


# -- the branch in the cache and its worktree --------------------------------------------------


def worktree_of(repo: git.Repo, names: CheckoutBranch) -> Path | None:
    """The worktree that has the checkout branch checked out, if one does; one deleted by hand
    (git still lists it until pruned) does not count; nor does any before the cache exists."""
    if not Path(repo.git_dir).is_dir():
        return None
    return next((Path(w.path) for w in repo.worktrees() if w.branch == names.ref and Path(w.path).is_dir()), None)


def worktrees(repo: git.Repo) -> list[Path]:
    """Every worktree of the cache (its checkouts, of every project) and the cache's own git
    directory: none before the cache exists."""
    return [Path(w.path) for w in repo.worktrees()] if (Path(repo.git_dir) / "HEAD").is_file() else []


def require_clean(worktree: Path | None) -> None:
    if worktree is not None and (dirty := git.Worktree(worktree).status()):
        raise UsageError(
            f"the worktree {worktree} has uncommitted changes:\n{dirty}",
            hint="commit (or stash) them first; patchtool works on commits only",
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BranchCommit:
    commit: str
    subject: str
    message: str
    ident: str | None  # the Patchtool-Id trailer


def branch_commits(repo: git.Repo, names: CheckoutBranch, base: str, tip: str) -> list[BranchCommit]:
    """base..tip oldest first; refused unless the branch is a line of commits on its base."""
    if not repo.is_ancestor(base, tip):
        raise UsageError(
            f"branch {names.branch!r} does not contain the pinned base {base[:12]}: a commit sits "
            "below the base or the branch was rebased elsewhere",
            hint="rebase the branch back onto the pin's base",
        )
    out = []
    for logged in repo.log(base, tip):
        commit, subject, message = logged.commit, logged.subject, logged.message
        if len(logged.parents) != 1:
            raise UsageError(
                f"commit {commit[:12]} ({subject}) is a merge commit; a series is linear",
                hint="rebase the branch to drop the merge (git rebase -i)",
            )
        ident = trailer_id(message)
        if ident is not None and id_problem(ident) is not None:
            raise UsageError(
                f"commit {commit[:12]} ({subject}): {TRAILER} {ident!r} is not a valid id "
                "(lower-case letters, digits, '.', '_', '-')",
                hint="fix the trailer with `git commit --amend` (or `git rebase -i`)",
            )
        out.append(BranchCommit(commit=commit, subject=subject, message=message, ident=ident))
    return out


def move_branch(
    repo: git.Repo,
    names: CheckoutBranch,
    worktree: Path | None,
    old: str,
    new: str,
    action: str,
    *,
    files_stay: bool = False,
) -> None:
    """Move the checkout branch from ``old`` to ``new``, and the worktree that has it checked out
    with it: its index and files follow (``reset --keep``: refused, changing nothing, where a
    file in the way would be lost), or only its HEAD where the tree is the same (``--soft``).
    ``files_stay``: the files already hold ``new`` (``refresh`` made it from them): the index
    follows and the files stay as they are (``--mixed``)."""
    if worktree is None:
        repo.update_ref(names.ref, new, old, reason=action)
        return
    tree = git.Worktree(worktree)
    if (head := tree.head()) != old:
        raise UsageError(
            f"the worktree {worktree} moved on while patchtool worked ({old[:12]} -> {head[:12]})",
            hint="run the command again",
        )
    mode = "--mixed" if files_stay else "--soft" if repo.tree_of(old) == repo.tree_of(new) else "--keep"
    if (refused := tree.reset(mode, new, reason=action, committer=git.FIXED_IDENT)) is not None:
        raise UsageError(
            f"git could not move the worktree {worktree} to the new branch tip: {refused}",
            hint="nothing was changed; move the files git names out of the way and run it again",
        )


def create_branch(repo: git.Repo, names: CheckoutBranch, tip: str, action: str) -> None:
    """The checkout branch, with a reflog (the cache logs no ref updates by default), so a commit
    lost on it can be found again with ``git reflog``."""
    if (refused := repo.update_ref(names.ref, tip, "", reason=action, reflog=True, check=False)) is not None:
        raise UsageError(
            f"branch {names.branch!r} cannot be created: {refused}",
            hint="pick another --branch (a name cannot be both a branch and a folder of branches)",
        )


def without_trailer(message: str) -> str:
    """The commit message as it was before checkout added the trailer: its ``Patchtool-Id``
    lines of the trailer block gone, and the block too where nothing else was in it."""
    lines = _lines(message)
    ours = {i for i in trailer_block(lines) if _TRAILER_RE.fullmatch(lines[i])}
    return "\n".join(ln for i, ln in enumerate(lines) if i not in ours).rstrip("\n") + "\n"


def export_commit(repo: git.Repo, commit: str) -> str:
    """The canonical patch file for a checkout commit: git's own format, without the trailer;
    UsageError naming the file when the commit changes one that is not UTF-8 (a patch file is)."""
    try:
        if trailer_id(message := repo.commit_message(commit)) is None:
            return repo.format_patch(commit)
        author, _ = repo.idents(commit)
        parent = repo.resolve(f"{commit}^")
        plain = repo.commit_tree(
            repo.tree_of(commit),
            [parent] if parent else [],
            without_trailer(message),
            author=git.Ident(author.name, author.email),
            committer=git.Ident(*git.FIXED_IDENT),
        )
        return repo.format_patch(plain)
    except UnicodeDecodeError:
        raise _not_utf8(repo, commit) from None


def _not_utf8(repo: git.Repo, commit: str) -> UsageError:
    """The error for a commit whose patch would not be UTF-8: the first file of it that is not."""
    for change in repo.diff_raw(f"{commit}^", commit):
        for path, blob in ((change.new_path, change.new_blob), (change.old_path, change.old_blob)):
            data = repo.cat_blobs([blob])[blob] if blob else None
            try:
                (data or b"").decode("utf-8")
            except UnicodeDecodeError as exc:
                return UsageError(
                    f"{path}, in commit {commit[:12]}, is not UTF-8 ({exc.reason} at byte {exc.start}): a patch "
                    "file is UTF-8 text, so no patch can carry its lines; nothing was changed",
                    hint="save it as UTF-8 (or take it out of the change), then run it again",
                )
    return UsageError(
        f"commit {commit[:12]}'s message is not UTF-8: a patch file is UTF-8 text; nothing was changed",
        hint="save it as UTF-8 (`git commit --amend`), then run it again",
    )
