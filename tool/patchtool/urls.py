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

from patchtool.errors import Problem, UpstreamError

ALLOW_LOCAL_ENV = "PATCHTOOL_ALLOW_LOCAL_URLS"
ALLOW_LOCAL_FLAG = "--allow-local-urls"
ALLOW_LOCAL_HINT = (
    f"if you trust this repository's urls, allow local and plain-http ones: {ALLOW_LOCAL_ENV}=1 or "
    f"patchtool {ALLOW_LOCAL_FLAG} ..."
)
# the userinfo of any url in a text (``https://user:token@host``): credentials, never shown
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s'\"]+@")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # control characters and spaces: no URL patchtool fetches holds one


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

    @classmethod
    def parse(
        cls, text: str, *, git: bool = False, file: str | None = None, key: str | None = None, user: bool = False
    ) -> SourceUrl:
        """``text`` as a SourceUrl; ValueError naming why it is not one. ``git``: a git remote,
        which may also be an absolute local path (a repository on this machine)."""
        scheme = _scheme(text, git=git)
        return cls(text=text, scheme=scheme, file=file, key=key, user=user)

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
    return _USERINFO.sub(r"\1***@", text) if "@" in text else text


def _scheme(text: str, *, git: bool) -> str:
    kind = "git remote" if git else "URL"
    if _UNSAFE.search(text):
        raise ValueError(f"{text!r} is not a {kind}: it contains a space or a control character")
    if text.startswith("-"):
        raise ValueError(f"{text!r} is not a {kind}: it starts with '-' (git would read it as an option)")
    if git and text.startswith("/"):
        return "file"
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a {kind} ({exc})") from None
    if parts.scheme in ("https", "http") and parts.hostname:
        return parts.scheme
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return "file"
    also = ", an absolute path" if git else ""
    raise ValueError(f"{text!r} is not an https {kind} (nor http, file:{also})")


def allowed_by_environment() -> bool:
    """Whether the user set ``PATCHTOOL_ALLOW_LOCAL_URLS=1``."""
    return os.environ.get(ALLOW_LOCAL_ENV) == "1"


def permit(url: SourceUrl, *, allow_local: bool) -> None:
    """Refuse ``url`` unless it is https, the user gave it, or the user allows local urls."""
    if not url.needs_permission or allow_local:
        return
    what = "a local file" if url.scheme == "file" else "plain http"
    message = f"{str(url)!r} is {what}; a repository may name only https urls, unless you allow local ones"
    where = f"{url.file}: {url.key}: " if url.file and url.key else ""
    raise UpstreamError(
        f"{where}{message}",
        file=url.file,
        hint=ALLOW_LOCAL_HINT,
        problems=[Problem(message=message, file=url.file, key=url.key, hint=ALLOW_LOCAL_HINT, code="url-not-allowed")],
    )
