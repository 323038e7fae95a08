"""Names read from a stranger's file that end up in a path: each kind a type, made once, when the
file is read.

A pin file's ``distribution`` or ``filename`` becomes a file in the cache, its ``name`` a pin file,
its prefixes directories of the import. Each is a ``str`` subclass whose one constructor refuses
what is not a name of its kind (``ValueError``, which ``Fields.parsed`` turns into a problem naming
the key), so code further on holds a checked name or nothing: a raw string cannot pass for one.
"""

from __future__ import annotations

import re
from typing import Self

from packaging.utils import (
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from patchtool import paths

# PEP 508's name, as packaging's own ``Requirement`` grammar has it
_DISTRIBUTION = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


class PinName(str):
    """A pin's name: an id; it names ``upstream-pins/<name>.toml`` and the cache's refs."""

    __slots__ = ()
    what = "pin name"

    def __new__(cls, text: str) -> Self:
        if (why := paths.id_problem(text, cls.what)) is not None:
            raise ValueError(why)
        return super().__new__(cls, text)


class UpstreamName(PinName):
    """A pin's ``name`` key, the upstream's: pins for its releases are named ``<name>-<version>``."""

    __slots__ = ()
    what = "upstream name"


class Distribution(str):
    """A distribution's name as PEP 508 spells it (``sglang``, ``Flash_Attn``): no path in it."""

    __slots__ = ()

    def __new__(cls, text: str) -> Self:
        if not _DISTRIBUTION.match(text):
            raise ValueError(
                f"{text!r} is not a distribution name (letters, digits, '.', '_', '-', "
                "starting and ending with a letter or digit)"
            )
        return super().__new__(cls, text)

    @property
    def canonical(self) -> str:
        return canonicalize_name(self)


class ArtifactFilename(str):
    """A release file's name: one plain file name (``paths.file_name_problem``) that packaging's
    own parsers read as a wheel or an sdist of a distribution with a valid name."""

    __slots__ = ()

    def __new__(cls, text: str) -> Self:
        if (why := paths.file_name_problem(text)) is not None:
            raise ValueError(f"{why}; a release file is named by one plain file name")
        if _parsed(text) is None:
            raise ValueError(f"{text!r} is neither a wheel nor an sdist file name")
        return super().__new__(cls, text)

    @property
    def is_wheel(self) -> bool:
        return self.endswith(".whl")

    @property
    def distribution(self) -> str:
        parsed = _parsed(self)
        assert parsed is not None
        return parsed[0]

    @property
    def version(self) -> Version:
        parsed = _parsed(self)
        assert parsed is not None
        return parsed[1]


def _parsed(filename: str) -> tuple[str, Version] | None:
    """(distribution, version) as packaging reads ``filename``; None when it reads neither a wheel
    nor an sdist, or when the name in it is not a distribution name (packaging's sdist parser
    takes any text before the last '-')."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
            if not _DISTRIBUTION.match(filename[: filename.rindex("-")]):
                return None
    except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, InvalidVersion, or digits int() refuses
        return None
    return name, version


class TreePrefix(str):
    """A directory prefix in a tree (``python/sglang/``), or the empty prefix: a safe tree path
    (``paths.tree_path_problem``) ending with '/'."""

    __slots__ = ()

    def __new__(cls, text: str) -> Self:
        if text:
            if not text.endswith("/"):
                raise ValueError(f"{text!r} must end with '/'")
            if (why := paths.tree_path_problem(text[:-1])) is not None:
                raise ValueError(why)
        return super().__new__(cls, text)


class PrefixTemplate(str):
    """A pin's ``prefix.from`` as its file writes it: a tree prefix, or one holding the placeholder
    ``{version}`` (``attrs-{version}/src/``, an sdist's top directory), which is the artifact's
    version wherever the prefix is used. No other ``{...}`` may stand in it."""

    __slots__ = ()
    PLACEHOLDER = "{version}"

    def __new__(cls, text: str) -> Self:
        if "{" in text.replace(cls.PLACEHOLDER, "") or "}" in text.replace(cls.PLACEHOLDER, ""):
            raise ValueError(f"{text!r}: the only placeholder a prefix may hold is {cls.PLACEHOLDER}")
        return super().__new__(cls, text)

    def at(self, version: Version) -> TreePrefix:
        """The prefix in the artifact of ``version``; ValueError when it is no safe tree prefix."""
        return TreePrefix(self.replace(self.PLACEHOLDER, str(version)))

    def generalised(self, version: Version) -> PrefixTemplate:
        """This prefix for any release: a literal whose first directory is ``<stem>-<version>/``
        (an sdist's top directory, as older pins write it) with ``{version}`` in its place."""
        top, slash, rest = self.partition("/")
        suffix = f"-{version}"
        if self.PLACEHOLDER in self or not slash or not top.endswith(suffix) or top == suffix:
            return self
        return type(self)(f"{top[: -len(suffix)]}-{self.PLACEHOLDER}/{rest}")


class PatchId(PinName):
    """A patch's id in the manifest (and a registry entry's id): it names branches, trailers and
    the files an import writes."""

    __slots__ = ()
    what = "id"


class RepoPath(str):
    """A path inside the repository's tree that a file names (a patch file, the registry), by the
    one validator's rules: no link, ``..`` or ``.git`` can be spelled."""

    __slots__ = ()

    def __new__(cls, text: str) -> Self:
        if (why := paths.tree_path_problem(text)) is not None:
            raise ValueError(f"{why}; name a file inside the tree")
        return super().__new__(cls, text)
