"""Applying the series onto a base: one commit per patch, zero fuzz, one result per patch."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from patchtool import git
from patchtool.diff import fuzz, textpatch
from patchtool.diff.model import CONTEXT, REMOVED, Diff, FileDiff, Hunk, lines_of
from patchtool.diff.patchfile import PatchFile
from patchtool.project.repository import LoadedPatch

LINK_MODE = "120000"


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    FAILED = "failed"
    NOT_REACHED = "not reached"


class Reason(enum.StrEnum):
    CONTEXT = "context does not match"
    FILE_MISSING = "file missing"
    FILE_EXISTS = "file already exists"
    ALREADY_APPLIED = "already applied (it applies in reverse)"
    LINK = "a symbolic link"
    OTHER = "git apply refused it"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HunkFailure:
    file: str
    reason: Reason
    hunk: int | None = None  # 1-based, within the file
    header: str | None = None
    line: int | None = None  # where upstream's text first differs from what the hunk expects
    detail: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            k: (str(v) if isinstance(v, enum.Enum) else v) for k, v in dataclasses.asdict(self).items() if v is not None
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchResult:
    id: str
    file: str
    outcome: Outcome
    commit: str | None = None
    failures: tuple[HunkFailure, ...] = ()
    git_message: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "file": self.file, "outcome": str(self.outcome)}
        if self.commit:
            out["commit"] = self.commit
        if self.outcome is Outcome.FAILED:
            out["failures"] = [f.to_dict() for f in self.failures]
            if self.git_message:
                out["git"] = self.git_message
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesResult:
    base: str
    results: tuple[PatchResult, ...]
    tip: str | None = None  # the last commit, when every patch applied and commits were made
    last_good: str | None = None  # the last commit that applied, for a partial tree

    @property
    def ok(self) -> bool:
        return all(r.outcome is Outcome.APPLIED for r in self.results)

    @property
    def failed(self) -> PatchResult | None:
        return next((r for r in self.results if r.outcome is Outcome.FAILED), None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesAtPin:
    """The series applied at a pin, as ``apply`` and ``wheel build`` report it: with the tree
    written, or, when a patch failed, the target left as it was and what ``--keep-failed`` left."""

    pin: str
    series: SeriesResult
    tree: str | None = None  # where the patched tree was written
    untouched: str | None = None  # a patch failed: the target, left as it was
    kept_failed: bool = False  # --keep-failed was asked: the report names the partial tree
    partial_tree: str | None = None  # the partial tree, None where none could be written

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "pin": self.pin,
            "base": self.series.base,
            "patches": [r.to_dict() for r in self.series.results],
        }
        if self.tree is not None:
            out |= {"tree": self.tree, "tip": self.series.tip}
        if self.untouched is not None:
            out |= {"target": self.untouched, "target_changed": False}
            if self.kept_failed:
                out["partial_tree"] = self.partial_tree
        return out


def apply_series(
    repo: git.Repo,
    base: str,
    patches: Sequence[LoadedPatch],
    *,
    commit: bool,
    timestamp: int = 0,
    message: Callable[[LoadedPatch], str] | None = None,
) -> SeriesResult:
    """Apply ``patches`` in order on a temporary index; with ``commit``, one commit each.

    Nothing outside the cache's object store is written. Commits are deterministic:
    author from the patch file, fixed dates and committer, so the same series on the
    same base always gives the same SHAs.
    """
    if not patches:  # nothing to apply: no index to read the base into
        return SeriesResult(base=base, results=(), tip=base if commit else None, last_good=base)
    results: list[PatchResult] = []
    parent = base
    touching = {lp.id: found for lp in patches if (found := touched_links(repo, base, lp.patch))}
    with repo.temporary_index(base) as index:
        if not commit and patches and not touching and index.apply([p.path for p in patches]).ok:
            # one git process for the whole series: git apply carries each file's result forward
            return SeriesResult(
                base=base,
                results=tuple(PatchResult(id=p.id, file=p.entry.file, outcome=Outcome.APPLIED) for p in patches),
            )
        for i, lp in enumerate(patches):
            res = index.apply([lp.path]) if lp.id not in touching else None
            if res is None or not res.ok:
                failures = (
                    link_failures(touching[lp.id])
                    if res is None
                    else diagnose(repo, index, lp.path, lp.patch, git_message=res.stderr)
                )
                said = res.stderr.strip() if res is not None else None
                failed = PatchResult(
                    id=lp.id, file=lp.entry.file, outcome=Outcome.FAILED, failures=failures, git_message=said
                )
                later = (PatchResult(id=p.id, file=p.entry.file, outcome=Outcome.NOT_REACHED) for p in patches[i + 1 :])
                return SeriesResult(base=base, results=(*results, failed, *later), last_good=parent)
            sha = None
            if commit:
                tree = index.write_tree()
                author = git.Ident(lp.patch.author_name, lp.patch.author_email, timestamp)
                committer = git.Ident(*git.FIXED_IDENT, timestamp)
                text = message(lp) if message else lp.patch.message
                sha = parent = repo.commit_tree(tree, [parent], text, author=author, committer=committer)
            results.append(PatchResult(id=lp.id, file=lp.entry.file, outcome=Outcome.APPLIED, commit=sha))
    return SeriesResult(base=base, results=tuple(results), tip=parent if commit else None, last_good=parent)


def touched_links(repo: git.Repo, base: str, patch: PatchFile) -> tuple[str, ...]:
    """The paths ``patch`` touches that are symbolic links at ``base`` (an sdist may hold links
    to its own files): git apply would change a link's text, so a patch may not touch one."""
    paths = [p for f in patch.files for p in (f.old_path, f.new_path) if p]
    return tuple(p for p, (mode, _) in repo.entries(base, paths).items() if mode == LINK_MODE)


def link_failures(paths: Sequence[str]) -> tuple[HunkFailure, ...]:
    why = "upstream has it as a symbolic link; a patch may only change regular files (patch its target)"
    return tuple(HunkFailure(file=p, reason=Reason.LINK, detail=why) for p in paths)


def diagnose(
    repo: git.Repo, index: git.Index, path: Path, patch: PatchFile, *, git_message: str = ""
) -> tuple[HunkFailure, ...]:
    """Why the patch at ``path`` does not apply on the index: which file, which hunk, and the
    reason; where no hunk is to blame, git's own reason (``git_message``, its stderr). "Already
    applied" is git's reverse application at the pin; a rebase asks ``rebase.upstreamed``."""
    if index.apply([path], reverse=True, check=True).ok:
        return tuple(HunkFailure(file=f.path, reason=Reason.ALREADY_APPLIED) for f in patch.files)
    contents = repo.cat_files(index.write_tree(), [f.source or f.path for f in patch.files])
    failures: list[HunkFailure] = []
    left = fuzz.MAX_COMPARED  # lines its hunks may be compared over, all its files together
    for f in patch.files:
        old_path = f.source or f.path
        present = contents.get(old_path)
        if f.status == "added":
            if present is not None:
                exists = "the patch creates it, but upstream has it"
                failures.append(HunkFailure(file=f.path, reason=Reason.FILE_EXISTS, detail=exists))
        elif present is None:
            missing = "the patch changes it, but upstream has no such file"
            failures.append(HunkFailure(file=old_path, reason=Reason.FILE_MISSING, detail=missing))
        else:
            found, left = _hunk_failures(index, patch.model, f, present, left)
            failures += found
    if not failures:
        failures.append(HunkFailure(file=", ".join(patch.paths), reason=Reason.OTHER, detail=git_reason(git_message)))
    return tuple(failures)


# the most of upstream's file a failing patch's hunks are looked for in, one at a time: decoded and
# indexed, a file costs some 60 times its bytes while it is searched
MAX_DIAGNOSED_BYTES = 16 << 20


def _hunk_failures(index: git.Index, diff: Diff, f: FileDiff, data: bytes, most: int) -> tuple[list[HunkFailure], int]:
    """The hunks of ``f`` that git does not apply alone, and why (``data``: upstream's file), and
    how many of the ``most`` lines they may be compared over are left. Each hunk is looked for in
    memory as git places it (``textpatch.Searchable``: only where its rarest line is); git is asked
    the reason of at most a few hunks whose every line matches and that still do not apply."""
    size, count = len(data), data.count(b"\n") + 1
    too_large = size > MAX_DIAGNOSED_BYTES
    if too_large or count > most:  # its index alone would cost more than the search may
        why = (
            f"not looked for: upstream's file is {size} bytes, more than patchtool searches hunk by hunk"
            if too_large
            else _spent()
        )
        lost = [
            HunkFailure(file=f.path, hunk=n, header=h.header, reason=Reason.OTHER, detail=why)
            for n, h in enumerate(f.hunks, 1)
        ]
        return lost, most if too_large else 0
    found = textpatch.Searchable(lines_of(data.decode("utf-8", "surrogateescape")), most=most - count)
    lines = lines_of(data.decode("utf-8", "replace"), keepends=False)
    failures, asked = [], 0
    for n, hunk in enumerate(f.hunks, 1):
        if forward := found.fits(hunk):
            continue
        if forward is not None and found.fits(hunk, reverse=True):
            failures.append(HunkFailure(file=f.path, hunk=n, header=hunk.header, reason=Reason.ALREADY_APPLIED))
            continue
        line: int | None
        detail: str | None
        if forward is None:
            reason, line, detail = Reason.OTHER, None, _spent()
        else:
            line, detail = _first_mismatch(hunk, lines)
            reason = Reason.CONTEXT if detail else Reason.OTHER
        ends = hunk.old_start - 1 + len(hunk.contents(CONTEXT, REMOVED))  # where its matching lines end
        if detail is None and hunk.trailing() == 0 and ends < len(lines):
            detail = (
                "its lines are there, but git applies a hunk with no context after it (as `diff -U0` "
                "writes it) only at the end of the file"
            )
        elif detail is None and asked < 3:  # git's own words, for a few: one process each
            asked += 1
            detail = git_reason(index.apply_text(diff.file_header(f) + diff.hunk_text(hunk)).stderr)
        detail = detail or "its lines are there, and git apply refuses it"
        failures.append(HunkFailure(file=f.path, hunk=n, header=hunk.header, reason=reason, line=line, detail=detail))
    return failures, max(most - count - found.compared, 0)


def _spent() -> str:
    return f"not looked for: the patch's hunks were compared over {fuzz.MAX_COMPARED} lines already"


def git_reason(stderr: str) -> str:
    """git apply's own words, one line: its 'error: ' prefixes and repeated lines dropped."""
    lines = [re.sub(r"^(?:error|fatal|warning): ", "", ln.strip()) for ln in lines_of(stderr, keepends=False)]
    return "; ".join(dict.fromkeys(ln for ln in lines if ln)) or "git apply gave no reason"


def _first_mismatch(hunk: Hunk, lines: list[str]) -> tuple[int | None, str | None]:
    """Where upstream first differs from what ``hunk`` expects: (line, what differs); no
    detail when every line matches (git refused the hunk for another reason)."""
    start = hunk.old_start
    for i, want in enumerate(hunk.contents(CONTEXT, REMOVED)):
        at = start - 1 + i
        if (have := lines[at] if 0 <= at < len(lines) else None) != want:
            detail = f"line {at + 1}: expected {want!r}, found {'end of file' if have is None else repr(have)}"
            if have is not None and have == want + "\r":
                detail += ": upstream's lines end in CRLF, the patch's in LF"
            elif have is not None and have + "\r" == want:
                detail += ": the patch's lines end in CRLF, upstream's in LF"
            return at + 1, detail
    return start, None
