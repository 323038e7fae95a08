"""``patchtool export --quilt``: the series as a quilt ``patches/`` directory, for packaging that
expects quilt."""

from __future__ import annotations

from pathlib import Path

from patchtool import fsroot, paths
from patchtool.errors import UsageError
from patchtool.project.repository import Project


def export_quilt(project: Project, dest: Path) -> list[str]:
    """patches/ and patches/series in ``dest``, for packaging that expects quilt."""
    loaded = project.series()
    out = dest / "patches"
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise UsageError(
            f"{out} exists and is not empty; refusing to overwrite a quilt series",
            hint="export into a new directory, or remove that one first",
        )
    disk = fsroot.Root(dest)
    disk.directory("patches")
    names = []
    for lp in loaded:
        name = Path(lp.entry.file).name
        disk.create(f"patches/{name}", paths.read_inside(project.root, lp.entry.file))
        names.append(name)
    disk.create("patches/series", "".join(f"{n}\n" for n in names))
    return [str(out / n) for n in names] + [str(out / "series")]
