"""``patchtool export``: a checkout branch written back as the series.

Unchanged commits give byte-identical patch files (the trailer is a checkout artefact and never
reaches a patch file), metadata follows the trailer, and nothing disappears without a record: a
patch whose commit is gone is refused, or with ``--allow-drop`` recorded as dropped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patchtool import git, paths
from patchtool.diff.patchfile import unreadable_message
from patchtool.edit.branch import (
    TRAILER,
    BranchCommit,
    branch_and_record,
    branch_commits,
    changes_since,
    export_commit,
    interrupted,
    move_branch,
    require_clean,
    series_record,
    sha256,
    without_trailer,
    worktree_of,
)
from patchtool.errors import InvalidInput, UsageError
from patchtool.project import tomlio
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import PATCHES_DIR, Project, manifest_document, manifest_text, record_dropped
from patchtool.series import metadata
from patchtool.series.ids import slug, unique_id
from patchtool.series.metadata import skeleton
from patchtool.series.writes import check_patches, write_series
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import CheckoutBranch, CheckoutRecord, RecordedPatch


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExportResult:
    branch: str
    patches: tuple[dict[str, str], ...]  # id, file, change ("unchanged", "refreshed", "new", "renamed", "revived")
    dropped: tuple[str, ...]
    written: tuple[str, ...]
    trailers: tuple[str, ...] = ()  # ids given to commits that had no trailer (now amended onto them)
    todos: tuple[str, ...] = ()  # new entries whose skeleton left fields to fill in
    placeholder_subjects: tuple[str, ...] = ()  # commits whose subject is still the one `new` wrote

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def exportable(
    project: Project, cache: Cache, names: CheckoutBranch, *, stopped_ok: bool = False
) -> tuple[str, str, CheckoutRecord]:
    """(tip, base, record) of a checkout branch whose series and pin are still the project's;
    refused otherwise, naming what changed, and (unless ``stopped_ok``) where the checkout
    stopped at a patch that does not apply: the branch lacks it and the patches after it."""
    tip, base, record = branch_and_record(
        project, cache.repo, names, "exporting it could undo changes made to the series since"
    )
    stopped = record.stopped
    again = "" if names.branch == "series" else f" --branch {names.branch}"
    if stopped is not None and not stopped_ok:
        if interrupted(cache.repo, record, tip) is not None:
            raise UsageError(
                f"a refresh of patch {stopped} on checkout branch {names.branch!r} was interrupted",
                hint=f"`patchtool refresh{again} {stopped}` finishes it",
            )
        raise UsageError(
            f"checkout branch {names.branch!r} stopped at patch {stopped}, which does not apply at the pin; "
            "the branch holds only the patches before it",
            hint=f"fix it in the checkout's worktree (if it was removed, `patchtool checkout{again}` makes it "
            f"again), then `patchtool refresh{again} {stopped}`",
        )
    if (changes := changes_since(record, project)) and stopped is None and record.pin == project.manifest.pin:
        exported = _record_of_export(project, cache.repo, names, base, tip)
        if exported is not None:  # written, its record not saved yet: in sync all the same
            names.save_record(cache.repo, exported)
            record, changes = exported, []
    if changes:
        raise UsageError(
            f"the series changed since branch {names.branch!r} was checked out: "
            f"{'; '.join(changes)}. Exporting that checkout would undo it",
            hint=f"`patchtool checkout --refresh{again}` moves your commits onto the current series; then export",
        )
    if base != cache.ensure(project.pin()).commit:
        raise UsageError(
            f"branch {names.branch!r} was checked out on another pin than {project.manifest.pin}",
            hint=f"`patchtool checkout --refresh{again}` moves it onto the pin",
        )
    return tip, base, record


def _record_of_export(
    project: Project, repo: git.Repo, names: CheckoutBranch, base: str, tip: str
) -> CheckoutRecord | None:
    """The record of the branch where the series is, byte for byte, what it exports (an export or
    refresh killed between writing the series and saving its record); None otherwise."""
    try:
        commits = branch_commits(repo, names, base, tip)
        entries = project.manifest.patches
        if [c.ident for c in commits] != [e.id for e in entries]:
            return None
        recorded = []
        for c, e in zip(commits, entries, strict=True):  # one file at a time: only its hash is kept
            data = paths.read_inside(project.root, e.file)
            if export_commit(repo, c.commit).encode() != data:
                return None
            recorded.append(RecordedPatch(id=e.id, file=e.file, sha256=sha256(data), commit=c.commit))
    except (UsageError, InvalidInput, OSError):
        return None
    return CheckoutRecord(pin=project.manifest.pin, base=base, patches=tuple(recorded))


def export(
    project: Project, cache: Cache, *, branch: str, allow_drop: bool, revive: Sequence[str] = ()
) -> ExportResult:
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    tip, base, _ = exportable(project, cache, names)
    worktree = worktree_of(repo, names)
    require_clean(worktree)
    plan = planned(
        project, repo, names, base, branch_commits(repo, names, base, tip), allow_drop=allow_drop, revive=revive
    )
    # the commits that had no trailer get theirs now, before any file is written: an export
    # stopped between the two leaves trailers naming ids the series lacks, which the next export
    # adds again; the other way round it would find their patches without a commit
    if plan.chain is not None:
        move_branch(repo, names, worktree, tip, plan.chain[-1], "patchtool export: Patchtool-Id trailers")
    return write_planned(project, repo, names, plan)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Planned:
    """An export worked out and every refusal behind it, nothing written yet."""

    result: ExportResult  # its ``written`` still empty
    base: str
    files: dict[str, str]  # every patch file's path and text
    manifest: str
    moves: dict[str, str]
    removed: list[str]
    pending: list[str]  # the trees ``new`` kept metadata in, removed with the write
    chain: list[str] | None  # the branch again with a trailer on every commit, where one lacked it
    final: dict[str, str]  # each patch's commit once the branch holds ``chain``


def planned(
    project: Project,
    repo: git.Repo,
    names: CheckoutBranch,
    base: str,
    commits: Sequence[BranchCommit],
    *,
    allow_drop: bool,
    revive: Sequence[str] = (),
    hint: str = "take that file out of the commit (`git commit --amend`, `git rebase -i`), then export",
) -> Planned:
    """The export of ``commits`` (the branch, or what it is about to hold), refused where export
    refuses, before anything moves or is written: a new patch text the series could not read, or a
    destination that cannot be written, included."""
    root = project.root
    branch = names.branch
    entries = {e.id: e for e in project.manifest.patches}
    dropped = {d.entry.id: d.entry.file for d in project.manifest.dropped}
    revive = list(dict.fromkeys(revive))
    order, given = _identify(project, commits, revive, branch)
    kept = {i for i, _, _ in order}
    if (gone := [e.id for e in project.manifest.patches if e.id not in kept]) and not allow_drop:
        raise UsageError(
            f"patch(es) {', '.join(gone)} have no commit on {branch!r} any more; refusing to delete them silently",
            hint="record it: `patchtool drop ID --reason ...`, or export with --allow-drop",
        )
    _refuse_empty(repo, commits, branch)
    files: dict[str, str] = {}
    rows_out: list[dict[str, str]] = []
    for position, (ident, commit, known) in enumerate(order, 1):
        text = export_commit(repo, commit)
        was = entries[ident].file if known else dropped.get(ident)
        stem = re.sub(r"^\d+-", "", Path(was).stem) if was else slug(ident)
        name = f"{PATCHES_DIR}/{position:04d}-{stem}.patch"
        old = entries[ident].file if known else None
        previous = paths.read_text_if_present(root, old) if old else None
        if not known:
            change = "revived" if ident in revive else "new"
        else:
            change = ("unchanged" if old == name else "renamed") if previous == text else "refreshed"
        if change not in ("unchanged", "renamed"):
            _refuse_unreadable(repo, commit)
        files[name] = text
        rows_out.append({"id": ident, "file": name, "change": change})
    new_texts = [
        (r["id"], r["file"], files[r["file"]]) for r in rows_out if r["change"] not in ("unchanged", "renamed")
    ]
    check_patches(root, new_texts, hint=hint)
    chain = _with_trailers(repo, base, commits, [i for i, _, _ in order])
    manifest, moves = _export_manifest(
        root, [(i, k) for i, _, k in order], {r["id"]: r["file"] for r in rows_out}, gone, branch, revive=revive
    )
    renamed = [
        entries[r["id"]].file
        for r in rows_out
        if r["change"] not in ("new", "revived") and entries[r["id"]].file != r["file"]
    ]
    fresh = [r["id"] for r in rows_out if r["change"] == "new"]
    unworded = [i for (i, _, _), c in zip(order, commits, strict=True) if c.subject == metadata.placeholder_subject(i)]
    return Planned(
        result=ExportResult(
            branch=branch,
            patches=tuple(rows_out),
            dropped=tuple(gone),
            written=(),
            trailers=tuple(given),
            todos=tuple(i for i in fresh if metadata.todo_fields(metadata.load_pending(root, i))),
            placeholder_subjects=tuple(unworded),
        ),
        base=base,
        files=files,
        manifest=manifest,
        moves=moves,
        removed=[entries[i].file for i in gone] + renamed + [dropped[i] for i in revive if dropped[i] not in files],
        pending=_pending_trees(root, fresh),
        chain=chain,
        final=dict(zip([i for i, _, _ in order], chain or [c.commit for c in commits], strict=True)),
    )


def write_planned(project: Project, repo: git.Repo, names: CheckoutBranch, plan: Planned) -> ExportResult:
    """The series written as ``plan`` says (the branch already holds it), and the record of it."""
    written = write_series(
        project.root, plan.files, plan.manifest, remove=plan.removed, moves=plan.moves, remove_trees=plan.pending
    )
    exported = [(r["id"], r["file"], plan.files[r["file"]].encode()) for r in plan.result.patches]
    names.save_record(repo, series_record(project.manifest.pin, plan.base, exported, plan.final))
    return dataclasses.replace(plan.result, written=tuple(written))


def _refuse_unreadable(repo: git.Repo, commit: str) -> None:
    """UsageError where the patch file of ``commit`` would not read back as its message says
    (``patchfile.unreadable_message``): a round trip with no edit would change the patch, or lose
    part of its message."""
    message = without_trailer(repo.commit_message(commit))
    if why := unreadable_message(message):
        raise UsageError(
            f"commit {commit[:12]} ({message.partition(chr(10))[0]}) cannot be written as a patch file as it "
            f"is: {why}; nothing was changed",
            hint="reword the message (`git commit --amend`, or `git rebase -i` for an earlier commit), e.g. "
            "indent that line or start the subject with the text to keep, then export",
        )


def _refuse_empty(repo: git.Repo, commits: Sequence[BranchCommit], branch: str) -> None:
    """UsageError naming each commit that changes nothing: git writes no patch for it, and an empty
    patch file is one the series cannot load."""
    if empty := [c for c in commits if repo.tree_of(c.commit) == repo.tree_of(f"{c.commit}^")]:
        named = ", ".join(f"{c.commit[:12]} ({c.subject})" for c in empty)
        raise UsageError(
            f"commit(s) {named} on {branch!r} change nothing: each would be written as an empty "
            "patch file; nothing was exported",
            hint="put the change in it (edit in the worktree, then `git commit --amend`), or take "
            "the commit out of the branch (`git rebase -i`)",
        )


def _identify(
    project: Project, commits: Sequence[BranchCommit], revive: Sequence[str], branch: str
) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """Each commit's patch: ``(id, commit, known)`` in branch order, and the ids given to commits
    without a trailer. A dropped patch comes back only when ``revive`` names it."""
    entries = {e.id for e in project.manifest.patches}
    dropped = {d.entry.id: d for d in project.manifest.dropped}
    if active := [i for i in revive if i in entries]:
        raise UsageError(f"--revive {', '.join(active)}: in the series already; nothing to bring back")
    if unknown := [i for i in revive if i not in dropped]:
        raise UsageError(
            f"--revive {', '.join(unknown)}: no such dropped patch", hint=f"dropped: {', '.join(dropped) or 'none'}"
        )
    order: list[tuple[str, str, bool]] = []
    for c in commits:
        ident = c.ident or unique_id(slug(c.subject), {*entries, *dropped, *(i for i, _, _ in order)})
        if any(i == ident for i, _, _ in order):
            raise UsageError(
                f"two commits carry {TRAILER}: {ident}",
                hint="each patch is one commit: squash them or change one trailer",
            )
        order.append((ident, c.commit, ident in entries))
    if resurrected := [(i, c) for i, c, known in order if not known and i in dropped and i not in revive]:
        named = "; ".join(
            f"commit {c[:12]} carries {TRAILER}: {i}, a patch dropped from the series ({dropped[i].reason})"
            for i, c in resurrected
        )
        ids = " ".join(f"--revive {i}" for i, _ in resurrected)
        raise UsageError(
            f"{named}; refusing to bring it back unasked",
            hint=f"to bring it back with its recorded metadata: `patchtool export {ids}`; "
            "otherwise take the commit out of the branch (git rebase -i)",
        )
    if missing := [i for i in revive if i not in {o for o, _, _ in order}]:
        raise UsageError(
            f"--revive {', '.join(missing)}: no commit on {branch!r} carries {TRAILER}: {', '.join(missing)}",
            hint="cherry-pick or write the commit first",
        )
    return order, [i for (i, _, _), c in zip(order, commits, strict=True) if c.ident is None]


def _with_trailers(repo: git.Repo, base: str, commits: Sequence[BranchCommit], ids: Sequence[str]) -> list[str] | None:
    """The branch again with a trailer on every commit that lacked one (trees, authors, committers
    and dates unchanged); None when every commit has its trailer already."""
    if all(c.ident is not None for c in commits):
        return None
    out: list[str] = []
    parent = base
    rewriting = False
    for c, ident in zip(commits, ids, strict=True):
        rewriting = rewriting or c.ident is None
        if not rewriting:
            parent = c.commit
        else:
            message = c.message.rstrip("\n") + "\n"
            if c.ident is None:
                message = repo.interpret_trailers(message, f"{TRAILER}: {ident}")
            author, committer = repo.idents(c.commit)
            parent = repo.commit_tree(repo.tree_of(c.commit), [parent], message, author=author, committer=committer)
        out.append(parent)
    return out


def _export_manifest(
    root: Path,
    order: list[tuple[str, bool]],
    files: dict[str, str],
    gone: list[str],
    branch: str,
    *,
    revive: Sequence[str] = (),
) -> tuple[str, dict[str, str]]:
    """The manifest for the exported series, and where each gone patch's file moves."""
    text = paths.read_inside(root, MANIFEST_NAME).decode("utf-8")
    doc = manifest_document(root)
    tables = {str(t["id"]): t for t in doc.get("patch", [])}
    current = [str(t["id"]) for t in doc.get("patch", [])]
    wanted = [i for i, _ in order]
    if current == wanted and all(str(tables[i]["file"]) == files[i] for i in wanted) and not gone and not revive:
        return text, {}
    for ident in revive:  # back from [[dropped]] with its metadata, without the drop's reason
        at = max(n for n, t in enumerate(doc["dropped"]) if str(t["id"]) == ident)
        table = tomlio.take_table(doc, "dropped", at)
        for key in ("reason", "dropped_at"):
            table.pop(key, None)
        tables[ident] = table
    new = []
    for ident, known in order:
        table = (
            tables[ident]
            if known or ident in revive
            else skeleton(ident, files[ident], metadata.load_pending(root, ident))
        )
        table["file"] = files[ident]
        new.append(table)
    tomlio.set_tables(doc, "patch", new)
    moves = {}
    reason = f"its commit was removed from checkout branch {branch!r} (export --allow-drop)"
    for ident in gone:
        old = str(tables[ident]["file"])
        moves[old] = record_dropped(root, doc, tables[ident], dropped_at=str(doc["pin"]), reason=reason)
    return manifest_text(doc), moves


def _pending_trees(root: Path, ids: Sequence[str]) -> list[str]:
    """Where ``new`` kept metadata for those of ``ids`` it was told about: the export that
    creates their entries removes it."""
    return [tree for i in ids if (root / (tree := metadata.pending_tree(i))).is_dir()]
