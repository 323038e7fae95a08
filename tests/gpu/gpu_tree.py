"""The patched tree the GPU checks load modules from: made by `patchtool apply`, packed into an
archive on a machine that has the pinned sglang (or network), unpacked on a GPU machine that has
neither. A stamp inside the tree says which series it is.

Standard library only: a GPU image has no patchtool dependencies, so this reads ``patchset.toml``
with ``tomllib`` and never imports patchtool (building a tree runs it as a program).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STAMP = ".patchtool-gpu-tree.json"
TREE_ENV = "PATCHTOOL_GPU_TREE"
TREE_ERROR_ENV = "PATCHTOOL_GPU_TREE_ERROR"  # why the runner has no tree: the checks that need one say so
_CHECK_FILE = re.compile(r"test_(\d{4})_")


class TreeError(Exception):
    """No usable patched tree; the message says what to do."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tree:
    path: Path
    source: str  # "directory", "archive ...", "patchtool apply"
    stamp: dict[str, Any] | None  # what series the tree carries, when known

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "source": self.source, **(self.stamp or {})}


def series_stamp(repo: Path = REPO) -> dict[str, Any]:
    """The pin and each patch's id, file and sha256, as ``patchset.toml`` and ``patches/`` say."""
    manifest = tomllib.loads((repo / "patchset.toml").read_text(encoding="utf-8"))
    patches = []
    for entry in manifest.get("patch", []):
        data = (repo / entry["file"]).read_bytes()
        patches.append({"id": entry["id"], "file": entry["file"], "sha256": hashlib.sha256(data).hexdigest()})
    return {"schema": 1, "pin": manifest.get("pin"), "repository_commit": _git_head(repo), "patches": patches}


def patch_of(check_file: str, stamp: dict[str, Any] | None) -> dict[str, Any] | None:
    """The patch a check file is about: ``test_0002_...`` is the patch in ``patches/0002-*.patch``."""
    match = _CHECK_FILE.search(Path(check_file).name)
    if match is None or stamp is None:
        return None
    prefix = f"patches/{match.group(1)}-"
    return next((p for p in stamp.get("patches", []) if p["file"].startswith(prefix)), None)


def apply_into(into: Path, *, cache_dir: Path | None, repo: Path = REPO) -> Tree:
    """`patchtool apply --into INTO` from ``repo``, with the stamp written into the tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo / "tool"), env.get("PYTHONPATH")]))
    cache = cache_dir or _default_cache(repo)
    if cache is not None:
        env["PATCHTOOL_CACHE_DIR"] = str(cache)
    res = subprocess.run(
        [sys.executable, "-m", "patchtool", "apply", "--root", str(repo), "--into", str(into)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-6:])
        raise TreeError(f"`patchtool apply` failed (exit {res.returncode}): {tail}")
    stamp = {**series_stamp(repo), "tip": _git_head(into)}
    (into / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return Tree(path=into, source="patchtool apply", stamp=stamp)


def pack(archive: Path, *, cache_dir: Path | None, repo: Path = REPO) -> Tree:
    """The patched tree as a .tar.gz (no .git), for a GPU machine that cannot build one."""
    with tempfile.TemporaryDirectory(prefix="gpu-tree-") as tmp:
        tree = apply_into(Path(tmp) / "sglang", cache_dir=cache_dir, repo=repo)
        partial = archive.with_name(archive.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            for child in sorted(tree.path.iterdir()):
                if child.name != ".git":
                    tar.add(child, arcname=child.name)
        os.replace(partial, archive)
        return Tree(path=archive, source="archive", stamp=tree.stamp)


def unpack(archive: Path, into: Path) -> Tree:
    """An archive `pack` made, unpacked into ``into`` (members that would leave it are refused)."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise TreeError(f"cannot unpack {archive}: {exc}") from None
    return open_tree(into, source=f"archive {archive}")


def open_tree(path: Path, *, source: str = "directory") -> Tree:
    if not (path / "python" / "sglang").is_dir():
        raise TreeError(
            f"{path} is not a patched sglang tree (no python/sglang in it); make one with "
            "`patchtool apply --into DIR` or `python tests/gpu/run.py --pack-tree FILE.tar.gz`"
        )
    stamp_file = path / STAMP
    stamp = None
    if stamp_file.is_file():
        try:
            stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TreeError(f"{stamp_file} is not readable JSON: {exc}") from None
    elif (tip := _git_head(path)) is not None:
        stamp = {"tip": tip}
    return Tree(path=path, source=source, stamp=stamp)


def resolve(given: str | None, scratch: Path, *, cache_dir: Path | None) -> Tree:
    """The tree for this run: a directory or archive given (``--tree`` or ``$PATCHTOOL_GPU_TREE``),
    else one `patchtool apply` builds into ``scratch``."""
    if given:
        path = Path(given)
        if path.is_file():
            return unpack(path, scratch / "tree")
        if not path.exists():
            raise TreeError(f"{given} does not exist")
        return open_tree(path.resolve())
    return apply_into(scratch / "sglang", cache_dir=cache_dir)


def _default_cache(repo: Path) -> Path | None:
    """$PATCHTOOL_CACHE_DIR, else the tests' cache when it exists, else patchtool's own default."""
    env = os.environ.get("PATCHTOOL_CACHE_DIR") or os.environ.get("PATCHTOOL_TEST_CACHE")
    if env:
        return Path(env)
    tests_cache = repo / ".cache" / "test-upstream"
    return tests_cache if tests_cache.is_dir() else None


def _git_head(path: Path) -> str | None:
    """The commit checked out at ``path`` when ``path`` is the top of a git worktree (never an
    enclosing repository's)."""
    if shutil.which("git") is None:
        return None
    res = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True, check=False
    )
    lines = res.stdout.splitlines()
    if res.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != path.resolve():
        return None
    return lines[1]
