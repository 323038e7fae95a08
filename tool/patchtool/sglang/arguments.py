"""The value a launch gives one of sglang's arguments, read as its shell and argparse read it.

A flag may be written ``--flag value``, ``--flag=value``, quoted (``--flag="value"``), as an
argument list's items (``"--flag", "value"``, a YAML list's ``- --flag`` then ``- value``) or as
a config key (``flag_name: value``). Its words are split as a POSIX shell splits them (shlex),
and, as argparse does, the last use wins. A value the shell would expand (``$VAR``, ``${VAR}``,
``$(cmd)``, backticks) is not stated by the file: it is read as unstated, never as its text.
Pure functions over text.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

# where a word ends in an argument list as well as in a shell line: "a", "b" and ["a"]
_LIST_ENDS = ",]"
_OPERATORS = frozenset("();<>|&")
# what the shell expands: $VAR, ${VAR}, $(cmd), `cmd`
_EXPANSION = re.compile(r"[$`]")
# a word as written, for showing an unstated value: $(cmd), ${VAR}, `cmd` and quotes held whole
_RAW_WORD = re.compile(r"""(?:\$\([^)]*\)|\$\{[^}]*\}|`[^`]*`|"[^"]*"|'[^']*'|[^\s,\]"'`])+""")
# a comment: '#' at the start of a word, outside quotes (shell, YAML, env files)
_COMMENT = re.compile(r"""(?:"[^"]*"|'[^']*'|[^\s"'#]|(?<=\S)#)*""")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Value:
    """What a launch sets a flag to: its text as the shell reads it, and whether the file states
    it (False: it depends on the environment the launch runs in)."""

    flag: str
    text: str
    literal: bool

    def __str__(self) -> str:
        return f"{self.flag} {self.text}"


def last_value(text: str, flag: str, *aliases: str) -> Value | None:
    """The value the last use of ``flag`` (or an alias) in ``text`` gives it; None when no use
    gives one."""
    # comments go first, then backslash-newline, as the shell reads a continued line
    text = "\n".join(_uncommented(line) for line in text.split("\n")).replace("\\\n", "")
    found: tuple[int, Value] | None = None
    spelled, key, shortened = _patterns(flag, *aliases)
    for pattern in (spelled, key, shortened):
        for m in pattern.finditer(text):
            value = _word(flag, text[m.end() :])
            if value is not None and pattern is shortened:
                # argparse takes a unique prefix of a long option: whether this one is unique, or
                # another option's own name, depends on every option sglang has, so it is unstated
                value = dataclasses.replace(value, text=f"{value.text} (as {m.group(1)})", literal=False)
            if value is not None and (found is None or m.start() > found[0]):
                found = (m.start(), value)
    return found[1] if found else None


def _uncommented(line: str) -> str:
    """``line`` without a trailing comment."""
    words = 0
    while True:
        m = _COMMENT.match(line, words)
        assert m is not None  # the pattern matches the empty string
        if (end := m.end()) >= len(line) or line[end] == "#":
            return line[:end]
        if line[end] in "\"'":  # an unclosed quote: keep the rest as it is
            return line
        words = end + 1  # whitespace


_SEPARATOR = r"""(?![\w-])["']?(?:\s*[,=:]\s*|[ \t]+|[ \t]*\n[ \t]*(?:-[ \t]+)?)"""


def _patterns(flag: str, *aliases: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """A flag's uses: ``--flag`` followed by its value's separator; the config key ``flag_name``
    (or ``flag-name``) followed by ``:`` or ``=``; and ``--fla``, a shorter prefix of a long flag
    (at least three letters), which argparse may read as it."""
    names = (flag, *aliases)
    flags = "|".join(re.escape(n) for n in names)
    keys = "|".join("[-_]".join(re.escape(p) for p in n.lstrip("-").split("-")) for n in names)
    shorter = {n[:i] for n in names if n.startswith("--") for i in range(5, len(n))} - set(names)
    prefixes = sorted(shorter, key=len, reverse=True)  # an alias (--model of --model-path) is spelled out
    shortened = "|".join(re.escape(p) for p in prefixes) or r"(?!)"
    return (
        # --flag value, --flag=value, "--flag", "value", the value on the next line (a YAML list's
        # next item, a folded YAML string)
        re.compile(rf"(?<![\w-])(?:{flags}){_SEPARATOR}"),
        # flag_name: value (YAML, JSON), flag_name = value (TOML)
        re.compile(rf"(?<![\w-])[\"']?(?:{keys})[\"']?[ \t]*[:=](?!=)[ \t]*"),
        re.compile(rf"(?<![\w-])({shortened}){_SEPARATOR}"),
    )


def _word(flag: str, rest: str) -> Value | None:
    """The first shell word of ``rest`` as ``flag``'s value; None when there is none (the text
    ends, or another option or a shell operator follows, which argparse would not take)."""
    lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.whitespace += _LIST_ENDS
    lexer.commenters = ""
    try:
        word = lexer.get_token()
    except ValueError:  # an unclosed quote: what the shell makes of it is not in this text
        return Value(flag=flag, text=rest.split("\n", 1)[0].strip(), literal=False)
    while word and word.endswith("}") and word.count("}") > word.count("{"):  # {"key": "a"}, not ${VAR}
        word = word[:-1]
    if not word or word.startswith("-") or set(word) <= _OPERATORS:
        return None
    if not _EXPANSION.search(word):
        return Value(flag=flag, text=word, literal=True)
    raw = _RAW_WORD.match(rest)
    return Value(flag=flag, text=raw.group(0) if raw else word, literal=False)
