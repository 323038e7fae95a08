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
# a two- or three-letter alphabet makes the same lines recur, so a hunk's context also matches
# near an earlier hunk (where GNU patch's "never before the previous hunk's end" decides)
ALPHABETS = [WORDS, ["a", "b"], ["a", "b", "c"]]


@st.composite
def edited(draw: st.DrawFn, base: list[str], words: list[str]) -> list[str]:
    """``base`` with up to eight random line edits (change, insert, delete): several hunks."""
    out = list(base)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        op = draw(st.sampled_from(["change", "insert", "delete"]))
        word = draw(st.sampled_from(words)) + draw(st.sampled_from(["", "!", "?"])) + "\n"
        if op == "insert" or not out:
            out.insert(at, word)
        elif op == "change":
            out[at] = word
        elif len(out) > 1:
            del out[at]
    return out


def diff_text(old: list[str], new: list[str], context: int = 3) -> str:
    body = "".join(difflib.unified_diff(old, new, "a/f", "b/f", n=context))
    return "diff --git a/f b/f\n" + body


def gnu(tmp: Path, target: list[str], patch: str, level: int, *, reverse: bool = False) -> tuple[bool, str]:
    work = tmp / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "f").write_text("".join(target))
    (tmp / "p.diff").write_text(patch)
    assert GNU_PATCH is not None
    res = subprocess.run(
        [
            GNU_PATCH,
            "-p1",
            f"--fuzz={level}",
            *(["--reverse"] if reverse else []),
            "--forward",
            "--batch",
            "--no-backup-if-mismatch",
            "--reject-file=-",
            "-s",
            "-i",
            str(tmp / "p.diff"),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode == 0, (work / "f").read_text()


@needs_patch
@settings(
    max_examples=500,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), words=st.sampled_from(ALPHABETS), context=st.integers(1, 3), level=st.integers(0, 3))
def test_fuzz_agrees_with_gnu_patch(
    tmp_path: Path, data: st.DataObject, words: list[str], context: int, level: int
) -> None:
    base = data.draw(st.lists(st.sampled_from(words).map(lambda w: w + "\n"), min_size=4, max_size=40))
    mine = data.draw(edited(base, words))
    theirs = data.draw(edited(base, words))
    if mine == base:
        return
    patch = diff_text(base, mine, context)
    (f,) = model.parse(patch).files
    ok, text = gnu(tmp_path, theirs, patch, level)
    ours = fuzz.apply(theirs, f.hunks, fuzz=level)
    assert (ours is not None) == ok, (patch, "".join(theirs))
    if ours is not None:
        assert "".join(ours.lines) == text
        assert all(p.fuzz <= level for p in ours.placed)


@needs_patch
@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), words=st.sampled_from(ALPHABETS), context=st.integers(1, 3), level=st.integers(0, 3))
def test_fuzz_in_reverse_agrees_with_gnu_patch_r(
    tmp_path: Path, data: st.DataObject, words: list[str], context: int, level: int
) -> None:
    """``patch -R --fuzz=N``, as quilt asks whether a patch is already in a tree: the patch made
    from an edit, taken out of a file that moved on from the edited one."""
    base = data.draw(st.lists(st.sampled_from(words).map(lambda w: w + "\n"), min_size=4, max_size=40))
    mine = data.draw(edited(base, words))
    if mine == base:
        return
    theirs = data.draw(st.one_of(st.just(mine), edited(mine, words)))
    patch = diff_text(base, mine, context)
    (f,) = model.parse(patch).files
    ok, text = gnu(tmp_path, theirs, patch, level, reverse=True)
    ours = fuzz.apply(theirs, f.hunks, fuzz=level, reverse=True)
    assert (ours is not None) == ok, (patch, "".join(theirs))
    if ours is not None:
        assert "".join(ours.lines) == text


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


def test_a_later_hunk_is_never_placed_over_lines_an_earlier_one_wrote() -> None:
    """Hunk 2's context also matches at line 1, which hunk 1 already replaced: GNU ``patch --fuzz=2``
    looks no further back than the end of hunk 1's lines and puts hunk 2 at line 5 with fuzz 1."""
    patch = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-b\n+X\n b\n@@ -5,3 +5,2 @@\n b\n-b\n b\n"
    (f,) = model.parse(patch).files
    got = fuzz.apply([f"{w}\n" for w in "bbbaYbb"], f.hunks, fuzz=2)
    assert got is not None
    assert got.placed == (fuzz.Placed(hunk=1, fuzz=0, offset=0), fuzz.Placed(hunk=2, fuzz=1, offset=0))
    assert "".join(got.lines) == "X\nb\nb\na\nY\nb\n"


def test_a_hunk_guessed_past_the_end_walks_back_no_further_than_the_previous_hunk() -> None:
    """Hunk 1 moved 9 lines down, so hunk 2's guess lies past the end of the file; GNU ``patch
    --fuzz=3`` walks back from the last place it fits and stops at hunk 1's lines (line 13, fuzz 2)."""
    patch = (
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n"
        "@@ -1,6 +1,6 @@\n a\n a\n-b\n+X\n b\n b\n a\n@@ -11,6 +11,7 @@\n a\n a\n b\n+a\n b\n b\n b\n"
    )
    (f,) = model.parse(patch).files
    got = fuzz.apply([f"{w}\n" for w in "aabbaaabbaabbbbba"], f.hunks, fuzz=3)
    assert got is not None
    assert got.placed == (fuzz.Placed(hunk=1, fuzz=1, offset=9), fuzz.Placed(hunk=2, fuzz=2, offset=2))
    assert "".join(got.lines) == "".join(f"{w}\n" for w in "aabbaaabbaaXbbbaba")


def test_a_search_of_repeated_lines_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack: a hunk of S repeated lines that matches nowhere, over a file of N of
    them, compared S lines at each of N places, at every fuzz level and in reverse: hours for a
    few megabytes. The search stops at a bound and says so."""
    monkeypatch.setattr(fuzz, "MAX_COMPARED", 200_000)
    body = [" a"] * 300
    hunk = (
        model.parse(
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,603 +1,603 @@\n Q\n"
            + "\n".join(body)
            + "\n-zzz\n+yyy\n"
            + "\n".join(body)
            + "\n Q\n"
        )
        .files[0]
        .hunks
    )
    with pytest.raises(fuzz.TooCostly) as exc:
        fuzz.apply(["a\n"] * 5000, hunk, fuzz=3)
    assert exc.value.hunk == 1
    assert fuzz.apply(
        ["Q\n", "a\n", "zzz\n", "Q\n"],
        model.parse("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n Q\n a\n-zzz\n+yyy\n Q\n").files[0].hunks,
        fuzz=3,
    )
