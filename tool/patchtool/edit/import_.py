"""``patchtool import``: patches from git format-patch files, a GitHub pull-request ``.patch``
(several messages in one file), a plain diff (given a subject) or a quilt ``series`` directory,
each checked against the pin and added with the metadata given and a skeleton for the rest."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from patchtool import git
from patchtool.diff import fuzz as textfuzz
from patchtool.diff import plain
from patchtool.diff.model import DiffError, lines_of
from patchtool.diff.patchfile import SERIES_HINT, PatchFile, SeriesBudget, hoist_inbody_headers, unreadable_message
from patchtool.edit.quilt import diff_digest
from patchtool.errors import ApplyConflict, InvalidInput, Problem, UsageError
from patchtool.inputs import read_named_text
from patchtool.paths import read_inside, read_text_if_present, tree_path_problem
from patchtool.project import tomlio
from patchtool.project.fields import Fields
from patchtool.project.manifest import PatchEntry
from patchtool.project.metadata import QUILT_DIR
from patchtool.project.repository import PATCHES_DIR, Project, manifest_document, manifest_text
from patchtool.series import dep3, metadata
from patchtool.series.apply import (
    Outcome,
    PatchResult,
    Reason,
    SeriesResult,
    apply_series,
    diagnose,
    link_failures,
    touched_links,
)
from patchtool.series.ids import slug, unique_id
from patchtool.series.metadata import Metadata, skeleton
from patchtool.series.writes import write_series
from patchtool.upstream import refnames
from patchtool.upstream.cache import Cache

_MBOX_FROM = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
# any mbox envelope line, as mail clients, lore and b4 write one: "From sender Thu Jan  1 00:00:00 1970"
_MAIL_FROM = re.compile(r"^From \S+ +[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4}$", re.MULTILINE)
_GIT_DIFF = re.compile(r"^diff --git ", re.MULTILINE)
_GITHUB_COMMIT = re.compile(r"^https://github\.com/[^/]+/[^/]+/commit/([0-9a-f]{7,40})")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Incoming:
    source: str  # where it came from, for messages
    text: str  # format-patch text
    upstream: dict[str, str]  # what its source says (a URL, DEP-3 Origin); pending when nothing does
    commit: str | None = None  # its format-patch 'From <sha>' line: a backport when upstream has it
    entry: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # what its header says (dep3.entry)
    not_kept: tuple[str, ...] = ()  # header fields neither the entry nor the patch file keeps
    origin: str | None = None  # the commit a bare 'Origin:' URL names: a backport when upstream has it
    picked: tuple[str, ...] = ()  # the commits its message says it was cherry-picked from
    imported_commit: str | None = None  # its format-patch 'From <sha>' line, kept whatever --url says
    quilt: Quilt | None = None  # the quilt series it came from, and itself as it was there


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Quilt:
    """A patch as a quilt series lists it: the series file (its path, its text) and the patch's
    name there and text, kept under ``QUILT_DIR`` so that ``export --quilt`` gives them back."""

    series: str
    series_text: str
    name: str
    text: str


def _no_identity() -> str:
    raise UsageError("the patch names no author", hint="give an author ('Name <email>')")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Authorship:
    """For sources that carry none: a plain diff (``subject`` needed), a quilt patch without an
    author header. ``identity``: the user's own ``Name <email>``, asked only when needed."""

    author: str | None = None
    subject: str | None = None
    identity: Callable[[], str] = dataclasses.field(default=_no_identity)

    def who(self) -> str:
        return self.author or self.identity()


_AUTHOR = re.compile(r"^[^<>\n]*[^<>\s][^<>\n]*<[^<>\s]+>$")


def check_authorship(author: str | None, subject: str | None) -> None:
    """UsageError unless ``author`` is ``Name <email>`` and ``subject`` one line of text."""
    if author is not None and not _AUTHOR.match(author.strip()):
        raise UsageError(f"author {author!r} is not 'Name <email>'", hint="e.g. 'Maria Rossi <maria@example.org>'")
    if subject is not None and (not subject.strip() or "\n" in subject.strip()):
        raise UsageError(f"subject {subject!r} is not one line of text")


def _format(author: str, subject: str, body: str, diff: str) -> str:
    body = body.strip("\n") + "\n\n" if body.strip() else ""
    head = f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: {author}\n"
    return f"{head}Subject: [PATCH] {subject}\n\n{body}{diff}"


def _status_for(url: str) -> dict[str, str]:
    """What ``--url`` says: a backport of a GitHub commit it names, else submitted there (a pull
    request's URL, any other web page), else (no web URL) pending."""
    if m := _GITHUB_COMMIT.match(url):
        return {"status": "backport", "ref": m.group(1)}
    return {"status": "submitted", "url": url} if url.startswith("http") else {"status": "pending"}


Exists = Callable[[str], bool] | None  # whether the tree a plain diff applies to has a path


class _Reading(NamedTuple):
    """What each patch of one ``read_sources`` is read with (its arguments of the same names), and
    the budget the patches share."""

    who: Authorship
    exists: Exists
    repositories: Collection[str]
    budget: SeriesBudget


def read_sources(
    paths: list[Path],
    url: str | None,
    who: Authorship | None = None,
    *,
    series: Path | None = None,
    exists: Exists = None,
    strip: int | None = None,
    repositories: Collection[str] = (),
) -> list[Incoming]:
    """Every patch in ``paths`` (format-patch files, pull-request ``.patch`` files, plain diffs,
    quilt directories), then those a quilt ``series`` file lists, as format-patch text, in order.
    ``exists`` settles a plain diff's file that is only added to and not marked new (git creates
    it only where the tree lacks it); without it such a diff is refused. ``strip``: the ``-pN`` of
    the plain diffs in ``paths``, and of a series' entries that give none (a ``-pN`` word on an
    entry wins); ``repositories``: upstream's own (``dep3.repository``), whose commit an
    ``Origin:`` URL with no keyword makes a backport."""
    reading = _Reading(who or Authorship(), exists, repositories, SeriesBudget())
    out: list[Incoming] = []
    for path in paths:
        if path.is_dir():
            out += _read_series(_quilt_dir(path), "series", strip, reading)
            continue
        try:
            text = read_named_text(path, what="the patch")
        except FileNotFoundError:
            raise UsageError(f"{path} does not exist", file=str(path)) from None
        if why := reading.budget.take(text):
            raise InvalidInput(f"{path} {why}", file=str(path), hint=SERIES_HINT)
        out += _read_file(str(path), path.name, text, url, strip, reading)
    if series is not None:
        if not os.path.lexists(series):
            raise UsageError(f"{series} does not exist")
        if series.is_dir():
            meant = next((d / "series" for d in (series, series / "patches") if (d / "series").is_file()), None)
            raise UsageError(
                f"--series {series}: it is a directory; --series names a quilt series file",
                hint=f"give --series {meant}, or the directory itself as FILE"
                if meant
                else f"give --series DIR/series, the file that lists the patches ({series} has none)",
            )
        out += _read_series(series.parent, series.name, strip, reading)
    return out


def _read_file(
    source: str, name: str, text: str, url: str | None, strip: int | None, reading: _Reading
) -> list[Incoming]:
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        text = text.replace("\r\n", "\n")  # a mail saved with CRLF: read as `git am` reads it (no --keep-cr)
    envelopes = list(_MBOX_FROM.finditer(text))
    starts = [m.start() for m in envelopes]
    if len(_MAIL_FROM.findall(text)) > max(len(starts), 1):  # mails `git mailsplit` would split, and this would not
        raise UsageError(
            f"{source} holds several mails whose envelopes ('From <address> <date>') are not git format-patch's; "
            "reading them as one patch would credit every change to the first mail's author",
            file=source,
            hint="split it into one file a mail (`git mailsplit -o DIR FILE`) and import those",
        )
    if len(starts) == 1 and not _GIT_DIFF.search(text):
        # git format-patch's envelope around a plain diff (``--- pkg.orig/x``, as Debian's
        # tooling writes): the mail header is read as any patch header, the diff at -pN
        plain = _plain_patch(source, name, text, url, strip, reading)
        return [dataclasses.replace(plain, imported_commit=_envelope_commit(envelopes[0]))]
    if starts:
        _only_p1(source, "a git format-patch file", strip)
        out = []
        line = 1 + text.count("\n", 0, starts[0])
        for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
            message = hoist_inbody_headers(text[a:b])
            found = _header_fields(source, message.split("\n\n", 1)[0], line)
            entry, notes = _header_entry(source, found, url, reading.repositories)
            line += text.count("\n", a, b)
            commit = _envelope_commit(_MBOX_FROM.match(message))
            out.append(
                Incoming(
                    source=source,
                    text=message,
                    upstream=entry["upstream"],
                    commit=commit if url is None else None,
                    entry={k: v for k, v in entry.items() if k != "upstream"},
                    not_kept=(*notes, *dep3.unplaced(found, entry["upstream"])),
                    origin=_origin_commit(found),
                    picked=tuple(dep3.picked_from(message.split("\n\n", 1)[-1].split("\n---\n", 1)[0])),
                    imported_commit=commit,
                )
            )
        return out
    return [_plain_patch(source, name, text, url, strip, reading)]


def _only_p1(source: str, what: str, strip: int | None) -> None:
    """UsageError where ``what`` (git's own output, always -p1) is to be read at another ``strip``."""
    if strip not in (None, 1):
        hint = "import it without -p (in a series file: its line without -pN, or -p1 where -p is given)"
        raise UsageError(f"{what} is -p1, not -p{strip}", file=source, hint=hint)


def _envelope_commit(envelope: re.Match[str] | None) -> str | None:
    """The commit a format-patch's ``From <sha>`` line names (none for git's all-zero sha)."""
    return envelope.group(1) if envelope and set(envelope.group(1)) != {"0"} else None


def _origin_commit(found: Mapping[str, str]) -> str | None:
    """The commit an ``Origin:`` URL names when the field has no keyword (DEP-3's usual form)."""
    origin = found.get("origin", "")
    m = dep3.COMMIT_URL.match(origin.strip())
    return m.group(1) if m and "," not in origin.split("://", 1)[0] else None


def _header_fields(source: str, header: str, line: int = 1) -> dict[str, str]:
    """``dep3.fields`` of the header that starts at ``line`` of ``source``; InvalidInput naming
    the file and the line where it refuses the header."""
    try:
        return dep3.fields(header, start=line)
    except dep3.HeaderError as exc:
        raise _refused(source, exc) from None


def _refused(source: str, exc: dep3.HeaderError) -> InvalidInput:
    where = f"{source}:{exc.line}" if exc.line else source
    problem = Problem(message=str(exc), file=source, line=exc.line, hint=exc.hint, code="dep3")
    return InvalidInput(f"{where}: {exc}", file=source, hint=exc.hint, problems=[problem])


def _header_entry(
    source: str, found: dict[str, str], url: str | None, repositories: Collection[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """The manifest keys a patch's header ``found`` gives (``dep3.entry``); ``url``, where given,
    says its upstream status instead; InvalidInput naming ``source`` when the header is refused."""
    try:
        entry, notes = dep3.entry(found, repositories)
    except dep3.HeaderError as exc:
        raise _refused(source, exc) from None
    if url is not None:
        entry["upstream"] = _status_for(url)
    return entry, notes


def _quilt_dir(path: Path) -> Path:
    """The directory with the quilt ``series`` file: ``path``, or ``path/patches`` as
    ``export --quilt`` (and quilt itself) lays it out."""
    for directory in (path, path / "patches"):
        if os.path.lexists(directory / "series"):  # read_inside says what it is when it is no regular file
            return directory
    raise UsageError(f"{path} has no quilt 'series' file (nor patches/series)", file=str(path))


_STRIP = re.compile(r"^-p(\d{1,3}|ab)$")


def _read_series(directory: Path, series: str, strip: int | None, reading: _Reading) -> list[Incoming]:
    """The patches a quilt ``series`` file in ``directory`` lists, in its order: one a line, a
    ``#`` starts a comment, ``-pN`` after the name its strip level (quilt's ``-pab``: -p1), else
    ``strip`` where the command line gave one, else quilt's -p1. The whole file is checked (every
    option, every patch there, none listed twice) before the first patch is read."""
    listed = []
    first: dict[str, int] = {}  # each name's line
    listing = text = read_text_if_present(directory, series) or ""
    for number, line in enumerate(lines_of(text, keepends=False), 1):
        if not (words := line.split("#", 1)[0].split()):
            continue
        name, options = words[0], words[1:]
        level = 1 if strip is None else strip
        for option in options:
            if not (m := _STRIP.match(option)):
                raise UsageError(
                    f"{directory / series}:{number}: {name}: option {option[:20]!r}"
                    f"{'...' if len(option) > 20 else ''} is not supported",
                    hint="only a strip level (-p0, -p1, -p2 ...) is",
                )
            level = 1 if m.group(1) == "ab" else int(m.group(1))
        if (at := first.setdefault(name, number)) != number:  # each would be read and kept whole
            raise UsageError(
                f"{directory / series}:{number}: {name} is listed again (first at line {at}); refusing the series",
                hint="a series lists each patch once, as quilt requires: delete the second line",
            )
        if tree_path_problem(name) is None and not os.path.lexists(directory / name):  # read_inside refuses the rest
            raise UsageError(f"{directory / series}:{number}: {name} does not exist")
        listed.append((number, name, level))
    out = []
    for number, name, level in listed:
        source = str(directory / name)
        try:
            raw = read_inside(directory, name)
        except FileNotFoundError:
            raise UsageError(f"{directory / series}:{number}: {name} does not exist") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{directory / series}:{number}: {name} is not UTF-8 ({exc.reason} at byte {exc.start})",
                file=source,
                hint="save it as UTF-8",
            ) from None
        if why := reading.budget.take(text):
            raise InvalidInput(f"{directory / series}:{number}: {name} {why}", file=source, hint=SERIES_HINT)
        read = _read_file(source, Path(name).name, text, None, level, reading)
        if len(read) == 1:  # a file of several messages has no one original to export again
            kept = Quilt(series=str(directory / series), series_text=listing, name=name, text=text)
            read = [dataclasses.replace(read[0], quilt=kept)]
        out += read
    return out


# a diff starts at git's header, or at a unified diff's '--- '/'+++ ' pair, or at the line a tool
# printed just before that pair: an 'Index: ' line (with its '====' rule) or the command that made
# it (hg export's `diff -r A -r B path`, `diff -Naur a b`), as GNU patch finds one; a '--- ' or
# 'Index: ' line of prose is the header's, which keeps it whole or refuses it naming the line
_PAIR = r"--- [^\n]*\n\+\+\+ "
_DIFF_START = re.compile(
    rf"^(?:diff --git |{_PAIR}|Index: [^\n]*\n(?:=+\n)?{_PAIR}|diff [^\n]*\n{_PAIR})", re.MULTILINE
)


def _plain_patch(source: str, name: str, text: str, url: str | None, strip: int | None, reading: _Reading) -> Incoming:
    """A patch that is not git format-patch output (a quilt patch, a plain diff, a mail): its
    DEP-3 or mail header (``dep3.described``: author, subject, the rest kept as the message's
    body; origin) and its diff. The subject, where the header has none: the one given, else the
    file name; the author: the one given, else you."""
    if not (m := _DIFF_START.search(text)):
        raise InvalidInput(
            f"{source}: not a git format-patch file (no 'From <sha> Mon Sep 17' line) and no diff",
            file=source,
            hint="export it with git format-patch, or import a quilt directory",
        )
    header, diff = text[: m.start()], text[m.start() :]
    fields = _header_fields(source, header)
    if diff.startswith("diff --git "):
        _only_p1(source, "a git diff", strip)
    else:
        try:
            diff = _plain_diff(source, diff, reading.exists, strip)
        except DiffError as exc:
            line = exc.line and exc.line + header.count("\n")
            raise InvalidInput(
                f"{source}{f':{line}' if line else ''}: {exc.message}",
                file=source,
                hint=exc.hint,
                problems=[Problem(message=exc.message, file=source, line=line, hint=exc.hint, code="unsafe-diff")],
            ) from None
    said = dep3.described(header)
    if "<" not in (author := said.author or reading.who.who()):
        author = f"{author} <unknown@localhost>"
    subject = said.subject or " ".join((reading.who.subject or "").split()) or _subject_from_name(name)
    if why := unreadable_message(f"subject\n\n{said.body}"):  # its lines count from the header's top
        raise InvalidInput(
            f"{source}: its header cannot be kept whole in a patch file: {why}; nothing was imported",
            file=source,
            hint="indent that line of the header, or import its quilt directory, whose files are kept as they are",
        )
    entry, notes = _header_entry(source, fields, url, reading.repositories)
    return Incoming(
        source=source,
        text=_format(author, subject, said.body, diff),
        upstream=entry["upstream"],
        entry={k: v for k, v in entry.items() if k != "upstream"},
        not_kept=tuple(notes),
        origin=_origin_commit(fields),
        picked=tuple(dep3.picked_from(header)),
    )


_OLD_NAME = re.compile(r"^--- a/(\S[^\n]*)$", re.MULTILINE)


def _plain_diff(source: str, text: str, exists: Exists, strip: int | None) -> str:
    """``text`` as a git diff at ``-pN``, or where no -p is given at git apply's guess (-p0 for
    names without a directory, ``diff -u x.orig x`` run at the top; else -p1); a UsageError naming
    the strip level that fits where its files are in the tree only under the names another gives:
    -p0 at the default (``diff -u python/x.py.orig python/x.py``), -p1 at another (``-p0`` on an
    a/b diff)."""
    diff = plain.git_diff(text, exists=exists, strip=strip)
    olds = _OLD_NAME.findall(diff)
    if strip == 1 or exists is None or not olds or any(exists(p) for p in olds):
        return diff
    other = 0 if strip is None else 1
    try:
        names = _OLD_NAME.findall(plain.git_diff(text, exists=exists, strip=other))
    except DiffError:
        return diff
    if names and all(exists(p) for p in names):
        raise UsageError(
            f"{source}: its names are -p{other} names ({names[0]} is in the tree, {olds[0]} is not)",
            hint="import it with -p0" if other == 0 else f"import it with -p1 (the default), not -p{strip}",
        )
    return diff


def _subject_from_name(name: str) -> str:
    """A subject from a patch's file name: ``0003-fix_setup-py.patch`` -> ``fix setup py``."""
    stem = re.sub(r"\.(patch|diff)$", "", name)
    return re.sub(r"[-_]+", " ", re.sub(r"^\d+[-_]", "", stem)).strip() or stem


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImportResult:
    added: tuple[dict[str, Any], ...]  # id, file, source, upstream_*, refreshed (the hunks fuzz placed)
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def import_patches(
    project: Project,
    cache: Cache,
    paths: list[Path],
    *,
    url: str | None = None,
    given: Metadata | None = None,
    author: str | None = None,
    subject: str | None = None,
    fuzz: int = 0,
    series: Path | None = None,
    strip: int | None = None,
) -> ImportResult:
    """Add the patches in ``paths`` after the series, each applied at the pin first (nothing is
    written unless all apply). ``given``: metadata for the new entries (its id only when there is
    one patch); ``author``/``subject``: for sources that carry none (default author: you);
    ``fuzz``: a patch ``git apply`` refuses may apply with that many lines of fuzz, as GNU patch's
    ``--fuzz``, and is stored refreshed (regenerated from the result); ``strip``: the ``-pN`` of
    the plain diffs in ``paths`` (default: git apply's guess, and a refusal naming -p0 where that is what fits)."""
    if fuzz < 0:
        raise UsageError(f"--fuzz {fuzz}: the lines of fuzz allowed are 0 or more")
    if strip is not None and strip < 0:
        raise UsageError(f"-p{strip}: the leading directories to strip are 0 or more")
    given = metadata.validate(given or Metadata())
    check_authorship(author, subject)

    @functools.cache
    def applied() -> SeriesResult:
        """The series applied at its pin, made when first needed (a plain diff may ask first)."""
        return apply_series(cache.repo, cache.ensure(project.pin()).commit, project.series(), commit=True)

    def exists(path: str) -> bool:
        chain = applied()
        return chain.tip is not None and cache.repo.cat_files(chain.tip, [path]).get(path) is not None

    pin = project.pin()
    upstreams = {r for r in [dep3.repository(pin.git.url.text) if pin.git else None] if r}
    who = Authorship(author=author, subject=subject, identity=functools.cache(lambda: user_identity(project.root)))
    incoming = read_sources(paths, url, who, series=series, exists=exists, strip=strip, repositories=upstreams)
    if not incoming:
        raise UsageError("nothing to import", hint="give patch files, a quilt directory or --series FILE")
    if given.id is not None and len(incoming) != 1:
        raise UsageError(
            f"an id names one patch, and {len(incoming)} are being imported",
            hint="import them one at a time to name each, or let their subjects name them",
        )
    # a dropped id stays taken: an import never revives it behind the registry's back
    entries = {e.id: e for e in project.manifest.patches} | {d.entry.id: d.entry for d in project.manifest.dropped}
    if given.id is not None and given.id in entries:
        raise UsageError(
            f"a patch {given.id!r} exists already"
            + (" (dropped)" if given.id not in {e.id for e in project.manifest.patches} else "")
        )
    repo = cache.repo
    chain = applied()
    if not chain.ok or chain.tip is None:
        raise UsageError("the series does not apply at its pin; fix that first", hint="patchtool check")
    originals = Originals(project.root)
    ids = [e.id for e in project.manifest.patches]
    made: list[tuple[Incoming, PatchFile, str, tuple[Refreshed, ...]]] = []  # each patch with its commit
    parent = chain.tip
    try:
        with repo.temporary_index(parent) as index:  # one index: each patch applies on the one before
            for item in incoming:
                patch = PatchFile.parse(item.text, name=item.source)
                tree, refreshed = _applied(repo, index, parent, item, patch, pin.name, chain.base, fuzz)
                by = git.Ident(patch.author_name, patch.author_email, 0)
                committer = git.Ident(*git.FIXED_IDENT, 0)
                parent = repo.commit_tree(tree, [parent], patch.message, author=by, committer=committer)
                made.append((item, patch, parent, refreshed))
    except Exception:
        # a header the patches before this one are refused for is said first, as when each patch
        # was recorded before the next one applied
        _recorded(repo, chain.tip, made, ids, entries, given, originals)
        raise
    files, added, tables = _recorded(repo, chain.tip, made, ids, entries, given, originals)
    doc = manifest_document(project.root)
    for table in tables:
        tomlio.append_table(doc, "patch", table)
    files.update(originals.files())
    written = write_series(project.root, files, manifest_text(doc), remove=[], moves={})
    return ImportResult(added=tuple(added), written=tuple(written))


_UNTAGGED = re.compile(r"^(?:\[[^\]]*\]\s*)+")  # a branch's [4.2.x] stays in the subject, not in the id


def _recorded(
    repo: git.Repo,
    base: str,
    made: Sequence[tuple[Incoming, PatchFile, str, tuple[Refreshed, ...]]],
    series: Sequence[str],
    entries: Collection[str],
    given: Metadata,
    originals: Originals,
) -> tuple[dict[str, str], list[dict[str, Any]], list[Any]]:
    """The patch files, the rows of the result and the manifest's tables of the patches ``made``
    (each with its commit, a chain on ``base``) after the ``series`` ids; InvalidInput naming the
    first whose header breaks the manifest's rules. Their files come from one git process."""
    order = list(series)
    files: dict[str, str] = {}
    added: list[dict[str, Any]] = []
    tables: list[Any] = []
    texts = repo.format_patch_each(base, [commit for _, _, commit, _ in made])
    for (item, patch, _, refreshed), text in zip(made, texts, strict=True):
        named = item.entry.get("id")
        mine = named if isinstance(named, str) else slug(_UNTAGGED.sub("", patch.subject))  # dep3.entry checked it
        ident = given.id or unique_id(mine, {*entries, *order})
        order.append(ident)
        name = f"{PATCHES_DIR}/{len(order):04d}-{slug(ident)}.patch"
        files[name] = text
        kept = originals.keep(item.quilt, diff_digest(text))
        added.append(
            {
                "id": ident,
                "file": name,
                "source": item.source,
                **{f"upstream_{k}": v for k, v in _upstream(repo, item).items()},
                "refreshed": [dataclasses.asdict(r) for r in refreshed],
                "not_kept": [*item.not_kept, *([] if kept or item.quilt is None else [originals.clash(item.quilt)])],
            }
        )
        tables.append(_table(item, ident, name, given, added[-1], kept))
    return files, added, tables


class Originals:
    """The quilt series an import came from, kept as they came under ``QUILT_DIR``: each patch
    under its name there, and the series files' lines, appended to the one kept there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.texts: dict[str, str] = {}
        self.series: dict[str, str] = {}  # the series file each came from -> its text
        self.taken: set[str] = set()  # names another patch holds

    def keep(self, quilt: Quilt | None, diff: str) -> dict[str, str] | None:
        """The entry's ``imported`` name and diff, where ``quilt``'s name is free (or holds this same
        text); None for a patch from no quilt series, or whose name another patch holds there."""
        if quilt is None:
            return None
        rel = f"{QUILT_DIR}/{quilt.name}"
        there = self.texts.get(rel, read_text_if_present(self.root, rel))
        if there is not None and there != quilt.text:
            self.taken.add(quilt.name)
            return None
        self.texts[rel] = quilt.text
        self.series.setdefault(quilt.series, quilt.series_text)
        return {"name": quilt.name, "diff": diff}

    def clash(self, quilt: Quilt) -> str:
        return f"its name {quilt.name} (another patch's in {QUILT_DIR}/; export --quilt names it as patchtool does)"

    def files(self) -> dict[str, str]:
        """The files to write: the patches and the series file with the new lines appended."""
        if not self.texts:
            return {}
        series = read_text_if_present(self.root, f"{QUILT_DIR}/series") or ""
        for text in self.series.values():
            lines = [line for line in lines_of(text) if (line.split("#", 1)[0].split() or [""])[0] not in self.taken]
            series += ("" if not series or series.endswith("\n") else "\n") + "".join(lines)
        return {**self.texts, f"{QUILT_DIR}/series": series}


def _table(
    item: Incoming,
    ident: str,
    file: str,
    given: Metadata,
    row: Mapping[str, Any],
    quilt: Mapping[str, str] | None = None,
) -> Any:
    """The new entry: what ``given`` says, else what the patch's header says, else the skeleton;
    where it came from (``imported``: ``quilt``, its commit, the commits it was picked from);
    InvalidInput naming the patch where the header's values break the manifest's rules."""
    header = {k: v for k, v in item.entry.items() if k in metadata.FIELDS and isinstance(v, str)}
    table = skeleton(ident, file, Metadata(**{**header, **given.given()}))
    table["upstream"] = tomlio.inline_table(
        {k.removeprefix("upstream_"): v for k, v in row.items() if k.startswith("upstream_")}
    )
    records = {k: v for k, v in item.entry.items() if k not in {"id", "file", "upstream", *metadata.FIELDS}}
    for key, value in tomlio.table(records).items():
        table.add(key, value)
    came: dict[str, Any] = {**(quilt or {}), **({"commit": item.imported_commit} if item.imported_commit else {})}
    if item.picked:
        came["cherry_picked_from"] = list(item.picked)
    if came and "imported" not in table:
        table.add("imported", tomlio.inline_table(came))
    problems: list[Problem] = []
    PatchEntry.read(Fields(table.unwrap(), "", problems))
    if problems:
        first = problems[0]
        raise InvalidInput(
            f"{item.source}: its header gives {first.key}: {first.message}",
            file=item.source,
            hint="fix the patch's header (DEP-3 or Patchtool-* fields), or delete the field",
            problems=[dataclasses.replace(p, file=item.source, patch=None) for p in problems],
        )
    return table


def _applied(
    repo: git.Repo, index: git.Index, parent: str, item: Incoming, patch: PatchFile, pin: str, base: str, fuzz: int
) -> tuple[str, tuple[Refreshed, ...]]:
    """The tree of ``parent`` (``index`` holds it) with ``item`` applied as ``git apply`` does, or
    else with at most ``fuzz`` lines of fuzz (then: where each hunk went), left in ``index`` too;
    ApplyConflict naming the file and hunk."""
    links = touched_links(repo, parent, patch)
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as fh:
        fh.write(item.text)
        tmp = Path(fh.name)
    try:
        res = index.apply([tmp]) if not links else git.ApplyResult(ok=False, stderr="")
        if res.ok:
            return index.write_tree(), ()
        if not links and fuzz and (fuzzed := fuzzed_files(repo, parent, patch, fuzz)) is not None:
            files, placed = fuzzed
            index.write_files(files)
            return index.write_tree(), placed
        failures = link_failures(links) if links else diagnose(repo, index, tmp, patch, git_message=res.stderr)
    finally:
        os.unlink(tmp)
    said = res.stderr.strip()
    failed = PatchResult(
        id=slug(patch.subject), file=item.source, outcome=Outcome.FAILED, failures=failures, git_message=said
    )
    first = failures[0]
    where = f"hunk {first.hunk} ({first.header})" if first.hunk else "the patch"
    raise ApplyConflict(
        f"{item.source}: does not apply at {pin} after the series: "
        f"{first.file} {where}: {first.reason}" + (f" - {first.detail}" if first.detail else ""),
        result=SeriesResult(base=base, results=(failed,)),
        data=None,
        hint=_path_hint(repo, parent, first.file, pin)
        if first.reason is Reason.FILE_MISSING
        else "nothing was imported; patch the file the link points at instead"
        if first.reason is Reason.LINK
        else "nothing was imported; rebase the patch onto the pin"
        + (
            f", or allow more fuzz than {fuzz}"
            if fuzz
            else ", or let it apply with fuzz as GNU patch would (--fuzz 2) and store it refreshed"
        ),
    )


def _path_hint(repo: git.Repo, parent: str, path: str, pin: str) -> str:
    """What to do when a patch names a file the tree lacks: fuzz cannot help where the path's
    directories are what differs (the patch's prefix, or the pin's)."""
    alike = sorted(p for p in repo.tree_paths(repo.tree_of(parent)) if p.endswith(f"/{path}") or path.endswith(f"/{p}"))
    seen = f" (the tree has {alike[0]})" if alike else ""
    return (
        f"nothing was imported; {path} is not in the tree at {pin}{seen}: where the patch's paths and the "
        "tree's begin with other directories, import it with -pN (the leading directories to strip), or "
        "pin the upstream with the prefix that matches (`patchtool init --prefix FROM:TO`, the pin's prefix)"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Refreshed:
    """A hunk that needed fuzz or moved: the stored patch is regenerated from the result."""

    file: str
    hunk: int
    fuzz: int
    offset: int


def fuzzed_files(
    repo: git.Repo, parent: str, patch: PatchFile, fuzz: int
) -> tuple[dict[str, tuple[str, bytes] | None], tuple[Refreshed, ...]] | None:
    """The files ``patch`` leaves on ``parent`` applied as GNU ``patch --fuzz`` would, and the
    hunks that moved or needed fuzz; None where it does not apply so either. As ``git apply``
    and ``patch`` do: a rename removes its source, a copy keeps it, and the header's new mode
    (``new mode``, ``new file mode``) is the result's."""
    olds = [f.old_path for f in patch.files if f.old_path is not None]
    present = repo.entries(parent, olds)
    contents = repo.cat_files(parent, olds)
    files: dict[str, tuple[str, bytes] | None] = {}
    placed: list[Refreshed] = []
    for f in patch.files:
        if f.binary:
            return None
        if f.old_path is None:
            if f.new_path is None or f.new_path in present or f.new_path in files:
                return None
            mode, data = "100644", b""
        elif f.old_path in files:  # a file an earlier part of the patch wrote
            if (earlier := files[f.old_path]) is None:
                return None
            mode, data = earlier
        elif (found := contents.get(f.old_path)) is None:
            return None
        else:
            mode, data = present[f.old_path][0], found
        try:
            applied = textfuzz.apply(lines_of(data.decode("utf-8", "surrogateescape")), f.hunks, fuzz=fuzz)
        except textfuzz.TooCostly as exc:
            raise UsageError(
                f"{f.path}: looking for hunk {exc.hunk} with fuzz would compare more than "
                f"{textfuzz.MAX_COMPARED} lines (a hunk of repeated lines over a file of them); "
                "refusing to search further",
                hint="fix the patch's context by hand, or import it with less --fuzz",
            ) from None
        if applied is None:
            return None
        result = "".join(applied.lines).encode("utf-8", "surrogateescape")
        if f.status == "renamed" and f.old_path is not None:
            files[f.old_path] = None
        if f.new_path is None:
            if result:
                return None  # a deletion that leaves lines behind
            files[f.path] = None
            continue
        files[f.new_path] = (f.new_mode or mode, result)
        placed += [
            Refreshed(file=f.new_path, hunk=p.hunk, fuzz=p.fuzz, offset=p.offset)
            for p in applied.placed
            if p.fuzz or p.offset
        ]
    return files, tuple(placed)


# where the cache keeps upstream itself: release imports (tags) and git-source pins; never a
# checkout branch, whose commits (yours) are in the same repository
_UPSTREAM_REFS = (refnames.IMPORTS, refnames.GIT_SOURCES)


def _upstream(repo: git.Repo, item: Incoming) -> dict[str, str]:
    """The upstream status of ``item``: what its source says, or a backport of the commit its
    format-patch (or an ``Origin:`` URL with no keyword) names when that commit is in upstream's
    history in the cache, and only then."""
    if item.upstream["status"] != "pending":
        return item.upstream
    for commit in (item.commit, item.origin):
        if commit is None or set(commit) == {"0"} or not repo.has_object(f"{commit}^{{commit}}"):
            continue
        if repo.refs_containing(commit, *_UPSTREAM_REFS):
            return {"status": "backport", "ref": commit}
    return item.upstream


def user_identity(root: Path) -> str:
    """``Name <email>`` of the user, as git knows them; UsageError saying how to give one."""
    try:
        author, _ = git.user_idents(root)
    except UsageError:
        raise UsageError(
            "the patch names no author, and git does not know who you are",
            hint="give an author ('Name <email>'), or set git's user.name and user.email",
        ) from None
    return f"{author.name} <{author.email}>"
