"""textpatch against git itself: the same verdict, text and offsets as `git apply`, and a line
diff whose blocks rebuild the new text."""

from __future__ import annotations

import difflib
import random
import subprocess
from pathlib import Path

import pytest

from helpers import git
from patchtool.diff import model, textpatch

# a form feed and U+2028 inside lines: git does not end a line there, str.splitlines would
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "return x",
    "pass",
    "x += 1",
    "",
    "    y = f(x)",
    "page\x0cbreak",
    "uni\u2028line",
]


def random_file(rng: random.Random, n: int) -> list[str]:
    # repeated lines on purpose: identical siblings are where placement goes wrong
    return [f"{rng.choice(WORDS)}\n" if rng.random() < 0.4 else f"line {rng.randrange(10_000)}\n" for _ in range(n)]


def edit(rng: random.Random, lines: list[str], count: int) -> list[str]:
    out = list(lines)
    for _ in range(count):
        at = rng.randrange(len(out) + 1)
        kind = rng.random()
        if kind < 0.4:
            out[at:at] = [f"inserted {rng.randrange(1000)}\n" for _ in range(rng.randint(1, 4))]
        elif kind < 0.7 and at < len(out):
            del out[at : at + rng.randint(1, 3)]
        elif at < len(out):
            out[at] = f"changed {rng.randrange(1000)}\n"
    return out


def git_diff(tmp: Path, old: list[str], new: list[str]) -> str:
    (tmp / "a").write_text("".join(old), encoding="utf-8")
    (tmp / "b").write_text("".join(new), encoding="utf-8")
    res = subprocess.run(
        ["git", "diff", "--no-index", "--no-color", "a", "b"],
        cwd=tmp,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    return res.stdout.replace("a/a", "a/f").replace("b/b", "b/f")


def git_apply(tmp: Path, target: list[str], patch: str, *, reverse: bool) -> tuple[str | None, list[str]]:
    (tmp / "f").write_text("".join(target), encoding="utf-8")
    (tmp / "p.patch").write_text(patch, encoding="utf-8")
    res = subprocess.run(
        ["git", "apply", "--verbose", *(["--reverse"] if reverse else []), "p.patch"],
        cwd=tmp,
        capture_output=True,
        text=True,
        check=False,
    )
    moved = [line.strip() for line in res.stderr.splitlines() if "offset" in line]
    return ((tmp / "f").read_text(encoding="utf-8") if res.returncode == 0 else None), moved


@pytest.mark.parametrize("reverse", [False, True])
def test_apply_agrees_with_git_apply(tmp_path: Path, reverse: bool) -> None:
    """200 random patches on files upstream then edited around them: where git applies, so does
    textpatch, to the same text with the same offsets; where git refuses, textpatch refuses."""
    git(tmp_path, "init", "-q")
    rng = random.Random(20261129 + reverse)
    verdicts = {True: 0, False: 0}
    for _ in range(200):
        base = random_file(rng, rng.randint(5, 60))
        patched = edit(rng, base, rng.randint(1, 3))
        if patched == base:
            continue
        target = edit(rng, base, rng.randint(0, 3))  # upstream moved on
        diff = git_diff(tmp_path, base, patched)
        if reverse:  # the patch is upstream already, perhaps with more changes around it
            target = edit(rng, patched, rng.randint(0, 2))
        want, moved = git_apply(tmp_path, target, diff, reverse=reverse)
        (fp,) = model.parse(diff).files
        got = textpatch.apply(target, fp.hunks, reverse=reverse)
        assert (got is not None) == (want is not None), diff
        verdicts[want is not None] += 1
        if got is not None:
            assert "".join(got.lines) == want
            ours = [
                f"Hunk #{n} succeeded at {at + 1} (offset {off} line{'' if off == 1 else 's'})."
                for n, (at, off) in enumerate(zip(got.starts, got.offsets, strict=True), 1)
                if off
            ]
            assert ours == moved
    assert verdicts[True] > 40 and verdicts[False] > 10  # both kinds were exercised


def test_no_newline_at_end_of_file(tmp_path: Path) -> None:
    old, new = ["a\n", "b"], ["a\n", "c"]
    diff = git_diff(tmp_path, old, new)
    assert model.NO_NEWLINE in diff
    (fp,) = model.parse(diff).files
    got = textpatch.apply(old, fp.hunks)
    assert got is not None and got.lines == new
    assert textpatch.apply(["a\n", "b\n"], fp.hunks) is None  # "b" with a newline is another line


def test_parse_reads_new_deleted_renamed_and_binary_files() -> None:
    diff = (
        "diff --git a/new.py b/new.py\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n"
        "+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
        "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n"
        "diff --git a/a.py b/b.py\nsimilarity index 90%\nrename from a.py\nrename to b.py\n"
        "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n"
    )
    new, old, moved, binary = model.parse(diff).files
    assert (new.old_path, new.new_path, len(new.hunks)) == (None, "new.py", 1)
    assert (old.old_path, old.new_path) == ("old.py", None)
    assert (moved.old_path, moved.new_path, moved.hunks) == ("a.py", "b.py", ())
    assert binary.binary
    applied = textpatch.apply([], new.hunks)
    assert applied is not None and applied.lines == ["x = 1\n"]


def test_diff_blocks_rebuild_the_new_text_and_match_difflib() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = random_file(rng, rng.randint(0, 80))
        b = edit(rng, a, rng.randint(0, 5))
        blocks = textpatch.diff(a, b)
        rebuilt, at = [], 0
        for blk in blocks:
            assert at <= blk.a_start and (blk.a_start, blk.b_start) != (blk.a_end, blk.b_end)
            rebuilt += a[at : blk.a_start] + b[blk.b_start : blk.b_end]
            at = blk.a_end
        assert rebuilt + a[at:] == b
        # no bigger than difflib's answer: the changed lines are the edits, not their surroundings
        theirs = sum(
            i2 - i1 + j2 - j1
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal"
        )
        ours = sum(blk.a_end - blk.a_start + blk.b_end - blk.b_start for blk in blocks)
        assert ours <= theirs + 2 * len(blocks)


def test_diff_locates_far_apart_edits_in_a_large_file() -> None:
    """6,000 lines with three far-apart edits: three blocks, exactly where the edits are."""
    a = [f"def f{i}(self):\n" if i % 7 == 0 else f"    return {i}\n" for i in range(6000)]
    b = list(a)
    b.insert(5000, "    added = True\n")
    b[3000] = "    changed\n"
    b.insert(100, "    first\n")
    blocks = textpatch.diff(a, b)
    assert [(x.a_start, x.a_end, x.b_start, x.b_end) for x in blocks] == [
        (100, 100, 100, 101),
        (3000, 3001, 3001, 3002),
        (5000, 5000, 5001, 5002),
    ]
    assert b[5001] == "    added = True\n"


@pytest.mark.parametrize("reverse", [False, True])
def test_one_hunk_is_found_by_its_rarest_line_where_apply_finds_it(tmp_path: Path, reverse: bool) -> None:
    """``Searchable.fits``, which a failing patch's diagnosis asks of each hunk alone, answers as
    ``apply`` of that hunk alone, forward and in reverse, on random files with repeated lines and
    ``-U0`` hunks (no context: held to the file's end), while comparing only where the hunk's
    rarest line is."""
    rng = random.Random(20261207 + reverse)
    seen = {True: 0, False: 0}
    for n in range(300):
        base = random_file(rng, rng.randint(1, 60))
        patched = edit(rng, base, rng.randint(1, 3))
        if patched == base:
            continue
        (tmp_path / "a").write_text("".join(base))
        (tmp_path / "b").write_text("".join(patched))
        context = "-U0" if n % 3 == 0 else f"-U{rng.randint(1, 3)}"
        diff = (
            subprocess.run(
                ["git", "diff", "--no-index", context, "a", "b"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                check=False,
            )
            .stdout.replace("a/a", "a/f")
            .replace("b/b", "b/f")
        )
        target = edit(rng, patched if reverse else base, rng.randint(0, 3))
        found = textpatch.Searchable(target, most=10**9)
        for hunk in model.parse(diff).files[0].hunks:
            want = textpatch.apply(target, [hunk], reverse=reverse) is not None
            assert found.fits(hunk, reverse=reverse) is want, (diff, hunk.header)
            seen[want] += 1
    assert seen[True] > 100 and seen[False] > 50
    assert found.compared < 60 * 10


def test_searching_stops_at_its_budget() -> None:
    """Past the lines it may compare, ``fits`` says it did not look (None), never a verdict."""
    (hunk,) = (
        model.parse("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n same\n-same\n+other\n same\n")
        .files[0]
        .hunks
    )
    found = textpatch.Searchable(["x\n"] * 3 + ["same\n"] * 3, most=10)
    assert found.fits(hunk) is True and found.compared == 3  # at its first place
    costly = textpatch.Searchable(["x\n"] * 3 + ["same\n", "x\n"] * 40, most=10)
    assert costly.fits(hunk) is None and costly.compared > 10
