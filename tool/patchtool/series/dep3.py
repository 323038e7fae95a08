"""DEP-3 and Yocto ``Upstream-Status`` headers, both ways: what a patch's header says about its
upstream read into the manifest's status (``docs/editing.md`` has the table), and an entry written
as the header ``export --quilt`` gives each patch, which ``import`` reads back to the same entry.

Pure: fields in, fields out. What the standard fields cannot say exactly goes in
``Patchtool-Entry`` (the entry's keys as one inline TOML table), so nothing is lost."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from patchtool.diff.model import lines_of
from patchtool.project import tomlio

_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
_COMMIT_URL = re.compile(r"^https?://\S+/commits?/([0-9a-f]{7,40})\b")
_YOCTO = re.compile(r"^([A-Za-z-]+)\s*(?:\[(.*)\])?\s*$")
SCALARS = ("id", "kind", "owner", "why", "applies_to", "drop_when")  # Patchtool-<Key> fields


def fields(header: str) -> dict[str, str]:
    """The fields of a patch header (the first of each, by lower-case name), continuation lines
    (a leading space; " ." an empty line) joined by newlines; other lines end a field."""
    found: dict[str, str] = {}
    current: str | None = None
    for line in lines_of(header, keepends=False):
        if m := _FIELD.match(line):
            name = m.group(1).lower()
            current = None if name in found else name
            if current is not None:
                found[current] = m.group(2).strip()
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            more = line[1:].rstrip()
            found[current] += "\n" + ("" if more.strip() == "." else more)
        else:
            current = None
    return found


def _where(text: str) -> dict[str, str]:
    """A location: ``commit:<id>`` a ref, a URL a url (and a ref where it names a commit)."""
    text = text.strip()
    if text.lower().startswith("commit:"):
        return {"ref": text[7:].strip()}
    if re.match(r"^https?://", text):
        m = _COMMIT_URL.match(text)
        return {"ref": m.group(1), "url": text} if m else {"url": text}
    return {"ref": text} if text else {}


def _version(text: str) -> str | None:
    try:
        return str(Version(text.strip()))
    except InvalidVersion:
        return None


def upstream(found: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The upstream status a header's fields say, and what of them it could not keep."""
    notes: list[str] = []
    origin = found.get("origin", "")
    keyword, _, rest = origin.partition(",")
    if keyword.strip().lower() not in ("upstream", "backport", "vendor", "other"):
        keyword, rest = "", origin
    keyword = keyword.strip().lower()
    source = _where(rest)
    applied = [p for p in (x.strip() for x in found.get("applied-upstream", "").split(",")) if p]
    version = next((v for p in applied if (v := _version(p))), None)
    applied_at = {k: v for p in applied if not _version(p) for k, v in _where(p).items()}
    forwarded = found.get("forwarded", "").strip()
    bug = found.get("bug", "").strip()
    url = forwarded if re.match(r"^https?://", forwarded) else bug if re.match(r"^https?://", bug) else None
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
        if forwarded.lower() == "not-needed":
            status = {"status": "inappropriate", "reason": "not needed upstream (Forwarded: not-needed)"}
        elif url and forwarded.lower() != "no":
            status = {"status": "submitted", "url": url}
        else:
            status = {"status": "pending"}
            if forwarded and forwarded.lower() != "no":
                notes.append(f"Forwarded: {forwarded} (submitted needs a URL)")
    if applied and status["status"] not in ("merged", "backport"):
        notes.append(f"Applied-Upstream: {found['applied-upstream']} (names no version or commit)")
    if source and not all(status.get(k) == v for k, v in source.items()):
        notes.append(f"Origin: {origin} (the manifest keeps where upstream stands, not where a patch came from)")
    for name in sorted(found):
        if name.startswith("bug-") or name in ("reviewed-by", "acked-by", "last-update"):
            notes.append(f"{name.title()}: {found[name]}")
    return status, notes


def entry(found: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The manifest keys a header gives (``Patchtool-<Key>``, ``Patchtool-Entry``, the upstream
    status), and what of it was not kept; ValueError where ``Patchtool-Entry`` is not TOML."""
    up, notes = upstream(found)
    out: dict[str, Any] = {k: v for k in SCALARS if (v := found.get(f"patchtool-{k.replace('_', '-')}"))}
    out["upstream"] = up
    if text := found.get("patchtool-entry"):
        try:
            extra = tomllib.loads(f"x = {text}")["x"]
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"Patchtool-Entry is not an inline TOML table: {exc}") from None
        if not isinstance(extra, dict):
            raise ValueError("Patchtool-Entry is not an inline TOML table")
        out.update(extra)
    return out, notes


def _field(name: str, value: str) -> str:
    first, *more = value.split("\n")
    return f"{name}: {first}\n" + "".join(f" {line}\n" if line.strip() else " .\n" for line in more)


def header(data: Mapping[str, Any]) -> str:
    """The header lines for an entry (``PatchEntry.to_dict()``; ``file`` aside) that ``entry``
    reads back to it: DEP-3's and Yocto's fields for the status, ``Patchtool-<Key>`` for the
    entry's text, and ``Patchtool-Entry`` for whatever those do not say exactly."""
    up = data["upstream"]
    status, ref, url = up["status"], up.get("ref"), up.get("url")
    out: dict[str, str] = {}
    if status in ("backport", "merged") and (ref or url):
        place = f"commit:{ref}" if ref and not (url and _where(url).get("ref") == ref) else url
        out["Origin"] = f"upstream, {place}"
    else:
        out["Origin"] = "vendor"
    out["Forwarded"] = "not-needed" if status == "inappropriate" else url or ("no" if status == "pending" else "yes")
    if status == "merged":
        places = [*([url] if url else []), *([f"commit:{ref}"] if ref else [])]
        out["Applied-Upstream"] = ", ".join([up["version"], *places])
    detail = {"submitted": url, "backport": ref, "merged": up.get("version")}.get(status) or up.get("reason")
    word = {"merged": "Backport", "inappropriate": "Inappropriate"}.get(status, status.title())
    if status != "pending" and "\n" not in (detail or "") and "]" not in (detail or ""):
        out["Upstream-Status"] = f"{word} [{detail}]" if detail else word
    elif status == "pending":
        out["Upstream-Status"] = "Pending"
    for key in SCALARS:
        if isinstance(data.get(key), str):
            out[f"Patchtool-{key.replace('_', '-').title()}"] = data[key]
    text = "".join(_field(k, v) for k, v in out.items())
    back, _ = entry(fields(text))
    rest = {k: v for k, v in data.items() if k != "file" and v not in ([], None) and back.get(k) != v}
    if rest:
        text += f"Patchtool-Entry: {tomlio.inline_table(rest).as_string().strip()}\n"
    return text
