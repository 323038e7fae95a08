"""HTTP downloads with resume and retries: the one place that talks to a package index."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import urllib.parse
from pathlib import Path
from typing import Any

from patchtool import progress
from patchtool.errors import UpstreamError

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
        import urllib.error
        import urllib.request

        req = _request(url, {"Accept": "application/vnd.pypi.simple.v1+json"})
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
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
