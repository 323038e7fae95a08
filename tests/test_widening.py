"""The widening rule `rebase --widen` writes: each clause moved just far enough, as a person writes it."""

from __future__ import annotations

import pytest
from packaging.version import Version

from patchtool.project.widening import widen


@pytest.mark.parametrize(
    ("applies_to", "version", "widened"),
    [
        (">=1.0", "1.1", ">=1.0"),  # already admitted: unchanged, as written
        (">=1.0,<1.1", "1.1", ">=1.0,<=1.1"),
        (">=0.5.20,<=0.5.21", "0.5.23", ">=0.5.20,<=0.5.23"),
        ("==1.0", "1.1", ">=1.0,<=1.1"),
        ("==1.0", "0.9", ">=0.9,<=1.0"),
        ("~=1.0.2", "1.1", ">=1.0.2,<=1.1"),
        ("==1.0.*", "1.1.3", ">=1.0,<=1.1.3"),
        (">=1.0,!=1.1", "1.1", ">=1.0"),
        (">=1.2", "1.1", ">=1.1"),
        ("<1.1", "1.2", "<=1.2"),
        ("not a specifier", "1.1", None),
    ],
)
def test_widen(applies_to: str, version: str, widened: str | None) -> None:
    assert widen(applies_to, Version(version)) == widened
