"""The package index client: project pages (PEP 691 JSON, or a PEP 503 HTML page read into the
same shape) and artifact downloads, over HTTP with resume and retries. The one place that talks
to a package index.

The index a pin names can be overridden (``PATCHTOOL_INDEX_URL``); the CLI reads that variable,
once, and hands its value to ``PackageIndex``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from packaging.utils import canonicalize_name

from patchtool import progress
from patchtool.errors import UpstreamError, UsageError

if TYPE_CHECKING:
    from patchtool.upstream.pins import Artifact

DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_URL_ENV = "PATCHTOOL_INDEX_URL"
_JSON_TYPES = ("application/vnd.pypi.simple.v1+json", "application/json")
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_SCHEMES = ("http", "https", "file")
_RETRIED_4XX = (408, 429)  # request timeout, too many requests: worth another try


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be downloaded from, or None when it can."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in _SCHEMES or (parts.scheme != "file" and not parts.netloc):
        return "is not an http(s) URL"
    return None


def _final(exc: Exception) -> bool:
    """A failure another try cannot fix: the server answered that the request is wrong."""
    import urllib.error

    return (isinstance(exc, urllib.error.HTTPError) and 400 <= exc.code < 500
            and exc.code not in _RETRIED_4XX and exc.code != 416)


def _request(url: str, headers: dict[str, str]) -> Any:
    import urllib.request

    try:
        return urllib.request.Request(url, headers=headers)
    except ValueError as exc:
        raise UpstreamError(f"{url!r} is not a URL patchtool can download from: {exc}",
                            hint="check the pin's 'index' and 'url', and PATCHTOOL_INDEX_URL") from None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fetcher:
    """HTTP downloads with resume and retries; a 4xx answer (but 408 and 429) is final at once."""

    attempts: int = 4
    backoff: float = 0.5
    timeout: float = 60.0

    # urllib and http.client are imported where they are used: most commands never download
    # anything, and those imports cost more than the command's work

    def json(self, url: str) -> Any:
        """The project page at ``url`` as PEP 691 data. An index that serves only PEP 503 HTML gets
        its page read into the same shape (``files``: filename, url, hashes)."""
        import urllib.error
        import urllib.request

        req = _request(url, {"Accept": _ACCEPT})
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    kind, body = resp.headers.get_content_type(), resp.read()
                if kind in _HTML_TYPES:
                    return _html_page(body.decode("utf-8", "replace"))
                try:
                    return json.loads(body)
                except ValueError:
                    if kind in _JSON_TYPES:
                        raise  # a broken answer: worth another try
                    raise UpstreamError(f"the package index at {url} answered {kind}, neither a PEP 691 JSON nor "
                                        "a PEP 503 HTML project page", hint="check the pin's 'index'") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
                if _final(exc):
                    raise UpstreamError(f"the package index at {url} answered {exc}",
                                        hint="check the pin's 'index' and 'distribution'") from None
                self._sleep(attempt)
        raise UpstreamError(f"could not read the package index at {url}: {last}",
                            hint="check the network or the pin's 'index'")

    def download(self, url: str, dest: Path, *, size: int | None, resume: bool = True) -> bool:
        """Download to ``dest``, resuming a broken transfer (and, with ``resume``, a partial file an
        earlier command left); raises after ``attempts`` tries. True when ``dest`` was pieced
        together from more than one transfer: if its hash is wrong, a fresh download may not be."""
        import http.client
        import urllib.error
        import urllib.request

        part = dest.with_name(dest.name + ".part")
        if not resume:
            part.unlink(missing_ok=True)
        resumed = False
        last: Exception | None = None
        for attempt in range(self.attempts):
            have = part.stat().st_size if part.exists() else 0
            req = _request(url, {"Range": f"bytes={have}-"} if have else {})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    appending = bool(have) and resp.status == 206
                    resumed = appending
                    expected = resp.headers.get("Content-Length")
                    got = 0
                    already = have if appending else 0
                    with open(part, "ab" if appending else "wb") as out, progress.task(
                            f"download {dest.name}", total=size, unit="bytes", completed=already) as bar:
                        while chunk := resp.read(1 << 20):
                            out.write(chunk)
                            got += len(chunk)
                            bar.advance(len(chunk))
                    if expected is not None and got < int(expected):
                        raise OSError(f"connection closed after {got} of {expected} bytes")
                total = part.stat().st_size
                if size is not None and total != size:
                    part.unlink()  # too long, or complete but short: resuming it cannot help
                    raise OSError(f"got {total} bytes, the pin says {size}")
                os.replace(part, dest)
                return resumed
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last = exc
                if _final(exc):
                    part.unlink(missing_ok=True)
                    raise UpstreamError(f"download of {url} failed: {exc}",
                                        hint="check the pin's 'url', 'filename' and 'index'; "
                                             "nothing was imported") from None
                if isinstance(exc, urllib.error.HTTPError) and exc.code == 416:
                    part.unlink(missing_ok=True)  # the partial file is bad; start again
                self._sleep(attempt)
        part.unlink(missing_ok=True)
        raise UpstreamError(f"download of {url} failed after {self.attempts} attempts: {last}",
                            hint="check the network and run the command again; nothing was imported")

    def _sleep(self, attempt: int) -> None:
        if attempt + 1 < self.attempts:
            time.sleep(self.backoff * (2 ** attempt))


@functools.cache
def _anchors() -> type[Any]:
    """The PEP 503 page parser (``html.parser`` is imported only when a page is HTML)."""
    import html.parser

    class _Anchors(html.parser.HTMLParser):
        """The files of a PEP 503 project page: each anchor's text, link and fragment hash."""

        def __init__(self) -> None:
            super().__init__()
            self.files: list[dict[str, Any]] = []
            self._open: dict[str, Any] | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag != "a":
                return
            found = dict(attrs)
            url, _, fragment = (found.get("href") or "").partition("#")
            name, _, value = fragment.partition("=")
            self._open = {"filename": "", "url": url, "hashes": {name: value} if name and value else {}}
            if "data-yanked" in found:
                self._open["yanked"] = found["data-yanked"] or True

        def handle_data(self, data: str) -> None:
            if self._open is not None:
                self._open["filename"] += data

        def handle_endtag(self, tag: str) -> None:
            if tag == "a" and self._open is not None:
                self._open["filename"] = self._open["filename"].strip()
                self.files.append(self._open)
                self._open = None

    return _Anchors


def _html_page(text: str) -> dict[str, Any]:
    parser = _anchors()()
    parser.feed(text)
    parser.close()
    return {"meta": {"api-version": "1.0"}, "files": parser.files}


class PageSource(Protocol):
    def json(self, url: str) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class PackageIndex:
    """The index a pin names (or the override the user set), asked for a distribution's files."""

    fetcher: PageSource
    override: str | None = None  # PATCHTOOL_INDEX_URL, as the CLI read it

    def url(self, art: Artifact) -> str:
        if self.override:
            why = url_problem(self.override)
            if why is not None:
                raise UsageError(f"{INDEX_URL_ENV}={self.override!r} {why}",
                                 hint="set it to a PEP 691 index such as https://pypi.org/simple, or unset it")
            return self.override.rstrip("/")
        return art.index.rstrip("/")

    def files(self, art: Artifact) -> list[dict[str, Any]]:
        """The distribution's files on the index, each ``url`` made absolute."""
        base = f"{self.url(art)}/{canonicalize_name(art.distribution)}/"
        page = self.fetcher.json(base)
        files = page.get("files") if isinstance(page, dict) else None
        if not isinstance(files, list):
            raise UpstreamError(f"the package index at {base} did not answer with a PEP 691 project page",
                                hint="check the pin's 'index'")
        out = []
        for entry in files:
            if not isinstance(entry, dict):
                continue
            hashes = entry.get("hashes")  # not a table: the file is listed with no hash, and so refused
            entry = {**entry, "hashes": hashes if isinstance(hashes, dict) else {}}
            entry["url"] = urllib.parse.urljoin(base, str(entry.get("url", "")))
            out.append(entry)
        return out
