"""What a symbolic link inside an sdist may be: a relative link that leads, inside the tree and
through the tree's other links, to one of the tree's regular files (``idna-3.4/tools/intranges.py
-> ../idna/intranges.py``). Such a link is upstream's content: the import keeps it as git keeps a
link (mode 120000, its text as the blob), and no patch may change it (``series.apply``).

Everything else is refused: a link that leaves the tree, that points at a directory or at
nothing, that passes through a file or another link on its way, an absolute or oddly spelled
target, a loop and a chain longer than Linux follows. Links are resolved by their names alone,
never on disk: nothing of an artifact is unpacked to be read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

MAX_HOPS = 40  # as Linux's MAXSYMLINKS: a longer chain is refused, as open() would
MAX_TARGET = 4096  # PATH_MAX: no link text is longer


class LinkTree:
    """The names of a tree: its regular files and its links (name -> target text); its directories
    are what lies above them."""

    def __init__(self, files: AbstractSet[str], links: Mapping[str, str]) -> None:
        self.files, self.links = files, links
        self.dirs = {name.rsplit("/", i)[0] for name in (*files, *links) for i in range(1, name.count("/") + 1)}

    def problem(self, name: str) -> str | None:
        """Why the link ``name`` may not be kept, or None: it resolves to a regular file of the tree."""
        seen = [name]
        current = name
        while True:
            found = self._step(current)
            if isinstance(found, _Problem):
                return found.why if current == name else f"leads to the link {current!r}, which {found.why}"
            if found in self.files:
                return None
            if found in seen:
                return f"is a loop of links ({' -> '.join(repr(s) for s in [*seen, found])})"
            if len(seen) >= MAX_HOPS:
                return f"is a chain of more than {MAX_HOPS} links"
            seen.append(found)
            current = found

    def target(self, name: str) -> str:
        """The regular file the link ``name`` (one ``problem`` passes) resolves to."""
        current = name
        while current not in self.files:
            found = self._step(current)
            assert isinstance(found, str)
            current = found
        return current

    def _step(self, name: str) -> str | _Problem:
        """Where the link ``name`` points: a file or another link of the tree, or why neither."""
        text = self.links[name]
        parts = text.split("/")
        if not text or text.startswith("/") or len(text) > MAX_TARGET or any(p in ("", ".") for p in parts):
            return _Problem(f"points at {text!r}, which is no plain relative path")
        where = name.split("/")[:-1]
        for i, part in enumerate(parts):
            if part == "..":
                if not where:
                    return _Problem(f"points at {text!r}, which leaves the tree")
                where.pop()
                continue
            where.append(part)
            here = "/".join(where)
            if here in self.links or here in self.files:
                if i == len(parts) - 1:
                    return here
                kind = "link" if here in self.links else "file"
                return _Problem(f"points at {text!r}, which passes through the {kind} {here!r} as a directory")
            if here not in self.dirs:
                return _Problem(f"points at {text!r}, which the tree does not have ({here!r})")
        return _Problem(f"points at {text!r}, which is a directory")


@dataclasses.dataclass(frozen=True, slots=True)
class _Problem:
    why: str
