"""Editing the series with plain git: checkout, export, new, drop, and a quilt export.

``checkout`` puts the series on a branch of the cache repository, one commit per patch, each
carrying a ``Patchtool-Id`` trailer that maps it back to its manifest entry. ``export`` writes
the branch back: unchanged commits give byte-identical patch files (the trailer is a checkout
artefact and never reaches a patch file), metadata follows the trailer, and nothing disappears
without a record.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from patchtool import fsroot, git, paths
from patchtool.errors import PatchtoolError, UsageError
from patchtool.paths import id_problem
from patchtool.project import journal, tomlio
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import PATCHES_DIR, Project, manifest_document, manifest_text, record_dropped
from patchtool.registry import workflows as retread
from patchtool.series import metadata
from patchtool.series.apply import apply_series
from patchtool.series.checkouts import (
    TRAILER,
    BranchCommit,
    branch_and_record,
    branch_commits,
    changes_since,
    commit_message,
    create_branch,
    export_commit,
    loaded_record,
    move_branch,
    require_clean,
    series_record,
    worktree_of,
)
from patchtool.series.metadata import Metadata, skeleton
from patchtool.upstream.cache import Cache
from patchtool.upstream.cachespace import CheckoutBranch

WORK_DIR = "work"


# -- checkout ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checkout:
    branch: str
    worktree: str
    base: str
    commits: tuple[tuple[str, str], ...]  # (patch id, commit)
    git_branch: str = ""  # the branch as git names it in the worktree

    def to_dict(self) -> dict[str, Any]:
        return {"branch": self.branch, "git_branch": self.git_branch, "worktree": self.worktree,
                "base": self.base, "commits": [{"id": i, "commit": c} for i, c in self.commits]}


def checkout(project: Project, cache: Cache, *, pin_name: str | None, branch: str,
             path: Path | None) -> Checkout:
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    pin = project.pin(pin_name)
    loaded = project.series()
    base = cache.ensure(pin)
    if repo.resolve(names.ref) is not None:
        again = "" if branch == "series" else f" --branch {branch}"
        raise UsageError(f"branch {branch!r} already exists in the cache for this repository",
                         hint=f"export it (`patchtool export{again}`), bring it up to date with the series "
                              f"(`patchtool checkout --refresh{again}`), or pick another --branch")
    result = apply_series(repo, base.commit, loaded, commit=True, message=commit_message)
    if not result.ok or result.tip is None:
        failed = result.failed
        raise PatchtoolError(f"the series does not apply at {pin.name} ({failed.id if failed else '?'})",
                             hint="run `patchtool check`")
    # the default lies in the repository, where `work` could be a committed link out of it
    where = (path or fsroot.Root(project.root).place(f"{WORK_DIR}/{branch}")).absolute()
    if where.is_symlink() or (where.exists() and (not where.is_dir() or any(where.iterdir()))):
        raise UsageError(f"{where} exists and is not an empty directory", hint="pass --path")
    git_dir = fsroot.Root(repo.git_dir)
    if "__pycache__/" not in (paths.read_text_if_present(repo.git_dir, "info/exclude") or ""):
        git_dir.append("info/exclude", "__pycache__/\n*.pyc\n")
    commits = {r.id: r.commit or "" for r in result.results}
    names.save_record(repo, loaded_record(pin.name, base.commit, loaded, commits))
    create_branch(repo, names, result.tip, "patchtool checkout")
    repo.update_ref(names.base_ref, base.commit)
    repo.forget_missing_worktrees()
    repo.worktree_add(where, names.short, detach=False)
    return Checkout(branch=branch, git_branch=names.short, worktree=str(where), base=base.commit,
                    commits=tuple((r.id, r.commit or "") for r in result.results))


# -- export ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExportResult:
    branch: str
    patches: tuple[dict[str, str], ...]  # id, file, change ("unchanged", "refreshed", "new", "renamed", "revived")
    dropped: tuple[str, ...]
    written: tuple[str, ...]
    trailers: tuple[str, ...] = ()  # ids given to commits that had no trailer (now amended onto them)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _slug(text: str, limit: int = 48) -> str:
    """``text`` as an id: lower-case words joined by '-', at most ``limit`` characters, cut after
    a whole word (a first word longer than that is cut where it must be)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > limit:
        head = slug[:limit + 1]
        slug = head[:head.rfind("-")] if "-" in head else slug[:limit]
    return slug or "patch"


def _hint_branch(branch: str) -> str:
    return "" if branch == "series" else f" --branch {branch}"


def _checked(project: Project, repo: git.Repo, names: CheckoutBranch) -> tuple[str, str]:
    """(tip, base) of a checkout branch whose series is still the project's; refused
    otherwise, naming what changed."""
    tip, base, record = branch_and_record(project, repo, names,
                                          "exporting it could undo changes made to the series since")
    changes = changes_since(record, project)
    if changes:
        raise UsageError(f"the series changed since branch {names.branch!r} was checked out: "
                         f"{'; '.join(changes)}. Exporting that checkout would undo it",
                         hint=f"`patchtool checkout --refresh{_hint_branch(names.branch)}` moves your commits "
                              "onto the current series; then export")
    return tip, base


def export(project: Project, cache: Cache, *, branch: str, allow_drop: bool,
           revive: Sequence[str] = ()) -> ExportResult:
    repo = cache.repo
    root = project.root
    names = CheckoutBranch.of(root, branch)
    tip, base = _checked(project, repo, names)
    pin_base = cache.ensure(project.pin()).commit
    if base != pin_base:
        raise UsageError(f"branch {branch!r} was checked out on another pin than {project.manifest.pin}",
                         hint=f"`patchtool checkout --refresh{_hint_branch(branch)}` moves it onto the pin")
    worktree = worktree_of(repo, names)
    require_clean(worktree)
    commits = branch_commits(repo, names, base, tip)
    entries = {e.id: e for e in project.manifest.patches}
    dropped = {d.entry.id: d.entry.file for d in project.manifest.dropped}
    revive = list(dict.fromkeys(revive))
    order, given = _identify(project, commits, revive, branch)
    kept = {i for i, _, _ in order}
    gone = [e.id for e in project.manifest.patches if e.id not in kept]
    if gone and not allow_drop:
        raise UsageError(f"patch(es) {', '.join(gone)} have no commit on {branch!r} any more; refusing to "
                         "delete them silently",
                         hint="record it: `patchtool drop ID --reason ...`, or export with --allow-drop")
    _refuse_empty(repo, commits, branch)
    files: dict[str, str] = {}
    rows_out: list[dict[str, str]] = []
    for position, (ident, commit, known) in enumerate(order, 1):
        text = export_commit(repo, commit)
        was = entries[ident].file if known else dropped.get(ident)
        slug = re.sub(r"^\d+-", "", Path(was).stem) if was else _slug(ident)
        name = f"{PATCHES_DIR}/{position:04d}-{slug}.patch"
        old = entries[ident].file if known else None
        previous = paths.read_text_if_present(root, old) if old else None
        change = ("revived" if ident in revive else "new") if not known else \
            "unchanged" if previous == text and old == name else "renamed" if previous == text else "refreshed"
        files[name] = text
        rows_out.append({"id": ident, "file": name, "change": change})
    # the commits that had no trailer get theirs now, before any file is written: an export
    # stopped between the two leaves trailers naming ids the series lacks, which the next export
    # adds again; the other way round it would find their patches without a commit
    chain = _with_trailers(repo, base, commits, [i for i, _, _ in order])
    if chain is not None:
        move_branch(repo, names, worktree, tip, chain[-1], "patchtool export: Patchtool-Id trailers")
    manifest, moves = _export_manifest(root, [(i, k) for i, _, k in order],
                                       {r["id"]: r["file"] for r in rows_out}, gone, branch, revive=revive)
    revived_files = [dropped[i] for i in revive]
    written = _write_all(root, files, manifest, remove=[entries[i].file for i in gone] +
                         [entries[r["id"]].file for r in rows_out
                          if r["change"] not in ("new", "revived") and entries[r["id"]].file != r["file"]] +
                         [f for f in revived_files if f not in files],
                         moves=moves, remove_trees=_pending_trees(root, [r["id"] for r in rows_out
                                                                         if r["change"] == "new"]))
    final = dict(zip([i for i, _, _ in order], chain or [c.commit for c in commits], strict=True))
    exported = [(r["id"], r["file"], files[r["file"]].encode()) for r in rows_out]
    names.save_record(repo, series_record(project.manifest.pin, base, exported, final))
    return ExportResult(branch=branch, patches=tuple(rows_out), dropped=tuple(gone), written=tuple(written),
                        trailers=tuple(given))


def _refuse_empty(repo: git.Repo, commits: Sequence[BranchCommit], branch: str) -> None:
    """UsageError naming each commit that changes nothing: git writes no patch for it, and an empty
    patch file is one the series cannot load."""
    empty = [c for c in commits if repo.tree_of(c.commit) == repo.tree_of(f"{c.commit}^")]
    if empty:
        named = ", ".join(f"{c.commit[:12]} ({c.subject})" for c in empty)
        raise UsageError(f"commit(s) {named} on {branch!r} change nothing: each would be written as an empty "
                         "patch file; nothing was exported",
                         hint="put the change in it (edit in the worktree, then `git commit --amend`), or take "
                              "the commit out of the branch (`git rebase -i`)")


def _identify(project: Project, commits: Sequence[BranchCommit], revive: Sequence[str],
              branch: str) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """Each commit's patch: ``(id, commit, known)`` in branch order, and the ids given to commits
    without a trailer. A dropped patch comes back only when ``revive`` names it."""
    entries = {e.id for e in project.manifest.patches}
    dropped = {d.entry.id: d for d in project.manifest.dropped}
    active = [i for i in revive if i in entries]
    if active:
        raise UsageError(f"--revive {', '.join(active)}: in the series already; nothing to bring back")
    unknown = [i for i in revive if i not in dropped]
    if unknown:
        raise UsageError(f"--revive {', '.join(unknown)}: no such dropped patch",
                         hint=f"dropped: {', '.join(dropped) or 'none'}")
    order: list[tuple[str, str, bool]] = []
    given: list[str] = []
    for c in commits:
        ident = c.ident or _unique(_slug(c.subject), entries, order, also=dropped)
        if c.ident is None:
            given.append(ident)
        if any(i == ident for i, _, _ in order):
            raise UsageError(f"two commits carry {TRAILER}: {ident}",
                             hint="each patch is one commit: squash them or change one trailer")
        order.append((ident, c.commit, ident in entries))
    resurrected = [(i, c) for i, c, known in order if not known and i in dropped and i not in revive]
    if resurrected:
        named = "; ".join(f"commit {c[:12]} carries {TRAILER}: {i}, a patch dropped from the series "
                          f"({dropped[i].reason})" for i, c in resurrected)
        ids = " ".join(f"--revive {i}" for i, _ in resurrected)
        raise UsageError(f"{named}; refusing to bring it back unasked",
                         hint=f"to bring it back with its recorded metadata: `patchtool export {ids}`; "
                              "otherwise take the commit out of the branch (git rebase -i)")
    missing = [i for i in revive if i not in {o for o, _, _ in order}]
    if missing:
        raise UsageError(f"--revive {', '.join(missing)}: no commit on {branch!r} carries {TRAILER}: "
                         f"{', '.join(missing)}", hint="cherry-pick or write the commit first")
    return order, given


def _with_trailers(repo: git.Repo, base: str, commits: Sequence[BranchCommit], ids: Sequence[str]) -> list[str] | None:
    """The branch again with a trailer on every commit that lacked one (trees, authors, committers
    and dates unchanged); None when every commit has its trailer already."""
    if all(c.ident is not None for c in commits):
        return None
    out: list[str] = []
    parent = base
    rewriting = False
    for c, ident in zip(commits, ids, strict=True):
        if not rewriting and c.ident is not None:
            out.append(c.commit)
            parent = c.commit
            continue
        rewriting = True
        message = c.message.rstrip("\n") + "\n"
        if c.ident is None:
            message = repo.interpret_trailers(message, f"{TRAILER}: {ident}")
        author, committer = repo.idents(c.commit)
        parent = repo.commit_tree(repo.tree_of(c.commit), [parent], message, author=author, committer=committer)
        out.append(parent)
    return out


def _unique(base: str, entries: Iterable[str], order: list[tuple[str, str, bool]],
            also: Iterable[str] = ()) -> str:
    """``base``, or ``base-2``, ... : an id no patch of the series, of ``order`` or of ``also``
    (the dropped ones, whose ids come back only when asked for) has."""
    taken = set(entries) | {i for i, _, _ in order} | set(also)
    ident, n = base, 2
    while ident in taken:
        ident, n = f"{base}-{n}", n + 1
    return ident


def _export_manifest(root: Path, order: list[tuple[str, bool]], files: dict[str, str], gone: list[str],
                     branch: str, *, revive: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """The manifest for the exported series, and where each gone patch's file moves."""
    text = paths.read_inside(root, MANIFEST_NAME).decode("utf-8")
    doc = manifest_document(root)
    tables = {str(t["id"]): t for t in doc.get("patch", [])}
    current = [str(t["id"]) for t in doc.get("patch", [])]
    wanted = [i for i, _ in order]
    unchanged = current == wanted and all(str(tables[i]["file"]) == files[i] for i in wanted) and not gone
    if unchanged and not revive:
        return text, {}
    for ident in revive:  # back from [[dropped]] with its metadata, without the drop's reason
        at = max(n for n, t in enumerate(doc["dropped"]) if str(t["id"]) == ident)
        table = tomlio.take_table(doc, "dropped", at)
        for key in ("reason", "dropped_at"):
            if key in table:
                del table[key]
        tables[ident] = table
    new = []
    for ident, known in order:
        table = tables[ident] if known or ident in revive else \
            skeleton(ident, files[ident], metadata.load_pending(root, ident))
        table["file"] = files[ident]
        new.append(table)
    tomlio.set_tables(doc, "patch", new)
    moves = {}
    for ident in gone:
        old = str(tables[ident]["file"])
        moves[old] = record_dropped(root, doc, tables[ident], dropped_at=str(doc["pin"]),
                                    reason=f"its commit was removed from checkout branch {branch!r} "
                                           "(export --allow-drop)")
    return manifest_text(doc), moves


def _write_all(root: Path, files: dict[str, str], manifest: str, *, remove: list[str],
               moves: dict[str, str], remove_trees: Sequence[str] = ()) -> list[str]:
    """The series' files, the manifest, the moves (old path -> new path) and the removals, as
    one transaction (``journal``); ``remove_trees``: directories of ``.patchtool/`` to remove with it."""
    files = dict(files)
    for src, moved in moves.items():
        text = paths.read_text_if_present(root, src)
        if text is not None:
            files.setdefault(moved, text)
    return journal.commit(root, {**files, MANIFEST_NAME: manifest}, remove=[*remove, *moves],
                          remove_trees=remove_trees)


def _pending_trees(root: Path, ids: Sequence[str]) -> list[str]:
    """Where ``new`` kept metadata for those of ``ids`` it was told about: the export that
    creates their entries removes it."""
    return [tree for i in ids if (root / (tree := metadata.pending_tree(i))).is_dir()]


def new(project: Project, cache: Cache, *, ident: str, branch: str, given: Metadata | None = None) -> str:
    """An empty commit on the checkout branch, carrying the new id and made by the user, as
    ``git commit`` would make it; export creates its entry, with the values ``given`` (checked by
    the manifest's rules first) and the skeleton's placeholders for the rest."""
    why = id_problem(ident)
    if why is not None:
        raise UsageError(why)
    given = given or Metadata()
    if given.id is not None and given.id != ident:
        raise UsageError(f"the metadata names id {given.id!r}, the new patch is {ident!r}")
    given = metadata.validate(dataclasses.replace(given, id=ident))
    if any(e.id == ident for e in project.manifest.patches):
        raise UsageError(f"a patch {ident!r} exists already")
    dropped = {d.entry.id: d for d in project.manifest.dropped}
    if ident in dropped:
        raise UsageError(f"{ident!r} is the id of a dropped patch ({dropped[ident].reason})",
                         hint="pick another id; to bring that patch back, put its commit on the branch and "
                              f"`patchtool export --revive {ident}`")
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    worktree = worktree_of(repo, names)
    if worktree is None:
        raise UsageError(f"no worktree for branch {branch!r} of this repository",
                         hint="run `patchtool checkout` first")
    author, committer = git.user_idents(worktree)
    git.Worktree(worktree).commit_empty(f"{ident}: describe the change\n\n{TRAILER}: {ident}",
                                        author=author, committer=committer)
    metadata.save_pending(project.root, ident, given)
    return str(worktree)


def export_quilt(project: Project, dest: Path) -> list[str]:
    """patches/ and patches/series in ``dest``, for packaging that expects quilt."""
    loaded = project.series()
    out = dest / "patches"
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise UsageError(f"{out} exists and is not empty; refusing to overwrite a quilt series",
                         hint="export into a new directory, or remove that one first")
    disk = fsroot.Root(dest)
    disk.directory("patches")
    names = []
    for lp in loaded:
        name = Path(lp.entry.file).name
        disk.create(f"patches/{name}", paths.read_inside(project.root, lp.entry.file))
        names.append(name)
    disk.create("patches/series", "".join(f"{n}\n" for n in names))
    return [str(out / n) for n in names] + [str(out / "series")]


def drop(project: Project, *, ident: str, reason: str, rejected: bool, knobs: Sequence[dict[str, Any]] = (),
         unguarded: str | None = None) -> list[str]:
    """Take a patch out of the series with the reason; with ``rejected``, into the registry too, guarded
    by the knobs it added and ``knobs`` (or, with none, ``unguarded``: why no knob can see it)."""
    root = project.root
    try:
        entry = project.manifest.get(ident)
    except KeyError:
        known = ", ".join(e.id for e in project.manifest.patches)
        raise UsageError(f"no patch {ident!r} in the series", hint=f"known: {known}") from None
    doc = manifest_document(root)
    index = next(i for i, t in enumerate(doc["patch"]) if str(t["id"]) == ident)
    table = tomlio.take_table(doc, "patch", index)
    moved = record_dropped(root, doc, table, reason=reason, dropped_at=str(doc["pin"]))
    extra: dict[str, str] = {}
    if rejected:
        if not entry.evidence:
            raise UsageError(f"patch {ident!r} has no evidence rows to carry into the registry",
                             hint="add [[patch.evidence]] first, or drop it without --rejected")
        rejection = rejection_from(project, ident, reason, knobs=knobs, unguarded=unguarded)
        if not rejection["knobs"] and not unguarded:
            raise UsageError(f"patch {ident!r} adds no knob, so its registry entry would be invisible: neither "
                             "`check` nor `retread scan` could ever see the idea come back",
                             hint="name what would re-introduce it (--flag, --env, --config, --pattern), or say "
                                  "why nothing can with --unguarded \"...\"")
        _, name, registry_text = retread.added(project, rejection)
        extra[name] = registry_text  # the registry entry and the drop: one transaction
    text = paths.read_inside(root, entry.file).decode("utf-8")
    return _write_all(root, {**extra, moved: text}, manifest_text(doc), remove=[entry.file], moves={})


def rejection_from(project: Project, ident: str, reason: str, *, knobs: Sequence[dict[str, Any]] = (),
                   unguarded: str | None = None) -> dict[str, Any]:
    """A registry entry for a dropped patch, with its evidence, the knobs it added and ``knobs``."""
    e = project.manifest.get(ident)
    hardware = ", ".join(e.scope.hardware) if e.scope else None
    model = ", ".join(e.scope.model) if e.scope else None
    evidence = []
    for m in e.evidence:
        row: dict[str, Any] = {"metric": m.metric}
        for key in ("before", "after", "change"):
            if getattr(m, key) is not None:
                row[key] = getattr(m, key)
        if hardware:
            row["hardware"] = m.conditions.get("hardware", hardware)
        if model:
            row["model"] = m.conditions.get("model", model)
        row["upstream"] = str(project.pin().version)
        if m.conditions:
            row["conditions"] = dict(m.conditions)
        row["source"] = m.source
        evidence.append(row)
    added = [{"type": k.type.value, "name": k.name} for k in e.knobs if k.relation.value == "adds"]
    out = {"id": ident, "title": f"patch {ident}", "tried": e.why.strip(), "verdict": "rejected",
           "reason": reason, "revisit": e.drop_when, "evidence": evidence, "knobs": added + list(knobs)}
    return out | ({"unguarded": unguarded} if unguarded else {})
