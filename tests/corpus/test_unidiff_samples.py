"""python-unidiff's sample diffs (MIT; read from its sdist on PyPI by ``tests/conftest.py``) through
patchtool's in-memory apply and real ``git apply``: each on a preimage made from its own old side,
on the same preimage moved down two lines, and in reverse on git's result. A plain sample is read
as ``import`` reads it. Where patchtool refuses a sample, the refusal is a message, and git refuses
it too whatever the tree holds (a corrupt hunk, a name it cannot read)."""

from __future__ import annotations

from pathlib import Path

import pytest
from differ import Entry, Link, check, git_apply, make_repo, to_model

from conftest import UNIDIFF_SAMPLES
from patchtool.diff import model

pytestmark = pytest.mark.corpus


def preimage(diff: model.Diff, *, shift: int = 0) -> dict[str, Entry]:
    """A tree the diff applies to: each file it reads, its old lines where the hunks say, filler
    lines between them (and ``shift`` more on top)."""
    files: dict[str, Entry] = {}
    for fd in diff.files:
        if fd.old_path is None or fd.old_path in files:
            continue
        mode = fd.old_mode or "100644"
        if mode == "120000":
            files[fd.old_path] = Link("target")
            continue
        lines = [f"above {n}\n" for n in range(shift)]
        for hunk in fd.hunks:
            while len(lines) < hunk.old_start - 1 + shift:
                lines.append(f"filler {len(lines)}\n")
            lines += hunk.image()[0]
        content: str | bytes = b"binary\0data\n" if fd.binary else "".join(lines) or f"content of {fd.old_path}\n"
        files[fd.old_path] = (mode, content)
    return files


def _diff_of(text: str) -> model.Diff:
    """The sample as ``import`` reads it where the preimage lacks each file only added to (the
    preimage is made of the files it reads); ``check`` reads it again against the real tree."""
    return to_model(text, exists=lambda path: False)


@pytest.mark.parametrize("sample", UNIDIFF_SAMPLES)
def test_unidiff_sample_applies_as_git_applies_it(
    tmp_path: Path, sample: str, unidiff_samples: dict[str, bytes]
) -> None:
    text = unidiff_samples[sample].decode("utf-8", errors="surrogateescape")
    try:
        diff = _diff_of(text)
    except model.DiffError as exc:
        # refused as a message, and only what git refuses whatever the tree holds (a corrupt hunk,
        # a name git cannot read): git's verdict in an empty repository names no missing file
        empty = tmp_path / "empty" / "repo"
        make_repo(empty, {})
        theirs = git_apply(empty, text)
        assert theirs.tree is None, f"git applies what patchtool refuses: {exc.message}"
        assert "does not exist in index" not in theirs.message, f"patchtool refused ({exc.message}): {theirs.message}"
        return
    for shift in (0, 2):
        root = tmp_path / f"shift{shift}" / "repo"
        commit = make_repo(root, preimage(diff, shift=shift))
        check(root, commit, text)
        after = git_apply(root, text)
        if after.tree is not None:
            back = tmp_path / f"back{shift}" / "repo"
            commit = make_repo(
                back, {p: (Link(c.decode()) if m == "120000" else (m, c)) for p, (m, c) in after.tree.items()}
            )
            check(back, commit, text, reverse=True)
