"""The anchors of a PEP 503 project page, read in one pass in time linear in the page's size.

``html.parser`` rescans an unclosed tag each time more text arrives: a 90 KB page of ``<a `` was
still parsing after two minutes. This scanner follows the HTML tokenizer's rules for what it needs
(tags, quoted attributes, comments, raw text) and never looks back: every step starts where the
last one ended, a tag or comment that runs to the end of the page ends the scan (as a browser
drops it), and its patterns are single runs of one character class, which cannot backtrack.
"""

from __future__ import annotations

import html
import re
from typing import Any

_MARKUP = re.compile(r"<[a-zA-Z!?/]")  # where a tag, end tag or comment may begin: any other '<' is text
_NAME = re.compile(r"[a-zA-Z][^\t\n\f\r />]*")  # a tag's name, after < or </
_SPACE = re.compile(r"[\t\n\f\r /]*")  # between attributes ('/' too: <a/b> is as <a b>)
_ATTR = re.compile(r"[^\t\n\f\r />][^\t\n\f\r /=>]*")  # an attribute's name
_BLANK = re.compile(r"[\t\n\f\r ]*")
_UNQUOTED = re.compile(r"[^\t\n\f\r >]*")
_RAW_TEXT = frozenset({"script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes"})


class AnchorScan:
    """One page's anchors: each ``<a>``'s text, link and fragment hash; the scan stops once it has
    found more than ``most``. ``steps`` counts the pattern matches and searches the scan made; each
    consumes the page from where the last ended."""

    def __init__(self, text: str, *, most: int | None = None) -> None:
        self.text = text
        self.most = most
        self.lower = text.lower()
        self.steps = 0
        self.files: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._text: list[str] = []  # the open anchor's text, joined at its end tag (no quadratic +=)
        self._scan()

    def _search(self, pattern: re.Pattern[str], pos: int) -> int:
        self.steps += 1
        found = pattern.search(self.text, pos)
        return -1 if found is None else found.start()

    def _find(self, needle: str, pos: int, *, lower: bool = False) -> int:
        self.steps += 1
        return (self.lower if lower else self.text).find(needle, pos)

    def _match(self, pattern: re.Pattern[str], pos: int) -> re.Match[str] | None:
        self.steps += 1
        return pattern.match(self.text, pos)

    def _scan(self) -> None:
        text, pos, end = self.text, 0, len(self.text)
        while pos < end:
            if (lt := self._search(_MARKUP, pos)) < 0:
                self._data(text[pos:])
                return
            self._data(text[pos:lt])
            pos = self._markup(lt)
            if pos < 0:  # a tag or comment that runs to the end of the page: dropped
                return
            if self.most is not None and len(self.files) > self.most:  # too many: the caller refuses the page
                return

    def _markup(self, lt: int) -> int:
        """Read the markup at ``lt`` (a ``<``); where the scan goes on, or -1 at the page's end."""
        text = self.text
        if text.startswith("<!--", lt):
            close = self._find("-->", lt + 4)
            return -1 if close < 0 else close + 3
        if text.startswith(("<!", "<?"), lt) or (text.startswith("</", lt) and not self._match(_NAME, lt + 2)):
            close = self._find(">", lt + 2)  # a declaration, processing instruction or bogus comment
            return -1 if close < 0 else close + 1
        closing = text.startswith("</", lt)
        name = self._match(_NAME, lt + 2 if closing else lt + 1)
        if name is None:  # a '<' that opens nothing is text
            self._data("<")
            return lt + 1
        attrs, pos = self._attributes(name.end())
        if pos < 0:
            return -1
        tag = name.group().lower()
        if closing:
            self._end(tag)
            return pos
        self._start(tag, attrs)
        if tag in _RAW_TEXT:  # its content is text up to its end tag, whatever it holds
            close = self._find(f"</{tag}", pos, lower=True)
            return -1 if close < 0 else self._markup(close)
        return pos

    def _attributes(self, pos: int) -> tuple[dict[str, str | None], int]:
        """The attributes from ``pos`` to the tag's ``>`` (the first of a name wins, as in a
        browser), and where the scan goes on after it; -1 when the page ends first."""
        text, end = self.text, len(self.text)
        attrs: dict[str, str | None] = {}
        while True:
            pos = self._match(_SPACE, pos).end()  # type: ignore[union-attr]  # matches the empty string
            if pos >= end:
                return attrs, -1
            if text[pos] == ">":
                return attrs, pos + 1
            name = self._match(_ATTR, pos)
            assert name is not None  # not a space, '/', '>' or the end: a name's first character
            pos = self._match(_BLANK, name.end()).end()  # type: ignore[union-attr]
            value: str | None = None
            if text.startswith("=", pos):
                pos = self._match(_BLANK, pos + 1).end()  # type: ignore[union-attr]
                if pos < end and text[pos] in "\"'":
                    if (close := self._find(text[pos], pos + 1)) < 0:
                        return attrs, -1
                    value, pos = text[pos + 1 : close], close + 1
                else:
                    raw = self._match(_UNQUOTED, pos)
                    assert raw is not None  # matches the empty string
                    value, pos = raw.group(), raw.end()
                value = html.unescape(value)
            attrs.setdefault(name.group().lower(), value)

    def _start(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag != "a":
            return
        url, _, fragment = (attrs.get("href") or "").partition("#")
        name, _, value = fragment.partition("=")
        self._text = []
        self._open = {"filename": "", "url": url, "hashes": {name: value} if name and value else {}}
        if "data-yanked" in attrs:
            self._open["yanked"] = attrs["data-yanked"] or True

    def _data(self, data: str) -> None:
        if self._open is not None and data:
            self._text.append(data)

    def _end(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self._open["filename"] = html.unescape("".join(self._text)).strip()
            self.files.append(self._open)
            self._open = None


def html_page(text: str, *, most: int | None = None) -> dict[str, Any]:
    """A PEP 503 page as the PEP 691 data it stands for (``files``: filename, url, hashes), read
    no further than its anchor after the first ``most``."""
    return {"meta": {"api-version": "1.0"}, "files": AnchorScan(text, most=most).files}
