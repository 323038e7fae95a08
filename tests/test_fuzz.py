"""``diff/fuzz.py`` against GNU ``patch --fuzz=N`` on generated cases: a file, a patch made from
an edit of it, and the file moved on (lines changed, added, removed) before the patch meets it.
Same verdict (applies or not), same bytes."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchtool.diff import fuzz, model

GNU_PATCH = shutil.which("patch")
needs_patch = pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch is not installed on this machine")

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
lines = st.lists(st.sampled_from(WORDS).map(lambda w: w + "\n"), min_size=4, max_size=40)


@st.composite
def edited(draw: st.DrawFn, base: list[str]) -> list[str]:
    """``base`` with up to four random line edits (change, insert, delete)."""
    out = list(base)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        op = draw(st.sampled_from(["change", "insert", "delete"]))
        word = draw(st.sampled_from(WORDS)) + draw(st.sampled_from(["", "!", "?"])) + "\n"
        if op == "insert" or not out:
            out.insert(at, word)
        elif op == "change":
            out[at] = word
        elif len(out) > 1:
            del out[at]
    return out


def diff_text(old: list[str], new: list[str]) -> str:
    body = "".join(difflib.unified_diff(old, new, "a/f", "b/f", n=3))
    return "diff --git a/f b/f\n" + body


def gnu(tmp: Path, target: list[str], patch: str, level: int) -> tuple[bool, str]:
    work = tmp / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "f").write_text("".join(target))
    (tmp / "p.diff").write_text(patch)
    assert GNU_PATCH is not None
    res = subprocess.run([GNU_PATCH, "-p1", f"--fuzz={level}", "--forward", "--batch", "--no-backup-if-mismatch",
                          "--reject-file=-", "-s", "-i", str(tmp / "p.diff")], cwd=work, capture_output=True,
                         text=True, check=False)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode == 0, (work / "f").read_text()


@needs_patch
@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                     HealthCheck.function_scoped_fixture])
@given(data=st.data(), base=lines, level=st.integers(0, 3))
def test_fuzz_agrees_with_gnu_patch(tmp_path: Path, data: st.DataObject, base: list[str], level: int) -> None:
    mine = data.draw(edited(base))
    theirs = data.draw(edited(base))
    if mine == base:
        return
    patch = diff_text(base, mine)
    (f,) = model.parse(patch).files
    ok, text = gnu(tmp_path, theirs, patch, level)
    ours = fuzz.apply(theirs, f.hunks, fuzz=level)
    assert (ours is not None) == ok, (patch, "".join(theirs))
    if ours is not None:
        assert "".join(ours.lines) == text
        assert all(p.fuzz <= level for p in ours.placed)


def test_fuzz_ignores_changed_outer_context_and_reports_it() -> None:
    base = [f"{w}\n" for w in ["one", "two", "three", "four", "five", "six", "seven"]]
    patch = diff_text(base, [*base[:3], "FOUR\n", *base[4:]])
    (f,) = model.parse(patch).files
    moved = ["zero\n", "ONE\n", *base[1:]]  # the first context line changed, and a line above it
    assert fuzz.apply(moved, f.hunks, fuzz=0) is None
    got = fuzz.apply(moved, f.hunks, fuzz=1)
    assert got is not None and got.placed == (fuzz.Placed(hunk=1, fuzz=1, offset=1),)
    assert got.lines == ["zero\n", "ONE\n", "two\n", "three\n", "FOUR\n", "five\n", "six\n", "seven\n"]


def test_a_patch_already_applied_is_refused_not_fuzzed() -> None:
    base = [f"{w}\n" for w in ["one", "two", "three", "four", "five", "six", "seven"]]
    after = [*base[:3], "FOUR\n", *base[4:]]
    (f,) = model.parse(diff_text(base, after)).files
    assert fuzz.apply(after, f.hunks, fuzz=3) is None
