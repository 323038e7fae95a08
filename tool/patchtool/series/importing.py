"""``patchtool import``: patches from git format-patch files, a GitHub pull-request ``.patch``
(several messages in one file) or a quilt ``series`` directory, each checked against the pin and
added with a metadata skeleton."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from patchtool import git
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import ApplyConflict, InvalidInput, UsageError
from patchtool.project import tomlio
from patchtool.project.repository import PATCHES_DIR, Project, manifest_document, manifest_text
from patchtool.series.apply import Outcome, PatchResult, SeriesResult, apply_series, diagnose
from patchtool.series.editing import _slug, _unique, _write_all, skeleton
from patchtool.upstream.cache import Cache

_MBOX_FROM = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
_GITHUB_PULL = re.compile(r"^https://github\.com/[^/]+/[^/]+/pull/\d+")
_GITHUB_COMMIT = re.compile(r"^https://github\.com/[^/]+/[^/]+/commit/([0-9a-f]{7,40})")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Incoming:
    source: str  # where it came from, for messages
    text: str  # format-patch text
    upstream: dict[str, str]


def _format(author: str, subject: str, body: str, diff: str) -> str:
    head = f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: {author}\n"
    head += f"Subject: [PATCH] {subject}\n\n"
    if body.strip():
        head += body.strip("\n") + "\n\n"
    return head + diff


def _status_for(sha: str | None, url: str | None) -> dict[str, str]:
    if url and _GITHUB_PULL.match(url):
        return {"status": "submitted", "url": url}
    if url and (m := _GITHUB_COMMIT.match(url)):
        return {"status": "backport", "ref": m.group(1)}
    if url:
        return {"status": "submitted", "url": url} if url.startswith("http") else {"status": "pending"}
    if sha and set(sha) != {"0"}:
        return {"status": "backport", "ref": sha}
    return {"status": "pending"}


def read_sources(paths: list[Path], url: str | None) -> list[Incoming]:
    out: list[Incoming] = []
    for path in paths:
        if path.is_dir():
            out += _read_quilt(path)
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"{path} does not exist", file=str(path)) from None
        starts = [m.start() for m in _MBOX_FROM.finditer(text)]
        if not starts:
            raise InvalidInput(f"{path}: not a git format-patch file (no 'From <sha> Mon Sep 17' line)",
                               file=str(path), hint="export it with git format-patch, or import a quilt directory")
        for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
            message = text[a:b]
            sha = _MBOX_FROM.match(message)
            out.append(Incoming(source=str(path), text=message,
                                upstream=_status_for(sha.group(1) if sha else None, url)))
    return out


_DEP3 = re.compile(r"^(Description|Subject|Author|From|Origin|Forwarded|Bug|Last-Update|Applied-Upstream)"
                   r":\s*(.*)$", re.IGNORECASE)


def _read_quilt(directory: Path) -> list[Incoming]:
    series = directory / "series"
    if not series.is_file():
        raise UsageError(f"{directory} has no quilt 'series' file", file=str(directory))
    out = []
    for line in series.read_text(encoding="utf-8").splitlines():
        name = line.split("#", 1)[0].strip().split()
        if not name:
            continue
        if any(opt.startswith("-p") and opt not in ("-p1", "-p", "-pab") for opt in name[1:]):
            raise UsageError(f"{directory / name[0]}: only -p1 quilt patches can be imported")
        text = (directory / name[0]).read_text(encoding="utf-8")
        m = re.search(r"^(?:diff --git |--- |Index: )", text, re.MULTILINE)
        if not m:
            raise InvalidInput(f"{directory / name[0]}: no diff found", file=str(directory / name[0]))
        header, diff = text[:m.start()], text[m.start():]
        fields: dict[str, str] = {}
        for hline in header.splitlines():
            hm = _DEP3.match(hline)
            if hm:
                fields.setdefault(hm.group(1).lower(), hm.group(2).strip())
        if not diff.startswith("diff --git "):
            diff = _to_git_diff(diff)
        author = fields.get("author") or fields.get("from") or "quilt import <unknown@localhost>"
        if "<" not in author:
            author = f"{author} <unknown@localhost>"
        description = fields.get("description") or fields.get("subject") or Path(name[0]).stem
        subject, _, body = description.partition("\n")
        forwarded = fields.get("forwarded", "")
        origin = fields.get("origin", "")
        url = forwarded if forwarded.startswith("http") else origin.split(",")[-1].strip() \
            if origin.startswith(("upstream", "backport")) else None
        status = _status_for(None, url)
        if origin.lower().startswith(("upstream", "backport")) and status["status"] == "pending":
            status = {"status": "backport", "ref": origin}
        out.append(Incoming(source=str(directory / name[0]), text=_format(author, subject, body, diff),
                            upstream=status))
    return out


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


def import_patches(project: Project, cache: Cache, paths: list[Path], *, url: str | None) -> ImportResult:
    incoming = read_sources(paths, url)
    pin = project.pin()
    loaded = project.series()
    base = cache.ensure(pin)
    repo = cache.repo
    chain = apply_series(repo, base.commit, loaded, commit=True)
    if not chain.ok or chain.tip is None:
        raise UsageError("the series does not apply at its pin; fix that first", hint="patchtool check")
    parent = chain.tip
    # a dropped id stays taken: an import never revives it behind the registry's back
    entries = {e.id: e for e in project.manifest.patches} | {d.entry.id: d.entry for d in project.manifest.dropped}
    order: list[tuple[str, str, bool]] = [(e.id, "", True) for e in project.manifest.patches]
    files: dict[str, str] = {}
    added = []
    for item in incoming:
        patch = PatchFile.parse(item.text, name=item.source)
        with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as fh:
            fh.write(item.text)
            tmp = Path(fh.name)
        try:
            with repo.temporary_index(parent) as index:
                res = index.apply([tmp])
                if not res.ok:
                    failures = diagnose(repo, index, tmp, patch, git_message=res.stderr)
                    result = SeriesResult(base=base.commit, results=(PatchResult(
                        id=_slug(patch.subject), file=item.source, outcome=Outcome.FAILED, failures=failures,
                        git_message=res.stderr.strip()),))
                    first = failures[0]
                    where = f"hunk {first.hunk} ({first.header})" if first.hunk else "the patch"
                    raise ApplyConflict(f"{item.source}: does not apply at {pin.name} after the series: "
                                        f"{first.file} {where}: {first.reason}"
                                        + (f" - {first.detail}" if first.detail else ""),
                                        result=result, hint="nothing was imported; rebase the patch onto the pin")
                tree = index.write_tree()
        finally:
            os.unlink(tmp)
        author = git.Ident(patch.author_name, patch.author_email, 0)
        parent = repo.commit_tree(tree, [parent], patch.message, author=author,
                                  committer=git.Ident(*git.FIXED_IDENT, 0))
        ident = _unique(_slug(patch.subject), entries, order)
        order.append((ident, parent, False))
        name = f"{PATCHES_DIR}/{len(order):04d}-{_slug(ident)}.patch"
        files[name] = repo.format_patch(parent)
        added.append({"id": ident, "file": name, "source": item.source, **{f"upstream_{k}": v for k, v in
                                                                           item.upstream.items()}})
    doc = manifest_document(project.root)
    for row in added:
        table = skeleton(row["id"], row["file"])
        table["upstream"] = tomlio.inline_table({k.removeprefix("upstream_"): v for k, v in row.items()
                                                 if k.startswith("upstream_")})
        tomlio.append_table(doc, "patch", table)
    written = _write_all(project.root, files, manifest_text(doc), remove=[], moves={})
    return ImportResult(added=tuple(added), written=tuple(written))
