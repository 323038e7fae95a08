"""Writing the series: its patch files, the manifest, moves and removals as one journal
transaction, so a stop part way leaves the old series or the new one, never a mix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import fsroot, paths
from patchtool.errors import InvalidInput, UsageError
from patchtool.project import journal
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import read_patch


def write_series(
    root: Path,
    files: Mapping[str, str],
    manifest: str,
    *,
    remove: Sequence[str],
    moves: Mapping[str, str],
    remove_trees: Sequence[str] = (),
) -> list[str]:
    """The series' files, the manifest, the moves (old path -> new path) and the removals, as
    one transaction (``journal``); ``remove_trees``: directories of ``.patchtool/`` to remove with it."""
    files = dict(files)
    for src, moved in moves.items():
        if (text := paths.read_text_if_present(root, src)) is not None:
            files.setdefault(moved, text)
    return journal.commit(root, {**files, MANIFEST_NAME: manifest}, remove=[*remove, *moves], remove_trees=remove_trees)


def check_patches(root: Path, patches: Sequence[tuple[str, str, str]], *, hint: str) -> None:
    """Refused, before anything moves, unless each patch text ``(id, file, text)`` is one the series
    loader reads back (``repository.read_patch``: UsageError naming the file, what is wrong and
    ``hint``, what to do) and each destination can be written (read as the journal's pre-read does)."""
    for ident, rel, text in patches:
        try:
            read_patch(rel, ident, text.encode("utf-8"))
        except InvalidInput as exc:
            problem = exc.problems[0]
            raise UsageError(
                f"patch {ident} would be written as a file the series cannot read ({rel}): {problem.message}; "
                "nothing was changed",
                hint=hint,
            ) from None
    journal.changed_files(root, {rel: text for _, rel, text in patches})


def refuse_inside_repository(
    root: Path, target: Path, checkouts: Sequence[Path], *, option: str, command: str, hint: str
) -> None:
    """UsageError where an export's ``target`` (resolved) is in the series, ``.git/`` or
    ``.patchtool/`` of the repository at ``root`` (the rule for report files,
    ``fsroot.series_path``) or in a checkout worktree (one of ``checkouts``): an export goes
    beside the series, never over it. ``option``: how the message names the destination
    (``--quilt DIR``); ``command``: the command, for the rule."""
    if (rel := fsroot.series_path(target, root)) is not None:
        raise UsageError(
            f"{option}: it would write {rel}/ in the patch repository; "
            f"{command} never writes into the series, .git/ or .patchtool/",
            hint=hint,
        )
    for tree in checkouts:
        if target.is_relative_to(tree.resolve()):
            raise UsageError(
                f"{option}: it would write into the checkout worktree {tree}; {command} never writes into a checkout",
                hint=hint,
            )
