"""``patchtool export --quilt``: the series as a quilt ``patches/`` directory, for packaging that
expects quilt: each patch its format-patch file with a DEP-3 header (``dep3.header``) among its
mail headers, which ``git am`` and ``quilt push`` skip and ``import`` reads back."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from patchtool import fsroot, paths
from patchtool.errors import UsageError
from patchtool.project.repository import Project
from patchtool.series import dep3


def with_header(text: str, header: str) -> str:
    """Format-patch ``text`` with ``header``'s lines at the end of its mail headers."""
    mail, sep, rest = text.partition("\n\n")
    return f"{mail}\n{header.rstrip(chr(10))}{sep}{rest}"


def check_destination(project: Project, dest: Path, checkouts: Sequence[Path] = ()) -> None:
    """UsageError where ``dest/patches`` would be in the series, ``.git/`` or ``.patchtool/`` of
    the repository (the rule for report files, ``fsroot.series_path``) or in a checkout worktree
    (one of ``checkouts``): an export goes beside the series, never over it."""
    target = dest.resolve() / "patches"  # the user's own directories, as the user named them
    if (rel := fsroot.series_path(target, project.root)) is not None:
        raise UsageError(
            f"--quilt {dest}: it would write {rel}/ in the patch repository; "
            "export --quilt never writes into the series, .git/ or .patchtool/",
            hint="export into a directory of its own, e.g. debian/ or one outside the repository",
        )
    for tree in checkouts:
        if target.is_relative_to(tree.resolve()):
            raise UsageError(
                f"--quilt {dest}: it would write into the checkout worktree {tree}; "
                "export --quilt never writes into a checkout",
                hint="export into a directory of its own, e.g. debian/ or one outside the repository",
            )


def export_quilt(project: Project, dest: Path, *, force: bool = False, checkouts: Sequence[Path] = ()) -> list[str]:
    """patches/ and patches/series in ``dest`` (``check_destination``); ``force``: refresh a
    quilt directory that is there in place (as ``gbp pq export`` does), removing the patches its
    old series listed that the series no longer has."""
    check_destination(project, dest, checkouts)
    loaded = project.series()
    out = dest / "patches"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} is not a directory; refusing to write a quilt series there")
    old = (paths.read_text_if_present(out, "series") or "") if out.exists() else ""
    if out.exists() and any(out.iterdir()) and not force:
        raise UsageError(
            f"{out} exists and is not empty; refusing to overwrite a quilt series",
            hint="refresh it in place with --force, export into a new directory, or remove that one first",
        )
    disk = fsroot.Root(dest)
    disk.directory("patches")
    names = []
    for lp in loaded:
        name = Path(lp.entry.file).name
        text = paths.read_inside(project.root, lp.entry.file).decode("utf-8")
        disk.write(f"patches/{name}", with_header(text, dep3.header(lp.entry.to_dict())))
        names.append(name)
    disk.write("patches/series", "".join(f"{n}\n" for n in names))
    for line in old.splitlines():
        words = line.split("#", 1)[0].split()
        gone = words[0] if words else None
        if gone and gone not in names and "/" not in gone and disk.kind(f"patches/{gone}") is not None:
            disk.unlink(f"patches/{gone}")
    return [str(out / n) for n in names] + [str(out / "series")]


def diff_digest(text: str) -> str:
    """The sha256 of a format-patch text's diff (from its first ``diff --git`` line on)."""
    at = text.find("\ndiff --git ")
    return hashlib.sha256(text[at + 1 if at >= 0 else 0 :].encode("utf-8")).hexdigest()
