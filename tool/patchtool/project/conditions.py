"""Machine-checkable conditions on an upstream: a version range, a regex that appears or
disappears in a file, a server flag that upstream adds or removes; and a measurement recorded
as having met the condition (it holds until someone acts on it and removes it).

Used by the registry (when to revisit a rejected idea) and by patches (when to drop them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchtool.names import RepoPath
from patchtool.project.fields import Fields, pep440_specifier
from patchtool.project.patterns import RepoPattern, multiline_pattern

ARG_FIELDS_DIR = "python/sglang/srt/arg_groups/fields/"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Revisit:
    """A machine-checkable condition under which the rejection's reason may no longer hold."""

    why: str
    version: SpecifierSet | None = None  # holds when the upstream version is inside it
    file: str | None = None
    regex: RepoPattern | None = None
    appears: bool = True  # regex: holds when it appears (True) or when it disappears (False)
    flag: str | None = None  # holds when upstream adds (added) or removes (removed) this flag
    change: str | None = None
    observed: str | None = None  # a measurement that met the condition: holds, whatever the upstream
    source: str | None = None  # where the observed measurement comes from

    @classmethod
    def read(cls, f: Fields) -> Revisit | None:
        why = f.string("why")
        version = f.parsed("version", pep440_specifier, required=False)
        file = f.parsed("file", RepoPath, required=False)
        regex = f.parsed("regex", multiline_pattern, required=False)
        appears = f.boolean("appears", required=False)
        flag = f.string("flag", required=False)
        change = f.choice("change", ("added", "removed"), required=False)
        observed = f.string("observed", required=False)
        source = f.string("source", required=False)
        f.done()
        if sum(kind is not None for kind in (version, regex, flag, observed)) != 1:
            f.problem(
                None,
                "a revisit condition is exactly one of: version = '<specifier>'; "
                "file + regex (+ appears); flag + change; observed + source",
            )
            return None
        if (observed is None) != (source is None):
            f.problem(
                "source" if source is None else "observed",
                "a recorded measurement needs observed = '<what was measured>' and its source",
            )
            return None
        if regex is not None and file is None:
            f.problem("file", "a regex condition needs the upstream 'file' to search")
            return None
        if flag is not None and (change is None or not flag.startswith("--")):
            f.problem(
                "change" if change is None else "flag",
                "a flag condition needs flag = '--name' and change = 'added' or 'removed'",
            )
            return None
        if why is None:
            return None
        return cls(
            why=why,
            version=version,
            file=file,
            regex=regex,
            appears=True if appears is None else appears,
            flag=flag,
            change=change,
            observed=observed,
            source=source,
        )

    def evaluate(
        self, *, version: Version, files: Mapping[str, bytes | None], field_files: Mapping[str, bytes | None]
    ) -> tuple[bool, str]:
        """Pure: whether the condition holds for an upstream at ``version`` with these files."""
        if self.version is not None:
            return version in self.version, f"upstream is {version}"
        if self.observed is not None:
            return True, f"measured: {self.observed} (source: {self.source})"
        if self.flag is not None:
            present = flag_present(self.flag, field_files)
            holds = present if self.change == "added" else not present
            return holds, f"{self.flag} {'is' if present else 'is not'} declared in {ARG_FIELDS_DIR}"
        assert self.regex is not None and self.file is not None
        content = files.get(self.file)
        found = content is not None and self.regex.search(content.decode("utf-8", "replace")) is not None
        detail = "file absent" if content is None else f"{'found' if found else 'not found'} in {self.file}"
        return (found if self.appears else not found), detail

    def describe(self) -> str:
        if self.version is not None:
            return f"upstream version {self.version}"
        if self.flag is not None:
            return f"upstream {'adds' if self.change == 'added' else 'removes'} {self.flag}"
        if self.observed is not None:
            return "a recorded measurement (not evaluated against the upstream)"
        assert self.regex is not None
        return f"/{self.regex.pattern}/ {'appears in' if self.appears else 'disappears from'} {self.file}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": str(self.version)} if self.version is not None else {}
        out |= {"file": self.file} if self.file is not None else {}
        out |= {"regex": self.regex.pattern, "appears": self.appears} if self.regex is not None else {}
        out |= {"flag": self.flag, "change": self.change} if self.flag is not None else {}
        out |= {"observed": self.observed, "source": self.source} if self.observed is not None else {}
        return out | {"why": self.why}


def flag_field(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def flag_present(flag: str, field_files: Mapping[str, bytes | None]) -> bool:
    """Whether upstream's arg groups declare ``flag``: a field ``name: A[`` or an alias."""
    field = re.compile(rf"^\s+{re.escape(flag_field(flag))}\s*:", re.MULTILINE)
    alias = re.compile(rf"[\"']{re.escape(flag)}[\"']")
    texts = (content.decode("utf-8", "replace") for content in field_files.values() if content is not None)
    return any(field.search(text) or alias.search(text) for text in texts)
