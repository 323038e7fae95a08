"""``patchtool import``: patches from git format-patch files, a GitHub pull-request ``.patch``
(several messages in one file), a plain diff (given a subject) or a quilt ``series`` directory,
each checked against the pin and added with the metadata given and a skeleton for the rest."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchtool import git
from patchtool.diff.model import lines_of
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import ApplyConflict, InvalidInput, UsageError
from patchtool.inputs import read_named_text
from patchtool.paths import read_inside, read_text_if_present
from patchtool.project import tomlio
from patchtool.project.repository import PATCHES_DIR, Project, manifest_document, manifest_text
from patchtool.series import metadata
from patchtool.series.apply import Outcome, PatchResult, SeriesResult, apply_series, diagnose
from patchtool.series.editing import _slug, _unique, _write_all
from patchtool.series.metadata import Metadata, skeleton
from patchtool.upstream import refnames
from patchtool.upstream.cache import Cache

_MBOX_FROM = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
_GITHUB_PULL = re.compile(r"^https://github\.com/[^/]+/[^/]+/pull/\d+")
_GITHUB_COMMIT = re.compile(r"^https://github\.com/[^/]+/[^/]+/commit/([0-9a-f]{7,40})")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Incoming:
    source: str  # where it came from, for messages
    text: str  # format-patch text
    upstream: dict[str, str]  # what its source says (a URL, DEP-3 Origin); pending when nothing does
    commit: str | None = None  # its format-patch 'From <sha>' line: a backport when upstream has it


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Authorship:
    """For sources that carry none: a plain diff (``subject`` needed), a quilt patch without an
    author header. ``identity``: the user's own ``Name <email>``, asked only when needed."""

    author: str | None = None
    subject: str | None = None
    identity: Callable[[], str] = dataclasses.field(default=lambda: _no_identity())

    def who(self) -> str:
        return self.author or self.identity()


def _no_identity() -> str:
    raise UsageError("the patch names no author", hint="give an author ('Name <email>')")


_AUTHOR = re.compile(r"^[^<>\n]*[^<>\s][^<>\n]*<[^<>\s]+>$")


def check_authorship(author: str | None, subject: str | None) -> None:
    """UsageError unless ``author`` is ``Name <email>`` and ``subject`` one line of text."""
    if author is not None and not _AUTHOR.match(author.strip()):
        raise UsageError(f"author {author!r} is not 'Name <email>'", hint="e.g. 'Maria Rossi <maria@example.org>'")
    if subject is not None and (not subject.strip() or "\n" in subject.strip()):
        raise UsageError(f"subject {subject!r} is not one line of text")


def _format(author: str, subject: str, body: str, diff: str) -> str:
    head = f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: {author}\n"
    head += f"Subject: [PATCH] {subject}\n\n"
    if body.strip():
        head += body.strip("\n") + "\n\n"
    return head + diff


def _status_for(url: str | None) -> dict[str, str]:
    if url and _GITHUB_PULL.match(url):
        return {"status": "submitted", "url": url}
    if url and (m := _GITHUB_COMMIT.match(url)):
        return {"status": "backport", "ref": m.group(1)}
    if url:
        return {"status": "submitted", "url": url} if url.startswith("http") else {"status": "pending"}
    return {"status": "pending"}


def read_sources(paths: list[Path], url: str | None, who: Authorship | None = None) -> list[Incoming]:
    """Every patch in ``paths`` (format-patch files, pull-request ``.patch`` files, plain diffs,
    quilt directories) as format-patch text, in order."""
    who = who or Authorship()
    out: list[Incoming] = []
    for path in paths:
        if path.is_dir():
            out += _read_quilt(_quilt_dir(path), who)
            continue
        try:
            text = read_named_text(path, what="the patch")
        except FileNotFoundError:
            raise UsageError(f"{path} does not exist", file=str(path)) from None
        out += _read_file(str(path), text, url, who)
    return out


def _read_file(source: str, text: str, url: str | None, who: Authorship) -> list[Incoming]:
    starts = [m.start() for m in _MBOX_FROM.finditer(text)]
    if starts:
        out = []
        for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
            message = text[a:b]
            sha = _MBOX_FROM.match(message)
            out.append(Incoming(source=source, text=message, upstream=_status_for(url),
                                commit=sha.group(1) if sha and url is None else None))
        return out
    diff = _plain_diff(text)
    if diff is None:
        raise InvalidInput(f"{source}: not a git format-patch file (no 'From <sha> Mon Sep 17' line) and no diff",
                           file=source, hint="export it with git format-patch, or import a quilt directory")
    if who.subject is None:
        raise UsageError(f"{source} is a plain diff: it has no author or subject of its own",
                         hint="give it a subject (and an author, or it is yours)")
    return [Incoming(source=source, text=_format(who.who(), who.subject.strip(), "", diff),
                     upstream=_status_for(url))]


def _plain_diff(text: str) -> str | None:
    """The diff in ``text`` (`git diff`, `diff -u`) with git's headers, or None when it has none."""
    m = re.search(r"^(?:diff --git |--- |Index: )", text, re.MULTILINE)
    if not m:
        return None
    diff = text[m.start():]
    return diff if diff.startswith("diff --git ") else _to_git_diff(diff)


_DEP3 = re.compile(r"^(Description|Subject|Author|From|Origin|Forwarded|Bug|Last-Update|Applied-Upstream)"
                   r":\s*(.*)$", re.IGNORECASE)


def dep3_fields(header: str) -> dict[str, str]:
    """The DEP-3 fields of a patch header (the first of each, by lower-case name), with their
    continuation lines (a leading space; a line of " ." is an empty line) joined by newlines."""
    fields: dict[str, str] = {}
    current: str | None = None
    for line in lines_of(header, keepends=False):
        hm = _DEP3.match(line)
        if hm:
            name = hm.group(1).lower()
            current = None if name in fields else name
            if current is not None:
                fields[current] = hm.group(2).strip()
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            more = line[1:].rstrip()
            fields[current] += "\n" + ("" if more.strip() == "." else more)
        else:
            current = None
    return fields


def _quilt_dir(path: Path) -> Path:
    """The directory with the quilt ``series`` file: ``path``, or ``path/patches`` as
    ``export --quilt`` (and quilt itself) lays it out."""
    for directory in (path, path / "patches"):
        if os.path.lexists(directory / "series"):  # read_inside says what it is when it is no regular file
            return directory
    raise UsageError(f"{path} has no quilt 'series' file (nor patches/series)", file=str(path))


def _read_quilt(directory: Path, who: Authorship) -> list[Incoming]:
    out = []
    series = read_text_if_present(directory, "series") or ""
    for line in lines_of(series, keepends=False):
        name = line.split("#", 1)[0].strip().split()
        if not name:
            continue
        if any(opt.startswith("-p") and opt not in ("-p1", "-p", "-pab") for opt in name[1:]):
            raise UsageError(f"{directory / name[0]}: only -p1 quilt patches can be imported")
        source = str(directory / name[0])
        text = read_inside(directory, name[0]).decode("utf-8")
        if _MBOX_FROM.match(text):  # a format-patch file, as `export --quilt` writes them
            out += _read_file(source, text, None, who)
            continue
        out.append(_quilt_patch(source, Path(name[0]).stem, text, who))
    return out


def _quilt_patch(source: str, stem: str, text: str, who: Authorship) -> Incoming:
    """One quilt patch: its DEP-3 header (author, description, origin) and its diff."""
    m = re.search(r"^(?:diff --git |--- |Index: )", text, re.MULTILINE)
    if not m:
        raise InvalidInput(f"{source}: no diff found", file=source)
    header, diff = text[:m.start()], text[m.start():]
    fields = dep3_fields(header)
    if not diff.startswith("diff --git "):
        diff = _to_git_diff(diff)
    author = fields.get("author") or fields.get("from") or who.who()
    if "<" not in author:
        author = f"{author} <unknown@localhost>"
    description = (fields.get("description") or fields.get("subject") or "").strip() or stem
    subject, _, body = description.partition("\n")
    forwarded = fields.get("forwarded", "")
    origin = fields.get("origin", "")
    url = forwarded if forwarded.startswith("http") else origin.split(",")[-1].strip() \
        if origin.startswith(("upstream", "backport")) else None
    status = _status_for(url)
    if origin.lower().startswith(("upstream", "backport")) and status["status"] == "pending":
        status = {"status": "backport", "ref": origin}
    return Incoming(source=source, text=_format(author, subject, body, diff), upstream=status)


def _to_git_diff(diff: str) -> str:
    """A plain unified diff (quilt's usual output) with 'diff --git' headers added per file."""
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("Index: ") or line.startswith("====="):
            continue
        if line.startswith(("--- ", "+++ ")):
            path = line[4:].split("\t", 1)[0].strip()
            if path == "/dev/null":
                out.append(line)
                continue
            rel = path.split("/", 1)[1] if "/" in path else path  # quilt's -p1
            if line.startswith("--- "):
                out.append(f"diff --git a/{rel} b/{rel}\n")
                out.append(f"--- a/{rel}\n")
            else:
                out.append(f"+++ b/{rel}\n")
            continue
        out.append(line)
    return "".join(out)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImportResult:
    added: tuple[dict[str, str], ...]
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def import_patches(project: Project, cache: Cache, paths: list[Path], *, url: str | None = None,
                   given: Metadata | None = None, author: str | None = None,
                   subject: str | None = None) -> ImportResult:
    """Add the patches in ``paths`` after the series, each applied at the pin first (nothing is
    written unless all apply). ``given``: metadata for the new entries (its id only when there is
    one patch); ``author``/``subject``: for sources that carry none (default author: you)."""
    given = metadata.validate(given or Metadata())
    check_authorship(author, subject)
    incoming = read_sources(paths, url, Authorship(author=author, subject=subject,
                                                   identity=lambda: user_identity(project.root)))
    if given.id is not None and len(incoming) != 1:
        raise UsageError(f"an id names one patch, and {len(incoming)} are being imported",
                         hint="import them one at a time to name each, or let their subjects name them")
    # a dropped id stays taken: an import never revives it behind the registry's back
    entries = {e.id: e for e in project.manifest.patches} | {d.entry.id: d.entry for d in project.manifest.dropped}
    if given.id is not None and given.id in entries:
        raise UsageError(f"a patch {given.id!r} exists already"
                         + (" (dropped)" if given.id not in {e.id for e in project.manifest.patches} else ""))
    pin = project.pin()
    base = cache.ensure(pin)
    repo = cache.repo
    chain = apply_series(repo, base.commit, project.series(), commit=True)
    if not chain.ok or chain.tip is None:
        raise UsageError("the series does not apply at its pin; fix that first", hint="patchtool check")
    parent = chain.tip
    order: list[tuple[str, str, bool]] = [(e.id, "", True) for e in project.manifest.patches]
    files: dict[str, str] = {}
    added = []
    for item in incoming:
        patch = PatchFile.parse(item.text, name=item.source)
        tree = _applied(repo, parent, item, patch, pin.name, base.commit)
        parent = repo.commit_tree(tree, [parent], patch.message,
                                  author=git.Ident(patch.author_name, patch.author_email, 0),
                                  committer=git.Ident(*git.FIXED_IDENT, 0))
        ident = given.id or _unique(_slug(patch.subject), entries, order)
        order.append((ident, parent, False))
        name = f"{PATCHES_DIR}/{len(order):04d}-{_slug(ident)}.patch"
        files[name] = repo.format_patch(parent)
        added.append({"id": ident, "file": name, "source": item.source,
                      **{f"upstream_{k}": v for k, v in _upstream(repo, item).items()}})
    doc = manifest_document(project.root)
    for row in added:
        table = skeleton(row["id"], row["file"], given)
        table["upstream"] = tomlio.inline_table({k.removeprefix("upstream_"): v for k, v in row.items()
                                                 if k.startswith("upstream_")})
        tomlio.append_table(doc, "patch", table)
    written = _write_all(project.root, files, manifest_text(doc), remove=[], moves={})
    return ImportResult(added=tuple(added), written=tuple(written))


def _applied(repo: git.Repo, parent: str, item: Incoming, patch: PatchFile, pin: str, base: str) -> str:
    """The tree of ``parent`` with ``item`` applied; ApplyConflict naming the file and hunk."""
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as fh:
        fh.write(item.text)
        tmp = Path(fh.name)
    try:
        with repo.temporary_index(parent) as index:
            res = index.apply([tmp])
            if res.ok:
                return index.write_tree()
            failures = diagnose(repo, index, tmp, patch, git_message=res.stderr)
    finally:
        os.unlink(tmp)
    result = SeriesResult(base=base, results=(PatchResult(
        id=_slug(patch.subject), file=item.source, outcome=Outcome.FAILED, failures=failures,
        git_message=res.stderr.strip()),))
    first = failures[0]
    where = f"hunk {first.hunk} ({first.header})" if first.hunk else "the patch"
    raise ApplyConflict(f"{item.source}: does not apply at {pin} after the series: "
                        f"{first.file} {where}: {first.reason}" + (f" - {first.detail}" if first.detail else ""),
                        result=result, hint="nothing was imported; rebase the patch onto the pin")


# where the cache keeps upstream itself: release imports (tags) and git-source pins; never a
# checkout branch, whose commits (yours) are in the same repository
_UPSTREAM_REFS = (refnames.IMPORTS, refnames.GIT_SOURCES)


def _upstream(repo: git.Repo, item: Incoming) -> dict[str, str]:
    """The upstream status of ``item``: what its source says, or a backport of the commit its
    format-patch names when that commit is in upstream's history in the cache, and only then."""
    commit = item.commit
    if item.upstream["status"] != "pending" or commit is None or set(commit) == {"0"}:
        return item.upstream
    if not repo.has_object(f"{commit}^{{commit}}"):
        return item.upstream
    return {"status": "backport", "ref": commit} if repo.refs_containing(commit, *_UPSTREAM_REFS) else item.upstream


def user_identity(root: Path) -> str:
    """``Name <email>`` of the user, as git knows them; UsageError saying how to give one."""
    try:
        author, _ = git.user_idents(root)
    except UsageError:
        raise UsageError("the patch names no author, and git does not know who you are",
                         hint="give an author ('Name <email>'), or set git's user.name and user.email") from None
    return f"{author.name} <{author.email}>"
