"""Files compared up to formatting: Python by its tokens, anything else without its whitespace.

``normal_lines`` keeps one line per physical line, so a 3-way merge of normal forms lines up
with the merge of the files themselves: ``if(x):`` and ``if (x):`` are the same line; a string's
contents, a comment's words and an indentation level are not formatting.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize

_LAYOUT = frozenset(
    {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}
)


def normal_lines(path: str, *data: bytes) -> list[list[str]]:
    """Each of ``data``'s lines in normal form: a ``.py`` file's tokens (each at the line it starts
    on, after its indentation depth), another file's lines without whitespace. Versions of one
    file are compared in one form: as text, where any of them is not Python the tokenizer reads."""
    texts = [d.decode("utf-8", "surrogateescape") for d in data]
    if path.endswith(".py"):
        try:
            return [list(_python_lines(text)) for text in texts]
        except (tokenize.TokenError, SyntaxError):
            pass
    return [["".join(line.split()) for line in text.split("\n")] for text in texts]


@functools.lru_cache(maxsize=16)  # a scan asks again for the base and patch sides at every version
def _python_lines(text: str) -> tuple[str, ...]:
    count = text.count("\n") + 1
    out: list[list[str]] = [[] for _ in range(count)]
    depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type not in _LAYOUT and tok.start[0] <= count:
            if not (row := out[tok.start[0] - 1]):
                row.append(f"{depth}:")
            row.append(tok.string.replace("\n", "\\n"))
    return tuple(" ".join(row) for row in out)


_WORD = re.compile(r"\w+")


def may_merge_to(base: bytes, theirs: bytes, ours: bytes) -> bool:
    """False only where a clean merge of the normal forms of ``ours``, ``base`` and ``theirs`` cannot
    give ``ours``'s normal form; True says nothing (tokenize and merge to know). A word of
    ``theirs`` that ``base`` lacks, even with its whitespace removed, stands on a line the patch
    changed in normal form, and every such line is in a merge that leaves ``ours`` as it is: so
    ``ours``, whitespace removed, holds the word. Cheap: no tokenizer, one pass per side."""
    texts = [d.decode("utf-8", "surrogateescape") for d in (base, theirs, ours)]
    if not (new := set(_WORD.findall(texts[1])) - set(_WORD.findall(texts[0]))):
        return True
    flat_base, flat_ours = ("".join(t.split()) for t in (texts[0], texts[2]))
    return all(w in flat_ours for w in new if w not in flat_base)


def normal_forms(path: str, *data: bytes) -> list[bytes]:
    """``normal_lines`` as files."""
    return ["\n".join(lines).encode("utf-8", "surrogateescape") for lines in normal_lines(path, *data)]
