"""Symbolic links inside an sdist (issue 30): a relative link that leads, inside the tree and
through its other links, to one of its regular files is upstream's content and kept as a link
(idna-3.4.tar.gz holds ``tools/intranges.py -> ../idna/intranges.py``); every other link is
refused before anything is imported, and no patch may change a link or write through one.

Each sdist is crafted here and served by the demo's local index with a pin naming its true
sha256: the hash proves only that the file is the one pinned, never that its links are safe."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from test_artifacts import refused, run, sdist_with, serve

from conftest import Demo, edit
from helpers import git, snapshot

WHOLE = ("demo-1.0/", "python/")  # the whole sdist, as init takes it, under python/ (the work tree's layout)
LINK_HINT = (
    "a link inside an sdist is kept only where it leads, inside the tree, to one of its regular files; the "
    "artifact is malformed or hostile; nothing was imported"
)


def link(name: str, target: str) -> tuple[str, tarfile.TarInfo]:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = tarfile.SYMTYPE, target
    return name, ti


def links(*pairs: tuple[str, str]) -> dict[str, tarfile.TarInfo]:
    return dict(link(f"demo-1.0/{n}", t) for n, t in pairs)


@pytest.fixture
def linked(demo: Demo) -> Demo:
    """demo 1.0 as a whole sdist with tools/core.py -> ../demo/core.py and tools/chain.py ->
    core.py (a link to that link), and the work tree to write patches in with the same links."""
    sdist = sdist_with(
        demo.root.parent / "linked" / "demo-1.0.tar.gz",
        links(("tools/core.py", "../demo/core.py"), ("tools/chain.py", "core.py")),
    )
    serve(demo, sdist, prefix=WHOLE)
    git(demo.work, "checkout", "-q", "upstream")
    (demo.work / "python/tools").mkdir()
    os.symlink("../demo/core.py", demo.work / "python/tools/core.py")
    os.symlink("core.py", demo.work / "python/tools/chain.py")
    git(demo.work, "add", "-A")
    git(demo.work, "commit", "-q", "-m", "upstream 1.0 with links")
    demo.write_manifest()
    return demo


def test_a_link_to_a_file_of_the_sdist_is_kept_as_a_link(linked: Demo) -> None:
    linked.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    linked.write_manifest(linked.entry("greet", "0001-greet.patch"))
    tree = linked.root.parent / "tree"
    code, out = run(linked, "apply", "--into", str(tree))
    assert code == 0, out
    assert os.readlink(tree / "python/tools/core.py") == "../demo/core.py"
    assert os.readlink(tree / "python/tools/chain.py") == "core.py"
    assert '"hi"' in (tree / "python/tools/chain.py").read_text()  # the patched target, read through both
    listing = git(linked.cache / "upstream.git", "ls-tree", "-r", out["data"]["base"])
    assert "120000 blob" in listing and "\tpython/tools/core.py" in listing and "\tpython/tools/chain.py" in listing


@pytest.mark.parametrize(
    ("members", "prefix", "why"),
    [
        pytest.param(
            links(("demo/a.py", "b.py"), ("demo/b.py", "../../../etc/passwd")),
            WHOLE,
            "entry 'demo-1.0/demo/a.py' is a symbolic link that leads to the link 'demo-1.0/demo/b.py', which "
            "points at '../../../etc/passwd', which leaves the tree",
            id="a chain that escapes",
        ),
        pytest.param(
            links(("demo/a.py", "../../../x")),
            WHOLE,
            "entry 'demo-1.0/demo/a.py' is a symbolic link that points at '../../../x', which leaves the tree",
            id="escapes",
        ),
        pytest.param(
            links(("demo/a.py", "/etc/passwd")),
            WHOLE,
            "entry 'demo-1.0/demo/a.py' is a symbolic link that points at '/etc/passwd', which is no plain "
            "relative path",
            id="absolute",
        ),
        pytest.param(
            links(("tools/d", "../demo")),
            WHOLE,
            "entry 'demo-1.0/tools/d' is a symbolic link that points at '../demo', which is a directory",
            id="a directory",
        ),
        pytest.param(
            links(("a.py", "zl/core.py"), ("zl", "demo/core.py")),
            WHOLE,
            "entry 'demo-1.0/a.py' is a symbolic link that points at 'zl/core.py', which passes through the "
            "link 'demo-1.0/zl' as a directory",
            id="through a link",
        ),
        pytest.param(
            links(("a.py", "demo/core.py/x")),
            WHOLE,
            "entry 'demo-1.0/a.py' is a symbolic link that points at 'demo/core.py/x', which passes through the "
            "file 'demo-1.0/demo/core.py' as a directory",
            id="through a file",
        ),
        pytest.param(
            links(("a.py", "demo/nothing.py")),
            WHOLE,
            "entry 'demo-1.0/a.py' is a symbolic link that points at 'demo/nothing.py', which the tree does not "
            "have ('demo-1.0/demo/nothing.py')",
            id="dangling",
        ),
        pytest.param(
            links(("demo/a.py", "b.py"), ("demo/b.py", "a.py")),
            WHOLE,
            "entry 'demo-1.0/demo/a.py' is a symbolic link that is a loop of links ('demo-1.0/demo/a.py' -> "
            "'demo-1.0/demo/b.py' -> 'demo-1.0/demo/a.py')",
            id="a loop",
        ),
        pytest.param(
            links(("demo/a.py", "a.py")),
            WHOLE,
            "entry 'demo-1.0/demo/a.py' is a symbolic link that is a loop of links ('demo-1.0/demo/a.py' -> "
            "'demo-1.0/demo/a.py')",
            id="itself",
        ),
        pytest.param(
            links(*((f"demo/l{i:02}.py", f"l{i + 1:02}.py") for i in range(41)), ("demo/l41.py", "core.py")),
            WHOLE,
            "entry 'demo-1.0/demo/l00.py' is a symbolic link that is a chain of more than 40 links",
            id="too long a chain",
        ),
        pytest.param(
            links(("demo/r.py", "../PKG-INFO")),
            ("demo-1.0/demo/", ""),
            "entry 'demo-1.0/demo/r.py' is a symbolic link to 'demo-1.0/PKG-INFO', but imported as 'r.py' "
            "(prefix demo-1.0/demo/ -> .) it points at '../PKG-INFO', which leaves the tree",
            id="out of the prefix",
        ),
    ],
)
def test_a_link_that_does_not_lead_to_a_file_of_the_tree_is_refused(
    demo: Demo, members: dict[str, tarfile.TarInfo], prefix: tuple[str, str], why: str
) -> None:
    demo.write_manifest()
    serve(demo, sdist_with(demo.root.parent / "hostile" / "demo-1.0.tar.gz", members), prefix=prefix)
    error = refused(demo, "apply", 4)
    assert error["message"] == f"demo-1.0.tar.gz: {why}; refusing it"
    if "prefix" not in why:
        assert error["hint"] == LINK_HINT


def retarget(text: str) -> str:
    """A format-patch of a link's change with its mode taken off the index line, so that only the
    link's text stands in the hunk: what git apply would apply to the link."""
    return text.replace(" 120000\n", "\n")


def through(text: str) -> str:
    """A patch of demo/core.py's content, named as the link that points at it."""
    return text.replace("python/demo/core.py", "python/tools/core.py")


def retargeting(work: Path) -> None:
    os.remove(work / "python/tools/core.py")
    os.symlink("../../../../../etc/passwd", work / "python/tools/core.py")


@pytest.mark.parametrize(
    ("change", "craft"),
    [
        pytest.param(retargeting, retarget, id="link retargeted by a patch"),
        pytest.param(edit("python/demo/core.py", '"hello"', '"hi"'), through, id="a patch writing through a link"),
    ],
)
def test_no_patch_changes_a_link_or_writes_through_one(linked: Demo, change: object, craft: object) -> None:
    text = craft(linked.commit_patch("0001-link.patch", change, "tools: the link"))  # type: ignore[operator]
    assert "120000" not in text and "python/tools/core.py" in text
    patch = linked.root.parent / "link.patch"
    patch.write_text(text)
    (linked.root / "patches/0001-link.patch").unlink()
    before = snapshot(linked.root)
    code, out = run(linked, "import", str(patch))
    assert code == 3, out
    assert (
        "python/tools/core.py the patch: a symbolic link - upstream has it as a symbolic link"
        in out["errors"][0]["message"]
    )
    assert out["errors"][0]["hint"] == "nothing was imported; patch the file the link points at instead"
    assert snapshot(linked.root) == before
    # the same patch in the series: apply stops at it and writes nothing
    (linked.root / "patches/0001-link.patch").write_text(text)
    linked.write_manifest(linked.entry("link", "0001-link.patch"))
    target = linked.root.parent / "target"
    code, out = run(linked, "apply", "--into", str(target))
    assert code == 3, out
    failure = out["data"]["patches"][0]["failures"][0]
    assert (failure["file"], failure["reason"]) == ("python/tools/core.py", "a symbolic link")
    assert not target.exists()
