"""The patch repository on disk: manifest, pins and patch files, loaded and cross-checked."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path, PurePosixPath
from typing import Any

from patchtool.diff import patchfile
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.paths import read_inside, size_problem
from patchtool.project import journal, statedir
from patchtool.project import manifest as manifest_mod
from patchtool.project.manifest import Manifest, PatchEntry
from patchtool.project.pins import Pin, load_pin

PATCHES_DIR = "patches"
DROPPED_DIR = f"{PATCHES_DIR}/dropped"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadedPatch:
    entry: PatchEntry
    path: Path
    text: str  # the patch file as read; parsed when first used
    parsed: PatchFile | None = dataclasses.field(default=None, repr=False, compare=False)  # ... or already

    @property
    def id(self) -> str:
        return self.entry.id

    @functools.cached_property
    def patch(self) -> PatchFile:
        return self.parsed or PatchFile.parse(self.text, name=self.entry.file)


def read_patch(rel: str, ident: str, data: bytes, *, parse: bool = True) -> tuple[str, PatchFile | None]:
    """``data`` as the series reads patch ``ident``'s file ``rel``: its text and (``parse``) the
    patch, or InvalidInput naming each problem. The loader's rules (the read bound, UTF-8, a patch
    file's own), for a file read and for one about to be written, so nothing writes a patch file
    the series then refuses."""
    if (why := size_problem(len(data))) is not None:
        hint = "keep large files out of patches"
        raise InvalidInput(f"{rel}: {why}", file=rel, problems=[Problem(file=rel, patch=ident, message=why, hint=hint)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        why = f"not UTF-8: {exc}"
        raise InvalidInput(f"{rel}: {why}", file=rel, problems=[Problem(file=rel, patch=ident, message=why)]) from None
    return text, parse_patch(rel, ident, text) if parse else None


def parse_patch(rel: str, ident: str, text: str) -> PatchFile:
    try:
        return PatchFile.parse(text, name=rel)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, file=rel, problems=[p.located(patch=ident) for p in exc.problems]) from None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Project:
    root: Path
    manifest: Manifest

    @classmethod
    def find(cls, start: Path) -> Path:
        """The nearest directory at or above ``start`` holding ``patchset.toml``."""
        for candidate in (start, *start.parents):
            if os.path.lexists(candidate / manifest_mod.MANIFEST_NAME):  # load says what is wrong with it
                return candidate
        raise UsageError(
            f"no {manifest_mod.MANIFEST_NAME} in {start} or any parent",
            hint="run patchtool inside the patch repository, or pass --root",
        )

    @classmethod
    def load(cls, root: Path) -> Project:
        """The repository as its files say. A write an earlier command committed but did not
        finish (killed) is refused here, so nothing reads a half-written series: the next writing
        command finishes it (``journal.recover``, under the lock), `patchtool recover` too."""
        if journal.pending(root):
            statedir.refuse_tracked(root)
            raise InvalidInput(
                f"an interrupted patchtool write is not finished yet ({journal.JOURNAL})",
                file=journal.JOURNAL,
                hint="run `patchtool recover` (or any writing command) to finish it",
            )
        return cls(root=root, manifest=manifest_mod.load(root / manifest_mod.MANIFEST_NAME))

    def pin(self, name: str | None = None) -> Pin:
        return load_pin(self.root, name or self.manifest.pin)

    def series(self, *, parsed: bool = True) -> list[LoadedPatch]:
        """Every patch of the series parsed; raises with all the problems at once. Not ``parsed``:
        each file is read and parsed when a step first uses it (a resumed rebase, whose digest
        says the files are the ones that parsed when it started)."""
        loaded, problems = self.try_series(parsed=parsed)
        if problems:
            raise InvalidInput(
                problems[0].render() if len(problems) == 1 else f"{len(problems)} problems in the patch files",
                problems=problems,
            )
        return loaded

    def try_series(self, *, parsed: bool = True) -> tuple[list[LoadedPatch], list[Problem]]:
        loaded: list[LoadedPatch] = []
        problems: list[Problem] = []
        budget = patchfile.SeriesBudget()
        for entry in self.manifest.patches:
            try:  # a parsed patch's problems now, with the others
                text, _ = read_patch(entry.file, entry.id, read_inside(self.root, entry.file), parse=False)
                patch = parse_patch(entry.file, entry.id, text) if parsed else None  # one too long says so
                if why := budget.take(text):  # the rest is not read: memory stays bounded
                    problems.append(Problem(file=entry.file, patch=entry.id, message=why, hint=patchfile.SERIES_HINT))
                    break
                loaded.append(LoadedPatch(entry=entry, path=self.root / entry.file, text=text, parsed=patch))
            except FileNotFoundError:
                problems.append(
                    Problem(
                        file=entry.file,
                        patch=entry.id,
                        code="missing-file",
                        message="patch file does not exist",
                        hint="restore it or remove the entry from patchset.toml",
                    )
                )
            except InvalidInput as exc:
                problems.extend(p.located(patch=entry.id) for p in exc.problems)
        return loaded, problems

    def orphans(self) -> list[Problem]:
        """Patch files no entry names, and file order that disagrees with the series order."""
        files = [e.file for e in self.manifest.patches]
        problems = [
            Problem(
                file=rel,
                code="orphan",
                message="patch file is not in the series",
                hint="add an entry to patchset.toml or delete the file",
            )
            for path in sorted((self.root / PATCHES_DIR).glob("*.patch"))
            if (rel := f"{PATCHES_DIR}/{path.name}") not in files
        ]
        if files != sorted(files):
            problems.append(
                Problem(
                    file=manifest_mod.MANIFEST_NAME,
                    code="order",
                    message="patch file names do not sort in series order, so `git am patches/*.patch` "
                    "would apply them in another order",
                    hint="number the files in series order (0001-..., 0002-...)",
                )
            )
        return problems


def manifest_document(root: Path) -> Any:
    """``patchset.toml`` as an editable tomlkit document (comments and layout kept); every write
    of it goes out through ``write_manifest`` (the one TOML writer)."""
    from patchtool.project import tomlio  # tomlkit: only where the manifest is edited

    return tomlio.parse(read_inside(root, manifest_mod.MANIFEST_NAME).decode("utf-8"), file=manifest_mod.MANIFEST_NAME)


def manifest_text(doc: Any) -> str:
    """The manifest document as text, verified to parse back to what it says."""
    from patchtool.project import tomlio

    return tomlio.dumps(doc, file=manifest_mod.MANIFEST_NAME)


def record_dropped(root: Path, doc: Any, table: Any, *, reason: str, dropped_at: str) -> str:
    """Record a ``[[patch]]`` table, already taken out of the series in the tomlkit document ``doc``,
    under ``[[dropped]]`` with its metadata, the reason and when. Returns where its file goes: a
    name in DROPPED_DIR that no earlier drop holds, on disk or in the manifest, so a patch dropped
    twice under one name never overwrites the first."""
    taken = {str(t.get("file")) for t in doc.get("dropped", [])}
    stem = PurePosixPath(str(table["file"])).stem
    dest, n = f"{DROPPED_DIR}/{stem}.patch", 2
    while dest in taken or (root / dest).exists() or (root / dest).is_symlink():
        dest, n = f"{DROPPED_DIR}/{stem}-{n}.patch", n + 1
    table.update(file=dest, reason=reason, dropped_at=dropped_at)
    from patchtool.project import tomlio

    tomlio.append_table(doc, "dropped", table)
    return dest
