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
from pathlib import Path
from typing import Any

import tomlkit

from . import git, journal, retread, tomlio
from .errors import PatchtoolError, UsageError
from .fields import _ident
from .manifest import MANIFEST_NAME, PLACEHOLDER
from .project import PATCHES_DIR, LoadedPatch, Project, manifest_document, manifest_text, record_dropped
from .series import apply_series
from .upstream import Cache

TRAILER = "Patchtool-Id"
WORK_DIR = "work"
_TRAILER_RE = re.compile(rf"^{TRAILER}:\s*(\S+)\s*$", re.MULTILINE)


def commit_message(lp: LoadedPatch) -> str:
    return lp.patch.message.rstrip("\n") + f"\n\n{TRAILER}: {lp.id}\n"


def _branch_ref(branch: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", branch) or ".." in branch:
        raise UsageError(f"{branch!r} is not a usable branch name")
    return f"refs/heads/{branch}"


def _base_ref(branch: str) -> str:
    return f"refs/patchtool/base/{branch}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checkout:
    branch: str
    worktree: str
    base: str
    commits: tuple[tuple[str, str], ...]  # (patch id, commit)

    def to_dict(self) -> dict[str, Any]:
        return {"branch": self.branch, "worktree": self.worktree, "base": self.base,
                "commits": [{"id": i, "commit": c} for i, c in self.commits]}


def checkout(project: Project, cache: Cache, *, pin_name: str | None, branch: str,
             path: Path | None) -> Checkout:
    pin = project.pin(pin_name)
    loaded = project.series()
    base = cache.ensure(pin)
    repo = cache.repo
    ref = _branch_ref(branch)
    if repo.resolve(ref) is not None:
        raise UsageError(f"branch {branch!r} already exists in the cache",
                         hint=f"export it (`patchtool export --branch {branch}`) or pick another --branch")
    result = apply_series(repo, base.commit, loaded, commit=True, message=commit_message)
    if not result.ok or result.tip is None:
        failed = result.failed
        raise PatchtoolError(f"the series does not apply at {pin.name} ({failed.id if failed else '?'})",
                             hint="run `patchtool check`")
    where = (path or project.root / WORK_DIR / branch).absolute()
    if where.exists() and any(where.iterdir()):
        raise UsageError(f"{where} exists and is not empty", hint="pass --path")
    exclude = repo.git_dir / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    if "__pycache__/" not in (exclude.read_text() if exclude.exists() else ""):
        with open(exclude, "a") as fh:
            fh.write("__pycache__/\n*.pyc\n")
    repo.update_ref(ref, result.tip, "")
    repo.update_ref(_base_ref(branch), base.commit)
    repo.git("worktree", "prune", check=False)
    repo.git("worktree", "add", "--quiet", str(where), branch)
    return Checkout(branch=branch, worktree=str(where), base=base.commit,
                    commits=tuple((r.id, r.commit or "") for r in result.results))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExportResult:
    branch: str
    patches: tuple[dict[str, str], ...]  # id, file, change ("unchanged", "refreshed", "new", "renamed")
    dropped: tuple[str, ...]
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _worktree_of(repo: git.Repo, branch: str) -> Path | None:
    listing = repo.out("worktree", "list", "--porcelain").split("\n\n")
    for block in listing:
        lines = dict(line.split(" ", 1) for line in block.splitlines() if " " in line)
        if lines.get("branch") == f"refs/heads/{branch}":
            return Path(lines["worktree"])
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "patch"


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


def export(project: Project, cache: Cache, *, branch: str, allow_drop: bool) -> ExportResult:
    repo = cache.repo
    root = project.root
    tip = repo.resolve(_branch_ref(branch))
    base = repo.resolve(_base_ref(branch))
    if tip is None or base is None:
        raise UsageError(f"no checkout branch {branch!r}", hint="create one with `patchtool checkout`")
    pin_base = cache.ensure(project.pin()).commit
    if base != pin_base:
        raise UsageError(f"branch {branch!r} was checked out on another pin than {project.manifest.pin}",
                         hint="check out again on the current pin")
    worktree = _worktree_of(repo, branch)
    if worktree is not None:
        dirty = git.run(["git", "status", "--porcelain"], cwd=worktree).stdout.decode().strip()
        if dirty:
            raise UsageError(f"the worktree {worktree} has uncommitted changes:\n{dirty}",
                             hint="commit (or stash) them first; export writes only commits")
    if repo.git("merge-base", "--is-ancestor", base, tip, check=False).returncode != 0:
        raise UsageError(f"branch {branch!r} does not contain the pinned base {base[:12]}: a commit sits "
                         "below the base or the branch was rebased elsewhere",
                         hint="rebase the branch back onto the pin's base")
    rows = repo.out("rev-list", "--reverse", "--parents", f"{base}..{tip}").splitlines()
    entries = {e.id: e for e in project.manifest.patches}
    order: list[tuple[str, str, bool]] = []  # (id, commit, known)
    for row in rows:
        commit, *parents = row.split()
        subject = repo.out("log", "-1", "--format=%s", commit)
        if len(parents) != 1:
            raise UsageError(f"commit {commit[:12]} ({subject}) is a merge commit; a series is linear",
                             hint="rebase the branch to drop the merge (git rebase -i)")
        message = repo.commit_message(commit)
        found = _TRAILER_RE.findall(message)
        ident = found[-1] if found else _unique(_slug(subject), entries, order)
        if any(i == ident for i, _, _ in order):
            raise UsageError(f"two commits carry {TRAILER}: {ident}",
                             hint="each patch is one commit: squash them or change one trailer")
        order.append((ident, commit, ident in entries))
    kept = {i for i, _, _ in order}
    gone = [e.id for e in project.manifest.patches if e.id not in kept]
    if gone and not allow_drop:
        raise UsageError(f"patch(es) {', '.join(gone)} have no commit on {branch!r} any more; refusing to "
                         "delete them silently",
                         hint="record it: `patchtool drop ID --reason ...`, or export with --allow-drop")
    files: dict[str, str] = {}
    rows_out: list[dict[str, str]] = []
    for position, (ident, commit, known) in enumerate(order, 1):
        text = export_commit(repo, commit)
        slug = re.sub(r"^\d+-", "", Path(entries[ident].file).stem) if known else _slug(ident)
        name = f"{PATCHES_DIR}/{position:04d}-{slug}.patch"
        old = entries[ident].file if known else None
        previous = (root / old).read_text(encoding="utf-8") if old and (root / old).exists() else None
        change = "new" if not known else "unchanged" if previous == text and old == name else \
            "renamed" if previous == text else "refreshed"
        files[name] = text
        rows_out.append({"id": ident, "file": name, "change": change})
    manifest, moves = _export_manifest(root, [(i, k) for i, _, k in order],
                                       {r["id"]: r["file"] for r in rows_out}, gone, branch)
    written = _write_all(root, files, manifest, remove=[entries[i].file for i in gone] +
                         [entries[r["id"]].file for r in rows_out
                          if r["change"] != "new" and entries[r["id"]].file != r["file"]],
                         moves=moves)
    return ExportResult(branch=branch, patches=tuple(rows_out), dropped=tuple(gone), written=tuple(written))


def _unique(base: str, entries: dict[str, Any], order: list[tuple[str, str, bool]]) -> str:
    taken = set(entries) | {i for i, _, _ in order}
    ident, n = base, 2
    while ident in taken:
        ident, n = f"{base}-{n}", n + 1
    return ident




def skeleton(ident: str, file: str) -> Any:
    """A new entry that parses but that `check` refuses until every TODO is replaced."""
    t = tomlkit.table()
    t.add("id", ident)
    t.add("file", file)
    t.add("kind", "correctness")
    t.add("owner", f"{PLACEHOLDER}: who maintains it")
    t.add("why", f"{PLACEHOLDER}: why the patch exists")
    t.add("applies_to", ">=0")  # a specifier must parse; check still demands the TODOs above
    t.add("drop_when", f"{PLACEHOLDER}: when to drop it")
    t.add("upstream", tomlio.inline_table({"status": "pending"}))
    return t


def _export_manifest(root: Path, order: list[tuple[str, bool]], files: dict[str, str], gone: list[str],
                     branch: str) -> tuple[str, dict[str, str]]:
    """The manifest for the exported series, and where each gone patch's file moves."""
    text = (root / MANIFEST_NAME).read_text(encoding="utf-8")
    doc = manifest_document(root)
    tables = {str(t["id"]): t for t in doc.get("patch", [])}
    current = [str(t["id"]) for t in doc.get("patch", [])]
    wanted = [i for i, _ in order]
    unchanged = current == wanted and all(str(tables[i]["file"]) == files[i] for i in wanted) and not gone
    if unchanged:
        return text, {}
    new = []
    for ident, known in order:
        table = tables[ident] if known else skeleton(ident, files[ident])
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
               moves: dict[str, str]) -> list[str]:
    """The series' files, the manifest, the moves (old path -> new path) and the removals, as
    one transaction (``journal``)."""
    files = dict(files)
    for src, moved in moves.items():
        if (root / src).exists():
            files.setdefault(moved, (root / src).read_text(encoding="utf-8"))
    return journal.commit(root, {**files, MANIFEST_NAME: manifest}, remove=[*remove, *moves])


def new(project: Project, cache: Cache, *, ident: str, branch: str) -> str:
    """An empty commit on the checkout branch, carrying the new id; export creates its entry."""
    try:
        _ident(ident)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(e.id == ident for e in project.manifest.patches):
        raise UsageError(f"a patch {ident!r} exists already")
    repo = cache.repo
    worktree = _worktree_of(repo, branch)
    if worktree is None:
        raise UsageError(f"no worktree for branch {branch!r}", hint="run `patchtool checkout` first")
    git.run(["git", "commit", "--allow-empty", "-q", "-m", f"{ident}: describe the change\n\n{TRAILER}: {ident}"],
            cwd=worktree, env={"GIT_AUTHOR_NAME": "patchtool", "GIT_AUTHOR_EMAIL": "patchtool@localhost",
                               "GIT_COMMITTER_NAME": "patchtool", "GIT_COMMITTER_EMAIL": "patchtool@localhost"})
    return str(worktree)


def export_quilt(project: Project, dest: Path) -> list[str]:
    """patches/ and patches/series in ``dest``, for packaging that expects quilt."""
    loaded = project.series()
    out = dest / "patches"
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise UsageError(f"{out} exists and is not empty; refusing to overwrite a quilt series",
                         hint="export into a new directory, or remove that one first")
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for lp in loaded:
        name = Path(lp.entry.file).name
        (out / name).write_bytes(lp.path.read_bytes())
        names.append(name)
    (out / "series").write_text("".join(f"{n}\n" for n in names))
    return [str(out / n) for n in names] + [str(out / "series")]


def drop(project: Project, *, ident: str, reason: str, rejected: bool) -> list[str]:
    """Take a patch out of the series with the reason; with ``rejected``, into the registry too."""
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
        _, name, registry_text = retread.added(project, rejection_from(project, ident, reason))
        extra[name] = registry_text  # the registry entry and the drop: one transaction
    text = (root / entry.file).read_text(encoding="utf-8")
    return _write_all(root, {**extra, moved: text}, manifest_text(doc), remove=[entry.file], moves={})


def rejection_from(project: Project, ident: str, reason: str) -> dict[str, Any]:
    """A registry entry for a dropped patch, with its evidence and the knobs it added."""
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
    knobs = [{"type": k.type.value, "name": k.name} for k in e.knobs if k.relation.value == "adds"]
    return {"id": ident, "title": f"patch {ident}", "tried": e.why.strip(), "verdict": "rejected",
            "reason": reason, "revisit": e.drop_when, "evidence": evidence, "knobs": knobs}
