"""The one URL validator, and who may choose a URL's protocol.

A URL read from a repository file (a pin's ``git.url``, ``artifact.url`` and ``artifact.index``,
a link on an index page) is a ``SourceUrl`` from the moment it is read, so no later code holds a
raw url string from a stranger. It is ``https``; ``http``, ``file:`` and local paths are
well-formed too, but only the user may let patchtool use them (``PATCHTOOL_ALLOW_LOCAL_URLS=1``
or ``--allow-local-urls``, as git's ``protocol.file.allow=user``): a repository must not make
patchtool read the machine's own files or talk in clear text. ``permit`` is the check, made by
the two transports (the HTTP fetcher and ``git fetch``) before they touch anything.
"""

from __future__ import annotations

import dataclasses
import os
import re
import urllib.parse
from pathlib import Path
from typing import NoReturn

from patchtool.errors import Problem, UpstreamError, UsageError

ALLOW_LOCAL_ENV = "PATCHTOOL_ALLOW_LOCAL_URLS"
ALLOW_LOCAL_FLAG = "--allow-local-urls"
ALLOW_LOCAL_IN_FLAG = "--allow-local-urls-in"
ALLOW_LOCAL_HINT = (
    f"if you trust this repository's urls, allow local and plain-http ones: {ALLOW_LOCAL_ENV}=1 or "
    f"patchtool {ALLOW_LOCAL_FLAG} ..."
)
ALLOW_FILES_HINT = (
    f"a local file is read only beneath a directory you name: {ALLOW_LOCAL_ENV}=DIR or patchtool "
    f"{ALLOW_LOCAL_IN_FLAG} DIR ..."
)
# the userinfo of any url in a text (``https://user:token@host``): credentials, never shown. Only
# the character before ``://`` is looked at, not the scheme from its start: a scheme matched from
# every word boundary of a long ``a.a.a...`` run took time quadratic in the text
# the userinfo runs to the last '@' before the first '/', as git and curl read it (a password may
# hold '@', '?', '#' and quotes); each possessive step ends at an '@', so the match stays linear
_USERINFO = re.compile(r"(?i)(?<=[a-z0-9+.-]://)(?:[^/@\s]*+@)++")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # control characters and spaces: no URL patchtool fetches holds one
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True, slots=True)
class SourceUrl:
    """A URL patchtool may fetch from: ``scheme`` is https, http or file (a local path is file),
    and ``user`` says the user gave it (command line, environment) rather than a file."""

    text: str
    scheme: str
    # where it was read and under which key, for messages ("upstream-pins/x.toml", "git.url"): not
    # part of the value, so the same url read from two files is the same url
    file: str | None = dataclasses.field(default=None, compare=False)
    key: str | None = dataclasses.field(default=None, compare=False)
    user: bool = False
    git: bool = dataclasses.field(default=False, compare=False)  # a git remote, not a file to download

    @classmethod
    def parse(
        cls, text: str, *, git: bool = False, file: str | None = None, key: str | None = None, user: bool = False
    ) -> SourceUrl:
        """``text`` as a SourceUrl; ValueError naming why it is not one. ``git``: a git remote,
        which may also be an absolute local path (a repository on this machine)."""
        return cls(text=text, scheme=_scheme(text, git=git), file=file, key=key, user=user, git=git)

    @property
    def local_path(self) -> Path | None:
        """The local file or directory a ``file:`` url or a local git path names, else None."""
        if self.scheme != "file":
            return None
        if self.text.startswith("/"):
            return Path(self.text)
        import urllib.request  # it loads http.client and email: 25 ms at every start, for a file: url alone

        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(self.text).path))

    @property
    def needs_permission(self) -> bool:
        """Whether only the user may let it be used: anything but https from a file."""
        return self.scheme != "https" and not self.user

    def join(self, href: str, *, file: str) -> SourceUrl:
        """A link ``href`` on the page at this URL, made absolute: a URL read from that page."""
        return SourceUrl.parse(urllib.parse.urljoin(self.text, href), file=file, key="href")

    def __str__(self) -> str:
        """The url as every message shows it: its credentials, if any, as ``***``."""
        return redact(self.text)


def redact(text: str) -> str:
    """``text`` with the userinfo of every url in it (``https://user:secret@host``) written as
    ``***``: what patchtool prints, in messages and in ``--json``, passes through here, so a
    credential in a pin's url or a remote git names never reaches a terminal or a CI log."""
    return _USERINFO.sub("***@", text) if "@" in text else text


def _refused(text: str) -> str:
    """A url being refused, as its message shows it: whatever it holds before its last '@' (a
    credential, in whatever shape the url has) as ``***``."""
    return repr(f"***@{text.rpartition('@')[2]}" if "@" in text else text)


def _scheme(text: str, *, git: bool) -> str:
    kind = "git remote" if git else "URL"
    shown = _refused(text)
    if _UNSAFE.search(text) or not text.isprintable():  # U+2003, U+0085, U+2028 too
        raise ValueError(f"{shown} is not a {kind}: it contains a space or a control character")
    if text.startswith("-"):
        raise ValueError(f"{shown} is not a {kind}: it starts with '-' (git would read it as an option)")
    if git and text.startswith("/"):
        return "file"
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"{shown} is not a {kind} ({redact(str(exc))})") from None
    if parts.scheme in ("https", "http") and parts.hostname:
        authority = text.partition("://")[2].partition("/")[0]  # as git and curl read it
        if "@" in authority and parts.netloc != authority:
            raise ValueError(
                f"{shown} is not a {kind}: its credentials hold '?' or '#', where Python's url reader ends "
                "the host and git's does not; write them percent-encoded (%3F, %23)"
            )
        return parts.scheme
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        if _CONTROL.search(path := urllib.parse.unquote(parts.path)):  # %00 names no file; %0a none we read
            raise ValueError(f"{shown} is not a {kind}: its path {path!r} contains a control character")
        return "file"
    also = ", an absolute path" if git else ""
    raise ValueError(f"{shown} is not an https {kind} (nor http, file:{also})")


@dataclasses.dataclass(frozen=True, slots=True)
class LocalUrls:
    """What the user lets a repository's urls be besides https. ``allowed`` (``=1``,
    ``--allow-local-urls``): plain http and local git repositories, but no ``file:`` artifact or
    index, which would make any readable file's size and sha256 an oracle. ``beneath``
    (``=DIR``, ``--allow-local-urls-in DIR``): that, and every local url (``file:``, a git path)
    only beneath ``DIR``."""

    allowed: bool = False
    beneath: Path | None = None

    def __bool__(self) -> bool:
        return self.allowed

    @classmethod
    def of(cls, value: LocalUrls | bool) -> LocalUrls:
        return value if isinstance(value, LocalUrls) else cls(allowed=value)

    @classmethod
    def parse(cls, text: str, *, source: str) -> LocalUrls:
        """``PATCHTOOL_ALLOW_LOCAL_URLS``'s value (or the flag's, named ``source``): empty or 0
        allows nothing, 1 plain http and local repositories, an absolute directory local files too."""
        if text in ("", "0"):
            return cls()
        if text == "1":
            return cls(allowed=True)
        if not text.startswith("/"):
            raise UsageError(
                f"{source}={text!r} is neither 1 nor an absolute directory",
                hint=f"{ALLOW_LOCAL_ENV}=1 allows plain http and local repositories, "
                f"{ALLOW_LOCAL_ENV}=/srv/mirror local files beneath /srv/mirror too",
            )
        return cls(allowed=True, beneath=Path(os.path.abspath(text)))


def allowed_by_environment() -> LocalUrls:
    """What the user allows by ``PATCHTOOL_ALLOW_LOCAL_URLS`` (``LocalUrls.parse``)."""
    return LocalUrls.parse(os.environ.get(ALLOW_LOCAL_ENV, ""), source=ALLOW_LOCAL_ENV)


def permit(url: SourceUrl, *, allow_local: LocalUrls | bool) -> None:
    """Refuse ``url`` unless it is https, the user gave it, or the user allows it: plain http and
    local git repositories with ``allowed``, a local file only beneath ``beneath``, before anything
    is read."""
    local = LocalUrls.of(allow_local)
    if not url.needs_permission:
        return
    if (path := url.local_path) is None:
        if local.allowed:
            return
        _refuse(url, "plain http", ALLOW_LOCAL_HINT)
    elif local.beneath is not None:
        real, inside = Path(os.path.realpath(path)), Path(os.path.realpath(local.beneath))
        if real.is_relative_to(inside):
            return
        _refuse(url, f"a local file outside {local.beneath}, the directory you allow", ALLOW_FILES_HINT)
    elif local.allowed and url.git:
        return  # a local git repository, as git's protocol.file.allow=user
    elif local.allowed:
        _refuse(url, "a local file, and you name no directory local files may come from", ALLOW_FILES_HINT)
    _refuse(url, "a local file", ALLOW_LOCAL_HINT)


def _refuse(url: SourceUrl, what: str, hint: str) -> NoReturn:
    message = f"{str(url)!r} is {what}; a repository may name only https urls, unless you allow local ones"
    where = f"{url.file}: {url.key}: " if url.file and url.key else ""
    raise UpstreamError(
        f"{where}{message}",
        file=url.file,
        hint=hint,
        problems=[Problem(message=message, file=url.file, key=url.key, hint=hint, code="url-not-allowed")],
    )
