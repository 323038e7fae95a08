"""patchtool's in-memory apply against real ``git apply``, on generated cases: random small files,
random edits (contents, renames, copies, deletions, mode changes, a symbolic link, a file turned
directory) made into a patch by ``git diff``, applied forward and in reverse to a randomly
perturbed preimage by both. The same verdict and the same tree (``differ.check``)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from differ import Entry, Link, check, make_repo, write_files
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import git

pytestmark = pytest.mark.corpus

NAMES = ["a", "b", "c", "d/x", "d/y"]
LINES = ["one\n", "two\n", "three\n", "four\n", "same\n", "same\n", "}\n", "\n"]

lines = st.lists(st.sampled_from(LINES), min_size=0, max_size=8)


@st.composite
def text(draw: st.DrawFn) -> str:
    body = "".join(draw(lines))
    return body + draw(st.sampled_from(["", "", "tail"]))  # sometimes no newline at the end


@st.composite
def tree(draw: st.DrawFn) -> dict[str, Entry]:
    files: dict[str, Entry] = {}
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True)):
        files[name] = (draw(st.sampled_from(["100644", "100644", "100755"])), draw(text()))
    if draw(st.booleans()) and "d/x" in files:
        files["link"] = Link("d")
    return files


@st.composite
def edited(draw: st.DrawFn, files: dict[str, Entry]) -> dict[str, Entry]:
    """``files`` after a few random edits of git's kinds."""
    out = dict(files)
    for _ in range(draw(st.integers(1, 3))):
        names = sorted(p for p, e in out.items() if not isinstance(e, Link))
        kind = draw(st.sampled_from(["edit", "edit", "rename", "copy", "delete", "mode", "create", "swap"]))
        if not names:
            kind = "create"
        path = draw(st.sampled_from(names)) if names else ""
        entry = out.get(path)
        mode, body = entry if isinstance(entry, tuple) else ("100644", "")
        if kind == "edit":
            out[path] = (mode, _edit(draw, str(body)))
        elif kind in ("rename", "copy"):
            target = draw(st.sampled_from(["e", "f", "d/z", "link/new"]))
            out[target] = (mode, draw(st.sampled_from([body, _edit(draw, str(body))])))
            if kind == "rename":
                del out[path]
        elif kind == "delete":
            del out[path]
        elif kind == "mode":
            out[path] = ("100755" if mode == "100644" else "100644", body)
        elif kind == "create":
            out[draw(st.sampled_from(["n", "d/n", "a/n", "link/n"]))] = ("100644", draw(text()))
        elif path.startswith("d/"):  # a directory becomes a file, or a file a directory
            for p in [p for p in out if p.startswith("d/")]:
                del out[p]
            out["d"] = ("100644", body)
        else:
            del out[path]
            out[f"{path}/inner"] = (mode, body)
    return {
        p: e
        for p, e in out.items()
        if not any(q != p and q.startswith(p + "/") for q in out)
        and not any(isinstance(out.get(p[:i]), tuple) for i in range(len(p)) if p[i : i + 1] == "/")
    }


def _edit(draw: st.DrawFn, body: str) -> str:
    got = body.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(got)))
        if draw(st.booleans()) or not got:
            got[at:at] = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=2))
        else:
            del got[min(at, len(got) - 1)]
    return "".join(got)


@st.composite
def perturbed(draw: st.DrawFn, files: dict[str, Entry]) -> dict[str, Entry]:
    """The preimage the patch meets: ``files``, sometimes with lines added or taken away, a file
    missing, or one more file in the way."""
    out = dict(files)
    for path, entry in files.items():
        if isinstance(entry, tuple) and draw(rarely(3)):
            out[path] = (entry[0], _edit(draw, str(entry[1])))
    if draw(rarely(8)) and out:
        del out[draw(st.sampled_from(sorted(out)))]
    if draw(rarely(8)):
        out[draw(st.sampled_from(["e", "f", "n"]))] = ("100644", "in the way\n")
    return out


def rarely(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (``integers`` would favour its bounds)."""
    return st.sampled_from([False] * (n - 1) + [True])


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_random_patches_apply_as_git_applies_them(data: st.DataObject) -> None:
    files = data.draw(tree())
    after = data.draw(edited(files))
    reverse, copies = data.draw(st.booleans()), data.draw(st.booleans())
    target = data.draw(perturbed(after if reverse else files))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        patch = _patch(root / "make", files, after, copies=copies)
        if not patch:
            return
        commit = make_repo(root / "repo", target)
        ours, theirs = check(root / "repo", commit, patch, reverse=reverse)
        event("git applies it" if theirs.tree is not None else "git refuses it")
        event("patchtool applies it" if ours.tree is not None else f"patchtool refuses: {_kind(ours.message)}")


def _patch(work: Path, files: dict[str, Entry], after: dict[str, Entry], *, copies: bool) -> str:
    """The patch ``git diff`` writes from ``files`` to ``after``."""
    make_repo(work, files)
    for child in work.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    write_files(work, after)
    git(work, "add", "-A")
    detect = ["-C", "--find-copies-harder"] if copies else ["-M"]
    return git(work, "diff", "--cached", "--no-color", "--full-index", *detect)


def _kind(message: str) -> str:
    return "parse" if message.startswith("parse") else message.split(": ", 1)[-1][:40]
