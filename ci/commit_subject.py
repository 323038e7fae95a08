"""Hold a commit message's subject to at most 72 characters, as CONTRIBUTING.md asks.

A ``commit-msg`` hook of ``.pre-commit-config.yaml`` runs it on the message file git wrote:
``python3 ci/commit_subject.py .git/COMMIT_EDITMSG``. Git's own ``#`` comment lines are not
the message; the subject is its first other non-blank line. Exit 1 names the subject and its
length; nothing is changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 72


def subject_of(message: str) -> str:
    """The first line of ``message`` that is neither blank nor one of git's ``#`` comments."""
    for line in message.splitlines():
        if line.strip() and not line.startswith("#"):
            return line.rstrip()
    return ""


def problem(message: str) -> str | None:
    """Why ``message``'s subject is refused, or None when it is fine."""
    subject = subject_of(message)
    if not subject:
        return "the commit message has no subject line"
    if len(subject) > LIMIT:
        return (
            f"the subject is {len(subject)} characters, over {LIMIT}: {subject!r}\n"
            "say what in the subject and why in the body, after a blank line"
        )
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_subject.py MESSAGE-FILE", file=sys.stderr)
        return 2
    why = problem(Path(argv[1]).read_text(encoding="utf-8", errors="replace"))
    if why is None:
        return 0
    print(f"{argv[1]}: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
