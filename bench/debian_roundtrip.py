"""Round trip of Debian's real quilt series through patchtool: ``init`` on the release's sdist from
PyPI, ``import`` of ``debian/patches``, ``export --quilt`` with no change, then: which exported files
differ from Debian's (byte for byte, the series file included), and whether ``quilt push -a`` of the
export gives the tree ``quilt push -a`` of Debian's own series gives on the same sdist.

The material is fetched outside the repository, never committed:

    /work/shared/tools/debian-source.sh /tmp/deb python-werkzeug jinja2 python-urllib3 sqlparse python-idna
    python bench/debian_roundtrip.py /tmp/deb python-werkzeug=werkzeug==2.2.2@Werkzeug-{version}/: ...

Each argument after DIR is ``SOURCE=NAME==VERSION[@FROM:TO]``: the Debian source package (a
directory of DIR), the release ``patchtool init`` pins and its ``--prefix`` (Debian's patches are
relative to the whole sdist). Prints one line a package and exits 1 if any differs.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


def patchtool(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "patchtool", *args], cwd=cwd, env=env, capture_output=True, text=True)


def quilt_tree(sdist: Path, patches: Path, scratch: Path) -> tuple[Path, str]:
    """``quilt push -a`` of ``patches`` on the sdist's tree in ``scratch``: the tree and quilt's word."""
    scratch.mkdir()
    with tarfile.open(sdist) as tf:
        tf.extractall(scratch, filter="data")
    (top,) = [p for p in scratch.iterdir() if p.is_dir()]
    shutil.copytree(patches, top / "patches")
    env = {"PATH": "/usr/bin:/bin", "QUILT_PATCHES": "patches", "HOME": str(scratch)}
    push = subprocess.run(["quilt", "push", "-a"], cwd=top, env=env, capture_output=True, text=True)
    shutil.rmtree(top / "patches")
    shutil.rmtree(top / ".pc", ignore_errors=True)
    return top, "ok" if push.returncode == 0 else f"quilt exit {push.returncode}"


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def one(deb: Path, source: str, release: str, work: Path, env: dict[str, str]) -> tuple[bool, str]:
    theirs = deb / source / "debian" / "patches"
    repo = work / "fork"
    repo.mkdir()
    release, _, prefix = release.partition("@")
    res = patchtool("init", "--upstream", release, *(["--prefix", prefix] if prefix else []), cwd=repo, env=env)
    if res.returncode:
        return False, f"init exit {res.returncode}: {(res.stderr or res.stdout).strip()[:200]}"
    res = patchtool("import", str(theirs), "--author", "Bench <bench@example.org>", cwd=repo, env=env)
    if res.returncode:
        return False, f"import exit {res.returncode}: {(res.stderr or res.stdout).strip()[:300]}"
    out = work / "export"
    res = patchtool("export", "--quilt", str(out), cwd=repo, env=env)
    if res.returncode:
        return False, f"export exit {res.returncode}: {(res.stderr or res.stdout).strip()[:200]}"
    files = sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file())
    ours = sorted(str(p.relative_to(out / "patches")) for p in (out / "patches").rglob("*") if p.is_file())
    listed = [f for f in files if f == "series" or f in (theirs / "series").read_text()]
    differ = [f for f in listed if f not in ours or (theirs / f).read_bytes() != (out / "patches" / f).read_bytes()]
    sdist = next(Path(env["PATCHTOOL_CACHE_DIR"]).rglob("*.tar.gz"))
    a, qa = quilt_tree(sdist, theirs, work / "debian-tree")
    b, qb = quilt_tree(sdist, out / "patches", work / "export-tree")
    tree = "same tree" if qa == qb == "ok" and same_tree(a, b) else f"trees differ (debian: {qa}, export: {qb})"
    n = len(listed) - 1
    return not differ and tree == "same tree", f"{n} patches, {n + 1 - len(differ)}/{n + 1} files identical" + (
        f" (differ: {', '.join(differ)})" if differ else ""
    ) + f", quilt push -a: {tree}"


def main(argv: list[str]) -> int:
    deb, specs = Path(argv[0]), argv[1:]
    ok = True
    for spec in specs:
        source, release = spec.split("=", 1)
        with tempfile.TemporaryDirectory(prefix="debian-roundtrip-") as tmp:
            work = Path(tmp)
            env = {
                **os.environ,
                "PATCHTOOL_CACHE_DIR": str(work / "cache"),
                "GIT_AUTHOR_NAME": "Bench",
                "GIT_AUTHOR_EMAIL": "bench@example.org",
                "GIT_COMMITTER_NAME": "Bench",
                "GIT_COMMITTER_EMAIL": "bench@example.org",
            }
            good, said = one(deb, source, release, work, env)
        ok &= good
        print(f"{source} ({release}): {said}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
