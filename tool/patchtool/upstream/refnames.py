"""The names of the upstream refs in the shared cache: one place, so that two projects on one
cache never meet on a ref.

Every project on a machine shares one cache (``upstream.git``), so a ref names everything that
makes its upstream what it is, never less:

- an artifact's import is ``refs/tags/<distribution>-<version>-<12 hex of its sha256>-<8 hex of
  the prefix mapping's>``: two projects whose upstreams share a version number (``demo`` 1.0 and
  ``other`` 1.0, or one distribution from two indexes), or that import one file with two
  prefixes, get two tags;
- a git source's verified tag is ``refs/patchtool/git/<digest>``, and its fetch in progress
  ``refs/patchtool/fetch/<digest>``, the digest that of its url and tag: two pins that name one
  tag from two urls get two refs. The tag, a stranger's text, never becomes part of a ref name.

A cache an older patchtool made holds ``refs/tags/v<version>``, ``refs/tags/<name>-<version>-<sha12>``
and ``refs/patchtool/git/<tag>``:
nothing here names those, so nothing reads them; an upstream is imported (from its file in
``downloads/``) or fetched again, and ``cache prune`` removes them, no pin using them.
"""

from __future__ import annotations

import hashlib

from packaging.version import Version

from patchtool.names import Distribution
from patchtool.urls import SourceUrl

IMPORTS = "refs/tags/"
GIT_SOURCES = "refs/patchtool/git/"
FETCHES = "refs/patchtool/fetch/"


def import_tag(distribution: Distribution, version: Version, sha256: str, mapping: str) -> str:
    """The tag of an artifact's import with the prefix mapping ``mapping`` (``ImportRecord.mapping``:
    one file imported with two prefixes is two imports). A ref name by construction: the
    canonical name is letters, digits and '-', a normalised version has no '-', no '..' and no git
    metacharacter, the sha256 is hex (both the pin's and an import record's are checked when
    read), and the mapping is named by 8 hex digits of its sha256."""
    return f"{distribution.canonical}-{version}-{sha256[:12]}-{mapping_digest(mapping)}"


def mapping_digest(mapping: str) -> str:
    return hashlib.sha256(mapping.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def import_ref(distribution: Distribution, version: Version, sha256: str, mapping: str) -> str:
    return IMPORTS + import_tag(distribution, version, sha256, mapping)


def import_version(ref: str, sha256: str, mapping: str) -> str | None:
    """The version in ``ref`` when it is named as ``import_ref`` names an import of ``sha256`` with
    ``mapping``; None for any other ref (an older patchtool's ``v<version>`` or
    ``<name>-<version>-<sha12>``, a tag moved onto another import)."""
    if not ref.startswith(IMPORTS):
        return None
    rest, dash0, digest = ref.removeprefix(IMPORTS).rpartition("-")
    stem, dash, short = rest.rpartition("-")
    name, dash2, version = stem.rpartition("-")
    ours = short == sha256[:12] and digest == mapping_digest(mapping)
    return version if dash0 and dash and dash2 and name and ours else None


def _source_digest(url: SourceUrl, tag: str) -> str:
    return hashlib.sha256(f"{url.text}\0{tag}".encode("utf-8", "surrogateescape")).hexdigest()[:24]


def git_ref(url: SourceUrl, tag: str) -> str:
    """Where the cache keeps the verified commit of ``tag`` at ``url``."""
    return GIT_SOURCES + _source_digest(url, tag)


def fetch_ref(url: SourceUrl, tag: str) -> str:
    """Where a fetch of ``tag`` from ``url`` lands before it is checked (removed under the lock)."""
    return FETCHES + _source_digest(url, tag)
