"""``patchtool export --pr ID DIR``: the patch set of one upstream pull request.

The set is the patch and what its entry ``requires`` (transitively), in series order, as the
format-patch files the series holds, which ``git am`` takes. Their paths are already upstream's
repository paths: the pin's prefix mapping put the artifact's files there (a wheel's ``sglang/`` is
the repository's ``python/sglang/``), and a git pin's tree is the repository itself. Beside them,
``PULL_REQUEST.md``: the description, built from the manifest alone, every evidence row quoted with
its source. A patch marked ``experiment`` (no figure behind it) is refused, and so is a set that
carries one."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from patchtool import fsroot
from patchtool.errors import UsageError
from patchtool.project.manifest import PatchEntry
from patchtool.project.pins import Pin
from patchtool.project.repository import LoadedPatch, Project
from patchtool.series.ids import in_series
from patchtool.series.standalone import required_closure
from patchtool.series.writes import refuse_inside_repository

DESCRIPTION = "PULL_REQUEST.md"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PullRequest:
    id: str
    patches: tuple[str, ...]  # the ids the set carries, in the order `git am` takes them
    base: str  # where `git am` takes them: upstream's repository and tag, or the pin
    directory: str
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def upstream_base(pin: Pin) -> str:
    """Where the set applies: the pin's upstream repository and tag, else the release it pins."""
    if pin.git is not None:
        return f"{pin.git.url} at tag {pin.git.tag}"
    return f"{pin.upstream} {pin.version} (the pin records no upstream repository)"


def refuse_experiments(entries: Sequence[PatchEntry], ident: str) -> None:
    """UsageError where the set carries a patch marked ``experiment``, saying why it is one."""
    if (entry := next((e for e in entries if e.experiment is not None), None)) is not None:
        which = f"patch {ident!r} is" if entry.id == ident else f"patch {ident!r} requires {entry.id!r}, which is"
        raise UsageError(
            f"{which} an experiment, not a pull request: {entry.experiment}",
            hint=f"a figure behind it first (its evidence), then remove `experiment` from {entry.id}'s entry",
        )


def description(entries: Sequence[PatchEntry], patches: Sequence[LoadedPatch], pin: Pin) -> str:
    """The pull request's description from the manifest: the last entry is the pull request's
    own, the others what it requires. Each figure is the manifest's, with its source beside it."""
    own, subject = entries[-1], patches[-1].patch.subject
    lines = [f"# {subject}", ""]
    lines += [f"Kind: {own.kind.value}. Applies with `git am` on {upstream_base(pin)}.", ""]
    if len(entries) > 1:
        lines += ["It carries the patches it requires, first:", ""]
        lines += [f"- `{lp.entry.file.rpartition('/')[2]}`: {lp.patch.subject}" for lp in patches[:-1]]
        lines.append("")
    lines += ["## Why", "", own.why.strip(), ""]
    for entry in entries:
        title = "" if entry is own else f" (of {entry.id}, which this requires)"
        if entry.evidence:
            lines += [f"## Evidence{title}", ""]
            for e in entry.evidence:
                values = " -> ".join(str(v) for v in (e.before, e.after) if v is not None)
                lines.append(f"- {e.metric}: {'; '.join(p for p in (values, e.change) if p)}")
                if e.conditions:
                    lines.append("  (" + "; ".join(f"{k}: {v}" for k, v in e.conditions.items()) + ")")
                lines.append(f"  Source: {e.source}")
            lines.append("")
        if entry.knobs:
            lines += [f"## Settings{title}", ""]
            for k in entry.knobs:
                roles = ", ".join(f"{role}: {value}" for role, value in k.recommended.items())
                default = f"; default {k.default}" if k.default is not None else ""
                note = f": {k.note}" if k.note else ""
                lines.append(f"- `{k.name}` ({k.type.value}, {k.relation.value}{default}; recommended {roles}){note}")
            lines.append("")
    lines += [f"Drop when: {own.drop_when}", ""]
    return "\n".join(lines)


def export_pull_request(project: Project, ident: str, dest: Path, checkouts: Sequence[Path] = ()) -> PullRequest:
    """Write the patch set of ``ident``'s pull request into ``dest`` (a new or empty directory
    outside the series and every checkout): its format-patch files and ``PULL_REQUEST.md``."""
    in_series(project, ident)
    carried = required_closure(project.manifest, ident)
    entries = [project.manifest.get(i) for i in carried]
    refuse_experiments(entries, ident)
    _check_destination(project, dest, checkouts)
    by_id = {lp.id: lp for lp in project.series()}
    patches = [by_id[i] for i in carried]
    pin = project.pin()
    text = description(entries, patches, pin)
    disk = fsroot.Root(dest)
    disk.directory()
    written = []
    for name, body in [*((lp.entry.file.rpartition("/")[2], lp.text) for lp in patches), (DESCRIPTION, text)]:
        disk.write(name, body)
        written.append(str(dest / name))
    return PullRequest(id=ident, patches=carried, base=upstream_base(pin), directory=str(dest), written=tuple(written))


def _check_destination(project: Project, dest: Path, checkouts: Sequence[Path]) -> None:
    """UsageError where ``dest`` is in the series, ``.git/`` or ``.patchtool/`` of the repository
    or in a checkout worktree, or is something other than a new or empty directory."""
    refuse_inside_repository(
        project.root,
        dest.resolve(),
        checkouts,
        option=f"export --pr {dest}",
        command="export --pr",
        hint="export into a directory of its own, outside the repository",
    )
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"{dest} is not a directory; refusing to write a pull request's patches there")
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(
            f"{dest} exists and is not empty; refusing to mix a pull request's patches with what is there",
            hint="export into a new directory, or remove that one first",
        )
