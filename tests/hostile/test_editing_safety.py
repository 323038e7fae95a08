"""checkout / export / new and the rebase under hostile conditions: clones sharing a cache.

Each test is a bug that was found: it fails on the code before the fix, asserts the message the
user gets, and that a refused command changed nothing on disk.
"""

from __future__ import annotations

import dataclasses
import shutil

from conftest import Demo, edit
from patchtool.testing import git


def three(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi",
                      "Shorter greeting.")
    demo.commit_patch("0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two",
                      on="p-0001-greet.patch")
    demo.commit_patch("0003-cap.patch", edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"),
                      "core: inclusive cap", on="p-0002-util.patch")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("util", "0002-util.patch"),
                        demo.entry("cap", "0003-cap.patch"))


def clone(demo: Demo, name: str) -> Demo:
    """Another clone of the patch repository on the same machine, sharing the demo's cache."""
    root = demo.root.parent / name
    shutil.copytree(demo.root, root, ignore=shutil.ignore_patterns("work"))
    return dataclasses.replace(demo, root=root)


# -- 1. clones sharing a cache ------------------------------------------------------------------

def test_a_rebase_replays_under_its_own_projects_ref(demo: Demo) -> None:
    three(demo)
    other = clone(demo, "clone-b")
    for project in (demo, other):
        res = project.run("rebase", "--to", "1.0")
        assert res.returncode == 0, res.stdout + res.stderr
    refs = git(demo.cache / "upstream.git", "for-each-ref", "--format=%(refname)", "refs/patchtool").split()
    assert "refs/patchtool/replay" not in refs
    assert len([r for r in refs if r.endswith("/replay")]) == 2
