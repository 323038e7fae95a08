"""Upstream's history between two releases' tags, fetched from the repository a pin's ``[git]``
names, cheapest first, into one cache repository per url (``<cache>/history/<digest>.git``).

1. Commits alone (``--filter=tree:0``; of the two tags and every release tag the tag template
   names, each fetched by its name, within the fetch's count of refs): ancestry, the messages (the
   references a patch makes, reverts, advisory ids) and which release first has a commit.
2. Only when a question needs files: the trees of the two tags' history (``--filter=blob:none``),
   then the blobs of just the patches' files, in the commits between the tags, by their ids.
3. For a commit a patch names that is not between the tags (a fix on another branch): its own and
   its parent's trees and the blobs it changes, by id, to compare its patch-id with the range's.

Every fetch is the user's choice (``rebase --history``), bounded (``git.limits``), under the
cache's lock, and done once: a later rebase finds what it needs in the cache and fetches nothing.
The repository's url is https unless the user allowed local urls (``urls.permit``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchtool import git
from patchtool.errors import GitError, UpstreamError
from patchtool.git import memo
from patchtool.project.pins import Pin
from patchtool.upstream.cache import Cache
from patchtool.urls import SourceUrl

HISTORY_DIR = "history"
_TREES = "refs/patchtool/trees/"  # a tag whose history's trees are here: stage 2 done for it
_MOST_LISTED = 64 << 20  # of one tree's files under the prefix: some 600,000, where SGLang's has 5,000
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One ``-U0`` hunk an upstream commit made to a file: its old and new lines (1-based start,
    count), what it added and removed."""

    commit: str
    subject: str
    old: tuple[int, int]
    new: tuple[int, int]
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Section:
    """One file of one upstream commit's ``-U3`` diff: what its patch-id is computed from."""

    commit: str
    path: str
    text: str


class History:
    """The history of the repository ``url`` between the tags ``old_tag`` and ``new_tag``, in
    ``cache``. Opened by ``between``; nothing is fetched before a question needs it."""

    def __init__(self, cache: Cache, url: SourceUrl, old_tag: str, new_tag: str, template: str | None) -> None:
        self.cache, self.url, self.old_tag, self.new_tag, self.template = cache, url, old_tag, new_tag, template
        digest = hashlib.sha256(url.text.encode()).hexdigest()[:32]
        self.repo = git.Repo(cache.root / HISTORY_DIR / f"{digest}.git", ref_guard=cache.locked)
        self.fetched: list[str] = []  # what this command fetched, for the report
        self.missed: list[str] = []  # what it could not fetch and so did not check, for the report
        self._same: dict[str, list[str]] = {}
        self._messages: dict[str, str] | None = None
        self._tags: dict[str, str] | None = None

    @property
    def git_dir(self) -> Path:
        return self.repo.git_dir

    # -- stage 1: commits ----------------------------------------------------------------------
    def commits(self) -> tuple[str, str] | str:
        """The two tags' commits, fetching the commits of the tags first when one is missing (the
        two, and every release tag of the template, by name); or why there are none (the
        repository has no such tag, or could not be fetched)."""
        tags = self._tag_map()
        if self.old_tag not in tags or self.new_tag not in tags:
            with self.cache.locked():
                git.Repo.init_bare(self.git_dir)
                try:
                    listed = self.repo.remote_refs(
                        self.url, "refs/tags/", allow_local=self.cache.allow_local, limits=self.cache.fetch_limits
                    )
                    if wanted := sorted(t for t in listed if t in (self.old_tag, self.new_tag) or self._release(t)):
                        self._fetch([f"+refs/tags/{t}:refs/tags/{t}" for t in wanted], "tree:0")
                except GitError as exc:
                    raise UpstreamError(
                        f"could not fetch upstream's history from {self.url}: {exc}",
                        hint="check the network and the pin's [git] url, or rebase without --history",
                    ) from None
            self.fetched.append(f"the commits of {len(wanted)} tag(s) of {self.url} (--filter=tree:0)")
            self._tags = None
            tags = self._tag_map()
        if missing := [t for t in dict.fromkeys((self.old_tag, self.new_tag)) if t not in tags]:
            return f"{self.url} has no tag {' or '.join(missing)}"
        return tags[self.old_tag], tags[self.new_tag]

    def _tag_map(self) -> dict[str, str]:
        if self._tags is None:
            self._tags = self.repo.tags() if (self.git_dir / "HEAD").is_file() else {}
        return self._tags

    def messages(self) -> dict[str, str]:
        """Every commit between the tags (sha -> message), newest first."""
        if self._messages is None:
            found = self.commits()
            if isinstance(found, str):
                return {}
            self._messages = dict(self.repo.messages(*found))
        return self._messages

    def full(self, commit: str) -> str | None:
        """The commit between the tags that ``commit`` (an id, maybe short) names, or None."""
        commit = commit.lower()
        hits = [sha for sha in self.messages() if sha.startswith(commit)]
        return hits[0] if len(hits) == 1 else None

    def subject(self, sha: str) -> str:
        return self.messages().get(sha, "").partition("\n")[0]

    def release_of(self, sha: str) -> str:
        """The first release (by the tag template, its version) between the tags that has ``sha``;
        the target's tag when no template names the releases."""
        found = self.commits()
        if isinstance(found, str) or self.template is None:
            return self.new_tag
        releases = [
            (version, commit)
            for name, commit in self._tag_map().items()
            if (version := self._release(name)) is not None
        ]
        old = next((v for v, c in releases if c == found[0]), None)
        for version, commit in sorted(releases):
            if (old is None or version > old) and (commit == sha or self.repo.is_ancestor(sha, commit)):
                return str(version)
        return self.new_tag

    def _release(self, name: str) -> Version | None:
        """The version a tag ``name`` is the release of, by the tag template; None for any other tag."""
        if self.template is None:
            return None
        prefix, _, suffix = self.template.partition("{version}")
        if not (name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix)):
            return None
        try:
            return Version(name[len(prefix) : len(name) - len(suffix)])
        except InvalidVersion:
            return None

    # -- stage 2: the patches' files -------------------------------------------------------------
    def _files(self, paths: Sequence[str]) -> tuple[str, str] | None:
        """The tags' commits, with the trees of their history and the blobs of ``paths`` in the
        commits between them fetched when missing; None where the tags are not there."""
        found = self.commits()
        if isinstance(found, str):
            return None
        old, new = found
        if self.repo.resolve(f"{_TREES}{new}") != new or self.repo.resolve(f"{_TREES}{old}") != old:
            with self.cache.locked():
                self._fetch(
                    [f"+refs/tags/{t}:refs/tags/{t}" for t in (self.old_tag, self.new_tag)], "blob:none", refetch=True
                )
                for commit in (old, new):
                    self.repo.update_ref(f"{_TREES}{commit}", commit)
            self.fetched.append(f"the trees of {self.old_tag} and {self.new_tag} (--filter=blob:none)")
        key = hashlib.sha256("\0".join([old, new, *sorted(set(paths))]).encode()).hexdigest()
        if memo.recall(self.git_dir, "history-blobs", key) is not True:
            # fetched by id, never looked up first: git fetches a missing object it reads in a partial clone
            blobs = self.repo.changed_blobs(old, new, paths)
            blobs |= {blob for _, blob in self.repo.entries(self.repo.tree_of(old), list(paths)).values()}
            if blobs:
                with self.cache.locked():
                    self._fetch(sorted(blobs), None, by_id=True)
                self.fetched.append(f"the {len(blobs)} blob(s) of the patches' files between the tags")
            memo.remember(self.git_dir, "history-blobs", key, True)
        return old, new

    def changes(self, paths: Sequence[str]) -> dict[str, list[Change]]:
        """Each path's ``-U0`` hunks of every commit between the tags that changed it, oldest
        first: one ``git log -p -U0`` over all of ``paths``."""
        if (found := self._files(paths) if paths else None) is None:
            return {}
        out: dict[str, list[Change]] = {}
        for section in _sections(self.repo.log_patches(*found, sorted(set(paths)), context=0)):
            out.setdefault(section.path, []).extend(_hunks(section, self.subject(section.commit)))
        return out

    def sections(self, paths: Sequence[str]) -> list[Section]:
        """Each file's ``-U3`` diff of every commit between the tags that changed ``paths``."""
        if (found := self._files(paths) if paths else None) is None:
            return []
        return _sections(self.repo.log_patches(*found, sorted(set(paths))))

    # -- a named commit outside the range ----------------------------------------------------------
    def outside(self, commit: str) -> str | None:
        """The commit ``commit`` (an id, maybe short) names where the cache has it (the commits of
        every tag) but it is not between the tags nor in the pin's release: a fix made on another
        branch, or released later; None otherwise, or for a merge or a root commit."""
        found = self.commits()
        if isinstance(found, str) or self.full(commit) is not None:
            return None
        sha = self.repo.resolve(commit)
        if sha is None or self.repo.resolve(f"{sha}^") is None or self.repo.resolve(f"{sha}^2") is not None:
            return None
        return None if self.repo.is_ancestor(sha, found[1]) else sha

    def same_change(self, commit: str) -> list[str]:
        """The commits between the tags that make ``commit``'s change (a commit from ``outside``):
        each file it changes with the same ``git patch-id --stable``, as ``git cherry`` matches a
        cherry-pick. Fetched when missing, by id: its and its parent's trees (``--filter=blob:none``)
        and the blobs it changes; then the blobs of those files between the tags. A fetch that
        fails leaves the question unanswered ([]), said in ``missed``."""
        if commit not in self._same:
            try:
                self._same[commit] = self._same_change(commit)
            except GitError as exc:
                self.missed.append(f"the files of {commit[:12]}, to compare its patch-id: {exc}")
                self._same[commit] = []
        return self._same[commit]

    def _same_change(self, commit: str) -> list[str]:
        parent, mine = self.repo.commit_info(f"{commit}^"), self.repo.commit_info(commit)
        if parent is None or mine is None:
            return []
        if memo.recall(self.git_dir, "history-outside", commit) is not True:
            # fetched by id, never looked up first: reading a missing object of a partial clone is fatal to git
            with self.cache.locked():
                self._fetch([parent[1], mine[1]], "blob:none", by_id=True)
                self.fetched.append(f"the trees of {commit[:12]} and its parent (--filter=blob:none)")
                if blobs := sorted(self.repo.changed_blobs(parent[0], commit, ())):
                    self._fetch(blobs, None, by_id=True)
                    self.fetched.append(f"the {len(blobs)} blob(s) {commit[:12]} changes")
            memo.remember(self.git_dir, "history-outside", commit, True)
        if not (own := _sections(self.repo.log_patches(parent[0], commit, ()))):
            return []
        theirs = self.sections(sorted({s.path for s in own}))
        ids = self.patch_ids([s.text for s in own] + [s.text for s in theirs])
        wanted = {s.path: pid for s, pid in zip(own, ids[: len(own)], strict=True)}
        got: dict[str, dict[str, str]] = {}
        for s, pid in zip(theirs, ids[len(own) :], strict=True):
            got.setdefault(s.commit, {})[s.path] = pid
        return [sha for sha, pids in got.items() if all(pids.get(p) == pid for p, pid in wanted.items())]

    def _fetch(self, wanted: Sequence[str], filter: str | None, *, refetch: bool = False, by_id: bool = False) -> None:
        """Fetch ``wanted`` (refspecs, or object ids ``by_id`` into the partial clone) from the url."""
        self.repo.fetch(
            self.url,
            list(wanted),
            allow_local=self.cache.allow_local,
            limits=self.cache.fetch_limits,
            filter=filter,
            refetch=refetch,
            partial=by_id,
            by_id=by_id,
        )

    def patch_ids(self, texts: Sequence[str]) -> list[str]:
        """``git patch-id --stable`` of each of ``texts`` (one file's diff each; "" for none)."""
        stream = "".join(f"commit {n:040x}\n\n{text}" for n, text in enumerate(texts))
        got = {int(sha, 16): pid for pid, sha in self.repo.patch_ids(stream)} if stream else {}
        return [got.get(n, "") for n in range(len(texts))]


def _sections(log: str) -> list[Section]:
    """``log_patches`` output cut into one section per commit and file."""
    out: list[Section] = []
    commit = ""
    current: list[str] = []
    path = ""

    def close() -> None:
        if current and path:
            out.append(Section(commit=commit, path=path, text="".join(current)))

    lines = iter(log.splitlines(keepends=True))
    for line in lines:
        if line.startswith("commit ") and len(line.strip()) == 47:
            close()
            current, path = [], ""
            commit = line.split()[1]
            next(lines, None)  # the subject line
        elif line.startswith("diff --git "):
            close()
            current, path = [line], ""
        elif current:
            current.append(line)
            if line.startswith("+++ ") or (line.startswith("--- ") and not path):
                name = line[4:].rstrip("\n")
                if name != "/dev/null":
                    path = name[2:] if name[:2] in ("a/", "b/") else name
    close()
    return out


def _hunks(section: Section, subject: str) -> list[Change]:
    found: list[tuple[re.Match[str], list[str], list[str]]] = []  # each hunk's head, added and removed lines
    for line in section.text.splitlines():
        if m := _HUNK.match(line):
            found.append((m, [], []))
        elif found and line.startswith("+"):
            found[-1][1].append(line[1:])
        elif found and line.startswith("-"):
            found[-1][2].append(line[1:])
    return [
        Change(
            commit=section.commit,
            subject=subject,
            old=(int(m.group(1)), int(m.group(2) or "1")),
            new=(int(m.group(3)), int(m.group(4) or "1")),
            added=tuple(added),
            removed=tuple(removed),
        )
        for m, added, removed in found
    ]


def unknown_tag(cache: Cache, pin: Pin) -> str | None:
    """What the history in the cache says against the tag of an artifact pin's ``[git]``: the
    repository has no such tag, even after the commits of every tag are fetched again (a release
    tagged since), or they could not be; None where the tag is there, and where the cache holds no
    history of that repository (nothing is fetched for one the user never asked history of)."""
    if (src := pin.git) is None or pin.use != "artifact":
        return None
    history = History(cache, src.url, src.tag, src.tag, src.template)
    if not (history.git_dir / "HEAD").is_file():
        return None
    try:
        found = history.commits()
    except UpstreamError as exc:
        return f"tag {src.tag} not checked: {exc.message}"
    if isinstance(found, str):
        spelt = f' (tag = "{src.template}")' if src.template else ""
        return f"{found}{spelt}: `rebase --history` will not find this release's history"
    return None


def tag_differs(cache: Cache, pin: Pin, tree: str, touched: Collection[str], *, shown: int = 5) -> str | None:
    """How the tree of the tag an artifact pin's ``[git]`` names differs from the artifact's
    ``tree`` (as the cache imported it) under the pin's prefix mapping: the files whose content
    differs (those the series touches first), those only in the tag and those only in the
    artifact; None where they agree, and where the cache holds no trees of that tag (a rebase
    with --history fetches them; nothing is fetched here)."""
    src, artifact = pin.git, pin.artifact
    if src is None or artifact is None or pin.use != "artifact":
        return None
    history = History(cache, src.url, src.tag, src.tag, src.template)
    commit = history._tag_map().get(src.tag)
    if commit is None or history.repo.resolve(f"{_TREES}{commit}") != commit:
        return None
    prefix = artifact.prefix_to
    tagged = history.repo.blobs_under(commit, prefix, most=_MOST_LISTED)
    imported = cache.repo.blobs_under(tree, prefix, most=_MOST_LISTED)
    if tagged is None or imported is None:
        too_many = f"a tree lists more than {_MOST_LISTED} bytes of files"
        return f"tag {src.tag} not compared with {artifact.filename}: {too_many}"
    differ = sorted(p for p in tagged.keys() & imported.keys() if tagged[p] != imported[p])
    differ.sort(key=lambda p: p not in touched)  # stable: the series' files first, each part in path order
    touching = sum(p in touched for p in differ)
    groups = [
        (differ, "differ", f", {touching} of them patched by the series" if touching else ""),
        (sorted(tagged.keys() - imported.keys()), "only in the tag", ""),
        (sorted(imported.keys() - tagged.keys()), "only in the artifact", ""),
    ]
    parts = [
        f"{len(paths)} file(s) {what} ({', '.join(paths[:shown])}"
        + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
        + f"){note}"
        for paths, what, note in groups
        if paths
    ]
    if not parts:
        return None
    mapping = f"{artifact.prefix_from or '(the top)'} -> {prefix or '(the top)'}"
    return (
        f"tag {src.tag} of {src.url} and {artifact.filename} differ beyond the prefix mapping ({mapping}): "
        f"{'; '.join(parts)}: history's verdicts on those files read the tag, not the artifact"
    )


def between(cache: Cache, old_pin: Pin, new_pin: Pin) -> History | str:
    """Upstream's history between the two pins' releases, or why there is none to ask: a pin
    without ``[git]``, or a tag that does not spell its version."""
    if (src := old_pin.git or new_pin.git) is None:
        return f"pin {old_pin.name} names no upstream repository ([git] url)"
    old_tag = old_pin.git.tag if old_pin.git else src.tag_for(old_pin.version, new_pin.version)
    new_tag = (
        new_pin.git.tag
        if new_pin.git and (new_pin.git.commit or new_pin.git.template or new_pin.use == "git")
        else src.tag_for(new_pin.version, old_pin.version)
    )
    if old_tag is None or new_tag is None:
        return f'the tag of {new_pin.version} is unknown: give the pin\'s [git] a tag template (tag = "v{{version}}")'
    return History(cache, src.url, old_tag, new_tag, src.generalised(old_pin.version))
