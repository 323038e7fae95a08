"""The package index client: project pages (PEP 691 JSON, or a PEP 503 HTML page read into the
same shape) and artifact downloads, over HTTP with resume and retries. The one place that talks
to a package index.

The index a pin names can be overridden (``PATCHTOOL_INDEX_URL``); the CLI reads that variable,
once, and hands its value to ``PackageIndex``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

from packaging.utils import canonicalize_name

from patchtool import progress
from patchtool.errors import UpstreamError, UsageError
from patchtool.inputs import loads_json, open_named
from patchtool.project.pins import MAX_ARTIFACT_BYTES
from patchtool.upstream.anchors import html_page
from patchtool.upstream.deadline import Deadline, deadline_from_environment
from patchtool.urls import LocalUrls, SourceUrl, allowed_by_environment, permit, redact

if TYPE_CHECKING:
    from patchtool.project.pins import Artifact

INDEX_URL_ENV = "PATCHTOOL_INDEX_URL"
_JSON_TYPES = ("application/vnd.pypi.simple.v1+json", "application/json")
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_RETRIED_4XX = (408, 429)  # request timeout, too many requests: worth another try
MAX_PAGE_BYTES = 16 << 20  # the most a project page may be: 16 MiB (PyPI's largest are a few)
# the most files a project page may list: PyPI's largest projects list tens of thousands, and a real
# entry (its name, url and hash) takes 150 bytes or more, so 16 MiB of real entries is about this many;
# only a page of made-up entries lists more, and each entry is a url to join and check
MAX_PAGE_FILES = 100_000
# the most JSON objects and arrays a PEP 691 page may hold, counted before it is parsed: a file's entry
# is an object holding a few more (its hashes, its metadata's hashes); 16 MiB of ``[]`` would be 5.6 million
MAX_PAGE_NESTS = 8 * MAX_PAGE_FILES
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IndexFile:
    """One file a project page lists (PEP 691, or a PEP 503 link): its ``filename``; its ``url``,
    read from the page (None, with ``url_problem`` saying why, where the link is no URL patchtool
    fetches from); its ``sha256`` and ``size`` as listed (checked where a file is taken: an
    index's word, not patchtool's)."""

    filename: str
    url: SourceUrl | None
    url_problem: str = ""
    sha256: object = None
    size: object = None

    @classmethod
    def from_dict(cls, listed: dict[str, Any], base: SourceUrl) -> IndexFile:
        hashes = listed.get("hashes")  # not a table: the file is listed with no hash, and so refused
        try:
            url, problem = base.join(str(listed.get("url", "")), file=f"the index page {base}"), ""
        except ValueError as exc:
            url, problem = None, str(exc)
        return cls(
            filename=str(listed.get("filename", "")),
            url=url,
            url_problem=problem,
            sha256=hashes.get("sha256") if isinstance(hashes, dict) else None,
            size=listed.get("size"),
        )


class TooLarge(UpstreamError):
    """A body longer than its cap: the pin's size, or the documented maximum."""


class TooManyFiles(UpstreamError):
    """A project page that lists more files than any real project has."""


def _final(exc: Exception) -> bool:
    """A failure another try cannot fix: the server answered that the request is wrong."""
    import urllib.error

    return isinstance(exc, urllib.error.HTTPError) and 400 <= exc.code < 500 and exc.code not in (*_RETRIED_4XX, 416)


def _watched(deadline: Deadline) -> tuple[Any, Any]:
    """urllib's http and https handlers, whose every connection ``deadline`` holds from the moment
    it connects (before TLS, which a server may trickle too) and which connect within the time left."""
    import http.client
    import urllib.request

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            given = self.timeout
            self.timeout = min(given, deadline.remaining()) if isinstance(given, (int, float)) else deadline.remaining()
            self._create_connection = deadline.connect  # its name lookup held to the deadline too
            super().connect()
            deadline.hold(self.sock)

    class TlsConnection(http.client.HTTPSConnection, Connection):
        pass  # HTTPSConnection.connect wraps the socket Connection.connect handed to the deadline

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(Connection, req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(TlsConnection, req)

    return Http(), Https()


def _opener(url: SourceUrl, allow_local: LocalUrls, deadline: Deadline) -> Any:
    """urllib for http and https alone, for one download of ``url``: no file:, ftp: or data:
    handler, every redirect checked (``Redirects``): urlopen's own opener reads local files
    and follows https to ftp; and every connection held to ``deadline``."""
    import urllib.request

    class Redirects(urllib.request.HTTPRedirectHandler):
        origin = url

        def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
            newurl = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
            origin = self.origin
            try:
                target = SourceUrl.parse(newurl, file=origin.file, key=origin.key, user=origin.user)
            except ValueError as exc:
                raise UpstreamError(f"{origin} redirects to {redact(newurl)!r}: {exc}; refusing it") from None
            if target.scheme == "file":
                raise UpstreamError(f"{origin} redirects to the local file {redact(newurl)!r}; refusing it")
            if origin.scheme == "https" and target.scheme == "http":
                permit(dataclasses.replace(target, user=False), allow_local=allow_local)
            self.origin = target
            return super().http_error_302(req, fp, code, msg, headers)

        http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

        def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
            """urllib's next request, with the url's credentials where it stays on the same scheme,
            host and port, as pip keeps them (an index that sends its downloads elsewhere on itself)."""
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            auth = req.unredirected_hdrs.get("Authorization")
            same = urllib.parse.urlsplit(req.full_url)[:2] == urllib.parse.urlsplit(newurl)[:2]
            if new is not None and auth is not None and same:
                new.add_unredirected_header("Authorization", auth)
            return new

    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        *_watched(deadline),
        urllib.request.HTTPDefaultErrorHandler(),
        Redirects(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _request(url: SourceUrl, headers: dict[str, str]) -> Any:
    """The request for ``url``. Its credentials (``https://user:token@host/``, as pip takes them)
    go in an ``Authorization`` header, sent to that host alone (never on a redirect), not in the
    url urllib and http.client read: they take a password for a port and print it in their errors."""
    import base64
    import urllib.request

    parts = urllib.parse.urlsplit(url.text)
    where, auth = url.text, None
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        where = urllib.parse.urlunsplit(parts._replace(netloc=host))
        token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
        auth = "Basic " + base64.b64encode(token).decode()
    try:
        request = urllib.request.Request(where, headers=headers)  # noqa: S310 -- a SourceUrl: https, http or file
    except ValueError as exc:
        raise UpstreamError(
            f"{url} is not a URL patchtool can download from: {redact(str(exc))}",
            hint="check the pin's 'index' and 'url', and PATCHTOOL_INDEX_URL",
        ) from None
    if auth is not None:
        request.add_unredirected_header("Authorization", auth)
    return request


class _LocalFile:
    """A ``file:`` URL's regular file, read like an HTTP answer (``inputs.open_named``)."""

    status = 200

    def __init__(self, url: SourceUrl, limit: int) -> None:
        import email.message
        import mimetypes
        import urllib.request

        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url.text).path))
        try:
            self._fh = open_named(path, what=url.text, limit=limit, error=UpstreamError)
        except FileNotFoundError:
            raise UpstreamError(f"{url.text}: no such file", hint="check the pin's 'url' and 'index'") from None
        self.headers = email.message.Message()
        self.headers["Content-Type"] = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self.headers["Content-Length"] = str(os.fstat(self._fh.fileno()).st_size)

    def read(self, n: int) -> bytes:
        return self._fh.read(n)

    read1 = read

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def _body(resp: Any, limit: int, url: SourceUrl, in_time: Callable[[], None]) -> Iterator[bytes]:
    """``resp``'s body in chunks, refused (``TooLarge``) as soon as it says or runs past ``limit``;
    ``in_time`` is asked after every read, each of which returns what one wait brought (``read1``:
    a trickle never fills a whole chunk)."""
    declared = resp.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(
            f"{url.text} is {declared} bytes, more than the {limit} patchtool takes from it; refusing it",
            hint="check the pin's 'size' and 'url'; nothing was imported",
        )
    got = 0
    while chunk := resp.read1(min(_CHUNK, limit - got + 1)):
        in_time()
        got += len(chunk)
        if got > limit:
            raise TooLarge(
                f"{url.text} sends more than the {limit} bytes patchtool takes from it; refusing it",
                hint="check the pin's 'size' and 'url'; nothing was imported",
            )
        yield chunk


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fetcher:
    """HTTP downloads with resume and retries; a 4xx answer (but 408 and 429) is final at once.
    Every body is capped; ``timeout`` bounds the connection and every wait for more bytes, and
    ``deadline`` (seconds on ``clock``) a whole download or page, all its tries together."""

    attempts: int = 4
    backoff: float = 0.5
    timeout: float = 60.0
    allow_local: LocalUrls = dataclasses.field(default_factory=allowed_by_environment)
    max_artifact: int = MAX_ARTIFACT_BYTES
    max_page: int = MAX_PAGE_BYTES
    deadline: float = dataclasses.field(default_factory=deadline_from_environment)
    clock: Callable[[], float] = time.monotonic

    def _watch(self, url: SourceUrl) -> Deadline:
        """The deadline of one download or page of ``url``, from now; ``with`` it, its watchdog runs."""
        return Deadline(str(url), self.deadline, self.clock)

    # urllib and http.client are imported where they are used: most commands never download
    # anything, and those imports cost more than the command's work

    def _open(self, url: SourceUrl, headers: dict[str, str], limit: int, deadline: Deadline) -> Any:
        """The answer for ``url`` over http(s), or its local file: by a protocol the user allows."""
        permit(url, allow_local=self.allow_local)
        if url.scheme == "file":
            return _LocalFile(url, limit)
        return _opener(url, self.allow_local, deadline).open(_request(url, headers), timeout=self.timeout)

    def json(self, url: SourceUrl) -> Any:
        """The project page at ``url`` as PEP 691 data. An index that serves only PEP 503 HTML gets
        its page read into the same shape (``files``: filename, url, hashes)."""
        import http.client
        import urllib.error

        last: Exception | None = None
        with self._watch(url) as deadline:
            for attempt in range(self.attempts):
                deadline.check()
                try:
                    try:
                        with self._open(url, {"Accept": _ACCEPT}, self.max_page, deadline) as resp:
                            kind = resp.headers.get_content_type()
                            body = b"".join(_body(resp, self.max_page, url, deadline.check))
                    finally:
                        deadline.release()
                    deadline.check()  # a body the watchdog cut short is no page
                    if kind in _HTML_TYPES:
                        return html_page(body.decode("utf-8", "replace"), most=MAX_PAGE_FILES)
                    if (nests := body.count(b"{") + body.count(b"[")) > MAX_PAGE_NESTS:
                        raise TooManyFiles(
                            f"the package index page {url} holds {nests} JSON objects and arrays, more than the "
                            f"{MAX_PAGE_NESTS} a page of {MAX_PAGE_FILES} files needs; refusing it",
                            hint="check the pin's 'index'",
                        )
                    try:
                        return loads_json(body)
                    except ValueError:
                        if kind in _JSON_TYPES:
                            raise  # a broken answer: worth another try
                        raise UpstreamError(
                            f"the package index at {url} answered {kind}, neither a PEP 691 JSON nor "
                            "a PEP 503 HTML project page",
                            hint="check the pin's 'index'",
                        ) from None
                except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
                    deadline.check()  # the watchdog's shutdown is what broke it
                    last = exc
                    if _final(exc):
                        raise UpstreamError(
                            f"the package index at {url} answered {exc}",
                            hint="check the pin's 'index' and 'distribution'",
                        ) from None
                    self._sleep(attempt, deadline)
        raise UpstreamError(
            f"could not read the package index at {url}: {last}", hint="check the network or the pin's 'index'"
        )

    def download(self, url: SourceUrl, dest: Path, *, size: int | None, resume: bool = True) -> bool:
        """Download to ``dest``, resuming a broken transfer (and, with ``resume``, a partial file an
        earlier command left); raises after ``attempts`` tries, and leaves no partial file when it
        does. At most ``size`` bytes (else ``max_artifact``) are taken: more is refused at once. True
        when ``dest`` was pieced together from more than one transfer: if its hash is wrong, a fresh
        download may not be."""
        part = dest.with_name(dest.name + ".part")
        if not resume:
            part.unlink(missing_ok=True)
        try:
            with self._watch(url) as deadline:
                return self._download(url, dest, part, size=size, deadline=deadline)
        except UpstreamError:  # too large, too slow, a redirect refused, the tries spent: nothing kept
            part.unlink(missing_ok=True)
            raise

    def _download(self, url: SourceUrl, dest: Path, part: Path, *, size: int | None, deadline: Deadline) -> bool:
        import http.client
        import urllib.error

        cap = min(size, self.max_artifact) if size is not None else self.max_artifact
        resumed = False
        last: Exception | None = None
        for attempt in range(self.attempts):
            deadline.check()
            have = part.stat().st_size if part.exists() else 0
            if have >= cap:
                part.unlink()
                have = 0
            try:
                try:
                    with self._open(url, {"Range": f"bytes={have}-"} if have else {}, cap, deadline) as resp:
                        resumed = appending = bool(have) and resp.status == 206
                        expected = resp.headers.get("Content-Length")
                        got = 0
                        already = have if appending else 0
                        with (
                            open(part, "ab" if appending else "wb") as out,
                            progress.task(f"download {dest.name}", total=size, unit="bytes", completed=already) as bar,
                        ):
                            for chunk in _body(resp, cap - already, url, deadline.check):
                                out.write(chunk)
                                got += len(chunk)
                                bar.advance(len(chunk))
                finally:
                    deadline.release()
                deadline.check()  # a body the watchdog cut short is no file
                if expected is not None and got < int(expected):
                    raise OSError(f"connection closed after {got} of {expected} bytes")
                total = part.stat().st_size
                if size is not None and total != size:
                    part.unlink()  # complete but short: resuming it cannot help
                    raise OSError(f"got {total} bytes, the pin says {size}")
                os.replace(part, dest)
                return resumed
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                deadline.check()  # the watchdog's shutdown is what broke it
                last = exc
                if _final(exc):
                    raise UpstreamError(
                        f"download of {url} failed: {exc}",
                        hint="check the pin's 'url', 'filename' and 'index'; nothing was imported",
                    ) from None
                if isinstance(exc, urllib.error.HTTPError) and exc.code == 416:
                    part.unlink(missing_ok=True)  # the partial file is bad; start again
                self._sleep(attempt, deadline)
        raise UpstreamError(
            f"download of {url} failed after {self.attempts} attempts: {last}",
            hint="check the network and run the command again; nothing was imported",
        )

    def _sleep(self, attempt: int, deadline: Deadline) -> None:
        if attempt + 1 < self.attempts:
            time.sleep(min(self.backoff * (2**attempt), deadline.remaining()))


class PageSource(Protocol):
    def json(self, url: SourceUrl) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class PackageIndex:
    """The index a pin names (or the override the user set), asked for a distribution's files."""

    fetcher: PageSource
    override: str | None = None  # PATCHTOOL_INDEX_URL, as the CLI read it

    def url(self, art: Artifact) -> SourceUrl:
        return self.index_url(art.index)

    def index_url(self, index: SourceUrl) -> SourceUrl:
        """``index`` (a pin's), or the override the user set."""
        if self.override:
            try:
                return SourceUrl.parse(self.override.rstrip("/"), user=True)
            except ValueError as exc:
                raise UsageError(
                    f"{INDEX_URL_ENV}={exc}",
                    hint="set it to a PEP 691 index such as https://pypi.org/simple, or unset it",
                ) from None
        return dataclasses.replace(index, text=index.text.rstrip("/"))

    def files(self, art: Artifact) -> list[IndexFile]:
        """The files of the artifact's distribution on its index (``files_of``)."""
        return self.files_of(art.index, art.distribution)

    def files_of(self, index: SourceUrl, distribution: str) -> list[IndexFile]:
        """The distribution's files on the index, as its project page lists them."""
        index = self.index_url(index)
        base = dataclasses.replace(index, text=f"{index.text}/{canonicalize_name(distribution)}/")
        page = self.fetcher.json(base)
        files = page.get("files") if isinstance(page, dict) else None
        if not isinstance(files, list):
            raise UpstreamError(
                f"the package index at {base} did not answer with a PEP 691 project page",
                hint="check the pin's 'index'",
            )
        if len(files) > MAX_PAGE_FILES:  # a PEP 503 page was read no further than one more
            raise TooManyFiles(
                f"the package index page {base} lists more than the {MAX_PAGE_FILES} files patchtool reads "
                "from one project page; refusing it",
                hint="check the pin's 'index'",
            )
        return [IndexFile.from_dict(listed, base) for listed in files if isinstance(listed, dict)]
