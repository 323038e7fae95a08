"""Work in the cache that no patch file carries: the commits a cleared cache would take with it.

A checkout's worktree is a git worktree of the cache's repository, so every commit made there
(on the checkout branch, on a detached HEAD as an interrupted ``git rebase -i`` leaves it, on a
branch of the user's own, in a stash, under a tag) lives only in the cache. A commit is carried
when the project it was checked out for lists, in its manifest, a patch file whose bytes are
those the commit was last exported as (or checked out from): the record of the checkout names
the commit and that file's sha256. Anything else reachable from a ref, a worktree's HEAD or a
stash, and not from patchtool's own refs (upstream's imports and sources, checkout bases), is
unexported work: ``status`` and ``rebase`` name it, ``cache clear`` and ``cache prune`` refuse to
lose it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from patchtool import git, paths
from patchtool.errors import PatchtoolError
from patchtool.git import housekeeping
from patchtool.inputs import loads_json
from patchtool.project import manifest as manifest_mod
from patchtool.upstream.namespaces import BRANCHES, REFS, project_key

# what holds the work, as ``Unexported.kind`` names it
CHECKOUT = "checkout-branch"
HEAD = "detached-head"
BRANCH = "branch"
TAG = "tag"
STASH = "stash"
REF = "ref"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Unexported:
    """Commits no patch file of their project carries, held by one ref (or HEAD, or stash entry)
    of the cache's repository: they live only there, so clearing the cache loses them."""

    kind: str  # CHECKOUT, HEAD, BRANCH, TAG, STASH or REF
    ref: str  # the full ref, ``HEAD`` (of ``worktree``) or ``stash@{N}``
    branch: str | None  # the checkout branch (CHECKOUT), as patchtool's commands name it
    root: str | None  # the repository it was checked out for, where known
    worktree: str | None
    commits: tuple[tuple[str, str], ...]  # (commit, subject), oldest first
    gone: bool = False  # its worktree's directory is gone: ``cache prune`` would forget its HEAD

    def to_dict(self) -> dict[str, Any]:
        said = {key: getattr(self, key) for key in ("kind", "ref", "branch", "root", "worktree")}
        return said | {"commits": [{"commit": c, "subject": s} for c, s in self.commits]}

    def describe(self) -> str:
        where = f" (worktree {self.worktree}{', gone' if self.gone else ''})" if self.worktree else ""
        whose = f" of {self.root}" if self.root else ""
        holder = {
            CHECKOUT: f"checkout branch {self.branch!r}{whose}{where}",
            HEAD: f"the detached HEAD of worktree {self.worktree}{', gone,' if self.gone else ''}{whose}",
            BRANCH: f"branch {self.ref.removeprefix('refs/heads/')!r}{whose}{where}",
            TAG: f"tag {self.ref.removeprefix('refs/tags/')!r}",
            STASH: f"stash entry {self.ref}",
        }.get(self.kind, f"ref {self.ref}")
        return f"{holder} holds {len(self.commits)} unexported commit(s)"


@dataclasses.dataclass(frozen=True, slots=True)
class _Holder:
    kind: str
    ref: str
    commit: str
    owner: str | None  # the project key, where known
    worktree: str | None = None
    gone: bool = False


def unexported(repo: git.Repo, key: str | None = None) -> list[Unexported]:
    """The work in the cache no patch file carries, one entry per ref (or HEAD, or stash entry)
    that holds some of it, each commit named once: by a checkout branch before a worktree's
    HEAD, another branch, a tag, a stash entry, and last the HEAD of a worktree whose directory
    is gone. With ``key``: what belongs to that project, and what no project can be told for."""
    if not (Path(repo.git_dir) / "HEAD").is_file():
        return []
    records = _records(repo)
    holders = _holders(repo, {k for k, _ in records} | _keys(repo))
    own = sorted(housekeeping.refs(repo, f"{REFS}/"))
    walked = {c.commit: c for c in repo.walk([h.commit for h in holders], own)}
    carried = _carried(records)
    work = {
        sha
        for sha, c in walked.items()
        if sha not in carried and not (not c.parents and c.committer == git.FIXED_IDENT[1])  # an import
    }
    order = {sha: i for i, sha in enumerate(walked)}  # newest first
    roots = {k: root for k, root in ((k, r.get("root")) for k, r in records) if isinstance(root, str)}
    out = []
    for h in holders:
        mine = sorted(_reach(h.commit, walked, work), key=lambda sha: -order[sha])
        if not mine or (key is not None and h.owner not in (key, None)):
            continue
        work -= set(mine)
        out.append(
            Unexported(
                kind=h.kind,
                ref=h.ref,
                branch=h.ref.removeprefix(f"refs/heads/{BRANCHES}/").partition("/")[2] if h.kind == CHECKOUT else None,
                root=roots.get(h.owner or ""),
                worktree=h.worktree,
                commits=tuple((sha, walked[sha].subject) for sha in mine),
                gone=h.gone,
            )
        )
    return out


def _reach(tip: str, walked: dict[str, git.WalkedCommit], work: set[str]) -> set[str]:
    """The commits of ``work`` that ``tip`` reaches through the walked commits."""
    found, todo, seen = set(), [tip], set()
    while todo:
        sha = todo.pop()
        if sha in seen or sha not in walked:
            continue
        seen.add(sha)
        if sha in work:
            found.add(sha)
        todo.extend(walked[sha].parents)
    return found


def _holders(repo: git.Repo, keys: set[str]) -> list[_Holder]:
    """Every ref, worktree HEAD and stash entry that may hold work, in the order ``unexported``
    names work by."""
    trees = repo.worktrees()
    checked_out = {w.branch: w for w in trees if w.branch}
    refs = _commit_refs(repo)
    checkout, branches, tags, others = [], [], [], []
    gone_refs: list[_Holder] = []
    for ref, sha in sorted(refs.items()):
        tree = checked_out.get(ref)
        owner = _owner(Path(tree.path), keys) if tree else None
        place = tree.path if tree else None
        if ref.startswith(f"refs/heads/{BRANCHES}/"):
            key = ref.removeprefix(f"refs/heads/{BRANCHES}/").partition("/")[0]
            checkout.append(_Holder(CHECKOUT, ref, sha, key, place))
        elif ref.startswith("refs/heads/"):
            branches.append(_Holder(BRANCH, ref, sha, owner, place))
        elif ref.startswith("refs/tags/"):
            tags.append(_Holder(TAG, ref, sha, None))
        elif ref != "refs/stash" and not ref.startswith(f"{REFS}/"):
            others.append(_Holder(REF, ref, sha, None))
    for ref, (sha, place) in repo.worktree_refs().items():  # refs/worktree/*, refs/bisect/* of a worktree
        alive = place is not None and Path(place).is_dir()  # else `git worktree prune` takes its refs too
        held = _Holder(REF, ref, sha, _owner(Path(place), keys) if place else None, place, gone=not alive)
        (others if alive else gone_refs).append(held)
    heads: list[_Holder] = []
    gone: list[_Holder] = []
    for w in trees[1:]:  # the first is the cache's own, bare
        if w.branch is None and w.head:
            alive = Path(w.path).is_dir()
            held = _Holder(HEAD, "HEAD", w.head, _owner(Path(w.path), keys), w.path, gone=not alive)
            (heads if alive else gone).append(held)
    stash = [_Holder(STASH, f"stash@{{{i}}}", sha, None) for i, sha in enumerate(repo.reflog("refs/stash"))]
    if not stash and "refs/stash" in refs:
        stash = [_Holder(STASH, "stash@{0}", refs["refs/stash"], None)]
    return [*checkout, *heads, *branches, *tags, *stash, *others, *gone, *gone_refs]


def _commit_refs(repo: git.Repo) -> dict[str, str]:
    """Every ref that names a commit (a tag peeled to its commit) -> that commit."""
    fields = ("refname", "objecttype", "objectname", "*objecttype", "*objectname")
    out = repo.out("for-each-ref", "--format=" + "%00".join(f"%({f})" for f in fields))
    found = {}
    for line in out.splitlines():
        ref, kind, sha, peeled_kind, peeled = (line.split("\0") + [""] * 5)[:5]
        if "commit" in (kind, peeled_kind):
            found[ref] = sha if kind == "commit" else peeled
    return found


def _keys(repo: git.Repo) -> set[str]:
    heads = housekeeping.refs(repo, f"refs/heads/{BRANCHES}/")
    return {ref.removeprefix(f"refs/heads/{BRANCHES}/").partition("/")[0] for ref in heads}


def _owner(worktree: Path, keys: set[str]) -> str | None:
    """The project a worktree is inside of (``work/BRANCH``, the default place), where known."""
    return next((key for place in (worktree, *worktree.parents) if (key := project_key(place)) in keys), None)


def _records(repo: git.Repo) -> list[tuple[str, dict[str, Any]]]:
    """(project key, record) of every checkout record the cache holds."""
    top = Path(repo.git_dir) / "patchtool" / "checkouts"
    out = []
    for path in sorted(top.rglob("*.json")) if top.is_dir() else []:
        try:
            data = loads_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, PatchtoolError):
            continue
        if isinstance(data, dict) and isinstance(data.get("patches"), list):
            out.append((path.relative_to(top).parts[0], data))
    return out


def _carried(records: Iterable[tuple[str, dict[str, Any]]]) -> set[str]:
    """The commits a record names whose patch file, with the bytes recorded, is one the manifest
    of the record's project lists now: a checkout of the project makes them again."""
    listed = functools.cache(_listed_sha256s)  # each project's manifest read once
    out = set()
    for key, record in records:
        root = record.get("root")
        if not isinstance(root, str) or project_key(Path(root)) != key:
            continue
        for p in record["patches"]:
            if isinstance(p, dict) and isinstance(p.get("commit"), str) and p.get("sha256") in listed(Path(root)):
                out.add(p["commit"])
    return out


def _listed_sha256s(root: Path) -> set[str]:
    """The sha256 of each patch file the manifest at ``root`` lists; none where it cannot be read."""
    try:
        entries = manifest_mod.load(root / manifest_mod.MANIFEST_NAME).patches
    except (OSError, PatchtoolError):
        return set()
    out = set()
    for e in entries:
        try:
            out.add(hashlib.sha256(paths.read_inside(root, e.file)).hexdigest())
        except (OSError, PatchtoolError):
            continue
    return out
