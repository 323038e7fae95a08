"""The cheap test a stop runs before it tokenizes (``formatting.may_merge_to``) never says no where
the real one (the normal forms' merge, by git) would say the patch is upstream in another form."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchtool.rebase.formatting import may_merge_to, normal_forms

# a line of Python-ish text: a few tokens, with or without the spaces between them
TOKENS = st.sampled_from(["x", "foo", "bar", "=", "1", "(", ")", ",", "+", '"a b"', "# note", "if", ":"])
LINE = st.lists(st.tuples(TOKENS, st.sampled_from(["", " ", "  "])), min_size=1, max_size=4).map(
    lambda parts: "".join(t + s for t, s in parts).rstrip()
)
FILE = st.lists(LINE, min_size=1, max_size=6)


def merges_to_ours(path: str, base: bytes, theirs: bytes, ours: bytes, tmp: Path) -> bool:
    """What ``in_other_form`` asks of a conflict, answered the expensive way: the merge of the
    normal forms by `git merge-file` is clean and gives ``ours``'s normal form."""
    b, o, t = normal_forms(path, base, ours, theirs)
    for name, data in (("b", b), ("o", o), ("t", t)):
        (tmp / name).write_bytes(data)
    res = subprocess.run(
        ["git", "merge-file", "-p", str(tmp / "o"), str(tmp / "b"), str(tmp / "t")], capture_output=True, check=False
    )
    return res.returncode == 0 and res.stdout == o


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])  # files rewritten each time
@given(
    base=FILE,
    edit=st.tuples(st.integers(0, 5), LINE),
    upstream=st.lists(st.tuples(st.integers(0, 6), LINE), max_size=3),
    respace=st.booleans(),
    path=st.sampled_from(["m.py", "notes.txt"]),
)
def test_the_cheap_test_never_refuses_what_the_merge_of_normal_forms_accepts(
    tmp_path: Path,
    base: list[str],
    edit: tuple[int, str],
    upstream: list[tuple[int, str]],
    respace: bool,
    path: str,
) -> None:
    at, line = edit
    theirs = [*base]
    theirs[min(at, len(theirs) - 1)] = line
    ours = [*theirs] if respace else [*base]  # upstream took the patch (respaced below), or did not
    if respace:
        ours = [s.replace(" ", "") if i % 2 else s.replace("=", " = ") for i, s in enumerate(ours)]
    for where, extra in upstream:  # and changed other lines of its own
        ours.insert(min(where, len(ours)), extra)
    data = ["\n".join(lines).encode() + b"\n" for lines in (base, theirs, ours)]
    if merges_to_ours(path, *data, tmp_path):
        assert may_merge_to(*data)


def test_the_cheap_test_refuses_a_patch_whose_new_words_upstream_lacks() -> None:
    base, theirs, ours = b"x = 1\n", b"x = limit(1)\n", b"x = 1\ny = 2\n"
    assert not may_merge_to(base, theirs, ours)
    assert may_merge_to(base, theirs, b"x=limit( 1 )\n")  # the same change, respaced: only the merge can tell
