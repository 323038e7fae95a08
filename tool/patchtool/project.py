"""The patch repository on disk: manifest, pins and patch files, loaded and cross-checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from . import journal
from . import manifest as manifest_mod
from .errors import InvalidInput, Problem, UsageError
from .manifest import Manifest, PatchEntry
from .patchfile import PatchFile
from .upstream import Pin, load_pin

PATCHES_DIR = "patches"
DROPPED_DIR = f"{PATCHES_DIR}/dropped"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LoadedPatch:
    entry: PatchEntry
    patch: PatchFile
    path: Path

    @property
    def id(self) -> str:
        return self.entry.id


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Project:
    root: Path
    manifest: Manifest

    @classmethod
    def find(cls, start: Path) -> Path:
        """The nearest directory at or above ``start`` holding ``patchset.toml``."""
        for candidate in (start, *start.parents):
            if (candidate / manifest_mod.MANIFEST_NAME).is_file():
                return candidate
        raise UsageError(f"no {manifest_mod.MANIFEST_NAME} in {start} or any parent",
                         hint="run patchtool inside the patch repository, or pass --root")

    @classmethod
    def load(cls, root: Path) -> Project:
        """The repository as its files say; a write an earlier command committed but did not
        finish (killed) is finished first, so nothing reads a half-written series."""
        journal.recover(root)
        return cls(root=root, manifest=manifest_mod.load(root / manifest_mod.MANIFEST_NAME))

    def pin(self, name: str | None = None) -> Pin:
        return load_pin(self.root, name or self.manifest.pin)

    def series(self) -> list[LoadedPatch]:
        """Every patch of the series parsed; raises with all the problems at once."""
        loaded, problems = self.try_series()
        if problems:
            raise InvalidInput(problems[0].render() if len(problems) == 1 else
                               f"{len(problems)} problems in the patch files", problems=problems)
        return loaded

    def try_series(self) -> tuple[list[LoadedPatch], list[Problem]]:
        loaded: list[LoadedPatch] = []
        problems: list[Problem] = []
        for entry in self.manifest.patches:
            path = self.root / entry.file
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                problems.append(Problem(file=entry.file, patch=entry.id, code="missing-file",
                                        message="patch file does not exist",
                                        hint="restore it or remove the entry from patchset.toml"))
                continue
            except UnicodeDecodeError as exc:
                problems.append(Problem(file=entry.file, patch=entry.id, message=f"not UTF-8: {exc}"))
                continue
            try:
                loaded.append(LoadedPatch(entry=entry, patch=PatchFile.parse(text, name=entry.file),
                                          path=path))
            except InvalidInput as exc:
                problems.extend(p.located(patch=entry.id) for p in exc.problems)
        return loaded, problems

    def orphans(self) -> list[Problem]:
        """Patch files no entry names, and file order that disagrees with the series order."""
        listed = {e.file for e in self.manifest.patches}
        problems = []
        for path in sorted((self.root / PATCHES_DIR).glob("*.patch")):
            rel = f"{PATCHES_DIR}/{path.name}"
            if rel not in listed:
                problems.append(Problem(file=rel, code="orphan",
                                        message="patch file is not in the series",
                                        hint="add an entry to patchset.toml or delete the file"))
        files = [e.file for e in self.manifest.patches]
        if files != sorted(files):
            problems.append(Problem(
                file=manifest_mod.MANIFEST_NAME, code="order",
                message="patch file names do not sort in series order, so `git am patches/*.patch` "
                        "would apply them in another order",
                hint="number the files in series order (0001-..., 0002-...)"))
        return problems


def dropped_path(file: str) -> str:
    """Where a dropped patch's file is kept."""
    return f"{DROPPED_DIR}/{PurePosixPath(file).name}"


def inline_table(values: Mapping[str, Any]) -> Any:
    """A tomlkit inline table written ``{ key = value, ... }``, as the repository's files write
    them (tomlkit's own has no spaces inside the braces)."""
    import tomlkit

    table = tomlkit.inline_table()
    table.update(values)
    inner = table.as_string().strip()[1:-1].strip()
    return tomlkit.parse(f"x = {{ {inner} }}" if inner else "x = {}")["x"]


def record_dropped(doc: Any, table: Any, *, reason: str, dropped_at: str) -> None:
    """Record a ``[[patch]]`` table, already taken out of the series in the tomlkit document ``doc``,
    under ``[[dropped]]`` with its metadata, the reason and when; its file goes to DROPPED_DIR."""
    table["file"] = dropped_path(str(table["file"]))
    table["reason"] = reason
    table["dropped_at"] = dropped_at
    existing = doc.get("dropped")
    if existing is None:
        import tomlkit  # only a write needs it

        aot = tomlkit.aot()
        aot.append(table)
        doc["dropped"] = aot
    else:
        existing.append(table)
