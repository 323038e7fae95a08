"""DEP-3 and Yocto ``Upstream-Status`` headers, both ways: what a patch's header says about its
upstream read into the manifest's status (``docs/editing.md`` has the table), and an entry written
as the header ``export --quilt`` gives each patch, which ``import`` reads back to the same entry.

Pure: fields in, fields out. What the standard fields cannot say exactly goes in
``Patchtool-Entry`` (the entry's keys as one inline TOML table), so nothing is lost."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from patchtool import paths
from patchtool.diff.model import lines_of
from patchtool.diff.patchfile import clean_subject, ends_message, starts_inbody
from patchtool.project import tomlio
from patchtool.project.manifest import PLACEHOLDER

_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
COMMIT_URL = re.compile(r"^https?://\S+/commits?/([0-9a-f]{7,40})\b")
_YOCTO = re.compile(r"^([A-Za-z-]+)(?:\s*\[(.*)\])?\s*$")  # not "\s*(...)?\s*": quadratic on spaces
SCALARS = ("id", "kind", "owner", "why", "applies_to", "drop_when")  # Patchtool-<Key> fields
# what a header line may not carry raw (ESC, BEL, CR: they would drive the terminal that shows it);
# a value holding one goes in Patchtool-Entry, where TOML escapes it
_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class HeaderError(ValueError):
    """A header ``import`` refuses: what is wrong (``line``: where, in its file), and what to do."""

    def __init__(self, message: str, *, hint: str, line: int | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.line = line


MAX_HEADER_LINES = 10_000  # a real description is a few dozen lines: the bounds keep a hostile one cheap
MAX_HEADER_CHARS = 1 << 20
# fields that decide the entry: a second one would be a second answer, so it is refused (a second
# Origin is not: Debian names each upstream commit a backport took in one, and the first decides)
SINGLE = ("forwarded", "applied-upstream", "upstream-status")
KNOWN = tuple(f"patchtool-{k.replace('_', '-')}" for k in (*SCALARS, "entry"))


def fields(header: str, *, start: int = 1) -> dict[str, str]:
    """The fields of a patch header (the first of each, by lower-case name), continuation lines
    (a leading space; " ." an empty line) joined by newlines; other lines end a field.
    HeaderError past ``MAX_HEADER_LINES`` lines, for a second ``SINGLE`` or ``Patchtool-*``
    field, and for a ``Patchtool-*`` field patchtool does not know."""
    if (count := header.count("\n")) > MAX_HEADER_LINES or len(header) > MAX_HEADER_CHARS:
        raise HeaderError(
            f"its header (the text before the diff) has {count:,} lines, {len(header):,} characters; "
            f"import reads at most {MAX_HEADER_LINES:,} lines, {MAX_HEADER_CHARS:,} characters",
            hint="shorten the text before the diff (its description)",
        )
    found: dict[str, list[str]] = {}
    at: dict[str, int] = {}
    current: list[str] | None = None
    for number, line in enumerate(lines_of(header, keepends=False), start):
        if m := _FIELD.match(line):
            name = m.group(1).lower()
            current = None
            if name.startswith("patchtool-") and name not in KNOWN:
                raise HeaderError(
                    f"{m.group(1)} is no field patchtool knows",
                    hint="the Patchtool-* fields are " + ", ".join(n.title() for n in KNOWN),
                    line=number,
                )
            if name in found and (name in SINGLE or name.startswith("patchtool-")):
                raise HeaderError(
                    f"a second {m.group(1)} field (the first is at line {at[name]})",
                    hint=f"keep one {m.group(1)} field; import would read only the first",
                    line=number,
                )
            if name not in found:
                current = found[name] = [m.group(2).strip()]
                at[name] = number
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            more = line[1:].rstrip()
            current.append("" if more.strip() == "." else more)
        else:
            current = None
    return {name: "\n".join(parts) for name, parts in found.items()}


def _where(text: str) -> dict[str, str]:
    """A location: ``commit:<id>`` a ref, a URL a url (and a ref where it names a commit)."""
    text = text.strip()
    if text.lower().startswith("commit:"):
        return {"ref": text[7:].strip()}
    if re.match(r"^https?://", text):
        m = COMMIT_URL.match(text)
        return {"ref": m.group(1), "url": text} if m else {"url": text}
    return {"ref": text} if text else {}


def _version(text: str) -> str | None:
    try:
        return str(Version(text.strip()))
    except InvalidVersion:
        return None


def _origin(text: str) -> tuple[str, dict[str, str]]:
    """An ``Origin:`` value's keyword (lower-case, "" when it has none) and the place it names."""
    keyword, _, rest = text.partition(",")
    if keyword.strip().lower() not in ("upstream", "backport", "vendor", "other"):
        return "", _where(text)
    return keyword.strip().lower(), _where(rest)


def repository(url: str) -> str | None:
    """The repository a commit URL (``https://host/owner/repo/commit/SHA``, GitLab's ``/-/commit/``)
    or a repository URL names, as one comparable string (host and path, lower-case, no ``.git``)."""
    if not (m := re.match(r"^(?:https?|git|ssh)://(?:[^@/]*@)?([^/]+)(/[^?#]*)", url.strip())):
        return None
    path = re.split(r"/(?:-/)?commits?/", m.group(2), maxsplit=1)[0].rstrip("/").removesuffix(".git")
    return f"{m.group(1).lower()}{path.lower()}" if path.strip("/") else None


def upstream(found: Mapping[str, str], repositories: Collection[str] = ()) -> tuple[dict[str, str], list[str]]:
    """The upstream status a header's fields say, and what of them it could not read.
    ``repositories``: upstream's own (``repository``'s form), so that an ``Origin:`` commit URL
    with no keyword, DEP-3's usual form, is a backport when it is upstream's commit; of another
    repository it says where the patch came from, which the patch's header keeps."""
    notes: list[str] = []
    keyword, source = _origin(found.get("origin", ""))
    if not keyword and "url" in source and repository(source["url"]) not in repositories:
        source = {}  # no keyword and not upstream's commit: where it came from, not where upstream stands
    elif not keyword and "url" in source and "ref" in source:
        keyword = "upstream"
    applied = [p for p in (x.strip() for x in found.get("applied-upstream", "").split(",")) if p]
    version = next((v for p in applied if (v := _version(p))), None)
    applied_at = {k: v for p in applied if not _version(p) for k, v in _where(p).items()}
    forwarded = found.get("forwarded", "").strip()
    url = forwarded if re.match(r"^https?://", forwarded) else None  # Bug: is where the bug is, not the patch
    status: dict[str, str] | None = None
    if yocto := found.get("upstream-status"):
        m = _YOCTO.match(yocto.split("\n")[0])
        word, detail = (m.group(1).lower(), (m.group(2) or "").strip()) if m else ("", "")
        if word == "pending":
            status = {"status": "pending"}
        elif word == "submitted":
            where = detail if re.match(r"^https?://", detail) else url
            status = {"status": "submitted", "url": where} if where else None
        elif word in ("backport", "accepted") and version:
            status = {"status": "merged", "version": version, **applied_at}
        elif word in ("backport", "accepted"):
            at = applied_at or (source if keyword in ("upstream", "backport") else {})
            status = {"status": "backport", "ref": at.get("ref") or detail, **at} if at or detail else None
        elif word == "denied":
            status = {"status": "denied", **({"reason": detail} if detail else {}), **({"url": url} if url else {})}
        elif word in ("inappropriate", "inactive-upstream"):
            why = detail or ("not for upstream" if word == "inappropriate" else "")
            reason = why if word == "inappropriate" else f"upstream is inactive{f' ({why})' if why else ''}"
            status = {"status": "inappropriate", "reason": reason}
        if status is None:
            notes.append(f"Upstream-Status: {yocto} (no status of the manifest says it; read DEP-3's fields)")
    if status is None and applied:
        if version:
            status = {"status": "merged", "version": version, **applied_at}
        elif applied_at.get("ref"):
            status = {"status": "backport", **applied_at}
    if status is None and keyword in ("upstream", "backport") and source.get("ref"):
        status = {"status": "backport", **source}
    if status is None:
        if forwarded.lower() in NOT_NEEDED:
            status = {"status": "inappropriate", "reason": f"not needed upstream (Forwarded: {forwarded})"}
        elif url:
            status = {"status": "submitted", "url": url}
        else:
            status = {"status": "pending"}
            if forwarded and forwarded.lower() != "no":
                notes.append(f"Forwarded: {forwarded} (submitted needs a URL)")
    if applied and status["status"] not in ("merged", "backport"):
        notes.append(f"Applied-Upstream: {found['applied-upstream']} (names no version or commit)")
    return status, notes


NOT_NEEDED = ("not-needed", "not-necessary")  # DEP-3 spells it both ways
MAIL = ("from", "date", "subject", "message-id", "to", "cc", "in-reply-to", "references", "mime-version")
MAIL_MORE = ("content-type", "content-transfer-encoding")
READ = ("origin", "forwarded", "applied-upstream", "upstream-status")


def unplaced(found: Mapping[str, str], status: Mapping[str, str]) -> list[str]:
    """The fields of a format-patch's mail headers that neither the entry nor the commit message
    keeps (git am drops mail headers): what ``import`` reports as not kept."""
    others = [n for n in sorted(found) if n not in (*MAIL, *MAIL_MORE, *KNOWN) and (n not in READ or n == "origin")]
    return [
        f"{name.title()}: {found[name]}"
        for name in others
        if name != "origin" or not all(status.get(k) == v for k, v in _origin(found[name])[1].items())
    ]


def entry(found: Mapping[str, str], repositories: Collection[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """The manifest keys a header gives (``Patchtool-<Key>``, ``Patchtool-Entry``, the upstream
    status as ``upstream`` reads it), and what of it could not be read; HeaderError where
    ``Patchtool-Entry`` is not an inline TOML table or gives a key a ``Patchtool-<Key>`` field
    gives too, or the id is no patch id."""
    up, notes = upstream(found, repositories)
    out: dict[str, Any] = {k: v for k in SCALARS if (v := found.get(f"patchtool-{k.replace('_', '-')}"))}
    out["upstream"] = up
    if text := found.get("patchtool-entry"):
        hint = "fix the patch's Patchtool-Entry field, or delete it"
        try:
            extra = tomlio.value(text)
        except ValueError as exc:
            raise HeaderError(f"Patchtool-Entry is not an inline TOML table: {exc}", hint=hint) from None
        if not isinstance(extra, dict):
            raise HeaderError("Patchtool-Entry is not an inline TOML table", hint=hint)
        if twice := sorted(k for k in SCALARS if k in extra and k in out):
            field = f"Patchtool-{twice[0].replace('_', '-').title()}"
            raise HeaderError(
                f"Patchtool-Entry gives {twice[0]}, and so does its {field} field",
                hint=f"keep one of them: delete {field}, or {twice[0]} from Patchtool-Entry",
            )
        out.update(extra)
    if "id" in out and (why := "it is not text" if not isinstance(out["id"], str) else paths.id_problem(out["id"])):
        field = "Patchtool-Id" if "patchtool-id" in found else "Patchtool-Entry's id"
        raise HeaderError(
            f"{field}: {why}", hint=f"fix {field}, or delete it (the id then comes from the patch's subject)"
        )
    return out, notes


def _field(name: str, value: str) -> str:
    first, *more = value.split("\n")
    return f"{name}: {first}\n" + "".join(f" {line}\n" if line.strip() else " .\n" for line in more)


def header(data: Mapping[str, Any], *, unset: Collection[str] = ()) -> str:
    """The header lines for an entry (``PatchEntry.to_dict()``; ``file`` aside) that ``entry``
    reads back to it, by DEP-3's meaning: ``Origin: upstream`` only for upstream's own commit (a
    patch of the fork needs none: its author says where it came from), ``Forwarded:`` where the
    patch went (``no``, ``not-needed``, a submission's URL; none for upstream's commit), Yocto's
    ``Upstream-Status``, ``Patchtool-<Key>`` for the entry's text that someone set (not a
    skeleton's TODO text, nor a key in ``unset``: a skeleton's default still marked so, which
    import gives again), and ``Patchtool-Entry`` for whatever those do not say exactly."""
    up = data["upstream"]
    status, ref, url = up["status"], up.get("ref"), up.get("url")
    out: dict[str, str] = {}
    if status in ("backport", "merged") and (ref or url):
        place = f"commit:{ref}" if ref and not (url and _where(url).get("ref") == ref) else url
        out["Origin"] = f"upstream, {place}"
    forwarded = {"inappropriate": "not-needed", "pending": "no", "submitted": url or "yes", "denied": url or "yes"}
    if status in forwarded:
        out["Forwarded"] = forwarded[status]
    if status == "merged":
        out["Applied-Upstream"] = ", ".join([up["version"], *(p for p in (url, ref and f"commit:{ref}") if p)])
    detail = {"submitted": url, "backport": ref, "merged": up.get("version")}.get(status) or up.get("reason")
    word = {"merged": "Backport", "inappropriate": "Inappropriate"}.get(status, status.title())
    if status != "pending" and not re.search(r"[\n\]]", detail or "") and not _RAW_CONTROL.search(detail or ""):
        out["Upstream-Status"] = f"{word} [{detail}]" if detail else word
    elif status == "pending":
        out["Upstream-Status"] = "Pending"
    skipped = {k for k in SCALARS if k in unset or str(data.get(k, "")).startswith(PLACEHOLDER)}
    for key in SCALARS:
        if isinstance(data.get(key), str) and key not in skipped and not _RAW_CONTROL.search(data[key]):
            out[f"Patchtool-{key.replace('_', '-').title()}"] = data[key]
    text = "".join(_field(k, v) for k, v in out.items())
    back, _ = entry(fields(text))
    rest = {
        k: v for k, v in data.items() if k != "file" and k not in skipped and v not in ([], None) and back.get(k) != v
    }
    if rest:
        text += f"Patchtool-Entry: {tomlio.inline_table(rest).as_string().strip()}\n"
    return text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Described:
    """What a quilt patch's header (a DEP-3 header, a mail, free text) says as a commit would:
    its subject (as ``git mailinfo -b`` leaves it; "" where it names none), its author, and the
    body: the long description, then every other line of the header as it was."""

    subject: str
    author: str | None
    body: str


CONSUMED = ("description", "subject", "author", "from", "date", *MAIL[3:], *MAIL_MORE)
_SEPARATOR = re.compile(r"^---[ \t]*$")


def described(header: str) -> Described:
    """The subject, author and body of the header of a patch that is not format-patch output.
    The subject is the first ``Description:``/``Subject:`` (a folded ``Subject:`` is one line, a
    ``Description:``'s further lines the long description), the author the first ``Author:``/
    ``From:``; ``Date:`` and mail transport headers go (the patch file keeps no date); the text
    after a ``---`` line is not the message, as for ``git am``. Every other line stays where it
    was: DEP-3's other fields, the free text after them, ``Patchtool-*`` aside (the entry's)."""
    subject: str | None = None
    author: str | None = None
    long: list[str] = []
    kept: list[str] = []
    current: str | None = None  # the consumed field whose continuation lines follow
    hg = header.startswith("# HG changeset patch")  # `hg export`: its author on a '# User ' line
    for line in lines_of(header, keepends=False):
        if _SEPARATOR.match(line):
            break
        if hg and author is None and line.startswith("# User "):
            author = line.removeprefix("# User ").strip()
        if m := _FIELD.match(line):
            name = m.group(1).lower()
            current = None
            if name in ("description", "subject") and subject is None:
                subject, current = m.group(2).strip(), name
                continue
            if name in ("author", "from") and author is None:
                author, current = m.group(2).strip(), "author"
                continue
            again = name in ("description", "subject", "author", "from")  # a second one: prose, kept
            if not again and (name in CONSUMED or name in KNOWN):
                current = "drop"
                continue
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            if current == "subject":
                subject = f"{subject} {line.strip()}"
            elif current == "description":
                more = line[1:].rstrip()
                if ends_message(more) or (not any(long) and starts_inbody(more)):
                    more = line.rstrip()  # its DEP-3 indent kept: without it the message would end there
                long.append("" if more.strip() == "." else more)
            elif current == "author":
                author = f"{author} {line.strip()}"
            continue
        else:
            current = None
        kept.append(line.rstrip("\r"))
    body = "\n".join(p for p in (_paragraphs(long), _paragraphs(kept)) if p)
    return Described(subject=clean_subject(subject or ""), author=author, body=body)


def _paragraphs(lines: list[str]) -> str:
    """``lines`` as text, blank runs made one blank line and none at either end (as a commit
    message's cleanup leaves them), with one blank line after it when there is text."""
    out: list[str] = []
    for line in lines:
        if line.strip() or (out and out[-1].strip()):
            out.append(line if line.strip() else "")
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n" if out else ""


_CHERRY = re.compile(
    r"^\(cherry picked from commit ([0-9a-f]{7,40})\)\s*$|^commit ([0-9a-f]{40}) upstream\b",
    re.MULTILINE | re.IGNORECASE,
)


def picked_from(message: str) -> list[str]:
    """The commits a message says it was cherry-picked from: git's ``(cherry picked from commit
    X)`` line, a stable backport's ``commit X upstream`` line; in order, each once."""
    return list(dict.fromkeys((m.group(1) or m.group(2)).lower() for m in _CHERRY.finditer(message)))
